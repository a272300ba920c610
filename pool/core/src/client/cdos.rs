//! The app's CDOs as its client knows them, from declare to dispose: the ids it gives
//! them, whether a dispose must wait for the PM, the bytes that arrived and are not yet
//! demanded, memory lent for their next transfer, tickets being carried out, and groups
//! whose members the PM names.

use std::sync::Arc;
use std::time::Instant;

use super::{CallError, CallId, CallResult, ClientCore, Driver, Event, Fetch, Fetched};
use crate::attr::{self, AttrValue, Attributes};
use crate::proto::{self, CdoId, Op, Source, ToPm, TransferId};

/// Default of [`ClientCore::set_inline_max`]: 4 KiB (see docs/benchmarks-journal.md: up to this size a
/// demand served from the ticket beats any transfer from the provider).
pub const DEFAULT_INLINE_MAX: usize = 4096;

/// Ids a group's demand reserves for its members: a group has at most this many.
pub const GROUP_IDS: u32 = 1 << 16;

/// How far a CDO of this app went as a producer's, as the PM confirmed it: what Maestro's
/// API allows next (attributes are frozen once sealed, only an offered CDO can be
/// withdrawn, an offered one cannot be disposed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Declared (or brought by a group's demand): attributes may change.
    Declared,
    /// Sealed, not offered (or withdrawn): attributes frozen.
    Sealed,
    /// Offered, until withdrawn.
    Offered,
}

/// What a client knows of one of its CDOs.
pub(super) struct Mine<T: Driver> {
    /// Its name (tickets leave it out).
    pub(super) name: Arc<str>,
    /// See [`Phase`].
    pub(super) phase: Phase,
    /// An operation is under way after which the PM may refuse a dispose (an offer not yet
    /// withdrawn, a require or demand whose transfer may be in flight): a dispose then waits
    /// for the PM's answer. Otherwise the PM accepts it, and the client does not wait.
    busy: bool,
    /// Its bytes and attributes, arrived and not yet demanded.
    arrived: Option<(T::Data, Attributes)>,
    /// Memory the application lent for its next transfer.
    lent: Option<T::Memory>,
    /// What its sealed [`attr::TRANSPORT`] asks for (see [`attr::wants_gfs`]).
    pub(super) gfs: Option<bool>,
    /// Its bytes on offer here, from the offer until its withdraw (or refusal).
    pub(super) offered: Option<super::offers::OfferedHere>,
    /// The attributes it was sealed with (checked, defaults filled in), once sealed: what
    /// a reclaim replays ([`ClientCore::replay`]).
    pub(super) sealed: Option<Attributes>,
    /// A require or a demand of it waits for its bytes (which): what a reclaim replays.
    pub(super) wanted: Option<Op>,
    /// Its bytes arrived under a manager that is gone: the one that took over does not
    /// know they are here, and is not told of their demand (it would send them again).
    pub(super) here_unknown: bool,
    /// The manager answered an operation on it (so it knew of its declare), and it
    /// confirmed the require in `wanted`: what a reclaim replays as confirmed (no events)
    /// or not (announced again: see [`ClientCore::replay`]).
    pub(super) known: bool,
    pub(super) wanted_known: bool,
}

impl<T: Driver> Mine<T> {
    fn new(name: Arc<str>, busy: bool) -> Mine<T> {
        Mine {
            name,
            phase: Phase::Declared,
            busy,
            arrived: None,
            lent: None,
            gfs: None,
            offered: None,
            sealed: None,
            wanted: None,
            here_unknown: false,
            known: false,
            wanted_known: false,
        }
    }

    /// Whether its bytes are here, not yet demanded.
    pub(super) fn here(&self) -> bool {
        self.arrived.is_some()
    }
}

/// A ticket being carried out: what the CDO takes from it once its bytes are here.
pub(super) struct Fetching {
    cdo: CdoId,
    attributes: Attributes,
    provider: Arc<str>,
    completes_demand: bool,
    /// Read from the global file system: a failure is this app's (its settings), and
    /// fails the demand.
    gfs: bool,
}

impl Fetching {
    /// Whether it brings `cdo`'s bytes.
    pub(super) fn is(&self, cdo: CdoId) -> bool {
        self.cdo == cdo
    }
}

/// How a demand goes on.
pub enum Demand<D> {
    /// Its bytes are here already (a `require` brought them): the demand is done, the PM
    /// told without anybody waiting.
    Here(D, Attributes),
    /// The call waits for its answer; then take the bytes with
    /// [`ClientCore::take_arrived`].
    Waiting(CallId),
}

impl<T: Driver> ClientCore<T> {
    /// Declares a CDO named `name`; returns its id. The app numbers its own CDOs, so
    /// nothing is waited for: the declaration travels ahead of the operations that name the
    /// CDO.
    ///
    /// # Errors
    /// `BadName` (refused) for an empty or over-long name; [`CallError::Protocol`] once the
    /// app declared all the CDOs it can number; [`CallError::Closed`].
    pub fn declare(&mut self, name: &str) -> CallResult<CdoId> {
        proto::check_name(name).map_err(|why| CallError::Refused {
            op: Op::Declare,
            why,
        })?;
        self.open()?;
        let cdo = self.reserve(1)?;
        self.cdos
            .insert(cdo, Box::new(Mine::new(name.into(), false)));
        self.queue(ToPm::Declare {
            cdo,
            name: name.into(),
        });
        Ok(cdo)
    }

    /// Reserves `n` consecutive CDO ids; the first.
    pub(super) fn reserve(&mut self, n: u64) -> CallResult<CdoId> {
        let first = self.next_cdo;
        if first.saturating_add(n - 1) > self.last_cdo {
            return Err(CallError::Protocol(format!(
                "app {} has declared all the CDOs it can number; join again as a new app",
                self.app
            )));
        }
        self.next_cdo += n;
        Ok(first)
    }

    /// The name `cdo` was declared with (`None`: not this app's, or disposed).
    pub fn name(&self, cdo: CdoId) -> Option<&Arc<str>> {
        self.cdos.get(&cdo).map(|m| &m.name)
    }

    /// How far `cdo` went, as the PM confirmed it (`None`: not this app's, or disposed).
    pub fn phase(&self, cdo: CdoId) -> Option<Phase> {
        self.cdos.get(&cdo).map(|m| m.phase)
    }

    /// The PM confirmed `op` on `cdo`: its phase follows (a seal seals, an offer, sealed
    /// with it or before, offers, a withdraw leaves it sealed and settled).
    pub(super) fn confirmed(&mut self, op: Op, cdo: CdoId) {
        let Some(m) = self.cdos.get_mut(&cdo) else {
            return;
        };
        m.known = true;
        match op {
            Op::Require => m.wanted_known = m.wanted == Some(Op::Require),
            Op::Seal => m.phase = Phase::Sealed,
            Op::Offer => m.phase = Phase::Offered,
            Op::Withdraw => {
                m.phase = Phase::Sealed;
                m.busy = false;
                m.offered = None;
            }
            Op::Retract => {
                m.busy = false;
                m.wanted = None;
            }
            _ => {}
        }
    }

    /// Seals `cdo` with `attributes` (frozen from then on) once they pass the schemas,
    /// which fill in their defaults; files `waiter` for the answer.
    ///
    /// # Errors
    /// [`CallError::Attribute`] for attributes the schemas refuse (nothing is sent);
    /// [`CallError::Closed`].
    pub fn seal(
        &mut self,
        now: Instant,
        cdo: CdoId,
        mut attributes: Attributes,
        waiter: T::Waiter,
    ) -> CallResult<CallId> {
        self.schemas.check(&mut attributes)?;
        if let Some(m) = self.cdos.get_mut(&cdo) {
            m.gfs = attr::wants_gfs(&attributes).ok().flatten();
            m.sealed.get_or_insert_with(|| attributes.clone());
        }
        self.request(now, (Op::Seal, cdo), ToPm::Seal { cdo, attributes }, waiter)
    }

    /// Requires `cdo`; from now on a dispose of `cdo` waits for the PM.
    ///
    /// # Errors
    /// [`CallError::Closed`].
    pub fn require(&mut self, now: Instant, cdo: CdoId, waiter: T::Waiter) -> CallResult<CallId> {
        let call = self.call_busy(now, (Op::Require, cdo), ToPm::Require { cdo }, waiter)?;
        self.wanting(cdo, Op::Require);
        Ok(call)
    }

    /// A require or demand of `cdo` (`op`) waits for its bytes from now on.
    pub(super) fn wanting(&mut self, cdo: CdoId, op: Op) {
        if let Some(m) = self.cdos.get_mut(&cdo)
            && m.arrived.is_none()
        {
            m.wanted = Some(op);
            m.wanted_known = false;
        }
    }

    pub(super) fn call_busy(
        &mut self,
        now: Instant,
        key: super::CallKey,
        msg: ToPm,
        waiter: T::Waiter,
    ) -> CallResult<CallId> {
        let call = self.request(now, key, msg, waiter)?;
        self.set_busy(key.1, true);
        Ok(call)
    }

    fn set_busy(&mut self, cdo: CdoId, busy: bool) {
        if let Some(m) = self.cdos.get_mut(&cdo) {
            m.busy = busy;
        }
    }

    /// `cdo` is disposed: forgotten with its unclaimed bytes and lent memory; calls that
    /// wait for its demand or require fail.
    pub(super) fn forget(&mut self, cdo: CdoId) {
        self.cdos.remove(&cdo);
        for op in [Op::Demand, Op::Require] {
            while self.resolve((op, cdo), Err(CallError::Disposed { op, cdo })) {}
        }
    }

    /// Demands `cdo`. When a `require` brought its bytes already, that is all: the PM
    /// learns of the demand with a deferred notice ([`super::Transmit::deferred`]). When
    /// the PM granted a lease of an offer of its name with an offer event
    /// ([`crate::proto::Grant`]), the lease serves it without waiting for the PM: the
    /// bytes that came with it are here at once, or `waiter` is filed and the driver
    /// fetches them ([`Event::Fetch`]); the PM is told afterwards ([`ToPm::UseLease`]).
    /// Otherwise the demand is sent and `waiter` filed.
    ///
    /// # Errors
    /// [`CallError::Closed`] (unless the bytes are here: they are, whatever the PM does).
    pub fn demand(
        &mut self,
        now: Instant,
        cdo: CdoId,
        waiter: T::Waiter,
    ) -> CallResult<Demand<T::Data>> {
        let known = self.cdos.get(&cdo).is_some_and(|m| !m.here_unknown);
        if let Some((data, attributes)) = self.take_here(cdo) {
            // After the transfer's completion, on the same connection: the PM finds it
            // local. A PM gone meanwhile changes nothing: the bytes are here.
            if known {
                self.defer(ToPm::Demand { cdo });
            }
            return Ok(Demand::Here(data, attributes));
        }
        if let Some((lease, held)) = self.lease_for(now, cdo) {
            return self.demand_leased(now, (cdo, lease), held, waiter);
        }
        self.demand_call(now, cdo, waiter).map(Demand::Waiting)
    }

    /// Sends the demand of `cdo` and files `waiter` for its answer.
    fn demand_call(&mut self, now: Instant, cdo: CdoId, waiter: T::Waiter) -> CallResult<CallId> {
        let call = self.call_busy(now, (Op::Demand, cdo), ToPm::Demand { cdo }, waiter)?;
        self.wanting(cdo, Op::Demand);
        Ok(call)
    }

    /// A lease for a demand of `cdo` at `now`: the CDO is declared and nothing else is
    /// under way for it (no require, no bytes here), and a lease of its name is held, of
    /// bytes it carried or, while the lease table is current ([`ClientCore::drained`]), of
    /// memory.
    fn lease_for(&mut self, now: Instant, cdo: CdoId) -> Option<(TransferId, super::leases::Held)> {
        let m = self.cdos.get(&cdo)?;
        if self.closed || m.phase != Phase::Declared || m.busy || m.arrived.is_some() {
            return None;
        }
        let name = Arc::clone(&m.name);
        let current = self.leases.current(now).is_some();
        self.leases.take_if(&name, |h| {
            current || matches!(h.source, Source::Inline { .. })
        })
    }

    /// Demands `cdo` with `lease` (see [`ClientCore::demand`]). Inline bytes that fail
    /// the producer's checksum are not used: the lease is released and the demand sent.
    fn demand_leased(
        &mut self,
        now: Instant,
        (cdo, lease): (CdoId, TransferId),
        held: super::leases::Held,
        waiter: T::Waiter,
    ) -> CallResult<Demand<T::Data>> {
        let super::leases::Held {
            source,
            attributes,
            provider,
            ..
        } = held;
        let source = match source {
            Source::Inline { bytes } => {
                let lent = self.unlend(cdo);
                let data = T::inline(bytes, lent);
                if attr::verify_checksum(&attributes, data.as_ref()).is_err() {
                    tracing::warn!("pool client: lease {lease} of CDO {cdo}: corrupt bytes");
                    self.release(lease);
                    return self.demand_call(now, cdo, waiter).map(Demand::Waiting);
                }
                self.defer(ToPm::UseLease { cdo, lease });
                self.arrive(cdo, data, attributes, &provider);
                return self
                    .take_here(cdo)
                    .map(|(data, attributes)| Demand::Here(data, attributes))
                    .ok_or(CallError::Disposed {
                        op: Op::Demand,
                        cdo,
                    });
            }
            source => source,
        };
        let call = self.wait(now, (Op::Demand, cdo), waiter)?;
        self.set_busy(cdo, true);
        self.wanting(cdo, Op::Demand);
        self.defer(ToPm::UseLease { cdo, lease });
        self.ticket(lease, cdo, source, (attributes, provider), true);
        Ok(Demand::Waiting(call))
    }

    pub(super) fn take_here(&mut self, cdo: CdoId) -> Option<(T::Data, Attributes)> {
        let m = self.cdos.get_mut(&cdo)?;
        let here = m.arrived.take()?;
        m.busy = false;
        Some(here)
    }

    /// The bytes of `cdo` once its demand was answered.
    ///
    /// # Errors
    /// [`CallError::Protocol`] when the PM said it is ready but no bytes arrived.
    pub fn take_arrived(&mut self, cdo: CdoId) -> CallResult<(T::Data, Attributes)> {
        self.take_here(cdo)
            .ok_or_else(|| CallError::Protocol(format!("CDO {cdo} ready but no data arrived")))
    }

    /// Lends `memory` for the next transfer of `cdo` (handed back in [`Fetch::lent`] or by
    /// [`ClientCore::unlend`]).
    pub fn lend(&mut self, cdo: CdoId, memory: T::Memory) {
        if let Some(m) = self.cdos.get_mut(&cdo) {
            m.lent = Some(memory);
        }
    }

    /// Takes back memory lent for `cdo` and not used.
    pub fn unlend(&mut self, cdo: CdoId) -> Option<T::Memory> {
        self.cdos.get_mut(&cdo)?.lent.take()
    }

    /// Disposes `cdo`. When the PM is sure to accept it (declared, sealed, withdrawn, or
    /// demanded and here), it is sent unanswered and `cdo` forgotten now: `None`.
    /// Otherwise `waiter` is filed and `cdo` is forgotten when the PM agrees.
    ///
    /// # Errors
    /// [`CallError::Closed`].
    pub fn dispose(
        &mut self,
        now: Instant,
        cdo: CdoId,
        waiter: T::Waiter,
    ) -> CallResult<Option<CallId>> {
        self.open()?;
        if self.cdos.get(&cdo).is_some_and(|m| !m.busy) {
            self.forget(cdo);
            self.queue(ToPm::Dispose { cdo, answer: false });
            return Ok(None);
        }
        let msg = ToPm::Dispose { cdo, answer: true };
        self.request(now, (Op::Dispose, cdo), msg, waiter).map(Some)
    }

    /// A ticket came: its bytes came with it (carried out here, see [`Driver::inline`]), or
    /// the driver gets them ([`Event::Fetch`]).
    pub(super) fn ticket(
        &mut self,
        transfer: TransferId,
        cdo: CdoId,
        source: Source,
        (attributes, provider): (Attributes, Arc<str>),
        completes_demand: bool,
    ) {
        let lent = self.cdos.get_mut(&cdo).and_then(|m| {
            // The manager knows the CDO and, a ticket of its demand or require being here, it.
            m.known = true;
            m.wanted_known = m.wanted.is_some();
            m.lent.take()
        });
        let f = Fetching {
            cdo,
            attributes,
            provider,
            completes_demand,
            gfs: matches!(source, Source::Gfs { .. }),
        };
        match source {
            // The PM counted the transfer done as it sent the ticket: nothing to report.
            Source::Inline { bytes } => {
                let data = T::inline(bytes, lent);
                self.finish(transfer, f, Ok((data, None)), false);
            }
            source => {
                self.fetching.insert(transfer, f);
                self.events.push_back(Event::Fetch(Fetch {
                    transfer,
                    cdo,
                    source,
                    lent,
                    shard: self.shard.index(),
                }));
            }
        }
    }

    /// The driver carried out ticket `transfer`: the bytes are checked against the
    /// producer's checksum, kept for the demand (with the offer's attributes and the
    /// built-in name, size and provider, which tickets leave out) and the outcome is
    /// reported to the PM (unless the bytes came with the ticket). A ticket of a demand
    /// completes the demand now; corrupt bytes fail it.
    pub fn fetched(&mut self, transfer: TransferId, outcome: Fetched<T::Data>) {
        let Some(f) = self.fetching.remove(&transfer) else {
            if !self.reclaiming.dropped.remove(&transfer) {
                tracing::warn!("pool client: transfer {transfer} ended but was not ticketed");
            }
            return;
        };
        self.finish(transfer, f, outcome, true);
    }

    /// Ticket `transfer` (`f`) ended with `outcome` (see [`ClientCore::fetched`]); a
    /// success is reported to the PM when `report` says so (a failure always is).
    fn finish(
        &mut self,
        transfer: TransferId,
        f: Fetching,
        outcome: Fetched<T::Data>,
        report: bool,
    ) {
        // (why, whether the bytes failed the integrity check)
        let outcome = match outcome {
            Ok((data, direct)) => match attr::verify_checksum(&f.attributes, data.as_ref()) {
                Ok(()) => Ok((data, direct)),
                Err(why) => Err((why, true)),
            },
            Err(why) => Err((why, false)),
        };
        match outcome {
            Ok((data, direct)) => {
                self.arrive(f.cdo, data, f.attributes, &f.provider);
                if f.completes_demand {
                    self.resolve((Op::Demand, f.cdo), Ok(f.cdo));
                }
                if report {
                    self.transfer_done(transfer, None, direct, f.completes_demand);
                }
            }
            Err((why, integrity)) => {
                let why = if integrity || f.gfs {
                    let failed = if integrity {
                        CallError::Integrity {
                            provider: Arc::clone(&f.provider),
                            why,
                        }
                    } else {
                        CallError::Unreadable(why)
                    };
                    let text = failed.to_string();
                    if f.completes_demand {
                        // Corrupted bytes are an error for the demand, not data; bytes this
                        // app cannot read would be as unreadable from another ticket.
                        self.resolve((Op::Demand, f.cdo), Err(failed));
                    }
                    text
                } else {
                    why
                };
                tracing::warn!("pool client: transfer {transfer} failed: {why}");
                self.transfer_done(transfer, Some(why), None, false);
            }
        }
    }

    /// Tells the PM transfer `transfer` ended. The end of one that answered a demand with
    /// its bytes (`answered`) waits for the app's next message, or `DEFER`: what the PM
    /// makes of it (freeing the transfer, its event) is off the demand's critical path,
    /// where telling it now would wake it from the thread that reports the transfer.
    fn transfer_done(
        &mut self,
        transfer: TransferId,
        error: Option<String>,
        direct: Option<proto::Direct>,
        answered: bool,
    ) {
        if self.closed {
            return;
        }
        let msg = ToPm::TransferDone {
            transfer,
            error,
            direct,
        };
        if answered {
            self.defer(msg);
        } else {
            self.queue(msg);
        }
    }

    /// Keeps `cdo`'s bytes until it is demanded.
    fn arrive(&mut self, cdo: CdoId, data: T::Data, attributes: Attributes, provider: &str) {
        let Some(m) = self.cdos.get_mut(&cdo) else {
            tracing::debug!("pool client: CDO {cdo} arrived after its dispose; dropped");
            return;
        };
        let attributes = with_built_ins(attributes, &m.name, provider, data.as_ref().len());
        m.arrived = Some((data, attributes));
        m.wanted = None;
    }

    /// Demands group `group` in one message ([`ToPm::DemandGroup`]), reserving
    /// [`GROUP_IDS`] ids for its members; the first, and the call. The call is answered once
    /// the PM named the members and every one of them is here (or failed: the first
    /// member's error); then take them, in one step, with [`ClientCore::take_group`].
    ///
    /// # Errors
    /// [`CallError::Protocol`] when the app's ids are used up; [`CallError::Closed`].
    pub fn demand_group(
        &mut self,
        now: Instant,
        group: CdoId,
        waiter: T::Waiter,
    ) -> CallResult<(CdoId, CallId)> {
        self.open()?;
        let first = self.reserve(u64::from(GROUP_IDS))?;
        self.groups_wanted.insert(group, (first, GROUP_IDS));
        let msg = ToPm::DemandGroup {
            group,
            first,
            capacity: GROUP_IDS,
        };
        let call = self.request(now, (Op::Demand, group), msg, waiter)?;
        Ok((first, call))
    }

    /// The members of demanded `group` once its call was answered: the group's attributes,
    /// every member's id and, in the producer's order, each member's id, name, bytes and
    /// attributes (the members that are here: all of them after a successful answer).
    /// `None` when the PM did not name them (not answered, refused, or no such group
    /// demanded). In a sharded pool the members that live at another shard are not here:
    /// [`Sharded::take_group`](super::Sharded::take_group) adds them.
    pub fn take_group(&mut self, group: CdoId) -> Option<GroupHere<T::Data>> {
        self.groups_wanted.remove(&group);
        let named = self.groups.remove(&group)?;
        self.stop_arriving(group);
        let ids = (named.first..).take(named.names.len()).collect();
        let members = (named.first..)
            .zip(named.names)
            .filter_map(|(cdo, name)| {
                let (data, attributes) = self.take_here(cdo)?;
                Some(GroupMember {
                    cdo,
                    name,
                    data,
                    attributes,
                })
            })
            .collect();
        Some(GroupHere {
            ids,
            attributes: named.attributes,
            members,
        })
    }

    /// The PM named the members of `group`: they are this app's CDOs from the first id
    /// reserved on, each demanded; the group's demand is answered when the last is here.
    /// A member whose name lives at another shard of the pool is not declared here: it is
    /// left for the sharded client to demand at its home ([`ClientCore::named_elsewhere`]),
    /// which counts it here when it arrived there ([`ClientCore::member_arrived`]).
    pub(super) fn group_named(&mut self, group: CdoId, names: Vec<String>, attrs: Attributes) {
        let Some((first, capacity)) = self.groups_wanted.remove(&group) else {
            tracing::warn!(
                "pool manager named the members of group {group}, which is not demanded"
            );
            return;
        };
        if names.len() > capacity as usize {
            tracing::warn!("pool manager named more members than ids reserved for group {group}");
            return;
        }
        for (index, (cdo, name)) in (first..).zip(&names).enumerate() {
            if self.shard.of().home(name) != self.shard.index() {
                self.elsewhere.push(Elsewhere {
                    group,
                    index,
                    cdo,
                    name: name.clone(),
                });
                continue;
            }
            let mut member = Box::new(Mine::new(name.as_str().into(), true));
            member.wanted = Some(Op::Demand);
            self.cdos.insert(cdo, member);
        }
        let count = names.len() as u64;
        self.groups.insert(
            group,
            Named {
                first,
                names,
                attributes: attrs,
            },
        );
        if count == 0 {
            self.resolve((Op::Demand, group), Ok(group));
            return;
        }
        self.arriving.insert(
            first,
            Arriving {
                group,
                count,
                left: count,
                failed: None,
            },
        );
    }

    /// The members of groups named since the last call that live at other shards of the
    /// pool (see [`ClientCore::group_named`]).
    pub(super) fn named_elsewhere(&mut self) -> Vec<Elsewhere> {
        std::mem::take(&mut self.elsewhere)
    }

    /// Nobody waits for `group`'s members any more (taken, or its call given up).
    pub(super) fn stop_arriving(&mut self, group: CdoId) {
        self.arriving.retain(|_, a| a.group != group);
    }

    /// A member's demand ended (`result`): counted for its group, whose call is answered
    /// with the last; false when `cdo` is no member of a group on its way.
    pub(super) fn member_arrived(&mut self, cdo: CdoId, result: &CallResult<u64>) -> bool {
        let Some((&first, a)) = self.arriving.range_mut(..=cdo).next_back() else {
            return false;
        };
        if cdo - first >= a.count {
            return false;
        }
        if let Err(e) = result {
            a.failed.get_or_insert_with(|| e.clone());
        }
        a.left -= 1;
        if a.left == 0 {
            let (group, failed) = (a.group, a.failed.take());
            self.arriving.remove(&first);
            self.resolve((Op::Demand, group), failed.map_or(Ok(group), Err));
        }
        true
    }
}

/// A demanded group's members as the PM named them (see [`ClientCore::take_group`]).
pub(super) struct Named {
    first: CdoId,
    names: Vec<String>,
    attributes: Attributes,
}

/// A member of a demanded group that lives at another shard than the group: the group, its
/// place in it, the id reserved for it at the group's shard (unused there: what its arrival is counted
/// by), and its name.
pub(super) struct Elsewhere {
    pub(super) group: CdoId,
    pub(super) index: usize,
    pub(super) cdo: CdoId,
    pub(super) name: String,
}

/// A demanded group whose members are on their way: its call is answered once `left` is 0,
/// with the first member's error if one failed.
pub(super) struct Arriving {
    group: CdoId,
    count: u64,
    left: u64,
    failed: Option<CallError>,
}

/// The members of a demanded group, taken at once ([`ClientCore::take_group`]).
#[derive(Debug)]
pub struct GroupHere<D> {
    /// Every member's id in this app, in the producer's order (as many as the PM named):
    /// the ids reserved for the group, but for members that live at another shard than
    /// the group, which are declared at their own.
    pub ids: Vec<CdoId>,
    /// The group's attributes (with the built-in name).
    pub attributes: Attributes,
    /// The members here, in the producer's order.
    pub members: Vec<GroupMember<D>>,
}

/// A member of a demanded group, here.
#[derive(Debug)]
pub struct GroupMember<D> {
    /// Its CDO in this app.
    pub cdo: CdoId,
    /// Its name.
    pub name: String,
    /// Its bytes.
    pub data: D,
    /// The attributes it was sealed with, and the built-in ones.
    pub attributes: Attributes,
}

/// An arrived CDO's attributes: the sealed ones its bytes came with, and the built-in
/// name, provider (`component:index`) and size.
pub(super) fn with_built_ins(
    mut attributes: Attributes,
    name: &str,
    provider: &str,
    len: usize,
) -> Attributes {
    attributes.insert(attr::NAME.into(), AttrValue::Str(name.to_string()));
    attributes.insert(attr::PROVIDER.into(), AttrValue::Str(provider.to_string()));
    attributes.insert(attr::LOCAL_SIZE.into(), AttrValue::Uint(len as u64));
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Plain;

    impl Driver for Plain {
        type Data = Vec<u8>;
        type Waiter = ();
        type Memory = ();
        type Events = ();
        type Stream = ();

        fn inline(bytes: proto::InlineBytes, _: Option<()>) -> Vec<u8> {
            bytes.0.to_vec()
        }
    }

    #[test]
    fn an_app_that_used_up_its_ids_is_told_to_join_again() {
        let mut core: ClientCore<Plain> = ClientCore::new(4, std::time::Duration::from_secs(1));
        core.next_cdo = core.last_cdo;
        let last = core.declare("last").expect("the last id");
        assert_eq!(last, *proto::cdo_ids(4).end());
        let refused = core.declare("one more");
        assert!(
            matches!(&refused, Err(CallError::Protocol(why)) if why.contains("join again")),
            "{refused:?}"
        );
        // A group's ids are reserved whole or not at all.
        core.next_cdo = core.last_cdo - u64::from(GROUP_IDS) + 2;
        assert!(matches!(
            core.demand_group(Instant::now(), 1, ()),
            Err(CallError::Protocol(_))
        ));
        assert_eq!(
            core.poll_transmit().map(|t| t.msg),
            Some(ToPm::Declare {
                cdo: last,
                name: "last".into()
            })
        );
        assert_eq!(
            core.poll_transmit(),
            None,
            "nothing sent for what was refused"
        );
    }
}
