//! Posted operations and their completion.
//!
//! Every posted operation has an [`OpState`] whose first field is the `fi_context2` handed to
//! libfabric as the operation context. The endpoint keeps it in a registry (keyed by that
//! address) until the provider reports the completion; the progress thread then stores the
//! result and wakes the waiter. The buffers an operation uses are kept inside the state, so
//! they outlive the operation even if the caller stops waiting. [`Op`] is the caller's
//! handle: [`Op::wait`] blocks with a deadline, `Op` is also a `Future`, and [`Op::then`]
//! hands the outcome to a callback run by the thread that reads the completion.
//!
//! A blocking wait first drives progress itself (reading the completion queue, for up to
//! [`spin_budget`] of the transfer size) before sleeping: handing each completion from the
//! progress thread to the waiter costs two thread wake-ups, which halved the bandwidth of
//! 64 KiB-1 MiB reads.

use std::any::Any;
use std::cell::UnsafeCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use fabric_sys as sys;

use crate::error::{FabricError, Result};

/// How long a blocking wait on a transfer of `len` bytes drives progress itself before
/// sleeping on the completion: 10 ms plus 1 ms per MiB (the time the transfer takes at
/// 1 GB/s), at most 500 ms.
pub fn spin_budget(len: usize) -> Duration {
    let per_mib = Duration::from_millis((len >> 20) as u64);
    (Duration::from_millis(10) + per_mib).min(Duration::from_millis(500))
}

/// Something that can drive progress and dispatch completions (the endpoint's core).
pub(crate) trait Progress: Send + Sync {
    /// Reads available completions once; true if any was dispatched.
    fn poll(&self) -> bool;
    /// A waiter starts (`true`) or stops (`false`) driving progress; the progress thread
    /// stays out of the way meanwhile.
    fn spinning(&self, on: bool);
}

/// The buffers an operation keeps alive.
type Keep = Option<Box<dyn Any + Send>>;

/// What runs when an operation is over (see [`Op::then`]), given its raw outcome.
type Then = Box<dyn FnOnce(Result<(usize, u64, Keep)>) + Send>;

/// Shared completion state of one operation.
#[repr(C)]
pub(crate) struct OpState {
    /// Must stay the first field: its address is the libfabric operation context.
    ctx: UnsafeCell<sys::fi_context2>,
    slot: Mutex<Slot>,
    cv: Condvar,
    posted: Instant,
    pub(crate) deadline: Instant,
    pub(crate) what: &'static str,
    /// Bytes the operation moves.
    len: usize,
}

// SAFETY: `ctx` is only written by libfabric while the operation is in flight and never read
// by Rust; the slot is behind the mutex and the rest is plain data (`Instant`, a static
// string, a length).
unsafe impl Send for OpState {}
// SAFETY: through `&OpState` Rust reads only the plain fields and the slot (behind the
// mutex and its condvar); `ctx` is handed to libfabric by address and never read or
// written by Rust, so no two threads race on it here.
unsafe impl Sync for OpState {}

#[derive(Default)]
struct Slot {
    /// Set once: the outcome (bytes transferred, tag) or the error.
    result: Option<Result<(usize, u64)>>,
    waker: Option<Waker>,
    /// The buffers the operation uses, handed back on success.
    keep: Keep,
    /// True once the caller was told it timed out: the buffers are then never handed back
    /// (the provider may still touch them until the operation is really over).
    abandoned: bool,
    /// Run with the outcome instead of waking a waiter (see [`Op::then`]).
    then: Option<Then>,
}

fn lock(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl OpState {
    /// A new state for an operation that must finish by `deadline`, keeping `keep` alive.
    pub(crate) fn new(
        what: &'static str,
        len: usize,
        deadline: Instant,
        keep: Keep,
    ) -> Arc<OpState> {
        Arc::new(OpState {
            ctx: UnsafeCell::new(sys::fi_context2::default()),
            slot: Mutex::new(Slot {
                keep,
                ..Slot::default()
            }),
            cv: Condvar::new(),
            posted: Instant::now(),
            deadline,
            what,
            len,
        })
    }

    /// The context pointer to pass to libfabric.
    pub(crate) fn context(&self) -> *mut std::ffi::c_void {
        self.ctx.get().cast()
    }

    /// Takes back the buffers of an operation that was never posted.
    pub(crate) fn take_keep(&self) -> Keep {
        lock(&self.slot).keep.take()
    }

    /// Records the final outcome reported by the provider. Returns the buffers to drop if
    /// the caller had given up on them.
    pub(crate) fn finish(&self, result: Result<(usize, u64)>) -> Keep {
        let mut s = lock(&self.slot);
        if s.abandoned {
            return s.keep.take();
        }
        if s.result.is_none() {
            s.result = Some(result);
        }
        self.wake(s);
        None
    }

    /// Hands the outcome just stored in `s` on: to the operation's [`Op::then`] if it has
    /// one, else to whoever waits (a thread or a task).
    fn wake(&self, mut s: MutexGuard<'_, Slot>) {
        if let Some(then) = s.then.take() {
            let outcome = self.take(&mut s);
            drop(s);
            if let Some(outcome) = outcome {
                run(then, outcome);
            }
            return;
        }
        let waker = s.waker.take();
        drop(s);
        self.cv.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Tells the caller the operation timed out; the buffers stay with the operation.
    pub(crate) fn expire(&self) {
        let mut s = lock(&self.slot);
        if s.result.is_some() {
            return;
        }
        s.abandoned = true;
        s.result = Some(Err(FabricError::Timeout {
            what: self.what,
            waited: self.posted.elapsed(),
        }));
        self.wake(s);
    }

    /// Takes the outcome and, on success, the buffers.
    fn take(&self, s: &mut Slot) -> Option<Result<(usize, u64, Keep)>> {
        let r = s.result.take()?;
        Some(match r {
            Ok((n, tag)) => Ok((n, tag, if s.abandoned { None } else { s.keep.take() })),
            Err(e) => Err(e),
        })
    }
}

/// Runs an operation's [`Op::then`] with its outcome. A callback that panics is logged and
/// goes no further: it runs on whichever thread read the completion (the progress thread,
/// or a waiter driving progress), which must go on completing the other operations.
fn run(then: Then, outcome: Result<(usize, u64, Keep)>) {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| then(outcome)));
    if ran.is_err() {
        tracing::error!("an operation's completion callback panicked");
    }
}

/// Converts a completed operation's outcome into the caller's value.
pub(crate) type Finish<T> = fn(usize, u64, Keep) -> Result<T>;

/// A posted operation. Wait for it with [`Op::wait`] or `.await` it.
///
/// Dropping an `Op` does not cancel the transfer: its buffers stay alive inside the
/// endpoint until the provider reports the end (or the endpoint closes).
///
/// # Cancel safety
/// Awaiting is cancel safe in that sense: a dropped future leaves the operation running
/// and its buffers owned by the endpoint.
#[must_use = "an Op does nothing unless waited for; its result carries errors"]
pub struct Op<T> {
    state: Arc<OpState>,
    finish: Finish<T>,
    progress: std::sync::Weak<dyn Progress>,
}

impl<T> Op<T> {
    pub(crate) fn new(
        state: Arc<OpState>,
        finish: Finish<T>,
        progress: std::sync::Weak<dyn Progress>,
    ) -> Op<T> {
        Op {
            state,
            finish,
            progress,
        }
    }

    /// Drives progress from this thread until the outcome is known or the spin budget is
    /// spent.
    fn spin(&self) {
        let Some(p) = self.progress.upgrade() else {
            return;
        };
        let end = Instant::now() + spin_budget(self.state.len);
        p.spinning(true);
        while lock(&self.state.slot).result.is_none() && Instant::now() < end {
            if !p.poll() {
                std::hint::spin_loop();
            }
        }
        p.spinning(false);
    }

    /// Blocks until the operation completes, fails, or runs past `limit` (in addition to
    /// the operation's own deadline, which the endpoint enforces).
    ///
    /// # Errors
    /// The provider's error for the operation (peer gone, bad key, ...);
    /// [`FabricError::Timeout`] when the deadline or `limit` passed.
    pub fn wait(self, limit: Duration) -> Result<T> {
        self.spin();
        let s = lock(&self.state.slot);
        let (mut s, _) = self
            .state
            .cv
            .wait_timeout_while(s, limit, |s| s.result.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        match self.state.take(&mut s) {
            Some(r) => r.and_then(|(n, tag, keep)| (self.finish)(n, tag, keep)),
            None => Err(FabricError::Timeout {
                what: self.state.what,
                waited: limit,
            }),
        }
    }

    /// Hands the outcome to `f` instead of a waiter: `f` runs on the thread that reads the
    /// operation's completion from the provider (the endpoint's progress thread, or a
    /// waiter of another operation driving progress in [`Op::wait`]), or on this one at
    /// once if the operation is already over. No thread wakes another to learn of it;
    /// a waiter that is a task of some runtime costs two hand-overs (to the runtime's
    /// thread, then to whoever waits for the task).
    ///
    /// `f` must not block, and must not take a lock its caller may hold while it drives
    /// progress. It gets the error of a failed or expired operation like [`Op::wait`]; a
    /// panic in `f` is caught and logged.
    pub fn then(self, f: impl FnOnce(Result<T>) + Send + 'static)
    where
        T: 'static,
    {
        let finish = self.finish;
        let then: Then = Box::new(move |r| f(r.and_then(|(n, tag, keep)| finish(n, tag, keep))));
        let mut s = lock(&self.state.slot);
        match self.state.take(&mut s) {
            Some(outcome) => {
                drop(s);
                run(then, outcome);
            }
            None => s.then = Some(then),
        }
    }

    /// True once the outcome is known.
    pub fn is_done(&self) -> bool {
        lock(&self.state.slot).result.is_some()
    }
}

impl<T> Future for Op<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        let mut s = lock(&this.state.slot);
        match this.state.take(&mut s) {
            Some(r) => Poll::Ready(r.and_then(|(n, tag, keep)| (this.finish)(n, tag, keep))),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
