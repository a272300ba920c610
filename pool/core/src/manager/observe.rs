//! What the manager counts for observers, and its answers to their queries (see
//! [`crate::view`]): operations by kind, each app's offers, demands and bytes, transfers in
//! flight and recently finished, traffic per NIC and transport, fabric events.
//!
//! Counting costs the hot path one array increment per operation, and per finished
//! transfer a few counter increments in its two apps' per-endpoint slots and a compact
//! record of three shared names (no string is built, no map is searched); everything else
//! is computed when an observer asks, within the bounds `view` states.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::{App, Cdo, ConnId, Manager, State, Transfer};
use crate::proto::{self, AppId, CdoId, Direct, FromPm, Op, Refusal, Source, TransferId};
use crate::selector::Selector;
use crate::view::{
    self, AppNic, AppView, CdoPage, CdoView, Fabric, FabricEvent, NicTraffic, Query, Status,
    TransferView, Transfers, Transport, TransportTraffic, View,
};

/// Most observers connected at once.
pub const MAX_OBSERVERS: usize = 64;

/// Number of [`Op`] kinds (the counters' array length).
const OPS: usize = Op::Query as usize + 1;

/// An app's figures.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AppCounters {
    pub(super) offered: u64,
    pub(super) demanded: u64,
    pub(super) bytes_sent: u64,
    pub(super) bytes_received: u64,
}

/// How a transfer was planned: transport and the endpoints on each side (indexes into
/// the apps' endpoint lists; `u8::MAX`: none).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Route {
    pub(super) transport: Transport,
    pub(super) provider_nic: u8,
    pub(super) consumer_nic: u8,
}

impl Route {
    /// The route of `source` (the provider's endpoint index found by the caller).
    pub(super) fn of(source: &Source, provider_nic: Option<usize>) -> Route {
        let nic = |i: Option<usize>| i.and_then(|i| u8::try_from(i).ok()).unwrap_or(u8::MAX);
        match source {
            Source::SameProcess { .. } => Route {
                transport: Transport::SameProcess,
                ..Route::none()
            },
            Source::Inline { .. } => Route {
                transport: Transport::Inline,
                ..Route::none()
            },
            Source::Stream { .. } => Route {
                transport: Transport::Stream,
                ..Route::none()
            },
            Source::Rma { via, .. } => Route {
                transport: Transport::Rma,
                provider_nic: nic(provider_nic),
                consumer_nic: *via,
            },
        }
    }

    fn none() -> Route {
        Route {
            transport: Transport::SameProcess,
            provider_nic: u8::MAX,
            consumer_nic: u8::MAX,
        }
    }
}

/// How a transfer ended.
pub(super) enum Outcome<'a> {
    /// The bytes arrived (how, for same-host copies and maps).
    Done(Option<Direct>),
    /// It failed, or was abandoned or cut off, for this reason.
    Failed(&'a str),
}

/// A NIC's key in the traffic report: host, NIC, provider.
type NicKey = (String, String, String);

/// Traffic through one slot of an app: one of its endpoints, or the pseudo-NICs of bytes
/// handed over otherwise ([`Slots`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Traffic {
    bytes_out: u64,
    bytes_in: u64,
    transfers_out: u64,
    transfers_in: u64,
    failures: u64,
}

impl Traffic {
    fn add(&mut self, o: &Traffic) {
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.transfers_out += o.transfers_out;
        self.transfers_in += o.transfers_in;
        self.failures += o.failures;
    }

    fn is_empty(&self) -> bool {
        self.transfers_out + self.transfers_in + self.failures == 0
    }
}

/// An app's traffic slots: one per endpoint (the first, then the alternates), then the
/// pseudo-NICs `inline`, `stream` and `process` (same-process hand-overs).
#[derive(Clone, Debug, Default)]
pub(super) struct Slots(Vec<Traffic>);

/// The pseudo-NICs after an app's endpoints, in slot order.
const PSEUDO: [&str; 3] = ["inline", "stream", "process"];

impl Slots {
    /// Slots for an app with `endpoints` endpoints.
    pub(super) fn new(endpoints: usize) -> Slots {
        Slots(vec![Traffic::default(); endpoints + PSEUDO.len()])
    }

    /// The slot one side of `route` goes through.
    fn get(&mut self, route: &Route, provider_side: bool) -> Option<&mut Traffic> {
        let endpoints = self.0.len() - PSEUDO.len();
        let index = match route.transport {
            Transport::Inline => endpoints,
            Transport::Stream => endpoints + 1,
            Transport::SameProcess => endpoints + 2,
            Transport::Rma | Transport::Copy | Transport::Map => usize::from(if provider_side {
                route.provider_nic
            } else {
                route.consumer_nic
            }),
        };
        self.0.get_mut(index)
    }
}

/// A finished transfer as [`Transfers::recent`] shows it: plain numbers, resolved into
/// names when an observer asks (the CDO's name while it lives, the apps' labels while they
/// are joined), so that recording one costs no allocation and touches no other memory. A
/// failure (rare) keeps its CDO's name and its reason.
#[derive(Debug)]
struct Finished {
    id: TransferId,
    from: CdoId,
    to: CdoId,
    route: Route,
    len: u64,
    started: Instant,
    ended: Instant,
    failure: Option<Box<(Box<str>, Box<str>)>>,
}

/// The manager's figures for observers.
#[derive(Debug)]
pub(super) struct Stats {
    ops: [u64; OPS],
    /// Start of the current rate window and the operation count then.
    window: (Instant, u64),
    /// Operations per second over the last full window.
    rate: f64,
    recent: VecDeque<Finished>,
    completed: u64,
    failed: u64,
    /// Traffic of apps that are gone, by NIC.
    retired: BTreeMap<NicKey, Traffic>,
    /// Labels of the last [`view::MAX_LISTED`] apps that went, for what they left behind
    /// (recent transfers).
    departed: BTreeMap<AppId, std::sync::Arc<str>>,
    /// By transport (indexed by `Transport as usize`).
    transports: [(u64, u64, u64); Transport::ALL.len()],
    fabric_events: VecDeque<FabricEvent>,
    /// Observer connections.
    pub(super) observers: BTreeMap<ConnId, ()>,
    /// The PM's resident memory, as the driver last said.
    memory_bytes: Option<u64>,
}

impl Stats {
    pub(super) fn new(start: Instant) -> Stats {
        Stats {
            ops: [0; OPS],
            window: (start, 0),
            rate: 0.0,
            recent: VecDeque::new(),
            completed: 0,
            failed: 0,
            retired: BTreeMap::new(),
            departed: BTreeMap::new(),
            transports: [(0, 0, 0); Transport::ALL.len()],
            fabric_events: VecDeque::new(),
            observers: BTreeMap::new(),
            memory_bytes: None,
        }
    }

    /// Counts one operation.
    pub(super) fn count(&mut self, op: Op) {
        if let Some(n) = self.ops.get_mut(op as usize) {
            *n += 1;
        }
    }

    fn total(&self) -> u64 {
        self.ops.iter().sum()
    }

    /// Closes the rate window once a second has passed.
    pub(super) fn tick(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window.0);
        if elapsed >= Duration::from_secs(1) {
            let total = self.total();
            self.rate = (total - self.window.1) as f64 / elapsed.as_secs_f64();
            self.window = (now, total);
        }
    }

    /// Remembers a fabric event.
    pub(super) fn fabric_event(&mut self, unix_ns: i128, detail: &str) {
        if self.fabric_events.len() == view::RECENT_FABRIC_EVENTS {
            self.fabric_events.pop_front();
        }
        self.fabric_events.push_back(FabricEvent {
            unix_ns,
            detail: detail.to_string(),
        });
    }
}

/// The address of `a`'s first endpoint (its IP where it has one).
fn address_of(a: &App) -> Option<String> {
    a.endpoint.as_ref().map(|e| {
        e.address
            .ip()
            .map_or_else(|| "(not an IP address)".to_string(), |ip| ip.to_string())
    })
}

impl Manager {
    /// Tells the manager the PM process's resident memory (bytes), for [`Status`]: the
    /// driver reads it (the manager reads nothing of the system).
    pub fn set_memory_bytes(&mut self, bytes: Option<u64>) {
        self.stats.memory_bytes = bytes;
    }

    /// Number of observers connected.
    pub fn observer_count(&self) -> usize {
        self.stats.observers.len()
    }

    /// Accepts `conn` as an observer, if there is room.
    pub(super) fn observe(&mut self, conn: ConnId, who: &str) -> Result<(), Refusal> {
        if self.stats.observers.len() >= MAX_OBSERVERS {
            return Err(Refusal::Quota(format!(
                "at most {MAX_OBSERVERS} observers at once; close one (maestro pool --watch) first"
            )));
        }
        tracing::debug!("observer {who} connected ({conn})");
        self.stats.observers.insert(conn, ());
        self.conns.insert(conn, super::Conn::Observer);
        self.out.push_back((
            conn,
            FromPm::Welcome {
                app: 0,
                pool: self.instance,
            },
        ));
        Ok(())
    }

    /// A message from observer `conn`: queries are answered, LEAVE is said goodbye to,
    /// anything else is refused.
    pub(super) fn observer_message(&mut self, conn: ConnId, msg: proto::ToPm) {
        match msg {
            proto::ToPm::Query { id, query } => {
                let view = self.answer(query);
                self.out.push_back((
                    conn,
                    FromPm::View {
                        id,
                        view: Box::new(view),
                    },
                ));
            }
            proto::ToPm::Leave => {
                self.out.push_back((conn, FromPm::Bye));
                self.closing.push(conn);
            }
            other => self.refuse(
                conn,
                other.op(),
                other.cdo(),
                Refusal::NotAllowed(
                    "an observer connection is read-only: it may only query the pool".into(),
                ),
            ),
        }
    }

    /// A query from an app: observers only.
    pub(super) fn query_from_app(&mut self, conn: ConnId) {
        self.refuse(
            conn,
            Op::Query,
            None,
            Refusal::NotAllowed(
                "queries of the pool need an observer connection (maestro pool), not an app's"
                    .into(),
            ),
        );
    }

    /// The view an observer asking `query` would get (for drivers that show the pool in
    /// other ways, such as a metrics endpoint). Bounded as observers' answers are.
    pub fn view(&mut self, query: Query) -> View {
        self.answer(query)
    }

    fn answer(&mut self, query: Query) -> View {
        let now = self.events.now();
        self.stats.tick(now);
        match query {
            Query::Status => View::Status(self.status(now)),
            Query::Ls(ls) => View::Cdos(self.ls(ls, now)),
            Query::Transfers => View::Transfers(self.transfers_view(now)),
            Query::Fabric => View::Fabric(self.fabric_view()),
        }
    }

    fn status(&self, now: Instant) -> Status {
        let mut cdos = BTreeMap::new();
        for c in self.cdos.values() {
            *cdos.entry(c.state.name().to_string()).or_insert(0) += 1;
        }
        let operations = self
            .stats
            .ops
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .filter_map(|(i, n)| Some((op_name(i)?, *n)))
            .collect();
        // In an idle pool the last window is stale: the rate since it closed.
        let since = now.saturating_duration_since(self.stats.window.0);
        let rate = if since >= Duration::from_secs(2) {
            (self.stats.total() - self.stats.window.1) as f64 / since.as_secs_f64()
        } else {
            self.stats.rate
        };
        Status {
            workflow: self.workflow.clone(),
            protocol: proto::VERSION,
            uptime_ms: duration_ms(now.saturating_duration_since(self.events.clock().origin)),
            operations,
            operations_per_second: rate,
            memory_bytes: self.stats.memory_bytes,
            inline_bytes: self.inline_held as u64,
            app_count: self.apps.len() as u64,
            observer_count: self.stats.observers.len() as u64,
            apps: self
                .apps
                .iter()
                .take(view::MAX_LISTED)
                .map(|(&id, a)| self.app_view(id, a))
                .collect(),
            cdos,
            subscriptions: self.events.subscription_count() as u64,
            transfers_in_flight: self.transfers.len() as u64,
        }
    }

    fn app_view(&self, id: AppId, a: &App) -> AppView {
        AppView {
            id,
            component: a.component.clone(),
            index: a.index,
            host: a.host.clone(),
            pid: a.memory.map(|m| m.pid),
            provider: a.endpoint.as_ref().map(|e| e.provider.clone()),
            address: address_of(a),
            nic: a.nics.names.first().cloned(),
            nic_reason: a.nics.reason.clone(),
            joined_unix_ns: self.events.clock().unix_ns(a.joined),
            cdos: a.cdos.len() as u64,
            offered: a.counters.offered,
            demanded: a.counters.demanded,
            bytes_sent: a.counters.bytes_sent,
            bytes_received: a.counters.bytes_received,
            leaving: a.leaving,
        }
    }

    /// A page of CDOs: apps in id order, each app's CDO ids in order (apps number their
    /// own, so the ids of app `a` are `cdo_ids(a)` up to the last it declared), at most
    /// [`view::MAX_SCAN`] ids looked at.
    fn ls(&self, ls: view::Ls, now: Instant) -> CdoPage {
        let selector = ls
            .selector
            .map(|e| Selector::compile(*e))
            .transpose()
            .unwrap_or_else(|e| {
                tracing::debug!("observer's selector refused: {e}");
                None
            });
        let limit = ls.limit.clamp(1, view::MAX_PAGE) as usize;
        let mut page = CdoPage {
            total: self.cdos.len() as u64,
            ..CdoPage::default()
        };
        let start = ls.after.map_or(1, |c| c.saturating_add(1));
        let mut scanned = 0u64;
        for (&app, a) in self.apps.range(proto::cdo_owner(start)..) {
            let ids = proto::cdo_ids(app);
            let first = start.max(*ids.start());
            let last = ids.start() + a.last_declared.saturating_sub(1);
            let mut id = first;
            while id <= last {
                if scanned == view::MAX_SCAN || page.cdos.len() == limit {
                    page.next = Some(id - 1);
                    return page;
                }
                scanned += 1;
                if let Some(c) = self.cdos.get(&id) {
                    // Attributes are built only where they are looked at.
                    let attrs = (selector.is_some() || ls.attributes).then(|| self.published(id));
                    let selected = match (&selector, &attrs) {
                        (Some(s), Some(a)) => s.matches(a),
                        _ => true,
                    };
                    if selected {
                        let shown = attrs.filter(|_| ls.attributes);
                        page.cdos.push(self.cdo_view(id, c, now, shown));
                    }
                }
                id += 1;
            }
        }
        page
    }

    fn cdo_view(
        &self,
        id: CdoId,
        c: &Cdo,
        now: Instant,
        attributes: Option<crate::attr::Attributes>,
    ) -> CdoView {
        let (size, providers, waiting) = match &c.state {
            State::Offered(r) | State::Withdrawing(r) => (
                Some(r.len),
                vec![self.label(c.app())],
                self.waiting.get(&c.name).len() as u64,
            ),
            State::Required(w) => {
                let from = w
                    .transfer
                    .and_then(|t| self.transfers.get(&t))
                    .and_then(|t| self.cdos.get(&t.from))
                    .map(|f| self.label(f.app()));
                (None, from.into_iter().collect(), 0)
            }
            _ => (None, Vec::new(), 0),
        };
        let born = self.events.clock().origin + Duration::from_secs(u64::from(c.born));
        CdoView {
            id,
            name: c.name.to_string(),
            app: self.label(c.app()),
            size,
            state: c.state.name().to_string(),
            providers,
            waiting,
            age_s: now.saturating_duration_since(born).as_secs(),
            attributes: attributes.unwrap_or_default(),
        }
    }

    fn transfer_view(&self, id: TransferId, t: &Transfer, now: Instant) -> TransferView {
        let name = |c: CdoId| self.cdos.get(&c).map(|c| c.name.to_string());
        let owner = |c: CdoId| self.label(proto::cdo_owner(c));
        let (provider, nic) = self.nic_of(proto::cdo_owner(t.from), t.route.provider_nic);
        TransferView {
            id,
            name: name(t.to).or_else(|| name(t.from)).unwrap_or_default(),
            from: owner(t.from),
            to: owner(t.to),
            transport: t.route.transport,
            provider: provider.map(|p| p.to_string()),
            nic: nic.map(|n| n.to_string()),
            bytes: t.len,
            started_unix_ns: self.events.clock().unix_ns(t.started),
            elapsed_us: duration_us(now.saturating_duration_since(t.started)),
            ok: None,
            error: None,
        }
    }

    fn transfers_view(&self, now: Instant) -> Transfers {
        Transfers {
            in_flight: self
                .transfers
                .iter()
                .take(view::MAX_LISTED)
                .map(|(&id, t)| self.transfer_view(id, t, now))
                .collect(),
            in_flight_total: self.transfers.len() as u64,
            recent: self
                .stats
                .recent
                .iter()
                .map(|f| self.finished_view(f))
                .collect(),
            completed: self.stats.completed,
            failed: self.stats.failed,
        }
    }

    fn fabric_view(&self) -> Fabric {
        Fabric {
            nics: self.nic_traffic(),
            transports: Transport::ALL
                .iter()
                .zip(&self.stats.transports)
                .filter(|(_, (transfers, _, failures))| transfers + failures > 0)
                .map(|(t, &(transfers, bytes, failures))| {
                    let traffic = TransportTraffic {
                        transfers,
                        bytes,
                        failures,
                    };
                    (t.name().to_string(), traffic)
                })
                .collect(),
            links_down: self.down.iter().map(ToString::to_string).collect(),
            events: self.stats.fabric_events.iter().cloned().collect(),
            apps: self
                .apps
                .iter()
                .take(view::MAX_LISTED)
                .map(|(&id, a)| AppNic {
                    app: id,
                    label: a.label.to_string(),
                    host: a.host.clone(),
                    nics: a.nics.names.clone(),
                    provider: a.endpoint.as_ref().map(|e| e.provider.clone()),
                    address: address_of(a),
                    reason: a.nics.reason.clone(),
                })
                .collect(),
        }
    }

    /// The provider and NIC name of endpoint `index` of `app` (`u8::MAX`: none).
    fn nic_of(&self, app: AppId, index: u8) -> (Option<&str>, Option<&str>) {
        let Some(a) = self.apps.get(&app).filter(|_| index != u8::MAX) else {
            return (None, None);
        };
        let endpoint = a
            .endpoint
            .iter()
            .chain(&a.alternates)
            .nth(usize::from(index));
        let nic = a.nics.names.get(usize::from(index)).map(String::as_str);
        (endpoint.map(|e| e.provider.as_str()), nic)
    }

    /// The traffic-report key of each of `a`'s slots.
    fn slot_keys(a: &App) -> impl Iterator<Item = NicKey> + '_ {
        let endpoints = a.endpoint.iter().chain(&a.alternates).enumerate();
        let real = endpoints.map(|(i, e)| {
            let nic = a.nics.names.get(i).cloned().unwrap_or_else(|| "?".into());
            (a.host.clone(), nic, e.provider.clone())
        });
        let pseudo = PSEUDO
            .iter()
            .map(|p| (a.host.clone(), (*p).to_string(), String::new()));
        real.chain(pseudo)
    }

    /// `component:index` of `app`; `component:index (gone)` for one that left lately,
    /// `app N (gone)` for one long gone.
    fn label(&self, app: AppId) -> String {
        match (self.apps.get(&app), self.stats.departed.get(&app)) {
            (Some(a), _) => a.label.to_string(),
            (None, Some(l)) => format!("{l} (gone)"),
            (None, None) => format!("app {app} (gone)"),
        }
    }

    /// An app that goes keeps its traffic in the report, and its name for what it left.
    pub(super) fn retire_traffic(&mut self, id: AppId, a: &App) {
        self.stats
            .departed
            .insert(id, std::sync::Arc::clone(&a.label));
        if self.stats.departed.len() > view::MAX_LISTED {
            self.stats.departed.pop_first();
        }
        for (key, t) in Self::slot_keys(a).zip(&a.traffic.0) {
            if t.is_empty() {
                continue;
            }
            if self.stats.retired.len() < view::MAX_LISTED || self.stats.retired.contains_key(&key)
            {
                self.stats.retired.entry(key).or_default().add(t);
            }
        }
    }

    /// Traffic per host, NIC and provider: the apps that left, and those here.
    fn nic_traffic(&self) -> Vec<NicTraffic> {
        let mut all = self.stats.retired.clone();
        for a in self.apps.values() {
            for (key, t) in Self::slot_keys(a).zip(&a.traffic.0) {
                if !t.is_empty() && (all.len() < view::MAX_LISTED || all.contains_key(&key)) {
                    all.entry(key).or_default().add(t);
                }
            }
        }
        all.into_iter()
            .map(|((host, nic, provider), t)| NicTraffic {
                host,
                nic,
                provider,
                bytes_out: t.bytes_out,
                bytes_in: t.bytes_in,
                transfers_out: t.transfers_out,
                transfers_in: t.transfers_in,
                failures: t.failures,
            })
            .collect()
    }

    /// A finished transfer as `recent` shows it.
    fn finished_view(&self, f: &Finished) -> TransferView {
        let (provider, nic) = self.nic_of(proto::cdo_owner(f.from), f.route.provider_nic);
        let name = match &f.failure {
            Some(failure) => failure.0.to_string(),
            None => [f.to, f.from]
                .iter()
                .find_map(|c| self.cdos.get(c))
                .map_or_else(|| "(disposed)".to_string(), |c| c.name.to_string()),
        };
        TransferView {
            id: f.id,
            name,
            from: self.label(proto::cdo_owner(f.from)),
            to: self.label(proto::cdo_owner(f.to)),
            transport: f.route.transport,
            provider: provider.map(str::to_string),
            nic: nic.map(str::to_string),
            bytes: f.len,
            started_unix_ns: self.events.clock().unix_ns(f.started),
            elapsed_us: duration_us(f.ended.saturating_duration_since(f.started)),
            ok: Some(f.failure.is_none()),
            error: f.failure.as_ref().map(|failure| failure.1.to_string()),
        }
    }

    /// Counts a finished transfer (before its apps may go): in its two apps' slots, by
    /// transport, and among the recent ones.
    pub(super) fn transfer_finished(&mut self, id: TransferId, t: &Transfer, outcome: Outcome) {
        let mut route = t.route;
        if let (Outcome::Done(Some(d)), Transport::Rma) = (&outcome, route.transport) {
            route.transport = match d {
                Direct::Copied => Transport::Copy,
                Direct::Mapped => Transport::Map,
            };
        }
        let failed = matches!(outcome, Outcome::Failed(_));
        let (provider, consumer) = (proto::cdo_owner(t.from), proto::cdo_owner(t.to));
        // One look-up per app: its slot and its byte counts.
        for (app, provider_side) in [(provider, true), (consumer, false)] {
            let Some(a) = self.apps.get_mut(&app) else {
                continue;
            };
            if !failed {
                if provider_side {
                    a.counters.bytes_sent += t.len;
                } else {
                    a.counters.bytes_received += t.len;
                }
            }
            let Some(slot) = a.traffic.get(&route, provider_side) else {
                continue;
            };
            match (failed, provider_side) {
                (true, _) => slot.failures += 1,
                (false, true) => {
                    slot.bytes_out += t.len;
                    slot.transfers_out += 1;
                }
                (false, false) => {
                    slot.bytes_in += t.len;
                    slot.transfers_in += 1;
                }
            }
        }
        let by = &mut self.stats.transports[route.transport as usize];
        if failed {
            by.2 += 1;
            self.stats.failed += 1;
        } else {
            by.0 += 1;
            by.1 += t.len;
            self.stats.completed += 1;
        }
        let failure = match outcome {
            Outcome::Failed(why) => {
                let name = [t.to, t.from]
                    .iter()
                    .find_map(|c| self.cdos.get(c))
                    .map_or_else(|| Box::from(""), |c| Box::from(&*c.name));
                Some(Box::new((name, Box::from(why))))
            }
            Outcome::Done(_) => None,
        };
        let finished = Finished {
            id,
            from: t.from,
            to: t.to,
            route,
            len: t.len,
            started: t.started,
            ended: self.events.now(),
            failure,
        };
        if self.stats.recent.len() == view::RECENT_TRANSFERS {
            self.stats.recent.pop_front();
        }
        self.stats.recent.push_back(finished);
    }
}

/// The name of op number `i`.
fn op_name(i: usize) -> Option<String> {
    ALL_OPS.get(i).map(ToString::to_string)
}

/// Every [`Op`], in discriminant order.
const ALL_OPS: [Op; OPS] = [
    Op::Join,
    Op::Leave,
    Op::Declare,
    Op::Seal,
    Op::Offer,
    Op::Require,
    Op::Demand,
    Op::Retract,
    Op::Withdraw,
    Op::Dispose,
    Op::TransferDone,
    Op::Fetch,
    Op::Chunk,
    Op::Subscribe,
    Op::Unsubscribe,
    Op::Ack,
    Op::Report,
    Op::Query,
];

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_follow_the_discriminants() {
        for (i, op) in ALL_OPS.iter().enumerate() {
            assert_eq!(*op as usize, i, "{op}");
        }
    }

    #[test]
    fn the_rate_window_closes_after_a_second() {
        let t0 = Instant::now();
        let mut s = Stats::new(t0);
        for _ in 0..500 {
            s.count(Op::Declare);
        }
        s.tick(t0 + Duration::from_millis(500));
        assert_eq!(s.rate, 0.0, "the window is still open");
        s.tick(t0 + Duration::from_secs(2));
        assert!((s.rate - 250.0).abs() < 1e-9, "{}", s.rate);
    }

    #[test]
    fn fabric_events_are_bounded() {
        let mut s = Stats::new(Instant::now());
        for i in 0..view::RECENT_FABRIC_EVENTS + 5 {
            s.fabric_event(i as i128, &format!("event {i}"));
        }
        assert_eq!(s.fabric_events.len(), view::RECENT_FABRIC_EVENTS);
        assert_eq!(s.fabric_events.front().map(|e| e.unix_ns), Some(5));
    }
}
