//! The views of a sharded pool's managers as the view of one pool (see
//! docs/developers/shards.md): an observer asks every shard the same question and merges
//! their answers here. What holds: the apps are shard 0's (every app joins it first, and
//! it numbers them), each with its CDO and byte counts summed over the shards; CDO counts,
//! operations, transfers and traffic are summed; a subscription has a part at every
//! shard, so shard 0's count is the pool's; a CDO listing is merged in id order, a page
//! no longer than one shard's would be.

use std::collections::BTreeMap;

use super::{CdoPage, Fabric, NicTraffic, Query, Status, Transfers, View};

impl View {
    /// The answers `parts` of every shard of a pool to `query`, by shard (shard 0
    /// first), as one answer; `None` when they are not all answers to `query` (or there
    /// are none).
    pub fn merge(query: &Query, parts: Vec<View>) -> Option<View> {
        let mut parts = parts.into_iter();
        let first = parts.next()?;
        Some(match (query, first) {
            (Query::Status, View::Status(first)) => {
                let rest = parts.map(|v| match v {
                    View::Status(s) => Some(s),
                    _ => None,
                });
                View::Status(merge_status(first, rest.collect::<Option<Vec<_>>>()?))
            }
            (Query::Ls(ls), View::Cdos(first)) => {
                let rest = parts.map(|v| match v {
                    View::Cdos(p) => Some(p),
                    _ => None,
                });
                let limit = ls.limit.min(super::MAX_PAGE) as usize;
                View::Cdos(merge_pages(first, rest.collect::<Option<Vec<_>>>()?, limit))
            }
            (Query::Transfers, View::Transfers(first)) => {
                let rest = parts.map(|v| match v {
                    View::Transfers(t) => Some(t),
                    _ => None,
                });
                View::Transfers(merge_transfers(first, rest.collect::<Option<Vec<_>>>()?))
            }
            (Query::Fabric, View::Fabric(first)) => {
                let rest = parts.map(|v| match v {
                    View::Fabric(f) => Some(f),
                    _ => None,
                });
                View::Fabric(merge_fabric(first, rest.collect::<Option<Vec<_>>>()?))
            }
            _ => return None,
        })
    }
}

/// Shard 0's status with the others' counts added (see the module's documentation).
fn merge_status(mut pool: Status, others: Vec<Status>) -> Status {
    for s in others {
        pool.uptime_ms = pool.uptime_ms.max(s.uptime_ms);
        for (op, n) in s.operations {
            *pool.operations.entry(op).or_default() += n;
        }
        pool.operations_per_second += s.operations_per_second;
        pool.memory_bytes = match (pool.memory_bytes, s.memory_bytes) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        pool.inline_bytes += s.inline_bytes;
        for (state, n) in s.cdos {
            *pool.cdos.entry(state).or_default() += n;
        }
        pool.kept_bytes += s.kept_bytes;
        pool.transfers_in_flight += s.transfers_in_flight;
        pool.grace_ms = pool.grace_ms.max(s.grace_ms);
        for standby in s.standbys {
            if !pool.standbys.contains(&standby) {
                pool.standbys.push(standby);
            }
        }
        for app in s.apps {
            if let Some(a) = pool.apps.iter_mut().find(|a| a.id == app.id) {
                a.cdos += app.cdos;
                a.offered += app.offered;
                a.demanded += app.demanded;
                a.bytes_sent += app.bytes_sent;
                a.bytes_received += app.bytes_received;
            }
        }
        pool.shards.extend(s.shards);
    }
    pool
}

/// The shards' pages of one listing as one page of at most `limit` CDOs in id order.
/// Each shard's page holds its CDOs after the same id up to where it stopped (its `next`,
/// when it has more: a page may stop short after scanning many ids): the pool's listing
/// is complete only up to the least of those, so the CDOs past it wait for the next page,
/// which starts after the last CDO shown (when `limit` cut the page) or at that bound.
fn merge_pages(first: CdoPage, others: Vec<CdoPage>, limit: usize) -> CdoPage {
    let mut bound: Option<u64> = first.next;
    let mut total = first.total;
    let mut cdos = first.cdos;
    for p in others {
        bound = match (bound, p.next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        total += p.total;
        cdos.extend(p.cdos);
    }
    cdos.sort_by_key(|c| c.id);
    if let Some(b) = bound {
        cdos.retain(|c| c.id <= b);
    }
    let next = if cdos.len() > limit {
        cdos.truncate(limit);
        cdos.last().map(|c| c.id)
    } else {
        bound
    };
    CdoPage { cdos, next, total }
}

/// The shards' transfers together, in flight and recent each in the order they started
/// (the recent ones at most [`super::RECENT_TRANSFERS`], the latest).
fn merge_transfers(mut pool: Transfers, others: Vec<Transfers>) -> Transfers {
    for t in others {
        pool.in_flight.extend(t.in_flight);
        pool.in_flight_total += t.in_flight_total;
        pool.recent.extend(t.recent);
        pool.completed += t.completed;
        pool.failed += t.failed;
    }
    pool.in_flight.sort_by_key(|t| t.started_unix_ns);
    pool.in_flight.truncate(super::MAX_LISTED);
    pool.recent.sort_by_key(|t| t.started_unix_ns);
    let extra = pool.recent.len().saturating_sub(super::RECENT_TRANSFERS);
    pool.recent.drain(..extra);
    pool
}

/// The shards' traffic summed per NIC and per transport; links down and fabric events
/// of every shard (shard 0 tells them: others have few); the apps' NICs are shard 0's.
fn merge_fabric(mut pool: Fabric, others: Vec<Fabric>) -> Fabric {
    let mut nics: BTreeMap<(String, String, String), NicTraffic> = BTreeMap::new();
    let all = std::mem::take(&mut pool.nics)
        .into_iter()
        .chain(others.iter().flat_map(|f| f.nics.iter().cloned()));
    for n in all {
        let key = (n.host.clone(), n.nic.clone(), n.provider.clone());
        match nics.get_mut(&key) {
            Some(t) => {
                t.bytes_out += n.bytes_out;
                t.bytes_in += n.bytes_in;
                t.transfers_out += n.transfers_out;
                t.transfers_in += n.transfers_in;
                t.failures += n.failures;
            }
            None => {
                nics.insert(key, n);
            }
        }
    }
    pool.nics = nics.into_values().collect();
    for f in others {
        for (name, t) in f.transports {
            let sum = pool.transports.entry(name).or_default();
            sum.transfers += t.transfers;
            sum.bytes += t.bytes;
            sum.failures += t.failures;
        }
        for link in f.links_down {
            if !pool.links_down.contains(&link) {
                pool.links_down.push(link);
            }
        }
        pool.events.extend(f.events);
    }
    pool.events.sort_by_key(|e| e.unix_ns);
    let extra = pool
        .events
        .len()
        .saturating_sub(super::RECENT_FABRIC_EVENTS);
    pool.events.drain(..extra);
    pool
}

#[cfg(test)]
mod tests {
    use super::super::{AppView, CdoView, Ls, ShardStatus, TransportTraffic};
    use super::*;

    fn status(shard: u16, apps: &[(u64, u64)], offered: u64) -> Status {
        Status {
            workflow: "wf".into(),
            operations: BTreeMap::from([("offer".to_string(), offered)]),
            operations_per_second: 10.0,
            app_count: apps.len() as u64,
            apps: apps
                .iter()
                .map(|&(id, cdos)| AppView {
                    id,
                    cdos,
                    ..AppView::default()
                })
                .collect(),
            cdos: BTreeMap::from([("offered".to_string(), offered)]),
            subscriptions: 2,
            shards: vec![ShardStatus {
                index: shard,
                count: 3,
                cdos: offered,
                ..ShardStatus::default()
            }],
            ..Status::default()
        }
    }

    #[test]
    fn a_sharded_pools_status_is_shard_0s_apps_with_every_shards_counts() {
        let parts = vec![
            View::Status(status(0, &[(1, 4), (2, 0)], 4)),
            View::Status(status(1, &[(1, 3)], 3)),
            View::Status(status(2, &[(2, 5), (9, 1)], 5)),
        ];
        let Some(View::Status(s)) = View::merge(&Query::Status, parts) else {
            panic!("a status");
        };
        assert_eq!(s.operations["offer"], 12);
        assert_eq!(s.cdos["offered"], 12);
        assert!((s.operations_per_second - 30.0).abs() < 1e-9);
        // Shard 0 numbers the apps: an app it does not know is no app of the pool.
        assert_eq!(s.app_count, 2);
        let cdos: Vec<(u64, u64)> = s.apps.iter().map(|a| (a.id, a.cdos)).collect();
        assert_eq!(cdos, [(1, 7), (2, 5)]);
        // Every subscription has a part at each shard: counted once.
        assert_eq!(s.subscriptions, 2);
        let shards: Vec<(u16, u64)> = s.shards.iter().map(|x| (x.index, x.cdos)).collect();
        assert_eq!(shards, [(0, 4), (1, 3), (2, 5)]);
    }

    fn page(ids: &[u64], next: Option<u64>, total: u64) -> View {
        View::Cdos(CdoPage {
            cdos: ids
                .iter()
                .map(|&id| CdoView {
                    id,
                    ..CdoView::default()
                })
                .collect(),
            next,
            total,
        })
    }

    fn ls(limit: u32) -> Query {
        Query::Ls(Ls {
            selector: None,
            after: None,
            limit,
            attributes: false,
        })
    }

    #[test]
    fn a_listing_merges_in_id_order_and_pages_after_the_last_shown() {
        let parts = vec![
            page(&[1, 5, 9], Some(9), 10),
            page(&[2, 3], None, 2),
            page(&[4, 6, 7], Some(7), 8),
        ];
        let Some(View::Cdos(p)) = View::merge(&ls(4), parts.clone()) else {
            panic!("a page");
        };
        let ids: Vec<u64> = p.cdos.iter().map(|c| c.id).collect();
        assert_eq!((ids, p.next, p.total), (vec![1, 2, 3, 4], Some(4), 20));
        // Room for all: complete up to the least where a shard stopped (7); the next
        // page starts there.
        let Some(View::Cdos(p)) = View::merge(&ls(100), parts) else {
            panic!("a page");
        };
        let ids: Vec<u64> = p.cdos.iter().map(|c| c.id).collect();
        assert_eq!((ids, p.next), (vec![1, 2, 3, 4, 5, 6, 7], Some(7)));
        // A shard that stopped short with nothing to show still bounds the page, and
        // the listing goes on past it.
        let short = vec![page(&[], Some(50), 3), page(&[60, 70], None, 2)];
        let Some(View::Cdos(p)) = View::merge(&ls(100), short) else {
            panic!("a page");
        };
        assert_eq!((p.cdos.len(), p.next), (0, Some(50)));
        // Nothing more anywhere: the listing ends.
        let done = vec![page(&[1], None, 1), page(&[2], None, 1)];
        let Some(View::Cdos(p)) = View::merge(&ls(100), done) else {
            panic!("a page");
        };
        assert_eq!((p.cdos.len(), p.next), (2, None));
    }

    #[test]
    fn traffic_is_summed_per_nic_and_transport() {
        let nic = |bytes| NicTraffic {
            host: "n1".into(),
            nic: "ib0".into(),
            provider: "verbs".into(),
            bytes_out: bytes,
            ..NicTraffic::default()
        };
        let fabric = |bytes| {
            View::Fabric(Fabric {
                nics: vec![nic(bytes)],
                transports: BTreeMap::from([(
                    "rma".to_string(),
                    TransportTraffic {
                        transfers: 1,
                        bytes,
                        failures: 0,
                    },
                )]),
                ..Fabric::default()
            })
        };
        let Some(View::Fabric(f)) = View::merge(&Query::Fabric, vec![fabric(10), fabric(32)])
        else {
            panic!("a fabric view");
        };
        assert_eq!(f.nics.len(), 1);
        assert_eq!(f.nics[0].bytes_out, 42);
        assert_eq!(f.transports["rma"].bytes, 42);
        assert_eq!(f.transports["rma"].transfers, 2);
    }

    #[test]
    fn answers_to_another_question_do_not_merge() {
        let parts = vec![page(&[1], None, 1), View::Status(Status::default())];
        assert!(View::merge(&ls(10), parts).is_none());
        assert!(View::merge(&Query::Status, Vec::new()).is_none());
    }
}
