//! A manager that takes over from one that is gone, in memory: its grace period, in which
//! only apps reclaiming their old app id join (`Join::reclaim`) and each gets that id, so
//! the CDO ids it numbered with the old manager stay valid; new apps are refused until the
//! period ends, and numbered above every reclaimed id after. (The first part of issue #52:
//! what the apps replay, the client's side and the standby follow; see
//! docs/developers/failover.md.)

mod support;

use std::time::Duration;

use pool_core::proto::{FromPm, Op, Reclaim, Refusal, ToPm, cdo_ids};
use support::*;

/// The reclaim of `app` from the manager of generation 5.
fn reclaim(app: u64) -> Option<Reclaim> {
    Some(Reclaim { app, generation: 5 })
}

/// What the PM answered `conn`'s JOIN.
fn answer(out: &[(u64, FromPm)], conn: u64) -> &FromPm {
    &out.iter().find(|(c, _)| *c == conn).expect("answered").1
}

fn refused_with(out: &[(u64, FromPm)], conn: u64) -> Refusal {
    match answer(out, conn) {
        FromPm::Refused {
            op: Op::Join, why, ..
        } => why.clone(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn in_its_grace_period_a_manager_gives_reclaiming_apps_their_old_ids_and_refuses_new_ones() {
    let mut pm = Pm::new();
    let until = pm.at(1_000_000_000);
    pm.m.reclaiming(until);
    assert!(pm.m.in_grace());
    assert_eq!(
        pm.m.poll_timeout(),
        Some(until),
        "the period ends on the clock"
    );
    // Two apps of the old manager come back, in another order than they first joined.
    let (seven, _) = pm.join_with("consumer", |j| j.reclaim = reclaim(7));
    let (three, _) = pm.join_with("producer", |j| j.reclaim = reclaim(3));
    assert_eq!(pm.apps[&seven].0, 7);
    assert_eq!(pm.apps[&three].0, 3);
    // The CDO ids they numbered with the old manager are theirs again: the replay of a
    // declare made there goes through.
    let old = *cdo_ids(3).start() + 41;
    let out = pm.feed(
        three,
        ToPm::Declare {
            cdo: old,
            name: "field".into(),
        },
    );
    assert!(out.is_empty(), "a declare is not answered: {out:?}");
    assert_eq!(pm.seal(three, old), [(three, done(Op::Seal, old))]);
    let out = pm.feed(three, offer_msg(old, 64));
    assert_eq!(out, [(three, done(Op::Offer, old))]);
    // A new app waits for the end of the period; a second claim of an id is refused.
    let (newcomer, out) = pm.join_sending("late", SECRET, |_| {});
    assert_eq!(refused_with(&out, newcomer), Refusal::Grace);
    let (thief, out) = pm.join_sending("thief", SECRET, |j| j.reclaim = reclaim(7));
    let why = refused_with(&out, thief);
    assert!(
        matches!(&why, Refusal::NotReclaimed(t) if t.contains("app 7 was reclaimed")),
        "{why}"
    );
    let (nobody, out) = pm.join_sending("nobody", SECRET, |j| j.reclaim = reclaim(0));
    assert!(matches!(
        refused_with(&out, nobody),
        Refusal::NotReclaimed(_)
    ));
}

#[test]
fn after_the_grace_period_new_apps_join_above_every_reclaimed_id_and_reclaims_are_refused() {
    let mut pm = Pm::new();
    let until = pm.at(1_000_000_000);
    pm.m.reclaiming(until);
    pm.join_with("producer", |j| j.reclaim = reclaim(9));
    // Not over a nanosecond early.
    pm.now = until - Duration::from_nanos(1);
    pm.m.handle_timeout(pm.now);
    assert!(pm.m.in_grace());
    pm.now = until;
    pm.m.handle_timeout(pm.now);
    assert!(!pm.m.in_grace());
    assert_eq!(pm.m.poll_timeout(), None);
    let (newcomer, app) = pm.join("consumer");
    assert_eq!(app, 10, "numbered above the reclaimed 9");
    assert!(pm.apps.contains_key(&newcomer));
    let (late, out) = pm.join_sending("late", SECRET, |j| j.reclaim = reclaim(2));
    let why = refused_with(&out, late);
    assert!(
        matches!(&why, Refusal::NotReclaimed(t) if t.contains("no grace period")),
        "{why}"
    );
}

#[test]
fn a_manager_that_took_over_from_nobody_refuses_reclaims() {
    let mut pm = Pm::new();
    let (conn, out) = pm.join_sending("producer", SECRET, |j| j.reclaim = reclaim(1));
    assert!(matches!(refused_with(&out, conn), Refusal::NotReclaimed(_)));
    // Observers look during a grace period as at any time.
    pm.m.reclaiming(pm.at(1_000_000_000));
    let (observer, out) = pm.join_sending("maestro-pool", SECRET, |j| {
        j.role = pool_core::proto::Role::Observer;
    });
    assert!(
        matches!(answer(&out, observer), FromPm::Welcome { app: 0, .. }),
        "{out:?}"
    );
}
