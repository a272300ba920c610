//! An app's reading end of its ring from the PM, shared by the connection's reader task
//! and the application threads that wait for an answer (`Client::block_on`): whoever
//! holds the inlet's lock takes what the ring holds and hands it on in order. A waiting
//! thread thus reads its answer itself, as MPI's progress does, instead of the PM ringing
//! the reader task awake and the task waking the thread: no system call on either side
//! and two thread hand-overs less per round trip.
//!
//! The doorbell stays the task's: it sleeps on it when nobody else reads. While threads
//! read ([`Inlet::reading`]) the ring's sleep flag is cleared, so that the PM writes
//! without ringing; the last of them to stop sets it again and rings the task awake if
//! bytes came meanwhile. The flag can only be wrong the safe way: set while a thread
//! reads (a needless bell), never cleared while nobody reads.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use tokio::io::unix::AsyncFd;
use tokio::net::unix::OwnedReadHalf;

use super::{Mapping, RingReader, ring_bell, silence};

/// Most bytes one take copies out of the ring (a ring's capacity: all it can hold).
const TAKE_MAX: usize = super::CAPACITY;

/// The shared reading end (see the module's documentation).
pub(crate) struct Inlet {
    map: Arc<Mapping>,
    ring: usize,
    /// Rung when a take made room while the writer waited.
    room: OwnedFd,
    /// The ring's doorbell, also rung by the last reading thread when bytes came while
    /// the bell was off.
    doorbell: Arc<OwnedFd>,
    /// The position and the bytes of a frame not whole yet.
    taken: Mutex<Taken>,
    /// Threads reading the ring while they wait.
    readers: AtomicUsize,
    /// The position taken up to, this process's own copy for looks without the lock (the
    /// segment's copy is the PM's to read, and anything may be written there).
    taken_to: AtomicU64,
}

/// What the inlet's lock guards: the ring's position and the bytes taken and not yet
/// framed.
pub(crate) struct Taken {
    tail: u64,
    /// Bytes taken, from the start of a frame.
    pub(crate) buf: Vec<u8>,
    /// The list of one take's messages, kept between takes (see [`Taken::take_messages`]).
    msgs: Vec<crate::proto::FromPm>,
}

/// Most messages' room [`Taken::keep_messages`] keeps between takes (at most 136 bytes each:
/// about 136 KiB per connection).
const MSGS_KEPT: usize = 1024;

impl Taken {
    /// The empty list a take decodes its messages into, with the room the last takes
    /// left: a burst of hundreds of messages otherwise grows a new list by doubling, take
    /// after take, and each large request makes the allocator sweep its small free chunks
    /// (measured: an eighth of a consumer's reader thread in the 8 B event-driven stream).
    /// Give it back with [`Taken::keep_messages`].
    pub(crate) fn take_messages(&mut self) -> Vec<crate::proto::FromPm> {
        std::mem::take(&mut self.msgs)
    }

    /// Keeps `msgs`, handed on, for the next take: emptied, with room for at most
    /// [`MSGS_KEPT`] messages.
    pub(crate) fn keep_messages(&mut self, mut msgs: Vec<crate::proto::FromPm>) {
        msgs.clear();
        msgs.shrink_to(MSGS_KEPT);
        self.msgs = msgs;
    }
}

/// The reader task's side: the doorbell it sleeps on and the socket whose end means the
/// PM's.
pub(crate) struct RingIn {
    inlet: Arc<Inlet>,
    doorbell: AsyncFd<SharedFd>,
    socket: OwnedReadHalf,
}

/// A descriptor the task's registration and the inlet both hold.
struct SharedFd(Arc<OwnedFd>);

impl AsRawFd for SharedFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Inlet {
    /// The lock, waiting for it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Taken> {
        self.taken.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock if nobody holds it.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, Taken>> {
        match self.taken.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Appends what the ring holds to `t.buf`; the number of bytes.
    ///
    /// # Errors
    /// The writer's position is out of range.
    pub(crate) fn take(&self, t: &mut Taken) -> io::Result<usize> {
        t.buf.reserve(TAKE_MAX);
        let Taken { tail, buf, .. } = t;
        let spare = &mut buf.spare_capacity_mut()[..TAKE_MAX];
        let n = super::take(&self.map, self.ring, tail, &self.room, spare)?;
        // SAFETY: `take` wrote `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        self.taken_to.store(*tail, Ordering::SeqCst);
        Ok(n)
    }

    /// Whether the ring holds bytes not taken (or the PM's position is out of range: a
    /// take says so).
    fn holds(&self) -> bool {
        let head = self.map.control(self.ring).head.0.load(Ordering::SeqCst);
        head != self.taken_to.load(Ordering::SeqCst)
    }

    /// The reader task is about to sleep on the doorbell: sets the ring's sleep flag.
    /// `false` when the ring holds bytes after all (the task takes them instead), unless
    /// `busy`: a reading thread holds the lock and takes them (and, the last to stop
    /// reading, rings the task awake for what it left).
    fn arm(&self, busy: bool) -> bool {
        let ctl = self.map.control(self.ring);
        ctl.sleeping.0.store(1, Ordering::SeqCst);
        if !busy && self.holds() {
            ctl.sleeping.0.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Rings the reader task awake (a reading thread met an error the task is to end
    /// the connection for).
    pub(crate) fn wake_task(&self) {
        ring_bell(&self.doorbell);
    }

    /// A thread reads the ring while it waits, until the guard is dropped: the PM writes
    /// without ringing the doorbell meanwhile.
    pub(crate) fn reading(self: &Arc<Self>) -> Reading {
        if self.readers.fetch_add(1, Ordering::SeqCst) == 0 {
            self.map
                .control(self.ring)
                .sleeping
                .0
                .store(0, Ordering::SeqCst);
        }
        Reading(Arc::clone(self))
    }
}

/// A thread reading the ring (see [`Inlet::reading`]).
pub(crate) struct Reading(Arc<Inlet>);

impl Reading {
    /// The ring's reading end.
    pub(crate) fn inlet(&self) -> &Arc<Inlet> {
        &self.0
    }
}

impl Drop for Reading {
    /// The last reader gives the ring back to the task: its sleep flag set again, and
    /// the task rung awake if bytes came since.
    fn drop(&mut self) {
        let inlet = &self.0;
        if inlet.readers.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        inlet
            .map
            .control(inlet.ring)
            .sleeping
            .0
            .store(1, Ordering::SeqCst);
        if inlet.holds() {
            ring_bell(&inlet.doorbell);
        }
    }
}

impl RingIn {
    /// Shares `reader` (an app's, nothing read yet but what its position says): the
    /// task's side, with the shared end ([`RingIn::inlet`]).
    ///
    /// # Errors
    /// Registering the doorbell with the runtime again.
    pub(super) fn new(reader: RingReader) -> io::Result<RingIn> {
        let RingReader {
            map,
            ring,
            tail,
            doorbell,
            room,
            socket,
        } = reader;
        let doorbell = Arc::new(doorbell.into_inner());
        let inlet = Arc::new(Inlet {
            map,
            ring,
            room,
            doorbell: Arc::clone(&doorbell),
            taken: Mutex::new(Taken {
                tail,
                buf: Vec::new(),
                msgs: Vec::new(),
            }),
            readers: AtomicUsize::new(0),
            taken_to: AtomicU64::new(tail),
        });
        // SAFETY: the descriptor stays open and the same while registered: the
        // registration holds it (shared with the inlet, which only writes to it).
        let registered = unsafe {
            AsyncFd::register_with_interest(SharedFd(doorbell), tokio::io::Interest::READABLE)
        }?;
        Ok(RingIn {
            inlet,
            doorbell: registered,
            socket,
        })
    }

    /// The shared reading end.
    pub(crate) fn inlet(&self) -> &Arc<Inlet> {
        &self.inlet
    }

    /// Waits until the ring may hold bytes: at once when it does, else once the doorbell
    /// rings; `busy`: the lock was held by a reading thread, which takes what the ring
    /// holds now (the task waits for the doorbell). `false` once the PM's side is gone
    /// (what the ring still holds was written before: take it, then end).
    ///
    /// # Errors
    /// The doorbell's error; the PM wrote to the socket.
    pub(crate) async fn wait(&mut self, busy: bool) -> io::Result<bool> {
        if !self.inlet.arm(busy) {
            return Ok(true);
        }
        let (doorbell, socket) = (&self.doorbell, &mut self.socket);
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(ready) = doorbell.poll_read_ready(cx) {
                let mut guard = ready?;
                silence(&guard.get_inner().0);
                guard.clear_ready();
                return std::task::Poll::Ready(Ok(true));
            }
            super::poll_gone(socket, cx).map_ok(|()| false)
        })
        .await
    }
}
