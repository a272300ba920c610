//! Transfers: ticketing a waiting consumer from a usable offer (one it reads directly
//! before one the PM would relay, then the least loaded), the stream relay, completion
//! and failure (re-ticketing elsewhere), and releasing the offer read from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::distances::Remoteness;
use super::kept::POOL;
use super::{ConnId, HashMap, Manager, State, later, traffic};
use crate::events::EventKind;
use crate::proto::{
    AppId, CdoId, Chunk, Direct, FromPm, MAX_CHUNK, Op, Refusal, Source, TransferId,
};

/// The transfers in flight, owned here: each one's record, how many read from each offer
/// (the least loaded offer is ticketed first; an offer read from cannot be released), and
/// the deadlines of those that keep an offer being withdrawn from its provider. Leases
/// ([`crate::proto::Grant`]) live here too: one of memory reads from its offer as a
/// transfer does (it counts in the offer's load and is pinned alike), and becomes the
/// transfer, under the same id, when its holder uses it.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    records: BTreeMap<TransferId, Transfer>,
    /// Leases granted and neither used nor released, by id; by offer (mostly one or two
    /// subscribers': no allocation); how many each holder has.
    leases: HashMap<TransferId, Leased>,
    on_offer: HashMap<CdoId, smallvec::SmallVec<[TransferId; 2]>>,
    held: HashMap<AppId, usize>,
    /// Transfers reading from each offer (absent: none).
    load: HashMap<CdoId, usize>,
    /// Pinning transfers by the instant they are abandoned, and each one's instant.
    pinned: BTreeSet<(Instant, TransferId)>,
    pinned_at: HashMap<TransferId, Instant>,
}

impl InFlight {
    /// Records transfer `id`, reading from `t.from`.
    pub(super) fn start(&mut self, id: TransferId, t: Transfer) {
        *self.load.entry(t.from).or_default() += 1;
        self.records.insert(id, t);
    }

    /// Forgets transfer `id` (and its pin); its record, if it was in flight.
    pub(super) fn end(&mut self, id: TransferId) -> Option<Transfer> {
        let t = self.records.remove(&id)?;
        if let Some(at) = self.pinned_at.remove(&id) {
            self.pinned.remove(&(at, id));
        }
        self.unload(t.from);
        Some(t)
    }

    /// Transfer `id`'s record.
    pub(super) fn get(&self, id: &TransferId) -> Option<&Transfer> {
        self.records.get(id)
    }

    /// Number of transfers in flight.
    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// The transfers in flight, by id.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&TransferId, &Transfer)> {
        self.records.iter()
    }

    /// Whether some transfer reads from `offer`.
    pub(super) fn reading(&self, offer: CdoId) -> bool {
        self.load.contains_key(&offer)
    }

    /// How many transfers read from `offer`.
    pub(super) fn load(&self, offer: CdoId) -> usize {
        self.load.get(&offer).copied().unwrap_or(0)
    }

    /// Records lease `id`.
    pub(super) fn grant(&mut self, id: TransferId, l: Leased) {
        if !l.inline {
            *self.load.entry(l.from).or_default() += 1;
        }
        self.on_offer.entry(l.from).or_default().push(id);
        *self.held.entry(l.holder).or_default() += 1;
        self.leases.insert(id, l);
    }

    /// Lease `id`, if it is granted and neither used nor released.
    pub(super) fn lease(&self, id: TransferId) -> Option<&Leased> {
        self.leases.get(&id)
    }

    /// Forgets lease `id` (its load and its pin); its record, if it was granted.
    pub(super) fn end_lease(&mut self, id: TransferId) -> Option<Leased> {
        let l = self.leases.remove(&id)?;
        if let Some(at) = self.pinned_at.remove(&id) {
            self.pinned.remove(&(at, id));
        }
        if let Some(ids) = self.on_offer.get_mut(&l.from) {
            ids.retain(|x| *x != id);
            if ids.is_empty() {
                self.on_offer.remove(&l.from);
            }
        }
        if let Some(n) = self.held.get_mut(&l.holder) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&l.holder);
            }
        }
        if !l.inline {
            self.unload(l.from);
        }
        Some(l)
    }

    /// The leases of `offer` not revoked yet, each marked revoked now, with their holders;
    /// those of memory are pinned: abandoned `timeout` from `now` unless given back.
    pub(super) fn revoke_on(
        &mut self,
        offer: CdoId,
        now: Instant,
        timeout: Duration,
    ) -> Vec<(TransferId, AppId)> {
        let Some(ids) = self.on_offer.get(&offer) else {
            return Vec::new();
        };
        let mut revoked = Vec::new();
        for &id in ids {
            let Some(l) = self.leases.get_mut(&id).filter(|l| !l.revoked) else {
                continue;
            };
            l.revoked = true;
            revoked.push((id, l.holder));
            if !l.inline {
                let at = later(now, timeout);
                self.pinned.insert((at, id));
                self.pinned_at.insert(id, at);
            }
        }
        revoked
    }

    /// The offers leased out and not revoked.
    pub(super) fn leased_offers(&self) -> Vec<CdoId> {
        let mut offers: Vec<CdoId> = self.on_offer.keys().copied().collect();
        offers.sort_unstable();
        offers
    }

    /// The leases `holder` holds.
    pub(super) fn held_by(&self, holder: AppId) -> Vec<TransferId> {
        if !self.held.contains_key(&holder) {
            return Vec::new();
        }
        let mut ids: Vec<TransferId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.holder == holder)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// How many leases `holder` holds.
    pub(super) fn held_count(&self, holder: AppId) -> usize {
        self.held.get(&holder).copied().unwrap_or(0)
    }

    /// Number of leases granted and neither used nor released.
    pub(super) fn lease_count(&self) -> usize {
        self.leases.len()
    }

    fn unload(&mut self, offer: CdoId) {
        if let Some(n) = self.load.get_mut(&offer) {
            *n -= 1;
            if *n == 0 {
                self.load.remove(&offer);
            }
        }
    }

    /// Pins the transfers reading from the offers `from` selects: each is abandoned
    /// `timeout` after it started (a transfer pinned already keeps its instant).
    pub(super) fn pin_from(&mut self, from: impl Fn(CdoId) -> bool, timeout: Duration) {
        for (&id, t) in &self.records {
            if from(t.from) && !self.pinned_at.contains_key(&id) {
                let at = later(t.started, timeout);
                self.pinned.insert((at, id));
                self.pinned_at.insert(id, at);
            }
        }
    }

    /// The earliest instant a pinning transfer is abandoned.
    pub(super) fn next_abandon(&self) -> Option<Instant> {
        self.pinned.first().map(|(at, _)| *at)
    }

    /// A pinning transfer whose instant is `now` or earlier (no longer pinned).
    pub(super) fn overdue(&mut self, now: Instant) -> Option<TransferId> {
        let &(at, id) = self.pinned.first().filter(|(at, _)| *at <= now)?;
        self.pinned.remove(&(at, id));
        self.pinned_at.remove(&id);
        Some(id)
    }
}

/// A lease granted and neither used nor released (see [`InFlight`]).
#[derive(Clone, Debug)]
pub(super) struct Leased {
    /// The offer.
    pub(super) from: CdoId,
    /// Who holds it.
    pub(super) holder: AppId,
    /// The offer's name: the holder's CDO that uses it has it too.
    pub(super) name: Arc<str>,
    /// The offer's bytes.
    pub(super) len: u64,
    /// How it was planned (for observers, once used).
    pub(super) route: traffic::Route,
    /// Its bytes went with it: nothing is read from the provider, nothing pinned.
    pub(super) inline: bool,
    /// Its transport ([`crate::proto::Source::kind`]), for the transport event.
    pub(super) kind: &'static str,
    /// Its holder was asked to give it back.
    pub(super) revoked: bool,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Transfer {
    pub(super) from: CdoId,
    pub(super) to: CdoId,
    /// When it was ticketed (the deadline of a transfer that pins a withdrawn offer
    /// counts from here).
    pub(super) started: Instant,
    /// Bytes of a stream transfer (`None` for RMA and same-process).
    pub(super) stream: Option<u64>,
    /// Ticketed for a demand: its completion is the demand's answer (no `Ready`).
    pub(super) completes_demand: bool,
    /// Its bytes.
    pub(super) len: u64,
    /// How it was planned (for observers).
    pub(super) route: traffic::Route,
}

impl Manager {
    /// Tickets a transfer to waiting consumer `to` from a usable offer: one it can read
    /// without the PM relaying it first, then the fewest hops away, then the least loaded.
    pub(super) fn ticket(&mut self, to: CdoId) {
        let Some(c) = self.cdos.get(&to).filter(|_| self.alive(to)) else {
            return;
        };
        let State::Required(want) = &c.state else {
            return;
        };
        if want.transfer.is_some() || want.local {
            return;
        }
        if let Some(&reserved) = want.group.as_deref() {
            return self.ticket_group(to, reserved);
        }
        let load = |m: &Self, o: CdoId| m.transfers.load(o);
        let offers = self.cdos.offers(&c.name);
        let usable = |o: &CdoId| !want.failed.contains(o) && self.alive(*o);
        let relayed = |o: CdoId| {
            offers.len() > 1
                && self.cdos.get(&o).is_some_and(|f| match &f.state {
                    State::Offered(region) => !self.reaches(c.app(), f.app(), o, *region),
                    _ => false,
                })
        };
        // Among several offers, those the consumer reads directly come before those the
        // PM would relay (another network), then the fewest hops away, then the least
        // loaded; none on a host the fabric no longer joins to the consumer's.
        let Some((from, _)) = (offers.iter().filter(usable))
            .map(|o| (o, self.remoteness(c.app(), o)))
            .filter(|(_, r)| *r != Remoteness::Cut)
            .min_by_key(|&(o, r)| (relayed(o), r, load(self, o), o))
        else {
            // Offers there are, all cut off: a demand fails saying so (a require waits
            // for the link or another offer).
            if want.demanded && offers.iter().any(|o| usable(&o)) {
                let why = self.no_path(c.app(), offers.iter().filter(usable));
                self.fail_demand(to, &c.name.clone(), Refusal::NoPath(why));
            }
            return;
        };
        let (name, consumer, completes_demand) = (Arc::clone(&c.name), c.app(), want.demanded);
        let bulk = want.member;
        // The built-in name and size are the consumer's to add (see `FromPm::Ticket`).
        let Some((provider, State::Offered(region), attributes)) = self
            .cdos
            .get(&from)
            .map(|f| (f.app(), f.state.clone(), f.attributes.clone()))
        else {
            return;
        };
        let (source, how, route) = self.plan((consumer, bulk), provider, from, region);
        // Rather than relay it, the provider writes it where the consumer reads files.
        if matches!(source, Source::Stream { .. }) && self.spillable(consumer, provider, from) {
            return self.spill(from);
        }
        let provider_label = self.provider_label(from);
        let transfer = self.id();
        let stream = match source {
            Source::Stream { len } => Some(len),
            _ => None,
        };
        let record = Transfer {
            from,
            to,
            started: self.events.now(),
            stream,
            completes_demand,
            len: region.len,
            route,
        };
        // A ticket with its bytes is done when sent: no record of it in flight.
        let inline = matches!(source, Source::Inline { .. });
        if !inline {
            self.transfers.start(transfer, record);
        }
        self.cdos.stop_waiting(&name, to);
        if let State::Required(w) = &mut self.cdo(to).state {
            w.transfer = Some(transfer);
        }
        let conn = self.apps.get(&consumer).map(|a| a.conn);
        if let Some(conn) = conn {
            self.out.push(
                conn,
                FromPm::Ticket {
                    transfer,
                    cdo: to,
                    source,
                    attributes,
                    provider: Arc::clone(&provider_label),
                    completes_demand,
                },
            );
        }
        self.notify(EventKind::TransportStarted, consumer, Some(from), || {
            let from = match &*provider_label {
                "" => "the pool",
                p => p,
            };
            format!("transfer {transfer} from {from} by {how}")
        });
        // The bytes went with the ticket: the transfer is done (the consumer reports
        // nothing; the connection delivers the ticket before anything after it).
        if let (true, Some(conn)) = (inline, conn) {
            let done = traffic::Outcome::Done(None);
            self.transfer_finished(transfer, &record, done);
            self.transfer_ended(conn, consumer, (transfer, record), None, None);
        }
    }

    /// Whose bytes a ticket or lease from `offer` carries: the providing app's
    /// `component:index` (for a kept CDO, the app's that handed it over; empty for one
    /// gone).
    pub(super) fn provider_label(&self, offer: CdoId) -> Arc<str> {
        self.apps
            .get(&crate::proto::cdo_owner(offer))
            .map(|a| Arc::clone(&a.label))
            .or_else(|| self.kept_provider(offer))
            .unwrap_or_else(|| Arc::from(""))
    }

    /// Removes a transfer and its count on the source offer; observers are told how it
    /// ended.
    pub(super) fn end_transfer(
        &mut self,
        transfer: TransferId,
        outcome: traffic::Outcome,
    ) -> Option<Transfer> {
        let t = self.transfers.end(transfer)?;
        self.transfer_finished(transfer, &t, outcome);
        Some(t)
    }

    /// The stream transfer `transfer` if `app` is on the `consumer` (or else provider) side.
    pub(super) fn stream_of(
        &self,
        app: AppId,
        transfer: TransferId,
        consumer: bool,
    ) -> Option<Transfer> {
        let t = self.transfers.get(&transfer)?;
        let side = if consumer { t.to } else { t.from };
        (t.stream.is_some() && self.cdos.get(&side).is_some_and(|c| c.app() == app)).then_some(*t)
    }

    pub(super) fn app_conn(&self, cdo: CdoId) -> Option<ConnId> {
        let app = self.cdos.get(&cdo)?.app();
        self.apps.get(&app).map(|a| a.conn)
    }

    /// A consumer asks for a piece of a stream transfer: relay it to the provider.
    pub(super) fn fetch(
        &mut self,
        conn: ConnId,
        app: AppId,
        transfer: TransferId,
        offset: u64,
        len: u64,
    ) {
        let Some(t) = self.stream_of(app, transfer, true) else {
            return self.refuse(conn, Op::Fetch, Some(transfer), Refusal::UnknownTransfer);
        };
        let size = t.stream.unwrap_or(0);
        if len > MAX_CHUNK || offset.checked_add(len).is_none_or(|end| end > size) {
            return self.refuse(conn, Op::Fetch, Some(transfer), Refusal::BadRange);
        }
        if let Some(pc) = self.app_conn(t.from) {
            self.out.push(
                pc,
                FromPm::Serve {
                    transfer,
                    cdo: t.from,
                    offset,
                    len,
                },
            );
        }
    }

    /// A provider sends a piece of a stream transfer: relay it to the consumer.
    pub(super) fn chunk(&mut self, conn: ConnId, app: AppId, piece: Chunk) {
        let transfer = piece.transfer;
        let Some(t) = self.stream_of(app, transfer, false) else {
            return self.refuse(conn, Op::Chunk, Some(transfer), Refusal::UnknownTransfer);
        };
        let size = t.stream.unwrap_or(0);
        let len = piece.data.len() as u64;
        let end = piece.offset.checked_add(len);
        if len > MAX_CHUNK || end.is_none_or(|end| end > size) {
            return self.refuse(conn, Op::Chunk, Some(transfer), Refusal::BadRange);
        }
        if let Some(cc) = self.app_conn(t.to) {
            self.out.push(cc, FromPm::Chunk(piece));
        }
    }

    pub(super) fn transfer_done(
        &mut self,
        conn: ConnId,
        app: AppId,
        transfer: TransferId,
        error: Option<String>,
        direct: Option<Direct>,
    ) {
        let owned = self
            .transfers
            .get(&transfer)
            .is_some_and(|t| self.cdos.get(&t.to).is_some_and(|c| c.app() == app));
        if !owned {
            return self.refuse(
                conn,
                Op::TransferDone,
                Some(transfer),
                Refusal::UnknownTransfer,
            );
        }
        self.finish_transfer(conn, app, transfer, error, direct);
    }

    /// Ends `transfer` to `app` (on `conn`) as its consumer reported, or at once for one
    /// whose bytes went with the ticket: the CDO is local, or is ticketed again elsewhere.
    pub(super) fn finish_transfer(
        &mut self,
        conn: ConnId,
        app: AppId,
        transfer: TransferId,
        error: Option<String>,
        direct: Option<Direct>,
    ) {
        let outcome = match &error {
            None => traffic::Outcome::Done(direct),
            Some(e) => traffic::Outcome::Failed(e),
        };
        if let Some(t) = self.end_transfer(transfer, outcome) {
            self.transfer_ended(conn, app, (transfer, t), error, direct);
        }
    }

    /// What follows the end of `transfer` (`t`) to `app`, its record gone: subscribers are
    /// told, the CDO is local or is ticketed again elsewhere, and the offer read from is
    /// released.
    pub(super) fn transfer_ended(
        &mut self,
        conn: ConnId,
        app: AppId,
        (transfer, t): (TransferId, Transfer),
        error: Option<String>,
        direct: Option<Direct>,
    ) {
        let detail = || match &error {
            None => match direct {
                Some(Direct::Copied) => {
                    format!("transfer {transfer} completed (copied from the provider's memory)")
                }
                Some(Direct::Mapped) => {
                    format!("transfer {transfer} completed (the provider's memory mapped: no copy)")
                }
                None => format!("transfer {transfer} completed"),
            },
            Some(e) => format!("transfer {transfer} failed: {e}"),
        };
        self.notify(EventKind::TransportCompleted, app, Some(t.from), detail);
        let ended = self
            .cdos
            .get_mut(&t.to)
            .and_then(|mut c| match &mut c.state {
                State::Required(w) => {
                    w.transfer = None;
                    w.local |= error.is_none();
                    Some(w.demanded)
                }
                _ => None,
            });
        match (ended, error) {
            (Some(demanded), None) if demanded && !t.completes_demand => {
                self.out.push(conn, FromPm::Ready { cdo: t.to });
            }
            (Some(_), Some(_)) if self.copy_refused(t.to, t.from, t.route) => {
                self.requeue(t.to, None);
            }
            (Some(_), Some(_)) => self.retry_elsewhere(t.to, t.from),
            _ => {}
        }
        self.source_released(t.from);
    }

    /// A transfer to consumer `to` from `failed` failed: never ticket that offer to it
    /// again, put it back among the waiting, and ticket another offer if one exists.
    pub(super) fn retry_elsewhere(&mut self, to: CdoId, failed: CdoId) {
        self.requeue(to, Some(failed));
    }

    /// Puts consumer `to` back among the waiting (never to be ticketed `failed` again, if
    /// given) and tickets an offer if one exists.
    fn requeue(&mut self, to: CdoId, failed: Option<CdoId>) {
        let Some(mut c) = self.cdos.get_mut(&to) else {
            return;
        };
        let State::Required(w) = &mut c.state else {
            return;
        };
        w.transfer = None;
        if let Some(failed) = failed {
            w.failed.insert(failed);
        }
        let name = Arc::clone(&c.name);
        drop(c);
        self.cdos.wait(&name, to);
        self.ticket(to);
    }

    /// Whether a failed transfer to `to` from `from` over `route` was the copy out of the
    /// provider's memory of an offer not registered with the fabric (the only way such an
    /// offer is planned over RMA: [`crate::proto::HostMemory::copy_only`]). If so, no copy
    /// is planned for that consumer any more (its kernel refuses them, say) and the offer
    /// stays usable to it, by another way.
    fn copy_refused(&mut self, to: CdoId, from: CdoId, route: traffic::Route) -> bool {
        let copied = route.transport == crate::view::Transport::Rma
            && self
                .cdos
                .get(&from)
                .is_some_and(|f| f.extras.unregistered());
        let consumer = self.cdos.get(&to).map(|c| c.app());
        let Some(app) = consumer
            .filter(|_| copied)
            .and_then(|a| self.apps.get_mut(&a))
        else {
            return false;
        };
        app.copies_refused = true;
        true
    }

    /// A transfer from `offer` ended: finish a pending withdraw (answered now unless the
    /// file it handed over is still being checked: [`Manager::kept_checked`]) or leave.
    pub(super) fn source_released(&mut self, offer: CdoId) {
        let busy = self.transfers.reading(offer);
        let Some(mut c) = self.cdos.get_mut(&offer) else {
            return;
        };
        let app = c.app();
        let withdrawn = matches!((&c.state, busy), (State::Withdrawing(_), false));
        if withdrawn {
            c.state = State::Withdrawn;
        }
        drop(c);
        if withdrawn && app == POOL {
            return self.forget_kept(offer);
        }
        if withdrawn {
            self.answer_withdraw(offer);
        }
        self.try_bye(app);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::InlineBytes;

    fn transfer(from: CdoId, started: Instant) -> Transfer {
        Transfer {
            from,
            to: 99,
            started,
            stream: None,
            completes_demand: false,
            len: 8,
            route: traffic::Route::of(
                &Source::Inline {
                    bytes: InlineBytes(Arc::from(&b"x"[..])),
                },
                None,
            ),
        }
    }

    #[test]
    fn transfers_in_flight_keep_their_loads_and_pins_in_step() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut f = InFlight::default();
        f.start(1, transfer(7, t0));
        f.start(2, transfer(7, t0 + s));
        f.start(3, transfer(8, t0));
        assert_eq!((f.load(7), f.load(8), f.len()), (2, 1, 3));
        // Withdrawing offer 7 pins its two transfers, each from when it started.
        f.pin_from(|o| o == 7, 10 * s);
        f.pin_from(|o| o == 7, 99 * s);
        assert_eq!(
            f.next_abandon(),
            Some(t0 + 10 * s),
            "a pin keeps its instant"
        );
        assert_eq!(f.overdue(t0 + 9 * s), None);
        assert_eq!(f.overdue(t0 + 10 * s), Some(1));
        assert!(f.end(1).is_some());
        // One ended before its deadline is no longer pinned.
        assert!(f.end(2).is_some());
        assert_eq!(f.next_abandon(), None);
        assert!(!f.reading(7) && f.reading(8));
        assert!(f.end(2).is_none(), "ended once");
        assert_eq!(f.len(), 1);
    }
}
