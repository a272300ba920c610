//! When each shard's connection was last read down to what was there, with every message
//! of it handled by the core: the instants the core uses leases of memory within
//! ([`pool_core::client::ClientCore::drained`]). The threads that read a connection (its
//! reader task, a thread waiting in `Client::block_on` that reads a ring) note them here
//! without the core's lock; a call that may use a lease tells the core the latest
//! ([`Drains::tell`]), after catching up itself when the last note is older than
//! [`CATCH_UP_AFTER`] (a quiet connection whose reader sleeps: `Shared::catch_up`): it
//! reads a ring on its thread; of a socket it asks the kernel whether bytes wait, and
//! counts it drained now when none do and its reader is parked with all it read handled
//! ([`Watch`]).
//!
//! Why: a lease is used without asking the PM, so the client must know its lease table
//! holds every revocation the PM wrote until shortly before. A reader that is stalled (its
//! thread does not get the CPU) or far behind leaves the table stale: its notes stop, and
//! the core leaves leases of memory to the PM until it catches up.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pool_core::client::{Driver, Sharded};

/// A call that may use a lease reads the rings itself first when their last drain is
/// older than this: within it, a busy connection's reader has drained it again; past it,
/// the reader sleeps on a quiet connection (or is behind, and this thread catches up).
pub(crate) const CATCH_UP_AFTER: Duration = Duration::from_millis(10);

/// A drain is noted only this many nanoseconds (100 µs) after the last one noted: far
/// finer than the half lease grace it is measured against.
const NOTED_EVERY: u64 = 100_000;

/// The last drain of each shard's connection, in nanoseconds since `epoch` (0: none).
pub(crate) struct Drains {
    epoch: Instant,
    at: Box<[AtomicU64]>,
}

impl Drains {
    /// No drain yet, for `shards` connections.
    pub(crate) fn new(shards: usize) -> Drains {
        Drains {
            epoch: Instant::now(),
            at: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Everything shard `shard`'s manager had written by `at` was read and handed to the
    /// core (call it after the core handled it). An earlier instant changes nothing, nor
    /// does one less than [`NOTED_EVERY`] after the last: a thread that spins on a ring
    /// notes a drain per take, and a write of the shared line each time would cost more
    /// than the take.
    pub(crate) fn note(&self, shard: usize, at: Instant) {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
        let Some(a) = self.at.get(shard) else {
            return;
        };
        let last = a.load(Ordering::Relaxed);
        if last == 0 || nanos.saturating_sub(last) >= NOTED_EVERY {
            a.fetch_max(nanos, Ordering::Release);
        }
    }

    /// The last drain of shard `shard`'s connection, if any.
    fn last(&self, shard: usize) -> Option<Instant> {
        let nanos = self.at.get(shard)?.load(Ordering::Acquire);
        (nanos > 0).then(|| self.epoch + Duration::from_nanos(nanos))
    }

    /// Tells `core` the last drain of every shard's connection.
    pub(crate) fn tell<T: Driver>(&self, core: &mut Sharded<T>) {
        for shard in 0..self.at.len() {
            if let Some(at) = self.last(shard) {
                core.drained(shard, at);
            }
        }
    }

    /// Whether a shard's connection was last drained [`CATCH_UP_AFTER`] before `now` or
    /// earlier (or never).
    pub(crate) fn behind(&self, shard: usize, now: Instant) -> bool {
        self.last(shard)
            .is_none_or(|at| now.saturating_duration_since(at) >= CATCH_UP_AFTER)
    }
}

/// A socket connection's reading end as `Shared::catch_up` sees it: its descriptor (open
/// while the reader runs: `Shared::watch`), and whether its reader is parked, waiting
/// for bytes with everything it read handled.
pub(crate) struct Watch {
    fd: RawFd,
    parked: AtomicBool,
}

impl Watch {
    /// The reading end of the socket `fd`, its reader not parked.
    pub(crate) fn new(fd: RawFd) -> Arc<Watch> {
        Arc::new(Watch {
            fd,
            parked: AtomicBool::new(false),
        })
    }

    /// The reader is about to read (`false`: what it reads is not handled yet), or waits
    /// for bytes with everything it read handled (`true`).
    pub(crate) fn park(&self, parked: bool) {
        self.parked.store(parked, Ordering::SeqCst);
    }

    /// Whether everything written to the socket by now was read and handled: the kernel
    /// holds no byte for it, and then its reader is parked. (Had the reader read bytes the
    /// kernel held until now, it would not be parked again before handling them.)
    pub(crate) fn drained(&self) -> bool {
        let mut fd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call; the descriptor is open while watched.
        let ready = unsafe { libc::poll(&raw mut fd, 1, 0) };
        ready == 0 && self.parked.load(Ordering::SeqCst)
    }
}

/// The sockets watched now, by shard (mostly one).
pub(crate) type Watches = smallvec::SmallVec<[(usize, Arc<Watch>); 1]>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_is_kept_per_shard_and_only_moves_forward() {
        let d = Drains::new(2);
        let t0 = d.epoch;
        assert_eq!(d.last(0), None);
        assert!(d.behind(0, t0));
        d.note(0, t0 + Duration::from_millis(5));
        d.note(0, t0 + Duration::from_millis(1));
        assert_eq!(d.last(0), Some(t0 + Duration::from_millis(5)));
        d.note(0, t0 + Duration::from_micros(5050));
        assert_eq!(d.last(0), Some(t0 + Duration::from_millis(5)), "too soon");
        assert!(!d.behind(0, t0 + Duration::from_millis(14)));
        assert!(d.behind(0, t0 + Duration::from_millis(15)));
        assert_eq!(d.last(1), None, "each shard its own");
        d.note(7, t0);
        assert_eq!(d.last(7), None, "a shard out of range is no shard");
    }

    #[test]
    fn a_socket_is_drained_when_no_byte_waits_and_its_reader_is_parked() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let (mut pm, mut app) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        let watch = Watch::new(app.as_raw_fd());
        assert!(!watch.drained(), "its reader is not parked yet");
        watch.park(true);
        assert!(watch.drained());
        pm.write_all(b"revoke").expect("written");
        assert!(!watch.drained(), "a byte waits");
        watch.park(false);
        let mut buf = [0; 6];
        app.read_exact(&mut buf).expect("read");
        assert!(!watch.drained(), "read, not handled yet");
        watch.park(true);
        assert!(watch.drained());
    }
}
