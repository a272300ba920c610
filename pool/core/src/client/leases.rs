//! Leases the PM granted with offer events ([`crate::proto::Lease`]), kept by the offer's
//! name until a demand of a CDO of that name uses one ([`ClientCore::demand`]), the PM
//! revokes it, or it was held [`LEASE_HOLD`] unused; then it is released
//! ([`ToPm::Release`]), many in one message.
//!
//! [`ClientCore::demand`]: super::ClientCore::demand

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::HashMap;
use crate::attr::Attributes;
use crate::proto::{Lease, MAX_RELEASE, Source, ToPm, TransferId};

/// How long an unused lease is kept: a subscriber that demands what it is told of uses its
/// lease well within this; one that does not gives its leases back after it, so that the
/// offers they keep may be withdrawn without a round trip.
pub const LEASE_HOLD: Duration = Duration::from_secs(10);

/// Most leases a client keeps (the PM grants at most its `--max-leases`; past this the
/// oldest is released).
pub const MAX_HELD: usize = 65_536;

/// A lease kept for a demand.
#[derive(Debug)]
pub(super) struct Held {
    /// Where and how to get the bytes.
    pub(super) source: Source,
    /// The offer's sealed attributes.
    pub(super) attributes: Attributes,
    /// Whose bytes these are.
    pub(super) provider: Arc<str>,
    name: Arc<str>,
}

/// The leases a client holds (see the module's documentation).
#[derive(Debug, Default)]
pub(super) struct Leases {
    held: HashMap<TransferId, Held>,
    /// The leases of each name, oldest first: mostly one (no allocation).
    by_name: HashMap<Arc<str>, smallvec::SmallVec<[TransferId; 2]>>,
    /// Leases by the instant they are given back unused, earliest first (an entry whose
    /// lease was used or released meanwhile is skipped).
    expiry: VecDeque<(Instant, TransferId)>,
}

impl Leases {
    /// Keeps `lease`, granted at `now`; the oldest lease, to release, when too many are
    /// kept.
    pub(super) fn add(&mut self, now: Instant, lease: Lease) -> Option<TransferId> {
        let Lease {
            lease: id,
            name,
            source,
            attributes,
            provider,
        } = lease;
        self.by_name.entry(Arc::clone(&name)).or_default().push(id);
        let until = now.checked_add(LEASE_HOLD).unwrap_or(now);
        self.expiry.push_back((until, id));
        let held = Held {
            source,
            attributes,
            provider,
            name,
        };
        self.held.insert(id, held);
        if self.held.len() <= MAX_HELD {
            return None;
        }
        while let Some((_, oldest)) = self.expiry.pop_front() {
            if self.forget(oldest).is_some() {
                return Some(oldest);
            }
        }
        None
    }

    /// Takes the oldest lease of `name`, to use.
    pub(super) fn take(&mut self, name: &str) -> Option<(TransferId, Held)> {
        let ids = self.by_name.get_mut(name)?;
        let id = *ids.first()?;
        ids.remove(0);
        if ids.is_empty() {
            self.by_name.remove(name);
        }
        self.held.remove(&id).map(|h| (id, h))
    }

    /// Forgets lease `id`; whether it was kept.
    pub(super) fn forget(&mut self, id: TransferId) -> Option<Held> {
        let held = self.held.remove(&id)?;
        if let Some(ids) = self.by_name.get_mut(&held.name) {
            ids.retain(|x| *x != id);
            if ids.is_empty() {
                self.by_name.remove(&held.name);
            }
        }
        Some(held)
    }

    /// When the oldest lease is due to be given back (perhaps used already: then nothing
    /// happens at that instant).
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.expiry.front().map(|(at, _)| *at)
    }

    /// The releases of the leases held unused until `now` or longer, forgotten now.
    pub(super) fn expire(&mut self, now: Instant) -> Vec<ToPm> {
        let mut ids = Vec::new();
        while let Some(&(at, id)) = self.expiry.front() {
            if at > now {
                break;
            }
            self.expiry.pop_front();
            if self.forget(id).is_some() {
                ids.push(id);
            }
        }
        if self.held.is_empty() {
            self.expiry.clear();
        }
        ids.chunks(MAX_RELEASE)
            .map(|c| ToPm::Release { leases: c.to_vec() })
            .collect()
    }

    /// Forgets every lease (the connection ended).
    pub(super) fn clear(&mut self) {
        *self = Leases::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: TransferId, name: &str) -> Lease {
        Lease {
            lease: id,
            name: name.into(),
            source: Source::Stream { len: 1 },
            attributes: Attributes::new(),
            provider: "p:0".into(),
        }
    }

    #[test]
    fn leases_are_used_oldest_first_by_name_and_given_back_when_held_too_long() {
        let t0 = Instant::now();
        let mut l = Leases::default();
        assert_eq!(l.add(t0, lease(1, "a")), None);
        assert_eq!(l.add(t0 + Duration::from_secs(1), lease(2, "a")), None);
        assert_eq!(l.add(t0 + Duration::from_secs(2), lease(3, "b")), None);
        assert_eq!(l.take("a").map(|(id, _)| id), Some(1));
        assert!(l.take("c").is_none());
        assert_eq!(l.next_expiry(), Some(t0 + LEASE_HOLD));
        // Lease 1 was used: its instant passes without a release.
        assert!(l.expire(t0 + LEASE_HOLD).is_empty());
        assert_eq!(
            l.expire(t0 + LEASE_HOLD + Duration::from_secs(2)),
            vec![ToPm::Release { leases: vec![2, 3] }]
        );
        assert!(l.take("a").is_none() && l.take("b").is_none());
        assert_eq!(l.next_expiry(), None);
    }

    #[test]
    fn past_the_most_kept_the_oldest_lease_is_released() {
        let t0 = Instant::now();
        let mut l = Leases::default();
        for id in 0..MAX_HELD as u64 {
            assert_eq!(l.add(t0, lease(id, "x")), None);
        }
        l.forget(0);
        // Lease 0 went already: the oldest kept is 1.
        assert_eq!(l.add(t0, lease(MAX_HELD as u64, "x")), None);
        assert_eq!(l.add(t0, lease(MAX_HELD as u64 + 1, "x")), Some(1));
        assert_eq!(l.take("x").map(|(id, _)| id), Some(2));
    }
}
