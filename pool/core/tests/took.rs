//! A lease of inline bytes taken with no CDO kept ([`ToPm::Took`]): the client's
//! [`take_leased`](pool_core::client::ClientCore::take_leased) serves a name from the bytes
//! its offer's event brought and tells the PM in one message, where a demand is a declare,
//! a use of the lease and a dispose. The PM makes no CDO of it, unless a subscription hears
//! of declares, demands, disposes or transports: then it is those three operations, with
//! their events. And what the PM refuses: a lease not the taker's, a lease of memory, an id
//! not the taker's to declare.

mod support;

use pool_core::ConnId;
use pool_core::attr::{self, AttrValue};
use pool_core::client::News;
use pool_core::events::{EventKind, EventKinds, SubscribeOptions};
use pool_core::proto::{FromPm, OfferExtras, Op, Refusal, ToPm, TransferId};
use pool_core::selector::Selector;
use pool_core::sim::World;
use support::Pm;

/// Subscribes app `app` to every event of `kinds` (answers under `tag`).
fn subscribe(w: &mut World, app: usize, kinds: EventKinds, tag: u32) {
    let request = (
        kinds,
        Selector::all().expr().clone(),
        SubscribeOptions::default(),
    );
    w.timed(app, |k, now| k.subscribe(now, request, tag, tag))
        .expect("subscribe");
    w.pump();
    assert!(matches!(w.answer(app, tag), Some(Ok(_))), "subscribed");
}

/// The kinds of the events subscription `tag` of `app` heard of CDO `name`, in order.
fn heard(w: &World, app: usize, tag: u32, name: &str) -> Vec<EventKind> {
    w.apps[app].news.get(&tag).map_or(Vec::new(), |news| {
        news.iter()
            .filter_map(|n| match n {
                News::Event(e) if e.cdo.as_deref() == Some(name) => Some(e.kind),
                _ => None,
            })
            .collect()
    })
}

/// The CDOs and leases the pool's managers hold, all shards together.
fn held(w: &World) -> (usize, usize) {
    w.managers.iter().fold((0, 0), |(cdos, leases), m| {
        (cdos + m.cdo_count(), leases + m.lease_count())
    })
}

fn is_took(m: &ToPm) -> bool {
    matches!(m, ToPm::Took { .. })
}

fn is_cdo_op(m: &ToPm) -> bool {
    matches!(
        m,
        ToPm::Declare { .. } | ToPm::UseLease { .. } | ToPm::Dispose { .. } | ToPm::Demand { .. }
    )
}

#[test]
fn a_lease_of_inline_bytes_is_taken_in_one_message_and_the_pm_keeps_no_cdo() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, EventKind::Offer.into(), 1);
    w.offer(p, "small", b"8 bytes!", true);
    w.offer(p, "large", &[7; 5000], false);
    w.pump();
    let (cdos, leases) = held(&w);
    assert_eq!(leases, 2);
    let (bytes, attributes) = w
        .client(c)
        .take_leased("small")
        .expect("open")
        .expect("served by the lease");
    assert_eq!(bytes, b"8 bytes!");
    let text = |v: &str| Some(AttrValue::Str(v.into()));
    assert_eq!(attributes.get(attr::NAME).cloned(), text("small"));
    assert_eq!(attributes.get(attr::PROVIDER).cloned(), text("producer:0"));
    assert_eq!(attributes.get(attr::LOCAL_SIZE), Some(&AttrValue::Uint(8)));
    assert_eq!(attributes.get(".user.step"), Some(&AttrValue::Int(2)));
    // Nothing else to take: a lease of memory, none of the name, the small one used.
    assert_eq!(w.client(c).take_leased("large"), Ok(None));
    assert_eq!(w.client(c).take_leased("none"), Ok(None));
    assert_eq!(w.client(c).take_leased("small"), Ok(None));
    w.pump();
    let sent = w.sent(c);
    assert_eq!(sent.iter().filter(|m| is_took(m)).count(), 1);
    assert!(!sent.iter().any(|m| is_cdo_op(m)), "{sent:?}");
    assert_eq!(held(&w), (cdos, 1), "no CDO made, the lease of memory kept");
    // The lease of memory still serves a demand.
    let large = w.declare(c, "large").expect("declare");
    let d = w
        .timed(c, |k, now| k.demand(now, large, 2))
        .expect("demand");
    w.pump();
    assert!(matches!(d, pool_core::client::Demand::Waiting(_)));
    assert_eq!(w.answer(c, 2), Some(&Ok(large)));
    assert_eq!(held(&w).1, 0);
}

/// What a subscriber hears of a CDO taken from a lease is what it hears of one declared,
/// demanded and disposed: the PM runs the three operations for it.
#[test]
fn a_subscriber_of_declares_and_disposes_hears_a_take_as_its_three_operations() {
    let mut w = World::new();
    let (c, p, auditor) = (
        w.join("consumer", true),
        w.join("producer", true),
        w.join("auditor", true),
    );
    subscribe(&mut w, c, EventKind::Offer.into(), 1);
    let kinds = EventKinds::from(EventKind::Declare)
        | EventKind::Demand
        | EventKind::Dispose
        | EventKind::TransportCompleted;
    subscribe(&mut w, auditor, kinds, 1);
    w.offer(p, "taken", b"12345678", true);
    w.offer(p, "demanded", b"87654321", true);
    w.pump();
    let (cdos, _) = held(&w);
    let taken = w.client(c).take_leased("taken").expect("open");
    assert_eq!(taken.map(|(b, _)| b), Some(b"12345678".to_vec()));
    let d = w.declare(c, "demanded").expect("declare");
    let here = w.timed(c, |k, now| k.demand(now, d, 2)).expect("demand");
    assert!(matches!(here, pool_core::client::Demand::Here(..)));
    assert_eq!(w.timed(c, |k, now| k.dispose(now, d, 3)), Ok(None));
    w.pump();
    // The producer's declare, then the consumer's three operations (its transfer done
    // as its demand is).
    let heard_of_demand = [
        EventKind::Declare,
        EventKind::Declare,
        EventKind::TransportCompleted,
        EventKind::Demand,
        EventKind::Dispose,
    ];
    assert_eq!(heard(&w, auditor, 1, "demanded"), heard_of_demand);
    assert_eq!(
        heard(&w, auditor, 1, "taken"),
        heard_of_demand,
        "the same for a take"
    );
    assert_eq!(held(&w), (cdos, 0), "both consumer CDOs gone");
}

/// The lease `c` was granted with the event of offer `name` of `p`: of 100 bytes in
/// memory, or of 8 inline bytes.
fn lease_of(pm: &mut Pm, (p, c): (ConnId, ConnId), name: &str, inline: bool) -> TransferId {
    let out = if inline {
        let cdo = pm.sealed(p, name, 1);
        let extras = OfferExtras::default().with_inline(*b"8 bytes!");
        let region = support::region(8);
        pm.feed(
            p,
            ToPm::Offer {
                cdo,
                region,
                extras,
            },
        )
    } else {
        pm.offer(p, name, 100).1
    };
    out.iter()
        .find_map(|(to, m)| match m {
            FromPm::Event { lease: Some(l), .. } if *to == c => Some(l.lease),
            _ => None,
        })
        .expect("a lease with the event")
}

#[test]
fn the_pm_refuses_a_take_of_a_lease_not_the_apps_of_memory_or_under_a_bad_id() {
    let mut pm = Pm::new();
    let (c, _) = pm.join("consumer");
    let (p, _) = pm.join("producer");
    let (other, _) = pm.join("other");
    pm.subscribe(c, EventKind::Offer, "", SubscribeOptions::default());
    let refused = |cdo, why| {
        vec![(
            c,
            FromPm::Refused {
                op: Op::Demand,
                cdo: Some(cdo),
                why,
            },
        )]
    };
    // Of memory: refused, the lease given back.
    let lease = lease_of(&mut pm, (p, c), "m", false);
    let cdo = pm.next_cdo(c);
    let out = pm.feed(c, ToPm::Took { cdo, lease });
    assert!(
        matches!(&out[..], [(to, FromPm::Refused { why: Refusal::NotAllowed(_), .. })] if *to == c),
        "{out:?}"
    );
    assert_eq!(pm.m.lease_count(), 0);
    // Not the app's own: unknown to it; under an id of another app's: refused, given back.
    let lease = lease_of(&mut pm, (p, c), "n", true);
    let cdo = pm.next_cdo(other);
    assert_eq!(
        pm.feed(other, ToPm::Took { cdo, lease }),
        [(
            other,
            FromPm::Refused {
                op: Op::Demand,
                cdo: Some(cdo),
                why: Refusal::UnknownTransfer
            }
        )]
    );
    assert_eq!(pm.m.lease_count(), 1, "still the consumer's");
    let out = pm.feed(c, ToPm::Took { cdo, lease });
    assert_eq!(out, refused(cdo, Refusal::BadCdoId));
    assert_eq!(pm.m.lease_count(), 0);
    // Used up: a second take is of a lease it no longer holds.
    let out = pm.feed(c, ToPm::Took { cdo: 1, lease });
    assert_eq!(out, refused(1, Refusal::UnknownTransfer));
}

support::at_three_shards!(
    a_lease_of_inline_bytes_is_taken_in_one_message_and_the_pm_keeps_no_cdo,
    a_subscriber_of_declares_and_disposes_hears_a_take_as_its_three_operations,
);
