//! Subscriptions and events inside the sans-IO manager: who is subscribed to what, which
//! events an operation raises, and operations held for acknowledgements.
//!
//! An application operation on a CDO goes through [`Manager::cdo_op`]: if subscribers with
//! `signal_before` match, they get the event first, and when one of them must acknowledge,
//! the operation waits in a [`Hold`] (later messages of that connection queue behind it, so
//! its order is kept). Otherwise, or once acknowledged, the operation runs; its own events
//! go to the other subscribers, and if one of those must acknowledge, the replies the
//! operation produced for its application are withheld in a hold until then. Holds end
//! when every awaited acknowledgement came, when the subscriber unsubscribes or goes, or at
//! the deadline ([`Manager::handle_timeout`]), when the late subscriber gets [`FromPm::AckTooLate`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::window::{Outgoing, Window};
use super::{Clock, Conn, ConnId, HashMap, Manager};
use crate::attr::{self, AttrValue, Attributes};
use crate::events::{ACK_TIMEOUT, EventKind, EventKinds, PoolEvent, SubId, SubscribeOptions};
use crate::proto::{AppId, CdoId, FromPm, Op, Refusal, ToPm};
use crate::selector::{Expr, Selector};

/// One subscription.
#[derive(Debug)]
pub(super) struct Subscription {
    pub(super) app: AppId,
    pub(super) conn: ConnId,
    /// What it counts against its app's bytes (see `policy`).
    cost: usize,
    /// The kinds it hears of.
    pub(super) kinds: EventKinds,
    /// Which CDOs' events it hears of.
    pub(super) selector: Selector,
    pub(super) options: SubscribeOptions,
    /// The events it is sent ahead of what its app took (see `window`).
    pub(super) window: Window,
}

/// An operation waiting for acknowledgements.
#[derive(Debug)]
struct Hold {
    /// Still to run (signal-before), or `None` when it ran and `replies` wait.
    msg: Option<ToPm>,
    /// The operation's replies to its application, withheld.
    replies: Vec<FromPm>,
    /// (subscription, serial) pairs still to acknowledge.
    awaiting: BTreeSet<(SubId, u64)>,
    /// When the pool manager stops waiting.
    deadline: Instant,
}

/// The manager's event state.
#[derive(Debug)]
pub(super) struct Events {
    pub(super) subs: BTreeMap<SubId, Subscription>,
    /// Subscriptions of connections to cut off, out of every event's way until then
    /// ([`Manager::cut_overrun`]).
    set_aside: BTreeMap<SubId, Subscription>,
    /// Bytes of past events (a new subscription's replay) queued for each connection since
    /// the output was last taken whole: not what its operations' events are bounded by.
    pub(super) replayed: HashMap<ConnId, usize>,
    /// Ordered: expiries are handled, and late subscribers told, in connection order.
    holds: BTreeMap<ConnId, Hold>,
    queued: HashMap<ConnId, VecDeque<ToPm>>,
    next_serial: u64,
    clock: Clock,
    /// The latest time the driver reported.
    now: Instant,
    ack_timeout: Duration,
    /// Acknowledgements awaited by the after-events of the operation running now.
    collecting: Vec<(SubId, u64)>,
    /// Subscriptions that hear of demands before they happen (no leases while there is
    /// one: see `lease`).
    holding_demands: usize,
    /// How many subscriptions want each kind of event, after (0) and before (1) the fact:
    /// an operation nobody hears of is not worded as an event at all.
    wanted: [[u32; EventKind::ALL.len()]; 2],
    /// In a grace period (see `grace`), every event after the fact so far (at most
    /// [`MAX_GRACE_LOG`]): a subscription asked again by a reclaiming app hears those
    /// raised before it came back, as it would have heard them had it been there.
    pub(super) grace_log: Option<Vec<Logged>>,
}

/// Most events a grace period keeps for subscriptions asked again later in it.
pub(super) const MAX_GRACE_LOG: usize = crate::events::MAX_REPLAY;

/// An event raised in a grace period (see [`Events::grace_log`]).
#[derive(Debug)]
pub(super) struct Logged {
    pub(super) kind: EventKind,
    pub(super) app: AppId,
    pub(super) subject: Option<Subject>,
    pub(super) detail: String,
}

impl Events {
    /// Live subscription `sub`.
    pub(super) fn sub_mut(&mut self, sub: SubId) -> Option<&mut Subscription> {
        self.subs.get_mut(&sub)
    }

    /// The earliest deadline of an operation held for acknowledgements.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.holds.values().map(|h| h.deadline).min()
    }

    /// How long operations wait for acknowledgements from now on.
    pub(super) fn set_ack_timeout(&mut self, timeout: Duration) {
        self.ack_timeout = timeout;
    }

    /// Number of operations waiting for acknowledgements.
    pub(super) fn held_count(&self) -> usize {
        self.holds.len()
    }

    /// The latest time the driver reported.
    pub(super) fn now(&self) -> Instant {
        self.now
    }

    /// The manager's clock.
    pub(super) fn clock(&self) -> Clock {
        self.clock
    }

    /// Subscriptions open now.
    pub(super) fn subscription_count(&self) -> usize {
        self.subs.len()
    }

    /// Whether some subscription wants events of `kind` before (`before`) or after the
    /// fact.
    pub(super) fn wants(&self, kind: EventKind, before: bool) -> bool {
        self.wanted[usize::from(before)][kind.index()] > 0 || (!before && self.grace_log.is_some())
    }

    /// A reclaiming app's subscriptions heard serials up to `serial`: the next event
    /// comes after it.
    pub(super) fn heard(&mut self, serial: u64) {
        self.next_serial = self.next_serial.max(serial.saturating_add(1));
    }

    /// Starts (`true`) or ends the log of a grace period's events ([`Events::grace_log`]).
    pub(super) fn log_grace(&mut self, on: bool) {
        self.grace_log = on.then(Vec::new);
    }

    /// Counts subscription `s` in (or out of, `add` false) what is wanted.
    fn count(&mut self, s: &Subscription, add: bool) {
        for kind in EventKind::ALL {
            if s.kinds.contains(kind) {
                let n = &mut self.wanted[usize::from(s.options.signal_before)][kind.index()];
                *n = if add { *n + 1 } else { n.saturating_sub(1) };
            }
        }
    }

    /// True while a subscription hears of demands before they happen.
    pub(super) fn demands_held(&self) -> bool {
        self.holding_demands > 0
    }

    /// True while someone subscribes: only then are events worded.
    pub(super) fn listened(&self) -> bool {
        !self.subs.is_empty() || self.grace_log.is_some()
    }

    pub(super) fn new(clock: Clock) -> Events {
        Events {
            subs: BTreeMap::new(),
            set_aside: BTreeMap::new(),
            replayed: HashMap::default(),
            holds: BTreeMap::new(),
            queued: HashMap::default(),
            next_serial: 1,
            clock,
            now: clock.origin,
            ack_timeout: ACK_TIMEOUT,
            collecting: Vec::new(),
            holding_demands: 0,
            wanted: [[0; EventKind::ALL.len()]; 2],
            grace_log: None,
        }
    }
}

/// What an event is about: a CDO's name and attributes.
#[derive(Clone, Debug)]
pub(super) struct Subject {
    /// The CDO (an offer's event grants leases of it).
    cdo: CdoId,
    name: Arc<str>,
    pub(super) attributes: Attributes,
}

/// Whether a subscription with these kinds and options hears of demands before they
/// happen (and may hold them for its acknowledgement): no leases while one does.
fn holds_demands(kinds: EventKinds, options: SubscribeOptions) -> bool {
    kinds.contains(EventKind::Demand) && options.signal_before
}

/// The kinds of events the operations a `Took` stands for raise (see [`Manager::split`]).
const TOOK_KINDS: [EventKind; 5] = [
    EventKind::Declare,
    EventKind::Demand,
    EventKind::Dispose,
    EventKind::TransportStarted,
    EventKind::TransportCompleted,
];

/// The event kind of an operation on a CDO, if it is one.
fn kind_of_op(op: Op) -> Option<EventKind> {
    Some(match op {
        Op::Declare => EventKind::Declare,
        Op::Seal => EventKind::Seal,
        Op::Offer => EventKind::Offer,
        Op::Require => EventKind::Require,
        Op::Demand => EventKind::Demand,
        Op::Withdraw => EventKind::Withdraw,
        Op::Retract => EventKind::Retract,
        Op::Dispose => EventKind::Dispose,
        _ => return None,
    })
}

impl Manager {
    /// Advances the manager's clock to `now` (never backwards): events carry it and hold
    /// deadlines count from it. Every input that takes `now` starts here.
    /// Ends the holds whose deadline passed by `now`: their operations proceed, and each
    /// subscriber that did not acknowledge in time gets [`FromPm::AckTooLate`] and loses
    /// that subscription (in connection order).
    pub(super) fn expire_holds(&mut self, now: Instant) {
        let expired: Vec<ConnId> = self
            .events
            .holds
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(&c, _)| c)
            .collect();
        for conn in expired {
            let late: Vec<(SubId, u64)> = self
                .events
                .holds
                .get(&conn)
                .map(|h| h.awaiting.iter().copied().collect())
                .unwrap_or_default();
            for (sub, serial) in late {
                // A subscriber that misses the deadline loses the subscription: one that
                // never acknowledges must not hold every operation, one after another.
                if let Some(s) = self.events.subs.get(&sub) {
                    tracing::warn!(
                        "subscription {sub} did not acknowledge event {serial} in time; it is ended"
                    );
                    self.out.push(s.conn, FromPm::AckTooLate { sub, serial });
                    self.drop_subscription(sub);
                }
            }
            self.release(conn);
        }
    }

    /// Moves the manager's time on to `now` (never back). The driver hands one instant to
    /// a whole batch of messages: only the first of them finds time moved.
    pub(super) fn advance(&mut self, now: Instant) {
        if now <= self.events.now {
            return;
        }
        self.events.now = now;
        self.stats.tick(now);
    }

    /// Whether messages of `conn` must wait behind a held operation.
    pub(super) fn queue_if_held(&mut self, conn: ConnId, msg: ToPm) -> Option<ToPm> {
        if !self.events.holds.contains_key(&conn) {
            return Some(msg);
        }
        self.events.queued.entry(conn).or_default().push_back(msg);
        None
    }

    /// Runs an application's operation on a CDO, with before-events and holds.
    pub(super) fn cdo_op(&mut self, conn: ConnId, app: AppId, msg: ToPm) {
        let Some(msg) = self.split(conn, app, msg) else {
            return;
        };
        if let Some(kind) = kind_of_op(msg.op())
            && self.events.wants(kind, true)
            && let Some(subject) = self.subject_of(app, &msg)
        {
            let awaiting = self.emit(kind, app, Some(subject), "", true);
            if !awaiting.is_empty() {
                return self.hold(conn, Some(msg), Vec::new(), awaiting);
            }
        }
        self.execute(conn, app, msg);
    }

    /// Runs a message that stands for several operations as those operations, each with
    /// its events (and possibly held), when a subscription would hear of one of them;
    /// the message back when it runs as one.
    /// - `SealOffer` is `Seal` and `Offer` for subscribers of seals, or of offers before
    ///   they happen (the seal's `Done` then goes out too).
    /// - `Took` is `Declare`, `UseLease` (then `TransferDone` for a lease of memory) and
    ///   `Dispose` for subscribers of declares, demands, disposes or transports; run as
    ///   one, it makes no CDO (see [`Manager::took`]).
    fn split(&mut self, conn: ConnId, app: AppId, msg: ToPm) -> Option<ToPm> {
        let parts = match msg {
            ToPm::SealOffer {
                cdo,
                attributes,
                region,
                extras,
            } if self.events.wants(EventKind::Seal, false)
                || self.events.wants(EventKind::Seal, true)
                || self.events.wants(EventKind::Offer, true) =>
            {
                vec![
                    ToPm::Seal { cdo, attributes },
                    ToPm::Offer {
                        cdo,
                        region,
                        extras,
                    },
                ]
            }
            ToPm::Took { cdo, lease, direct }
                if TOOK_KINDS
                    .iter()
                    .any(|&k| self.events.wants(k, false) || self.events.wants(k, true))
                    && let Ok(l) = self.takeable(app, cdo, lease) =>
            {
                let (name, inline) = (String::from(&*l.name), l.inline);
                let mut parts = vec![ToPm::Declare { cdo, name }, ToPm::UseLease { cdo, lease }];
                if !inline {
                    parts.push(ToPm::TransferDone {
                        transfer: lease,
                        error: None,
                        direct,
                    });
                }
                parts.push(ToPm::Dispose { cdo, answer: false });
                parts
            }
            // A take that would be refused is refused as one message, with no events.
            msg => return Some(msg),
        };
        // Each goes as if it came next from the app: behind an operation the one before
        // it left held, if one did.
        for part in parts {
            self.app_message(conn, app, part);
        }
        None
    }

    /// Runs the operation; withholds its replies if after-events need acknowledgements.
    fn execute(&mut self, conn: ConnId, app: AppId, msg: ToPm) {
        let mark = self.out.mark();
        self.events.collecting.clear();
        self.run_cdo_op(conn, app, msg);
        let awaiting = std::mem::take(&mut self.events.collecting);
        if awaiting.is_empty() {
            return;
        }
        let produced = self.out.take_since(mark);
        // The operation's replies wait; events go out, also those to this connection's own
        // subscriptions (it could never acknowledge them otherwise).
        let (mine, others): (Vec<_>, Vec<_>) = produced
            .into_iter()
            .partition(|(c, m)| *c == conn && !matches!(m, FromPm::Event { .. }));
        self.out.push_all(others);
        let replies = mine.into_iter().map(|(_, m)| m).collect();
        self.hold(conn, None, replies, awaiting);
    }

    /// Holds `conn` (its operation `msg` still to run, or its `replies` withheld) until
    /// `awaiting` are acknowledged or the ack timeout passes.
    fn hold(
        &mut self,
        conn: ConnId,
        msg: Option<ToPm>,
        replies: Vec<FromPm>,
        awaiting: Vec<(SubId, u64)>,
    ) {
        let deadline = super::later(self.events.now, self.events.ack_timeout);
        let awaiting = awaiting.into_iter().collect();
        let hold = Hold {
            msg,
            replies,
            awaiting,
            deadline,
        };
        self.events.holds.insert(conn, hold);
    }

    /// Ends `conn`'s hold: runs its operation or sends its replies, then the messages
    /// that queued behind it (until one of them is held in turn).
    fn release(&mut self, conn: ConnId) {
        let Some(hold) = self.events.holds.remove(&conn) else {
            return;
        };
        let app = match self.conns.get(&conn) {
            Some(Conn::Joined(app)) => *app,
            _ => {
                self.events.queued.remove(&conn);
                return;
            }
        };
        match hold.msg {
            Some(msg) => self.execute(conn, app, msg),
            None => self
                .out
                .push_all(hold.replies.into_iter().map(|m| (conn, m))),
        }
        while !self.events.holds.contains_key(&conn) {
            let Some(next) = self
                .events
                .queued
                .get_mut(&conn)
                .and_then(VecDeque::pop_front)
            else {
                break;
            };
            self.app_message(conn, app, next);
        }
        if self
            .events
            .queued
            .get(&conn)
            .is_some_and(VecDeque::is_empty)
        {
            self.events.queued.remove(&conn);
        }
    }

    /// The name and attributes an operation's event shows, or `None` when the operation
    /// would be refused (no event for refused operations).
    fn subject_of(&self, app: AppId, msg: &ToPm) -> Option<Subject> {
        if let ToPm::Declare { cdo, name } = msg {
            let ok = self.declarable(app, *cdo, name).is_ok();
            let attributes = Attributes::from([(attr::NAME.into(), AttrValue::Str(name.clone()))]);
            return ok.then(|| Subject {
                cdo: *cdo,
                name: name.as_str().into(),
                attributes,
            });
        }
        let cdo = msg.cdo()?;
        let c = self.cdos.get(&cdo).filter(|c| c.app() == app)?;
        if !c.state.allows(msg.op()) {
            return None;
        }
        let mut subject = self.event_subject(cdo)?;
        match msg {
            ToPm::Seal { attributes, .. } => {
                subject.attributes = attributes.clone();
                subject
                    .attributes
                    .insert(attr::NAME.into(), AttrValue::Str(c.name.to_string()));
            }
            ToPm::Offer { region, .. } => {
                subject
                    .attributes
                    .insert(attr::LOCAL_SIZE.into(), AttrValue::Uint(region.len));
            }
            _ => {}
        }
        Some(subject)
    }

    /// A CDO's name and attributes as events show them (built-in name and size included);
    /// `None` without subscribers (nothing to show) or CDO.
    pub(super) fn event_subject(&self, cdo: CdoId) -> Option<Subject> {
        if !self.events.listened() {
            return None;
        }
        let c = self.cdos.get(&cdo)?;
        Some(Subject {
            cdo,
            name: Arc::clone(&c.name),
            attributes: self.published(cdo),
        })
    }

    /// Raises the after-event of operation `op` that just succeeded on `cdo` (`gone`: the
    /// CDO as it was, when the operation removed it); acks it needs are collected for
    /// [`Manager::execute`].
    pub(super) fn op_succeeded(&mut self, op: Op, app: AppId, cdo: CdoId, gone: Option<Subject>) {
        let Some(kind) = kind_of_op(op).filter(|&k| self.events.wants(k, false)) else {
            return;
        };
        let subject = gone.or_else(|| self.event_subject(cdo));
        let awaiting = self.emit(kind, app, subject, "", false);
        self.events.collecting.extend(awaiting);
    }

    /// Raises an event that nothing waits for (joins, leaves, transports). Its `detail` is
    /// worded only when someone subscribes: transports are the hot path.
    pub(super) fn notify(
        &mut self,
        kind: EventKind,
        app: AppId,
        cdo: Option<CdoId>,
        detail: impl FnOnce() -> String,
    ) {
        if !self.events.wants(kind, false) {
            return;
        }
        let subject = cdo.and_then(|c| self.event_subject(c));
        self.emit(kind, app, subject, &detail(), false);
    }

    /// Sends one event to every matching subscription with this `before`; returns the
    /// acknowledgements it needs (only operations on CDOs can be held).
    pub(super) fn emit(
        &mut self,
        kind: EventKind,
        app: AppId,
        subject: Option<Subject>,
        detail: &str,
        before: bool,
    ) -> Vec<(SubId, u64)> {
        // A reclaiming app replays what the manager that is gone confirmed: its
        // subscribers heard of it then (see `grace`; only in a grace period).
        if self.grace.is_some() && self.apps.get(&app).is_some_and(|a| a.replaying) {
            return Vec::new();
        }
        if !before && let Some(log) = &mut self.events.grace_log {
            if log.len() < MAX_GRACE_LOG {
                log.push(Logged {
                    kind,
                    app,
                    subject: subject.clone(),
                    detail: detail.to_string(),
                });
            } else if log.len() == MAX_GRACE_LOG {
                tracing::warn!(
                    "grace period: more than {MAX_GRACE_LOG} events; subscriptions asked again later in it miss those past that"
                );
            }
        }
        let holdable = kind.is_cdo_event()
            && !matches!(
                kind,
                EventKind::TransportStarted | EventKind::TransportCompleted
            );
        let empty = Attributes::new();
        let attrs = subject.as_ref().map_or(&empty, |s| &s.attributes);
        // Mostly one subscriber or a few: no allocation for them.
        let targets: smallvec::SmallVec<[(SubId, ConnId, bool, AppId); 4]> = self
            .events
            .subs
            .iter()
            .filter(|(_, s)| {
                s.kinds.contains(kind)
                    && s.options.signal_before == before
                    && !(s.options.no_local && s.app == app)
                    && (!kind.is_cdo_event() || s.selector.matches(attrs))
            })
            .map(|(&id, s)| (id, s.conn, s.options.require_ack && holdable, s.app))
            .collect();
        if targets.is_empty() {
            return Vec::new();
        }
        // An offer, once it is one, comes with a lease to each app told of it (see
        // `lease`), sent ahead of the event.
        let leased = subject
            .as_ref()
            .filter(|_| kind == EventKind::Offer && !before)
            .map(|s| s.cdo);
        let event = self.event(kind, app, subject, detail, before);
        // What each copy costs, charged to its subscriber before it is made; the copies
        // share the event (one more where acknowledgements are awaited).
        let bytes = super::outbox::pool_event_bytes(&event);
        let serial = event.serial;
        let plain = Arc::new(event);
        let mut acked: Option<Arc<PoolEvent>> = None;
        let mut awaiting = Vec::new();
        let mut granted: smallvec::SmallVec<[AppId; 4]> = smallvec::SmallVec::new();
        for (sub, conn, ack, subscriber) in targets {
            if !self.events.subs.contains_key(&sub) {
                continue; // its connection was cut off meanwhile
            }
            if let Err(why) = self.event_room(conn, subscriber, bytes) {
                self.overrun_conn(conn, why);
                continue;
            }
            let lease = leased.filter(|_| !granted.contains(&subscriber));
            if lease.is_some() {
                granted.push(subscriber);
            }
            let event = if ack {
                awaiting.push((sub, serial));
                Arc::clone(acked.get_or_insert_with(|| {
                    Arc::new(PoolEvent {
                        needs_ack: true,
                        ..PoolEvent::clone(&plain)
                    })
                }))
            } else {
                Arc::clone(&plain)
            };
            self.send_event(
                sub,
                Outgoing {
                    event,
                    bytes,
                    lease,
                },
            );
        }
        awaiting
    }

    /// Cuts `conn` off once the output is next taken ([`Manager::cut_overrun`]); its
    /// subscriptions are set aside meanwhile (they hear nothing more, and cost no event
    /// of this round a look).
    fn overrun_conn(&mut self, conn: ConnId, why: String) {
        if self.overrun.iter().any(|(c, _)| *c == conn) {
            return;
        }
        let cut: Vec<SubId> = self
            .events
            .subs
            .iter()
            .filter(|(_, s)| s.conn == conn)
            .map(|(&id, _)| id)
            .collect();
        for id in cut {
            if let Some(s) = self.events.subs.remove(&id) {
                self.events.count(&s, false);
                self.events.set_aside.insert(id, s);
            }
        }
        self.overrun.push((conn, why));
    }

    /// Cuts off the connections whose events passed their bounds: what is queued for them
    /// is dropped, the driver is told ([`Manager::take_cut`]), and their apps are gone as
    /// if their connections had closed (other subscribers hear why).
    pub(super) fn cut_overrun(&mut self) {
        let now = self.events.now();
        // The set-aside subscriptions come back, to go with their apps as any.
        for (id, s) in std::mem::take(&mut self.events.set_aside) {
            self.events.count(&s, true);
            self.events.subs.insert(id, s);
        }
        for (conn, why) in std::mem::take(&mut self.overrun) {
            if !self.conns.contains_key(&conn) {
                continue;
            }
            tracing::warn!("connection {conn} cut off: {why}");
            self.disconnected_because(now, conn, &format!("it was cut off: {why}"));
            self.out.cut(conn);
        }
    }

    /// A new event (the next serial, the current time) about `app`.
    pub(super) fn event(
        &mut self,
        kind: EventKind,
        app: AppId,
        subject: Option<Subject>,
        detail: &str,
        before: bool,
    ) -> PoolEvent {
        let serial = self.events.next_serial;
        self.events.next_serial += 1;
        let (component, index) = match self.apps.get(&app) {
            Some(a) => (a.component.clone(), a.index),
            // The pool itself offers the CDOs it keeps.
            None if app == super::kept::POOL => ("pool".into(), 0),
            None => (String::new(), 0),
        };
        let (cdo, attributes) = match subject {
            Some(s) => (Some(String::from(&*s.name)), s.attributes),
            None => (None, Attributes::new()),
        };
        PoolEvent {
            kind,
            serial,
            time: self.events.clock.unix_ns(self.events.now),
            before,
            needs_ack: false,
            app,
            component,
            index,
            cdo,
            attributes,
            detail: detail.to_string(),
        }
    }

    /// `Subscribe`: compiles the selector and answers with the subscription's id. A
    /// subscription to app-join events (after the fact) first hears of every other app
    /// joined already, oldest first, with the detail "joined before this subscription": a
    /// tool that counts apps misses none, however early they joined.
    pub(super) fn subscribe(
        &mut self,
        conn: ConnId,
        app: AppId,
        local: u64,
        kinds: EventKinds,
        selector: Expr,
        options: SubscribeOptions,
    ) {
        // Charged at its price: the wire form kept, the compiled form (regexes and their
        // caches, bounded by `Selector::compile`).
        let wire = postcard::to_allocvec(&selector).map_or(0, |v| v.len());
        let selector = match Selector::compile(selector) {
            Ok(s) => s,
            Err(e) => {
                return self.refuse(
                    conn,
                    Op::Subscribe,
                    Some(local),
                    Refusal::BadSelector(e.message),
                );
            }
        };
        let cost = super::policy::SUBSCRIPTION_COST + wire + selector.memory();
        if let Err(why) = self.may_subscribe(app, cost) {
            return self.refuse(conn, Op::Subscribe, Some(local), why);
        }
        let sub = self.id();
        self.account(app, cost, false);
        if holds_demands(kinds, options) {
            self.events.holding_demands += 1;
            self.revoke_all_leases();
        }
        if let Some(a) = self.apps.get_mut(&app) {
            a.subscriptions += 1;
        }
        let subscription = Subscription {
            app,
            conn,
            cost,
            kinds,
            selector,
            options,
            window: Window::default(),
        };
        self.events.count(&subscription, true);
        self.events.subs.insert(sub, subscription);
        self.out.push(conn, FromPm::Subscribed { local, sub });
        // The past comes as it was (after the fact, nothing to acknowledge), whatever the
        // subscription hears of new operations: a late archiver that must hold each offer
        // before it happens also needs what was offered before it came.
        if options.replay {
            self.replay_state(sub, conn, app);
        }
        if self.apps.get(&app).is_some_and(|a| a.replaying) {
            self.replay_grace_log(sub, conn, app);
        }
        // Apps' joins are shard 0's to tell.
        if !kinds.contains(EventKind::AppJoin) || !self.shard.numbers_apps() {
            return;
        }
        let mut joined: Vec<AppId> = self
            .apps
            .iter()
            .filter(|(id, a)| **id != app && !a.leaving)
            .map(|(id, _)| *id)
            .collect();
        joined.sort_unstable();
        for other in joined {
            let detail = "joined before this subscription";
            self.send_past_event((conn, sub), EventKind::AppJoin, other, None, detail);
        }
    }

    /// `Unsubscribe`: ends the subscription; operations waiting for it proceed.
    pub(super) fn unsubscribe(&mut self, conn: ConnId, app: AppId, sub: SubId) {
        if self.events.subs.get(&sub).is_none_or(|s| s.app != app) {
            return self.refuse(
                conn,
                Op::Unsubscribe,
                Some(sub),
                Refusal::UnknownSubscription,
            );
        }
        self.drop_subscription(sub);
        self.done(conn, Op::Unsubscribe, sub);
    }

    /// `Ack`: one awaited acknowledgement arrived.
    pub(super) fn ack(&mut self, conn: ConnId, app: AppId, sub: SubId, serial: u64) {
        if self.events.subs.get(&sub).is_none_or(|s| s.app != app) {
            return self.refuse(conn, Op::Ack, Some(sub), Refusal::UnknownSubscription);
        }
        self.acknowledged(|key| key == (sub, serial));
    }

    /// Removes the awaited acknowledgements `done` selects and releases the holds that
    /// await nothing more.
    fn acknowledged(&mut self, done: impl Fn((SubId, u64)) -> bool) {
        let mut free = Vec::new();
        for (&conn, h) in &mut self.events.holds {
            h.awaiting.retain(|&k| !done(k));
            if h.awaiting.is_empty() {
                free.push(conn);
            }
        }
        free.sort_unstable();
        for conn in free {
            self.release(conn);
        }
    }

    fn drop_subscription(&mut self, sub: SubId) {
        if let Some(s) = self.events.subs.remove(&sub) {
            self.events.count(&s, false);
            if holds_demands(s.kinds, s.options) {
                self.events.holding_demands -= 1;
            }
            self.account(s.app, s.cost + s.window.waiting_bytes(), true);
            if let Some(a) = self.apps.get_mut(&s.app) {
                a.subscriptions = a.subscriptions.saturating_sub(1);
            }
        }
        self.acknowledged(|(s, _)| s == sub);
    }

    /// An application is gone: its subscriptions end (releasing what waited for them) and
    /// so do its own holds.
    pub(super) fn forget_app_events(&mut self, app: AppId, conn: ConnId) {
        self.events.holds.remove(&conn);
        self.events.queued.remove(&conn);
        let subs: Vec<SubId> = self
            .events
            .subs
            .iter()
            .filter(|(_, s)| s.app == app)
            .map(|(&id, _)| id)
            .collect();
        for sub in subs {
            self.drop_subscription(sub);
        }
    }
}
