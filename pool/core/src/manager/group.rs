//! A group's demand ([`crate::proto::ToPm::DemandGroup`]): the consumer names its group CDO and the ids
//! it reserved; once a group of that name is offered, the manager declares the members
//! itself with those ids, in the producer's order, tells the consumer their names
//! ([`FromPm::GroupMembers`]) and tickets each as demanded. One message from the consumer,
//! one answer plus one ticket per member back, however many members: the per-member
//! declares and demands of the client's other path go away.
//!
//! A group is a CDO whose sealed attributes say [`attr::IS_GROUP`] and list its members in
//! [`attr::GROUP_MEMBERS`] (a JSON array of names; see `pool`'s groups).
//!
//! In a sharded pool the group's home names every member but declares and tickets only
//! those whose names live here: the client demands each other member at its own home
//! (`client::sharded`), and their ids reserved here stay unused.

use std::sync::Arc;

use super::policy::{self, MAX_GROUP, checked_members};
use super::{Cdo, ConnId, Manager, State, Want};
use crate::attr::{self, Attributes};
use crate::proto::{self, AppId, CdoId, FromPm, OfferExtras, Op, Refusal};

/// Members ticketed per step of [`Manager::work`]: the driver sends each slice of a group's
/// tickets before the next is made, so the consumer copies members while the manager
/// tickets the rest (one step for the whole group kept the consumer idle until its last
/// ticket). Measured with `maestro bench pool --group 10000` (8 B, 4 and 64 KiB): slices of
/// 64, 256 and 1024 are alike within the machine's noise.
pub const GROUP_SLICE: usize = 256;

impl Manager {
    /// Tickets a slice ([`GROUP_SLICE`]) of the demanded groups' members still to
    /// ticket; one with no offer yet waits for one, one disposed meanwhile is passed over.
    pub(super) fn ticket_backlog(&mut self) {
        for _ in 0..GROUP_SLICE {
            let Some(id) = self.backlog.pop_front() else {
                break;
            };
            self.ticket(id);
            let Some(c) = self.cdos.get(&id) else {
                continue;
            };
            if let State::Required(w) = &c.state
                && w.transfer.is_none()
                && !w.local
            {
                let name = Arc::clone(&c.name);
                self.cdos.wait(&name, id);
            }
        }
    }

    /// `DemandGroup` from `app`: its group CDO `group` is demanded as a group, with the ids
    /// `first..first + capacity` (its own, unused) reserved for the members.
    pub(super) fn demand_group(
        &mut self,
        conn: ConnId,
        app: AppId,
        group: CdoId,
        (first, capacity): (CdoId, u32),
    ) {
        let ids = proto::cdo_ids(app);
        let last = first.checked_add(u64::from(capacity).saturating_sub(1));
        let reserved_ok = capacity > 0
            && capacity <= MAX_GROUP
            && ids.contains(&first)
            && last.is_some_and(|l| ids.contains(&l));
        if !reserved_ok {
            return self.refuse(conn, Op::Demand, Some(group), Refusal::BadCdoId);
        }
        self.with_cdo(conn, app, Op::Demand, group, |m, c| {
            let mut cdo = m.cdo(c);
            cdo.state = State::Required(Want {
                demanded: true,
                group: Some(Box::new((first, capacity))),
                ..Want::default()
            });
            let name = Arc::clone(&cdo.name);
            drop(cdo);
            m.cdos.wait(&name, c);
            m.ticket(c);
        });
    }

    /// A group demand `to` finds its group offered (or not yet): declares the members and
    /// tickets them, or refuses the demand when the CDO of that name is no group, has more
    /// members than ids reserved, or the app cannot afford them.
    pub(super) fn ticket_group(&mut self, to: CdoId, (first, capacity): (CdoId, u32)) {
        let Some(c) = self.cdos.get(&to) else { return };
        let (name, consumer) = (Arc::clone(&c.name), c.app());
        let Some(from) = self
            .cdos
            .offers(&name)
            .iter()
            .filter(|&o| self.alive(o))
            .min()
        else {
            return; // not offered yet: waits
        };
        let Some(conn) = self.apps.get(&consumer).map(|a| a.conn) else {
            return;
        };
        let published = self.published(from);
        let refusal = self.members_of(consumer, &name, &published, (first, capacity));
        let (names, bytes) = match refusal {
            Ok(ok) => ok,
            Err(why) => {
                self.cdos.stop_waiting(&name, to);
                if let Some(mut c) = self.cdos.get_mut(&to) {
                    c.state = State::Declared;
                }
                return self.refuse(conn, Op::Demand, Some(to), why);
            }
        };
        self.account(consumer, bytes, false);
        // The group itself is here (it holds no bytes).
        self.cdos.stop_waiting(&name, to);
        if let Some(mut c) = self.cdos.get_mut(&to)
            && let State::Required(w) = &mut c.state
        {
            w.local = true;
        }
        let ids = self.declare_members(consumer, to, first, &names);
        self.out.push(
            conn,
            FromPm::GroupMembers {
                group: to,
                names,
                attributes: published,
            },
        );
        // Their tickets go out a slice at a time; a member with no offer yet waits for
        // one from its slice on (an offer that comes before is found there).
        self.backlog.extend(ids);
        let now = self.events.now();
        self.work(now);
    }

    /// The members a group demand of `name` (offered as `published`) brings `consumer`,
    /// with the bytes they count against its quota; refused when the CDO is no group, has
    /// more members than the ids reserved (`first`, `capacity`), those ids are taken, or the
    /// app cannot afford them.
    fn members_of(
        &self,
        consumer: AppId,
        name: &str,
        published: &Attributes,
        (first, capacity): (CdoId, u32),
    ) -> Result<(Vec<String>, usize), Refusal> {
        match checked_members(published)? {
            None => Err(Refusal::NotAllowed(format!(
                "{name:?} is not a group (no {} and {}): demand it as a CDO",
                attr::IS_GROUP,
                attr::GROUP_MEMBERS
            ))),
            Some(names) if names.len() > capacity as usize => Err(Refusal::Quota(format!(
                "the group has {} members and the demand reserved {capacity} ids",
                names.len()
            ))),
            Some(names) => {
                let here = self.members_here(first, &names);
                let bytes = here
                    .clone()
                    .map(|(_, n)| policy::CDO_COST + n.len())
                    .sum::<usize>();
                let taken = here.map(|(id, _)| id).any(|id| self.cdos.contains_key(&id));
                if taken {
                    Err(Refusal::BadCdoId)
                } else {
                    self.affordable(consumer, bytes).map(|()| (names, bytes))
                }
            }
        }
    }

    /// The members of `names` whose home is this shard (all of them in a pool of one
    /// manager), each with its id among those reserved from `first`.
    fn members_here<'a>(
        &self,
        first: CdoId,
        names: &'a [String],
    ) -> impl Iterator<Item = (CdoId, &'a String)> + Clone {
        let shard = self.shard;
        (first..)
            .zip(names)
            .filter(move |(_, n)| shard.of().home(n) == shard.index())
    }

    /// Declares the members `names` that live here for `consumer` with the ids reserved
    /// from `first`, each demanded (as group demand `to` was, and born with it); returns
    /// their ids.
    fn declare_members(
        &mut self,
        consumer: AppId,
        to: CdoId,
        first: CdoId,
        names: &[String],
    ) -> Vec<CdoId> {
        let born = self.cdo(to).born;
        let owner = self.cdo(to).owner;
        let here: Vec<(CdoId, &String)> = self.members_here(first, names).collect();
        let ids: Vec<CdoId> = here.iter().map(|&(id, _)| id).collect();
        for (id, member) in here {
            self.cdos.insert(
                id,
                Cdo {
                    owner,
                    born,
                    name: member.as_str().into(),
                    attributes: Attributes::new(),
                    state: State::Required(Want {
                        demanded: true,
                        member: true,
                        ..Want::default()
                    }),
                    extras: OfferExtras::default(),
                },
            );
        }
        if let Some(a) = self.apps.get_mut(&consumer) {
            let seq = first - self.shard.cdo_ids(consumer).start() + names.len() as u64;
            a.last_declared = a.last_declared.max(seq);
            a.counters.demanded += ids.len() as u64;
        }
        ids
    }
}
