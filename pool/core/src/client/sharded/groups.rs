//! Groups across shards (see docs/developers/shards.md): a group's demand goes to the home
//! of the group's name, which names every member and tickets those whose names live there;
//! each other member is declared and demanded at its own home, and its arrival counted for
//! the group at the group's shard, by the id reserved for it there. The group's call is
//! answered once every member arrived wherever it lives; [`Sharded::take_group`] gathers
//! them in the producer's order.

use std::time::Instant;

use super::{Route, Sharded, Waiter};
use crate::attr::Attributes;
use crate::client::cdos::Elsewhere;
use crate::client::{CallId, CallResult, Demand, Driver, GroupHere, GroupMember};
use crate::proto::CdoId;

/// A member of a demanded group that lives at another shard than its group.
pub(super) struct Far<D> {
    /// Its place in the group.
    index: usize,
    /// Its id in this app: declared at its home (the id reserved at the group's shard
    /// when that failed).
    cdo: CdoId,
    name: String,
    /// Its bytes and attributes when its demand found them here at once.
    here: Option<(D, Attributes)>,
}

impl<T: Driver> Sharded<T> {
    /// Demands group `group` and its members (see
    /// [`ClientCore::demand_group`](crate::client::ClientCore::demand_group)): the group's
    /// home names them and holds those that live there; the others are demanded at their
    /// homes as they are named. The call is answered once every member arrived.
    ///
    /// # Errors
    /// As [`ClientCore::demand_group`](crate::client::ClientCore::demand_group) and
    /// [`Sharded::at`].
    pub fn demand_group(
        &mut self,
        now: Instant,
        group: CdoId,
        waiter: T::Waiter,
    ) -> CallResult<(CdoId, CallId)> {
        self.at(now, Route::Cdo(group))?
            .demand_group(now, group, Waiter::App(waiter))
    }

    /// Offers of group `group` (a CDO this app declared) with the members named `members`
    /// keep their order only when every member lives at the group's shard (always so in a
    /// pool of one manager): the offers then travel on one connection, the members' first.
    /// Otherwise a producer offers the members before the group, so that a consumer that
    /// hears of the group finds every member offered.
    pub fn one_home(&self, group: CdoId, members: &[String]) -> bool {
        let home = self.shard_of(Route::Cdo(group));
        members.iter().all(|m| self.shards.home(m) == home)
    }

    /// Demands at their homes the members `far` that a group's shard named and left
    /// (declared there, each demand's answer counted for its group: `Waiter::Member`).
    /// A member that cannot be demanded is counted failed at once.
    pub(super) fn demand_elsewhere(&mut self, now: Instant, far: Vec<Elsewhere>) {
        for Elsewhere {
            group,
            index,
            cdo: reserved,
            name,
        } in far
        {
            let asked = self.at(now, Route::Name(&name)).and_then(|home| {
                let cdo = home.declare(&name)?;
                let demand = home.demand(now, cdo, Waiter::Member(reserved));
                Ok((cdo, demand))
            });
            let (cdo, here, result) = match asked {
                Ok((cdo, Ok(Demand::Here(data, attributes)))) => {
                    (cdo, Some((data, attributes)), Some(Ok(cdo)))
                }
                Ok((cdo, Ok(Demand::Waiting(_)))) => (cdo, None, None),
                Ok((cdo, Err(e))) => (cdo, None, Some(Err(e))),
                Err(e) => (reserved, None, Some(Err(e))),
            };
            self.elsewhere.entry(group).or_default().push(Far {
                index,
                cdo,
                name,
                here,
            });
            if let Some(result) = result {
                self.member_answered(reserved, &result);
            }
        }
    }

    /// The demand of the member reserved as `reserved` at its group's shard ended with
    /// `result` at its home: counted for the group there. Never an answer of the app's.
    pub(super) fn member_answered(&mut self, reserved: CdoId, result: &CallResult<u64>) {
        if let Some(core) = self.known_mut(Route::Cdo(reserved)) {
            core.member_arrived(reserved, result);
        }
    }

    /// What of demanded group `group` is here, wherever its members live (see
    /// [`ClientCore::take_group`](crate::client::ClientCore::take_group)), in the
    /// producer's order.
    pub fn take_group(&mut self, group: CdoId) -> Option<GroupHere<T::Data>> {
        let mut here = self.known_mut(Route::Cdo(group))?.take_group(group)?;
        let Some(far) = self.elsewhere.remove(&group) else {
            return Some(here);
        };
        let first = here.ids.first().copied().unwrap_or_default();
        let mut slots: Vec<Option<GroupMember<T::Data>>> = here.ids.iter().map(|_| None).collect();
        for m in std::mem::take(&mut here.members) {
            if let Some(slot) = usize::try_from(m.cdo - first)
                .ok()
                .and_then(|i| slots.get_mut(i))
            {
                *slot = Some(m);
            }
        }
        for f in far {
            let Some(slot) = slots.get_mut(f.index) else {
                continue;
            };
            here.ids[f.index] = f.cdo;
            let arrived = f.here.or_else(|| {
                self.known_mut(Route::Cdo(f.cdo))
                    .and_then(|core| core.take_here(f.cdo))
            });
            if let Some((data, attributes)) = arrived {
                *slot = Some(GroupMember {
                    cdo: f.cdo,
                    name: f.name,
                    data,
                    attributes,
                });
            }
        }
        here.members = slots.into_iter().flatten().collect();
        Some(here)
    }
}
