//! What the manager counts for observers, and its answers to their queries (see
//! [`crate::view`]): operations by kind, each app's offers, demands and bytes, transfers in
//! flight and recently finished, traffic per NIC and transport, fabric events.
//!
//! Counting costs the hot path one array increment per operation; what finished transfers
//! leave is `traffic`'s. Everything else is computed when an observer asks, within the
//! bounds `view` states.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::kept::POOL;
use super::traffic::{TrafficStats, duration_us};
use super::{App, Cdo, ConnId, Manager, State, Transfer};
use crate::proto::{self, AppId, CdoId, FromPm, Op, Refusal, TransferId};
use crate::selector::Selector;
use crate::view::{
    self, AppNic, AppView, CdoPage, CdoView, Fabric, FabricEvent, Query, Status, TransferView,
    Transfers, Transport, TransportTraffic, View,
};

/// Most observers connected at once: past it, a newcomer takes the place of the observer
/// that asked nothing for longest (so observers that hold their connections cannot lock
/// `maestro pool` out).
pub const MAX_OBSERVERS: usize = 64;

/// Number of [`Op`] kinds (the counters' array length).
const OPS: usize = Op::Taken as usize + 1;

/// An app's figures.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AppCounters {
    pub(super) offered: u64,
    pub(super) demanded: u64,
    pub(super) bytes_sent: u64,
    pub(super) bytes_received: u64,
}

/// The manager's figures for observers.
#[derive(Debug)]
pub(super) struct Stats {
    ops: [u64; OPS],
    /// Start of the current rate window and the operation count then.
    window: (Instant, u64),
    /// Operations per second over the last full window (`None` before the first closed).
    rate: Option<f64>,
    /// Transfers: per app and NIC, by transport, the recent ones.
    pub(super) traffic: TrafficStats,
    fabric_events: VecDeque<FabricEvent>,
    /// Observer connections, with when each last asked (or joined).
    pub(super) observers: BTreeMap<ConnId, Instant>,
    /// Which of them are standby pool managers watching this one, and where they run.
    standbys: BTreeMap<ConnId, String>,
    /// The PM's resident memory, as the driver last said.
    memory_bytes: Option<u64>,
}

impl Stats {
    /// The PM process's resident memory, as the driver read it.
    pub(super) fn set_memory_bytes(&mut self, bytes: Option<u64>) {
        self.memory_bytes = bytes;
    }

    /// Observer `conn` is gone.
    pub(super) fn forget_observer(&mut self, conn: ConnId) {
        self.observers.remove(&conn);
        self.standbys.remove(&conn);
    }

    /// Number of observers connected.
    pub(super) fn observer_count(&self) -> usize {
        self.observers.len()
    }

    pub(super) fn new(start: Instant) -> Stats {
        Stats {
            ops: [0; OPS],
            window: (start, 0),
            rate: None,
            traffic: TrafficStats::new(),
            fabric_events: VecDeque::new(),
            observers: BTreeMap::new(),
            standbys: BTreeMap::new(),
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
            self.rate = Some((total - self.window.1) as f64 / elapsed.as_secs_f64());
            self.window = (now, total);
        }
    }

    /// Operations per second at `now`: over the last full window; in an idle pool (the
    /// window open for 2 s or more), or before any window closed (a first look at a pool
    /// that just did its first thousand operations), over the open window.
    pub(super) fn rate_at(&self, now: Instant) -> f64 {
        let since = now.saturating_duration_since(self.window.0);
        match self.rate {
            Some(rate) if since < Duration::from_secs(2) => rate,
            _ if since.is_zero() => 0.0,
            _ => (self.total() - self.window.1) as f64 / since.as_secs_f64(),
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
    /// Accepts `conn` as an observer; when [`MAX_OBSERVERS`] are connected, the one that
    /// asked nothing for longest is told why and closed to make room.
    pub(super) fn observe(&mut self, conn: ConnId, who: &str, standby: Option<&str>) {
        let now = self.events.now();
        if self.stats.observers.len() >= MAX_OBSERVERS
            && let Some((&idle, _)) = self.stats.observers.iter().min_by_key(|(_, t)| **t)
        {
            tracing::debug!("observer {idle} closed: {MAX_OBSERVERS} observers, {who} came");
            self.stats.forget_observer(idle);
            self.conns.remove(&idle);
            self.refuse(
                idle,
                Op::Query,
                None,
                Refusal::Quota(format!(
                    "{MAX_OBSERVERS} observers were connected and this one had asked nothing for longest: it made room for a newcomer"
                )),
            );
            self.out.close(idle);
        }
        tracing::debug!("observer {who} connected ({conn})");
        self.stats.observers.insert(conn, now);
        if let Some(host) = standby {
            tracing::info!("standby pool manager on {host} watches this one");
            self.stats.standbys.insert(conn, host.to_string());
        }
        self.conns.insert(conn, super::Conn::Observer);
        self.out.push(
            conn,
            FromPm::Welcome {
                app: 0,
                pool: self.instance,
                keep: None,
                lease_grace: self.policy.lease_grace,
            },
        );
    }

    /// A message from observer `conn`: queries are answered, LEAVE is said goodbye to,
    /// anything else is refused.
    pub(super) fn observer_message(&mut self, conn: ConnId, msg: proto::ToPm) {
        match msg {
            proto::ToPm::Query { id, query } => {
                let now = self.events.now();
                if let Some(t) = self.stats.observers.get_mut(&conn) {
                    *t = now;
                }
                let view = self.answer(query);
                self.out.push(
                    conn,
                    FromPm::View {
                        id,
                        view: Box::new(view),
                    },
                );
            }
            proto::ToPm::Leave => {
                self.stats.forget_observer(conn);
                self.conns.remove(&conn);
                self.out.push(conn, FromPm::Bye);
                self.out.close(conn);
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

    /// Every input that leads here advanced the clock (and the operation rates) first.
    pub(super) fn answer(&mut self, query: Query) -> View {
        let now = self.events.now();
        match query {
            Query::Status => View::Status(self.status(now)),
            Query::Ls(ls) => View::Cdos(self.ls(ls, now)),
            Query::Transfers => View::Transfers(self.transfers_view(now)),
            Query::Fabric => View::Fabric(self.fabric_view()),
        }
    }

    fn status(&self, now: Instant) -> Status {
        // Kept as CDOs change (`CdoTable::counts`): no walk over every CDO. The pool's own
        // offers (kept CDOs) are counted apart.
        let (kept, kept_bytes) = self.kept.totals();
        let mut cdos: BTreeMap<String, u64> = self
            .cdos
            .counts()
            .map(|(state, n)| (state.to_string(), n))
            .collect();
        if let Some(offered) = cdos.get_mut("offered") {
            *offered = offered.saturating_sub(kept);
        }
        cdos.insert("kept".into(), kept);
        let operations = self
            .stats
            .ops
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .filter_map(|(i, n)| Some((op_name(i)?, *n)))
            .collect();
        let rate = self.stats.rate_at(now);
        let live = cdos.values().sum();
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
            generation: self.instance,
            grace_ms: self
                .grace
                .map(|until| duration_ms(until.saturating_duration_since(now))),
            standbys: self.stats.standbys.values().cloned().collect(),
            apps: self
                .apps
                .iter()
                .take(view::MAX_LISTED)
                .map(|(&id, a)| self.app_view(id, a))
                .collect(),
            cdos,
            kept_bytes,
            subscriptions: self.events.subscription_count() as u64,
            transfers_in_flight: self.transfers.len() as u64,
            shards: vec![view::ShardStatus {
                index: self.shard.index() as u16,
                count: self.shard.of().count() as u16,
                cdos: live,
                operations_per_second: rate,
                memory_bytes: self.stats.memory_bytes,
                generation: self.instance,
            }],
        }
    }

    fn app_view(&self, id: AppId, a: &App) -> AppView {
        AppView {
            id,
            component: a.component.clone(),
            index: a.index,
            host: a.host.clone(),
            job: a.job.clone(),
            pid: a.memory.map(|m| m.pid),
            provider: a.endpoint.as_ref().map(|e| e.provider.clone()),
            address: address_of(a),
            nic: a.nics.names.first().cloned(),
            nic_reason: a.nics.reason.clone(),
            joined_unix_ns: self.events.clock().unix_ns(a.joined),
            cdos: self.cdos.count_of(id) as u64,
            offered: a.counters.offered,
            demanded: a.counters.demanded,
            bytes_sent: a.counters.bytes_sent,
            bytes_received: a.counters.bytes_received,
            leaving: a.leaving,
        }
    }

    /// A page of CDOs: apps in id order, each app's CDO ids in order (apps number their
    /// own, so the ids of app `a` are `cdo_ids(a)` up to the last it declared), at most
    /// [`view::MAX_SCAN`] ids looked at, fewer by the selector's weight (a heavy selector
    /// makes more, smaller pages: no query holds the manager longer than a plain one).
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
        let scan = selector.as_ref().map_or(view::MAX_SCAN, |s| {
            (view::MAX_SCAN / s.weight() as u64).max(1)
        });
        let mut page = CdoPage {
            total: self.cdos.len() as u64,
            ..CdoPage::default()
        };
        let start = ls.after.map_or(1, |c| c.saturating_add(1));
        // The pool's own (kept CDOs) first: their ids come before every app's.
        let kept = self.kept.ids_from(start);
        let apps = self
            .apps
            .range(proto::cdo_owner(start).max(1)..)
            .flat_map(|(&app, a)| {
                // This shard's part of the app's ids (all of them, in a pool of one).
                let ids = self.shard.cdo_ids(app);
                start.max(*ids.start())..=ids.start() + a.last_declared.saturating_sub(1)
            });
        for (scanned, id) in (0u64..).zip(kept.chain(apps)) {
            if scanned == scan || page.cdos.len() == limit {
                page.next = Some(id - 1);
                return page;
            }
            let Some(c) = self.cdos.get(&id) else {
                continue;
            };
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
                vec![self.provider_label(id).to_string()],
                self.cdos.waiting(&c.name).len() as u64,
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
            state: match (&c.state, c.app()) {
                (State::Offered(_), POOL) => "kept".to_string(),
                (state, _) => state.name().to_string(),
            },
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
            recent: self.recent_transfers(),
            completed: self.stats.traffic.completed,
            failed: self.stats.traffic.failed,
        }
    }

    fn fabric_view(&self) -> Fabric {
        Fabric {
            nics: self.nic_traffic(),
            transports: Transport::ALL
                .iter()
                .zip(&self.stats.traffic.transports)
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
            links_down: (self.down.iter().map(ToString::to_string))
                .chain(
                    self.switch_links_down
                        .iter()
                        .map(|l| format!("switch link {l}")),
                )
                .collect(),
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
                    providers: a
                        .endpoint
                        .iter()
                        .chain(&a.alternates)
                        .map(|e| e.provider.clone())
                        .collect(),
                })
                .collect(),
        }
    }

    /// The provider and NIC name of endpoint `index` of `app` (`u8::MAX`: none).
    pub(super) fn nic_of(&self, app: AppId, index: u8) -> (Option<&str>, Option<&str>) {
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

    /// `component:index` of `app`; `component:index (gone)` for one that left lately,
    /// `app N (gone)` for one long gone.
    pub(super) fn label(&self, app: AppId) -> String {
        match (self.apps.get(&app), self.stats.traffic.departed.get(&app)) {
            _ if app == POOL => "pool".into(),
            (Some(a), _) => a.label.to_string(),
            (None, Some(l)) => format!("{l} (gone)"),
            (None, None) => format!("app {app} (gone)"),
        }
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
    Op::Release,
    Op::Query,
    Op::Spilled,
    Op::Discard,
    Op::Taken,
];

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
        assert_eq!(s.rate, None, "the window is still open");
        // A first look before any window closed: the open window's rate, not 0.
        let first = s.rate_at(t0 + Duration::from_millis(500));
        assert!((first - 1000.0).abs() < 1e-9, "{first}");
        s.tick(t0 + Duration::from_secs(2));
        assert_eq!(s.rate, Some(250.0));
        assert_eq!(s.rate_at(t0 + Duration::from_secs(3)), 250.0);
        // Idle for 2 s: the rate since the window closed.
        assert_eq!(s.rate_at(t0 + Duration::from_secs(4)), 0.0);
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
