//! The pool manager's logic, sans IO (in the manner of `quinn-proto`): a deterministic state
//! machine fed with connection events and decoded messages, producing messages to send. No
//! sockets, threads or clocks: the driver supplies nonces and the time ([`Clock`],
//! [`Manager::set_time`], [`Manager::handle_timeout`]) and delivers outputs.
//!
//! It keeps the applications (JOIN with proof of the workflow secret, WELCOME, LEAVE/BYE),
//! every CDO's state, the offers by name and the transfers in flight, and enforces:
//! - a demand of a name not yet offered waits until some app offers it;
//! - require lets the PM ticket a transfer before the demand;
//! - any offer of a name is a valid source; the least loaded one is ticketed;
//! - withdraw completes only when no transfer reads from the offer, and a ticketed
//!   transfer is never lost by a withdraw;
//! - LEAVE is answered with BYE only when nothing required is pending on the app's offers;
//! - when a provider disappears, demands only it could serve fail with `NoProvider`,
//!   transfers from it are re-ticketed from other offers, requires keep waiting.
//!
//! Transport planning lives here too: a ticket's [`Source`] is the provider's buffer itself
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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod events;
mod group;
mod observe;
mod plan;
pub mod policy;
mod traffic;

use crate::Subnet;
use crate::attr::{self, AttrValue, Attributes};
use crate::auth;
use crate::events::EventKind;
use fabric_types::RemoteRegion;

use policy::Policy;

use crate::proto::{
    self, AppId, CdoId, Chunk, Direct, FabricEndpoint, FromPm, InlineBytes, MAX_CHUNK, OfferExtras,
    Op, ProcessMemory, Refusal, Source, ToPm, TransferId,
};

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

/// Hash maps of the PM: a fast hasher with a per-process random seed (keys include names
/// chosen by applications, so the seed matters).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

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

/// CDO ids by name (offers, waiting consumers): usually one or a few per name, so a short
/// list each; a name's entry goes when its list empties, so the index never outgrows the
/// live CDOs.
#[derive(Debug, Default)]
struct NameIndex(HashMap<Arc<str>, Vec<CdoId>>);

impl NameIndex {
    fn insert(&mut self, name: &Arc<str>, cdo: CdoId) {
        let ids = self.0.entry(Arc::clone(name)).or_default();
        if !ids.contains(&cdo) {
            ids.push(cdo);
        }
    }

    fn remove(&mut self, name: &str, cdo: CdoId) {
        if let Some(ids) = self.0.get_mut(name) {
            ids.retain(|&c| c != cdo);
            if ids.is_empty() {
                self.0.remove(name);
                self.0.give_back();
            }
        }
    }

    fn get(&self, name: &str) -> &[CdoId] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }
}

/// Where a CDO is in its life.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Declared,
    Sealed,
    Offered(RemoteRegion),
    Withdrawing(RemoteRegion),
    Withdrawn,
    Required(Want),
}

/// A consumer's wish.
#[derive(Clone, Debug, Default, PartialEq)]
struct Want {
    demanded: bool,
    transfer: Option<TransferId>,
    local: bool,
    /// Offers whose transfer failed; not ticketed again.
    failed: BTreeSet<CdoId>,
    /// A group's demand: the ids reserved for its members (first, how many).
    group: Option<(CdoId, u32)>,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Declared => "declared",
            State::Sealed => "sealed",
            State::Offered(_) => "offered",
            State::Withdrawing(_) => "being withdrawn",
            State::Withdrawn => "withdrawn",
            State::Required(w) if w.local => "local",
            State::Required(w) if w.transfer.is_some() => "in transfer",
            State::Required(_) => "required",
        }
    }
}

#[derive(Debug)]
struct Cdo {
    /// The app that declared it (an [`AppId`] fits 32 bits: at most [`proto::MAX_APP`]);
    /// beside `born`, the two take the 8 bytes one `AppId` would.
    owner: u32,
    /// When it was declared, in seconds since the manager's clock origin (for observers).
    born: u32,
    name: Arc<str>,
    attributes: Attributes,
    state: State,
    /// While offered: its bytes as registered with each of the app's alternate endpoints,
    /// and the memory file holding them.
    extras: OfferExtras,
}

impl Cdo {
    /// The app that declared it.
    fn app(&self) -> AppId {
        AppId::from(self.owner)
    }
}

// The app id of a CDO is kept in 32 bits.
const _: () = assert!(proto::MAX_APP <= u32::MAX as u64);

#[derive(Clone, Copy, Debug)]
struct Transfer {
    from: CdoId,
    to: CdoId,
    /// When it was ticketed (the deadline of a transfer that pins a withdrawn offer
    /// counts from here).
    started: Instant,
    /// Bytes of a stream transfer (`None` for RMA and same-process).
    stream: Option<u64>,
    /// Ticketed for a demand: its completion is the demand's answer (no `Ready`).
    completes_demand: bool,
    /// Its bytes.
    len: u64,
    /// How it was planned (for observers).
    route: traffic::Route,
}

/// What the driver found out about a JOIN's PMIx credential before handing it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// Not checked (no PMIx server to ask, or the JOIN carried none).
    Unchecked,
    /// PMIx validated it.
    Valid,
    /// PMIx rejected it (or could not be asked), with the reason.
    Invalid(String),
}

#[derive(Debug)]
enum Conn {
    /// Challenged, not joined yet; with the peer's process id where the driver verified
    /// it (a Unix socket's `SO_PEERCRED`).
    Challenged([u8; 32], Option<u32>),
    /// Joined as this app.
    Joined(AppId),
    /// A read-only observer (see [`crate::view`]).
    Observer,
    /// JOIN refused: nothing is served.
    Refused,
}

#[derive(Debug)]
struct App {
    conn: ConnId,
    component: String,
    index: i64,
    host: String,
    process: u64,
    endpoint: Option<Arc<FabricEndpoint>>,
    /// Its endpoints on other networks, best first.
    alternates: Vec<Arc<FabricEndpoint>>,
    /// The network of each endpoint (the first, then the alternates), where known.
    networks: Vec<Option<Subnet>>,
    /// Where same-host consumers may copy its offers from its memory.
    memory: Option<ProcessMemory>,
    leaving: bool,
    cdos: HashSet<CdoId>,
    /// `component:index`, which tickets of its offers carry.
    label: Arc<str>,
    /// Bytes it makes the PM hold, as [`Policy::max_app_bytes`] counts them.
    held: usize,
    /// Its subscriptions.
    subscriptions: usize,
    /// When it joined.
    joined: Instant,
    /// Its endpoints' NICs and why the first.
    nics: proto::Nics,
    /// Its offers, demands and bytes, for observers.
    counters: observe::AppCounters,
    /// Its traffic per endpoint and pseudo-NIC, for observers.
    traffic: traffic::Slots,
    /// How many CDO ids it has used (the last it declared is `cdo_ids(app).start() +
    /// last_declared - 1`): observers list its CDOs in id order up to there.
    last_declared: u64,
}

/// Which process first announced a (host, pid) for same-host copies, and how many live apps
/// announce it now.
#[derive(Debug)]
struct Claim {
    /// The announcing process's random `Join::process` token.
    process: u64,
    apps: usize,
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
/// pm.connected(7, [42; 32]);
/// assert_eq!(pm.poll_output(), Some((7, FromPm::Challenge { nonce: [42; 32] })));
///
/// let proof = auth::prove(b"secret", &[42; 32], "climate", "producer", 0);
/// pm.handle(7, ToPm::Join(Box::new(Join {
///     workflow: "climate".into(),
///     component: "producer".into(),
///     index: 0,
///     host: "node1".into(),
///     process: 1,
///     endpoint: None,
///     alternates: Vec::new(),
///     networks: Vec::new(),
///     memory: None,
///     credential: None,
///     nics: Default::default(),
///     role: Default::default(),
///     proof,
/// })));
/// assert!(matches!(pm.poll_output(), Some((7, FromPm::Welcome { .. }))));
/// assert_eq!(pm.app_count(), 1);
/// assert_eq!(pm.poll_timeout(), None, "nothing waits for a deadline");
/// ```
pub struct Manager {
    workflow: String,
    secret: Vec<u8>,
    instance: u64,
    require_credentials: bool,
    conns: HashMap<ConnId, Conn>,
    apps: BTreeMap<AppId, App>,
    cdos: HashMap<CdoId, Cdo>,
    /// Offered (not withdrawing) CDOs by name.
    offers: NameIndex,
    /// Consumers waiting for a ticket, by name.
    waiting: NameIndex,
    transfers: BTreeMap<TransferId, Transfer>,
    /// Transfers in flight from each offer (absent: none).
    load: HashMap<CdoId, usize>,
    /// Ids of transfers and subscriptions.
    next_id: u64,
    /// The next app's id (apps number their CDOs within it, see [`proto::cdo_ids`]).
    next_app: AppId,
    out: VecDeque<(ConnId, FromPm)>,
    closing: Vec<ConnId>,
    events: events::Events,
    /// Networks of links reported down: endpoints on them are not used for RMA.
    down: Vec<Subnet>,
    policy: Policy,
    /// Transfers that keep a withdrawn (or leaving) offer from being released, by the
    /// instant they are abandoned.
    pinned: BTreeSet<(Instant, TransferId)>,
    /// Process memory announcements by (host, pid).
    claims: HashMap<(String, u32), Claim>,
    /// Bytes of small CDOs' data held for all apps (see [`Policy::max_inline_bytes`]).
    inline_held: usize,
    /// What observers are shown.
    stats: observe::Stats,
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
            require_credentials: false,
            conns: HashMap::default(),
            apps: BTreeMap::new(),
            cdos: HashMap::default(),
            offers: NameIndex::default(),
            waiting: NameIndex::default(),
            transfers: BTreeMap::new(),
            load: HashMap::default(),
            next_id: 1,
            next_app: 1,
            out: VecDeque::new(),
            closing: Vec::new(),
            events: events::Events::new(clock),
            down: Vec::new(),
            policy: Policy::default(),
            pinned: BTreeSet::new(),
            claims: HashMap::default(),
            inline_held: 0,
            stats: observe::Stats::new(clock.origin),
        }
    }

    /// Sets the quotas, deadlines and name bindings enforced from now on (see
    /// [`Policy`]; the default applies until then).
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    /// Refuse JOINs whose PMIx credential the driver could not validate (use where every
    /// app runs under a PMIx host that issues credentials).
    pub fn require_credentials(&mut self, on: bool) {
        self.require_credentials = on;
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The next message to send, with its connection.
    pub fn poll_output(&mut self) -> Option<(ConnId, FromPm)> {
        self.out.pop_front()
    }

    /// Connections the driver should close once their queued output is sent.
    pub fn take_closing(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.closing)
    }

    /// Number of joined applications.
    pub fn app_count(&self) -> usize {
        self.apps.len()
    }

    /// Number of live CDOs.
    pub fn cdo_count(&self) -> usize {
        self.cdos.len()
    }

    /// A new connection: challenge it with `nonce` (fresh random bytes from the driver).
    pub fn connected(&mut self, conn: ConnId, nonce: [u8; 32]) {
        self.connected_from(conn, nonce, None);
    }

    /// As [`Manager::connected`], for a connection whose peer process the driver verified
    /// (`SO_PEERCRED` on a Unix socket): a JOIN on it may announce only that process's
    /// memory for same-host copies.
    pub fn connected_from(&mut self, conn: ConnId, nonce: [u8; 32], pid: Option<u32>) {
        self.conns.insert(conn, Conn::Challenged(nonce, pid));
        self.out.push_back((conn, FromPm::Challenge { nonce }));
    }

    fn refuse(&mut self, conn: ConnId, op: Op, cdo: Option<CdoId>, why: Refusal) {
        self.out.push_back((conn, FromPm::Refused { op, cdo, why }));
    }

    fn done(&mut self, conn: ConnId, op: Op, cdo: CdoId) {
        self.out.push_back((conn, FromPm::Done { op, cdo }));
    }

    /// Handles one message from `conn` (a JOIN's credential counts as unchecked).
    pub fn handle(&mut self, conn: ConnId, msg: ToPm) {
        self.handle_checked(conn, msg, Credential::Unchecked);
    }

    /// Handles one message from `conn`; for a JOIN, `credential` is what the driver found
    /// out about its PMIx credential.
    pub fn handle_checked(&mut self, conn: ConnId, msg: ToPm, credential: Credential) {
        self.stats.count(msg.op());
        let app = match (self.conns.get(&conn), &msg) {
            (Some(Conn::Observer), _) => return self.observer_message(conn, msg),
            (Some(Conn::Challenged(nonce, pid)), ToPm::Join(_)) => {
                let (nonce, pid) = (*nonce, *pid);
                return self.join(conn, (nonce, pid), msg, credential);
            }
            (Some(Conn::Joined(_)), ToPm::Join(_)) => {
                return self.refuse(conn, Op::Join, None, Refusal::DuplicateJoin);
            }
            (Some(Conn::Joined(app)), _) => *app,
            _ => return self.refuse(conn, msg.op(), None, Refusal::NotJoined),
        };
        match msg {
            ToPm::Join(_) => unreachable!("handled above"),
            ToPm::Subscribe {
                local,
                kinds,
                selector,
                options,
            } => self.subscribe(conn, app, local, kinds, *selector, options),
            ToPm::Unsubscribe { sub } => self.unsubscribe(conn, app, sub),
            ToPm::Ack { sub, serial } => self.ack(conn, app, sub, serial),
            ToPm::Report { change } => self.report(conn, app, change),
            ToPm::Query { .. } => self.query_from_app(conn),
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
            ToPm::DemandGroup {
                group,
                first,
                capacity,
            } => self.demand_group(conn, app, group, (first, capacity)),
            ToPm::Retract { cdo } => {
                self.with_cdo(conn, app, Op::Retract, cdo, |m, c| m.retract(conn, c))
            }
            ToPm::Withdraw { cdo } => {
                self.with_cdo(conn, app, Op::Withdraw, cdo, |m, c| m.withdraw(conn, c))
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

    fn join(
        &mut self,
        conn: ConnId,
        (nonce, peer_pid): ([u8; 32], Option<u32>),
        msg: ToPm,
        credential: Credential,
    ) {
        let ToPm::Join(join) = msg else {
            return;
        };
        let crate::proto::Join {
            workflow,
            component,
            index,
            host,
            process,
            endpoint,
            alternates,
            networks,
            memory,
            credential: _,
            nics,
            role,
            proof,
        } = *join;
        let why = if workflow != self.workflow {
            Some(Refusal::WrongWorkflow)
        } else if !auth::verify(&self.secret, &nonce, &workflow, &component, index, &proof) {
            Some(Refusal::BadProof)
        } else {
            match credential {
                Credential::Invalid(why) => Some(Refusal::BadCredential(why)),
                Credential::Unchecked if self.require_credentials => Some(Refusal::BadCredential(
                    "this pool manager requires one".into(),
                )),
                _ if self.next_app > proto::MAX_APP => Some(Refusal::TooManyApps),
                _ => None,
            }
        };
        let why = match why {
            None if role == proto::Role::Observer => {
                match self.observe(conn, &format!("{component}:{index} on {host}")) {
                    Ok(()) => return,
                    Err(why) => Some(why),
                }
            }
            why => why,
        };
        if let Some(why) = why {
            self.conns.insert(conn, Conn::Refused);
            self.refuse(conn, Op::Join, None, why);
            self.closing.push(conn);
            return;
        }
        let app = self.next_app;
        self.next_app += 1;
        self.conns.insert(conn, Conn::Joined(app));
        let memory = self.claim_memory(app, (&host, process, peer_pid), memory);
        let label: Arc<str> = format!("{component}:{index}").into();
        match &endpoint {
            Some(e) => tracing::info!(
                "app {label} joined (app {app}, host {host}, fabric {} at {})",
                e.provider,
                e.address
                    .ip()
                    .map_or_else(|| "a non-IP address".to_string(), |ip| ip.to_string())
            ),
            None => tracing::info!(
                "app {label} joined (app {app}, host {host}, no fabric endpoint: data by stream)"
            ),
        }
        let traffic = traffic::Slots::new(usize::from(endpoint.is_some()) + alternates.len());
        self.apps.insert(
            app,
            App {
                conn,
                component,
                index,
                host,
                process,
                endpoint: endpoint.map(Arc::new),
                alternates: alternates.into_iter().map(Arc::new).collect(),
                networks,
                memory,
                leaving: false,
                cdos: HashSet::default(),
                label,
                held: 0,
                subscriptions: 0,
                joined: self.events.now(),
                nics,
                counters: observe::AppCounters::default(),
                traffic,
                last_declared: 0,
            },
        );
        let pool = self.instance;
        self.out.push_back((conn, FromPm::Welcome { app, pool }));
        self.notify(EventKind::AppJoin, app, None, || "joined".into());
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

    /// Whether `app` may declare `cdo` named `name`: a good name, an id of its own range
    /// not in use.
    fn declarable(&self, app: AppId, cdo: CdoId, name: &str) -> Result<(), Refusal> {
        proto::check_name(name)?;
        if !proto::cdo_ids(app).contains(&cdo) || self.cdos.contains_key(&cdo) {
            return Err(Refusal::BadCdoId);
        }
        Ok(())
    }

    fn declare(&mut self, conn: ConnId, app: AppId, cdo: CdoId, name: String) {
        if let Err(why) = self
            .declarable(app, cdo, &name)
            .and_then(|()| self.affordable(app, policy::CDO_COST + name.len()))
        {
            return self.refuse(conn, Op::Declare, Some(cdo), why);
        }
        self.account(app, policy::CDO_COST + name.len(), false);
        self.cdos.insert(
            cdo,
            Cdo {
                owner: u32::try_from(app).unwrap_or(u32::MAX),
                name: name.into(),
                attributes: Attributes::new(),
                state: State::Declared,
                extras: OfferExtras::default(),
                born: u32::try_from(
                    self.events
                        .now()
                        .saturating_duration_since(self.events.clock().origin)
                        .as_secs(),
                )
                .unwrap_or(u32::MAX),
            },
        );
        if let Some(a) = self.apps.get_mut(&app) {
            a.cdos.insert(cdo);
            a.last_declared = a.last_declared.max(cdo - proto::cdo_ids(app).start() + 1);
        }
        self.op_succeeded(Op::Declare, app, cdo, None);
    }

    /// Runs `f` on `cdo` if `app` owns it and its state allows `op` (else refuses), then
    /// raises the operation's event.
    fn with_cdo(
        &mut self,
        conn: ConnId,
        app: AppId,
        op: Op,
        cdo: CdoId,
        f: impl FnOnce(&mut Self, CdoId),
    ) {
        let Some(c) = self.cdos.get(&cdo).filter(|c| c.app() == app) else {
            return self.refuse(conn, op, Some(cdo), Refusal::UnknownCdo);
        };
        if !events::state_allows(op, &c.state) {
            let why = Self::wrong(op, &c.state);
            return self.refuse(conn, op, Some(cdo), why);
        }
        // A disposed CDO is gone afterwards: its event shows it as it was.
        let gone = (op == Op::Dispose)
            .then(|| self.event_subject(cdo))
            .flatten();
        f(self, cdo);
        self.op_succeeded(op, app, cdo, gone);
    }

    fn cdo(&mut self, cdo: CdoId) -> &mut Cdo {
        self.cdos
            .get_mut(&cdo)
            .unwrap_or_else(|| unreachable!("checked by with_cdo"))
    }

    fn wrong(op: Op, state: &State) -> Refusal {
        Refusal::WrongState {
            op,
            state: state.name().to_string(),
        }
    }

    fn seal(&mut self, cdo: CdoId, attributes: Attributes) {
        let c = self.cdo(cdo);
        // The built-in name, size and provider are derived (see `published`), not stored.
        c.attributes = attributes;
        attr::strip_derived(&mut c.attributes);
        c.state = State::Sealed;
        let (app, bytes) = (c.app(), policy::attribute_bytes(&c.attributes));
        self.account(app, bytes, false);
    }

    /// `SealOffer` without subscribers: seal and offer, one answer (as the offer).
    fn seal_offer(
        &mut self,
        conn: ConnId,
        app: AppId,
        cdo: CdoId,
        attributes: Attributes,
        regions: (RemoteRegion, OfferExtras),
    ) {
        match self.cdos.get(&cdo).filter(|c| c.app() == app) {
            None => self.refuse(conn, Op::Offer, Some(cdo), Refusal::UnknownCdo),
            Some(c) if !events::state_allows(Op::Seal, &c.state) => {
                let why = Self::wrong(Op::Offer, &c.state);
                self.refuse(conn, Op::Offer, Some(cdo), why);
            }
            Some(_) => {
                self.seal(cdo, attributes);
                self.with_cdo(conn, app, Op::Offer, cdo, |m, c| m.offer(conn, c, regions));
            }
        }
    }

    /// `regions`: as registered with the app's first endpoint, and the rest. Bytes the
    /// offer carries are kept while the PM's budget and the app's quota allow (and they
    /// are the offer's: as long as its region); otherwise dropped, and the CDO moves as
    /// any other.
    fn offer(
        &mut self,
        conn: ConnId,
        cdo: CdoId,
        (region, mut extras): (RemoteRegion, OfferExtras),
    ) {
        if let Some(len) = extras.inline().map(InlineBytes::len) {
            let app = self.cdo(cdo).app();
            let kept = len as u64 == region.len
                && self.inline_held.saturating_add(len) <= self.policy.max_inline_bytes
                && self.affordable(app, len).is_ok();
            if kept {
                self.inline_held += len;
                self.account(app, len, false);
            } else {
                extras.take_inline();
            }
        }
        let c = self.cdo(cdo);
        c.state = State::Offered(region);
        c.extras = extras;
        let app = c.app();
        if let Some(a) = self.apps.get_mut(&app) {
            a.counters.offered += 1;
        }
        let c = self.cdo(cdo);
        let name = Arc::clone(&c.name);
        self.offers.insert(&name, cdo);
        self.done(conn, Op::Offer, cdo);
        if !self.waiting.get(&name).is_empty() {
            for w in self.waiting.get(&name).to_vec() {
                self.ticket(w);
            }
        }
    }

    fn require(&mut self, conn: ConnId, cdo: CdoId, demand: bool) {
        let app = self.cdo(cdo).app();
        if let Some(a) = self.apps.get_mut(&app).filter(|_| demand) {
            a.counters.demanded += 1;
        }
        let c = self.cdo(cdo);
        match &mut c.state {
            State::Declared => {
                c.state = State::Required(Want {
                    demanded: demand,
                    ..Want::default()
                })
            }
            State::Required(w) => w.demanded = true,
            _ => return, // refused by `with_cdo`
        }
        let (local, name) = match &c.state {
            State::Required(w) => (w.local, Arc::clone(&c.name)),
            _ => unreachable!("just set"),
        };
        if !demand {
            self.done(conn, Op::Require, cdo);
        }
        if local {
            self.out.push_back((conn, FromPm::Ready { cdo }));
        } else if matches!(&self.cdo(cdo).state, State::Required(w) if w.transfer.is_none()) {
            self.waiting.insert(&name, cdo);
            self.ticket(cdo);
        }
    }

    /// An offer's attributes as consumers see them: the sealed ones plus the built-in name
    /// and size (derived here rather than stored per CDO, to keep the PM small).
    fn published(&self, offer: CdoId) -> Attributes {
        let Some(c) = self.cdos.get(&offer) else {
            return Attributes::new();
        };
        let mut a = c.attributes.clone();
        a.insert(attr::NAME.into(), AttrValue::Str(c.name.to_string()));
        if let State::Offered(l) | State::Withdrawing(l) = &c.state {
            a.insert(attr::LOCAL_SIZE.into(), AttrValue::Uint(l.len));
        }
        a
    }

    /// Tickets a transfer to waiting consumer `to` from the least loaded usable offer.
    fn ticket(&mut self, to: CdoId) {
        let Some(c) = self.cdos.get(&to) else { return };
        let State::Required(want) = &c.state else {
            return;
        };
        if want.transfer.is_some() || want.local {
            return;
        }
        if let Some(reserved) = want.group {
            return self.ticket_group(to, reserved);
        }
        let load = |m: &Self, o: CdoId| m.load.get(&o).copied().unwrap_or(0);
        let Some(from) = self
            .offers
            .get(&c.name)
            .iter()
            .copied()
            .filter(|o| !want.failed.contains(o))
            .min_by_key(|&o| (load(self, o), o))
        else {
            return;
        };
        let (name, consumer, completes_demand) = (Arc::clone(&c.name), c.app(), want.demanded);
        let Some((provider, State::Offered(region))) =
            self.cdos.get(&from).map(|f| (f.app(), f.state.clone()))
        else {
            return;
        };
        let (source, how, route) = self.plan(consumer, provider, from, region);
        let provider_label = self
            .apps
            .get(&provider)
            .map_or_else(|| Arc::from(""), |a| Arc::clone(&a.label));
        // The built-in name and size are the consumer's to add (see `FromPm::Ticket`).
        let attributes = self
            .cdos
            .get(&from)
            .map(|f| f.attributes.clone())
            .unwrap_or_default();
        let transfer = self.id();
        let stream = match source {
            Source::Stream { len } => Some(len),
            _ => None,
        };
        self.transfers.insert(
            transfer,
            Transfer {
                from,
                to,
                started: self.events.now(),
                stream,
                completes_demand,
                len: region.len,
                route,
            },
        );
        *self.load.entry(from).or_default() += 1;
        self.waiting.remove(&name, to);
        if let State::Required(w) = &mut self.cdo(to).state {
            w.transfer = Some(transfer);
        }
        let inline = matches!(source, Source::Inline { .. });
        let conn = self.apps.get(&consumer).map(|a| a.conn);
        if let Some(conn) = conn {
            self.out.push_back((
                conn,
                FromPm::Ticket {
                    transfer,
                    cdo: to,
                    source,
                    attributes,
                    provider: provider_label,
                    completes_demand,
                },
            ));
        }
        self.notify(EventKind::TransportStarted, consumer, Some(from), || {
            format!("transfer {transfer} by {how}")
        });
        // The bytes went with the ticket: the transfer is done (the consumer reports
        // nothing; the connection delivers the ticket before anything after it).
        if let (true, Some(conn)) = (inline, conn) {
            self.finish_transfer(conn, consumer, transfer, None, None);
        }
    }

    /// A link went down or came back up (a fabric event from the host): while it is down,
    /// transfers planned from now on avoid RMA with endpoints on its networks (`subnets`:
    /// the link's addresses with their prefixes; the peers across the link are on them
    /// too) and go by stream over the control connections; subscribers of
    /// [`EventKind::Fabric`] are told, once per change however many report it.
    pub fn link_changed(&mut self, link: &str, subnets: &[Subnet], up: bool) {
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
        self.fabric_event(&format!("link {link} {state} ({})", list.join(", ")));
    }

    /// Removes a transfer and its count on the source offer; observers are told how it
    /// ended.
    fn end_transfer(
        &mut self,
        transfer: TransferId,
        outcome: traffic::Outcome,
    ) -> Option<Transfer> {
        let t = self.transfers.remove(&transfer)?;
        self.transfer_finished(transfer, &t, outcome);
        self.pinned
            .remove(&(later(t.started, self.policy.transfer_timeout), transfer));
        if let Some(n) = self.load.get_mut(&t.from) {
            *n -= 1;
            if *n == 0 {
                self.load.remove(&t.from);
            }
        }
        Some(t)
    }

    /// The stream transfer `transfer` if `app` is on the `consumer` (or else provider) side.
    fn stream_of(&self, app: AppId, transfer: TransferId, consumer: bool) -> Option<Transfer> {
        let t = self.transfers.get(&transfer)?;
        let side = if consumer { t.to } else { t.from };
        (t.stream.is_some() && self.cdos.get(&side).is_some_and(|c| c.app() == app)).then_some(*t)
    }

    fn app_conn(&self, cdo: CdoId) -> Option<ConnId> {
        let app = self.cdos.get(&cdo)?.app();
        self.apps.get(&app).map(|a| a.conn)
    }

    /// A consumer asks for a piece of a stream transfer: relay it to the provider.
    fn fetch(&mut self, conn: ConnId, app: AppId, transfer: TransferId, offset: u64, len: u64) {
        let Some(t) = self.stream_of(app, transfer, true) else {
            return self.refuse(conn, Op::Fetch, Some(transfer), Refusal::UnknownTransfer);
        };
        let size = t.stream.unwrap_or(0);
        if len > MAX_CHUNK || offset.checked_add(len).is_none_or(|end| end > size) {
            return self.refuse(conn, Op::Fetch, Some(transfer), Refusal::BadRange);
        }
        if let Some(pc) = self.app_conn(t.from) {
            self.out.push_back((
                pc,
                FromPm::Serve {
                    transfer,
                    cdo: t.from,
                    offset,
                    len,
                },
            ));
        }
    }

    /// A provider sends a piece of a stream transfer: relay it to the consumer.
    fn chunk(&mut self, conn: ConnId, app: AppId, piece: Chunk) {
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
            self.out.push_back((cc, FromPm::Chunk(piece)));
        }
    }

    fn transfer_done(
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
    fn finish_transfer(
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
        let Some(t) = self.end_transfer(transfer, outcome) else {
            return;
        };
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
        if let Some(State::Required(w)) = self.cdos.get_mut(&t.to).map(|c| &mut c.state) {
            w.transfer = None;
            match error {
                None => {
                    w.local = true;
                    if w.demanded && !t.completes_demand {
                        self.out.push_back((conn, FromPm::Ready { cdo: t.to }));
                    }
                }
                Some(_) => self.retry_elsewhere(t.to, t.from),
            }
        }
        self.source_released(t.from);
    }

    /// A transfer to consumer `to` from `failed` failed: never ticket that offer to it
    /// again, put it back among the waiting, and ticket another offer if one exists.
    fn retry_elsewhere(&mut self, to: CdoId, failed: CdoId) {
        let Some(c) = self.cdos.get_mut(&to) else {
            return;
        };
        let State::Required(w) = &mut c.state else {
            return;
        };
        w.transfer = None;
        w.failed.insert(failed);
        let name = Arc::clone(&c.name);
        self.waiting.insert(&name, to);
        self.ticket(to);
    }

    /// A transfer from `offer` ended: finish a pending withdraw or leave.
    fn source_released(&mut self, offer: CdoId) {
        let busy = self.load.contains_key(&offer);
        let Some(c) = self.cdos.get_mut(&offer) else {
            return;
        };
        let app = c.app();
        if let (State::Withdrawing(_), false) = (&c.state, busy) {
            c.state = State::Withdrawn;
            if let Some(conn) = self.apps.get(&app).map(|a| a.conn) {
                self.done(conn, Op::Withdraw, offer);
            }
        }
        self.try_bye(app);
    }

    fn retract(&mut self, conn: ConnId, cdo: CdoId) {
        let c = self.cdo(cdo);
        let name = Arc::clone(&c.name);
        c.state = State::Declared;
        self.waiting.remove(&name, cdo);
        self.done(conn, Op::Retract, cdo);
        self.retry_byes();
    }

    fn withdraw(&mut self, _conn: ConnId, cdo: CdoId) {
        let c = self.cdo(cdo);
        let State::Offered(region) = c.state else {
            return; // refused by `with_cdo`
        };
        c.state = State::Withdrawing(region);
        let (name, app) = (Arc::clone(&c.name), c.app());
        let freed = c.extras.take_inline().map_or(0, |b| b.len());
        self.inline_held = self.inline_held.saturating_sub(freed);
        self.account(app, freed, true);
        self.offers.remove(&name, cdo);
        self.pin_transfers_from(|from| from == cdo);
        self.source_released(cdo);
    }

    fn dispose(&mut self, cdo: CdoId) {
        let c = self.cdo(cdo);
        let (name, app) = (Arc::clone(&c.name), c.app());
        let bytes = Self::cost(c);
        self.account(app, bytes, true);
        self.cdos.remove(&cdo);
        self.cdos.give_back();
        self.waiting.remove(&name, cdo);
        if let Some(a) = self.apps.get_mut(&app) {
            a.cdos.remove(&cdo);
            a.cdos.give_back();
        }
        self.retry_byes();
    }

    fn leave(&mut self, app: AppId) {
        if let Some(a) = self.apps.get_mut(&app) {
            a.leaving = true;
        }
        let cdos = self
            .apps
            .get(&app)
            .map(|a| a.cdos.clone())
            .unwrap_or_default();
        self.pin_transfers_from(|from| cdos.contains(&from));
        self.try_bye(app);
    }

    /// True if a consumer still needs one of `app`'s offers: a transfer reads from it, or a
    /// consumer requires its name and no other app offers it.
    fn needed(&self, app: AppId) -> bool {
        let Some(a) = self.apps.get(&app) else {
            return false;
        };
        a.cdos.iter().any(|&o| {
            let Some(c) = self.cdos.get(&o) else {
                return false;
            };
            match &c.state {
                State::Offered(_) | State::Withdrawing(_) => {
                    self.load.contains_key(&o)
                        || (!self.waiting.get(&c.name).is_empty()
                            && !self
                                .offers
                                .get(&c.name)
                                .iter()
                                .any(|&x| self.cdos.get(&x).is_some_and(|x| x.app() != app)))
                }
                _ => false,
            }
        })
    }

    fn try_bye(&mut self, app: AppId) {
        let Some(leaving) = self.apps.get(&app).map(|a| a.leaving) else {
            return;
        };
        if !leaving || self.needed(app) {
            return;
        }
        if let Some(a) = self.apps.get(&app) {
            let conn = a.conn;
            tracing::info!("app {} left (app {app})", a.label);
            self.out.push_back((conn, FromPm::Bye));
            self.closing.push(conn);
        }
        self.notify(EventKind::AppLeave, app, None, || "left".into());
        self.remove_app(app, false);
    }

    fn retry_byes(&mut self) {
        let leaving: Vec<AppId> = self
            .apps
            .iter()
            .filter(|(_, a)| a.leaving)
            .map(|(&id, _)| id)
            .collect();
        for app in leaving {
            self.try_bye(app);
        }
    }

    /// The connection is gone (closed or broken): the app's CDOs go, transfers from its
    /// offers are re-ticketed elsewhere, and demands only it could serve fail.
    pub fn disconnected(&mut self, conn: ConnId) {
        self.disconnected_because(
            conn,
            "connection lost without LEAVE (the process died or closed it)",
        );
    }

    /// As [`Manager::disconnected`], with the reason subscribers are told.
    pub fn disconnected_because(&mut self, conn: ConnId, why: &str) {
        if let Some(Conn::Joined(app)) = self.conns.get(&conn) {
            let app = *app;
            if let Some(a) = self.apps.get(&app) {
                tracing::info!("app {} gone (app {app}): {why}", a.label);
            }
            self.notify(EventKind::AppLeave, app, None, || why.to_string());
            self.remove_app(app, true);
        }
        self.stats.observers.remove(&conn);
        self.conns.remove(&conn);
    }

    fn remove_app(&mut self, app: AppId, died: bool) {
        let Some(a) = self.apps.remove(&app) else {
            return;
        };
        self.retire_traffic(app, &a);
        self.conns.remove(&a.conn);
        self.release_memory_claim(&a);
        self.forget_app_events(app, a.conn);
        // Names whose demands may have lost their last provider: those with consumers
        // waiting, and (below) those whose transfers from this app failed.
        let mut names = BTreeSet::new();
        for cdo in &a.cdos {
            if let Some(c) = self.cdos.remove(cdo) {
                let freed = c.extras.inline().map_or(0, InlineBytes::len);
                self.inline_held = self.inline_held.saturating_sub(freed);
                self.offers.remove(&c.name, *cdo);
                self.waiting.remove(&c.name, *cdo);
                if died && !self.waiting.get(&c.name).is_empty() {
                    names.insert(c.name);
                }
            }
        }
        self.cdos.give_back();
        // Transfers from its offers fail; transfers to its CDOs just end.
        let lost: Vec<TransferId> = self
            .transfers
            .iter()
            .filter(|(_, t)| a.cdos.contains(&t.from) || a.cdos.contains(&t.to))
            .map(|(&id, _)| id)
            .collect();
        for id in lost {
            let why = match self.transfers.get(&id) {
                Some(t) if a.cdos.contains(&t.from) && died => "the provider is gone",
                Some(t) if a.cdos.contains(&t.from) => "the provider left",
                _ => "the consumer left before it completed",
            };
            let Some(t) = self.end_transfer(id, traffic::Outcome::Failed(why)) else {
                continue;
            };
            if a.cdos.contains(&t.from) {
                if let Some(c) = self.cdos.get(&t.to).filter(|_| died) {
                    names.insert(Arc::clone(&c.name));
                }
                self.retry_elsewhere(t.to, t.from);
            } else if a.cdos.contains(&t.to) {
                self.source_released(t.from);
            }
        }
        if died {
            for name in names {
                self.fail_orphaned_demands(&name);
            }
        }
        self.retry_byes();
    }

    /// Fails demands of `name` that no offer can serve any more.
    fn fail_orphaned_demands(&mut self, name: &str) {
        let usable = |m: &Self, w: &Want| m.offers.get(name).iter().any(|o| !w.failed.contains(o));
        let orphaned: Vec<CdoId> = self
            .waiting
            .get(name)
            .iter()
            .copied()
            .filter(|c| matches!(self.cdos.get(c).map(|c| &c.state), Some(State::Required(w)) if w.demanded && !usable(self, w)))
            .collect();
        for cdo in orphaned {
            self.waiting.remove(name, cdo);
            let Some(c) = self.cdos.get_mut(&cdo) else {
                continue;
            };
            c.state = State::Declared;
            let app = c.app();
            if let Some(conn) = self.apps.get(&app).map(|a| a.conn) {
                self.refuse(conn, Op::Demand, Some(cdo), Refusal::NoProvider);
            }
        }
    }
}
