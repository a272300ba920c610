//! The pool manager's state machine driven in memory: every transition and every refusal.

mod support;

use pool_core::Identity;
use pool_core::attr::{AttrValue, LOCAL_SIZE};
use pool_core::auth::prove;
use pool_core::proto::{FabricEndpoint, FromPm, OfferExtras, Op, Refusal, Source, ToPm, cdo_ids};
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
        pm.feed(c, early),
        [(c, refused(Op::Declare, None, Refusal::NotJoined))]
    );
    assert_eq!(
        pm.feed(c, join_msg("p", b"forged")),
        [(c, refused(Op::Join, None, Refusal::BadProof))]
    );
    assert_eq!(pm.m.take_closing(), [c]);
    // Nothing is served after a refused join.
    assert_eq!(
        pm.feed(c, ToPm::Leave),
        [(c, refused(Op::Leave, None, Refusal::NotJoined))]
    );
    let (c2, _) = pm.connect();
    assert_eq!(
        pm.feed(c2, join_msg("p", &[])),
        [(c2, refused(Op::Join, None, Refusal::BadProof))]
    );
    let (c3, n3) = pm.connect();
    let mut other = join_msg("p", &prove(SECRET, &n3, "other", "p", 0));
    if let ToPm::Join(j) = &mut other {
        j.workflow = "other".into();
    }
    assert_eq!(
        pm.feed(c3, other),
        [(c3, refused(Op::Join, None, Refusal::WrongWorkflow))]
    );
    // A proof for another nonce is refused too.
    let (c5, _) = pm.connect();
    let replay = prove(SECRET, &n3, "wf", "p", 0);
    assert_eq!(
        pm.feed(c5, join_msg("p", &replay)),
        [(c5, refused(Op::Join, None, Refusal::BadProof))]
    );
    let (c4, app) = pm.join("p");
    assert_eq!(pm.m.app_identity(app), Some(("p", 0)));
    assert_eq!(
        pm.feed(c4, join_msg("p", &[])),
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
        pm.feed(p, empty),
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
            pm.feed(p, msg),
            [(p, refused(Op::Declare, Some(bad), Refusal::BadCdoId))]
        );
    }
    let cdo = pm.declare(p, "t");
    let again = ToPm::Declare {
        cdo,
        name: "u".into(),
    };
    assert_eq!(
        pm.feed(p, again),
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
        pm.feed(p, offer.clone()),
        [(
            p,
            refused(Op::Offer, Some(cdo), wrong(Op::Offer, "declared"))
        )]
    );
    assert_eq!(
        pm.feed(p, ToPm::Withdraw { cdo, keep: None }),
        [(
            p,
            refused(Op::Withdraw, Some(cdo), wrong(Op::Withdraw, "declared"))
        )]
    );
    assert_eq!(
        pm.feed(p, ToPm::Retract { cdo }),
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
    assert_eq!(pm.feed(p, offer), [(p, done(Op::Offer, cdo))]);
    assert_eq!(
        pm.feed(p, ToPm::Dispose { cdo, answer: true }),
        [(
            p,
            refused(Op::Dispose, Some(cdo), wrong(Op::Dispose, "offered"))
        )]
    );
    assert_eq!(
        pm.feed(p, ToPm::Require { cdo }),
        [(
            p,
            refused(Op::Require, Some(cdo), wrong(Op::Require, "offered"))
        )]
    );
    assert_eq!(
        pm.feed(p, ToPm::Withdraw { cdo, keep: None }),
        [(p, done(Op::Withdraw, cdo))]
    );
    assert_eq!(
        pm.feed(p, ToPm::Withdraw { cdo, keep: None }),
        [(
            p,
            refused(Op::Withdraw, Some(cdo), wrong(Op::Withdraw, "withdrawn"))
        )]
    );
    assert_eq!(
        pm.feed(p, ToPm::Dispose { cdo, answer: true }),
        [(p, done(Op::Dispose, cdo))]
    );
    // A dispose that asks for no answer gets none, unless refused.
    assert_eq!(
        pm.feed(p, ToPm::Dispose { cdo, answer: false }),
        [(p, refused(Op::Dispose, Some(cdo), Refusal::UnknownCdo))]
    );
    let quiet = pm.declare(p, "q");
    assert!(
        pm.feed(
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
        pm.feed(c, ToPm::Demand { cdo: want }).is_empty(),
        "nothing offered yet"
    );
    let (_, out) = pm.offer(p, "t", 4096);
    let (to, transfer, cdo, len) = ticket_of(&out);
    assert_eq!((to, cdo, len), (c, want, 4096));
    assert!(completes_demand(&out), "issued for a demand: {out:?}");
    assert_eq!(
        pm.feed(c, ToPm::Demand { cdo: want }),
        [(
            c,
            refused(Op::Demand, Some(want), wrong(Op::Demand, "in transfer"))
        )]
    );
    assert_eq!(
        pm.feed(
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
        pm.feed(c, ok.clone()).is_empty(),
        "the transfer's end completed the demand at the consumer"
    );
    assert_eq!(
        pm.feed(c, ok),
        [(
            c,
            refused(Op::TransferDone, Some(transfer), Refusal::UnknownTransfer)
        )]
    );
    assert_eq!(
        pm.feed(
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
        pm.feed(c, ToPm::Require { cdo: want }),
        [(c, done(Op::Require, want))]
    );
    assert_eq!(
        pm.feed(c, ToPm::Require { cdo: want }),
        [(
            c,
            refused(Op::Require, Some(want), wrong(Op::Require, "required"))
        )]
    );
    let (_, out) = pm.offer(p, "t", 64);
    let (_, transfer, _, _) = ticket_of(&out);
    assert!(!completes_demand(&out), "a require's ticket: {out:?}");
    assert!(
        pm.feed(c, transferred(transfer)).is_empty(),
        "not demanded yet"
    );
    assert_eq!(
        pm.feed(c, ToPm::Demand { cdo: want }),
        [(c, FromPm::Ready { cdo: want })]
    );
}

#[test]
fn retract_cancels_a_waiting_require() {
    let mut pm = Pm::new();
    let (c, _) = pm.join("consumer");
    let (p, _) = pm.join("producer");
    let want = pm.declare(c, "t");
    pm.feed(c, ToPm::Require { cdo: want });
    assert_eq!(
        pm.feed(c, ToPm::Retract { cdo: want }),
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
    let (_, transfer, _, _) = ticket_of(&pm.feed(c, ToPm::Demand { cdo: want }));
    assert!(
        pm.feed(
            p,
            ToPm::Withdraw {
                cdo: offer,
                keep: None
            }
        )
        .is_empty(),
        "withdraw must wait"
    );
    assert_eq!(
        pm.feed(
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
    let out = pm.feed(c, transferred(transfer));
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
    let out1 = pm.feed(c1, ToPm::Demand { cdo: w1 });
    let out2 = pm.feed(c2, ToPm::Demand { cdo: w2 });
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
        let out = pm.feed(c, transferred(transfer));
        assert!(out.is_empty(), "{out:?}");
    }
}

#[test]
fn zero_length_cdos_synchronise() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("syphon");
    let (c, _) = pm.join("producer");
    let want = pm.declare(c, "READY");
    assert!(pm.feed(c, ToPm::Demand { cdo: want }).is_empty());
    let (_, out) = pm.offer(p, "READY", 0);
    let (_, transfer, _, len) = ticket_of(&out);
    assert_eq!(len, 0);
    assert!(completes_demand(&out));
    assert!(pm.feed(c, transferred(transfer)).is_empty());
}

#[test]
fn a_demand_during_a_required_transfer_is_answered_by_ready_at_its_end() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    pm.offer(p, "t", 64);
    let want = pm.declare(c, "t");
    let out = pm.feed(c, ToPm::Require { cdo: want });
    let (_, transfer, _, _) = ticket_of(&out);
    assert!(!completes_demand(&out), "{out:?}");
    assert!(
        pm.feed(c, ToPm::Demand { cdo: want }).is_empty(),
        "in flight"
    );
    assert_eq!(
        pm.feed(c, transferred(transfer)),
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
    let (_, transfer, _, _) = ticket_of(&pm.feed(c, ToPm::Require { cdo: want }));
    assert!(
        pm.feed(p, ToPm::Leave).is_empty(),
        "a transfer still reads from the producer"
    );
    assert_eq!(pm.feed(c, transferred(transfer)), [(p, FromPm::Bye)]);
    assert_eq!(pm.m.take_closing(), [p]);
    // A consumer with nothing pending leaves at once.
    assert_eq!(pm.feed(c, ToPm::Leave), [(c, FromPm::Bye)]);
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
    ticket_of(&pm.feed(c, ToPm::Demand { cdo: shared }));
    ticket_of(&pm.feed(c, ToPm::Demand { cdo: demanded }));
    // The require of "only" waits behind nothing: it gets its own ticket from p1 too.
    ticket_of(&pm.feed(c, ToPm::Require { cdo: required }));
    pm.m.disconnected(pm.now, p1);
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
    let (_, first, _, _) = ticket_of(&pm.feed(c, ToPm::Demand { cdo: want }));
    let failed = ToPm::TransferDone {
        transfer: first,
        error: Some("peer gone".into()),
        direct: None,
    };
    let (_, second, _, _) = ticket_of(&pm.feed(c, failed));
    assert_ne!(first, second);
    // When every provider failed, the demand waits (no ticket) for another offer.
    let again = ToPm::TransferDone {
        transfer: second,
        error: Some("again".into()),
        direct: None,
    };
    assert!(pm.feed(c, again).is_empty());
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
    let out = pm.feed(c, ToPm::Demand { cdo: want });
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
    let out = pm.feed(c, ToPm::Demand { cdo: want });
    let (_, transfer, _, len) = ticket_of(&out);
    assert_eq!(len, 10);
    let fetch = |offset, len| ToPm::Fetch {
        transfer,
        offset,
        len,
    };
    // The consumer's fetch becomes the provider's serve request.
    assert_eq!(
        pm.feed(c, fetch(0, 6)),
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
        pm.feed(c, fetch(6, 5)),
        [(c, refused(Op::Fetch, Some(transfer), Refusal::BadRange))]
    );
    assert_eq!(
        pm.feed(c, fetch(u64::MAX, 2)),
        [(c, refused(Op::Fetch, Some(transfer), Refusal::BadRange))]
    );
    assert_eq!(
        pm.feed(q, fetch(0, 1)),
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
        pm.feed(p, chunk(0, b"abcdef")),
        [(c, FromPm::Chunk(piece(0, b"abcdef")))]
    );
    assert_eq!(
        pm.feed(c, chunk(0, b"x")),
        [(
            c,
            refused(Op::Chunk, Some(transfer), Refusal::UnknownTransfer)
        )]
    );
    assert_eq!(
        pm.feed(p, chunk(8, b"xyz")),
        [(p, refused(Op::Chunk, Some(transfer), Refusal::BadRange))]
    );
    // An RMA transfer is no stream: fetching it is refused.
    let (c2, _) = pm.join_at("c2", "n1", 9, Some(shm("c2")));
    let (p2, _) = pm.join_at("p2", "n1", 10, Some(shm("p2")));
    pm.offer(p2, "y", 4);
    let w2 = pm.declare(c2, "y");
    let out = pm.feed(c2, ToPm::Demand { cdo: w2 });
    let (_, rma, _, _) = ticket_of(&out);
    assert_eq!(
        pm.feed(
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
fn the_secret_admits_and_evidence_against_the_user_refuses() {
    let mut pm = Pm::new();
    let join = |pm: &mut Pm, identity: Identity| {
        let (conn, nonce) = pm.connect();
        let msg = join_msg("p", &prove(SECRET, &nonce, "wf", "p", 0));
        pm.m.handle_checked(pm.now, conn, msg, identity);
        (conn, pm.drain())
    };
    // With the secret, no evidence or evidence for the user admits; evidence against refuses.
    for identity in [Identity::Unproven, Identity::Proven("uid 1000".into())] {
        let (c, out) = join(&mut pm, identity);
        assert!(matches!(out.as_slice(), [(x, FromPm::Welcome { .. })] if *x == c));
    }
    let (c, out) = join(
        &mut pm,
        Identity::Refused("the peer runs as uid 1001".into()),
    );
    assert_eq!(
        out,
        [(
            c,
            refused(
                Op::Join,
                None,
                Refusal::NotTheUser("the peer runs as uid 1001".into())
            )
        )]
    );
    assert_eq!(pm.m.take_closing(), [c]);
    // Evidence never stands in for the secret.
    let (conn, _) = pm.connect();
    let msg = join_msg("p", &prove(SECRET, &[0; 32], "wf", "p", 0));
    pm.m.handle_checked(pm.now, conn, msg, Identity::Proven("uid 1000".into()));
    assert_eq!(
        pm.drain(),
        [(conn, refused(Op::Join, None, Refusal::BadProof))]
    );
}

// ---- Events: subscriptions, selectors, signal-before and acknowledgements ----
