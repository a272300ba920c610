//! The manager's subscriptions and events, in memory: selectors, signal-before and
//! acknowledgements, holds and their deadlines, app and transport events, seal-and-offer
//! with subscribers.

mod support;

use pool_core::ConnId;
use pool_core::attr::{AttrValue, Attributes, LOCAL_SIZE};
use pool_core::auth::prove;
use pool_core::events::{EVENT_WINDOW, EventKind, EventKinds, SubscribeOptions, TAKEN_REPORT};
use pool_core::proto::{AppId, FromPm, OfferExtras, Op, Refusal, ToPm};
use pool_core::selector::{Expr, Selector};
use std::time::Duration;
use support::*;

#[test]
fn a_selector_subscription_sees_exactly_the_matching_offers() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("tracer");
    let sub = pm.subscribe(
        s,
        EventKind::Offer,
        "(step = 2)",
        SubscribeOptions::default(),
    );
    let (p, producer) = pm.join("producer");
    pm.now = pm.at(1_000);
    let two = pm.sealed(p, "field-2", 2);
    let three = pm.sealed(p, "field-3", 3);
    let out = pm.feed(p, offer_msg(two, 64));
    assert_eq!(out[0], (p, done(Op::Offer, two)));
    let seen = events_to(&out, s);
    assert_eq!(seen.len(), 1, "{out:?}");
    let e = &seen[0];
    assert_eq!(
        (e.kind, e.before, e.needs_ack, e.app, e.time),
        (EventKind::Offer, false, false, producer, 1_000)
    );
    assert_eq!(
        (e.component.as_str(), e.cdo.as_deref()),
        ("producer", Some("field-2"))
    );
    assert_eq!(e.attributes.get(LOCAL_SIZE), Some(&AttrValue::Uint(64)));
    assert!(
        out.iter()
            .any(|(_, m)| matches!(m, FromPm::Event { sub: x, .. } if *x == sub)),
        "events name their subscription"
    );
    let out = pm.feed(p, offer_msg(three, 64));
    assert!(
        events_to(&out, s).is_empty(),
        "step 3 does not match: {out:?}"
    );
    // Declares and seals are other kinds: not delivered.
    pm.sealed(p, "field-4", 2);
    assert!(pm.drain().is_empty());
    // Refused operations raise no event.
    let out = pm.feed(p, offer_msg(two, 64));
    assert_eq!(
        out,
        [(
            p,
            refused(Op::Offer, Some(two), wrong(Op::Offer, "offered"))
        )]
    );
}

#[test]
fn signal_before_with_ack_holds_the_offer_and_what_follows() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("archiver");
    let opts = SubscribeOptions {
        signal_before: true,
        require_ack: true,
        no_local: false,
        replay: false,
    };
    let sub = pm.subscribe(s, EventKind::Offer, "", opts);
    let (p, _) = pm.join("producer");
    let cdo = pm.sealed(p, "field", 1);
    let out = pm.feed(p, offer_msg(cdo, 8));
    let seen = events_to(&out, s);
    assert_eq!(out.len(), 1, "only the subscriber hears of it: {out:?}");
    assert!(seen[0].before && seen[0].needs_ack);
    assert_eq!(pm.m.held_count(), 1);
    // The archiver requires the CDO before acknowledging: the offer has not happened yet.
    let mine = pm.declare(s, "field");
    assert_eq!(
        pm.feed(s, ToPm::Require { cdo: mine }),
        [(s, done(Op::Require, mine))]
    );
    // The producer's next operation waits behind the held one.
    assert!(pm.feed(p, ToPm::Withdraw { cdo, keep: None }).is_empty());
    let out = pm.feed(
        s,
        ToPm::Ack {
            sub,
            serial: seen[0].serial,
        },
    );
    assert_eq!(out[0], (p, done(Op::Offer, cdo)), "{out:?}");
    let (to, transfer, _, _) = ticket_of(&out);
    assert_eq!(to, s, "the archiver's require is served at once");
    assert_eq!(pm.m.held_count(), 0);
    // The queued withdraw ran and waits for the archiver's transfer.
    assert!(!out.iter().any(|(_, m)| matches!(
        m,
        FromPm::Done {
            op: Op::Withdraw,
            ..
        }
    )));
    let out = pm.feed(s, transferred(transfer));
    assert!(out.contains(&(p, done(Op::Withdraw, cdo))), "{out:?}");
}

#[test]
fn require_ack_after_the_fact_withholds_the_completion() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("librarian");
    let opts = SubscribeOptions {
        require_ack: true,
        ..SubscribeOptions::default()
    };
    let sub = pm.subscribe(s, EventKind::Require | EventKind::Declare, "", opts);
    let (c, _) = pm.join("consumer");
    let cdo = pm.next_cdo(c);
    let out = pm.feed(
        c,
        ToPm::Declare {
            cdo,
            name: "x".into(),
        },
    );
    let declared = events_to(&out, s);
    assert_eq!(out.len(), 1, "a declare has no answer: {out:?}");
    assert!(!declared[0].before && declared[0].needs_ack);
    assert_eq!(declared[0].cdo.as_deref(), Some("x"));
    // The app's next operation waits behind the held declare.
    assert!(pm.feed(c, ToPm::Require { cdo }).is_empty());
    assert_eq!(pm.m.held_count(), 1);
    let out = pm.feed(
        s,
        ToPm::Ack {
            sub,
            serial: declared[0].serial,
        },
    );
    let required = events_to(&out, s);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(required[0].kind, EventKind::Require);
    // An ack from an app that does not own the subscription, or for another serial, does
    // not release it.
    let out = pm.feed(
        c,
        ToPm::Ack {
            sub,
            serial: required[0].serial,
        },
    );
    assert_eq!(
        out,
        [(c, refused(Op::Ack, Some(sub), Refusal::UnknownSubscription))]
    );
    assert!(pm.feed(s, ToPm::Ack { sub, serial: 999 }).is_empty());
    let out = pm.feed(
        s,
        ToPm::Ack {
            sub,
            serial: required[0].serial,
        },
    );
    assert_eq!(out, [(c, done(Op::Require, cdo))]);
}

#[test]
fn an_app_acknowledges_events_of_its_own_operations() {
    // One app (threads of a program sharing its client) subscribes to its own offers with
    // require-ack: the event reaches it at once, the offer's completion waits for its ack.
    let mut pm = Pm::new();
    let (s, _) = pm.join("threads");
    let opts = SubscribeOptions {
        require_ack: true,
        ..SubscribeOptions::default()
    };
    let sub = pm.subscribe(s, EventKind::Offer, "", opts);
    let cdo = pm.sealed(s, "own", 2);
    let out = pm.feed(s, offer_msg(cdo, 8));
    let events = events_to(&out, s);
    assert_eq!(events.len(), 1, "{out:?}");
    assert!(events[0].needs_ack);
    assert!(
        !out.contains(&(s, done(Op::Offer, cdo))),
        "the completion waits: {out:?}"
    );
    let serial = events[0].serial;
    assert_eq!(
        pm.feed(s, ToPm::Ack { sub, serial }),
        [(s, done(Op::Offer, cdo))]
    );
}

#[test]
fn an_ack_that_never_comes_times_out_and_the_subscriber_is_told() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("slow");
    let opts = SubscribeOptions {
        signal_before: true,
        require_ack: true,
        no_local: false,
        replay: false,
    };
    let sub = pm.subscribe(s, EventKind::Offer, "", opts);
    pm.m.set_ack_timeout(Duration::from_secs(1));
    pm.now = pm.at(0);
    assert_eq!(pm.m.poll_timeout(), None, "nothing held, no timer");
    let (p, _) = pm.join("producer");
    let cdo = pm.sealed(p, "field", 1);
    let serial = events_to(&pm.feed(p, offer_msg(cdo, 8)), s)[0].serial;
    assert_eq!(pm.m.poll_timeout(), Some(pm.at(1_000_000_000)));
    pm.m.handle_timeout(pm.at(500_000_000));
    assert!(pm.drain().is_empty(), "still waiting within the timeout");
    pm.m.handle_timeout(pm.at(1_000_000_001));
    let out = pm.drain();
    assert!(
        out.contains(&(s, FromPm::AckTooLate { sub, serial })),
        "{out:?}"
    );
    assert!(out.contains(&(p, done(Op::Offer, cdo))), "{out:?}");
    assert_eq!(pm.m.held_count(), 0);
    // The late subscriber lost its subscription: its ack is refused, and the next offer
    // is not held for it.
    assert_eq!(
        pm.feed(s, ToPm::Ack { sub, serial }),
        [(s, refused(Op::Ack, Some(sub), Refusal::UnknownSubscription))]
    );
    let next = pm.sealed(p, "field-2", 1);
    assert_eq!(pm.feed(p, offer_msg(next, 8)), [(p, done(Op::Offer, next))]);
}

#[test]
fn a_subscriber_that_goes_releases_what_waits_for_it() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("dies");
    let (s2, _) = pm.join("unsubscribes");
    let opts = SubscribeOptions {
        signal_before: true,
        require_ack: true,
        no_local: false,
        replay: false,
    };
    pm.subscribe(s, EventKind::Offer, "", opts);
    let sub2 = pm.subscribe(s2, EventKind::Offer, "", opts);
    let (p, _) = pm.join("producer");
    let cdo = pm.sealed(p, "field", 1);
    let out = pm.feed(p, offer_msg(cdo, 8));
    assert_eq!(
        (events_to(&out, s).len(), events_to(&out, s2).len()),
        (1, 1)
    );
    pm.m.disconnected(pm.now, s);
    assert!(
        !pm.drain().iter().any(|(c, _)| *c == p),
        "the other subscriber still holds it"
    );
    let out = pm.feed(s2, ToPm::Unsubscribe { sub: sub2 });
    assert!(out.contains(&(s2, done(Op::Unsubscribe, sub2))), "{out:?}");
    assert!(out.contains(&(p, done(Op::Offer, cdo))), "{out:?}");
    let out = pm.feed(s2, ToPm::Unsubscribe { sub: sub2 });
    assert_eq!(
        out,
        [(
            s2,
            refused(Op::Unsubscribe, Some(sub2), Refusal::UnknownSubscription)
        )]
    );
}

#[test]
fn app_and_transport_events_and_no_local() {
    let mut pm = Pm::new();
    let (s, me) = pm.join("tracer");
    let opts = SubscribeOptions {
        no_local: true,
        ..SubscribeOptions::default()
    };
    let kinds = [
        EventKind::AppJoin,
        EventKind::AppLeave,
        EventKind::Offer,
        EventKind::TransportStarted,
        EventKind::TransportCompleted,
        EventKind::Fabric,
    ];
    pm.subscribe(s, kinds.into_iter().collect::<EventKinds>(), "", opts);
    // Its own offers are left out.
    let own = pm.sealed(s, "own", 1);
    assert!(events_to(&pm.feed(s, offer_msg(own, 1)), s).is_empty());
    let (p, producer) = pm.join("producer");
    let (c, consumer) = pm.join("consumer");
    let cdo = pm.sealed(p, "field", 1);
    let out = pm.feed(p, offer_msg(cdo, 16));
    assert_eq!(events_to(&out, s)[0].app, producer);
    let want = pm.declare(c, "field");
    let out = pm.feed(c, ToPm::Demand { cdo: want });
    let started = events_to(&out, s);
    assert_eq!(started[0].kind, EventKind::TransportStarted);
    assert_eq!(
        (started[0].app, started[0].cdo.as_deref()),
        (consumer, Some("field"))
    );
    assert!(started[0].detail.contains("rma"), "{:?}", started[0].detail);
    let (_, transfer, _, _) = ticket_of(&out);
    let out = pm.feed(c, transferred(transfer));
    assert_eq!(events_to(&out, s)[0].kind, EventKind::TransportCompleted);
    pm.m.disconnected(pm.now, p);
    let left = events_to(&pm.drain(), s);
    assert_eq!((left[0].kind, left[0].app), (EventKind::AppLeave, producer));
    assert!(
        left[0].detail.contains("connection lost"),
        "{:?}",
        left[0].detail
    );
    assert_eq!(left[0].component, "producer");
    pm.m.fabric_event(pm.now, "link eth1 down");
    let fabric = events_to(&pm.drain(), s);
    assert_eq!((fabric[0].kind, fabric[0].app), (EventKind::Fabric, 0));
    assert_ne!(me, 0);
}

#[test]
fn app_join_events_name_the_app() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("tracer");
    pm.subscribe(s, EventKind::AppJoin, "", SubscribeOptions::default());
    let (conn, nonce) = pm.connect();
    let proof = prove(SECRET, &nonce, "wf", "newcomer", 0);
    let out = pm.feed(conn, join_msg("newcomer", &proof));
    let e = &events_to(&out, s)[0];
    assert_eq!(
        (e.kind, e.component.as_str()),
        (EventKind::AppJoin, "newcomer")
    );
}

#[test]
fn an_app_join_subscription_first_hears_of_the_apps_joined_before() {
    let mut pm = Pm::new();
    let (_, early) = pm.join("early");
    let (_, second) = pm.join("second");
    let (s, me) = pm.join("tool");
    let msg = ToPm::Subscribe {
        local: 5,
        kinds: EventKinds::from(EventKind::AppJoin),
        selector: Box::new(Selector::all().expr().clone()),
        options: SubscribeOptions::default(),
    };
    let out = pm.feed(s, msg);
    assert!(
        matches!(out[0], (c, FromPm::Subscribed { .. }) if c == s),
        "{out:?}"
    );
    let caught_up: Vec<(AppId, String, String)> = events_to(&out, s)
        .into_iter()
        .map(|e| (e.app, e.component, e.detail))
        .collect();
    let before = "joined before this subscription".to_string();
    assert_eq!(
        caught_up,
        [
            (early, "early".to_string(), before.clone()),
            (second, "second".to_string(), before)
        ],
        "the others, oldest first, not the subscriber itself ({me})"
    );
    // Later joins are live events as before.
    let (conn, nonce) = pm.connect();
    let proof = prove(SECRET, &nonce, "wf", "late", 0);
    let e = &events_to(&pm.feed(conn, join_msg("late", &proof)), s)[0];
    assert_eq!(
        (e.component.as_str(), e.detail.as_str()),
        ("late", "joined")
    );
}

#[test]
fn bad_selectors_are_refused_with_the_reason() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("tracer");
    let mut deep = Expr::Has(".a".into());
    for _ in 0..40 {
        deep = Expr::Not(Box::new(deep));
    }
    let out = pm.feed(
        s,
        ToPm::Subscribe {
            local: 9,
            kinds: EventKinds::all(),
            selector: Box::new(deep),
            options: SubscribeOptions::default(),
        },
    );
    assert!(
        matches!(&out[..], [(_, FromPm::Refused { op: Op::Subscribe, cdo: Some(9), why: Refusal::BadSelector(why) })] if why.contains("levels")),
        "{out:?}"
    );
    let bad_regex = Expr::Match {
        key: ".a".into(),
        pattern: "(".into(),
    };
    let out = pm.feed(
        s,
        ToPm::Subscribe {
            local: 9,
            kinds: EventKinds::all(),
            selector: Box::new(bad_regex),
            options: SubscribeOptions::default(),
        },
    );
    assert!(
        matches!(&out[..], [(_, FromPm::Refused { why: Refusal::BadSelector(why), .. })] if why.contains("regular expression")),
        "{out:?}"
    );
}

#[test]
fn seal_offer_is_one_message_and_one_answer_or_two_operations_for_subscribers() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let attrs = || Attributes::from([(".user.step".to_string(), AttrValue::Int(7))]);
    let seal_offer = |cdo| ToPm::SealOffer {
        cdo,
        attributes: attrs(),
        region: region(16),
        extras: OfferExtras::default(),
    };
    // Without subscribers: one answer, as the offer.
    let cdo = pm.declare(p, "fast");
    assert_eq!(pm.feed(p, seal_offer(cdo)), [(p, done(Op::Offer, cdo))]);
    // Refused as an offer when the CDO is not just declared, or not the app's.
    assert_eq!(
        pm.feed(p, seal_offer(cdo)),
        [(
            p,
            refused(Op::Offer, Some(cdo), wrong(Op::Offer, "offered"))
        )]
    );
    let (other, _) = pm.join("other");
    assert_eq!(
        pm.feed(other, seal_offer(cdo)),
        [(other, refused(Op::Offer, Some(cdo), Refusal::UnknownCdo))]
    );
    // Consumers get the sealed attributes.
    let (c, _) = pm.join("consumer");
    let want = pm.declare(c, "fast");
    let out = pm.feed(c, ToPm::Demand { cdo: want });
    let attributes = out
        .iter()
        .find_map(|(_, m)| match m {
            FromPm::Ticket { attributes, .. } => Some(attributes.clone()),
            _ => None,
        })
        .expect("ticket");
    assert_eq!(attributes.get(".user.step"), Some(&AttrValue::Int(7)));
    // With subscribers: both operations, each with its event (and the seal's answer).
    let (s, _) = pm.join("tracer");
    pm.subscribe(
        s,
        EventKind::Seal | EventKind::Offer,
        "",
        SubscribeOptions::default(),
    );
    let cdo = pm.declare(p, "watched");
    let out = pm.feed(p, seal_offer(cdo));
    let kinds: Vec<EventKind> = events_to(&out, s).iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Seal, EventKind::Offer]);
    assert!(out.contains(&(p, done(Op::Seal, cdo))), "{out:?}");
    assert!(out.contains(&(p, done(Op::Offer, cdo))), "{out:?}");
}

/// The names of the events `out` sends to `conn`, and whether each came with its lease.
fn offers_told(out: &[(ConnId, FromPm)], conn: ConnId) -> Vec<(String, bool)> {
    (out.iter())
        .filter(|(c, _)| *c == conn)
        .filter_map(|(_, m)| match m {
            FromPm::Event { event, lease, .. } => {
                Some((event.cdo.clone().expect("an offer's name"), lease.is_some()))
            }
            _ => None,
        })
        .collect()
}

/// A subscription is sent a window of events ahead of what its app took; the rest wait
/// at the PM, in order, their leases with them, and go as the app reports it took more.
#[test]
fn events_past_a_subscriptions_window_wait_until_its_app_takes_some_and_go_in_order() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("consumer");
    let sub = pm.subscribe(s, EventKind::Offer, "", SubscribeOptions::default());
    let (p, _) = pm.join("producer");
    let window = EVENT_WINDOW as usize;
    let total = window + TAKEN_REPORT as usize + 100;
    let mut told = Vec::new();
    for i in 0..total {
        let (_, out) = pm.offer(p, &format!("cdo-{i}"), 64);
        told.extend(offers_told(&out, s));
    }
    assert_eq!(told.len(), window, "a window's worth, then nothing");
    assert!(
        told.iter().all(|&(_, leased)| leased),
        "each after its lease"
    );
    // Another app's report for the subscription is ignored.
    assert!(pm.feed(p, ToPm::Taken { sub, count: 5000 }).is_empty());
    // A report's worth taken: as many more go, each after its lease.
    let out = pm.feed(
        s,
        ToPm::Taken {
            sub,
            count: TAKEN_REPORT,
        },
    );
    let next = offers_told(&out, s);
    assert_eq!(next.len(), TAKEN_REPORT as usize, "{out:?}");
    assert!(next.iter().all(|&(_, leased)| leased));
    told.extend(next);
    // The rest once the app took enough; new events then go as they come.
    let out = pm.feed(
        s,
        ToPm::Taken {
            sub,
            count: EVENT_WINDOW,
        },
    );
    told.extend(offers_told(&out, s));
    let (_, out) = pm.offer(p, "late", 64);
    told.extend(offers_told(&out, s));
    let names: Vec<String> = told.into_iter().map(|(name, _)| name).collect();
    let want: Vec<String> = (0..total)
        .map(|i| format!("cdo-{i}"))
        .chain(["late".to_string()])
        .collect();
    assert_eq!(names, want, "every event once, in order");
}
