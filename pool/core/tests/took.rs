//! Leases used with no CDO kept ([`ToPm::Took`]): the client's
//! [`take_leased`](pool_core::client::ClientCore::take_leased) serves a name from the bytes
//! its offer's event brought, or from a copy of the lease's memory the PM agrees to, and
//! tells the PM in one message, where a demand is a declare, a use of the lease, the
//! transfer's end and a dispose. The PM makes no CDO of it, unless a subscription hears of
//! declares, demands, disposes or transports: then it is those operations, with their
//! events. And what the PM refuses: a lease not the taker's (another's, used up, abandoned
//! after a withdraw), an id not the taker's to declare.

mod support;

use pool_core::ConnId;
use pool_core::attr::{self, AttrValue, Attributes};
use pool_core::client::{Demand, News, TAKE_MOST, Taken};
use pool_core::events::{EventKind, EventKinds, SubscribeOptions};
use pool_core::policy::Policy;
use pool_core::proto::{CdoId, Direct, FromPm, OfferExtras, Op, Refusal, Source, ToPm, TransferId};
use pool_core::selector::Selector;
use pool_core::sim::World;
use support::{Pm, done};

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

fn is_release(m: &ToPm) -> bool {
    matches!(m, ToPm::Release { .. })
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

/// Takes `name`'s lease at `c`; a lease of memory is copied (`bytes` for its bytes) and
/// told. The bytes and their attributes.
fn take(w: &mut World, c: usize, (name, bytes): (&str, &[u8])) -> Option<(Vec<u8>, Attributes)> {
    let taken = w
        .timed(c, |k, now| k.take_leased(now, name))
        .expect("open")?;
    match taken {
        Taken::Here(data, attributes) => Some((data, attributes)),
        Taken::Copy(copy, source) => {
            assert!(!matches!(source, Source::Inline { .. }), "{source:?}");
            let got = (bytes.to_vec(), Some(Direct::Copied));
            w.timed(c, |k, now| k.took_copy(now, copy, got))
                .expect("open")
        }
    }
}

#[test]
fn leases_are_taken_in_one_message_each_and_the_pm_keeps_no_cdo() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, EventKind::Offer.into(), 1);
    let large = [7; 5000];
    let checked = Attributes::from([(
        attr::CHECKSUM.to_string(),
        AttrValue::Uint(attr::checksum(&large)),
    )]);
    w.offer(p, "small", b"8 bytes!", true);
    w.offer(p, "large", &large, false);
    w.offer_sealed(p, "corrupt", (&large, false), checked);
    w.pump();
    let (cdos, leases) = held(&w);
    assert_eq!(leases, 3);
    let (bytes, attributes) = take(&mut w, c, ("small", b"")).expect("inline");
    assert_eq!(bytes, b"8 bytes!");
    let text = |v: &str| Some(AttrValue::Str(v.into()));
    assert_eq!(attributes.get(attr::NAME).cloned(), text("small"));
    assert_eq!(attributes.get(attr::PROVIDER).cloned(), text("producer:0"));
    assert_eq!(attributes.get(attr::LOCAL_SIZE), Some(&AttrValue::Uint(8)));
    assert_eq!(attributes.get(".user.step"), Some(&AttrValue::Int(2)));
    // A lease of memory: copied, then told.
    let (bytes, attributes) = take(&mut w, c, ("large", &large)).expect("copied");
    assert_eq!(bytes, large);
    assert_eq!(
        attributes.get(attr::LOCAL_SIZE),
        Some(&AttrValue::Uint(5000))
    );
    // Bytes that fail the producer's checksum are not kept: the lease goes back.
    assert!(take(&mut w, c, ("corrupt", &[0; 5000])).is_none());
    // Nothing else to take: none of the name, the small one used.
    assert!(take(&mut w, c, ("none", b"")).is_none());
    assert!(take(&mut w, c, ("small", b"")).is_none());
    w.pump();
    let sent = w.sent(c);
    assert_eq!(sent.iter().filter(|m| is_took(m)).count(), 2);
    assert_eq!(sent.iter().filter(|m| is_release(m)).count(), 1);
    assert!(!sent.iter().any(|m| is_cdo_op(m)), "{sent:?}");
    assert_eq!(held(&w), (cdos, 0), "no CDO made, every lease ended");
}

/// A copy that ended half the PM's lease grace or more after its lease was taken (the
/// app's thread stalled) may be of an offer the PM let go meanwhile: it is not kept, and
/// the lease goes back. A lease of more than `TAKE_MOST` bytes is not taken at all: the
/// name is demanded, and the demand uses it.
#[test]
fn a_copy_too_late_to_be_sure_of_is_dropped_and_a_large_lease_left_to_the_demand() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, EventKind::Offer.into(), 1);
    w.offer(p, "slow", &[5; 5000], false);
    let huge = vec![6; usize::try_from(TAKE_MOST).expect("usize") + 1];
    w.offer(p, "huge", &huge, false);
    w.pump();
    let taken = w.timed(c, |k, now| k.take_leased(now, "slow"));
    let Ok(Some(Taken::Copy(copy, _))) = taken else {
        panic!("a lease of memory");
    };
    w.now += Policy::default().lease_grace / 2;
    let late = w.timed(c, |k, now| k.took_copy(now, copy, (vec![5; 5000], None)));
    assert_eq!(late, Ok(None), "copied too late to keep");
    assert!(matches!(
        w.timed(c, |k, now| k.take_leased(now, "huge")),
        Ok(None)
    ));
    w.pump();
    assert_eq!(w.sent(c).iter().filter(|m| is_release(m)).count(), 1);
    assert_eq!(
        demanded(&mut w, c, "huge", 2),
        huge,
        "the demand uses its lease"
    );
    assert_eq!(held(&w).1, 0, "both leases ended");
    assert!(!w.sent(c).iter().any(|m| is_took(m)));
}

/// A consumer whose reader is stalled (it may not have heard of a revocation) takes no
/// lease of memory once half the PM's grace passed since it last caught up: the name is
/// left to the demand. Leases of bytes that came with their event are taken all the same,
/// and once caught up it takes leases of memory again.
#[test]
fn a_stalled_consumer_takes_only_the_leases_of_bytes() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, EventKind::Offer.into(), 1);
    w.offer(p, "memory", &[5; 5000], false);
    w.offer(p, "bytes", b"8 bytes!", true);
    w.pump();
    w.stalled = Some(c);
    w.now += Policy::default().lease_grace / 2;
    let memory = w.timed(c, |k, now| k.take_leased(now, "memory"));
    assert!(matches!(memory, Ok(None)), "left to the demand");
    let bytes = w.timed(c, |k, now| k.take_leased(now, "bytes"));
    assert!(matches!(bytes, Ok(Some(Taken::Here(ref b, _))) if b == b"8 bytes!"));
    w.unstall();
    let memory = w.timed(c, |k, now| k.take_leased(now, "memory"));
    assert!(matches!(memory, Ok(Some(Taken::Copy(..)))), "caught up");
}

/// Declares, demands and disposes `name` at `c` (answers under `tag`); its bytes.
fn demanded(w: &mut World, c: usize, name: &str, tag: u32) -> Vec<u8> {
    let d = w.declare(c, name).expect("declare");
    let bytes = match w.timed(c, |k, now| k.demand(now, d, tag)).expect("demand") {
        Demand::Here(bytes, _) => bytes,
        Demand::Waiting(_) => {
            w.pump();
            assert_eq!(w.answer(c, tag), Some(&Ok(d)));
            w.client(c).take_arrived(d).expect("here").0
        }
    };
    assert_eq!(w.timed(c, |k, now| k.dispose(now, d, tag + 1)), Ok(None));
    bytes
}

/// What a subscriber hears of a CDO taken from a lease is what it hears of one declared,
/// demanded and disposed: the PM runs those operations for it.
#[test]
fn a_subscriber_of_declares_and_disposes_hears_a_take_as_its_operations() {
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
    let large = [3; 5000];
    w.offer(p, "taken", b"12345678", true);
    w.offer(p, "demanded", b"87654321", true);
    w.offer(p, "taken large", &large, false);
    w.offer(p, "demanded large", &large, false);
    w.pump();
    let (cdos, _) = held(&w);
    let taken = take(&mut w, c, ("taken", b"")).map(|(b, _)| b);
    assert_eq!(taken.as_deref(), Some(&b"12345678"[..]));
    let copied = take(&mut w, c, ("taken large", &large)).map(|(b, _)| b);
    assert_eq!(copied.as_deref(), Some(&large[..]));
    assert_eq!(demanded(&mut w, c, "demanded", 4), b"87654321");
    assert_eq!(demanded(&mut w, c, "demanded large", 6), large);
    w.pump();
    // The producer's declare, then the consumer's operations (a transfer of inline bytes
    // done as its demand is, one of memory once reported).
    let of_inline = [
        EventKind::Declare,
        EventKind::Declare,
        EventKind::TransportCompleted,
        EventKind::Demand,
        EventKind::Dispose,
    ];
    let of_memory = [
        EventKind::Declare,
        EventKind::Declare,
        EventKind::Demand,
        EventKind::TransportCompleted,
        EventKind::Dispose,
    ];
    assert_eq!(heard(&w, auditor, 1, "demanded"), of_inline);
    assert_eq!(
        heard(&w, auditor, 1, "taken"),
        of_inline,
        "the same for a take"
    );
    assert_eq!(heard(&w, auditor, 1, "demanded large"), of_memory);
    assert_eq!(heard(&w, auditor, 1, "taken large"), of_memory);
    assert_eq!(held(&w), (cdos, 0), "every consumer CDO gone");
}

/// Offer `name` of `p` (of 100 bytes in memory, or of 8 inline bytes) and the lease `c`
/// was granted with its event.
fn lease_of(
    pm: &mut Pm,
    (p, c): (ConnId, ConnId),
    name: &str,
    inline: bool,
) -> (CdoId, TransferId) {
    let (offer, out) = if inline {
        let cdo = pm.sealed(p, name, 1);
        let extras = OfferExtras::default().with_inline(*b"8 bytes!");
        let region = support::region(8);
        (
            cdo,
            pm.feed(
                p,
                ToPm::Offer {
                    cdo,
                    region,
                    extras,
                },
            ),
        )
    } else {
        pm.offer(p, name, 100)
    };
    (offer, support::lease_to(&out, c))
}

/// The PM's side, bare: a take goes unanswered and lets through the withdraw its lease
/// held up; one of a lease not the app's (another's, used up, abandoned a grace after its
/// revocation) or under an id the app could not declare is refused.
#[test]
fn the_pm_takes_what_a_lease_held_and_refuses_a_lease_not_the_apps_or_a_bad_id() {
    let mut pm = Pm::new();
    let (c, _) = pm.join("consumer");
    let (p, _) = pm.join("producer");
    let (other, _) = pm.join("other");
    pm.subscribe(c, EventKind::Offer, "", SubscribeOptions::default());
    let refused = |to, cdo, why| vec![(to, support::refused(Op::Demand, Some(cdo), why))];
    let took = |cdo, lease| ToPm::Took {
        cdo,
        lease,
        direct: Some(Direct::Copied),
    };
    let withdraw = |cdo| ToPm::Withdraw { cdo, keep: None };
    // Unanswered, of memory or of inline bytes.
    let (_, lease) = lease_of(&mut pm, (p, c), "m", false);
    let cdo = pm.next_cdo(c);
    assert_eq!(pm.feed(c, took(cdo, lease)), []);
    let (_, lease) = lease_of(&mut pm, (p, c), "i", true);
    let cdo = pm.next_cdo(c);
    assert_eq!(pm.feed(c, took(cdo, lease)), []);
    assert_eq!(pm.m.lease_count(), 0);
    // Revoked by a withdraw and taken within the grace: the withdraw goes through.
    let (offer, lease) = lease_of(&mut pm, (p, c), "w", false);
    assert_eq!(pm.feed(p, withdraw(offer)), [(c, FromPm::Revoke { lease })]);
    let cdo = pm.next_cdo(c);
    assert_eq!(
        pm.feed(c, took(cdo, lease)),
        [(p, done(Op::Withdraw, offer))]
    );
    // Taken after the grace: the PM let the offer go, the take is refused.
    let (offer, lease) = lease_of(&mut pm, (p, c), "late", false);
    assert_eq!(pm.feed(p, withdraw(offer)), [(c, FromPm::Revoke { lease })]);
    pm.now += Policy::default().lease_grace;
    let now = pm.now;
    pm.m.handle_timeout(now);
    assert_eq!(pm.drain(), [(p, done(Op::Withdraw, offer))]);
    let cdo = pm.next_cdo(c);
    let out = pm.feed(c, took(cdo, lease));
    assert_eq!(out, refused(c, cdo, Refusal::UnknownTransfer));
    // Not the app's own: unknown to it; under an id of another app's: refused, given back.
    let (_, lease) = lease_of(&mut pm, (p, c), "n", true);
    let cdo = pm.next_cdo(other);
    let unknown = refused(other, cdo, Refusal::UnknownTransfer);
    assert_eq!(pm.feed(other, took(cdo, lease)), unknown);
    assert_eq!(pm.m.lease_count(), 1, "still the consumer's");
    let out = pm.feed(c, took(cdo, lease));
    assert_eq!(out, refused(c, cdo, Refusal::BadCdoId));
    assert_eq!(pm.m.lease_count(), 0);
    // Used up: a second take is of a lease it no longer holds.
    let out = pm.feed(c, took(1, lease));
    assert_eq!(out, refused(c, 1, Refusal::UnknownTransfer));
}

support::at_three_shards!(
    leases_are_taken_in_one_message_each_and_the_pm_keeps_no_cdo,
    a_copy_too_late_to_be_sure_of_is_dropped_and_a_large_lease_left_to_the_demand,
    a_subscriber_of_declares_and_disposes_hears_a_take_as_its_operations,
    a_stalled_consumer_takes_only_the_leases_of_bytes,
);
