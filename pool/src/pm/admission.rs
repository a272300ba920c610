//! Who waits for admission at the pool manager, and who goes when too many do.
//!
//! A connection that has not joined yet costs the PM a socket, a task and a buffer, and
//! anybody who can reach a listening address can open one. The rules, pure logic kept
//! apart from the sockets so they are tested without IO:
//! - connections over the PM's Unix socket are not counted: the socket's directory is
//!   readable only by the PM's user, whom the threat model trusts (and a workflow may start
//!   hundreds of processes on the PM's host at once);
//! - a TCP peer address has at most [`PER_PEER`] connections waiting; its next one makes
//!   its own oldest go;
//! - at most [`WAITING`] wait in all; a newcomer makes the oldest connection of the peer
//!   with the most waiting go. So a flood from a few addresses evicts itself, and an honest
//!   JOIN from elsewhere still gets its turn (it needs one round trip).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::ConnId;

/// Default most connections waiting for admission from one TCP peer address.
pub const PER_PEER: usize = 256;
/// Default most connections waiting for admission in all.
pub const WAITING: usize = 1024;

/// Where a connection comes from, as far as admission is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Peer {
    /// A TCP peer address.
    Tcp(IpAddr),
    /// The PM's own Unix socket (its user's processes): not counted; with the peer's
    /// process id where the kernel gave it.
    Local(Option<u32>),
}

/// The connections waiting for admission, oldest first (connection ids grow with arrival).
pub(crate) struct Admission {
    per_peer: usize,
    total: usize,
    waiting: BTreeMap<ConnId, IpAddr>,
    by_peer: HashMap<IpAddr, usize>,
}

impl Admission {
    /// At most `per_peer` waiting connections per TCP address and `total` in all (each at
    /// least 1).
    pub(crate) fn new(per_peer: usize, total: usize) -> Admission {
        Admission {
            per_peer: per_peer.max(1),
            total: total.max(1),
            waiting: BTreeMap::new(),
            by_peer: HashMap::new(),
        }
    }

    /// Counts the newcomer `conn` from `peer` among the waiting; returns the connection
    /// that must go to make room for it, if one must.
    pub(crate) fn arrive(&mut self, conn: ConnId, peer: Peer) -> Option<ConnId> {
        let Peer::Tcp(ip) = peer else {
            return None;
        };
        let mine = self.by_peer.get(&ip).copied().unwrap_or(0);
        let evict = if mine >= self.per_peer {
            self.oldest_of(ip)
        } else if self.waiting.len() >= self.total {
            self.by_peer
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(ip, _)| *ip)
                .and_then(|heaviest| self.oldest_of(heaviest))
        } else {
            None
        };
        if let Some(old) = evict {
            self.leave(old);
        }
        self.waiting.insert(conn, ip);
        *self.by_peer.entry(ip).or_default() += 1;
        evict
    }

    /// `conn` stops waiting (joined, refused or gone); unknown connections are ignored.
    pub(crate) fn leave(&mut self, conn: ConnId) {
        let Some(ip) = self.waiting.remove(&conn) else {
            return;
        };
        if let Some(n) = self.by_peer.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.by_peer.remove(&ip);
            }
        }
    }

    fn oldest_of(&self, ip: IpAddr) -> Option<ConnId> {
        self.waiting
            .iter()
            .find(|(_, p)| **p == ip)
            .map(|(conn, _)| *conn)
    }
}

/// Lets a kind of log line through at most `per_window` times a `window`, and says how
/// many were held back when the next window opens: a flood of bad connections must not
/// become a flood of log lines (a PM once wrote 890,000 warnings in 40 s).
pub(crate) struct Throttle {
    window: Duration,
    per_window: u32,
    opened: Option<Instant>,
    passed: u32,
    held: u64,
}

impl Throttle {
    /// At most `per_window` lines each `window`.
    pub(crate) const fn new(window: Duration, per_window: u32) -> Throttle {
        Throttle {
            window,
            per_window,
            opened: None,
            passed: 0,
            held: 0,
        }
    }

    /// Whether a line may be written `now`, and how many were held back before it (to
    /// say so in that line).
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .opened
            .is_none_or(|at| now.duration_since(at) >= self.window)
        {
            self.opened = Some(now);
            self.passed = 0;
        }
        if self.passed < self.per_window {
            self.passed += 1;
            Some(std::mem::take(&mut self.held))
        } else {
            self.held += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Peer {
        Peer::Tcp(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn a_peer_at_its_cap_evicts_its_own_oldest() {
        let mut a = Admission::new(3, 100);
        for conn in 1..=3 {
            assert_eq!(a.arrive(conn, ip(1)), None);
        }
        assert_eq!(a.arrive(4, ip(2)), None);
        assert_eq!(a.arrive(5, ip(1)), Some(1), "peer 1's oldest goes");
        assert_eq!(a.arrive(6, ip(1)), Some(2));
        a.leave(3);
        assert_eq!(a.arrive(7, ip(1)), None, "room again after one left");
        assert_eq!(a.waiting.len(), 4);
    }

    #[test]
    fn when_full_the_heaviest_peer_pays_not_the_newcomer() {
        let mut a = Admission::new(100, 10);
        for conn in 1..=8 {
            a.arrive(conn, ip(66));
        }
        a.arrive(9, ip(2));
        a.arrive(10, ip(3));
        // Full: an honest newcomer from a fourth address evicts the flood's oldest.
        assert_eq!(a.arrive(11, ip(4)), Some(1));
        assert_eq!(a.arrive(12, ip(5)), Some(2));
        assert_eq!(a.waiting.len(), 10);
        // The honest ones are still waiting.
        for c in [9, 10, 11, 12] {
            assert!(a.waiting.contains_key(&c));
        }
    }

    #[test]
    fn unix_socket_connections_are_not_counted() {
        let mut a = Admission::new(1, 1);
        for conn in 1..=50 {
            assert_eq!(a.arrive(conn, Peer::Local(None)), None);
        }
        assert_eq!(a.waiting.len(), 0);
        a.leave(7); // unknown: ignored
        assert_eq!(a.arrive(51, ip(1)), None);
        assert_eq!(a.arrive(52, ip(2)), Some(51));
    }

    #[test]
    fn throttled_lines_say_how_many_were_held_back() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_secs(1), 2);
        assert_eq!(t.admit(t0), Some(0));
        assert_eq!(t.admit(t0), Some(0));
        for _ in 0..1000 {
            assert_eq!(t.admit(t0 + Duration::from_millis(500)), None);
        }
        assert_eq!(t.admit(t0 + Duration::from_secs(1)), Some(1000));
        assert_eq!(t.admit(t0 + Duration::from_secs(1)), Some(0));
        assert_eq!(t.admit(t0 + Duration::from_secs(1)), None);
    }
}
