//! Who waits for admission, how long, and who goes when too many do.
//!
//! A connection that has not joined yet costs the PM a socket, a task and a buffer, and
//! anybody who can reach a listening address can open one. The manager keeps the rules,
//! so they run on its clock and are tested in memory:
//! - every connection must have its JOIN accepted within [`Limits::join_timeout`] of
//!   connecting; past it, it is refused ([`Refusal::NotAdmitted`]) and closed;
//! - connections over the PM's Unix socket ([`Peer::Local`]) are not counted: the socket's
//!   directory is readable only by the PM's user, whom the threat model trusts (and a
//!   workflow may start hundreds of processes on the PM's host at once);
//! - a TCP peer address has at most [`Limits::max_unjoined_per_peer`] connections
//!   waiting; its next one makes its own oldest go;
//! - at most [`Limits::max_unjoined`] wait in all; a newcomer makes the oldest connection
//!   of the peer with the most waiting go. So a flood from a few addresses evicts itself,
//!   and an honest JOIN from elsewhere still gets its turn (it needs one round trip).
//!
//! What the manager says about the connections it closes this way is rate-limited
//! ([`Throttle`]): a flood of bad connections must not become a flood of log lines.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::{Conn, ConnId, Manager, later};
use crate::proto::{FromPm, Op, Refusal};

/// Default of [`Limits::join_timeout`]: 10 s.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`Limits::max_unjoined_per_peer`].
pub const PER_PEER: usize = 256;
/// Default of [`Limits::max_unjoined`].
pub const WAITING: usize = 1024;

/// Where a connection comes from, as far as admission is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A TCP peer address.
    Tcp(IpAddr),
    /// The PM's own Unix socket (its user's processes): not counted; with the peer's
    /// process id where the kernel gave it (`SO_PEERCRED`): a JOIN on it may announce only
    /// that process's memory for same-host copies.
    Local(Option<u32>),
}

/// How long and how many connections may wait for admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a new connection has to have its JOIN accepted before it is closed.
    pub join_timeout: Duration,
    /// Most TCP connections waiting for admission in all (at least 1); a newcomer past it
    /// evicts the oldest waiting connection of the address with the most waiting.
    pub max_unjoined: usize,
    /// Most TCP connections waiting for admission from one address (at least 1); its next
    /// one evicts its own oldest.
    pub max_unjoined_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            join_timeout: JOIN_TIMEOUT,
            max_unjoined: WAITING,
            max_unjoined_per_peer: PER_PEER,
        }
    }
}

/// The connections waiting for admission: their deadlines, and the TCP ones by address,
/// oldest first (connection ids grow with arrival).
/// Drivers that bound connections of their own the same way (the metrics endpoint's
/// connections waiting to send their request) use it too: [`Admission::new`],
/// [`Admission::arrive`], [`Admission::leave`].
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    deadlines: BTreeSet<(Instant, ConnId)>,
    due: HashMap<ConnId, Instant>,
    waiting: BTreeMap<ConnId, IpAddr>,
    by_peer: HashMap<IpAddr, usize>,
    /// What is logged of the connections closed unjoined.
    log: Throttle,
}

impl Default for Admission {
    fn default() -> Admission {
        Admission::new(Limits::default())
    }
}

impl Admission {
    /// No connection waiting yet, under `limits`.
    pub fn new(limits: Limits) -> Admission {
        let mut a = Admission {
            limits,
            deadlines: BTreeSet::new(),
            due: HashMap::new(),
            waiting: BTreeMap::new(),
            by_peer: HashMap::new(),
            log: Throttle::new(Duration::from_secs(1), 10),
        };
        a.set_limits(limits);
        a
    }

    /// Takes `limits` (each count at least 1) for the connections to come.
    pub(super) fn set_limits(&mut self, limits: Limits) {
        self.limits = Limits {
            max_unjoined: limits.max_unjoined.max(1),
            max_unjoined_per_peer: limits.max_unjoined_per_peer.max(1),
            ..limits
        };
    }

    /// Counts the newcomer `conn` from `peer`, arrived `now`, among the waiting; returns
    /// the connection that must go to make room for it, if one must (it no longer waits).
    pub fn arrive(&mut self, now: Instant, conn: ConnId, peer: Peer) -> Option<ConnId> {
        let at = later(now, self.limits.join_timeout);
        self.deadlines.insert((at, conn));
        self.due.insert(conn, at);
        let Peer::Tcp(ip) = peer else {
            return None;
        };
        let mine = self.by_peer.get(&ip).copied().unwrap_or(0);
        let evict = if mine >= self.limits.max_unjoined_per_peer {
            self.oldest_of(ip)
        } else if self.waiting.len() >= self.limits.max_unjoined {
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
    pub fn leave(&mut self, conn: ConnId) {
        if let Some(at) = self.due.remove(&conn) {
            self.deadlines.remove(&(at, conn));
        }
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

    /// The earliest deadline of a waiting connection.
    fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// The waiting connections whose deadline is `now` or earlier; they no longer wait.
    fn overdue(&mut self, now: Instant) -> Vec<ConnId> {
        let mut late = Vec::new();
        while let Some(&(at, conn)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.leave(conn);
            late.push(conn);
        }
        late
    }

    fn oldest_of(&self, ip: IpAddr) -> Option<ConnId> {
        self.waiting
            .iter()
            .find(|(_, p)| **p == ip)
            .map(|(conn, _)| *conn)
    }
}

impl Manager {
    /// Challenges the new connection `conn` from `peer` and counts it among the waiting,
    /// making room when too many wait ([`Manager::connected_from`]).
    pub(super) fn challenge(&mut self, now: Instant, conn: ConnId, nonce: [u8; 32], peer: Peer) {
        if let Some(old) = self.admission.arrive(now, conn, peer) {
            let Limits {
                max_unjoined,
                max_unjoined_per_peer,
                ..
            } = self.admission.limits;
            self.unadmit(
                old,
                format!(
                    "it made room for connection {conn}: too many connections wait to join \
                     (at most {max_unjoined} in all, {max_unjoined_per_peer} per address; \
                     maestro pm --max-unjoined, --max-unjoined-per-peer)"
                ),
            );
        }
        self.conns.insert(conn, Conn::Challenged(nonce, peer));
        self.out.push(conn, FromPm::Challenge { nonce });
    }

    /// `conn` no longer waits for admission (its JOIN is handled, or it is gone).
    pub(super) fn admitted(&mut self, conn: ConnId) {
        self.admission.leave(conn);
    }

    /// The earliest instant a waiting connection's time to join runs out.
    pub(super) fn next_join_deadline(&self) -> Option<Instant> {
        self.admission.next_deadline()
    }

    /// Refuses and closes the connections whose time to join ran out by `now`.
    pub(super) fn expire_unjoined(&mut self, now: Instant) {
        let timeout = self.admission.limits.join_timeout;
        for conn in self.admission.overdue(now) {
            self.unadmit(
                conn,
                format!("it did not join within {timeout:?} (maestro pm --join-timeout)"),
            );
        }
    }

    /// Refuses the waiting connection `conn` for `why` and closes it.
    fn unadmit(&mut self, conn: ConnId, why: String) {
        self.refuse_join(conn, Refusal::NotAdmitted(why));
    }

    /// Refuses `conn`'s JOIN (or its wait for one) for `why`, says so in the log (at most
    /// ten lines a second: the next line says how many were held back) and closes it.
    pub(super) fn refuse_join(&mut self, conn: ConnId, why: Refusal) {
        self.conns.remove(&conn);
        if why == Refusal::Grace {
            // A new app in a grace period comes back when it ends: nothing went wrong.
            tracing::debug!("pool manager: connection {conn} waits for the grace period's end");
        } else {
            self.warn_refused(conn, &why);
        }
        self.refuse(conn, Op::Join, None, why);
        self.out.close(conn);
    }

    /// Says in the log why `conn`'s JOIN was refused (at most ten lines a second: the next
    /// line says how many were held back).
    fn warn_refused(&mut self, conn: ConnId, why: &Refusal) {
        match self.admission.log.admit(self.events.now()) {
            Some(0) => tracing::warn!("pool manager: connection {conn} was refused at JOIN: {why}"),
            Some(held) => tracing::warn!(
                "pool manager: connection {conn} was refused at JOIN: {why} ({held} similar messages held back)"
            ),
            None => {}
        }
    }
}

/// Lets a kind of log line through at most `per_window` times a `window`, and says how
/// many were held back when the next window opens: a flood of bad connections must not
/// become a flood of log lines (a PM once wrote 890,000 warnings in 40 s).
#[derive(Debug)]
pub struct Throttle {
    window: Duration,
    per_window: u32,
    opened: Option<Instant>,
    passed: u32,
    held: u64,
}

impl Throttle {
    /// At most `per_window` lines each `window`.
    pub const fn new(window: Duration, per_window: u32) -> Throttle {
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
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
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

    fn limits(per_peer: usize, total: usize) -> Admission {
        Admission::new(Limits {
            join_timeout: Duration::from_secs(10),
            max_unjoined: total,
            max_unjoined_per_peer: per_peer,
        })
    }

    #[test]
    fn a_peer_at_its_cap_evicts_its_own_oldest() {
        let t = Instant::now();
        let mut a = limits(3, 100);
        for conn in 1..=3 {
            assert_eq!(a.arrive(t, conn, ip(1)), None);
        }
        assert_eq!(a.arrive(t, 4, ip(2)), None);
        assert_eq!(a.arrive(t, 5, ip(1)), Some(1), "peer 1's oldest goes");
        assert_eq!(a.arrive(t, 6, ip(1)), Some(2));
        a.leave(3);
        assert_eq!(a.arrive(t, 7, ip(1)), None, "room again after one left");
        assert_eq!(a.waiting.len(), 4);
        assert_eq!(
            a.deadlines.len(),
            4,
            "the evicted and the gone wait no more"
        );
    }

    #[test]
    fn when_full_the_heaviest_peer_pays_not_the_newcomer() {
        let t = Instant::now();
        let mut a = limits(100, 10);
        for conn in 1..=8 {
            a.arrive(t, conn, ip(66));
        }
        a.arrive(t, 9, ip(2));
        a.arrive(t, 10, ip(3));
        // Full: an honest newcomer from a fourth address evicts the flood's oldest.
        assert_eq!(a.arrive(t, 11, ip(4)), Some(1));
        assert_eq!(a.arrive(t, 12, ip(5)), Some(2));
        assert_eq!(a.waiting.len(), 10);
        // The honest ones are still waiting.
        for c in [9, 10, 11, 12] {
            assert!(a.waiting.contains_key(&c));
        }
    }

    #[test]
    fn unix_socket_connections_are_not_counted_but_have_a_deadline() {
        let t = Instant::now();
        let mut a = limits(1, 1);
        for conn in 1..=50 {
            assert_eq!(a.arrive(t, conn, Peer::Local(None)), None);
        }
        assert_eq!(a.waiting.len(), 0);
        a.leave(7);
        a.leave(700); // unknown: ignored
        assert_eq!(a.arrive(t, 51, ip(1)), None);
        assert_eq!(a.arrive(t, 52, ip(2)), Some(51));
        assert_eq!(a.next_deadline(), Some(t + Duration::from_secs(10)));
        assert_eq!(
            a.overdue(t + Duration::from_millis(9999)),
            Vec::<ConnId>::new()
        );
        let late = a.overdue(t + Duration::from_secs(10));
        assert_eq!(late.len(), 49 + 1, "every waiting one, TCP or not");
        assert!(!late.contains(&7) && !late.contains(&51));
        assert_eq!(a.next_deadline(), None);
        assert!(a.waiting.is_empty() && a.by_peer.is_empty());
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
