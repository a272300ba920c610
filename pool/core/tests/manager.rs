//! The pool manager's state machine driven in memory: every transition and every refusal.

mod support;

use fabric_types::{Address, RemoteRegion};
use pool_core::attr::{AttrValue, Attributes, LOCAL_SIZE};
use pool_core::auth::prove;
use pool_core::proto::{
    AppId, FabricEndpoint, FromPm, OfferExtras, Op, Refusal, Source, ToPm, cdo_ids,
};
use pool_core::{ConnId, Credential};
use std::time::Duration;
use support::*;

#[test]
fn join_needs_the_secret_and_the_workflow() {
    let mut pm = Pm::new();
    let (c, _) = pm.connect();
    let early = ToPm::Declare {
        cdo: *cdo_ids(1).start(),
        name: "x".into(),
    };
    assert_eq!(
        pm.send(c, early),
        [(c, refused(Op::Declare, None, Refusal::NotJoined))]
    );
    assert_eq!(
        pm.send(c, join_msg("p", b"forged")),
        [(c, refused(Op::Join, None, Refusal::BadProof))]
    );
    assert_eq!(pm.m.take_closing(), [c]);
    // Nothing is served after a refused join.
    assert_eq!(
        pm.send(c, ToPm::Leave),
        [(c, refused(Op::Leave, None, Refusal::NotJoined))]
    );
    let (c2, _) = pm.connect();
    assert_eq!(
        pm.send(c2, join_msg("p", &[])),
        [(c2, refused(Op::Join, None, Refusal::BadProof))]
    );
    let (c3, n3) = pm.connect();
    let mut other = join_msg("p", &prove(SECRET, &n3, "other", "p", 0));
    if let ToPm::Join(j) = &mut other {
        j.workflow = "other".into();
    }
    assert_eq!(
        pm.send(c3, other),
        [(c3, refused(Op::Join, None, Refusal::WrongWorkflow))]
    );
    // A proof for another nonce is refused too.
    let (c5, _) = pm.connect();
    let replay = prove(SECRET, &n3, "wf", "p", 0);
    assert_eq!(
        pm.send(c5, join_msg("p", &replay)),
        [(c5, refused(Op::Join, None, Refusal::BadProof))]
    );
    let (c4, app) = pm.join("p");
    assert_eq!(pm.m.app_identity(app), Some(("p", 0)));
    assert_eq!(
        pm.send(c4, join_msg("p", &[])),
        [(c4, refused(Op::Join, None, Refusal::DuplicateJoin))]
    );
    assert_eq!(pm.m.app_count(), 1);
}

#[test]
fn provider_life_and_its_refusals() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (q, _) = pm.join("other");
    let first = pm.next_cdo(p);
    let empty = ToPm::Declare {
        cdo: first,
        name: String::new(),
    };
    assert_eq!(
        pm.send(p, empty),
        [(p, refused(Op::Declare, Some(first), Refusal::BadName))]
    );
    // Ids are the app's own: another app's, its app id alone, or one in use are refused.
    let theirs = pm.next_cdo(q);
    let bare = theirs & !((1 << pool_core::proto::CDO_SEQ_BITS) - 1);
    for bad in [theirs, bare] {
        let msg = ToPm::Declare {
            cdo: bad,
            name: "t".into(),
        };
        assert_eq!(
            pm.send(p, msg),
            [(p, refused(Op::Declare, Some(bad), Refusal::BadCdoId))]
        );
    }
    let cdo = pm.declare(p, "t");
    let again = ToPm::Declare {
        cdo,
        name: "u".into(),
    };
    assert_eq!(
        pm.send(p, again),
        [(p, refused(Op::Declare, Some(cdo), Refusal::BadCdoId))]
    );
    assert_eq!(
        pm.seal(q, cdo),
        [(q, refused(Op::Seal, Some(cdo), Refusal::UnknownCdo))]
    );
    let offer = ToPm::Offer {
        cdo,
        region: region(8),
        extras: OfferExtras::default(),
    };
    assert_eq!(
        pm.send(p, offer.clone()),
        [(
            p,
            refused(Op::Offer, Some(cdo), wrong(Op::Offer, "declared"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Withdraw { cdo }),
        [(
            p,
            refused(Op::Withdraw, Some(cdo), wrong(Op::Withdraw, "declared"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Retract { cdo }),
        [(
            p,
            refused(Op::Retract, Some(cdo), wrong(Op::Retract, "declared"))
        )]
    );
    assert_eq!(pm.seal(p, cdo), [(p, done(Op::Seal, cdo))]);
    assert_eq!(
        pm.seal(p, cdo),
        [(p, refused(Op::Seal, Some(cdo), wrong(Op::Seal, "sealed")))]
    );
    assert_eq!(pm.send(p, offer), [(p, done(Op::Offer, cdo))]);
    assert_eq!(
        pm.send(p, ToPm::Dispose { cdo, answer: true }),
        [(
            p,
            refused(Op::Dispose, Some(cdo), wrong(Op::Dispose, "offered"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Require { cdo }),
        [(
            p,
            refused(Op::Require, Some(cdo), wrong(Op::Require, "offered"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Withdraw { cdo }),
        [(p, done(Op::Withdraw, cdo))]
    );
    assert_eq!(
        pm.send(p, ToPm::Withdraw { cdo }),
        [(
            p,
            refused(Op::Withdraw, Some(cdo), wrong(Op::Withdraw, "withdrawn"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Dispose { cdo, answer: true }),
        [(p, done(Op::Dispose, cdo))]
    );
    // A dispose that asks for no answer gets none, unless refused.
    assert_eq!(
        pm.send(p, ToPm::Dispose { cdo, answer: false }),
        [(p, refused(Op::Dispose, Some(cdo), Refusal::UnknownCdo))]
    );
    let quiet = pm.declare(p, "q");
    assert!(
        pm.send(
            p,
            ToPm::Dispose {
                cdo: quiet,
                answer: false
            }
        )
        .is_empty()
    );
    assert_eq!(pm.m.cdo_count(), 0);
}

#[test]
fn a_demand_waits_for_the_offer_then_gets_a_ticket_and_ready() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let want = pm.declare(c, "t");
    assert!(
        pm.send(c, ToPm::Demand { cdo: want }).is_empty(),
        "nothing offered yet"
    );
    let (_, out) = pm.offer(p, "t", 4096);
    let (to, transfer, cdo, len) = ticket_of(&out);
    assert_eq!((to, cdo, len), (c, want, 4096));
    assert!(completes_demand(&out), "issued for a demand: {out:?}");
    assert_eq!(
        pm.send(c, ToPm::Demand { cdo: want }),
        [(
            c,
            refused(Op::Demand, Some(want), wrong(Op::Demand, "in transfer"))
        )]
    );
    assert_eq!(
        pm.send(
            c,
            ToPm::Dispose {
                cdo: want,
                answer: true
            }
        ),
        [(
            c,
            refused(Op::Dispose, Some(want), wrong(Op::Dispose, "in transfer"))
        )]
    );
    let ok = transferred(transfer);
    assert!(
        pm.send(c, ok.clone()).is_empty(),
        "the transfer's end completed the demand at the consumer"
    );
    assert_eq!(
        pm.send(c, ok),
        [(
            c,
            refused(Op::TransferDone, Some(transfer), Refusal::UnknownTransfer)
        )]
    );
    assert_eq!(
        pm.send(
            c,
            ToPm::Dispose {
                cdo: want,
                answer: true
            }
        ),
        [(c, done(Op::Dispose, want))]
    );
}

#[test]
fn require_moves_data_early_and_demand_then_returns_at_once() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let want = pm.declare(c, "t");
    assert_eq!(
        pm.send(c, ToPm::Require { cdo: want }),
        [(c, done(Op::Require, want))]
    );
    assert_eq!(
        pm.send(c, ToPm::Require { cdo: want }),
        [(
            c,
            refused(Op::Require, Some(want), wrong(Op::Require, "required"))
        )]
    );
    let (_, out) = pm.offer(p, "t", 64);
    let (_, transfer, _, _) = ticket_of(&out);
    assert!(!completes_demand(&out), "a require's ticket: {out:?}");
    assert!(
        pm.send(c, transferred(transfer)).is_empty(),
        "not demanded yet"
    );
    assert_eq!(
        pm.send(c, ToPm::Demand { cdo: want }),
        [(c, FromPm::Ready { cdo: want })]
    );
}

#[test]
fn retract_cancels_a_waiting_require() {
    let mut pm = Pm::new();
    let (c, _) = pm.join("consumer");
    let (p, _) = pm.join("producer");
    let want = pm.declare(c, "t");
    pm.send(c, ToPm::Require { cdo: want });
    assert_eq!(
        pm.send(c, ToPm::Retract { cdo: want }),
        [(c, done(Op::Retract, want))]
    );
    // A later offer tickets nobody.
    let (_, out) = pm.offer(p, "t", 8);
    assert_eq!(out.len(), 1, "{out:?}");
}

#[test]
fn withdraw_waits_for_the_transfer_in_flight_and_loses_no_demand() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let (offer, _) = pm.offer(p, "t", 1 << 20);
    let want = pm.declare(c, "t");
    let (_, transfer, _, _) = ticket_of(&pm.send(c, ToPm::Demand { cdo: want }));
    assert!(
        pm.send(p, ToPm::Withdraw { cdo: offer }).is_empty(),
        "withdraw must wait"
    );
    assert_eq!(
        pm.send(
            p,
            ToPm::Dispose {
                cdo: offer,
                answer: true
            }
        ),
        [(
            p,
            refused(
                Op::Dispose,
                Some(offer),
                wrong(Op::Dispose, "being withdrawn")
            )
        )]
    );
    let out = pm.send(c, transferred(transfer));
    assert_eq!(out, [(p, done(Op::Withdraw, offer))]);
}

#[test]
fn several_providers_share_the_load_and_attributes_travel() {
    let mut pm = Pm::new();
    let (p1, _) = pm.join("p1");
    let (p2, _) = pm.join("p2");
    pm.offer(p1, "t", 100);
    pm.offer(p2, "t", 100);
    let (c1, _) = pm.join("c1");
    let (c2, _) = pm.join("c2");
    let w1 = pm.declare(c1, "t");
    let w2 = pm.declare(c2, "t");
    let out1 = pm.send(c1, ToPm::Demand { cdo: w1 });
    let out2 = pm.send(c2, ToPm::Demand { cdo: w2 });
    let (source1, attrs1) = match &out1[0].1 {
        FromPm::Ticket {
            source, attributes, ..
        } => (source.clone(), attributes.clone()),
        other => panic!("{other:?}"),
    };
    // Same host, both on shm, different processes: an RMA read over shm.
    assert!(
        matches!(&source1, Source::Rma { endpoint, region, via: 0, memory } if endpoint.provider == "shm" && region.len == 100 && memory.as_deref().is_some_and(|m| (m.process == memory_of("p1") || m.process == memory_of("p2")) && m.file == Some(memory_file()))),
        "{source1:?}"
    );
    assert_eq!(attrs1.get(".user.step"), Some(&AttrValue::Int(2)));
    // The built-in name and size are the consumer's to add.
    assert_eq!(attrs1.get(LOCAL_SIZE), None);
    assert_eq!(attrs1.get(pool_core::attr::NAME), None);
    let (_, t1, _, _) = ticket_of(&out1);
    let (_, t2, _, _) = ticket_of(&out2);
    assert_ne!(t1, t2);
    for (c, transfer) in [(c1, t1), (c2, t2)] {
        let out = pm.send(c, transferred(transfer));
        assert!(out.is_empty(), "{out:?}");
    }
}

#[test]
fn zero_length_cdos_synchronise() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("syphon");
    let (c, _) = pm.join("producer");
    let want = pm.declare(c, "READY");
    assert!(pm.send(c, ToPm::Demand { cdo: want }).is_empty());
    let (_, out) = pm.offer(p, "READY", 0);
    let (_, transfer, _, len) = ticket_of(&out);
    assert_eq!(len, 0);
    assert!(completes_demand(&out));
    assert!(pm.send(c, transferred(transfer)).is_empty());
}

#[test]
fn a_demand_during_a_required_transfer_is_answered_by_ready_at_its_end() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    pm.offer(p, "t", 64);
    let want = pm.declare(c, "t");
    let out = pm.send(c, ToPm::Require { cdo: want });
    let (_, transfer, _, _) = ticket_of(&out);
    assert!(!completes_demand(&out), "{out:?}");
    assert!(
        pm.send(c, ToPm::Demand { cdo: want }).is_empty(),
        "in flight"
    );
    assert_eq!(
        pm.send(c, transferred(transfer)),
        [(c, FromPm::Ready { cdo: want })]
    );
}

#[test]
fn leave_waits_for_what_consumers_need_then_says_bye() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    pm.offer(p, "t", 8);
    let want = pm.declare(c, "t");
    let (_, transfer, _, _) = ticket_of(&pm.send(c, ToPm::Require { cdo: want }));
    assert!(
        pm.send(p, ToPm::Leave).is_empty(),
        "a transfer still reads from the producer"
    );
    assert_eq!(pm.send(c, transferred(transfer)), [(p, FromPm::Bye)]);
    assert_eq!(pm.m.take_closing(), [p]);
    // A consumer with nothing pending leaves at once.
    assert_eq!(pm.send(c, ToPm::Leave), [(c, FromPm::Bye)]);
    assert_eq!(pm.m.app_count(), 0);
}

#[test]
fn a_dead_provider_is_replaced_or_its_demands_fail() {
    let mut pm = Pm::new();
    let (p1, _) = pm.join("p1");
    let (p2, _) = pm.join("p2");
    pm.offer(p1, "shared", 8);
    pm.offer(p2, "shared", 8);
    pm.offer(p1, "only", 8);
    let (c, _) = pm.join("consumer");
    let shared = pm.declare(c, "shared");
    let demanded = pm.declare(c, "only");
    let required = pm.declare(c, "only");
    ticket_of(&pm.send(c, ToPm::Demand { cdo: shared }));
    ticket_of(&pm.send(c, ToPm::Demand { cdo: demanded }));
    // The require of "only" waits behind nothing: it gets its own ticket from p1 too.
    ticket_of(&pm.send(c, ToPm::Require { cdo: required }));
    pm.m.disconnected(p1);
    let out = pm.drain();
    assert!(
        out.contains(&(c, refused(Op::Demand, Some(demanded), Refusal::NoProvider))),
        "{out:?}"
    );
    let reticketed = out
        .iter()
        .any(|(_, m)| matches!(m, FromPm::Ticket { cdo, .. } if *cdo == shared));
    assert!(reticketed, "the shared name is served by p2 now: {out:?}");
    assert!(
        !out.iter()
            .any(|(_, m)| matches!(m, FromPm::Refused { cdo: Some(x), .. } if *x == required)),
        "a require keeps waiting: {out:?}"
    );
    // A new provider serves the waiting require.
    let (p3, _) = pm.join("p3");
    let (_, out) = pm.offer(p3, "only", 8);
    let (to, _, cdo, _) = ticket_of(&out);
    assert_eq!((to, cdo), (c, required));
}

#[test]
fn a_failed_transfer_is_retried_from_another_provider() {
    let mut pm = Pm::new();
    let (p1, _) = pm.join("p1");
    let (p2, _) = pm.join("p2");
    pm.offer(p1, "t", 8);
    pm.offer(p2, "t", 8);
    let (c, _) = pm.join("c");
    let want = pm.declare(c, "t");
    let (_, first, _, _) = ticket_of(&pm.send(c, ToPm::Demand { cdo: want }));
    let failed = ToPm::TransferDone {
        transfer: first,
        error: Some("peer gone".into()),
        direct: None,
    };
    let (_, second, _, _) = ticket_of(&pm.send(c, failed));
    assert_ne!(first, second);
    // When every provider failed, the demand waits (no ticket) for another offer.
    let again = ToPm::TransferDone {
        transfer: second,
        error: Some("again".into()),
        direct: None,
    };
    assert!(pm.send(c, again).is_empty());
}

fn tcp(name: &str) -> FabricEndpoint {
    FabricEndpoint {
        provider: "tcp;ofi_rxm".into(),
        address: Address(name.as_bytes().to_vec()),
    }
}

/// The source the PM plans for a consumer joined with (host, process, endpoint) reading an
/// offer of a provider joined with another such triple.
fn plan(
    provider: (&str, u64, Option<FabricEndpoint>),
    consumer: (&str, u64, Option<FabricEndpoint>),
) -> Source {
    let mut pm = Pm::new();
    let (p, _) = pm.join_at("p", provider.0, provider.1, provider.2);
    let (c, _) = pm.join_at("c", consumer.0, consumer.1, consumer.2);
    pm.offer(p, "x", 64);
    let want = pm.declare(c, "x");
    let out = pm.send(c, ToPm::Demand { cdo: want });
    match &out[0].1 {
        FromPm::Ticket { source, .. } => source.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn transport_planning_follows_locality() {
    // Same host and process: the provider's buffer itself.
    assert!(matches!(
        plan(("n1", 7, Some(shm("a"))), ("n1", 7, Some(shm("b")))),
        Source::SameProcess { len: 64, .. }
    ));
    // Same host, other process, both on shm: RMA over shm.
    assert!(matches!(
        plan(("n1", 7, Some(shm("a"))), ("n1", 8, Some(shm("b")))),
        Source::Rma { endpoint, .. } if *endpoint == shm("a")
    ));
    // shm does not cross hosts: stream.
    assert_eq!(
        plan(("n1", 7, Some(shm("a"))), ("n2", 8, Some(shm("b")))),
        Source::Stream { len: 64 }
    );
    // A network provider does.
    assert!(
        matches!(
            plan(("n1", 7, Some(tcp("a"))), ("n2", 8, Some(tcp("b")))),
            Source::Rma { endpoint, region, via: 0, memory: None } if *endpoint == tcp("a") && region.len == 64
        ),
        "no copying from memory across hosts"
    );
    // Different providers, or a side without fabric: stream.
    assert_eq!(
        plan(("n1", 7, Some(tcp("a"))), ("n1", 8, Some(shm("b")))),
        Source::Stream { len: 64 }
    );
    assert_eq!(
        plan(("n1", 7, None), ("n2", 8, Some(tcp("b")))),
        Source::Stream { len: 64 }
    );
}

#[test]
fn stream_transfers_are_relayed_in_checked_pieces() {
    let mut pm = Pm::new();
    let (p, _) = pm.join_at("p", "n1", 1, None);
    let (c, _) = pm.join_at("c", "n2", 2, None);
    let (q, _) = pm.join_at("q", "n3", 3, None);
    let (offer, _) = pm.offer(p, "x", 10);
    let want = pm.declare(c, "x");
    let out = pm.send(c, ToPm::Demand { cdo: want });
    let (_, transfer, _, len) = ticket_of(&out);
    assert_eq!(len, 10);
    let fetch = |offset, len| ToPm::Fetch {
        transfer,
        offset,
        len,
    };
    // The consumer's fetch becomes the provider's serve request.
    assert_eq!(
        pm.send(c, fetch(0, 6)),
        [(
            p,
            FromPm::Serve {
                transfer,
                cdo: offer,
                offset: 0,
                len: 6
            }
        )]
    );
    // Outside the CDO, or by someone else: refused.
    assert_eq!(
        pm.send(c, fetch(6, 5)),
        [(c, refused(Op::Fetch, Some(transfer), Refusal::BadRange))]
    );
    assert_eq!(
        pm.send(c, fetch(u64::MAX, 2)),
        [(c, refused(Op::Fetch, Some(transfer), Refusal::BadRange))]
    );
    assert_eq!(
        pm.send(q, fetch(0, 1)),
        [(
            q,
            refused(Op::Fetch, Some(transfer), Refusal::UnknownTransfer)
        )]
    );
    // The provider's chunk goes to the consumer; chunks from others or out of range do not.
    let piece = |offset, data: &[u8]| pool_core::proto::Chunk {
        transfer,
        offset,
        data: data.to_vec(),
    };
    let chunk = |offset, data: &[u8]| ToPm::Chunk(piece(offset, data));
    assert_eq!(
        pm.send(p, chunk(0, b"abcdef")),
        [(c, FromPm::Chunk(piece(0, b"abcdef")))]
    );
    assert_eq!(
        pm.send(c, chunk(0, b"x")),
        [(
            c,
            refused(Op::Chunk, Some(transfer), Refusal::UnknownTransfer)
        )]
    );
    assert_eq!(
        pm.send(p, chunk(8, b"xyz")),
        [(p, refused(Op::Chunk, Some(transfer), Refusal::BadRange))]
    );
    // An RMA transfer is no stream: fetching it is refused.
    let (c2, _) = pm.join_at("c2", "n1", 9, Some(shm("c2")));
    let (p2, _) = pm.join_at("p2", "n1", 10, Some(shm("p2")));
    pm.offer(p2, "y", 4);
    let w2 = pm.declare(c2, "y");
    let out = pm.send(c2, ToPm::Demand { cdo: w2 });
    let (_, rma, _, _) = ticket_of(&out);
    assert_eq!(
        pm.send(
            c2,
            ToPm::Fetch {
                transfer: rma,
                offset: 0,
                len: 1
            }
        ),
        [(c2, refused(Op::Fetch, Some(rma), Refusal::UnknownTransfer))]
    );
}

#[test]
fn pmix_credentials_decide_when_checked_or_required() {
    let mut pm = Pm::new();
    let join = |pm: &mut Pm, credential: Credential| {
        let (conn, nonce) = pm.connect();
        let msg = join_msg("p", &prove(SECRET, &nonce, "wf", "p", 0));
        pm.m.handle_checked(conn, msg, credential);
        (conn, pm.drain())
    };
    // Unchecked is fine unless required; a valid one always; an invalid one never.
    let (c, out) = join(&mut pm, Credential::Unchecked);
    assert!(matches!(out.as_slice(), [(x, FromPm::Welcome { .. })] if *x == c));
    let (c, out) = join(&mut pm, Credential::Invalid("forged".into()));
    assert_eq!(
        out,
        [(
            c,
            refused(Op::Join, None, Refusal::BadCredential("forged".into()))
        )]
    );
    assert_eq!(pm.m.take_closing(), [c]);
    pm.m.require_credentials(true);
    let (c, out) = join(&mut pm, Credential::Unchecked);
    assert!(
        matches!(out.as_slice(), [(x, FromPm::Refused { why: Refusal::BadCredential(_), .. })] if *x == c),
        "{out:?}"
    );
    let (c, out) = join(&mut pm, Credential::Valid);
    assert!(matches!(out.as_slice(), [(x, FromPm::Welcome { .. })] if *x == c));
}

// ---- Events: subscriptions, selectors, signal-before and acknowledgements ----

use pool_core::events::{EventKind, EventKinds, SubscribeOptions};
use pool_core::selector::{Expr, Selector};

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
    pm.m.set_time(pm.at(1_000));
    let two = pm.sealed(p, "field-2", 2);
    let three = pm.sealed(p, "field-3", 3);
    let out = pm.send(p, offer_msg(two, 64));
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
    let out = pm.send(p, offer_msg(three, 64));
    assert!(
        events_to(&out, s).is_empty(),
        "step 3 does not match: {out:?}"
    );
    // Declares and seals are other kinds: not delivered.
    pm.sealed(p, "field-4", 2);
    assert!(pm.drain().is_empty());
    // Refused operations raise no event.
    let out = pm.send(p, offer_msg(two, 64));
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
    let out = pm.send(p, offer_msg(cdo, 8));
    let seen = events_to(&out, s);
    assert_eq!(out.len(), 1, "only the subscriber hears of it: {out:?}");
    assert!(seen[0].before && seen[0].needs_ack);
    assert_eq!(pm.m.held_count(), 1);
    // The archiver requires the CDO before acknowledging: the offer has not happened yet.
    let mine = pm.declare(s, "field");
    assert_eq!(
        pm.send(s, ToPm::Require { cdo: mine }),
        [(s, done(Op::Require, mine))]
    );
    // The producer's next operation waits behind the held one.
    assert!(pm.send(p, ToPm::Withdraw { cdo }).is_empty());
    let out = pm.send(
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
    let out = pm.send(s, transferred(transfer));
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
    let out = pm.send(
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
    assert!(pm.send(c, ToPm::Require { cdo }).is_empty());
    assert_eq!(pm.m.held_count(), 1);
    let out = pm.send(
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
    let out = pm.send(
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
    assert!(pm.send(s, ToPm::Ack { sub, serial: 999 }).is_empty());
    let out = pm.send(
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
    let out = pm.send(s, offer_msg(cdo, 8));
    let events = events_to(&out, s);
    assert_eq!(events.len(), 1, "{out:?}");
    assert!(events[0].needs_ack);
    assert!(
        !out.contains(&(s, done(Op::Offer, cdo))),
        "the completion waits: {out:?}"
    );
    let serial = events[0].serial;
    assert_eq!(
        pm.send(s, ToPm::Ack { sub, serial }),
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
    pm.m.set_time(pm.at(0));
    assert_eq!(pm.m.poll_timeout(), None, "nothing held, no timer");
    let (p, _) = pm.join("producer");
    let cdo = pm.sealed(p, "field", 1);
    let serial = events_to(&pm.send(p, offer_msg(cdo, 8)), s)[0].serial;
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
        pm.send(s, ToPm::Ack { sub, serial }),
        [(s, refused(Op::Ack, Some(sub), Refusal::UnknownSubscription))]
    );
    let next = pm.sealed(p, "field-2", 1);
    assert_eq!(pm.send(p, offer_msg(next, 8)), [(p, done(Op::Offer, next))]);
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
    let out = pm.send(p, offer_msg(cdo, 8));
    assert_eq!(
        (events_to(&out, s).len(), events_to(&out, s2).len()),
        (1, 1)
    );
    pm.m.disconnected(s);
    assert!(
        !pm.drain().iter().any(|(c, _)| *c == p),
        "the other subscriber still holds it"
    );
    let out = pm.send(s2, ToPm::Unsubscribe { sub: sub2 });
    assert!(out.contains(&(s2, done(Op::Unsubscribe, sub2))), "{out:?}");
    assert!(out.contains(&(p, done(Op::Offer, cdo))), "{out:?}");
    let out = pm.send(s2, ToPm::Unsubscribe { sub: sub2 });
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
    assert!(events_to(&pm.send(s, offer_msg(own, 1)), s).is_empty());
    let (p, producer) = pm.join("producer");
    let (c, consumer) = pm.join("consumer");
    let cdo = pm.sealed(p, "field", 1);
    let out = pm.send(p, offer_msg(cdo, 16));
    assert_eq!(events_to(&out, s)[0].app, producer);
    let want = pm.declare(c, "field");
    let out = pm.send(c, ToPm::Demand { cdo: want });
    let started = events_to(&out, s);
    assert_eq!(started[0].kind, EventKind::TransportStarted);
    assert_eq!(
        (started[0].app, started[0].cdo.as_deref()),
        (consumer, Some("field"))
    );
    assert!(started[0].detail.contains("rma"), "{:?}", started[0].detail);
    let (_, transfer, _, _) = ticket_of(&out);
    let out = pm.send(c, transferred(transfer));
    assert_eq!(events_to(&out, s)[0].kind, EventKind::TransportCompleted);
    pm.m.disconnected(p);
    let left = events_to(&pm.drain(), s);
    assert_eq!((left[0].kind, left[0].app), (EventKind::AppLeave, producer));
    assert!(
        left[0].detail.contains("connection lost"),
        "{:?}",
        left[0].detail
    );
    assert_eq!(left[0].component, "producer");
    pm.m.fabric_event("link eth1 down");
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
    let out = pm.send(conn, join_msg("newcomer", &proof));
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
    let out = pm.send(s, msg);
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
    let e = &events_to(&pm.send(conn, join_msg("late", &proof)), s)[0];
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
    let out = pm.send(
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
    let out = pm.send(
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

/// A tcp endpoint bound to `ip` (a `sockaddr_in`, as libfabric's IP providers name them).
fn tcp_at(ip: [u8; 4]) -> FabricEndpoint {
    let mut sa = vec![0u8; 16];
    sa[..2].copy_from_slice(&2u16.to_ne_bytes()); // AF_INET
    sa[2..4].copy_from_slice(&4000u16.to_be_bytes());
    sa[4..8].copy_from_slice(&ip);
    FabricEndpoint {
        provider: "tcp;ofi_rxm".into(),
        address: Address(sa),
    }
}

#[test]
fn a_link_down_moves_new_transfers_off_it_until_it_is_up() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("watcher");
    pm.subscribe(s, EventKind::Fabric, "", SubscribeOptions::default());
    let (p, _) = pm.join_at("p", "node1", 1, Some(tcp_at([10, 1, 0, 1])));
    let (c, _) = pm.join_at("c", "node2", 2, Some(tcp_at([10, 1, 0, 2])));
    let demand = |pm: &mut Pm, name: &str| {
        pm.offer(p, name, 64);
        let want = pm.declare(c, name);
        let out = pm.send(c, ToPm::Demand { cdo: want });
        out.iter()
            .find_map(|(_, m)| match m {
                FromPm::Ticket { source, .. } => Some(source.kind()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{out:?}"))
    };
    assert_eq!(demand(&mut pm, "before"), "rma");
    let path1 = ["10.1.0.9/24".parse().expect("subnet")];
    pm.m.link_changed("veth1", &path1, false);
    let e = &events_to(&pm.drain(), s)[0];
    assert_eq!(e.kind, EventKind::Fabric);
    assert_eq!(e.detail, "link veth1 down (10.1.0.9/24)");
    assert_eq!(demand(&mut pm, "during"), "stream");
    // The same change reported again (by another app of the node, say) is not news.
    pm.m.link_changed("veth1", &path1, false);
    assert!(events_to(&pm.drain(), s).is_empty());
    pm.m.link_changed("veth1", &path1, true);
    assert_eq!(
        events_to(&pm.drain(), s)[0].detail,
        "link veth1 up (10.1.0.9/24)"
    );
    pm.m.link_changed("veth1", &path1, true);
    assert!(events_to(&pm.drain(), s).is_empty());
    assert_eq!(demand(&mut pm, "after"), "rma");
}

#[test]
fn transport_events_say_how_and_why() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("watcher");
    pm.subscribe(
        s,
        EventKind::TransportStarted,
        "",
        SubscribeOptions::default(),
    );
    let (p, _) = pm.join_at("p", "node1", 1, Some(tcp_at([10, 1, 0, 1])));
    let (shm_p, _) = pm.join_at("shm-p", "node1", 2, Some(shm("shm-p")));
    let (c, _) = pm.join_at("c", "node2", 3, Some(tcp_at([10, 2, 0, 3])));
    let (bare, _) = pm.join_at("bare", "node2", 4, None);
    let detail = |pm: &mut Pm, from: ConnId, to: ConnId, name: &str| {
        pm.offer(from, name, 64);
        let want = pm.declare(to, name);
        let out = pm.send(to, ToPm::Demand { cdo: want });
        events_to(&out, s)[0].detail.clone()
    };
    assert!(
        detail(&mut pm, p, c, "a").ends_with("by rma over tcp;ofi_rxm from 10.1.0.1 to 10.2.0.3"),
        "names the addresses"
    );
    assert!(
        detail(&mut pm, shm_p, c, "b")
            .ends_with("by stream: no common fabric provider (consumer tcp;ofi_rxm, provider shm)")
    );
    assert!(
        detail(&mut pm, p, bare, "c").ends_with("by stream: the consumer has no fabric endpoint")
    );
    pm.m.link_changed("eth1", &["10.1.0.9/24".parse().expect("subnet")], false);
    pm.drain();
    let why = detail(&mut pm, p, c, "d");
    assert!(
        why.ends_with(
            "by stream: the provider's endpoint 10.1.0.1 is on a link that is down (10.1.0.9/24)"
        ),
        "{why}"
    );
    // `srun --maestro-nic=lo` on several nodes: 127.0.0.1 on another host is that host.
    let (lo, _) = pm.join_at("lo", "node1", 5, Some(tcp_at([127, 0, 0, 1])));
    let (lo_near, _) = pm.join_at("lo-near", "node1", 6, Some(tcp_at([127, 0, 0, 1])));
    let (lo_far, _) = pm.join_at("lo-far", "node2", 7, Some(tcp_at([127, 0, 0, 1])));
    let near = detail(&mut pm, lo, lo_near, "e");
    assert!(near.contains("by rma over"), "{near}");
    let far = detail(&mut pm, lo, lo_far, "f");
    assert!(
        far.ends_with(
            "by stream: the provider's endpoint 127.0.0.1 is a loopback address, which does not reach from node1 to node2"
        ),
        "{far}"
    );
}

#[test]
fn transfers_take_the_next_common_network_when_the_chosen_nics_cannot() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("watcher");
    pm.subscribe(
        s,
        EventKind::TransportStarted,
        "",
        SubscribeOptions::default(),
    );
    // Two networks, 10.1.0.0/24 and 10.2.0.0/24. The producer chose its NIC on net 2, the
    // consumer on net 1; each also has an endpoint on the other network.
    let (p, _) = pm.join_on(
        "p",
        "node1",
        &[
            (tcp_at([10, 2, 0, 1]), "10.2.0.1/24"),
            (tcp_at([10, 1, 0, 1]), "10.1.0.1/24"),
        ],
    );
    let (c, _) = pm.join_on(
        "c",
        "node2",
        &[
            (tcp_at([10, 1, 0, 2]), "10.1.0.2/24"),
            (tcp_at([10, 2, 0, 2]), "10.2.0.2/24"),
        ],
    );
    let regions = |key: u64| {
        (
            RemoteRegion {
                addr: 0,
                key,
                len: 64,
            },
            OfferExtras::new(
                vec![RemoteRegion {
                    addr: 0,
                    key: key + 1000,
                    len: 64,
                }],
                None,
            ),
        )
    };
    let transfer = |pm: &mut Pm, name: &str, key: u64| {
        let cdo = pm.declare(p, name);
        assert_eq!(pm.seal(p, cdo), [(p, done(Op::Seal, cdo))]);
        let (region, extras) = regions(key);
        let offer = ToPm::Offer {
            cdo,
            region,
            extras,
        };
        assert_eq!(pm.send(p, offer), [(p, done(Op::Offer, cdo))]);
        let want = pm.declare(c, name);
        let out = pm.send(c, ToPm::Demand { cdo: want });
        let source = out
            .iter()
            .find_map(|(_, m)| match m {
                FromPm::Ticket { source, .. } => Some(source.clone()),
                _ => None,
            })
            .expect("ticket");
        (source, events_to(&out, s)[0].detail.clone())
    };
    // The producer's chosen NIC (net 2) with the consumer's endpoint on net 2 (`via` 1).
    let (source, detail) = transfer(&mut pm, "a", 1);
    match source {
        Source::Rma { region, via, .. } => assert_eq!((region.key, via), (1, 1)),
        other => panic!("{other:?}"),
    }
    assert!(
        detail.contains("by rma over tcp;ofi_rxm from 10.2.0.1 to 10.2.0.2 (another network: the consumer's network 10.1.0.2/24 does not reach the provider's endpoint 10.2.0.1)"),
        "{detail}"
    );
    // Net 2 goes down: the producer's other endpoint on net 1, with its own key.
    pm.m.link_changed("eth1", &["10.2.0.1/24".parse().expect("subnet")], false);
    let (source, detail) = transfer(&mut pm, "b", 2);
    match source {
        Source::Rma { region, via, .. } => assert_eq!((region.key, via), (1002, 0)),
        other => panic!("{other:?}"),
    }
    assert!(detail.contains("from 10.1.0.1 to 10.1.0.2"), "{detail}");
}

#[test]
fn an_app_reports_what_its_pmix_host_saw() {
    use pool_core::events::FabricChange;
    let mut pm = Pm::new();
    pm.m.set_policy(Policy {
        reporters: vec!["other-job".into()],
        ..Policy::default()
    });
    let (s, _) = pm.join("watcher");
    pm.subscribe(s, EventKind::Fabric, "", SubscribeOptions::default());
    let (a, _) = pm.join("other-job");
    let lost = FabricChange::Other("PMIx event PROC-ABORTED for process job:3".into());
    let out = pm.send(a, ToPm::Report { change: lost });
    assert_eq!(
        events_to(&out, s)[0].detail,
        "PMIx event PROC-ABORTED for process job:3"
    );
    assert!(
        out.iter().all(|(c, _)| *c == s),
        "nothing is answered: {out:?}"
    );
    let link = FabricChange::Link {
        name: "ib0".into(),
        addresses: vec!["10.9.0.1/16".parse().expect("subnet")],
        up: false,
    };
    let out = pm.send(a, ToPm::Report { change: link });
    assert_eq!(events_to(&out, s)[0].detail, "link ib0 down (10.9.0.1/16)");
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
    assert_eq!(pm.send(p, seal_offer(cdo)), [(p, done(Op::Offer, cdo))]);
    // Refused as an offer when the CDO is not just declared, or not the app's.
    assert_eq!(
        pm.send(p, seal_offer(cdo)),
        [(
            p,
            refused(Op::Offer, Some(cdo), wrong(Op::Offer, "offered"))
        )]
    );
    let (other, _) = pm.join("other");
    assert_eq!(
        pm.send(other, seal_offer(cdo)),
        [(other, refused(Op::Offer, Some(cdo), Refusal::UnknownCdo))]
    );
    // Consumers get the sealed attributes.
    let (c, _) = pm.join("consumer");
    let want = pm.declare(c, "fast");
    let out = pm.send(c, ToPm::Demand { cdo: want });
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
    let out = pm.send(p, seal_offer(cdo));
    let kinds: Vec<EventKind> = events_to(&out, s).iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Seal, EventKind::Offer]);
    assert!(out.contains(&(p, done(Op::Seal, cdo))), "{out:?}");
    assert!(out.contains(&(p, done(Op::Offer, cdo))), "{out:?}");
}

use pool_core::policy::{NameOwner, Policy};

/// A policy with small limits for the quota tests.
fn small(policy: impl FnOnce(&mut Policy)) -> Pm {
    let mut pm = Pm::new();
    let mut p = Policy::default();
    policy(&mut p);
    pm.m.set_policy(p);
    pm
}

fn is_quota(out: &[(ConnId, FromPm)], op: Op) -> bool {
    matches!(out, [(_, FromPm::Refused { op: o, why: Refusal::Quota(_), .. })] if *o == op)
}

#[test]
fn an_app_holds_at_most_its_bytes_and_gets_them_back_at_dispose() {
    let mut pm = small(|p| p.max_app_bytes = 10 * (policy_cdo_cost() + 4096));
    let (a, _) = pm.join("greedy");
    let name = "n".repeat(4096);
    let mut cdos = Vec::new();
    loop {
        let cdo = pm.next_cdo(a);
        let out = pm.send(
            a,
            ToPm::Declare {
                cdo,
                name: name.clone(),
            },
        );
        if !out.is_empty() {
            assert!(is_quota(&out, Op::Declare), "{out:?}");
            let FromPm::Refused { why, .. } = &out[0].1 else {
                unreachable!()
            };
            assert!(why.to_string().contains("--max-app-bytes"), "{why}");
            break;
        }
        cdos.push(cdo);
    }
    assert_eq!(cdos.len(), 10, "ten 4 KiB names fit, the eleventh does not");
    // Another app is not affected.
    let (b, _) = pm.join("honest");
    pm.declare(b, "fine");
    // Disposing gives the bytes back.
    for cdo in cdos.drain(..5) {
        pm.send(a, ToPm::Dispose { cdo, answer: false });
    }
    let cdo = pm.next_cdo(a);
    assert!(pm.send(a, ToPm::Declare { cdo, name }).is_empty());
}

fn policy_cdo_cost() -> usize {
    pool_core::policy::CDO_COST
}

#[test]
fn attributes_and_subscriptions_are_bounded() {
    let mut pm = small(|p| {
        p.max_attribute_bytes = 1000;
        p.max_subscriptions = 2;
    });
    let (a, _) = pm.join("big");
    let cdo = pm.declare(a, "x");
    let big = Attributes::from([(".user.blob".to_string(), AttrValue::Blob(vec![0; 2000]))]);
    let out = pm.send(
        a,
        ToPm::Seal {
            cdo,
            attributes: big.clone(),
        },
    );
    assert!(is_quota(&out, Op::Seal), "{out:?}");
    let out = pm.send(
        a,
        ToPm::SealOffer {
            cdo,
            attributes: big,
            region: region(8),
            extras: OfferExtras::default(),
        },
    );
    assert!(is_quota(&out, Op::Offer), "{out:?}");
    // Within the limit it seals.
    let fine = Attributes::from([(".user.blob".to_string(), AttrValue::Blob(vec![0; 100]))]);
    assert_eq!(
        pm.send(
            a,
            ToPm::Seal {
                cdo,
                attributes: fine
            }
        ),
        [(a, done(Op::Seal, cdo))]
    );
    pm.subscribe(a, EventKind::Offer, "", SubscribeOptions::default());
    let second = pm.subscribe(a, EventKind::Offer, "", SubscribeOptions::default());
    let third = ToPm::Subscribe {
        local: 5,
        kinds: EventKind::Offer.into(),
        selector: Box::new(Expr::All),
        options: SubscribeOptions::default(),
    };
    assert!(is_quota(&pm.send(a, third.clone()), Op::Subscribe));
    pm.send(a, ToPm::Unsubscribe { sub: second });
    assert!(matches!(
        pm.send(a, third).as_slice(),
        [(_, FromPm::Subscribed { .. })]
    ));
}

#[test]
fn owned_names_are_offered_by_their_component_only() {
    assert!("field-".parse::<NameOwner>().is_err());
    let mut pm = small(|p| p.owners = vec!["field-=producer".parse().expect("owner")]);
    let (mallory, _) = pm.join("mallory");
    let (producer, _) = pm.join("producer");
    let (consumer, _) = pm.join("consumer");
    let evil = pm.sealed(mallory, "field-7", 1);
    let out = pm.send(mallory, offer_msg(evil, 8));
    assert!(
        matches!(&out[..], [(_, FromPm::Refused { op: Op::Offer, why: Refusal::NotAllowed(why), .. })] if why.contains("\"producer\"")),
        "{out:?}"
    );
    // Unowned names are anybody's; the owner offers its own.
    let other = pm.sealed(mallory, "scratch", 1);
    assert_eq!(
        pm.send(mallory, offer_msg(other, 8)),
        [(mallory, done(Op::Offer, other))]
    );
    let good = pm.sealed(producer, "field-7", 1);
    assert_eq!(
        pm.send(producer, offer_msg(good, 8)),
        [(producer, done(Op::Offer, good))]
    );
    // The consumer's ticket names the provider.
    let want = pm.declare(consumer, "field-7");
    let out = pm.send(consumer, ToPm::Demand { cdo: want });
    let provider = out.iter().find_map(|(_, m)| match m {
        FromPm::Ticket { provider, .. } => Some(provider.to_string()),
        _ => None,
    });
    assert_eq!(provider.as_deref(), Some("producer:0"));
}

#[test]
fn a_transfer_that_pins_a_withdrawn_offer_is_abandoned_at_its_deadline() {
    let mut pm = small(|p| p.transfer_timeout = Duration::from_secs(60));
    pm.m.set_time(pm.at(0));
    let (p, _) = pm.join("producer");
    let (pinner, _) = pm.join("pinner");
    let (honest, _) = pm.join("honest");
    let cdo = pm.sealed(p, "data", 1);
    pm.send(p, offer_msg(cdo, 64));
    // The pinner takes a ticket and never reports the transfer done.
    let want = pm.declare(pinner, "data");
    let (_, transfer, ..) = ticket_of(&pm.send(pinner, ToPm::Demand { cdo: want }));
    assert_eq!(pm.m.poll_timeout(), None, "no deadline while nobody waits");
    // An honest consumer waits for the same name.
    let waits = pm.declare(honest, "data");
    let out = pm.send(honest, ToPm::Demand { cdo: waits });
    let (_, honest_transfer, ..) = ticket_of(&out);
    pm.send(honest, transferred(honest_transfer));
    // The provider withdraws: pinned until the deadline, then released.
    assert!(pm.send(p, ToPm::Withdraw { cdo }).is_empty());
    assert_eq!(pm.m.poll_timeout(), Some(pm.at(60_000_000_000)));
    pm.m.handle_timeout(pm.at(59_000_000_000));
    assert!(pm.drain().is_empty());
    pm.m.handle_timeout(pm.at(60_000_000_000));
    let out = pm.drain();
    assert!(out.contains(&(p, done(Op::Withdraw, cdo))), "{out:?}");
    // The pinner's demand fails (no provider left); its late report is refused.
    assert!(
        out.contains(&(pinner, refused(Op::Demand, Some(want), Refusal::NoProvider))),
        "{out:?}"
    );
    assert_eq!(
        pm.send(pinner, transferred(transfer)),
        [(
            pinner,
            refused(Op::TransferDone, Some(transfer), Refusal::UnknownTransfer)
        )]
    );
    assert_eq!(pm.m.poll_timeout(), None);
}

#[test]
fn memory_is_announced_only_by_the_process_it_names() {
    let mut pm = Pm::new();
    // The producer's connection is verified to come from its own pid.
    let (conn, nonce) = (100, [9u8; 32]);
    pm.m.connected_from(conn, nonce, Some(memory_of("producer").pid));
    pm.drain();
    let proof = prove(SECRET, &nonce, "wf", "producer", 0);
    let mut msg = join_msg("producer", &proof);
    if let ToPm::Join(j) = &mut msg {
        j.process = 555;
    }
    assert!(matches!(
        pm.send(conn, msg)[..],
        [(_, FromPm::Welcome { .. })]
    ));
    pm.apps.insert(conn, (1, *cdo_ids(1).start() - 1));
    // Mallory replays the producer's pid and token from another process.
    let (conn2, nonce2) = (101, [8u8; 32]);
    pm.m.connected(conn2, nonce2);
    pm.drain();
    let proof = prove(SECRET, &nonce2, "wf", "mallory", 0);
    let mut msg = join_msg("mallory", &proof);
    if let ToPm::Join(j) = &mut msg {
        j.process = 666;
        j.memory = Some(memory_of("producer"));
    }
    let app = match pm.send(conn2, msg)[..] {
        [(_, FromPm::Welcome { app, .. })] => app,
        ref other => panic!("{other:?}"),
    };
    pm.apps.insert(conn2, (app, *cdo_ids(app).start() - 1));
    // A connection verified as another pid may not announce the producer's memory either.
    let (conn3, nonce3) = (102, [7u8; 32]);
    pm.m.connected_from(conn3, nonce3, Some(4242));
    pm.drain();
    let proof = prove(SECRET, &nonce3, "wf", "liar", 0);
    let mut msg = join_msg("liar", &proof);
    if let ToPm::Join(j) = &mut msg {
        j.process = 777;
        j.memory = Some(memory_of("producer"));
    }
    assert!(matches!(
        pm.send(conn3, msg)[..],
        [(_, FromPm::Welcome { .. })]
    ));
    // A consumer gets mallory's offer by shared memory but never "straight from the
    // producer's memory".
    let (consumer, _) = pm.join("consumer");
    let evil = pm.sealed(conn2, "x", 1);
    pm.send(conn2, offer_msg(evil, 4096));
    let want = pm.declare(consumer, "x");
    let out = pm.send(consumer, ToPm::Demand { cdo: want });
    let memory = out.iter().find_map(|(_, m)| match m {
        FromPm::Ticket {
            source: Source::Rma { memory, .. },
            ..
        } => Some(memory.clone()),
        _ => None,
    });
    assert_eq!(memory, Some(None), "{out:?}");
    // The producer's own offers still name its memory.
    let good = pm.sealed(conn, "y", 1);
    pm.send(conn, offer_msg(good, 4096));
    let want = pm.declare(consumer, "y");
    let out = pm.send(consumer, ToPm::Demand { cdo: want });
    assert!(
        out.iter().any(|(_, m)| matches!(m, FromPm::Ticket { source: Source::Rma { memory: Some(m), .. }, .. } if m.process == memory_of("producer"))),
        "{out:?}"
    );
}

#[test]
fn apps_report_only_their_own_links_unless_they_are_reporters() {
    use pool_core::events::FabricChange;
    let mut pm = Pm::new();
    let (s, _) = pm.join("watcher");
    pm.subscribe(s, EventKind::Fabric, "", SubscribeOptions::default());
    let (a, _) = pm.join_on("app", "n1", &[(tcp("a"), "10.1.0.2/24")]);
    let link = |addr: &str| FabricChange::Link {
        name: "eth0".into(),
        addresses: vec![addr.parse().expect("subnet")],
        up: false,
    };
    // Another host's link: refused, nobody hears of it.
    let out = pm.send(
        a,
        ToPm::Report {
            change: link("10.2.0.1/24"),
        },
    );
    assert!(
        matches!(&out[..], [(c, FromPm::Refused { op: Op::Report, why: Refusal::NotAllowed(_), .. })] if *c == a),
        "{out:?}"
    );
    let out = pm.send(
        a,
        ToPm::Report {
            change: FabricChange::Other("node n2 lost".into()),
        },
    );
    assert!(matches!(
        &out[..],
        [(
            _,
            FromPm::Refused {
                why: Refusal::NotAllowed(_),
                ..
            }
        )]
    ));
    // Its own link: subscribers hear of it.
    let out = pm.send(
        a,
        ToPm::Report {
            change: link("10.1.0.2/24"),
        },
    );
    assert_eq!(events_to(&out, s)[0].detail, "link eth0 down (10.1.0.2/24)");
}

#[test]
fn small_offers_travel_inline_within_the_budget_until_withdrawn() {
    let mut pm = small(|p| p.max_inline_bytes = 100);
    let (s, _) = pm.join("watcher");
    pm.subscribe(
        s,
        EventKind::TransportStarted,
        "",
        SubscribeOptions::default(),
    );
    let (p, _) = pm.join_at("p", "node1", 1, Some(tcp_at([10, 1, 0, 1])));
    let (c, _) = pm.join_at("c", "node2", 2, Some(tcp_at([10, 1, 0, 2])));
    // An offer carrying `bytes` (its region `len` long).
    let offer = |pm: &mut Pm, name: &str, bytes: &[u8], len: u64| {
        let cdo = pm.declare(p, name);
        assert_eq!(pm.seal(p, cdo), [(p, done(Op::Seal, cdo))]);
        let extras = OfferExtras::new(Vec::new(), None).with_inline(bytes);
        let out = pm.send(
            p,
            ToPm::Offer {
                cdo,
                region: region(len),
                extras,
            },
        );
        assert_eq!(out, [(p, done(Op::Offer, cdo))]);
        cdo
    };
    // The source of a demand of `name`, and what the transport event says.
    let demand = |pm: &mut Pm, name: &str| {
        let want = pm.declare(c, name);
        let out = pm.send(c, ToPm::Demand { cdo: want });
        let source = out
            .iter()
            .find_map(|(_, m)| match m {
                FromPm::Ticket { source, .. } => Some(source.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{out:?}"));
        (source, events_to(&out, s)[0].detail.clone())
    };
    let a = offer(&mut pm, "a", &[7; 60], 60);
    let (source, detail) = demand(&mut pm, "a");
    match source {
        Source::Inline { bytes } => assert_eq!(&*bytes.0, &[7; 60][..]),
        other => panic!("{other:?}"),
    }
    assert!(
        detail.ends_with("by inline (60 bytes with the ticket)"),
        "{detail}"
    );
    // 60 of the 100 bytes are held: the next 60-byte offer keeps its bytes.
    offer(&mut pm, "b", &[8; 60], 60);
    assert_eq!(demand(&mut pm, "b").0.kind(), "rma");
    // Bytes that do not match the region are not kept either.
    offer(&mut pm, "c", &[9; 10], 20);
    assert_eq!(demand(&mut pm, "c").0.kind(), "rma");
    // A withdraw gives its bytes back at once (the ticket handed out keeps its own).
    pm.send(p, ToPm::Withdraw { cdo: a });
    offer(&mut pm, "d", &[10; 60], 60);
    assert_eq!(demand(&mut pm, "d").0.kind(), "inline");
}
