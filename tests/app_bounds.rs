//! What one app may make the pool manager do to the others, with a real PM and real
//! clients: names owned by a component cannot be hijacked, a consumer that pins an offer
//! cannot hold its withdraw forever, a subscriber that never acknowledges holds one
//! operation once, quotas bound what one app makes the PM hold, apps cannot forge fabric
//! events.

mod common;

use pool::CallError;
use std::time::{Duration, Instant};

use common::apps::{buffer, client, honest_round_trip, info, raw};
use common::{rss_kib, start_pm};
use pool::ClientError;
use pool::attr::{self, AttrValue, Attributes};
use pool::events::{EventKind, FabricChange, SubscribeOptions};
use pool::proto::{FromPm, Op, Refusal, ToPm, cdo_ids};
use pool::selector::Expr;

#[test]
fn owned_names_cannot_be_hijacked_and_consumers_know_their_provider() {
    let (_pm, text) = start_pm("sec-names", &["--owner", "field-=producer"]);
    let info = info(&text);
    let mallory = client(&info, "mallory");
    let evil = mallory.declare("field-1").expect("declare");
    match mallory.seal_and_offer(evil, Attributes::new(), buffer(b"EVIL-DATA-from-mallory")) {
        Err(ClientError::Call(CallError::Refused {
            why: Refusal::NotAllowed(why),
            ..
        })) => assert!(why.contains("producer"), "{why}"),
        other => panic!("mallory's offer of an owned name: {other:?}"),
    }
    let producer = client(&info, "producer");
    let cdo = producer.declare("field-1").expect("declare");
    producer
        .seal_and_offer(cdo, Attributes::new(), buffer(b"field one"))
        .expect("the owner offers");
    let consumer = client(&info, "consumer");
    let want = consumer.declare("field-1").expect("declare");
    let (data, attrs) = consumer.demand(want).expect("demand");
    assert_eq!(data.as_slice(), b"field one");
    assert_eq!(
        attrs.get(attr::PROVIDER),
        Some(&AttrValue::Str("producer:0".into()))
    );
}

#[test]
fn a_consumer_that_pins_an_offer_cannot_hold_its_withdraw_forever() {
    let (_pm, text) = start_pm("sec-pin", &["--transfer-timeout", "2"]);
    let info = info(&text);
    let producer = client(&info, "producer");
    let cdo = producer.declare("data").expect("declare");
    // Larger than what travels inline with a ticket (that transfer is done when sent, and
    // nothing can pin it).
    producer
        .seal_and_offer(cdo, Attributes::new(), buffer(&[7; 65536]))
        .expect("offer");
    // The pinner demands, takes its ticket and never reports the transfer done.
    let (mut pinner, app) = raw(&info, "pinner");
    let mine = *cdo_ids(app).start();
    pinner
        .send_batch(&[
            ToPm::Declare {
                cdo: mine,
                name: "data".into(),
            },
            ToPm::Demand { cdo: mine },
        ])
        .expect("send");
    assert!(matches!(
        pinner.recv(Op::Demand).expect("ticket"),
        FromPm::Ticket { .. }
    ));
    let start = Instant::now();
    producer
        .withdraw(cdo)
        .expect("the withdraw completes after the transfer deadline");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "withdraw took {took:?}"
    );
}

#[test]
fn a_subscriber_that_never_acknowledges_holds_one_operation_once() {
    let (_pm, text) = start_pm("sec-ack", &["--ack-timeout", "1"]);
    let info = info(&text);
    let (mut silent, _) = raw(&info, "silent");
    silent
        .send_batch(&[ToPm::Subscribe {
            local: 1,
            kinds: EventKind::Offer.into(),
            selector: Box::new(Expr::All),
            options: SubscribeOptions {
                signal_before: true,
                require_ack: true,
                no_local: false,
                replay: false,
            },
        }])
        .expect("subscribe");
    assert!(matches!(
        silent.recv(Op::Subscribe).expect("subscribed"),
        FromPm::Subscribed { .. }
    ));
    let producer = client(&info, "producer");
    for i in 0..20 {
        let cdo = producer.declare(&format!("step-{i}")).expect("declare");
        producer
            .seal_and_offer(cdo, Attributes::new(), buffer(b"x"))
            .expect("offer");
    }
    // The first offer waited out the deadline; then the silent subscriber lost its
    // subscription: it heard of that one offer only, then that it was too late (each
    // offer held in turn would have sent it an event each).
    let mut events = 0;
    loop {
        match silent.recv(Op::Ack).expect("the silent subscriber is told") {
            FromPm::Event { .. } => events += 1,
            FromPm::AckTooLate { .. } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(events, 1, "events before the subscription ended");
    let mut observer =
        pool::Observer::connect(&info, "test", Duration::from_secs(30)).expect("observer");
    match observer.query(pool::view::Query::Status).expect("status") {
        pool::view::View::Status(s) => assert_eq!(s.subscriptions, 0, "{s:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn quotas_bound_what_one_app_makes_the_pm_hold() {
    let (pm, text) = start_pm(
        "sec-quota",
        &["--max-app-bytes", "8M", "--max-subscriptions", "4"],
    );
    let info = info(&text);
    let before = rss_kib(pm.pid());
    let (mut greedy, app) = raw(&info, "greedy");
    let name = "n".repeat(4000);
    let ids: Vec<_> = cdo_ids(app).take(3000).collect();
    for chunk in ids.chunks(100) {
        let batch: Vec<ToPm> = chunk
            .iter()
            .map(|&cdo| ToPm::Declare {
                cdo,
                name: format!("{name}{cdo}"),
            })
            .collect();
        greedy.send_batch(&batch).expect("send");
    }
    // Declares are answered only when refused; a dispose asking for an answer marks the end.
    greedy
        .send_batch(&[ToPm::Dispose {
            cdo: ids[0],
            answer: true,
        }])
        .expect("send");
    let mut refused = Vec::new();
    loop {
        match greedy.recv(Op::Dispose).expect("answers") {
            FromPm::Refused {
                op: Op::Declare,
                cdo: Some(cdo),
                why,
            } => {
                assert!(matches!(why, Refusal::Quota(_)), "{why}");
                refused.push(cdo);
            }
            FromPm::Done {
                op: Op::Dispose, ..
            } => break,
            other => panic!("{other:?}"),
        }
    }
    let at = refused
        .first()
        .map(|c| ids.iter().position(|i| i == c).expect("ours"))
        .expect("the quota refuses declares");
    assert!(
        (1800..2100).contains(&at),
        "8 MiB hold about 1,900 CDOs of 4,000-byte names, refused from {at}"
    );
    assert_eq!(
        refused.len(),
        ids.len() - at,
        "every later declare is refused"
    );
    let subs: Vec<_> = (0..5)
        .map(|i| ToPm::Subscribe {
            local: i,
            kinds: EventKind::Offer.into(),
            selector: Box::new(Expr::All),
            options: SubscribeOptions::default(),
        })
        .collect();
    greedy.send_batch(&subs).expect("subscribe");
    let answers: Vec<FromPm> = (0..5)
        .filter_map(|_| greedy.recv(Op::Subscribe).ok())
        .collect();
    assert!(
        answers.iter().any(|m| matches!(
            m,
            FromPm::Refused {
                op: Op::Subscribe,
                why: Refusal::Quota(_),
                ..
            }
        )),
        "{answers:?}"
    );
    let grown = rss_kib(pm.pid()).saturating_sub(before);
    eprintln!("quota: declares refused from the {at}th on; the PM grew by {grown} KiB");
    assert!(grown < 64 * 1024, "the PM grew by {grown} KiB");
    honest_round_trip(&info, "within-quota");
}

#[test]
fn apps_cannot_forge_fabric_events() {
    let (_pm, text) = start_pm("sec-fabric", &[]);
    let info = info(&text);
    let watcher = client(&info, "watcher");
    let sel = watcher.selector("", "").expect("selector");
    let sub = watcher
        .subscribe(&sel, EventKind::Fabric, SubscribeOptions::default())
        .expect("subscribe");
    let (mut forger, _) = raw(&info, "forger");
    for change in [
        FabricChange::Other("node n1 lost".into()),
        FabricChange::Link {
            name: "eth0".into(),
            addresses: vec!["10.9.0.1/24".parse().expect("subnet")],
            up: false,
        },
    ] {
        forger.send_batch(&[ToPm::Report { change }]).expect("send");
        match forger.recv(Op::Report).expect("answer") {
            FromPm::Refused {
                op: Op::Report,
                why: Refusal::NotAllowed(_),
                ..
            } => {}
            other => panic!("a forged report: {other:?}"),
        }
    }
    assert!(
        sub.wait_timeout(Duration::from_millis(500))
            .expect("wait")
            .is_none(),
        "subscribers heard a forged fabric event"
    );
}
