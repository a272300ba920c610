//! CDO groups between two real apps of a real pool manager (`maestro pm`): a producer
//! offers a group in one burst, a consumer demands it whole, subscribers see every member,
//! and the bad uses get clear errors.

mod common;

use pool::CallError;
use std::time::Duration;

use common::start_pm;
use fabric::Buffer;
use pool::ClientError;
use pool::attr::{AttrValue, Attributes};
use pool::events::{EventKind, SubscribeOptions};
use pool::proto::Refusal;

const T: Duration = Duration::from_secs(60);

/// Member `i`'s bytes: sizes from 8 B to 64 KiB, contents of its own.
fn bytes_of(i: usize) -> Vec<u8> {
    let len = [8, 100, 4096, 65_536][i % 4];
    (0..len).map(|b| (b * 31 + i) as u8).collect()
}

/// Member `i`'s attributes (a built-in key, so no schema is needed).
fn step(i: usize) -> Attributes {
    Attributes::from([(LIFETIME.to_string(), AttrValue::Uint(i as u64))])
}

const LIFETIME: &str = ".maestro.core.cdo.lifetime";

#[test]
fn a_group_moves_whole_and_every_member_is_an_event() {
    moves_whole("groups", &[]);
}

/// In a pool of three managers the members' names live at every shard, most at another
/// than the group's: the group's home names them, each is demanded at its own home, and the
/// consumer gets them whole, in order, as from one manager.
#[test]
fn a_group_spread_over_three_shards_moves_whole_and_every_member_is_an_event() {
    let workflow = format!("groups-sharded-{}", std::process::id());
    moves_whole(&workflow, &["--shards", "3"]);
}

/// A producer offers a group of 100 members to a pool started with `extra` (`maestro pm`
/// options); a consumer demands it whole, a watcher sees every member offered.
fn moves_whole(workflow: &str, extra: &[&str]) {
    let (_pm, info) = start_pm(workflow, extra);
    let producer = common::join_tcp_lo(&info, "producer");
    let consumer = common::join_tcp_lo(&info, "consumer");
    let watcher = common::join_tcp_lo(&info, "watcher");
    let selector = watcher
        .selector("(.maestro.core.cdo.name ~= \"^field/\")", "")
        .expect("selector");
    let sub = watcher
        .subscribe(&selector, EventKind::Offer, SubscribeOptions::default())
        .expect("subscribe");

    let n = 100;
    let group = producer.declare("fields").expect("declare");
    let members: Vec<_> = (0..n)
        .map(|i| {
            let cdo = producer.declare(&format!("field/{i:03}")).expect("declare");
            let data = Buffer::from_slice(&bytes_of(i)).expect("buffer");
            (cdo, Some(step(i)).filter(|_| i % 2 == 0), data)
        })
        .collect();
    // Odd members are sealed beforehand; even ones with the group.
    for (cdo, attrs, _) in &members {
        if attrs.is_none() {
            producer.seal(*cdo, Attributes::new()).expect("seal");
        }
    }
    let ids: Vec<_> = members.iter().map(|(c, ..)| *c).collect();
    producer
        .offer_group(group, members)
        .expect("offer the group");

    let wanted = consumer.declare("fields").expect("declare");
    let (got, attributes) = consumer.demand_group(wanted).expect("demand the group");
    assert_eq!(
        attributes.get(pool::attr::IS_GROUP),
        Some(&AttrValue::Bool(true))
    );
    assert_eq!(got.len(), n);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.name, format!("field/{i:03}"));
        assert_eq!(&*m.data, bytes_of(i).as_slice(), "member {i}");
        if i % 2 == 0 {
            assert_eq!(m.attributes.get(LIFETIME), step(i).get(LIFETIME));
        }
    }
    // A subscriber sees each member's offer, as any CDO's.
    let mut seen = Vec::new();
    while seen.len() < n {
        let e = sub.wait_timeout(T).expect("event").expect("an offer event");
        seen.push(e.cdo.unwrap_or_default());
    }
    seen.sort();
    assert_eq!(
        seen,
        (0..n).map(|i| format!("field/{i:03}")).collect::<Vec<_>>()
    );

    for m in &got {
        consumer.dispose(m.cdo).expect("dispose member");
    }
    consumer.dispose(wanted).expect("dispose group");
    let back = producer.withdraw_group(group, &ids).expect("withdraw");
    assert_eq!(back.len(), n);
}

#[test]
fn bad_group_uses_are_refused_with_the_reason() {
    let (_pm, info) = start_pm("bad-groups", &[]);
    let producer = common::join_tcp_lo(&info, "producer");
    let consumer = common::join_tcp_lo(&info, "consumer");
    // A member offered already: the group's offer is all or nothing.
    let offered = producer.declare("solo").expect("declare");
    producer
        .seal_and_offer(
            offered,
            Attributes::new(),
            Buffer::from_slice(b"x").expect("b"),
        )
        .expect("offer");
    let other = producer.declare("other").expect("declare");
    let group = producer.declare("mixed").expect("declare");
    let refused = producer.offer_group(
        group,
        vec![
            (
                other,
                Some(Attributes::new()),
                Buffer::from_slice(b"y").expect("b"),
            ),
            (offered, None, Buffer::from_slice(b"z").expect("b")),
        ],
    );
    assert!(
        matches!(
            refused,
            Err(ClientError::Call(CallError::Refused {
                why: Refusal::WrongState { .. },
                ..
            }))
        ),
        "{refused:?}"
    );
    // What went through was taken back: `other` and the group can be disposed.
    producer.dispose(other).expect("other was withdrawn");
    producer.dispose(group).expect("the group was withdrawn");
    // A CDO of that name that is no group.
    let plain = producer.declare("plain").expect("declare");
    producer
        .seal_and_offer(
            plain,
            Attributes::new(),
            Buffer::from_slice(b"p").expect("b"),
        )
        .expect("offer");
    let wanted = consumer.declare("plain").expect("declare");
    match consumer.demand_group(wanted) {
        Err(ClientError::Call(CallError::Protocol(why))) => {
            assert!(why.contains("not a group"), "{why}")
        }
        other => panic!("{:?}", other.map(|(m, _)| m.len())),
    }
    // A member this app did not declare.
    let g = producer.declare("g").expect("declare");
    let foreign = consumer.declare("foreign").expect("declare");
    let r = producer.offer_group(g, vec![(foreign, None, Buffer::new(0).expect("b"))]);
    assert!(
        matches!(
            r,
            Err(ClientError::Call(CallError::Refused {
                why: Refusal::UnknownCdo,
                ..
            }))
        ),
        "{r:?}"
    );
}
