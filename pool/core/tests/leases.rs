//! Leases ([`pool_core::proto::Grant`]) in memory: an offer's event brings each subscribing
//! app the ticket of a demand before the demand is made, and the demand is served from it
//! without a round trip to the PM. What a withdraw, a provider gone, a holder that keeps
//! its lease, a subscription that holds demands, a signal-before subscriber, a second
//! consumer and the leases' limit do to them, with simulated time. Client cores and the
//! manager in the crate's harness ([`World`]), and the bare manager ([`support::Pm`]) for a
//! holder that never answers.

mod support;

use std::time::Duration;

use pool_core::ConnId;
use pool_core::client::{Demand, LEASE_HOLD};
use pool_core::events::{EventKind, EventKinds, SubscribeOptions};
use pool_core::policy::Policy;
use pool_core::proto::{CdoId, FromPm, Op, Refusal, Source, ToPm, TransferId};
use pool_core::selector::Selector;
use pool_core::sim::World;
use support::{Pm, done};

/// Subscribes app `app` to every offer (tag `tag`) with `options`.
fn subscribe(w: &mut World, app: usize, options: SubscribeOptions, tag: u32) {
    subscribe_to(w, app, (EventKind::Offer, "", options), tag);
}

/// Subscribes app `app` to events of `kind` matching `selector` (in `.user.`; "": all)
/// with `options` (tag `tag`).
fn subscribe_to(
    w: &mut World,
    app: usize,
    (kind, selector, options): (EventKind, &str, SubscribeOptions),
    tag: u32,
) {
    let selector = if selector.is_empty() {
        Selector::all()
    } else {
        Selector::parse(selector, ".user.", &pool_core::schema::Schemas::builtin())
            .expect("selector")
    };
    let request = (EventKinds::from(kind), selector.expr().clone(), options);
    w.timed(app, |k, now| k.subscribe(now, request, tag, tag))
        .expect("subscribe");
    w.pump();
    assert!(matches!(w.answer(app, tag), Some(Ok(_))), "subscribed");
}

/// Declares `name` at `app` and demands it (the answer, if it waits, under `tag`).
fn demand(w: &mut World, app: usize, name: &str, tag: u32) -> (CdoId, Demand<Vec<u8>>) {
    let cdo = w.declare(app, name).expect("declare");
    let d = w
        .timed(app, |k, now| k.demand(now, cdo, tag))
        .expect("demand");
    (cdo, d)
}

/// The messages `app` sent of the kind `kind` selects.
fn sent(w: &World, app: usize, kind: fn(&ToPm) -> bool) -> usize {
    w.sent(app).into_iter().filter(|m| kind(m)).count()
}

fn is_demand(m: &ToPm) -> bool {
    matches!(m, ToPm::Demand { .. })
}

fn is_use(m: &ToPm) -> bool {
    matches!(m, ToPm::UseLease { .. })
}

fn is_release(m: &ToPm) -> bool {
    matches!(m, ToPm::Release { .. })
}

fn withdraw(w: &mut World, app: usize, cdo: CdoId, tag: u32) {
    w.timed(app, |k, now| k.withdraw(now, cdo, tag))
        .expect("withdraw");
}

#[test]
fn an_offers_event_brings_a_lease_and_its_demand_waits_for_nobody() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    let small = b"8 bytes!";
    let large: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    w.offer(p, "small", small, true);
    w.offer(p, "large", &large, false);
    w.pump();
    assert_eq!(w.manager().lease_count(), 2);
    // The small one is here at once: nothing was asked of the PM before.
    let (cdo, d) = demand(&mut w, c, "small", 2);
    let Demand::Here(bytes, attributes) = d else {
        panic!("the lease's bytes were not used");
    };
    assert_eq!(bytes, small);
    assert_eq!(
        attributes.get(pool_core::attr::PROVIDER),
        Some(&pool_core::attr::AttrValue::Str("producer:0".into()))
    );
    // The large one is fetched from the provider's memory as the lease says, and the
    // demand is answered by the fetch, not by the PM.
    w.hold = true;
    let (big, d) = demand(&mut w, c, "large", 3);
    assert!(matches!(d, Demand::Waiting(_)));
    w.pump();
    let (_, fetch) = w.held.pop().expect("the lease's fetch");
    assert!(matches!(fetch.source, Source::Rma { .. }));
    assert_eq!(w.answer(c, 3), None);
    w.client(c)
        .fetched(fetch.shard, fetch.transfer, Ok((large.clone(), None)));
    w.pump();
    assert_eq!(w.answer(c, 3), Some(&Ok(big)));
    assert_eq!(w.client(c).take_arrived(big).expect("here").0, large);
    // The PM heard of both demands afterwards; none was sent as a demand.
    assert_eq!(sent(&w, c, is_use), 2);
    assert_eq!(sent(&w, c, is_demand), 0);
    assert_eq!(w.manager().lease_count(), 0);
    // The PM counts them demanded and here: a dispose needs no answer.
    assert_eq!(w.timed(c, |k, now| k.dispose(now, cdo, 4)), Ok(None));
    w.pump();
    assert_eq!(w.answer(c, 4), None);
}

/// A consumer whose reader is stalled, so that it does not hear of its lease's
/// revocation, does not use a lease of memory once half the PM's grace passed since it
/// last caught up: its demand goes to the PM as any other, and waits for an offer there
/// (not served by bytes no longer offered, which the PM let go after the grace).
#[test]
fn a_stalled_consumer_leaves_its_leases_of_memory_to_the_pm() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    let (a, _) = w.offer(p, "a", &[1; 100], false);
    w.offer(p, "small", b"8 bytes!", true);
    w.pump();
    w.stalled = Some(c);
    withdraw(&mut w, p, a, 10);
    w.pump();
    let grace = Policy::default().lease_grace;
    let until = w.now + grace;
    w.run_until(until);
    assert_eq!(w.answer(p, 10), Some(&Ok(a)), "the grace is over");
    w.hold = true;
    let (_, d) = demand(&mut w, c, "a", 2);
    assert!(matches!(d, Demand::Waiting(_)));
    w.pump();
    assert_eq!((sent(&w, c, is_use), sent(&w, c, is_demand)), (0, 1));
    assert!(w.held.is_empty(), "nothing read from the provider");
    // A lease of bytes that came with their event is used all the same.
    let (_, d) = demand(&mut w, c, "small", 3);
    assert!(matches!(d, Demand::Here(ref bytes, _) if bytes == b"8 bytes!"));
    w.unstall();
    assert_eq!(w.answer(c, 2), None, "waiting for an offer, not failed");
}

/// A use of a lease that reaches the PM after it abandoned the lease (the consumer
/// caught up as far as it can tell, the revocation held up on its way for longer than
/// the other half of the grace) is refused, and the consumer's demand goes to the PM as
/// any other, served by the next offer of the name (not failed, not served by bytes no
/// longer offered).
#[test]
fn a_lease_used_after_the_grace_turns_into_a_demand_the_pm_serves() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    let (a, _) = w.offer(p, "a", &[1; 100], false);
    w.pump();
    w.stalled = Some(c);
    withdraw(&mut w, p, a, 10);
    w.pump();
    assert_eq!(w.answer(p, 10), None, "held for the lease");
    let grace = Policy::default().lease_grace;
    let until = w.now + grace;
    w.run_until(until);
    assert_eq!(w.answer(p, 10), Some(&Ok(a)), "the grace is over");
    // The consumer, not having heard, uses the lease; its read is under way.
    w.hold = true;
    w.caught_up(c);
    let (got, d) = demand(&mut w, c, "a", 2);
    assert!(matches!(d, Demand::Waiting(_)));
    w.pump();
    assert_eq!(sent(&w, c, is_use), 1);
    w.unstall();
    assert_eq!(sent(&w, c, is_demand), 1, "the refused use became a demand");
    assert_eq!(w.answer(c, 2), None, "still waiting, not failed");
    // The held read of the withdrawn offer brings nothing to the CDO.
    let (_, fetch) = w.held.pop().expect("the lease's fetch");
    w.client(c)
        .fetched(fetch.shard, fetch.transfer, Ok((vec![1; 100], None)));
    w.hold = false;
    w.pump();
    assert_eq!(w.answer(c, 2), None);
    // A new offer of the name serves it.
    w.offer(p, "a", &[9; 100], false);
    w.pump();
    assert_eq!(w.answer(c, 2), Some(&Ok(got)));
    let (data, _) = w.client(c).take_arrived(got).expect("arrived");
    assert_eq!(data, vec![9; 100]);
}

#[test]
fn a_withdraw_revokes_unused_leases_and_waits_for_the_one_in_use() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    let (a, _) = w.offer(p, "a", &[1; 100], false);
    let (b, _) = w.offer(p, "b", &[2; 100], false);
    w.pump();
    // Unused: the withdraw revokes it, the consumer gives it back, the withdraw completes.
    withdraw(&mut w, p, a, 10);
    w.pump();
    assert_eq!(w.answer(p, 10), Some(&Ok(a)));
    assert_eq!(sent(&w, c, is_release), 1);
    // A demand of it now waits for the PM (no offer left): the revoked lease is gone.
    let (_, d) = demand(&mut w, c, "a", 2);
    assert!(matches!(d, Demand::Waiting(_)));
    w.pump();
    assert_eq!(sent(&w, c, is_demand), 1);
    assert_eq!(w.answer(c, 2), None);
    // In use: the withdraw waits until the consumer's read ended.
    w.hold = true;
    let (got, _) = demand(&mut w, c, "b", 3);
    w.pump();
    withdraw(&mut w, p, b, 11);
    w.pump();
    assert_eq!(
        w.answer(p, 11),
        None,
        "the lease's transfer reads the offer"
    );
    let (_, fetch) = w.held.pop().expect("the lease's fetch");
    w.client(c)
        .fetched(fetch.shard, fetch.transfer, Ok((vec![2; 100], None)));
    w.pump();
    assert_eq!(w.answer(c, 3), Some(&Ok(got)));
    assert_eq!(w.answer(p, 11), Some(&Ok(b)));
    assert_eq!(sent(&w, c, is_release), 1, "nothing more to give back");
}

#[test]
fn leases_of_a_provider_gone_are_revoked_and_a_demand_in_flight_is_served_elsewhere() {
    let mut w = World::new();
    let c = w.join("consumer", true);
    let (p1, p2) = (w.join("first", true), w.join("second", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    w.offer(p1, "f", &[1; 100], false);
    w.offer(p2, "f", &[1; 100], false);
    w.pump();
    assert_eq!(w.manager().lease_count(), 2);
    w.hold = true;
    let (cdo, _) = demand(&mut w, c, "f", 2);
    w.pump();
    let (_, first) = w.held.pop().expect("the oldest lease's fetch");
    // The first provider dies while its bytes are read.
    let (conn, now) = (w.apps[p1].conn, w.now);
    w.manager().disconnected(now, conn);
    let out = std::iter::from_fn(|| w.manager().poll_output()).collect::<Vec<_>>();
    let ticket = out.iter().find_map(|(to, m)| match m {
        FromPm::Ticket { transfer, cdo, .. } if *to == w.apps[c].conn => Some((*transfer, *cdo)),
        _ => None,
    });
    let (again, to) = ticket.expect("the demand ticketed from the second provider");
    assert_eq!(to, cdo);
    for (to, m) in out {
        if to == w.apps[c].conn {
            let now = w.now;
            w.core(c).handle(now, m);
        }
    }
    // The read of the gone provider fails; the second provider's ticket serves the demand.
    w.core(c)
        .fetched(first.transfer, Err("the provider is gone".into()));
    w.pump();
    let (_, second) = w.held.pop().expect("the new ticket's fetch");
    assert_eq!(second.transfer, again);
    w.client(c)
        .fetched(second.shard, again, Ok((vec![1; 100], None)));
    w.pump();
    assert_eq!(w.answer(c, 2), Some(&Ok(cdo)));
    // The second provider's lease, unused, is held until given back.
    assert_eq!(w.manager().lease_count(), 1);
}

#[test]
fn unused_leases_are_given_back_after_they_were_held_long_enough() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    let t0 = w.now;
    let (offer, _) = w.offer(p, "kept", &[7; 100], false);
    w.pump();
    assert_eq!(w.next_deadline(), Some(t0 + LEASE_HOLD));
    w.run_until(t0 + LEASE_HOLD - Duration::from_nanos(1));
    assert_eq!(w.manager().lease_count(), 1);
    w.run_until(t0 + LEASE_HOLD);
    assert_eq!(w.manager().lease_count(), 0);
    assert_eq!(sent(&w, c, is_release), 1);
    // Nothing to revoke: the withdraw completes at once.
    withdraw(&mut w, p, offer, 2);
    w.pump();
    assert_eq!(w.answer(p, 2), Some(&Ok(offer)));
}

#[test]
fn an_app_that_left_gives_back_nothing_after_its_leave() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    let t0 = w.now;
    w.offer(p, "kept", &[7; 100], false);
    w.pump();
    assert_eq!(w.manager().lease_count(), 1);
    w.timed(c, |k, now| k.leave(now, 9)).expect("leave");
    w.pump();
    assert_eq!(w.answer(c, 9), Some(&Ok(0)), "bye");
    // The PM closes the connection after its BYE: a notice written then (a lease given back
    // when its hold ends) would fail on the closed socket and fail the leave with it.
    w.apps[c].sent.clear();
    w.run_until(t0 + LEASE_HOLD);
    assert!(w.sent(c).is_empty(), "{:?}", w.sent(c));
}

#[test]
fn no_lease_where_a_demand_must_be_seen_first_nor_before_the_offer_nor_past_the_limit() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    let (early, second) = (w.join("early", true), w.join("second", true));
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    subscribe(&mut w, second, SubscribeOptions::default(), 1);
    let before = SubscribeOptions {
        signal_before: true,
        ..SubscribeOptions::default()
    };
    subscribe(&mut w, early, before, 1);
    w.offer(p, "one", b"1", true);
    w.pump();
    // Each app told after the fact has its own; the one told before the offer has none.
    assert_eq!(w.manager().lease_count(), 2);
    let (_, d) = demand(&mut w, second, "one", 2);
    assert!(matches!(d, Demand::Here(..)));
    let (_, d) = demand(&mut w, early, "one", 2);
    assert!(matches!(d, Demand::Waiting(_)));
    w.pump();
    // An auditor hearing of demands before they happen (to hold them or not): every
    // lease is revoked and no new one granted.
    let auditor = w.join("auditor", true);
    let before = SubscribeOptions {
        signal_before: true,
        ..SubscribeOptions::default()
    };
    subscribe_to(&mut w, auditor, (EventKind::Demand, "", before), 3);
    assert_eq!(w.manager().lease_count(), 0);
    assert_eq!(sent(&w, c, is_release), 1);
    w.offer(p, "two", b"2", true);
    w.pump();
    assert_eq!(w.manager().lease_count(), 0);
    // Its subscription gone, leases come again, at most the limit per app.
    let sub = match w.answer(auditor, 3) {
        Some(Ok(sub)) => *sub,
        other => panic!("{other:?}"),
    };
    w.client(auditor).drop_subscription(sub);
    w.pump();
    w.manager().set_policy(Policy {
        max_leases: 1,
        ..Policy::default()
    });
    w.offer(p, "three", b"3", true);
    w.offer(p, "four", b"4", true);
    w.pump();
    assert_eq!(w.manager().lease_count(), 2, "one each for two subscribers");
}

/// Offer `name` of `p`, withdrawn at once; the lease `c` was granted with its event.
fn lease_then_withdraw(pm: &mut Pm, (p, c): (ConnId, ConnId), name: &str) -> (CdoId, TransferId) {
    let (offer, out) = pm.offer(p, name, 100);
    let lease = support::lease_to(&out, c);
    let out = pm.feed(
        p,
        ToPm::Withdraw {
            cdo: offer,
            keep: None,
        },
    );
    assert_eq!(out, [(c, FromPm::Revoke { lease })]);
    (offer, lease)
}

/// A holder that keeps a revoked lease unused holds its offer's withdraw only for the
/// lease grace (not the transfer timeout: an attacker keeping every lease it is given
/// would hold every withdraw that long); one that used it in time holds it as a transfer,
/// up to the transfer timeout.
#[test]
fn a_holder_that_keeps_a_revoked_lease_is_abandoned_at_the_lease_grace() {
    let mut pm = Pm::new();
    let (c, _) = pm.join("consumer");
    let (p, _) = pm.join("producer");
    pm.m.set_policy(Policy {
        transfer_timeout: Duration::from_secs(5),
        lease_grace: Duration::from_secs(1),
        ..Policy::default()
    });
    pm.subscribe(c, EventKind::Offer, "", SubscribeOptions::default());
    let (offer, lease) = lease_then_withdraw(&mut pm, (p, c), "f");
    assert_eq!(pm.m.poll_timeout(), Some(pm.now + Duration::from_secs(1)));
    // A lease used for a CDO of another name is refused.
    let other = pm.declare(c, "g");
    let out = pm.feed(c, ToPm::UseLease { cdo: other, lease });
    // Refusing its use gave it back: the withdraw completed.
    let refused = FromPm::Refused {
        op: Op::Demand,
        cdo: Some(other),
        why: Refusal::BadName,
    };
    assert_eq!(out, [(p, done(Op::Withdraw, offer)), (c, refused)]);
    assert_eq!(pm.m.lease_count(), 0);
    // Again, and this time the holder keeps it unused past the grace.
    let (offer, lease) = lease_then_withdraw(&mut pm, (p, c), "h");
    pm.now += Duration::from_secs(1);
    let now = pm.now;
    pm.m.handle_timeout(now);
    assert_eq!(pm.drain(), [(p, done(Op::Withdraw, offer))]);
    assert_eq!(pm.m.lease_count(), 0);
    // Used late: refused, the demand is the PM's to serve.
    let late = pm.declare(c, "h");
    let out = pm.feed(c, ToPm::UseLease { cdo: late, lease });
    assert!(
        matches!(&out[..], [(to, FromPm::Refused { why: Refusal::UnknownTransfer, .. })] if *to == c),
        "{out:?}"
    );
    // Used within the grace: the offer is held as by a transfer, to the transfer timeout.
    let (offer, lease) = lease_then_withdraw(&mut pm, (p, c), "k");
    let used = pm.declare(c, "k");
    let out = pm.feed(c, ToPm::UseLease { cdo: used, lease });
    assert!(
        out.iter().all(|(to, _)| *to != p),
        "the withdraw waits: {out:?}"
    );
    pm.now += Duration::from_secs(1);
    let now = pm.now;
    pm.m.handle_timeout(now);
    assert!(
        pm.drain().iter().all(|(to, _)| *to != p),
        "held past the grace while in use"
    );
    pm.now += Duration::from_secs(4);
    let now = pm.now;
    pm.m.handle_timeout(now);
    assert!(
        pm.drain().contains(&(p, done(Op::Withdraw, offer))),
        "abandoned at the transfer timeout"
    );
}

#[test]
fn a_lease_used_behind_the_consumers_held_operation_is_counted_in_order() {
    let mut w = World::new();
    let (c, p) = (w.join("consumer", true), w.join("producer", true));
    let auditor = w.join("auditor", true);
    subscribe(&mut w, c, SubscribeOptions::default(), 1);
    // The auditor holds the consumer's own offers (step 9) until it acknowledges.
    let acks = SubscribeOptions {
        require_ack: true,
        ..SubscribeOptions::default()
    };
    subscribe_to(
        &mut w,
        auditor,
        (EventKind::Offer, "(.user.step = 9)", acks),
        1,
    );
    let (offer, _) = w.offer(p, "f", &[3; 100], false);
    w.pump();
    let mut step9 = pool_core::attr::Attributes::new();
    step9.insert(".user.step".into(), pool_core::attr::AttrValue::Int(9));
    let (mine, held) = w.offer_sealed(c, "mine", (&[9; 100], false), step9);
    w.pump();
    assert_eq!(w.answer(c, held), None, "held for the auditor");
    // The consumer's declare waits behind its held offer; the lease's use and its report
    // follow it there, in order.
    w.hold = true;
    let (cdo, _) = demand(&mut w, c, "f", 2);
    w.pump();
    let (_, fetch) = w.held.pop().expect("the lease's fetch");
    w.client(c)
        .fetched(fetch.shard, fetch.transfer, Ok((vec![3; 100], None)));
    w.pump();
    assert_eq!(
        w.answer(c, 2),
        Some(&Ok(cdo)),
        "served by the lease meanwhile"
    );
    withdraw(&mut w, p, offer, 3);
    w.pump();
    assert_eq!(
        w.answer(p, 3),
        None,
        "the transfer is not reported to the PM yet"
    );
    // The auditor lets the consumer's offer go: everything behind it is handled.
    let serial = match w.apps[auditor].news[&1].last() {
        Some(news) => match news {
            pool_core::client::News::Event(e) => e.serial,
            other => panic!("{other:?}"),
        },
        None => panic!("no event for the auditor"),
    };
    let sub = match w.answer(auditor, 1) {
        Some(Ok(sub)) => *sub,
        other => panic!("{other:?}"),
    };
    w.client(auditor).ack(sub, serial).expect("ack");
    w.pump();
    assert_eq!(w.answer(c, held), Some(&Ok(mine)));
    assert_eq!(
        w.answer(p, 3),
        Some(&Ok(offer)),
        "the lease's transfer ended"
    );
    // Left: the auditor's own lease of the consumer's offer, unused.
    assert_eq!(w.manager().lease_count(), 1);
}

support::at_three_shards!(
    a_withdraw_revokes_unused_leases_and_waits_for_the_one_in_use,
    a_stalled_consumer_leaves_its_leases_of_memory_to_the_pm,
    a_lease_used_after_the_grace_turns_into_a_demand_the_pm_serves,
);
