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
    Some(Reclaim {
        app,
        generation: 5,
        last_serial: 0,
    })
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
fn what_apps_replay_in_the_grace_period_raises_no_event_and_what_they_do_after_it_does() {
    use pool_core::events::{EventKind, SubscribeOptions};
    let mut pm = Pm::new();
    let until = pm.at(1_000_000_000);
    pm.m.reclaiming(until);
    let (watcher, _) = pm.join_with("watcher", |j| j.reclaim = reclaim(1));
    pm.subscribe(watcher, EventKind::Offer, "", SubscribeOptions::default());
    let (producer, _) = pm.join_with("producer", |j| j.reclaim = reclaim(2));
    // The producer's replay: heard of already, from the manager that is gone.
    let replayed = pm.sealed(producer, "replayed", 1);
    let out = pm.feed(producer, offer_msg(replayed, 8));
    assert_eq!(out, [(producer, done(Op::Offer, replayed))], "no event");
    pm.now = until;
    pm.m.handle_timeout(pm.now);
    let fresh = pm.sealed(producer, "fresh", 2);
    let out = pm.feed(producer, offer_msg(fresh, 8));
    let heard = events_to(&out, watcher);
    assert_eq!(heard.len(), 1, "{out:?}");
    assert_eq!(heard[0].cdo.as_deref(), Some("fresh"));
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

/// The kinds of `msgs`, in order.
fn kinds(msgs: &[ToPm]) -> Vec<&'static str> {
    msgs.iter()
        .map(|m| match m {
            ToPm::Declare { .. } => "declare",
            ToPm::Seal { .. } => "seal",
            ToPm::Offer { .. } => "offer",
            ToPm::Require { .. } => "require",
            ToPm::Demand { .. } => "demand",
            ToPm::Withdraw { .. } => "withdraw",
            ToPm::Subscribe { .. } => "subscribe",
            ToPm::Replayed => "replayed",
            other => panic!("not replayed: {other:?}"),
        })
        .collect()
}

#[test]
fn offers_and_demands_replayed_to_a_new_manager_serve_consumers_as_before() {
    use pool_core::client::News;
    use pool_core::events::{EventKind, SubscribeOptions};
    use pool_core::sim::World;
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    // A watcher of offers, whose queue (77) outlives the manager.
    let watcher = w.join("watcher", true);
    let offers = (
        EventKind::Offer.into(),
        pool_core::selector::Selector::all().expr().clone(),
        SubscribeOptions::default(),
    );
    w.timed(watcher, |k, now| k.subscribe(now, offers, 77, 1))
        .expect("subscribe");
    w.pump();
    w.offer(p, "read", &[5; 100], false);
    w.offer(p, "inline", b"small", true);
    // The consumer waits for a CDO nobody offers yet, and required another.
    let waits = w.declare(c, "later").expect("declare");
    w.timed(c, |k, now| k.demand(now, waits, 5))
        .expect("demand");
    let required = w.declare(c, "required-later").expect("declare");
    w.timed(c, |k, now| k.require(now, required, 6))
        .expect("require");
    w.pump();
    // What the manager confirmed comes before `replayed`, what it did not answer (the
    // demand waiting) after.
    assert_eq!(
        kinds(&w.core(p).replay()),
        [
            "declare", "seal", "offer", "declare", "seal", "offer", "replayed"
        ]
    );
    assert_eq!(
        kinds(&w.core(c).replay()),
        ["declare", "require", "replayed", "declare", "demand"]
    );
    assert_eq!(kinds(&w.core(watcher).replay()), ["subscribe", "replayed"]);
    let heard_before = w.apps[watcher].news[&77].len();
    assert_eq!(heard_before, 2, "the two offers");
    // The manager dies; another takes over with a grace period of 2 s.
    w.restart_manager(Duration::from_secs(2));
    assert_eq!(w.reclaim(p), Ok(1), "the producer's old id");
    assert_eq!(w.reclaim(c), Ok(2), "the consumer's old id");
    assert_eq!(w.reclaim(watcher), Ok(3), "the watcher's old id");
    // The grace period passes.
    let t0 = w.now;
    w.run_until(t0 + Duration::from_secs(2));
    // After it, a consumer that never knew the old manager gets the replayed offers.
    let newcomer = w.join("newcomer", true);
    for (name, want) in [("read", vec![5; 100]), ("inline", b"small".to_vec())] {
        let cdo = w.declare(newcomer, name).expect("declare");
        let tag = 100 + cdo as u32;
        w.timed(newcomer, |k, now| k.demand(now, cdo, tag))
            .expect("demand");
        w.pump();
        assert_eq!(w.answer(newcomer, tag), Some(&Ok(cdo)), "{name}");
        let (got, _) = w.client(newcomer).take_arrived(cdo).expect("arrived");
        assert_eq!(got, want, "{name}");
    }
    // The demand and the require that waited through the takeover are served as the
    // producer offers what they wait for, with the new manager.
    w.offer(p, "later", b"late", false);
    w.offer(p, "required-later", b"req", false);
    w.pump();
    // The watcher's subscription goes on in its queue: the two new offers, nothing twice.
    let news = &w.apps[watcher].news[&77];
    assert_eq!(news.len(), heard_before + 2, "{news:?}");
    assert!(
        matches!(&news[heard_before..], [News::Event(a), News::Event(b)] if a.cdo.as_deref() == Some("later") && b.cdo.as_deref() == Some("required-later")),
        "{news:?}"
    );
    assert_eq!(w.answer(c, 5), Some(&Ok(waits)));
    let (late, _) = w.client(c).take_arrived(waits).expect("arrived");
    assert_eq!(late, b"late");
    // The required bytes are here: the demand needs no manager.
    match w.timed(c, |k, now| k.demand(now, required, 7)) {
        Ok(pool_core::client::Demand::Here(bytes, _)) => assert_eq!(bytes, b"req"),
        Ok(pool_core::client::Demand::Waiting(_)) => panic!("the required bytes did not come"),
        Err(e) => panic!("{e}"),
    }
}

/// A world with a producer, a consumer and a watcher of offers (queue 77), `sub` the
/// watcher's subscription as the app knows it.
fn watched_world(
    options: pool_core::events::SubscribeOptions,
) -> (pool_core::sim::World, [usize; 3], u64) {
    use pool_core::events::EventKind;
    let mut w = pool_core::sim::World::new();
    let (p, c, watcher) = (
        w.join("producer", true),
        w.join("consumer", true),
        w.join("watcher", true),
    );
    let offers = (
        EventKind::Offer.into(),
        pool_core::selector::Selector::all().expr().clone(),
        options,
    );
    w.timed(watcher, |k, now| k.subscribe(now, offers, 77, 1))
        .expect("subscribe");
    w.pump();
    let Some(&Ok(sub)) = w.answer(watcher, 1) else {
        panic!("not subscribed: {:?}", w.answer(watcher, 1));
    };
    (w, [p, c, watcher], sub)
}

#[test]
fn calls_made_while_the_manager_is_gone_wait_and_the_next_one_answers_them() {
    let (mut w, [p, c, watcher], _) = watched_world(Default::default());
    // Bytes the consumer required came before the manager died.
    w.offer(p, "early", b"early", false);
    let early = w.declare(c, "early").expect("declare");
    w.timed(c, |k, now| k.require(now, early, 2))
        .expect("require");
    w.pump();
    let waits = w.declare(c, "x").expect("declare");
    w.timed(c, |k, now| k.demand(now, waits, 3))
        .expect("demand");
    w.pump();
    w.restart_manager(Duration::from_secs(2));
    let sent = (w.apps[p].sent.len(), w.apps[c].sent.len());
    // While no manager is there, the calls are taken and wait: nothing is sent.
    let (x, offered) = w.offer(p, "x", b"made while lost", false);
    let later = w.declare(c, "later").expect("declare");
    w.timed(c, |k, now| k.require(now, later, 4))
        .expect("require");
    w.pump();
    assert_eq!((w.apps[p].sent.len(), w.apps[c].sent.len()), sent);
    assert!(w.core(p).is_lost() && w.answer(p, offered).is_none());
    assert_eq!(w.answer(c, 3), None, "the demand waits");
    for app in [p, c, watcher] {
        w.reclaim(app).expect("reclaimed");
        assert!(!w.core(app).is_lost());
    }
    // The next manager answers what waited: the offer made meanwhile serves the demand
    // made before.
    assert_eq!(w.answer(p, offered), Some(&Ok(x)));
    assert_eq!(w.answer(c, 3), Some(&Ok(waits)));
    let (got, _) = w.client(c).take_arrived(waits).expect("arrived");
    assert_eq!(got, b"made while lost");
    // The watcher of offers heard of the offer made before once, and of the one made
    // while no manager ran once, from the manager that took over.
    let heard: Vec<_> = (w.apps[watcher].news[&77].iter())
        .filter_map(|n| match n {
            pool_core::client::News::Event(e) => e.cdo.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(heard, ["early", "x"]);
    // The bytes that came under the old manager are not sent again: their demand is
    // served here, and the next manager is not told of it.
    let before = w.apps[c].sent.len();
    match w.timed(c, |k, now| k.demand(now, early, 5)) {
        Ok(pool_core::client::Demand::Here(bytes, _)) => assert_eq!(bytes, b"early"),
        _ => panic!("the required bytes are not here"),
    }
    w.pump();
    assert_eq!(w.apps[c].sent.len(), before, "{:?}", &w.sent(c)[before..]);
    // The require made meanwhile is served by an offer after the grace period.
    let t0 = w.now;
    w.run_until(t0 + Duration::from_secs(2));
    w.offer(p, "later", b"later", false);
    w.pump();
    match w.timed(c, |k, now| k.demand(now, later, 6)) {
        Ok(pool_core::client::Demand::Here(bytes, _)) => assert_eq!(bytes, b"later"),
        _ => panic!("the require made while lost was not served"),
    }
}

#[test]
fn a_ticket_in_flight_when_the_manager_dies_is_demanded_again_and_its_late_end_is_ignored() {
    let (mut w, [p, c, _], _) = watched_world(Default::default());
    w.offer(p, "x", &[7; 64], false);
    let x = w.declare(c, "x").expect("declare");
    w.hold = true;
    w.timed(c, |k, now| k.demand(now, x, 3)).expect("demand");
    w.pump();
    let (_, old) = w.held.pop().expect("a ticket held");
    w.hold = false;
    w.restart_manager(Duration::from_secs(2));
    w.reclaim(p).expect("producer");
    w.reclaim(c).expect("consumer");
    assert_eq!(
        w.answer(c, 3),
        Some(&Ok(x)),
        "served again by the next manager"
    );
    // The old ticket ends late: it is not taken for anything (the sim would panic on a
    // second answer).
    w.client(c)
        .fetched(old.shard, old.transfer, Ok((vec![0; 64], None)));
    w.pump();
    let (got, _) = w.client(c).take_arrived(x).expect("arrived");
    assert_eq!(got, vec![7; 64]);
}

#[test]
fn a_subscriber_acknowledges_and_ends_its_subscription_by_the_id_it_knows_after_a_takeover() {
    use pool_core::client::News;
    let options = pool_core::events::SubscribeOptions {
        require_ack: true,
        ..Default::default()
    };
    let (mut w, [p, _, watcher], sub) = watched_world(options);
    w.restart_manager(Duration::from_secs(1));
    for app in [p, watcher] {
        w.reclaim(app).expect("reclaimed");
    }
    let t0 = w.now;
    w.run_until(t0 + Duration::from_secs(1));
    // An offer after the grace period waits for the watcher's acknowledgement.
    let (x, offered) = w.offer(p, "x", b"x", false);
    w.pump();
    assert_eq!(w.answer(p, offered), None, "waits for the ack");
    let serial = match w.apps[watcher].news[&77].last() {
        Some(News::Event(e)) => e.serial,
        other => panic!("no event: {other:?}"),
    };
    w.core(watcher)
        .ack(sub, serial)
        .expect("ack by the first id");
    w.pump();
    assert_eq!(w.answer(p, offered), Some(&Ok(x)));
    // Unsubscribed by the id the app knows, it hears nothing more.
    w.timed(watcher, |k, now| k.unsubscribe(now, sub, 9))
        .expect("unsubscribe");
    w.pump();
    assert!(matches!(w.answer(watcher, 9), Some(Ok(_))));
    let heard = w.apps[watcher].news[&77].len();
    let (y, offered) = w.offer(p, "y", b"y", false);
    w.pump();
    assert_eq!(w.answer(p, offered), Some(&Ok(y)));
    assert_eq!(w.apps[watcher].news[&77].len(), heard);
}

#[test]
fn an_app_too_late_for_the_grace_period_stays_lost_then_closes_at_its_reclaim_timeout() {
    let (mut w, [p, c, _], _) = watched_world(Default::default());
    let x = w.declare(c, "x").expect("declare");
    w.timed(c, |k, now| k.demand(now, x, 3)).expect("demand");
    w.pump();
    w.restart_manager(Duration::from_secs(1));
    w.reclaim(p).expect("in time");
    let t0 = w.now;
    w.run_until(t0 + Duration::from_secs(2));
    let refused = w.reclaim(c);
    assert!(
        matches!(
            &refused,
            Err(pool_core::client::CallError::Refused {
                why: Refusal::NotReclaimed(_),
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(w.core(c).is_lost() && !w.core(c).is_closed());
    w.run_until(t0 + pool_core::sim::RECLAIM_TIMEOUT);
    assert!(w.core(c).is_closed(), "closed at its reclaim timeout");
    assert!(!matches!(w.answer(c, 3), Some(Ok(_))));
    let declared = w.declare(c, "y");
    assert!(matches!(
        declared,
        Err(pool_core::client::CallError::Closed)
    ));
}

#[test]
fn an_app_whose_reclaim_connection_dies_reclaims_its_id_on_the_next() {
    let mut pm = Pm::new();
    pm.m.reclaiming(pm.at(1_000_000_000));
    let (first, _) = pm.join_with("producer", |j| j.reclaim = reclaim(4));
    let old = *cdo_ids(4).start();
    let out = pm.feed(
        first,
        ToPm::Declare {
            cdo: old,
            name: "half-replayed".into(),
        },
    );
    assert!(out.is_empty());
    pm.m.disconnected(pm.at(2), first);
    let (second, _) = pm.join_with("producer", |j| j.reclaim = reclaim(4));
    assert_eq!(pm.apps[&second].0, 4, "the id is free again");
    assert_eq!(
        pm.seal(second, old),
        [(second, refused(Op::Seal, Some(old), Refusal::UnknownCdo))],
        "the dead connection's declare went with it"
    );
}

#[test]
fn a_manager_that_knows_the_apps_ends_its_grace_when_they_are_back_and_says_who_is_not() {
    use pool_core::client::News;
    use pool_core::events::EventKind;
    let mut w = pool_core::sim::World::new();
    let (p, c, gone) = (
        w.join("producer", true),
        w.join("consumer", true),
        w.join("gone", true),
    );
    let failovers = (
        EventKind::PmFailover.into(),
        pool_core::selector::Selector::all().expr().clone(),
        pool_core::events::SubscribeOptions::default(),
    );
    w.timed(c, |k, now| k.subscribe(now, failovers, 5, 1))
        .expect("subscribe");
    w.pump();
    let expected = |apps: &[(u64, &str)]| -> Vec<(u64, String)> {
        apps.iter().map(|&(id, l)| (id, l.to_string())).collect()
    };
    // The third app dies with the manager: the period runs to its end, then the
    // subscribers hear who came back and who did not.
    w.restart_manager(Duration::from_secs(60));
    w.manager().expecting(expected(&[
        (1, "producer:0"),
        (2, "consumer:0"),
        (3, "gone:0"),
    ]));
    w.apps[gone].core.close(0);
    w.reclaim(p).expect("producer");
    w.reclaim(c).expect("consumer");
    assert!(w.manager().in_grace(), "waits for the third");
    let t0 = w.now;
    w.run_until(t0 + Duration::from_secs(60));
    assert!(!w.manager().in_grace());
    let told: Vec<_> = (w.apps[c].news[&5].iter())
        .filter_map(|n| match n {
            News::Event(e) if e.kind == EventKind::PmFailover => Some(e.detail.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("2 apps reclaimed")
            && told[0].contains("not back")
            && told[0].contains("gone:0"),
        "{}",
        told[0]
    );
    // A second takeover, every app it expects back: its grace ends as the last replayed,
    // once its shortest length passed.
    w.restart_manager(Duration::from_secs(60));
    w.manager()
        .expecting(expected(&[(1, "producer:0"), (2, "consumer:0")]));
    w.reclaim(p).expect("producer");
    let t1 = w.now;
    w.run_until(t1 + pool_core::MIN_GRACE);
    assert!(w.manager().in_grace(), "one app is still missing");
    w.reclaim(c).expect("consumer");
    assert!(!w.manager().in_grace(), "every app expected is back");
    let last = match w.apps[c].news[&5].last() {
        Some(News::Event(e)) => e.detail.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        last.contains("2 apps reclaimed") && !last.contains("not back"),
        "{last}"
    );
}

#[test]
fn a_leave_under_way_when_the_manager_dies_is_answered_by_the_next() {
    let (mut w, [p, c, _], _) = watched_world(Default::default());
    w.offer(p, "x", b"x", false);
    w.pump();
    // The producer leaves; the manager dies before it answers.
    w.timed(p, |k, now| k.leave(now, 9)).expect("leave");
    w.restart_manager(Duration::from_secs(1));
    assert!(
        w.core(p).is_lost(),
        "a leave under way is reclaimed, not given up"
    );
    w.reclaim(c).expect("consumer");
    w.reclaim(p).expect("producer");
    assert_eq!(w.answer(p, 9), Some(&Ok(0)), "the next manager said BYE");
}

/// Offers the members `names` (64 bytes each, read by RMA) and the group `group` listing
/// them, from `app`.
fn offer_group(w: &mut pool_core::sim::World, app: usize, group: &str, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        w.offer(app, name, &[i as u8; 64], false);
    }
    let attributes = pool_core::attr::group_attributes(names);
    w.offer_sealed(app, group, (&[], true), attributes);
    w.pump();
}

#[test]
fn groups_demanded_through_a_takeover_arrive_whole() {
    let (mut w, [p, c, _], _) = watched_world(Default::default());
    // One group is named and its members' bytes are on their way when the manager dies;
    // another is demanded before anyone offers it.
    offer_group(&mut w, p, "now", &["now/a", "now/b"]);
    let named = w.declare(c, "now").expect("declare");
    w.hold = true;
    w.timed(c, |k, now| k.demand_group(now, named, 21))
        .expect("demand group");
    w.pump();
    assert_eq!(w.held.len(), 2, "both members ticketed");
    let later = w.declare(c, "later").expect("declare");
    w.timed(c, |k, now| k.demand_group(now, later, 22))
        .expect("demand group");
    w.pump();
    w.held.clear();
    w.hold = false;
    w.restart_manager(Duration::from_secs(1));
    w.reclaim(p).expect("producer");
    w.reclaim(c).expect("consumer");
    assert_eq!(
        w.answer(c, 21),
        Some(&Ok(named)),
        "the named group's members came again"
    );
    let here = w.client(c).take_group(named).expect("members");
    assert_eq!(here.members.len(), 2);
    assert_eq!(here.members[1].data, vec![1; 64]);
    offer_group(&mut w, p, "later", &["later/a"]);
    assert_eq!(
        w.answer(c, 22),
        Some(&Ok(later)),
        "the group demanded early is served"
    );
    let here = w.client(c).take_group(later).expect("members");
    assert_eq!(here.members[0].name, "later/a");
}

/// An archiver's subscription (told before each offer takes effect, which waits for its
/// ack) and an offer of `x` it heard and holds, when the manager dies; the watcher has
/// acknowledged it meanwhile, as apps do. The world, the producer and watcher, the
/// offer's CDO and tag, and the serials of the events of `x` the watcher heard.
fn offer_held_through_a_takeover() -> (pool_core::sim::World, [usize; 2], (u64, u32)) {
    let options = pool_core::events::SubscribeOptions {
        signal_before: true,
        require_ack: true,
        ..Default::default()
    };
    let (mut w, [p, _, watcher], sub) = watched_world(options);
    let (x, offered) = w.offer(p, "x", b"x", false);
    w.pump();
    assert_eq!(w.answer(p, offered), None, "held for the watcher's ack");
    let first = heard_of_x(&w, watcher)[0];
    w.restart_manager(Duration::from_secs(1));
    w.client(watcher).ack(sub, first).expect("ack");
    (w, [p, watcher], (x, offered))
}

/// The serials of the events of `x` app `watcher` heard (queue 77).
fn heard_of_x(w: &pool_core::sim::World, watcher: usize) -> Vec<u64> {
    (w.apps[watcher].news[&77].iter())
        .filter_map(|n| match n {
            pool_core::client::News::Event(e) if e.cdo.as_deref() == Some("x") => Some(e.serial),
            _ => None,
        })
        .collect()
}

#[test]
fn an_operation_held_for_an_ack_when_the_manager_dies_is_not_held_again_by_its_echo() {
    let (mut w, [p, watcher], (x, offered)) = offer_held_through_a_takeover();
    w.reclaim(watcher).expect("watcher");
    // The producer's offer was never answered: it is announced again, and its echo is
    // acknowledged for the watcher, which heard it once.
    w.reclaim(p).expect("producer");
    assert_eq!(w.answer(p, offered), Some(&Ok(x)), "not held again");
    assert_eq!(heard_of_x(&w, watcher).len(), 1, "heard once");
}

#[test]
fn a_signal_before_subscriber_asked_again_late_hears_an_offer_it_heard_before_once() {
    let (mut w, [p, watcher], (x, offered)) = offer_held_through_a_takeover();
    // The producer comes back first: its offer, never answered, is announced to nobody
    // and kept for the grace period; the watcher, asked again later, hears it after the
    // fact: the echo of what it heard before.
    w.reclaim(p).expect("producer");
    assert_eq!(w.answer(p, offered), Some(&Ok(x)));
    w.reclaim(watcher).expect("watcher");
    assert_eq!(heard_of_x(&w, watcher).len(), 1, "heard once");
}

/// A pool whose manager keeps files in `/gfs/pm-1`, and a producer that offered `field`
/// (`forty-two`) written to the global file system: the world, the producer, the CDO.
fn offered_to_gfs() -> (pool_core::sim::World, usize, u64) {
    let mut w = pool_core::sim::World::new();
    w.manager().set_keep_dir(Some("/gfs/pm-1"));
    let p = w.join_with_gfs_only("producer", "node1");
    let (cdo, _) = w.offer_to_gfs(p, "field", b"forty-two");
    w.pump();
    (w, p, cdo)
}

/// Producer `p` withdraws `cdo` (its answer under tag 7), handing its file over.
fn withdraw_handing_over(w: &mut pool_core::sim::World, p: usize, cdo: u64) {
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    w.pump();
}

/// The manager dies; the next keeps files in `/gfs/pm-2`, and producer `p` reclaims its
/// state there.
fn taken_over_keeping_in_pm_2(w: &mut pool_core::sim::World, p: usize) {
    w.restart_manager(Duration::from_secs(1));
    w.manager().set_keep_dir(Some("/gfs/pm-2"));
    w.reclaim(p).expect("reclaimed");
}

/// Producer `p` leaves; after the grace period a consumer on another host gets `field`
/// from the pool.
fn kept_after_its_producer_left(w: &mut pool_core::sim::World, p: usize) {
    w.timed(p, |k, now| k.leave(now, 8)).expect("leave");
    w.pump();
    let t0 = w.now;
    w.run_until(t0 + Duration::from_secs(1));
    assert_eq!(demanded(w, "node2", "field"), b"forty-two");
}

#[test]
fn a_file_handed_over_as_the_manager_died_is_handed_over_to_the_next_and_outlives_its_producer() {
    let (mut w, p, cdo) = offered_to_gfs();
    // The manager dies as the file is being linked into its directory.
    w.linking = Some(Vec::new());
    withdraw_handing_over(&mut w, p, cdo);
    taken_over_keeping_in_pm_2(&mut w, p);
    // Welcomed back, the producer links its file into the next manager's directory;
    // the link into the one of the manager that is gone ends late: it is not the
    // hand-over the withdraw waits for now.
    let links = w.linking.take().expect("linking");
    let dirs: Vec<&str> = links.iter().map(|(_, _, d)| &**d).collect();
    assert_eq!(dirs, ["/gfs/pm-1", "/gfs/pm-2"]);
    for (app, cdo, dir) in links {
        w.link(app, cdo, &dir);
    }
    w.pump();
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    assert_eq!(withdraws(&w, p), [Some(format!("/gfs/pm-2/{cdo}"))]);
    // The producer leaves; after the grace period a consumer gets the bytes from the
    // pool, out of the next manager's directory.
    kept_after_its_producer_left(&mut w, p);
    assert!(
        matches!(w.apps.last().and_then(|c| c.tickets.last()),
            Some(pool_core::proto::Source::Gfs { file, .. }) if file.path.starts_with("/gfs/pm-2/")),
        "read from the kept file"
    );
}

#[test]
fn a_file_handed_over_but_not_yet_described_when_the_manager_dies_is_handed_over_to_the_next() {
    let (mut w, p, cdo) = offered_to_gfs();
    // Linked and handed over; the manager dies before its description is written
    // (what a manager taking over adopts): the producer was not told it is kept.
    w.describing = Some(Vec::new());
    withdraw_handing_over(&mut w, p, cdo);
    assert_eq!(withdraws(&w, p), [Some(format!("/gfs/pm-1/{cdo}"))]);
    assert_eq!(w.answer(p, 7), None, "answered once described");
    w.describing = None;
    taken_over_keeping_in_pm_2(&mut w, p);
    // Handed over again, to the next manager, which describes it and answers.
    assert_eq!(
        withdraws(&w, p).last(),
        Some(&Some(format!("/gfs/pm-2/{cdo}")))
    );
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    kept_after_its_producer_left(&mut w, p);
}

#[test]
fn a_file_the_check_refuses_ends_the_withdraw_without_it_and_the_producer_hears_why() {
    let (mut w, p, cdo) = offered_to_gfs();
    w.describing = Some(Vec::new());
    withdraw_handing_over(&mut w, p, cdo);
    assert_eq!(w.answer(p, 7), None, "held for the check");
    w.describe(Err("it has another name"));
    // Refused saying why; the producer's core withdraws again without the file, and
    // that withdraw is done at once (the offer is withdrawn already).
    assert_eq!(withdraws(&w, p), [Some(format!("/gfs/pm-1/{cdo}")), None]);
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    // Nothing is offered under the name any more.
    let c = w.join_with_gfs_only("consumer", "node2");
    let want = w.core(c).declare("field").expect("declare");
    w.timed(c, |k, now| k.require(now, want, 9))
        .expect("require");
    w.pump();
    assert_eq!(w.answer(c, 9), Some(&Ok(want)), "required");
    assert!(w.apps[c].tickets.is_empty(), "{:?}", w.apps[c].tickets);
}

support::at_three_shards!(
    a_file_handed_over_but_not_yet_described_when_the_manager_dies_is_handed_over_to_the_next,
    a_file_the_check_refuses_ends_the_withdraw_without_it_and_the_producer_hears_why,
    calls_made_while_the_manager_is_gone_wait_and_the_next_one_answers_them,
    an_app_too_late_for_the_grace_period_stays_lost_then_closes_at_its_reclaim_timeout,
    a_ticket_in_flight_when_the_manager_dies_is_demanded_again_and_its_late_end_is_ignored,
    a_subscriber_acknowledges_and_ends_its_subscription_by_the_id_it_knows_after_a_takeover,
    a_leave_under_way_when_the_manager_dies_is_answered_by_the_next,
    a_file_handed_over_as_the_manager_died_is_handed_over_to_the_next_and_outlives_its_producer,
    groups_demanded_through_a_takeover_arrive_whole,
);
