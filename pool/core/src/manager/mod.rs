//! The pool manager's logic, sans IO (in the manner of `quinn-proto`): a deterministic state
//! machine fed with connection events and decoded messages, producing messages to send. No
//! sockets, threads or clocks: the driver supplies nonces and the time (every input takes
//! `now`, as quinn-proto's do; [`Clock`] maps instants to wall-clock times;
//! [`Manager::poll_timeout`] says when to call [`Manager::handle_timeout`]) and delivers
//! outputs.
//!
//! It keeps the applications (JOIN with proof of the workflow secret, WELCOME, LEAVE/BYE),
//! every CDO's state, the offers by name and the transfers in flight, and enforces:
//! - a demand of a name not yet offered waits until some app offers it;
//! - require lets the PM ticket a transfer before the demand;
//! - any offer of a name is a valid source; the least loaded one is ticketed;
//! - withdraw completes only when no transfer reads from the offer and no lease of its
//!   memory is held, and a ticketed transfer is never lost by a withdraw;
//! - LEAVE is answered with BYE only when nothing required is pending on the app's offers;
//! - when a provider disappears, demands only it could serve fail with `NoProvider`,
//!   transfers from it are re-ticketed from other offers, requires keep waiting.
//!
//! Transport planning lives here too: a ticket's [`Source`](crate::proto::Source) is the provider's buffer itself
//! when consumer and provider share a process, the bytes themselves for a small CDO whose
//! offer carried them (within [`policy::Policy::max_inline_bytes`], held until withdraw),
//! an RMA read when both have endpoints of one
//! libfabric provider (shm only within a host), and otherwise the last-resort stream that
//! the PM relays in chunks between the two control connections ([`ToPm::Fetch`],
//! [`FromPm::Serve`], [`ToPm::Chunk`], [`FromPm::Chunk`]).
//!
//! What one app may make the PM hold and do is bounded by its [`policy::Policy`]: bytes of
//! CDOs and subscriptions, attribute size, subscriptions, which names it may offer, which
//! fabric changes it may report, how long its transfers may pin an offer being withdrawn;
//! and a subscriber that misses an acknowledgement deadline loses that subscription. What
//! an app announces about its process memory is accepted only from the process it names
//! (its connection's verified peer process, where the driver knows it, and the first
//! process that announced that pid on its host).
//!
//! CDO states: `Declared` → `Sealed` → `Offered` → (`Withdrawing`) → `Withdrawn` for a
//! provider; `Declared` → `Required` (with a transfer, demanded or not) → local for a
//! consumer; `Dispose` ends either.
//!
//! Every public entry point of [`Manager`] is in this file, its front door: what a driver
//! may do is read in one place, and each entry delegates to the part that owns the concern
//! (the parts' own state, such as the subscriptions and holds of `events::Events`, the
//! transfers in flight with their loads and pins of `transfer::InFlight`, the waiting
//! connections of `admission::Admission` or the observers' `observe::Stats`, is reached
//! through their methods).
//!
//! The parts, one concern each:
//! - [`cdo`]: the CDO table (`CdoTable`: every live CDO with the name indexes of offers and
//!   waiting consumers, kept in step by the table), the states and what each allows (the
//!   one transition table), and the operations apps perform on their CDOs;
//! - [`outbox`]: what is to be sent and which connections closed (`Outbox`), the one
//!   place every part writes to;
//! - [`admission`]: connections waiting to join, their deadline and how many may wait;
//! - [`apps`]: connections, JOIN/WELCOME, LEAVE/BYE, and what goes when an app goes;
//! - [`transfer`]: ticketing, the stream relay, completion, failure and re-ticketing;
//! - [`lease`]: tickets granted with offer events ahead of a demand, who gets one, and what
//!   a withdraw, a provider gone or a holder gone does to them;
//! - [`plan`]: which transport a ticket uses (pure: the two apps and the offer in, a
//!   [`Source`](crate::proto::Source) out);
//! - [`group`]: a group's demand (one message for all its members);
//! - [`kept`]: CDOs the pool offers after their producers handed their files over;
//! - [`spill`]: offers the PM has written to the global file system for consumers that
//!   share no network with their provider;
//! - [`events`]: subscriptions, the events operations raise, operations held for
//!   acknowledgements;
//! - [`policy`]: quotas, deadlines, name bindings, memory claims;
//! - [`observe`] and [`traffic`]: what observers are shown.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub mod admission;
mod apps;
mod cdo;
mod distances;
mod events;
mod grace;
mod group;
mod kept;
mod lease;
mod observe;
mod outbox;
mod plan;
pub mod policy;
mod replay;
mod shard;
mod spill;
mod store;
mod traffic;
mod transfer;
mod window;

use apps::{App, Claim, Conn};
pub use apps::{Identity, REAP_SLICE};
use cdo::{Cdo, CdoTable, State, Want};
pub use distances::{DistancesError, HostDistances, MAX_DISTANCE_HOSTS};
pub use grace::MIN_GRACE;
pub use group::GROUP_SLICE;
pub use kept::{Adopted, KeptCheck, KeptFile};
use outbox::Outbox;
use policy::Policy;
use transfer::Transfer;

use crate::Subnet;
use crate::events::{EventKind, FabricChange};
use crate::proto::{AppId, CdoId, FromPm, Op, Refusal, ToPm};
use crate::view::{Query, View};
use admission::{Limits, Peer};

/// The manager's clock: the driver's monotonic instants, and the wall-clock time of one of
/// them, so events can carry wall-clock times (nanoseconds since the Unix epoch) while the
/// manager itself never reads a clock. Two managers given the same clock and inputs
/// produce the same outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// An instant of the driver's monotonic clock ...
    pub origin: Instant,
    /// ... and the wall-clock time at that instant, in ns since the Unix epoch.
    pub origin_unix_ns: i128,
}

impl Clock {
    /// The wall-clock time of `at` (ns since the Unix epoch).
    fn unix_ns(&self, at: Instant) -> i128 {
        let since = at.saturating_duration_since(self.origin).as_nanos();
        self.origin_unix_ns
            .saturating_add(i128::try_from(since).unwrap_or(i128::MAX))
    }
}

/// `at + d`; a timeout too long to represent becomes a century (never, in practice).
fn later(at: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    at.checked_add(d)
        .or_else(|| at.checked_add(CENTURY))
        .unwrap_or(at)
}

/// A connection, as the driver numbers them.
pub type ConnId = u64;

use crate::{HashMap, HashSet};

/// Maps that give memory back as they empty: a PM that held a million CDOs keeps no
/// million-entry tables once they are withdrawn. Shrinking when a table is a quarter full
/// (to half full) costs amortised O(1) per removal.
trait GiveBack {
    /// Capacity and length.
    fn fill(&self) -> (usize, usize);
    /// Shrinks to hold `n` entries.
    fn shrink(&mut self, n: usize);
    /// Shrinks a large table that is at most a quarter full.
    fn give_back(&mut self) {
        let (capacity, len) = self.fill();
        if capacity > 1024 && len * 4 < capacity {
            self.shrink(len * 2);
        }
    }
}

impl<K: Eq + std::hash::Hash, V> GiveBack for HashMap<K, V> {
    fn fill(&self) -> (usize, usize) {
        (self.capacity(), self.len())
    }
    fn shrink(&mut self, n: usize) {
        self.shrink_to(n);
    }
}

impl<K: Eq + std::hash::Hash> GiveBack for HashSet<K> {
    fn fill(&self) -> (usize, usize) {
        (self.capacity(), self.len())
    }
    fn shrink(&mut self, n: usize) {
        self.shrink_to(n);
    }
}

/// The pool manager state machine.
///
/// # Examples
///
/// Driving it in memory, as its driver does: a new connection is challenged, joins with a
/// proof of the workflow secret and is welcomed; everything the manager wants to send comes
/// out of [`Manager::poll_output`].
///
/// ```
/// use std::time::Instant;
///
/// use pool_core::proto::{FromPm, Join, ToPm};
/// use pool_core::{Clock, Manager, auth};
///
/// let clock = Clock { origin: Instant::now(), origin_unix_ns: 0 };
/// let mut pm = Manager::new("climate", b"secret", 1, clock);
/// pm.connected(clock.origin, 7, [42; 32]);
/// assert_eq!(pm.poll_output(), Some((7, FromPm::Challenge { nonce: [42; 32] })));
///
/// let proof = auth::prove(b"secret", &[42; 32], "climate", "producer", 0);
/// pm.handle(clock.origin, 7, ToPm::Join(Box::new(Join {
///     workflow: "climate".into(),
///     component: "producer".into(),
///     index: 0,
///     host: "node1".into(),
///     process: 1,
///     job: String::new(),
///     endpoint: None,
///     alternates: Vec::new(),
///     networks: Vec::new(),
///     memory: None,
///     credential: None,
///     nics: Default::default(),
///     gfs: None,
///     role: Default::default(),
///     proof,
///     reclaim: None,
///     member: None,
/// })));
/// assert!(matches!(pm.poll_output(), Some((7, FromPm::Welcome { .. }))));
/// assert_eq!(pm.app_count(), 1);
/// assert_eq!(pm.poll_timeout(), None, "nothing waits for a deadline");
/// ```
pub struct Manager {
    workflow: String,
    secret: Vec<u8>,
    instance: u64,
    /// Which shard of its pool this manager is ([`Manager::set_shard`]).
    shard: crate::shards::Place,
    conns: HashMap<ConnId, Conn>,
    apps: BTreeMap<AppId, App>,
    cdos: CdoTable,
    /// The transfers in flight, with their loads on offers and their pins.
    transfers: transfer::InFlight,
    /// Ids of transfers and subscriptions.
    next_id: u64,
    /// The next app's id (apps number their CDOs within it, see [`cdo_ids`](crate::proto::cdo_ids)).
    next_app: AppId,
    /// Until when only reclaiming apps may join ([`Manager::reclaiming`]).
    grace: Option<Instant>,
    /// The apps expected back in the grace period, and those that came.
    takeover: grace::Takeover,
    /// What to send, and which connections to close.
    out: Outbox,
    events: events::Events,
    /// Networks of links reported down: endpoints on them are not used for RMA.
    down: Vec<Subnet>,
    /// The policy in force here: the pool's ([`Manager::set_policy`]), its per-app
    /// quotas shared among the shards ([`Policy::share`]).
    policy: Policy,
    /// The pool's policy, as set.
    pool_policy: Policy,
    /// Process memory announcements by (host, pid).
    claims: HashMap<(String, u32), Claim>,
    /// Bytes of small CDOs' data held for all apps (see [`Policy::max_inline_bytes`]).
    inline_held: usize,
    /// What observers are shown.
    stats: observe::Stats,
    /// Members of demanded groups still to ticket ([`Manager::work`]).
    backlog: std::collections::VecDeque<CdoId>,
    /// CDOs of apps that are gone (and whether each app died), still in the table and
    /// removed a slice per step of [`Manager::work`]: an app that leaves with 200,000 CDOs
    /// does not hold the manager for the time it takes to drop them all. Meanwhile nothing
    /// is ticketed to or from them (their app is gone: [`Manager::alive`]).
    reaping: std::collections::VecDeque<(CdoId, bool)>,
    /// Connections waiting for admission, with their deadlines.
    admission: admission::Admission,
    /// CDOs the pool keeps after their producers handed their files over.
    kept: kept::Kept,
    /// Offers written to the global file system at the PM's request.
    spills: spill::Spills,
    /// What all apps hold, and how many each peer joined.
    budget: policy::Budget,
    /// Connections whose events passed their bounds (and why): cut off before the next
    /// output is taken.
    overrun: Vec<(ConnId, String)>,
    /// The hops between the pool's hosts ([`Manager::set_distances`]).
    distances: HostDistances,
    /// Switch links the driver saw go down and not come back
    /// ([`Manager::topology_changed`]).
    switch_links_down: Vec<String>,
}

impl Manager {
    /// A manager for `workflow`, admitting apps that prove knowledge of `secret`.
    /// `instance` is a random id of this PM (apps use it to name same-process hand-overs);
    /// `clock` maps the driver's instants to the wall-clock times events carry.
    pub fn new(workflow: &str, secret: &[u8], instance: u64, clock: Clock) -> Manager {
        Manager {
            workflow: workflow.to_string(),
            secret: secret.to_vec(),
            instance,
            shard: crate::shards::Place::default(),
            conns: HashMap::default(),
            apps: BTreeMap::new(),
            cdos: CdoTable::default(),
            transfers: transfer::InFlight::default(),
            next_id: 1,
            next_app: 1,
            grace: None,
            takeover: grace::Takeover::default(),
            out: Outbox::default(),
            events: events::Events::new(clock),
            down: Vec::new(),
            policy: Policy::default(),
            pool_policy: Policy::default(),
            claims: HashMap::default(),
            inline_held: 0,
            stats: observe::Stats::new(clock.origin),
            backlog: std::collections::VecDeque::new(),
            reaping: std::collections::VecDeque::new(),
            admission: admission::Admission::default(),
            kept: kept::Kept::default(),
            spills: spill::Spills::default(),
            budget: policy::Budget::default(),
            overrun: Vec::new(),
            distances: HostDistances::default(),
            switch_links_down: Vec::new(),
        }
    }

    /// Sets the quotas, deadlines and name bindings of the pool, enforced from now on
    /// (see [`Policy`]; the default applies until then); a shard of a pool of several
    /// enforces its share of the per-app quotas ([`Policy::share`]).
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy.share(self.shard.of());
        self.pool_policy = policy;
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The next message to send, with its connection. Connections whose events passed
    /// their bounds are cut off first ([`Manager::take_cut`]).
    pub fn poll_output(&mut self) -> Option<(ConnId, FromPm)> {
        if !self.overrun.is_empty() {
            self.cut_overrun();
        }
        let next = self.out.next();
        if next.is_none() {
            self.output_taken();
        }
        next
    }

    /// Connections the driver should drop at once, with what it still has to write to
    /// them: their subscribers' events passed the bounds of [`Policy::max_event_bytes`],
    /// [`Policy::max_app_bytes`] or [`Policy::max_bytes`]. The manager has forgotten them
    /// (their apps are gone, as after [`Manager::disconnected`]).
    pub fn take_cut(&mut self) -> Vec<ConnId> {
        self.out.take_cut()
    }

    /// Connections the driver should close once their queued output is sent. The manager
    /// has forgotten them: what they send from now on can be dropped unread, and no
    /// [`Manager::disconnected`] is needed for them.
    pub fn take_closing(&mut self) -> Vec<ConnId> {
        self.out.take_closing()
    }

    /// Number of joined applications.
    pub fn app_count(&self) -> usize {
        self.apps.len()
    }

    /// Number of live CDOs.
    pub fn cdo_count(&self) -> usize {
        self.cdos.len()
    }

    /// Number of leases granted with offer events and neither used nor released yet
    /// (see [`crate::proto::Grant`]).
    pub fn lease_count(&self) -> usize {
        self.transfers.lease_count()
    }

    fn refuse(&mut self, conn: ConnId, op: Op, cdo: Option<CdoId>, why: Refusal) {
        self.out.push(conn, FromPm::Refused { op, cdo, why });
    }

    fn done(&mut self, conn: ConnId, op: Op, cdo: CdoId) {
        self.out.push(conn, FromPm::Done { op, cdo });
    }

    /// Handles one message from `conn`, received at `now` (a JOIN's sender counts as
    /// [`Identity::Unproven`]: the secret alone decides).
    pub fn handle(&mut self, now: Instant, conn: ConnId, msg: ToPm) {
        self.handle_checked(now, conn, msg, Identity::Unproven);
    }

    /// Handles one message from `conn`; for a JOIN, `identity` is what the driver found
    /// out about who sent it.
    pub fn handle_checked(&mut self, now: Instant, conn: ConnId, msg: ToPm, identity: Identity) {
        self.advance(now);
        // A connection being cut off is heard no more (the rest of its batch costs nothing).
        if self.overrun.iter().any(|(c, _)| *c == conn) {
            return;
        }
        self.stats.count(msg.op());
        let app = match (self.conns.get(&conn), &msg) {
            (Some(Conn::Observer), _) => return self.observer_message(conn, msg),
            (Some(Conn::Challenged(nonce, peer)), ToPm::Join(_)) => {
                let (nonce, peer) = (*nonce, *peer);
                return self.join(conn, (nonce, peer), msg, identity);
            }
            (Some(Conn::Joined(_)), ToPm::Join(_)) => {
                return self.refuse(conn, Op::Join, None, Refusal::DuplicateJoin);
            }
            (Some(Conn::Joined(app)), _) => *app,
            _ => return self.refuse(conn, msg.op(), None, Refusal::NotJoined),
        };
        self.app_message(conn, app, msg);
    }

    /// Handles one message of joined `app` on `conn` (a JOIN, refused before, excepted).
    pub(super) fn app_message(&mut self, conn: ConnId, app: AppId, msg: ToPm) {
        match msg {
            ToPm::Join(_) => self.refuse(conn, Op::Join, None, Refusal::DuplicateJoin),
            ToPm::Subscribe {
                local,
                kinds,
                selector,
                options,
            } => self.subscribe(conn, app, local, kinds, *selector, options),
            ToPm::Unsubscribe { sub } => self.unsubscribe(conn, app, sub),
            ToPm::Ack { sub, serial } => self.ack(conn, app, sub, serial),
            ToPm::Taken { sub, count } => self.taken(app, sub, count),
            ToPm::Report { change } => self.report(conn, app, change),
            ToPm::Query { .. } => self.query_from_app(conn),
            ToPm::Replayed => self.replayed(app),
            // The report of a lease's transfer whose use (a CDO operation) waits behind a
            // held operation of this connection follows it there.
            ToPm::TransferDone { transfer, .. }
                if self
                    .transfers
                    .lease(transfer)
                    .is_some_and(|l| l.holder == app) =>
            {
                if let Some(ToPm::TransferDone {
                    transfer,
                    error,
                    direct,
                }) = self.queue_if_held(conn, msg)
                {
                    self.transfer_done(conn, app, transfer, error, direct);
                }
            }
            ToPm::TransferDone {
                transfer,
                error,
                direct,
            } => self.transfer_done(conn, app, transfer, error, direct),
            ToPm::Fetch {
                transfer,
                offset,
                len,
            } => self.fetch(conn, app, transfer, offset, len),
            ToPm::Chunk(piece) => self.chunk(conn, app, piece),
            ToPm::Spilled { cdo, file } => self.spilled(conn, app, cdo, file),
            ToPm::Discard { local, name } => self.discard(conn, app, local, &name),
            ToPm::Release { leases } => self.release_leases(conn, app, &leases),
            // Operations keep their order behind an operation held for acknowledgements.
            ToPm::Leave => {
                if let Some(ToPm::Leave) = self.queue_if_held(conn, ToPm::Leave) {
                    self.leave(app);
                }
            }
            cdo_op => {
                if let Some(m) = self.queue_if_held(conn, cdo_op) {
                    self.cdo_op(conn, app, m);
                }
            }
        }
    }

    /// Carries out an operation on a CDO (after its before-events, if any).
    fn run_cdo_op(&mut self, conn: ConnId, app: AppId, msg: ToPm) {
        if let Err((op, cdo, why)) = self.permitted(app, &msg) {
            return self.refuse(conn, op, Some(cdo), why);
        }
        match msg {
            ToPm::Declare { cdo, name } => self.declare(conn, app, cdo, name),
            ToPm::Seal { cdo, attributes } => self.with_cdo(conn, app, Op::Seal, cdo, |m, c| {
                m.seal(c, attributes);
                m.done(conn, Op::Seal, c);
            }),
            ToPm::SealOffer {
                cdo,
                attributes,
                region,
                extras,
            } => self.seal_offer(conn, app, cdo, attributes, (region, extras)),
            ToPm::Offer {
                cdo,
                region,
                extras,
            } => self.with_cdo(conn, app, Op::Offer, cdo, |m, c| {
                m.offer(conn, c, (region, extras))
            }),
            ToPm::Require { cdo } => self.with_cdo(conn, app, Op::Require, cdo, |m, c| {
                m.require(conn, c, false)
            }),
            ToPm::Demand { cdo } => {
                self.with_cdo(conn, app, Op::Demand, cdo, |m, c| m.require(conn, c, true))
            }
            ToPm::UseLease { cdo, lease } => self.use_lease(conn, app, cdo, lease),
            ToPm::Took { cdo, lease, direct } => self.took(conn, app, (cdo, lease), direct),
            ToPm::DemandGroup {
                group,
                first,
                capacity,
            } => self.demand_group(conn, app, group, (first, capacity)),
            ToPm::Retract { cdo } => {
                self.with_cdo(conn, app, Op::Retract, cdo, |m, c| m.retract(conn, c))
            }
            ToPm::Withdraw { cdo, keep } => {
                if keep.is_none() && self.withdrawn_unkept(conn, app, cdo) {
                    return;
                }
                if let Some(Err(why)) = keep.as_deref().map(|p| self.keepable(app, cdo, p)) {
                    return self.refuse(conn, Op::Withdraw, Some(cdo), why);
                }
                self.with_cdo(conn, app, Op::Withdraw, cdo, |m, c| {
                    if let Some(path) = keep.as_deref() {
                        m.keep(c, path);
                    }
                    m.withdraw(conn, c);
                })
            }
            ToPm::Dispose { cdo, answer } => self.with_cdo(conn, app, Op::Dispose, cdo, |m, c| {
                m.dispose(c);
                if answer {
                    m.done(conn, Op::Dispose, c);
                }
            }),
            other => tracing::error!("not an operation on a CDO: {:?}", other.op()),
        }
    }

    // Connections: admission, joins, losses.

    /// Sets how long and how many connections may wait for admission, from the next
    /// connection on (the default: [`Limits::default`]).
    pub fn set_admission(&mut self, limits: Limits) {
        self.admission.set_limits(limits);
    }

    /// A new connection: challenge it with `nonce` (fresh random bytes from the driver).
    /// It counts as a [`Peer::Local`] connection of an unknown process.
    pub fn connected(&mut self, now: Instant, conn: ConnId, nonce: [u8; 32]) {
        self.connected_from(now, conn, nonce, Peer::Local(None));
    }

    /// A new connection from `peer`: challenge it with `nonce` (fresh random bytes from
    /// the driver) and give it until [`Limits::join_timeout`] to join. A TCP newcomer past
    /// the [`Limits`] makes an older waiting connection go: refused
    /// ([`Refusal::NotAdmitted`]) and closed ([`Manager::take_closing`]).
    pub fn connected_from(&mut self, now: Instant, conn: ConnId, nonce: [u8; 32], peer: Peer) {
        self.advance(now);
        self.challenge(now, conn, nonce, peer);
    }

    /// True once `conn`'s JOIN has been accepted, as an app or an observer (and until it
    /// leaves or is gone).
    pub fn is_joined(&self, conn: ConnId) -> bool {
        matches!(
            self.conns.get(&conn),
            Some(Conn::Joined(_) | Conn::Observer)
        )
    }

    /// The component name and index of a joined app.
    pub fn app_identity(&self, app: AppId) -> Option<(&str, i64)> {
        self.apps.get(&app).map(|a| (a.component.as_str(), a.index))
    }

    /// The connection is gone (closed or broken): the app's CDOs go, transfers from its
    /// offers are re-ticketed elsewhere, and demands only it could serve fail.
    pub fn disconnected(&mut self, now: Instant, conn: ConnId) {
        self.disconnected_because(
            now,
            conn,
            "connection lost without LEAVE (the process died or closed it)",
        );
    }

    /// As [`Manager::disconnected`], with the reason subscribers are told.
    pub fn disconnected_because(&mut self, now: Instant, conn: ConnId, why: &str) {
        self.advance(now);
        self.lost(conn, why);
    }

    // Time: deadlines and what the driver does at them.

    /// When the manager next needs [`Manager::handle_timeout`]: the earliest deadline of an
    /// operation held for acknowledgements, a transfer pinning a withdrawn offer, a
    /// connection waiting to join or a kept CDO's lifetime; `None` while there is none (the driver can sleep until
    /// its next input).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let held = self.events.next_deadline();
        [
            held,
            self.transfers.next_abandon(),
            self.next_join_deadline(),
            self.next_kept_deadline(),
            self.next_spill_deadline(),
            self.grace_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advances the clock and acts on every deadline passed: holds end (their operations
    /// proceed and late subscribers get [`FromPm::AckTooLate`], in connection order),
    /// transfers pinning a withdrawn offer are abandoned, connections that did not join
    /// in time are refused and closed, kept CDOs whose lifetime is over are discarded
    /// (their files go once no transfer reads them: [`Manager::take_discarded`]), and
    /// consumers of offers whose providers did not write them to the global file system in
    /// time get the stream. The driver calls this when
    /// [`Manager::poll_timeout`]'s instant has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        let now = self.events.now();
        self.expire_holds(now);
        self.abandon_overdue(now);
        self.expire_unjoined(now);
        self.expire_kept(now);
        self.expire_spills(now);
        self.end_grace(now);
    }

    /// How long operations wait for acknowledgements (default [`ACK_TIMEOUT`](crate::events::ACK_TIMEOUT)).
    pub fn set_ack_timeout(&mut self, timeout: Duration) {
        self.events.set_ack_timeout(timeout);
    }

    /// Number of operations waiting for acknowledgements.
    pub fn held_count(&self) -> usize {
        self.events.held_count()
    }

    // Work left between inputs (a group's members to ticket, a gone app's CDOs to drop).

    /// Whether [`Manager::work`] has something to do: members of demanded groups still to
    /// ticket, CDOs of apps gone still to remove. A driver with work left calls it again
    /// once it has sent the output and looked at its other input.
    pub fn has_work(&self) -> bool {
        !self.backlog.is_empty() || !self.reaping.is_empty()
    }

    /// Does a slice of deferred work ([`GROUP_SLICE`] members of demanded groups
    /// ticketed, or waiting for an offer when none is there; [`crate::REAP_SLICE`]
    /// CDOs of apps gone removed); true while some is left. A member disposed meanwhile is
    /// passed over.
    pub fn work(&mut self, now: Instant) -> bool {
        self.advance(now);
        self.reap();
        self.ticket_backlog();
        self.has_work()
    }

    // The fabric's changes.

    /// Reports a fabric change (a link down or up, a lost node or process) to subscribers
    /// of [`EventKind::Fabric`]. In a sharded pool only shard 0 tells them (an app
    /// reports a change to every shard, each plans its transfers with it): a subscriber
    /// hears it once.
    pub fn fabric_event(&mut self, now: Instant, detail: &str) {
        self.advance(now);
        let at = self.events.clock().unix_ns(self.events.now());
        self.stats.fabric_event(at, detail);
        if !self.shard.numbers_apps() {
            return;
        }
        self.emit(EventKind::Fabric, 0, None, detail, false);
    }

    /// A fabric change: a link (see [`Manager::link_changed`]) or anything else, told to
    /// subscribers of [`EventKind::Fabric`].
    pub fn fabric_changed(&mut self, now: Instant, change: FabricChange) {
        self.advance(now);
        match change {
            FabricChange::Link {
                name,
                addresses,
                up,
            } => self.link_changed(now, &name, &addresses, up),
            FabricChange::Other(detail) => self.fabric_event(now, &detail),
        }
    }

    /// A link went down or came back up (a fabric event from the host): while it is down,
    /// transfers planned from now on avoid RMA with endpoints on its networks (`subnets`:
    /// the link's addresses with their prefixes; the peers across the link are on them
    /// too) and go by stream over the control connections; subscribers of
    /// [`EventKind::Fabric`] are told, once per change however many report it.
    pub fn link_changed(&mut self, now: Instant, link: &str, subnets: &[Subnet], up: bool) {
        self.advance(now);
        // Several apps of a node (and its host) may report the same change: once is news.
        let known = subnets.iter().all(|s| self.down.contains(s) != up);
        if known && !subnets.is_empty() {
            return;
        }
        for s in subnets {
            self.down.retain(|d| d != s);
            if !up {
                self.down.push(*s);
            }
        }
        let list: Vec<String> = subnets.iter().map(ToString::to_string).collect();
        let state = if up { "up" } else { "down" };
        self.fabric_event(now, &format!("link {link} {state} ({})", list.join(", ")));
    }

    // What observers are shown.

    /// The view an observer asking `query` would get (for drivers that show the pool in
    /// other ways, such as a metrics endpoint). Bounded as observers' answers are.
    pub fn view(&mut self, now: Instant, query: Query) -> View {
        self.advance(now);
        self.answer(query)
    }

    /// Tells the manager the PM process's resident memory (bytes), for [`Status`](crate::view::Status): the
    /// driver reads it (the manager reads nothing of the system).
    pub fn set_memory_bytes(&mut self, bytes: Option<u64>) {
        self.stats.set_memory_bytes(bytes);
    }

    /// Number of observers connected.
    pub fn observer_count(&self) -> usize {
        self.stats.observer_count()
    }
}
