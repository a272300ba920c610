//! Leases the PM granted with offer events ([`crate::proto::Grant`]), kept by the offer's
//! name until a demand of a CDO of that name uses one ([`ClientCore::demand`]), the PM
//! revokes it, or it was held [`LEASE_HOLD`] unused; then it is released
//! ([`ToPm::Release`]), many in one message.
//!
//! **Only while the table is known to be current** ([`Leases::current`]): a lease of
//! memory is used only within half the PM's lease grace of the last instant the driver
//! had handled everything the PM had written ([`ClientCore::drained`]). The PM lets a
//! revoked lease's offer go (and its provider reuse the memory) a grace after it wrote the
//! revocation; a revocation written before that instant was handled and took the lease
//! out of the table, and one written after it leaves the offer there for at least the
//! other half. A client whose reader is stalled (or behind by more than that) stops using
//! leases of memory until it catches up: its demands go to the PM, which knows. Leases of
//! bytes that came with the event are used whatever: the bytes are the offer's.
//!
//! [`ClientCore::demand`]: super::ClientCore::demand
//! [`ClientCore::drained`]: super::ClientCore::drained

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::HashMap;
use crate::attr::{self, Attributes};
use crate::events::PoolEvent;
use crate::proto::{Grant, MAX_RELEASE, Source, ToPm, TransferId};

/// How long an unused lease is kept: a subscriber that demands what it is told of uses its
/// lease well within this; one that does not gives its leases back after it, so that the
/// offers they keep may be withdrawn without a round trip.
pub const LEASE_HOLD: Duration = Duration::from_secs(10);

/// Most leases a client keeps (the PM grants at most its `--max-leases`; past this the
/// oldest is released).
pub const MAX_HELD: usize = 65_536;

/// A lease as a client keeps it: the grant, with what its offer's event says of the offer.
#[derive(Debug, PartialEq)]
pub(super) struct Lease {
    /// The lease's id.
    pub(super) lease: TransferId,
    /// The offer's CDO name.
    pub(super) name: Arc<str>,
    /// Where and how to get the bytes.
    pub(super) source: Source,
    /// The offer's sealed attributes (without the built-in name and size).
    pub(super) attributes: Attributes,
    /// Whose bytes these are (`component:index`).
    pub(super) provider: Arc<str>,
}

impl Lease {
    /// Lease `grant`, granted with offer event `event` of an offer by `provider` (its
    /// `component:index`, [`Leases::provider`]); its id back (to release at once) when the
    /// event names no CDO, whose demand it could serve.
    pub(super) fn of(
        grant: Grant,
        event: &PoolEvent,
        provider: Arc<str>,
    ) -> Result<Lease, TransferId> {
        let Some(name) = event.cdo.as_deref() else {
            return Err(grant.lease);
        };
        let built_in = |k: &str| k == attr::NAME || k == attr::LOCAL_SIZE;
        let attributes = event
            .attributes
            .iter()
            .filter(|(k, _)| !built_in(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Lease {
            lease: grant.lease,
            name: name.into(),
            source: grant.source,
            attributes,
            provider,
        })
    }
}

/// A lease kept for a demand.
#[derive(Debug)]
pub(super) struct Held {
    /// Where and how to get the bytes.
    pub(super) source: Source,
    /// The offer's sealed attributes.
    pub(super) attributes: Attributes,
    /// Whose bytes these are.
    pub(super) provider: Arc<str>,
    /// The offer's CDO name.
    pub(super) name: Arc<str>,
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
    /// The last provider named ([`Leases::provider`]): a stream's offers mostly come
    /// from one.
    last_provider: Option<Arc<str>>,
    /// The PM's lease grace ([`Leases::current`]); zero until the welcome.
    grace: Duration,
    /// The last instant the driver had handled everything the PM had written
    /// ([`Leases::drained`]); none yet.
    drained: Option<Instant>,
}

impl Leases {
    /// The `component:index` of an offer's provider, as the CDO a lease serves carries it
    /// ([`crate::attr::PROVIDER`]): the last one's again when it is the same, rather than
    /// a new string per lease.
    pub(super) fn provider(&mut self, component: &str, index: i64) -> Arc<str> {
        if let Some(p) = &self.last_provider
            && p.rsplit_once(':')
                .is_some_and(|(c, i)| c == component && i.parse() == Ok(index))
        {
            return Arc::clone(p);
        }
        let p: Arc<str> = format!("{component}:{index}").into();
        self.last_provider = Some(Arc::clone(&p));
        p
    }

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

    /// Takes the oldest lease of `name` if `fits` it.
    pub(super) fn take_if(
        &mut self,
        name: &str,
        fits: impl FnOnce(&Held) -> bool,
    ) -> Option<(TransferId, Held)> {
        let oldest = self.by_name.get(name)?.first()?;
        if !fits(self.held.get(oldest)?) {
            return None;
        }
        self.take(name)
    }

    /// The PM's lease grace (its welcome's `lease_grace`).
    pub(super) fn set_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// Everything the PM had written by `at` was handled (see the module's
    /// documentation); an earlier instant than the last one told changes nothing.
    pub(super) fn drained(&mut self, at: Instant) {
        if self.drained.is_none_or(|d| d < at) {
            self.drained = Some(at);
        }
    }

    /// The instant the table was last known current, if a lease of memory may be used
    /// (or a copy of one end) at `now`: no later than half the PM's lease grace after it.
    /// `None` when it is older (or none was told): the lease's offer may be gone already.
    pub(super) fn current(&self, now: Instant) -> Option<Instant> {
        self.drained
            .filter(|&d| now.saturating_duration_since(d) < self.grace / 2)
    }

    /// Whether a copy of a lease of memory taken when the table was last current at
    /// `drained` ([`Leases::current`]) and finished at `now` is surely of the offer's
    /// bytes: it ended within half the grace of `drained`.
    pub(super) fn copied_in_time(&self, drained: Instant, now: Instant) -> bool {
        now.saturating_duration_since(drained) < self.grace / 2
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

    /// Forgets every lease (the connection ended), and when the table was current: a
    /// new connection's reader tells it anew.
    pub(super) fn clear(&mut self) {
        *self = Leases {
            grace: self.grace,
            ..Leases::default()
        };
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
    fn a_lease_takes_the_offers_name_attributes_and_provider_from_its_event() {
        let mut attributes = Attributes::new();
        attributes.insert(attr::NAME.into(), crate::attr::AttrValue::Str("n".into()));
        attributes.insert(attr::LOCAL_SIZE.into(), crate::attr::AttrValue::Uint(8));
        attributes.insert(".user.step".into(), crate::attr::AttrValue::Uint(3));
        let mut event = PoolEvent {
            kind: crate::events::EventKind::Offer,
            serial: 1,
            time: 0,
            before: false,
            needs_ack: false,
            app: 2,
            component: "sim".into(),
            index: 4,
            cdo: Some("n".into()),
            attributes,
            detail: String::new(),
        };
        let grant = |lease| Grant {
            lease,
            source: Source::Stream { len: 8 },
        };
        let mut leases = Leases::default();
        let provider = leases.provider(&event.component, event.index);
        let l = Lease::of(grant(7), &event, provider).expect("a CDO's event");
        assert_eq!((l.lease, &*l.name, &*l.provider), (7, "n", "sim:4"));
        let only: Vec<&str> = l.attributes.keys().map(String::as_str).collect();
        assert_eq!(only, [".user.step"], "the sealed attributes, no built-ins");
        event.cdo = None;
        let again = leases.provider(&event.component, event.index);
        assert!(
            Arc::ptr_eq(&again, &l.provider),
            "the same provider's name, kept"
        );
        assert_eq!(&*leases.provider("sim", 5), "sim:5");
        assert_eq!(&*leases.provider("other", 5), "other:5");
        assert_eq!(
            Lease::of(grant(8), &event, again),
            Err(8),
            "nothing to demand"
        );
    }

    #[test]
    fn leases_of_memory_are_current_for_half_the_grace_after_the_last_drain() {
        let t0 = Instant::now();
        let half = Duration::from_millis(500);
        let mut l = Leases::default();
        l.set_grace(2 * half);
        assert_eq!(l.current(t0), None, "nothing drained yet");
        l.drained(t0);
        assert_eq!(l.current(t0 + half - Duration::from_millis(1)), Some(t0));
        assert_eq!(l.current(t0 + half), None);
        // An earlier instant told later changes nothing.
        l.drained(t0 + half);
        l.drained(t0);
        assert_eq!(l.current(t0 + half), Some(t0 + half));
        assert!(l.copied_in_time(t0 + half, t0 + 2 * half - Duration::from_millis(1)));
        assert!(!l.copied_in_time(t0 + half, t0 + 2 * half));
        l.clear();
        assert_eq!(l.current(t0 + half), None, "a new connection drains anew");
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
