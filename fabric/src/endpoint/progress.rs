//! The progress thread: drives the provider, completes and expires the operations in
//! flight (see the `endpoint` module docs for how it waits).

use super::*;
use crate::domain::close_fid;

/// How the progress thread waits for completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WaitMode {
    /// `fi_cq_sread` on the CQ's wait object.
    Blocking,
    /// `fi_cq_read` with backoff (shared memory).
    Polling,
    /// `fi_cq_read` and yield, never sleeping.
    Spinning,
}

/// Endpoint, AV, CQ and the operations in flight.
pub(super) struct Core {
    pub(super) mode: WaitMode,
    pub(super) shared: Arc<Shared>,
    pub(super) ep: *mut sys::fid_ep,
    pub(super) av: *mut sys::fid_av,
    pub(super) cq: *mut sys::fid_cq,
    pub(super) ops: Mutex<HashMap<usize, Arc<OpState>>>,
    pub(super) stop: AtomicBool,
    /// Waiters currently driving progress themselves.
    pub(super) spinners: std::sync::atomic::AtomicUsize,
    /// When the last waiter stopped spinning (ns since `born`): waiters come back quickly
    /// between operations, and a progress thread that slipped into a blocking read in the
    /// gap would compete with them.
    pub(super) last_spin: AtomicU64,
    pub(super) born: Instant,
    /// The CQ's wait file descriptor, where the provider gives one (`Blocking` mode).
    pub(super) wait_fd: Option<std::ffi::c_int>,
}

/// How long a `Blocking` progress thread keeps polling after the provider woke it: a peer
/// reading an offer sends its next request soon after, and a thread that slept again would
/// have to be woken for it (measured: a sleeping provider costs a tcp read of 1 MiB about
/// half its speed).
const HOT: Duration = Duration::from_micros(300);

// SAFETY: FI_THREAD_SAFE endpoint and CQ; the registry is behind a mutex.
unsafe impl Send for Core {}
// SAFETY: shared references only reach what the `Send` reason above makes safe from any
// thread (FI_THREAD_SAFE objects, state behind a mutex).
unsafe impl Sync for Core {}

impl Core {
    pub(super) fn ops(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Arc<OpState>>> {
        self.ops.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Completes the operation whose context is `ctx`, if it is ours.
    pub(super) fn complete(&self, ctx: *mut c_void, result: Result<(usize, u64)>) {
        let op = self.ops().remove(&(ctx as usize));
        match op {
            Some(op) => drop(op.finish(result)),
            None => tracing::debug!("completion for an unknown context {ctx:?}"),
        }
    }

    /// Fails operations past their deadline (they stay registered until really over).
    pub(super) fn expire(&self, now: Instant) {
        let overdue: Vec<Arc<OpState>> = self
            .ops()
            .values()
            .filter(|o| o.deadline <= now)
            .cloned()
            .collect();
        for op in overdue {
            // SAFETY: asking the provider to cancel a posted operation; harmless if it
            // already finished or cannot be canceled.
            unsafe { sys::fi_cancel(&mut (*self.ep).fid, op.context()) };
            op.expire();
        }
    }

    /// Dispatches a batch of completions (or one error entry); returns what `fi_cq_read` /
    /// `fi_cq_sread` returned.
    pub(super) fn dispatch(&self, n: isize, entries: &[sys::fi_cq_tagged_entry]) {
        if n > 0 {
            for e in &entries[..n as usize] {
                self.complete(e.op_context, Ok((e.len, e.tag)));
            }
        } else if n == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: reading one error entry.
            let rc = unsafe { sys::fi_cq_readerr(self.cq, &mut err, 0) };
            if rc > 0 {
                let what = self
                    .ops()
                    .get(&(err.op_context as usize))
                    .map_or("operation", |o| o.what);
                self.complete(
                    err.op_context,
                    Err(completion(what, err.err, err.prov_errno)),
                );
            }
        } else if n != -(sys::FI_EAGAIN as isize) && n != -(libc::ETIMEDOUT as isize) {
            tracing::warn!("reading the completion queue: {n}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(super) fn progress_loop(&self) {
        let mut entries = [sys::fi_cq_tagged_entry::default(); 64];
        let mut last_expiry = Instant::now();
        let mut idle_rounds: u32 = 0;
        let mut hot_until = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            if self.waiters_busy() {
                // A waiter drives progress: stay out of its way (two threads reading one
                // CQ on a 2-core node halve the bandwidth).
                std::thread::park_timeout(Duration::from_millis(1));
                self.expire_every(&mut last_expiry);
                continue;
            }
            if let (WaitMode::Blocking, Some(fd)) = (self.mode, self.wait_fd) {
                self.poll_or_wait(fd, &mut entries, &mut hot_until);
                self.expire_every(&mut last_expiry);
                continue;
            }
            // SAFETY: reading into a local array of the CQ's format.
            let n = unsafe {
                match self.mode {
                    WaitMode::Blocking => sys::fi_cq_sread(
                        self.cq,
                        entries.as_mut_ptr().cast(),
                        entries.len(),
                        std::ptr::null(),
                        100,
                    ),
                    WaitMode::Polling | WaitMode::Spinning => {
                        sys::fi_cq_read(self.cq, entries.as_mut_ptr().cast(), entries.len())
                    }
                }
            };
            if self.mode == WaitMode::Spinning && n == -(sys::FI_EAGAIN as isize) {
                std::thread::yield_now();
            }
            if self.mode == WaitMode::Polling {
                if n == -(sys::FI_EAGAIN as isize) && self.ops().is_empty() {
                    idle_rounds = idle_rounds.saturating_add(1);
                    backoff(idle_rounds);
                } else {
                    idle_rounds = 0;
                }
            }
            self.dispatch(n, &entries);
            self.expire_every(&mut last_expiry);
        }
    }

    /// One round of `Blocking` progress on a wait descriptor: read the CQ (which drives
    /// the provider); while hot (completions, or woken within [`HOT`]) poll again, else
    /// sleep on `fd` (at most 100 ms) once the provider says nothing is pending.
    fn poll_or_wait(
        &self,
        fd: std::ffi::c_int,
        entries: &mut [sys::fi_cq_tagged_entry],
        hot_until: &mut Instant,
    ) {
        // SAFETY: reading into a local array of the CQ's format.
        let n = unsafe { sys::fi_cq_read(self.cq, entries.as_mut_ptr().cast(), entries.len()) };
        self.dispatch(n, entries);
        let now = Instant::now();
        if n > 0 {
            *hot_until = now + HOT;
            return;
        }
        if now < *hot_until {
            // Still busy (the provider has something ready): stay hot.
            if ready(fd, 0) {
                *hot_until = now + HOT;
            }
            std::thread::yield_now();
            return;
        }
        let mut fids = [self.cq.cast::<sys::fid>()];
        // SAFETY: the fabric and the CQ are open; `fids` lives through the call.
        let rc = unsafe { sys::fi_trywait(self.shared.fabric, fids.as_mut_ptr(), 1) };
        let sleep_ms = match rc {
            0 => 100,
            rc if rc == -(sys::FI_EAGAIN as i32) => return, // something to progress first
            // A provider that cannot say: nap briefly rather than spin.
            _ => 1,
        };
        if ready(fd, sleep_ms) {
            *hot_until = Instant::now() + HOT;
        }
    }

    /// True while a waiter spins, or spun within the last 2 ms.
    pub(super) fn waiters_busy(&self) -> bool {
        if self.spinners.load(Ordering::Acquire) > 0 {
            return true;
        }
        let now = self.born.elapsed().as_nanos() as u64;
        now.saturating_sub(self.last_spin.load(Ordering::Acquire)) < 2_000_000
    }

    /// Runs [`Core::expire`] at most every 50 ms.
    pub(super) fn expire_every(&self, last: &mut Instant) {
        let now = Instant::now();
        if now.duration_since(*last) >= Duration::from_millis(50) {
            *last = now;
            self.expire(now);
        }
    }
}

impl Progress for Core {
    fn poll(&self) -> bool {
        let mut entries = [sys::fi_cq_tagged_entry::default(); 16];
        // SAFETY: reading into a local array of the CQ's format.
        let n = unsafe { sys::fi_cq_read(self.cq, entries.as_mut_ptr().cast(), entries.len()) };
        self.dispatch(n, &entries);
        n > 0
    }

    fn spinning(&self, on: bool) {
        // The progress thread notices the change within its 1 ms park; waking it here would
        // cost a syscall per operation.
        if on {
            self.spinners.fetch_add(1, Ordering::AcqRel);
        } else {
            self.last_spin
                .store(self.born.elapsed().as_nanos() as u64, Ordering::Release);
            self.spinners.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether the provider's wait descriptor `fd` signals within `ms` milliseconds.
fn ready(fd: std::ffi::c_int, ms: std::ffi::c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

/// Idle backoff of a polling progress thread: yield for a while, then sleep (parked, so a
/// new operation wakes it at once) up to 1 ms.
pub(super) fn backoff(idle_rounds: u32) {
    if idle_rounds < 256 {
        std::thread::yield_now();
    } else {
        let micros = 1u64 << (idle_rounds - 256).min(10);
        std::thread::park_timeout(Duration::from_micros(micros.min(1000)));
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: closing the endpoint first stops all data movement into our buffers, then
        // the AV and CQ it was bound to.
        unsafe {
            close_fid("endpoint", &mut (*self.ep).fid);
            close_fid("av", &mut (*self.av).fid);
            close_fid("cq", &mut (*self.cq).fid);
        }
        let left: Vec<Arc<OpState>> = self.ops().drain().map(|(_, o)| o).collect();
        for op in left {
            drop(op.finish(Err(FabricError::Canceled(op.what))));
        }
    }
}
