//! The manager driven by random sequences of what apps may send, kept files, spills and
//! discards among them, with time moving on (a fixed-seed generator: the same sequences
//! every run): whatever apps send, the manager never panics, its books balance (the CDOs
//! by state add up to the live CDOs), every kept file it hands the driver to remove is a
//! file of its own directory and handed over once, and it still serves a well-behaved app
//! at the end.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use pool_core::ConnId;
use pool_core::attr::{AttrValue, Attributes};
use pool_core::proto::{CdoId, FromPm, GfsFile, OfferExtras, Source, ToPm, TransferId, cdo_ids};
use pool_core::view::{Query, View};
use support::*;

const KEEP: &str = "/gfs/pm";
const NAMES: [&str; 4] = ["a", "b", "c/d", "e"];

/// What the apps of one run know: their connections, their CDOs, the transfers and spills
/// the manager asked of them.
#[derive(Default)]
struct Seen {
    apps: Vec<ConnId>,
    cdos: Vec<(ConnId, CdoId)>,
    tickets: Vec<(ConnId, TransferId)>,
    spills: Vec<(ConnId, CdoId)>,
    discarded: HashSet<String>,
    /// How many spills were asked for, and how many CDOs were kept, over the run.
    asked: usize,
    kept: usize,
}

fn attributes(rng: &mut Rng) -> Attributes {
    let mut a = Attributes::new();
    if rng.below(2) == 0 {
        let lifetime = rng.below(3) as u64;
        a.insert(
            ".maestro.core.cdo.lifetime".into(),
            AttrValue::Uint(lifetime),
        );
    }
    if rng.below(3) == 0 {
        a.insert(".maestro.core.cdo.persist".into(), AttrValue::Bool(true));
    }
    a
}

fn extras(rng: &mut Rng, cdo: CdoId) -> OfferExtras {
    match rng.below(3) {
        0 => OfferExtras::default(),
        1 => OfferExtras::default().with_inline(vec![1u8; 8]),
        _ => OfferExtras::default().with_gfs(GfsFile {
            path: format!("/gfs/p/{cdo}").into(),
            checksum: 7,
        }),
    }
}

/// One random thing an app does (or time passing).
fn step(pm: &mut Pm, rng: &mut Rng, seen: &mut Seen) -> Vec<(ConnId, FromPm)> {
    if seen.apps.is_empty() || rng.below(40) == 0 {
        // Some share the global file system and no network: the PM has them spill.
        let (host, files_only) = (format!("node{}", rng.below(3)), rng.below(2) == 0);
        let (conn, _) = pm.join_with(&format!("app{}", rng.below(3)), |j| {
            j.host = host;
            j.process = rng.next();
            if files_only {
                j.gfs = Some("/gfs".into());
                j.endpoint = None;
            }
        });
        seen.apps.push(conn);
        return Vec::new();
    }
    let conn = rng.pick(&seen.apps);
    // Mostly its own CDOs; now and then another's (which must be refused).
    let cdo = match seen.cdos.iter().filter(|(c, _)| *c == conn).count() {
        0 => None,
        _ if rng.below(10) == 0 => seen.cdos.get(rng.below(seen.cdos.len())).map(|c| c.1),
        n => {
            let i = rng.below(n);
            seen.cdos
                .iter()
                .filter(|(c, _)| *c == conn)
                .nth(i)
                .map(|c| c.1)
        }
    };
    let msg = match (rng.below(16), cdo) {
        (0 | 1, _) | (_, None) => {
            let cdo = pm.declare(conn, rng.pick(&NAMES));
            seen.cdos.push((conn, cdo));
            return Vec::new();
        }
        (2, Some(cdo)) => ToPm::Seal {
            cdo,
            attributes: attributes(rng),
        },
        (3, Some(cdo)) => ToPm::Offer {
            cdo,
            region: region(rng.below(100) as u64),
            extras: extras(rng, cdo),
        },
        (4, Some(cdo)) => ToPm::SealOffer {
            cdo,
            attributes: attributes(rng),
            region: region(rng.below(100) as u64),
            extras: extras(rng, cdo),
        },
        (5, Some(cdo)) => ToPm::Withdraw {
            cdo,
            keep: match rng.below(3) {
                0 => None,
                1 => Some(format!("{KEEP}/{cdo}").into()),
                _ => Some(format!("{KEEP}/../{cdo}").into()),
            },
        },
        (6, Some(cdo)) => ToPm::Demand { cdo },
        (7, Some(cdo)) => ToPm::Require { cdo },
        (8, Some(cdo)) => ToPm::Retract { cdo },
        (9, Some(cdo)) => ToPm::Dispose {
            cdo,
            answer: rng.below(2) == 0,
        },
        (10, _) if !seen.tickets.is_empty() => {
            let (to, transfer) = seen.tickets.swap_remove(rng.below(seen.tickets.len()));
            let error = (rng.below(4) == 0).then(|| "lost".to_string());
            let out = pm.feed(
                to,
                ToPm::TransferDone {
                    transfer,
                    error,
                    direct: None,
                },
            );
            return out;
        }
        (11, _) if !seen.spills.is_empty() => {
            let (to, cdo) = seen.spills.swap_remove(rng.below(seen.spills.len()));
            let file = match rng.below(3) {
                0 => Err("disk full".to_string()),
                1 => Ok(GfsFile {
                    path: format!("/gfs/spilled/{cdo}").into(),
                    checksum: 1,
                }),
                _ => Ok(GfsFile {
                    path: "/etc/passwd".into(),
                    checksum: 1,
                }),
            };
            return pm.feed(to, ToPm::Spilled { cdo, file });
        }
        (12, _) => ToPm::Discard {
            local: rng.next(),
            name: rng.pick(&NAMES).into(),
        },
        (13, _) => {
            seen.apps.retain(|&c| c != conn);
            if rng.below(2) == 0 {
                pm.m.disconnected(pm.now, conn);
                return pm.drain();
            }
            ToPm::Leave
        }
        (14, _) => {
            pm.now += Duration::from_millis(rng.below(3000) as u64);
            pm.m.handle_timeout(pm.now);
            return pm.drain();
        }
        // Ids nobody was given.
        _ => ToPm::TransferDone {
            transfer: rng.next(),
            error: None,
            direct: None,
        },
    };
    pm.feed(conn, msg)
}

/// What the manager's answers tell the apps: tickets to complete, spills to write.
fn heard(out: &[(ConnId, FromPm)], seen: &mut Seen) {
    for (conn, m) in out {
        match m {
            FromPm::Ticket {
                transfer, source, ..
            } if !matches!(source, Source::Inline { .. }) => {
                seen.tickets.push((*conn, *transfer));
            }
            FromPm::Spill { cdo } => {
                seen.asked += 1;
                seen.spills.push((*conn, *cdo));
            }
            _ => {}
        }
    }
}

/// The books: CDOs by state add up; kept files are the manager's own and go once.
fn balanced(pm: &mut Pm, seen: &mut Seen) {
    let View::Status(s) = pm.m.view(pm.now, Query::Status) else {
        panic!("a status")
    };
    let counted: u64 = s.cdos.values().sum();
    assert_eq!(counted, pm.m.cdo_count() as u64, "{:?}", s.cdos);
    for f in pm.m.take_discarded() {
        assert!(f.path.starts_with(&format!("{KEEP}/")), "{f:?}");
        assert!(seen.discarded.insert(f.path.to_string()), "twice: {f:?}");
    }
    let kept = pm.m.kept_files();
    for f in &kept {
        assert!(f.path.starts_with(&format!("{KEEP}/")), "{f:?}");
    }
    seen.kept = seen.kept.max(kept.len());
}

#[test]
fn random_apps_never_break_the_manager_or_its_books() {
    let (mut asked, mut kept, mut discarded) = (0, 0, 0);
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut pm = Pm::new();
        pm.m.set_keep_dir(Some(KEEP));
        let mut seen = Seen::default();
        for _ in 0..1500 {
            let out = step(&mut pm, &mut rng, &mut seen);
            heard(&out, &mut seen);
            balanced(&mut pm, &mut seen);
        }
        (asked, kept, discarded) = (
            asked + seen.asked,
            kept + seen.kept,
            discarded + seen.discarded.len(),
        );
        // A well-behaved pair still gets served.
        let (p, _) = pm.join("producer");
        let (offer, _) = pm.offer(p, "fresh", 16);
        let (c, _) = pm.join("consumer");
        let want = pm.declare(c, "fresh");
        let out = pm.feed(c, ToPm::Demand { cdo: want });
        let (to, _, cdo, _) = ticket_of(&out);
        assert_eq!((to, cdo), (c, want), "seed {seed}");
        assert!(cdo_ids(pm.apps[&p].0).contains(&offer));
    }
    // The runs went where this test is about.
    assert!(
        asked > 0 && kept > 0 && discarded > 0,
        "spills asked {asked}, most kept at once {kept}, files discarded {discarded}"
    );
}
