//! The copy crew: same-host copies of at least [`OFFLOAD_MIN`] bytes (a leased demand's
//! from [`HANDOFF_MIN`]) are cut into pieces of at most [`PIECE`] bytes and queued here,
//! where a helper thread of the client (`pool-copy`) and any application thread waiting
//! in [`Client::block_on`] take them.
//!
//! Why: a consumer with several demands in flight used to copy each on the thread that
//! polled it, one after the other, while the node's other core waited for work (the
//! 64 KiB event-driven stream kept the consumer's thread 80 % busy with the machine a
//! third idle). Queued, the pieces of all demands in flight are copied by two threads at
//! once, and one large demand's pieces too (a copy is bound by one core's page pinning
//! and copying, the kernel copies for several callers at once). The waiting thread helps
//! only when it has nothing else to poll, so it issues its other demands first.
//!
//! The helper sleeps on a condition variable when the queue is empty (woken only then,
//! one system call per burst of pieces, not per piece) and leaves after [`IDLE`] without
//! work, or once its client is dropped ([`Crew::close`]); the next copy starts another. A
//! process that may run on one CPU only has no crew ([`Crew::helps`]): its copies are made
//! as before it, and a crew that cannot start its helper has the thread that queued a
//! copy make it.
//!
//! [`Client::block_on`]: crate::client::Client::block_on

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fabric::Buffer;
use fabric::cma::{CmaError, Origin};

use crate::client::Shared;
use crate::client::data::CdoData;

/// A ticket's copy of fewer bytes is made on the thread that carries the ticket out: there
/// the crew costs a hop to the helper and another back to the client's runtime (measured
/// at 64 KiB: a demand one at a time 44-85 us against 28-31), which only a copy of several
/// pieces repays.
pub(super) const OFFLOAD_MIN: usize = 256 << 10;

/// A leased demand's copy of fewer bytes is made by the application's thread that demands
/// it; from this size the crew takes it, so that the thread goes on with its other demands
/// and two threads copy (the thread that finishes the copy reports it: no hop back).
/// Measured: the 64 KiB event-driven stream 2.34-3.25 GB/s against 2.27-2.45 with
/// [`OFFLOAD_MIN`] here. The same for a batch's copies of leases (`fetch_many`, 64 KiB
/// in batches of 256: 43-68k CDOs/s, median 58k, against 42-53k, median 49k, 8
/// alternating pairs).
pub(super) const HANDOFF_MIN: usize = 64 << 10;

/// The most bytes of one piece: small enough that the helper and a waiting thread share
/// a copy of a few MiB evenly, large enough that queueing a piece costs nothing beside it.
pub(super) const PIECE: usize = 256 << 10;

/// How long a helper without work stays before its thread ends.
const IDLE: Duration = Duration::from_secs(10);

/// The queue of pieces and its helper (see the module's documentation).
pub(crate) struct Crew {
    /// The client's runtime, which the helper's reports to the core may spawn tasks on
    /// (a transfer that goes another way after a failed copy, a ticket of the same step).
    runtime: tokio::runtime::Handle,
    state: Mutex<State>,
    /// Wakes the helper for work, and whoever waits for it to leave.
    work: Condvar,
    /// How long the helper waits for work before it leaves ([`IDLE`]).
    idle: Duration,
    /// Whether a helper may start: not when the process may run on one CPU only (a rank
    /// bound to its core), where a second copier would only take turns with the first.
    helps: bool,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Piece>,
    helper: Helper,
    /// The client is gone: the helper leaves once the queue is empty.
    closed: bool,
}

/// The helper thread, as the queue's side sees it.
#[derive(Default, PartialEq, Eq, Clone, Copy)]
enum Helper {
    /// None runs (never started, left idle, or could not start).
    #[default]
    None,
    /// It waits for the condition variable: a new piece must wake it.
    Asleep,
    /// It copies, or is about to look at the queue again.
    Awake,
}

/// Memory a copy lands in.
pub(super) enum Dst {
    /// The application's, lent for the CDO.
    Lent(Buffer),
    /// A registered landing buffer (see `Shared::landing`).
    Landing(fabric::MemoryRegion),
}

impl Dst {
    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Dst::Lent(b) => b.as_mut_slice(),
            Dst::Landing(r) => r.as_mut_slice(),
        }
    }

    /// The `len` bytes copied here, as the application gets them (a landing buffer goes
    /// back to `shared`'s pool once the data is dropped).
    pub(super) fn into_data(self, len: usize, shared: &Shared) -> CdoData {
        match self {
            Dst::Lent(b) => CdoData::own(b, len),
            Dst::Landing(r) => CdoData::landed(r, len, shared.landing.clone()),
        }
    }

    /// Unused: a landing buffer goes back to `shared`'s pool; the memory lent, back.
    pub(super) fn give_back(self, shared: &Shared) -> Option<Buffer> {
        match self {
            Dst::Lent(b) => Some(b),
            Dst::Landing(r) => {
                shared.landing.give(r);
                None
            }
        }
    }
}

/// What is done with a copy's memory and outcome once its pieces are done.
type Then = Box<dyn FnOnce(Dst, Result<(), CmaError>) + Send>;

/// One copy: the bytes at `addr` of the process `from` reads into `dst`, as pieces.
struct Job {
    from: Origin,
    addr: u64,
    /// The start of `dst`'s memory, which pieces write at their offsets.
    at: *mut u8,
    /// The memory copied into; handed on once every piece is done.
    dst: Mutex<Option<Dst>>,
    /// Pieces not copied yet.
    left: AtomicUsize,
    /// The first piece's failure.
    failed: Mutex<Option<CmaError>>,
    /// Run by the thread that copies the last piece.
    then: Mutex<Option<Then>>,
}

// SAFETY: `at` points into `dst`'s memory, which stays mapped while the job lives (the
// memory is taken out only once `left` is 0, after every piece's last write), and each
// piece writes its own range of it, disjoint from the others'.
unsafe impl Send for Job {}
// SAFETY: as for `Send`: the pieces share `at` for disjoint ranges only; the rest is
// atomics and mutexes.
unsafe impl Sync for Job {}

/// A range of a job.
struct Piece {
    job: Arc<Job>,
    offset: usize,
    len: usize,
}

impl Piece {
    /// Copies the piece's range, records a failure, and runs the job's `then` if it was
    /// the last.
    fn run(self) {
        let job = &self.job;
        // SAFETY: `offset + len` lies within `dst` (the job was cut from its length) and no
        // other piece writes this range; the memory stays mapped while `job` lives.
        let dst = unsafe { std::slice::from_raw_parts_mut(job.at.add(self.offset), self.len) };
        if let Err(e) = job.from.read(job.addr + self.offset as u64, dst) {
            lock(&job.failed).get_or_insert(e);
        }
        if job.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let dst = lock(&job.dst).take();
            let then = lock(&job.then).take();
            if let (Some(dst), Some(then)) = (dst, then) {
                then(dst, lock(&job.failed).take().map_or(Ok(()), Err));
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Crew {
    /// The crew of a client whose tasks run on `runtime`; without a helper where the
    /// process may run on one CPU only (its affinity, its cgroup's quota).
    pub(crate) fn new(runtime: tokio::runtime::Handle) -> Arc<Crew> {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Crew::with(runtime, IDLE, cpus > 1)
    }

    /// A crew whose helper leaves after `idle` without work, if one `helps` at all.
    fn with(runtime: tokio::runtime::Handle, idle: Duration, helps: bool) -> Arc<Crew> {
        Arc::new(Crew {
            runtime,
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            idle,
            helps,
        })
    }

    /// Copies `len` bytes at `addr` of the process `from` reads (by system call, or out of
    /// a view of its slab) into the start of `dst` (at most its length) by the crew; `dst`
    /// back with the outcome (the first piece's failure, of [`Origin::read`]) once every piece is done, `None` if the crew lost the job (a
    /// thread that copied one of its pieces panicked). Dropping the future leaves the
    /// pieces to the crew, which drops `dst` after them.
    pub(super) async fn copy(
        self: &Arc<Self>,
        from: (Origin, u64),
        dst: Dst,
        len: usize,
    ) -> Option<(Dst, Result<(), CmaError>)> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.copy_then(from, dst, len, move |dst, copied| {
            // A future dropped meanwhile hears nothing: `dst` is dropped here.
            let _ = tx.send((dst, copied));
        });
        rx.await.ok()
    }

    /// As [`Crew::copy`], `then` run with `dst` and the outcome by the thread that copies
    /// the last piece (the helper, a waiting caller, or this one when no helper runs).
    pub(super) fn copy_then(
        self: &Arc<Self>,
        (from, addr): (Origin, u64),
        mut dst: Dst,
        len: usize,
        then: impl FnOnce(Dst, Result<(), CmaError>) + Send + 'static,
    ) {
        let memory = dst.as_mut_slice();
        let len = len.min(memory.len());
        let at = memory.as_mut_ptr();
        let count = len.div_ceil(PIECE).max(1);
        let job = Arc::new(Job {
            from,
            addr,
            at,
            dst: Mutex::new(Some(dst)),
            left: AtomicUsize::new(count),
            failed: Mutex::new(None),
            then: Mutex::new(Some(Box::new(then))),
        });
        let helped = self.queue((0..count).map(|i| Piece {
            job: Arc::clone(&job),
            offset: i * PIECE,
            len: PIECE.min(len - i * PIECE),
        }));
        // Without a helper nobody else may take them: this thread copies them.
        while !helped && job.left.load(Ordering::Acquire) > 0 && self.help() {}
    }

    /// Queues `pieces` and wakes or starts the helper; whether one runs.
    fn queue(self: &Arc<Self>, pieces: impl Iterator<Item = Piece>) -> bool {
        let mut s = lock(&self.state);
        s.queue.extend(pieces);
        match s.helper {
            Helper::Awake => true,
            Helper::Asleep => {
                s.helper = Helper::Awake;
                self.work.notify_all();
                true
            }
            Helper::None if !self.helps => false,
            Helper::None => {
                let crew = Arc::clone(self);
                let started = std::thread::Builder::new()
                    .name("pool-copy".into())
                    .spawn(move || crew.helper());
                if let Err(e) = &started {
                    tracing::debug!(
                        "pool client: no copy helper ({e}); copying on the caller's thread"
                    );
                }
                s.helper = if started.is_ok() {
                    Helper::Awake
                } else {
                    Helper::None
                };
                started.is_ok()
            }
        }
    }

    /// Whether this crew copies at all: a helper may start (see [`Crew::new`]).
    pub(super) fn helps(&self) -> bool {
        self.helps
    }

    /// The client is gone: the helper leaves once it has copied what is queued.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        self.work.notify_all();
    }

    /// Copies one queued piece on the caller's thread, if any is queued: whether it did
    /// (an application thread about to sleep in `block_on` helps this way).
    pub(crate) fn help(&self) -> bool {
        let piece = lock(&self.state).queue.pop_front();
        piece.map(Piece::run).is_some()
    }

    /// The helper thread: copies pieces until none came for the crew's idle time. A
    /// report that panics (a bug) is logged and the helper goes on: pieces queued behind
    /// it must not wait forever.
    fn helper(&self) {
        let _in_runtime = self.runtime.enter();
        let mut s = lock(&self.state);
        loop {
            if let Some(piece) = s.queue.pop_front() {
                drop(s);
                let run = std::panic::AssertUnwindSafe(|| piece.run());
                if std::panic::catch_unwind(run).is_err() {
                    tracing::error!(
                        "pool client: a copy's report panicked; the copy helper goes on"
                    );
                }
                s = lock(&self.state);
                continue;
            }
            if s.closed {
                break;
            }
            s.helper = Helper::Asleep;
            let (woken, waited) = self
                .work
                .wait_timeout_while(s, self.idle, |s| s.helper == Helper::Asleep && !s.closed)
                .unwrap_or_else(PoisonError::into_inner);
            s = woken;
            // Closed: the loop's top copies what is queued, then leaves.
            if waited.timed_out() && s.helper == Helper::Asleep && !s.closed {
                break;
            }
        }
        // Under the lock since the queue was last seen empty: no piece is left behind.
        s.helper = Helper::None;
        self.work.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Poll;

    /// A crew on a runtime of its own (the runtime is kept alive beside it).
    fn crew(idle: Duration, helps: bool) -> (Arc<Crew>, tokio::runtime::Runtime) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        (Crew::with(rt.handle().clone(), idle, helps), rt)
    }

    /// A buffer of `len` bytes counting up from `seed`.
    fn source(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_add(seed)).collect()
    }

    #[test]
    fn copies_of_any_size_arrive_whole_with_helpers_and_helping_callers() {
        let (crew, _rt) = crew(IDLE, true);
        let pid = std::process::id();
        let sizes = [1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 17, 16 << 20];
        let srcs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| source(n, i as u8))
            .collect();
        // All in flight at once: the helper and this thread (helping while it waits)
        // share their pieces.
        let copies = srcs.iter().map(|src| {
            let dst = Dst::Lent(Buffer::new(src.len()).expect("buffer"));
            crew.copy((Origin::Process(pid), src.as_ptr() as u64), dst, src.len())
        });
        let all = futures::future::join_all(copies);
        let mut all = std::pin::pin!(all);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        let limit = std::time::Instant::now() + Duration::from_secs(60);
        let done = loop {
            if let Poll::Ready(done) = all.as_mut().poll(&mut cx) {
                break done;
            }
            assert!(std::time::Instant::now() < limit, "copies not done in 60 s");
            if !crew.help() {
                std::thread::yield_now();
            }
        };
        for ((mut dst, result), src) in done.into_iter().flatten().zip(&srcs) {
            result.expect("copied");
            assert_eq!(&dst.as_mut_slice()[..src.len()], &src[..]);
        }
    }

    #[test]
    fn a_copy_out_of_a_view_of_a_slab_arrives_whole() {
        let (crew, _rt) = crew(IDLE, true);
        let len = 3 * PIECE + 5;
        let mut src = Buffer::for_offer(len).expect("a slab's buffer");
        src.as_mut_slice().copy_from_slice(&source(len, 7));
        let file = src.memory_file().expect("its slab");
        let views = fabric::cma::Views::new(1 << 40);
        let view = views.view(std::process::id(), file).expect("mapped");
        let dst = Dst::Lent(Buffer::new(len).expect("buffer"));
        let at = (Origin::View(view), src.as_slice().as_ptr() as u64);
        let (mut dst, result) = futures::executor::block_on(crew.copy(at, dst, len)).expect("done");
        result.expect("copied");
        assert_eq!(dst.as_mut_slice(), src.as_slice());
    }

    #[test]
    fn a_range_that_is_not_mapped_fails_the_copy_with_the_kernels_error() {
        let (crew, _rt) = crew(IDLE, true);
        let dst = Dst::Lent(Buffer::new(2 * PIECE).expect("buffer"));
        let copy = crew.copy((Origin::Process(std::process::id()), 8), dst, 2 * PIECE);
        let (_, result) = futures::executor::block_on(copy).expect("done");
        assert!(
            matches!(result, Err(CmaError::BadAddress { .. })),
            "{result:?}"
        );
    }

    #[test]
    fn the_helper_leaves_when_idle_and_the_next_copy_starts_another() {
        let (crew, _rt) = crew(Duration::from_millis(20), true);
        let src = source(PIECE, 3);
        let copy = |crew: &Arc<Crew>| {
            let dst = Dst::Lent(Buffer::new(src.len()).expect("buffer"));
            let at = (Origin::Process(std::process::id()), src.as_ptr() as u64);
            let copied = futures::executor::block_on(crew.copy(at, dst, src.len()));
            let (mut dst, r) = copied.expect("done");
            r.expect("copied");
            assert_eq!(dst.as_mut_slice(), &src[..]);
        };
        for _ in 0..2 {
            copy(&crew);
            helper_gone(&crew);
        }
    }

    /// Waits (at most 30 s) until the crew's helper left.
    fn helper_gone(crew: &Crew) {
        let s = lock(&crew.state);
        let (_s, waited) = crew
            .work
            .wait_timeout_while(s, Duration::from_secs(30), |s| s.helper != Helper::None)
            .expect("lock");
        assert!(!waited.timed_out(), "the helper stayed");
    }

    #[test]
    fn without_a_helper_the_caller_copies_before_the_copy_returns() {
        let (crew, _rt) = crew(IDLE, false);
        let src = source(3 * PIECE + 5, 9);
        let dst = Dst::Lent(Buffer::new(src.len()).expect("buffer"));
        let done = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&done);
        let at = (Origin::Process(std::process::id()), src.as_ptr() as u64);
        crew.copy_then(at, dst, src.len(), move |dst, r| {
            *lock(&slot) = Some((dst, r));
        });
        let (mut dst, r) = lock(&done)
            .take()
            .expect("copied before copy_then returned");
        r.expect("copied");
        assert_eq!(dst.as_mut_slice(), &src[..]);
        assert!(
            lock(&crew.state).helper == Helper::None,
            "no helper started"
        );
    }

    #[test]
    fn a_closed_crews_helper_copies_what_is_queued_and_leaves() {
        let (crew, _rt) = crew(IDLE, true);
        let src = source(8 * PIECE, 4);
        let dst = Dst::Lent(Buffer::new(src.len()).expect("buffer"));
        let (tx, rx) = std::sync::mpsc::channel();
        let at = (Origin::Process(std::process::id()), src.as_ptr() as u64);
        crew.copy_then(at, dst, src.len(), move |dst, r| {
            let _ = tx.send((dst, r));
        });
        crew.close();
        let (mut dst, r) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("copied after the close");
        r.expect("copied");
        assert_eq!(dst.as_mut_slice(), &src[..]);
        helper_gone(&crew);
    }
}
