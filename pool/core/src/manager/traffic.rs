//! What the manager counts of transfers for observers: each app's traffic per endpoint
//! (and per pseudo-NIC: bytes with tickets, streams, same-process hand-overs), the traffic of
//! apps that left, totals by transport, and the last finished transfers as plain numbers.
//! Recording a finished transfer allocates nothing and touches no name (see docs/benchmarks-journal.md:
//! a version that kept names cost 15 % of the require rate).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{App, Manager, Transfer};
use crate::proto::{self, AppId, CdoId, Direct, Source, TransferId};
use crate::view::{self, NicTraffic, TransferView, Transport};

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
            Source::Gfs { .. } => Route {
                transport: Transport::Gfs,
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
/// pseudo-NICs `inline`, `stream`, `process` (same-process hand-overs) and `gfs`.
#[derive(Clone, Debug, Default)]
pub(super) struct Slots(Vec<Traffic>);

/// The pseudo-NICs after an app's endpoints, in slot order.
const PSEUDO: [&str; 4] = ["inline", "stream", "process", "gfs"];

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
            Transport::Gfs => endpoints + 3,
            Transport::Rma | Transport::Copy | Transport::Map => usize::from(if provider_side {
                route.provider_nic
            } else {
                route.consumer_nic
            }),
        };
        self.0.get_mut(index)
    }
}

/// A finished transfer as [`Transfers::recent`](crate::view::Transfers::recent) shows it: plain numbers, resolved into
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

/// The transfer figures of the status view's counters.
#[derive(Debug)]
pub(super) struct TrafficStats {
    recent: VecDeque<Finished>,
    pub(super) completed: u64,
    pub(super) failed: u64,
    /// Traffic of apps that are gone, by NIC.
    retired: BTreeMap<NicKey, Traffic>,
    /// Labels of the last [`view::MAX_LISTED`] apps that went, for what they left behind
    /// (recent transfers).
    pub(super) departed: BTreeMap<AppId, Arc<str>>,
    /// By transport (indexed by `Transport as usize`): transfers, bytes, failures.
    pub(super) transports: [(u64, u64, u64); Transport::ALL.len()],
}

impl TrafficStats {
    pub(super) fn new() -> TrafficStats {
        TrafficStats {
            recent: VecDeque::new(),
            completed: 0,
            failed: 0,
            retired: BTreeMap::new(),
            departed: BTreeMap::new(),
            transports: [(0, 0, 0); Transport::ALL.len()],
        }
    }
}

impl Manager {
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

    /// An app that goes keeps its traffic in the report, and its name for what it left.
    pub(super) fn retire_traffic(&mut self, id: AppId, a: &App) {
        self.stats
            .traffic
            .departed
            .insert(id, std::sync::Arc::clone(&a.label));
        if self.stats.traffic.departed.len() > view::MAX_LISTED {
            self.stats.traffic.departed.pop_first();
        }
        for (key, t) in Self::slot_keys(a).zip(&a.traffic.0) {
            if t.is_empty() {
                continue;
            }
            if self.stats.traffic.retired.len() < view::MAX_LISTED
                || self.stats.traffic.retired.contains_key(&key)
            {
                self.stats.traffic.retired.entry(key).or_default().add(t);
            }
        }
    }

    /// Traffic per host, NIC and provider: the apps that left, and those here.
    pub(super) fn nic_traffic(&self) -> Vec<NicTraffic> {
        let mut all = self.stats.traffic.retired.clone();
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
    /// The recent finished transfers as observers see them, oldest first.
    pub(super) fn recent_transfers(&self) -> Vec<TransferView> {
        self.stats
            .traffic
            .recent
            .iter()
            .map(|f| self.finished_view(f))
            .collect()
    }

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
        let by = &mut self.stats.traffic.transports[route.transport as usize];
        if failed {
            by.2 += 1;
            self.stats.traffic.failed += 1;
        } else {
            by.0 += 1;
            by.1 += t.len;
            self.stats.traffic.completed += 1;
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
        if self.stats.traffic.recent.len() == view::RECENT_TRANSFERS {
            self.stats.traffic.recent.pop_front();
        }
        self.stats.traffic.recent.push_back(finished);
    }
}

/// `d` in whole microseconds (saturating).
pub(super) fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
