//! CDOs the pool keeps after their producer handed their file over at withdraw and left:
//! demandable by consumers that come later, until their lifetime or the workflow ends,
//! their files the driver's to remove (or persist) only once nobody reads them.

mod support;

use std::time::Duration;

use pool_core::ConnId;
use pool_core::KeptFile;
use pool_core::attr::{AttrValue, Attributes};
use pool_core::proto::{FromPm, GfsFile, OfferExtras, Op, Refusal, Source, ToPm};
use pool_core::view::{Ls, Query, View};
use support::*;

const KEEP: &str = "/gfs/maestro-gfs-pm";

/// A PM keeping files in [`KEEP`], and a producer that offered `name` (`attrs` sealed)
/// through its file `/gfs/p/ID`: the producer's connection and CDO.
fn offered_to_gfs(pm: &mut Pm, name: &str, attrs: Attributes) -> (ConnId, u64) {
    pm.m.set_keep_dir(Some(KEEP));
    let (p, _) = pm.join("producer");
    let cdo = pm.declare(p, name);
    let out = pm.feed(
        p,
        ToPm::SealOffer {
            cdo,
            attributes: attrs,
            region: region(9),
            extras: OfferExtras::default().with_gfs(producers_file(cdo)),
        },
    );
    assert_eq!(out, [(p, done(Op::Offer, cdo))]);
    (p, cdo)
}

/// The producer's own file of `cdo`, as its offer names it.
fn producers_file(cdo: u64) -> GfsFile {
    GfsFile {
        path: format!("/gfs/p/{cdo}").into(),
        checksum: 42,
    }
}

fn keep(cdo: u64) -> ToPm {
    ToPm::Withdraw {
        cdo,
        keep: Some(format!("{KEEP}/{cdo}").into()),
    }
}

/// A consumer joining now and demanding `name`: its connection and what the PM sent.
fn demand(pm: &mut Pm, name: &str) -> (ConnId, u64, Vec<(ConnId, FromPm)>) {
    let (c, _) = pm.join("consumer");
    let cdo = pm.declare(c, name);
    let out = pm.feed(c, ToPm::Demand { cdo });
    (c, cdo, out)
}

fn gfs_path(out: &[(ConnId, FromPm)]) -> Option<String> {
    out.iter().find_map(|(_, m)| match m {
        FromPm::Ticket {
            source: Source::Gfs { file, .. },
            ..
        } => Some(file.path.to_string()),
        _ => None,
    })
}

fn state_counts(pm: &mut Pm) -> (u64, u64) {
    let View::Status(s) = pm.m.view(pm.now, Query::Status) else {
        panic!("status")
    };
    (s.cdos["kept"], s.cdos["offered"])
}

#[test]
fn a_producer_hands_its_file_over_leaves_and_a_later_consumer_reads_it() {
    let mut pm = Pm::new();
    let (p, cdo) = offered_to_gfs(&mut pm, "field", Attributes::new());
    // Answered once the file is checked and described, not before: a producer told its
    // CDO is kept may rely on a manager taking over adopting it.
    assert_eq!(pm.feed(p, keep(cdo)), []);
    let (checks, out) = pm.describe(Ok(()));
    assert_eq!(out, [(p, done(Op::Withdraw, cdo))]);
    let out = pm.feed(p, ToPm::Dispose { cdo, answer: true });
    assert_eq!(out, [(p, done(Op::Dispose, cdo))]);
    assert_eq!(pm.feed(p, ToPm::Leave), [(p, FromPm::Bye)]);
    pm.m.disconnected(pm.now, p);
    assert_eq!(
        state_counts(&mut pm),
        (1, 0),
        "kept, not counted as offered"
    );

    let (c, _, out) = demand(&mut pm, "field");
    assert_eq!(gfs_path(&out).as_deref(), Some(&*format!("{KEEP}/{cdo}")));
    let provider = out.iter().find_map(|(_, m)| match m {
        FromPm::Ticket { provider, .. } => Some(provider.to_string()),
        _ => None,
    });
    assert_eq!(
        provider.as_deref(),
        Some("producer:0"),
        "whose bytes they are"
    );
    let (_, transfer, _, len) = ticket_of(&out);
    assert_eq!(len, 9);
    pm.feed(c, transferred(transfer));

    // Observers see it as the pool's, kept from the producer.
    let ls = Ls {
        selector: None,
        after: None,
        limit: 10,
        attributes: false,
    };
    let View::Cdos(page) = pm.m.view(pm.now, Query::Ls(ls)) else {
        panic!("page")
    };
    let kept = &page.cdos[0];
    assert_eq!(
        (
            kept.app.as_str(),
            kept.state.as_str(),
            kept.providers.clone()
        ),
        ("pool", "kept", vec!["producer:0".to_string()])
    );
    // The workflow ends: the driver gets the file to remove.
    let files = pm.m.kept_files();
    let [
        KeptFile {
            path,
            name,
            description,
            persist: false,
        },
    ] = &files[..]
    else {
        panic!("{files:?}")
    };
    assert_eq!((&**path, &**name), (&*format!("{KEEP}/{cdo}"), "field"));
    // Described as it was checked: what a pool manager taking over adopts.
    assert!(
        matches!(&checks[..], [c] if c.path == *path && c.description == *description && c.offered.is_some()),
        "{checks:?}"
    );
    let adopted = pool_core::Adopted::described(description, path.to_string()).expect("read");
    assert_eq!((adopted.name.as_str(), adopted.len), ("field", 9));
    assert!(pm.m.take_discarded().is_empty(), "nothing ended before");
}

/// A tool subscribing with the current state first, after the producer left, hears of the
/// kept CDO as an offer of the pool's.
#[test]
fn a_late_subscriber_hears_of_kept_cdos_as_the_pools_offers() {
    let mut pm = Pm::new();
    let (p, cdo) = offered_to_gfs(&mut pm, "field", Attributes::new());
    pm.feed(p, keep(cdo));
    pm.feed(p, ToPm::Leave);
    pm.m.disconnected(pm.now, p);
    let (t, _) = pm.join("tool");
    let options = pool_core::events::SubscribeOptions {
        replay: true,
        ..Default::default()
    };
    let (_, out) = pm.subscribe_seeing(
        t,
        pool_core::events::EventKind::Offer,
        "(has .maestro.core.cdo.name)",
        options,
    );
    let events = events_to(&out, t);
    assert!(
        matches!(&events[..], [e] if e.component == "pool" && e.cdo.as_deref() == Some("field")),
        "{events:?}"
    );
}

#[test]
fn a_waiting_demand_is_served_from_the_producers_file_and_later_ones_from_the_kept_one() {
    let mut pm = Pm::new();
    pm.m.set_keep_dir(Some(KEEP));
    let (c, _, out) = demand(&mut pm, "late");
    assert!(gfs_path(&out).is_none(), "nothing offered yet: it waits");
    let (p, _) = pm.join("producer");
    let cdo = pm.declare(p, "late");
    let out = pm.feed(
        p,
        ToPm::SealOffer {
            cdo,
            attributes: Attributes::new(),
            region: region(9),
            extras: OfferExtras::default().with_gfs(producers_file(cdo)),
        },
    );
    // Ticketed at once from the producer's own file.
    assert_eq!(gfs_path(&out), Some(format!("/gfs/p/{cdo}")));
    let (_, first, _, _) = ticket_of(&out);
    let out = pm.feed(p, keep(cdo));
    assert!(
        out.is_empty(),
        "the withdraw waits for the transfer in flight: {out:?}"
    );
    let out = pm.feed(c, transferred(first));
    assert!(
        !out.contains(&(p, done(Op::Withdraw, cdo))),
        "its file is not described yet: {out:?}"
    );
    let (_, out) = pm.describe(Ok(()));
    assert_eq!(out, [(p, done(Op::Withdraw, cdo))]);
    // A second consumer gets the kept file.
    let (_, _, out) = demand(&mut pm, "late");
    assert_eq!(gfs_path(&out), Some(format!("{KEEP}/{cdo}")));
}

#[test]
fn a_kept_cdo_ends_with_its_lifetime_its_file_only_once_nobody_reads_it() {
    let mut pm = Pm::new();
    let attrs = Attributes::from([
        (".maestro.core.cdo.lifetime".into(), AttrValue::Uint(10)),
        (".maestro.core.cdo.persist".into(), AttrValue::Bool(true)),
    ]);
    let (p, cdo) = offered_to_gfs(&mut pm, "short", attrs);
    pm.feed(p, keep(cdo));
    assert_eq!(pm.m.poll_timeout(), Some(pm.now + Duration::from_secs(10)));
    // A consumer reads it as its lifetime ends.
    let (c, _, out) = demand(&mut pm, "short");
    let (_, transfer, _, _) = ticket_of(&out);
    pm.now += Duration::from_secs(10);
    pm.m.handle_timeout(pm.now);
    assert!(
        pm.m.take_discarded().is_empty(),
        "read still: the file stays"
    );
    let (_, _, out) = demand(&mut pm, "short");
    assert!(gfs_path(&out).is_none(), "no longer offered: {out:?}");
    pm.feed(c, transferred(transfer));
    let discarded = pm.m.take_discarded();
    let [
        KeptFile {
            path,
            name,
            description: described,
            persist: true,
        },
    ] = &discarded[..]
    else {
        panic!("{discarded:?}")
    };
    assert_eq!((&**path, &**name), (&*format!("{KEEP}/{cdo}"), "short"));
    // What whoever finds the persisted file learns of it.
    let described: serde_json::Value = serde_json::from_str(described).expect("JSON");
    assert_eq!(
        (
            &described["name"],
            &described["size"],
            &described["checksum"],
            &described["provider"],
            &described["attributes"][".maestro.core.cdo.lifetime"],
        ),
        (
            &serde_json::json!("short"),
            &serde_json::json!(9),
            &serde_json::json!(42),
            &serde_json::json!("producer:0"),
            &serde_json::json!(10),
        )
    );
    assert!(pm.m.kept_files().is_empty());
    assert_eq!(state_counts(&mut pm), (0, 0));
}

#[test]
fn a_hand_over_the_pool_cannot_take_is_refused_saying_why_and_the_offer_stays() {
    let mut pm = Pm::new();
    let (p, cdo) = offered_to_gfs(&mut pm, "f", Attributes::new());
    let not_kept = |out: Vec<(ConnId, FromPm)>| match out.as_slice() {
        [
            (
                _,
                FromPm::Refused {
                    op: Op::Withdraw,
                    why: Refusal::NotKept(why),
                    ..
                },
            ),
        ] => why.clone(),
        other => panic!("{other:?}"),
    };
    // Another path than the CDO's file in the pool's directory.
    for path in ["/gfs/elsewhere/1".to_string(), format!("{KEEP}/../{cdo}")] {
        let why = not_kept(pm.feed(
            p,
            ToPm::Withdraw {
                cdo,
                keep: Some(path.into()),
            },
        ));
        assert!(why.contains("is not CDO"), "{why}");
    }
    // The offer is still there: a consumer is ticketed from the producer's own file.
    let (_, _, out) = demand(&mut pm, "f");
    assert_eq!(gfs_path(&out), Some(format!("/gfs/p/{cdo}")));

    // An offer not written to the global file system.
    let (offer, _) = pm.offer(p, "rma", 8);
    let why = not_kept(pm.feed(p, keep(offer)));
    assert!(
        why.contains("not written to the global file system"),
        "{why}"
    );

    // A PM that keeps no files says how to have it keep them.
    pm.m.set_keep_dir(None);
    let why = not_kept(pm.feed(p, keep(cdo)));
    assert!(why.contains("--gfs-dir"), "{why}");
}

#[test]
fn kept_cdos_are_bounded_by_the_policy() {
    let mut pm = Pm::new();
    pm.m.set_policy(pool_core::policy::Policy {
        max_kept_bytes: 500,
        ..Default::default()
    });
    let (p, first) = offered_to_gfs(&mut pm, "a", Attributes::new());
    pm.feed(p, keep(first));
    assert_eq!(pm.describe(Ok(())).1, [(p, done(Op::Withdraw, first))]);
    let second = pm.declare(p, "b");
    pm.feed(
        p,
        ToPm::SealOffer {
            cdo: second,
            attributes: Attributes::new(),
            region: region(9),
            extras: OfferExtras::default().with_gfs(producers_file(second)),
        },
    );
    let out = pm.feed(p, keep(second));
    assert!(
        matches!(&out[..], [(_, FromPm::Refused { why: Refusal::NotKept(why), .. })] if why.contains("--max-kept-bytes")),
        "{out:?}"
    );
}

#[test]
fn an_app_discards_a_kept_name_unless_another_component_owns_it() {
    let mut pm = Pm::new();
    pm.m.set_policy(pool_core::policy::Policy {
        owners: vec!["owned/=producer".parse().expect("owner")],
        ..Default::default()
    });
    let (p, cdo) = offered_to_gfs(&mut pm, "owned/x", Attributes::new());
    pm.feed(p, keep(cdo));
    let (a, _) = pm.join("archiver");
    let discard = |pm: &mut Pm, conn, local| {
        pm.feed(
            conn,
            ToPm::Discard {
                local,
                name: "owned/x".into(),
            },
        )
    };
    let out = discard(&mut pm, a, 1);
    assert!(
        matches!(
            &out[..],
            [(
                _,
                FromPm::Refused {
                    op: Op::Discard,
                    cdo: Some(1),
                    why: Refusal::NotAllowed(_)
                }
            )]
        ),
        "{out:?}"
    );
    // The owner's component may; the kept CDO goes, its file with it (nobody reads it).
    let (o, _) = pm.join("producer");
    assert_eq!(
        discard(&mut pm, o, 7),
        [(o, FromPm::Discarded { local: 7, count: 1 })]
    );
    assert_eq!(pm.m.take_discarded().len(), 1);
    assert_eq!(
        discard(&mut pm, o, 8),
        [(o, FromPm::Discarded { local: 8, count: 0 })],
        "none left"
    );
    let (_, _, out) = demand(&mut pm, "owned/x");
    assert!(gfs_path(&out).is_none(), "no longer demandable: {out:?}");
}

#[test]
fn a_file_is_adopted_only_from_the_pools_own_directory() {
    let mut pm = Pm::new();
    let file = |path: &str| pool_core::Adopted {
        path: path.into(),
        name: "analysis".into(),
        len: 9,
        checksum: 42,
        provider: "analysis:0".into(),
        attributes: Attributes::from([(
            ".maestro.core.cdo.persist".to_string(),
            AttrValue::Bool(true),
        )]),
    };
    let not_kept = |r: Result<u64, Refusal>| match r {
        Err(Refusal::NotKept(why)) => why,
        other => panic!("{other:?}"),
    };
    let why = not_kept(pm.m.adopt(pm.now, file(&format!("{KEEP}/adopted-1"))));
    assert!(why.contains("keeps no files"), "{why}");
    pm.m.set_keep_dir(Some(KEEP));
    for outside in ["/etc/passwd", &format!("{KEEP}/a/b"), &format!("{KEEP}/..")] {
        let why = not_kept(pm.m.adopt(pm.now, file(outside)));
        assert!(why.contains("not one of the pool's directory"), "{why}");
    }
    let id =
        pm.m.adopt(pm.now, file(&format!("{KEEP}/adopted-1")))
            .expect("adopted");
    // A consumer gets it as the producer's; it persists again at the end.
    let (_, _, out) = demand(&mut pm, "analysis");
    assert_eq!(gfs_path(&out), Some(format!("{KEEP}/adopted-1")));
    let kept = pm.m.kept_files();
    assert!(
        matches!(&kept[..], [f] if f.persist && f.description.contains("\"typed\"")),
        "{kept:?} ({id})"
    );
    // Described anew in this pool's directory; no producer's file to check it against.
    let checks = pm.m.take_kept_checks();
    assert!(
        matches!(&checks[..], [c] if c.id == id && c.offered.is_none()),
        "{checks:?}"
    );
    // A description that is none says what is wrong.
    let e = pool_core::Adopted::described("{\"name\": 1}", String::new()).expect_err("bad");
    assert!(e.contains("invalid type"), "{e}");
}
