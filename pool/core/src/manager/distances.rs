//! The fabric beyond the node as the manager uses it: the hops between hosts (links on the
//! shortest path through the switches), so that of several offers of a name a consumer
//! gets the one fewest hops away. The driver gives them ([`Manager::set_distances`]) from
//! the inventory's topology (a `topology.conf`, an `ibnetdiscover` dump, discovery) or the
//! cost matrix its PMIx host serves.

use std::collections::HashMap;
use std::sync::Arc;

use super::Manager;
use crate::proto::{AppId, CdoId};

/// Most hosts a [`HostDistances`] holds (their count squared, two bytes each: 32 MiB).
pub const MAX_DISTANCE_HOSTS: usize = 4096;

/// Hops between the hosts of a fabric.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostDistances {
    /// Each host's row and column.
    index: HashMap<Arc<str>, usize>,
    /// `hops[i * n + j]`: from host `i` to host `j`; `u16::MAX` where no path joins them.
    hops: Vec<u16>,
}

/// Why hosts and hops make no [`HostDistances`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DistancesError {
    /// The matrix is not the host count squared.
    #[error(
        "a cost matrix of {entries} entries for {hosts} hosts: it has one entry per pair, row by row ({hosts} x {hosts})"
    )]
    Shape {
        /// Its entries.
        entries: usize,
        /// The hosts.
        hosts: usize,
    },
    /// More hosts than [`MAX_DISTANCE_HOSTS`].
    #[error("{0} hosts: the pool takes the distances of at most {MAX_DISTANCE_HOSTS}")]
    TooMany(usize),
    /// A host named twice.
    #[error("host {0:?} is named twice")]
    Duplicate(String),
}

impl HostDistances {
    /// The distances `hops` (row by row, `u16::MAX` for no path) between `hosts`.
    ///
    /// # Errors
    /// [`DistancesError`] when the matrix does not fit the hosts, or they are too many or
    /// named twice.
    pub fn new(hosts: Vec<String>, hops: Vec<u16>) -> Result<HostDistances, DistancesError> {
        let n = hosts.len();
        if n > MAX_DISTANCE_HOSTS {
            return Err(DistancesError::TooMany(n));
        }
        if hops.len() != n * n {
            return Err(DistancesError::Shape {
                entries: hops.len(),
                hosts: n,
            });
        }
        let mut index = HashMap::with_capacity(n);
        for (i, h) in hosts.into_iter().enumerate() {
            if index.insert(Arc::from(h.as_str()), i).is_some() {
                return Err(DistancesError::Duplicate(h));
            }
        }
        Ok(HostDistances { index, hops })
    }

    /// The hosts known.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no host is known.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Hops from host `a` to host `b`: 0 for one host, `None` for a host not in the fabric
    /// or hosts no path joins.
    pub fn between(&self, a: &str, b: &str) -> Option<u16> {
        if a == b {
            return Some(0);
        }
        let (&i, &j) = (self.index.get(a)?, self.index.get(b)?);
        let h = *self.hops.get(i * self.index.len() + j)?;
        (h != u16::MAX).then_some(h)
    }
}

/// How far a provider is from a consumer, for ordering offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Remoteness {
    /// This many hops (0: every provider as near, when no distances were set).
    Hops(u16),
    /// A host the fabric does not name: usable, after every known one.
    Unknown,
    /// Both hosts in the fabric, no path between them: not usable.
    Cut,
}

impl HostDistances {
    /// Whether host `a` is one of the fabric's.
    pub fn knows(&self, a: &str) -> bool {
        self.index.contains_key(a)
    }
}

impl Manager {
    /// Sets the hops between the pool's hosts: of several offers of a name, a consumer is
    /// ticketed from the one fewest hops away (after those it reads directly, before the
    /// least loaded; providers on hosts the fabric does not name come last).
    pub fn set_distances(&mut self, distances: HostDistances) {
        self.distances = distances;
    }

    /// How far `offer`'s provider is from `consumer` (every provider as near, without a
    /// look at their hosts, when no distances were set).
    pub(super) fn remoteness(&self, consumer: AppId, offer: CdoId) -> Remoteness {
        let d = &self.distances;
        if d.is_empty() {
            return Remoteness::Hops(0);
        }
        let host = |app: AppId| self.apps.get(&app).map(|a| a.host.as_str());
        let provider = self.cdos.get(&offer).and_then(|f| host(f.app()));
        let (Some(c), Some(p)) = (host(consumer), provider) else {
            return Remoteness::Unknown;
        };
        match d.between(c, p) {
            Some(h) => Remoteness::Hops(h),
            None if d.knows(c) && d.knows(p) => Remoteness::Cut,
            None => Remoteness::Unknown,
        }
    }

    /// The fabric beyond the node changed (a switch link went down or came up, seen by the
    /// driver's watch): `distances` are the hops now (hosts cut off kept, with no path to
    /// any), `changes` each link and whether it is up. Subscribers of
    /// [`EventKind::Fabric`](crate::events::EventKind::Fabric) are told of each; offers on
    /// hosts cut off from a consumer are no longer ticketed to it, and a demand left with
    /// only such offers fails naming the links down ([`crate::proto::Refusal::NoPath`]);
    /// consumers still waiting (a `require`) are ticketed once an offer reaches them.
    pub fn topology_changed(
        &mut self,
        now: std::time::Instant,
        distances: HostDistances,
        changes: &[(String, bool)],
    ) {
        self.advance(now);
        self.distances = distances;
        for (link, up) in changes {
            self.switch_links_down.retain(|l| l != link);
            if !up {
                self.switch_links_down.push(link.clone());
            }
            let state = if *up { "up" } else { "down" };
            self.fabric_event(now, &format!("switch link {link} {state}"));
        }
        // Consumers that waited for an offer cut off from them may be served now.
        for name in self.cdos.waited_names() {
            self.ticket_waiting(&name);
        }
    }

    /// Why no offer of `offers` reaches `consumer`: the provider hosts cut off from it
    /// and the switch links down, for [`crate::proto::Refusal::NoPath`].
    pub(super) fn no_path(&self, consumer: AppId, offers: impl Iterator<Item = CdoId>) -> String {
        let host = |app: AppId| self.apps.get(&app).map_or("", |a| a.host.as_str());
        let mut hosts: Vec<&str> = offers
            .filter_map(|o| self.cdos.get(&o).map(|f| host(f.app())))
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        let links = match self.switch_links_down.as_slice() {
            [] => "no switch link known down".to_string(),
            down => format!("switch links down: {}", down.join(", ")),
        };
        format!(
            "no path through the switches from {} to the providers on {} ({links})",
            host(consumer),
            hosts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_are_looked_up_by_host_and_bad_matrices_refused() {
        let d = HostDistances::new(
            vec!["a".into(), "b".into(), "c".into()],
            vec![0, 2, 4, 2, 0, u16::MAX, 4, u16::MAX, 0],
        )
        .expect("distances");
        assert_eq!(d.between("a", "b"), Some(2));
        assert_eq!(d.between("c", "a"), Some(4));
        assert_eq!(d.between("b", "c"), None, "no path");
        assert_eq!(d.between("a", "z"), None, "not in the fabric");
        assert_eq!(d.between("z", "z"), Some(0), "one host");
        let e = HostDistances::new(vec!["a".into()], vec![0, 1]).expect_err("shape");
        assert!(e.to_string().contains("2 entries for 1 hosts"), "{e}");
        let e = HostDistances::new(vec!["a".into(), "a".into()], vec![0; 4]).expect_err("twice");
        assert_eq!(e, DistancesError::Duplicate("a".into()));
    }
}
