//! The client's protocol core ([`ClientCore`]) paired with the pool manager in memory, in
//! the crate's harness ([`World`], feature `sim`): apps whose every message goes through a
//! core, as the `pool` crate's clients do, with the world standing in for their IO (memory
//! reads, stream pieces, waiting calls) and time simulated: it jumps to the earliest
//! deadline of the manager and the cores (`World::run_until`). Every app joins through its
//! core's handshake (`sim::join`).
//! Every CDO lifecycle path, groups, inline CDOs, the local demand after a require,
//! windowed streams, subscriptions, integrity, calls given up or timed out, the handshake
//! and the connection's end.

mod support;

use std::time::{Duration, Instant};

use pool_core::attr::{self, AttrValue, Attributes};
use pool_core::client::{
    CallError, CallResult, ClientCore, Demand, Event, News, Offer, Phase, STREAM_WINDOW, Transmit,
};
use pool_core::events::{EVENT_WINDOW, EventKind, EventKinds, SubscribeOptions, TAKEN_REPORT};
use pool_core::proto::{CdoId, FromPm, Op, Refusal, Source, ToPm};
use pool_core::selector::Selector;
use pool_core::sim::{CALL_TIMEOUT, Plain, World};
use support::wrong;

/// A subscription to every offer.
fn offers() -> (EventKinds, pool_core::selector::Expr, SubscribeOptions) {
    (
        EventKind::Offer.into(),
        Selector::all().expr().clone(),
        SubscribeOptions::default(),
    )
}

fn waiting<D>(d: Demand<D>) -> pool_core::client::CallId {
    match d {
        Demand::Waiting(call) => call,
        Demand::Here(..) => panic!("the demand was answered locally"),
    }
}

#[test]
fn a_cdo_goes_from_offer_to_demand_through_both_cores() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    let bytes: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let (offer, offered) = w.offer(p, "field", &bytes, false);
    // Sent, not confirmed yet.
    assert_eq!(w.client(p).phase(offer), Some(Phase::Declared));
    let cdo = w.declare(c, "field").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    w.pump();
    assert_eq!(w.answer(p, offered), Some(&Ok(offer)));
    assert_eq!(w.client(p).phase(offer), Some(Phase::Offered));
    assert_eq!(
        w.answer(c, 1),
        Some(&Ok(cdo)),
        "the ticket completed the demand"
    );
    assert!(matches!(w.apps[c].tickets[..], [Source::Rma { .. }]));
    let (got, attrs) = w.client(c).take_arrived(cdo).expect("arrived");
    assert_eq!(got, bytes);
    // The built-in attributes tickets leave out, filled in by the core.
    assert_eq!(attrs.get(attr::NAME), Some(&AttrValue::Str("field".into())));
    assert_eq!(attrs.get(attr::LOCAL_SIZE), Some(&AttrValue::Uint(5000)));
    assert_eq!(
        attrs.get(attr::PROVIDER),
        Some(&AttrValue::Str("producer:0".into()))
    );
    assert_eq!(attrs.get(".user.step"), Some(&AttrValue::Int(2)));
    // The consumer reported the transfer, and nothing waits: its dispose is not answered.
    assert!(
        w.sent(c)
            .iter()
            .any(|m| matches!(m, ToPm::TransferDone { error: None, .. }))
    );
    assert_eq!(
        w.timed(c, |k, now| k.dispose(now, cdo, 2))
            .expect("dispose"),
        None
    );
    // The producer's offer is busy until withdrawn: its dispose waits, and is refused.
    assert!(
        w.timed(p, |k, now| k.dispose(now, offer, 3))
            .expect("dispose")
            .is_some()
    );
    w.pump();
    assert_eq!(
        w.answer(p, 3),
        Some(&Err(CallError::Refused {
            op: Op::Dispose,
            why: wrong(Op::Dispose, "offered"),
        }))
    );
    w.timed(p, |k, now| k.withdraw(now, offer, 4))
        .expect("withdraw");
    w.pump();
    assert_eq!(w.answer(p, 4), Some(&Ok(offer)));
    assert_eq!(w.client(p).phase(offer), Some(Phase::Sealed), "withdrawn");
    // Withdrawn: settled, so disposed without an answer, and forgotten.
    assert_eq!(
        w.timed(p, |k, now| k.dispose(now, offer, 5))
            .expect("dispose"),
        None
    );
    assert_eq!(w.client(p).name(offer), None);
    w.pump();
    assert!(w.answer(p, 5).is_none());
}

#[test]
fn small_cdos_come_with_their_tickets_and_are_not_reported() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    w.offer(p, "scalar", b"42", true);
    let cdo = w.declare(c, "scalar").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    w.pump();
    // The core carried the ticket out itself: nothing for the driver to fetch.
    assert!(w.apps[c].tickets.is_empty(), "{:?}", w.apps[c].tickets);
    assert_eq!(w.answer(c, 1), Some(&Ok(cdo)));
    assert_eq!(w.client(c).take_arrived(cdo).expect("arrived").0, b"42");
    // Memory lent for a small CDO receives its bytes.
    w.offer(p, "scalar-into", b"43", true);
    let into = w.declare(c, "scalar-into").expect("declare");
    w.client(c).lend(into, vec![0; 100]);
    waiting(w.timed(c, |k, now| k.demand(now, into, 2)).expect("demand"));
    w.pump();
    let (got, _) = w.client(c).take_arrived(into).expect("arrived");
    assert_eq!(got, b"43");
    assert_eq!(got.capacity(), 100, "the lent vector, not a new one");
    // A 0-byte CDO comes with its ticket even where offers carry no bytes: nothing to read.
    w.offer(p, "sync", b"", false);
    let sync = w.declare(c, "sync").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, sync, 3)).expect("demand"));
    w.pump();
    assert!(w.apps[c].tickets.is_empty(), "{:?}", w.apps[c].tickets);
    assert_eq!(w.answer(c, 3), Some(&Ok(sync)));
    assert!(
        w.client(c)
            .take_arrived(sync)
            .expect("arrived")
            .0
            .is_empty()
    );
    // The PM counted the transfers done as it sent the tickets.
    assert!(
        !w.sent(c)
            .iter()
            .any(|m| matches!(m, ToPm::TransferDone { .. }))
    );
}

/// Two apps that share no network but announce the same GFS directory: rather than relay
/// the bytes, the PM has the provider write its offer there and tickets the consumer to
/// read the file (asked once, however many consumers; later ones read the same file). A
/// pair without a common directory gets the stream.
#[test]
fn the_pm_has_an_offer_written_to_files_for_consumers_it_shares_no_network_with() {
    let mut w = World::new();
    let p = w.join_with_gfs_only("producer", "node1");
    let (c1, c2) = (
        w.join_with_gfs_only("consumer-1", "node2"),
        w.join_with_gfs_only("consumer-2", "node3"),
    );
    w.offer(p, "field", &[5; 64 << 10], false);
    for (i, c) in [c1, c2].into_iter().enumerate() {
        let cdo = w.declare(c, "field").expect("declare");
        waiting(
            w.timed(c, |k, now| k.demand(now, cdo, 10 + i as u32))
                .expect("demand"),
        );
        w.pump();
        assert_eq!(w.answer(c, 10 + i as u32), Some(&Ok(cdo)), "consumer {i}");
        assert!(
            matches!(&w.apps[c].tickets[..], [Source::Gfs { file, len: 65536 }] if file.path.starts_with("/gfs/")),
            "{:?}",
            w.apps[c].tickets
        );
        let (data, _) = w.client(c).take_arrived(cdo).expect("arrived");
        assert_eq!(data, vec![5; 64 << 10]);
    }
    let spilled = w
        .sent(p)
        .into_iter()
        .filter(|m| matches!(m, ToPm::Spilled { .. }))
        .count();
    assert_eq!(spilled, 1, "written once");

    // Without a directory in common: the stream.
    let other = w.join("no-gfs", false);
    let cdo = w.declare(other, "field").expect("declare");
    waiting(
        w.timed(other, |k, now| k.demand(now, cdo, 20))
            .expect("demand"),
    );
    w.pump();
    assert!(
        matches!(&w.apps[other].tickets[..], [Source::Stream { .. }]),
        "{:?}",
        w.apps[other].tickets
    );
}

/// A provider that never answers the PM's request to write its offer to the global file
/// system holds its consumer only until the spill deadline: then the consumer is ticketed
/// to read the stream, and the provider's late answer is refused.
#[test]
fn a_provider_that_never_writes_its_spill_holds_consumers_until_the_deadline() {
    let mut w = World::new();
    let p = w.join_with_gfs_only("producer", "node1");
    let c = w.join_with_gfs_only("consumer", "node2");
    w.offer(p, "field", &[5; 64 << 10], false);
    w.deaf = true;
    let cdo = w.declare(c, "field").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 10)).expect("demand"));
    w.pump();
    assert!(w.apps[c].tickets.is_empty(), "{:?}", w.apps[c].tickets);
    let asked = w.now;
    let deadline = asked + pool_core::policy::SPILL_TIMEOUT;
    w.run_until(deadline - std::time::Duration::from_millis(1));
    assert!(w.apps[c].tickets.is_empty(), "still waiting just before");
    w.run_until(deadline);
    assert!(
        matches!(&w.apps[c].tickets[..], [Source::Stream { .. }]),
        "{:?}",
        w.apps[c].tickets
    );
}

/// An offer whose bytes the driver wrote to the global file system names the file and
/// carries no bytes, even small ones; the PM tickets its demands to read the file.
#[test]
fn offers_written_to_the_global_file_system_are_read_from_it() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    w.offer_to_gfs(p, "field", b"forty-two");
    let cdo = w.declare(c, "field").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    w.pump();
    let offered = w.sent(p).into_iter().find_map(|m| match m {
        ToPm::SealOffer { extras, .. } => Some(extras.clone()),
        _ => None,
    });
    let extras = offered.expect("the offer");
    assert!(
        extras.gfs().is_some_and(|f| f.path.starts_with("/gfs/")),
        "{extras:?}"
    );
    assert!(
        extras.inline().is_none(),
        "the file is the transport: {extras:?}"
    );
    assert!(
        matches!(&w.apps[c].tickets[..], [Source::Gfs { len: 9, .. }]),
        "{:?}",
        w.apps[c].tickets
    );
    assert_eq!(w.answer(c, 1), Some(&Ok(cdo)));
    assert_eq!(
        w.client(c).take_arrived(cdo).expect("arrived").0,
        b"forty-two"
    );
}

#[test]
fn a_demand_after_a_completed_require_is_local_and_only_noticed() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    let bytes = vec![7u8; 70_000];
    w.offer(p, "prefetched", &bytes, false);
    let cdo = w.declare(c, "prefetched").expect("declare");
    w.timed(c, |k, now| k.require(now, cdo, 1))
        .expect("require");
    w.pump();
    assert_eq!(w.answer(c, 1), Some(&Ok(cdo)));
    let before = w.apps[c].sent.len();
    let Demand::Here(got, attrs) = w.timed(c, |k, now| k.demand(now, cdo, 2)).expect("demand")
    else {
        panic!("the required CDO's demand waited");
    };
    assert_eq!(got, bytes);
    assert_eq!(attrs.get(attr::LOCAL_SIZE), Some(&AttrValue::Uint(70_000)));
    w.pump();
    // One message, deferred, which the PM answers to nobody.
    let after = &w.apps[c].sent[before..];
    assert_eq!(
        after,
        [Transmit {
            msg: ToPm::Demand { cdo },
            deferred: true,
        }]
    );
    assert!(w.answer(c, 2).is_none());
    // Demanded and here: settled, so its dispose is not answered.
    assert_eq!(
        w.timed(c, |k, now| k.dispose(now, cdo, 3))
            .expect("dispose"),
        None
    );
}

#[test]
fn a_stream_transfer_is_fetched_piece_by_piece_through_both_cores() {
    let mut w = World::new();
    let p = w.join("producer", true);
    let c = w.join("far", false);
    let bytes: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    w.offer(p, "far-away", &bytes, false);
    let cdo = w.declare(c, "far-away").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    w.pump();
    assert!(matches!(
        w.apps[c].tickets[..],
        [Source::Stream { len: 3000 }]
    ));
    assert_eq!(w.answer(c, 1), Some(&Ok(cdo)));
    assert_eq!(w.client(c).take_arrived(cdo).expect("arrived").0, bytes);
}

#[test]
fn memory_lent_for_a_demand_goes_with_its_ticket() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    w.offer(p, "into", &[1; 100_000], false);
    let cdo = w.declare(c, "into").expect("declare");
    w.client(c).lend(cdo, vec![0; 100_000]);
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    w.pump();
    assert_eq!(w.apps[c].lent_back.len(), 1);
    assert_eq!(w.client(c).unlend(cdo), None, "handed out once");
    // Lent and not used: taken back.
    let other = w.declare(c, "nobody-offers").expect("declare");
    w.client(c).lend(other, vec![0; 10]);
    assert_eq!(w.client(c).unlend(other), Some(vec![0; 10]));
}

#[test]
fn corrupted_bytes_fail_the_demand_and_are_reported() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    let integrity = Attributes::from([(attr::INTEGRITY.to_string(), AttrValue::Bool(true))]);
    w.offer_sealed(p, "checked", (&[3; 64], false), integrity);
    w.corrupt = true;
    let cdo = w.declare(c, "checked").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    w.pump();
    match w.answer(c, 1) {
        Some(Err(CallError::Integrity { provider, why })) => {
            assert_eq!(&**provider, "producer:0");
            assert!(why.contains("checksum"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert!(w.sent(c).iter().any(|m| matches!(
        m,
        ToPm::TransferDone { error: Some(why), .. } if why.starts_with("integrity check failed")
    )));
    assert!(w.client(c).take_arrived(cdo).is_err(), "no data was kept");
}

#[test]
fn the_core_decides_what_an_offer_carries_and_checks_a_seal_before_sending_it() {
    let mut w = World::new();
    let p = w.join("producer", true);
    let region = |len: usize| fabric_types::RemoteRegion {
        addr: 0,
        key: 1,
        len: len as u64,
    };
    let offer = |cdo, bytes, seal| Offer {
        cdo,
        bytes,
        region: region(bytes.len()),
        registered: true,
        alternates: Vec::new(),
        file: None,
        seal,
        gfs: None,
    };
    // Integrity asked: the seal carries the bytes' checksum; small bytes travel along.
    let integrity = Attributes::from([(attr::INTEGRITY.to_string(), AttrValue::Bool(true))]);
    let small = w.declare(p, "small").expect("declare");
    w.timed(p, |k, now| {
        k.offer(now, offer(small, b"tiny", Some(integrity)), 1)
    })
    .expect("offer");
    let last = |w: &mut World| {
        let core = w.core(p);
        std::iter::from_fn(|| core.poll_transmit())
            .last()
            .map(|t| t.msg)
    };
    match last(&mut w) {
        Some(ToPm::SealOffer {
            attributes, extras, ..
        }) => {
            assert_eq!(
                attributes.get(attr::CHECKSUM),
                Some(&AttrValue::Uint(attr::checksum(b"tiny")))
            );
            assert_eq!(extras.inline().map(|b| &b.0[..]), Some(&b"tiny"[..]));
        }
        other => panic!("{other:?}"),
    }
    // Past the core's inline limit the bytes stay home; no integrity, no checksum.
    w.client(p).set_inline_max(3);
    let four = w.declare(p, "four").expect("declare");
    w.timed(p, |k, now| {
        k.offer(now, offer(four, b"four", Some(Attributes::new())), 2)
    })
    .expect("offer");
    match last(&mut w) {
        Some(ToPm::SealOffer {
            attributes, extras, ..
        }) => {
            assert!(!attributes.contains_key(attr::CHECKSUM));
            assert!(extras.inline().is_none());
        }
        other => panic!("{other:?}"),
    }
    // A seal the schemas refuse sends nothing, alone or with an offer.
    let wrong = Attributes::from([(attr::LOCAL_SIZE.to_string(), AttrValue::Str("big".into()))]);
    let bad = w.declare(p, "bad").expect("declare");
    assert!(matches!(last(&mut w), Some(ToPm::Declare { .. })));
    let sealed = w.timed(p, |k, now| k.seal(now, bad, wrong.clone(), 3));
    assert!(matches!(sealed, Err(CallError::Attribute(_))), "{sealed:?}");
    let offered = w.timed(p, |k, now| k.offer(now, offer(bad, b"x", Some(wrong)), 4));
    match offered {
        Err(CallError::Attribute(e)) => assert!(e.to_string().contains("local-size"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert!(w.core(p).poll_transmit().is_none(), "nothing was sent");
    assert!(
        w.core(p).poll_timeout().is_some(),
        "the good offers wait for answers"
    );
}

#[test]
fn a_group_is_demanded_in_one_message_and_answered_once_its_members_are_here() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    let names = ["g/0", "g/1", "g/2"];
    for (i, n) in names.iter().enumerate() {
        w.offer(p, n, &vec![i as u8; 10 + i], i == 0);
    }
    // The group's own CDO lists its members.
    w.offer_sealed(p, "g", (&[], false), attr::group_attributes(&names));
    let g = w.declare(c, "g").expect("declare");
    let (first, _) = w
        .timed(c, |k, now| k.demand_group(now, g, 1))
        .expect("demand group");
    w.pump();
    // One message asked for the group and its members; none asked for a member (the
    // others report the RMA members' transfers).
    let asked: Vec<_> = w
        .sent(c)
        .into_iter()
        .filter(|m| !matches!(m, ToPm::Declare { .. } | ToPm::TransferDone { .. }))
        .collect();
    assert!(
        matches!(
            &asked[..],
            [ToPm::DemandGroup { group, first: f, capacity: pool_core::client::GROUP_IDS }] if *group == g && *f == first
        ),
        "{asked:?}"
    );
    assert_eq!(w.answer(c, 1), Some(&Ok(g)));
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            w.client(c).name(first + i as u64).map(|n| &**n),
            Some(*name)
        );
    }
    let here = w.client(c).take_group(g).expect("named");
    assert_eq!(here.ids, (first..).take(names.len()).collect::<Vec<_>>());
    assert_eq!(
        here.attributes.get(attr::NAME),
        Some(&AttrValue::Str("g".into()))
    );
    let listed: Vec<&str> = here.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(listed, names);
    for (i, m) in here.members.iter().enumerate() {
        assert_eq!(m.cdo, first + i as u64);
        assert_eq!(m.data, vec![i as u8; 10 + i]);
        assert_eq!(
            m.attributes.get(attr::NAME),
            Some(&AttrValue::Str(m.name.clone()))
        );
    }
    assert!(w.client(c).take_group(g).is_none(), "taken once");
    // A declared CDO that is no group: the PM refuses, and the core names nothing.
    let plain = w.declare(c, "g/0").expect("declare");
    w.timed(c, |k, now| k.demand_group(now, plain, 2))
        .expect("demand group");
    w.pump();
    assert!(matches!(
        w.answer(c, 2),
        Some(Err(CallError::Refused { .. }))
    ));
    assert!(w.client(c).take_group(plain).is_none());
}

#[test]
fn a_group_with_a_failed_member_is_answered_with_its_error_once_the_others_ended() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    let integrity = Attributes::from([(attr::INTEGRITY.to_string(), AttrValue::Bool(true))]);
    w.offer_sealed(p, "h/checked", (&[3; 64], false), integrity);
    w.offer(p, "h/plain", &[4; 64], true);
    w.offer_sealed(
        p,
        "h",
        (&[], false),
        attr::group_attributes(&["h/checked", "h/plain"]),
    );
    w.corrupt = true;
    let g = w.declare(c, "h").expect("declare");
    w.timed(c, |k, now| k.demand_group(now, g, 1))
        .expect("demand group");
    w.pump();
    match w.answer(c, 1) {
        Some(Err(CallError::Integrity { provider, why })) => {
            assert_eq!(&**provider, "producer:0");
            assert!(why.contains("checksum"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // The member that arrived is handed over (to dispose); the corrupted one is not.
    let here = w.client(c).take_group(g).expect("named");
    assert_eq!(here.ids.len(), 2);
    let got: Vec<CdoId> = here.members.iter().map(|m| m.cdo).collect();
    assert_eq!(got, [here.ids[1]]);
}

#[test]
fn a_group_given_up_is_not_answered_and_its_members_wait_to_be_taken() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    w.offer(p, "k/0", &[1; 8], true);
    w.offer_sealed(p, "k", (&[], false), attr::group_attributes(&["k/0"]));
    let g = w.declare(c, "k").expect("declare");
    let (_, call) = w
        .timed(c, |k, now| k.demand_group(now, g, 1))
        .expect("demand group");
    w.client(c).abandon((Op::Demand, g), call);
    w.pump();
    assert_eq!(w.answer(c, 1), None, "nobody waits");
    let here = w.client(c).take_group(g).expect("named");
    assert_eq!(here.members.len(), 1);
    assert_eq!(here.members[0].cdo, here.ids[0]);
}

/// A member the app also demands alone (another thread, say) still counts for its group:
/// both calls are answered, and the member goes to whoever takes it first.
#[test]
fn a_member_demanded_alone_while_its_group_arrives_answers_both() {
    let mut core: ClientCore<Plain> = ClientCore::new(3, CALL_TIMEOUT);
    let g = core.declare("g").expect("declare");
    let (first, _) = core
        .demand_group(Instant::now(), g, 1)
        .expect("demand group");
    core.handle(
        Instant::now(),
        FromPm::GroupMembers {
            group: g,
            names: vec!["g/0".into(), "g/1".into()],
            attributes: Attributes::new(),
        },
    );
    waiting(
        core.demand(Instant::now(), first, 2)
            .expect("demand the member alone"),
    );
    for (i, cdo) in [first, first + 1].into_iter().enumerate() {
        core.handle(
            Instant::now(),
            FromPm::Ticket {
                transfer: 10 + i as u64,
                cdo,
                source: Source::Inline {
                    bytes: pool_core::proto::InlineBytes(vec![i as u8; 4].into()),
                },
                attributes: Attributes::new(),
                provider: "p:0".into(),
                completes_demand: true,
            },
        );
    }
    let answered: Vec<(u32, CallResult<u64>)> = std::iter::from_fn(|| core.poll_event())
        .filter_map(|e| match e {
            Event::Answer { waiter, result } => Some((waiter, result)),
            _ => None,
        })
        .collect();
    assert_eq!(answered, [(2, Ok(first)), (1, Ok(g))]);
    assert_eq!(core.take_arrived(first).expect("here").0, vec![0; 4]);
    let here = core.take_group(g).expect("named");
    assert_eq!(
        (here.ids.len(), here.members.len()),
        (2, 1),
        "one was taken alone"
    );
}

#[test]
fn a_group_named_by_the_manager_but_not_demanded_is_ignored() {
    let mut core: ClientCore<Plain> = ClientCore::new(3, CALL_TIMEOUT);
    core.handle(
        Instant::now(),
        FromPm::GroupMembers {
            group: 5,
            names: vec!["x".into()],
            attributes: Attributes::new(),
        },
    );
    assert!(core.poll_event().is_none());
    assert!(core.take_group(5).is_none());
}

#[test]
fn an_answer_goes_to_the_oldest_call_still_waiting() {
    let mut w = World::new();
    let p = w.join("producer", true);
    let cdo = w.declare(p, "twice").expect("declare");
    let first = w
        .timed(p, |k, now| k.seal(now, cdo, Attributes::new(), 1))
        .expect("seal");
    w.timed(p, |k, now| k.seal(now, cdo, Attributes::new(), 2))
        .expect("seal");
    // The first gave up (a timeout): the first answer goes to the second call.
    w.core(p).abandon((Op::Seal, cdo), first);
    w.pump();
    assert_eq!(w.answer(p, 1), None);
    assert_eq!(w.answer(p, 2), Some(&Ok(cdo)));
    // Sealed by the first (the PM refused the second), whoever waited.
    assert_eq!(w.client(p).phase(cdo), Some(Phase::Sealed));
}

#[test]
fn subscriptions_are_confirmed_fed_ended_and_forgotten() {
    let mut w = World::new();
    let (s, p) = (w.join("tracer", true), w.join("producer", true));
    // The subscription of one connection's core (the sharded client's fan-out is
    // tests/shards.rs's).
    let now = w.now;
    w.core(s)
        .subscribe(now, offers(), 77, 1.into())
        .expect("subscribe");
    w.pump();
    let Some(Ok(sub)) = w.answer(s, 1).cloned() else {
        panic!("not subscribed: {:?}", w.answer(s, 1));
    };
    w.offer(p, "seen", b"x", true);
    w.pump();
    assert!(matches!(&w.apps[s].news[&77][..], [News::Event(e)] if e.kind == EventKind::Offer));
    // A subscription whose caller gave up before the answer is ended when it comes.
    let (local, _) = w
        .core(s)
        .subscribe(now, offers(), 78, 2.into())
        .expect("subscribe");
    w.core(s).forget_subscription(local);
    w.pump();
    let ended = w.apps[s]
        .sent
        .iter()
        .filter(|t| matches!(t.msg, ToPm::Unsubscribe { .. }));
    assert_eq!(ended.count(), 1);
    assert!(!w.apps[s].news.contains_key(&78));
    // The PM ending one for a late acknowledgement: its queue hears both.
    w.core(s)
        .handle(Instant::now(), FromPm::AckTooLate { sub, serial: 9 });
    let news: Vec<_> = std::iter::from_fn(|| w.core(s).poll_event()).collect();
    assert!(matches!(
        &news[..],
        [
            Event::Subscription {
                events: 77,
                news: News::Late(9)
            },
            Event::Subscription {
                events: 77,
                news: News::Ended(_)
            },
        ]
    ));
    // Its events stop here.
    w.offer(p, "unseen", b"y", true);
    w.pump();
    assert_eq!(w.apps[s].news[&77].len(), 1);
    // The late event's acknowledgement is refused, another's is not sent: the PM went on.
    w.apps[s].sent.clear();
    assert_eq!(w.core(s).ack(sub, 9), Err(CallError::AckTooLate(9)));
    assert_eq!(w.core(s).ack(sub, 10), Ok(()));
    w.pump();
    assert!(w.sent(s).is_empty(), "{:?}", w.sent(s));
}

#[test]
fn an_event_held_for_its_acknowledgement_goes_on_when_the_core_acknowledges_it() {
    let mut w = World::new();
    let (s, p) = (w.join("auditor", true), w.join("producer", true));
    let held = SubscribeOptions {
        require_ack: true,
        ..SubscribeOptions::default()
    };
    let wanted = (
        EventKind::Offer.into(),
        Selector::all().expr().clone(),
        held,
    );
    w.timed(s, |k, now| k.subscribe(now, wanted, 77, 1))
        .expect("subscribe");
    w.pump();
    let Some(Ok(sub)) = w.answer(s, 1).cloned() else {
        panic!("not subscribed");
    };
    let (cdo, tag) = w.offer(p, "audited", b"x", true);
    w.pump();
    assert_eq!(w.answer(p, tag), None, "held for the acknowledgement");
    let serial = match &w.apps[s].news[&77][..] {
        [News::Event(e)] => e.serial,
        other => panic!("{other:?}"),
    };
    w.apps[s].sent.clear();
    w.client(s).ack(sub, serial).expect("ack");
    w.pump();
    assert_eq!(w.answer(p, tag), Some(&Ok(cdo)), "went on");
    assert_eq!(w.sent(s), [&ToPm::Ack { sub, serial }]);
}

#[test]
fn a_fabric_change_an_app_reports_reaches_the_pools_subscribers_unanswered() {
    use pool_core::events::FabricChange;
    let mut w = World::new();
    w.manager().set_policy(pool_core::policy::Policy {
        reporters: vec!["other-job".into()],
        ..Default::default()
    });
    let watcher = w.join("watcher", true);
    let wanted = (
        EventKind::Fabric.into(),
        Selector::all().expr().clone(),
        SubscribeOptions::default(),
    );
    w.timed(watcher, |k, now| k.subscribe(now, wanted, 5, 1))
        .expect("subscribe");
    let reporter = w.join("other-job", true);
    let change = FabricChange::Link {
        name: "ib0".into(),
        addresses: vec!["10.9.0.1/16".parse().expect("subnet")],
        up: false,
    };
    w.core(reporter).report(change).expect("report");
    w.pump();
    assert!(
        matches!(&w.apps[watcher].news[&5][..], [News::Event(e)] if e.detail == "link ib0 down (10.9.0.1/16)"),
        "{:?}",
        w.apps[watcher].news
    );
    assert!(w.apps[reporter].answers.is_empty());
    w.core(reporter).close();
    assert!(matches!(
        w.core(reporter).report(FabricChange::Other("late".into())),
        Err(CallError::Closed)
    ));
}

#[test]
fn the_connections_end_fails_every_call_but_keeps_what_is_here() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    w.offer(p, "kept", &[5; 10], true);
    let kept = w.declare(c, "kept").expect("declare");
    w.timed(c, |k, now| k.require(now, kept, 1))
        .expect("require");
    let never = w.declare(c, "never").expect("declare");
    waiting(
        w.timed(c, |k, now| k.demand(now, never, 2))
            .expect("demand"),
    );
    w.timed(c, |k, now| k.subscribe(now, offers(), 55, 3))
        .expect("subscribe");
    w.pump();
    w.core(c).close();
    let ends: Vec<_> = std::iter::from_fn(|| w.core(c).poll_event()).collect();
    // The waiting demand's waiter is dropped (its driver sees the connection gone); the
    // subscription hears it.
    assert!(matches!(
        &ends[..],
        [Event::Subscription {
            events: 55,
            news: News::Closed
        }]
    ));
    assert!(w.core(c).is_closed());
    assert_eq!(w.declare(c, "late"), Err(CallError::Closed));
    assert_eq!(w.timed(c, |k, now| k.leave(now, 9)), Err(CallError::Closed));
    // The required bytes are here: the demand needs no PM.
    assert!(matches!(
        w.timed(c, |k, now| k.demand(now, kept, 4)),
        Ok(Demand::Here(..))
    ));
    assert!(
        w.core(c).poll_transmit().is_none(),
        "nothing goes to a closed connection"
    );
}

#[test]
fn bad_names_and_unknown_transfers_are_refused_or_ignored() {
    let mut core: ClientCore<Plain> = ClientCore::new(3, CALL_TIMEOUT);
    assert_eq!(
        core.declare(""),
        Err(CallError::Refused {
            op: Op::Declare,
            why: Refusal::BadName,
        })
    );
    assert!(
        core.poll_transmit().is_none(),
        "nothing sent for a bad name"
    );
    // A transfer nobody ticketed ends quietly.
    core.fetched(99, Ok((vec![1], None)));
    assert!(core.poll_transmit().is_none());
    // A refusal nobody waits for is only logged.
    core.handle(
        Instant::now(),
        FromPm::Refused {
            op: Op::Seal,
            cdo: Some(5),
            why: Refusal::UnknownCdo,
        },
    );
    assert!(core.poll_event().is_none());
}

#[test]
fn a_waiting_demand_is_cancelled_by_retract_or_dispose() {
    let mut w = World::new();
    let c = w.join("consumer", true);
    // Retracted: the PM agrees, the CDO is settled, its dispose is not answered.
    let retracted = w.declare(c, "nobody-offers").expect("declare");
    waiting(
        w.timed(c, |k, now| k.demand(now, retracted, 1))
            .expect("demand"),
    );
    w.timed(c, |k, now| k.retract(now, retracted, 2))
        .expect("retract");
    w.pump();
    assert_eq!(w.answer(c, 2), Some(&Ok(retracted)));
    assert!(
        w.answer(c, 1).is_none(),
        "the demand waits on (its driver's timeout ends it)"
    );
    assert_eq!(
        w.timed(c, |k, now| k.dispose(now, retracted, 3))
            .expect("dispose"),
        None
    );
    // Disposed while demanded: the dispose waits for the PM; when it agrees, the waiting
    // demand ends (before the dispose's answer).
    let disposed = w.declare(c, "nobody-offers-either").expect("declare");
    waiting(
        w.timed(c, |k, now| k.demand(now, disposed, 4))
            .expect("demand"),
    );
    assert!(
        w.timed(c, |k, now| k.dispose(now, disposed, 5))
            .expect("dispose")
            .is_some()
    );
    w.pump();
    let answers = (w.answer(c, 4).cloned(), w.answer(c, 5).cloned());
    let ended = CallError::Disposed {
        op: Op::Demand,
        cdo: disposed,
    };
    assert_eq!(answers, (Some(Err(ended)), Some(Ok(disposed))));
    assert_eq!(w.client(c).name(disposed), None);
}

#[test]
fn an_unanswered_call_times_out_exactly_at_its_deadline_and_its_request_stands() {
    let mut w = World::new();
    let (p, c) = (w.join("producer", true), w.join("consumer", true));
    let t0 = w.now;
    let cdo = w.declare(c, "late").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    assert_eq!(w.core(c).poll_timeout(), Some(t0 + CALL_TIMEOUT));
    w.run_until(t0 + CALL_TIMEOUT - Duration::from_nanos(1));
    assert_eq!(w.answer(c, 1), None, "still waiting a nanosecond before");
    w.run_until(t0 + CALL_TIMEOUT);
    assert_eq!(
        w.answer(c, 1),
        Some(&Err(CallError::Timeout(Op::Demand))),
        "answered at its deadline"
    );
    assert_eq!(w.core(c).poll_timeout(), None, "nothing else waits");
    // The demand stands at the PM: an offer an hour later brings the bytes, and the next
    // demand finds them here without asking.
    w.run_until(t0 + Duration::from_secs(3600));
    w.offer(p, "late", b"at last", false);
    w.pump();
    let Demand::Here(got, _) = w.timed(c, |k, now| k.demand(now, cdo, 2)).expect("demand") else {
        panic!("the bytes of a demand that timed out did not arrive");
    };
    assert_eq!(got, b"at last");
}

#[test]
fn a_call_waits_as_long_as_its_own_deadline_says() {
    let mut w = World::new();
    let c = w.join("consumer", true);
    let t0 = w.now;
    let (short, never) = (
        w.declare(c, "short").expect("declare"),
        w.declare(c, "never").expect("declare"),
    );
    let first = waiting(
        w.timed(c, |k, now| k.demand(now, short, 1))
            .expect("demand"),
    );
    let second = waiting(
        w.timed(c, |k, now| k.demand(now, never, 2))
            .expect("demand"),
    );
    let five = t0 + Duration::from_secs(5);
    w.core(c)
        .set_deadline((Op::Demand, short), first, Some(five));
    w.core(c).set_deadline((Op::Demand, never), second, None);
    assert_eq!(w.core(c).poll_timeout(), Some(five));
    w.run_until(five);
    assert_eq!(w.answer(c, 1), Some(&Err(CallError::Timeout(Op::Demand))));
    w.run_until(t0 + Duration::from_secs(86_400));
    assert_eq!(w.answer(c, 2), None, "no deadline: waits for a day");
    assert_eq!(w.core(c).poll_timeout(), None);
    // Given up by its caller, it is gone without an answer.
    w.core(c).abandon((Op::Demand, never), second);
    w.run_until(t0 + Duration::from_secs(2 * 86_400));
    assert_eq!(w.answer(c, 2), None);
}

#[test]
fn a_call_held_for_a_subscribers_acknowledgement_goes_on_at_the_pms_deadline() {
    let mut w = World::new();
    let (s, p) = (w.join("auditor", true), w.join("producer", true));
    w.manager().set_ack_timeout(Duration::from_secs(10));
    let (kinds, selector, _) = offers();
    let options = SubscribeOptions {
        require_ack: true,
        ..SubscribeOptions::default()
    };
    w.timed(s, |k, now| {
        k.subscribe(now, (kinds, selector, options), 7, 1)
    })
    .expect("subscribe");
    w.pump();
    assert!(matches!(w.answer(s, 1), Some(Ok(_))));
    let t0 = w.now;
    let (cdo, tag) = w.offer(p, "audited", b"x", false);
    w.pump();
    assert_eq!(
        w.answer(p, tag),
        None,
        "held for the auditor's acknowledgement"
    );
    assert_eq!(w.next_deadline(), Some(t0 + Duration::from_secs(10)));
    w.run_until(t0 + Duration::from_secs(10) - Duration::from_nanos(1));
    assert_eq!(w.answer(p, tag), None);
    // The auditor never acknowledges: at the PM's deadline the offer goes on, well
    // before the producer's own call would time out, and the auditor hears it was late.
    w.run_until(t0 + Duration::from_secs(10));
    assert_eq!(w.answer(p, tag), Some(&Ok(cdo)));
    assert!(
        w.apps[s].news[&7]
            .iter()
            .any(|n| matches!(n, News::Late(_))),
        "{:?}",
        w.apps[s].news[&7]
    );
}

#[test]
fn the_core_joins_by_answering_the_challenge_and_a_wrong_secret_is_refused() {
    let mut w = World::new();
    let p = w.join("producer", true);
    let Some(Ok((app, 77))) = w.core(p).joined().cloned() else {
        panic!("{:?}", w.core(p).joined());
    };
    let cdo = w.declare(p, "first").expect("declare");
    assert_eq!(
        cdo,
        *pool_core::proto::cdo_ids(app).start(),
        "ids of the welcome's app"
    );

    let join = match support::join_msg("intruder", &[]) {
        ToPm::Join(join) => *join,
        other => unreachable!("{other:?}"),
    };
    let i = w.connect(50, join, b"a guess");
    w.pump();
    assert!(
        matches!(
            w.core(i).joined(),
            Some(Err(CallError::Refused {
                op: Op::Join,
                why: Refusal::BadProof
            }))
        ),
        "{:?}",
        w.core(i).joined()
    );
    assert_eq!(w.declare(i, "x"), Err(CallError::Closed));
}

#[test]
fn a_join_nobody_answers_times_out_at_its_deadline_and_no_call_goes_before_the_welcome() {
    let t0 = Instant::now();
    let join = match support::join_msg("early", &[]) {
        ToPm::Join(join) => *join,
        other => unreachable!("{other:?}"),
    };
    let mut core: ClientCore<Plain> = ClientCore::connect(t0, join, support::SECRET, CALL_TIMEOUT);
    assert!(core.joined().is_none());
    assert!(matches!(
        core.declare("too soon"),
        Err(CallError::Protocol(_))
    ));
    assert!(
        core.poll_transmit().is_none(),
        "nothing before the challenge"
    );
    assert_eq!(core.poll_timeout(), Some(t0 + CALL_TIMEOUT));
    core.handle_timeout(t0 + CALL_TIMEOUT - Duration::from_nanos(1));
    assert!(core.joined().is_none());
    core.handle_timeout(t0 + CALL_TIMEOUT);
    assert_eq!(core.joined(), Some(&Err(CallError::Timeout(Op::Join))));
    assert!(core.is_closed());
    // A PM that answers the challenge with something else breaks the protocol.
    let join = match support::join_msg("confused", &[]) {
        ToPm::Join(join) => *join,
        other => unreachable!("{other:?}"),
    };
    let mut core: ClientCore<Plain> = ClientCore::connect(t0, join, support::SECRET, CALL_TIMEOUT);
    core.handle(Instant::now(), FromPm::Bye);
    assert!(matches!(core.joined(), Some(Err(CallError::Protocol(_)))));
}

#[test]
fn a_large_stream_is_fetched_a_window_of_pieces_at_a_time() {
    let mut w = World::new();
    let p = w.join("producer", true);
    let c = w.join("far", false);
    let bytes: Vec<u8> = (0..(9 << 20) + 5u32).map(|i| (i % 251) as u8).collect();
    w.offer(p, "big", &bytes, false);
    let cdo = w.declare(c, "big").expect("declare");
    waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    w.pump();
    assert_eq!(w.answer(c, 1), Some(&Ok(cdo)));
    assert_eq!(w.client(c).take_arrived(cdo).expect("arrived").0, bytes);
    // The window went out first, then one piece per piece that arrived.
    let asked: Vec<(u64, u64)> = w
        .sent(c)
        .iter()
        .filter_map(|m| match m {
            ToPm::Fetch { offset, len, .. } => Some((*offset, *len)),
            _ => None,
        })
        .collect();
    let piece = pool_core::client::STREAM_PIECE;
    assert_eq!(asked.len(), 10, "{asked:?}");
    let fetches_first = w.sent(c)[2..2 + STREAM_WINDOW]
        .iter()
        .all(|m| matches!(m, ToPm::Fetch { .. }));
    assert!(fetches_first, "{:?}", &w.sent(c)[..6]);
    for (i, &(offset, len)) in asked.iter().enumerate() {
        assert_eq!(offset, i as u64 * piece);
        assert_eq!(len, piece.min(bytes.len() as u64 - offset));
    }
}

#[test]
fn a_stream_without_progress_fails_at_its_deadline_and_a_piece_not_asked_for_is_refused() {
    let mut w = World::new();
    let p = w.join("producer", true);
    let c = w.join("far", false);
    w.deaf = true;
    w.offer(p, "silent", &[3; 5000], false);
    let cdo = w.declare(c, "silent").expect("declare");
    let call = waiting(w.timed(c, |k, now| k.demand(now, cdo, 1)).expect("demand"));
    // The demand waits for as long as it takes; the stream must show progress.
    w.core(c).set_deadline((Op::Demand, cdo), call, None);
    w.pump();
    let t0 = w.now;
    w.run_until(t0 + CALL_TIMEOUT - Duration::from_nanos(1));
    assert!(w.apps[c].stream_errors.is_empty());
    w.run_until(t0 + CALL_TIMEOUT);
    assert_eq!(w.apps[c].stream_errors, [CallError::Timeout(Op::Fetch)]);

    // Bytes nobody asked for end a stream: nothing of them is delivered.
    let mut k: ClientCore<Plain> = ClientCore::new(3, CALL_TIMEOUT);
    let now = Instant::now();
    k.stream(now, 7, 100, 7).expect("stream");
    let chunk = |offset, data: Vec<u8>| {
        FromPm::Chunk(pool_core::proto::Chunk {
            transfer: 7,
            offset,
            data,
        })
    };
    k.handle(now, chunk(50, vec![0; 50]));
    let Some(Event::Piece {
        piece: Err(CallError::Protocol(why)),
        ..
    }) = k.poll_event()
    else {
        panic!("a piece not asked for was accepted");
    };
    assert!(why.contains("not asked for"), "{why}");
    k.handle(now, chunk(0, vec![0; 100]));
    assert!(k.poll_event().is_none(), "the stream ended");
}

support::at_three_shards!(
    the_pm_has_an_offer_written_to_files_for_consumers_it_shares_no_network_with,
    small_cdos_come_with_their_tickets_and_are_not_reported,
    offers_written_to_the_global_file_system_are_read_from_it,
    memory_lent_for_a_demand_goes_with_its_ticket,
    corrupted_bytes_fail_the_demand_and_are_reported,
    an_unanswered_call_times_out_exactly_at_its_deadline_and_its_request_stands,
    an_event_held_for_its_acknowledgement_goes_on_when_the_core_acknowledges_it,
    a_waiting_demand_is_cancelled_by_retract_or_dispose,
    a_stream_without_progress_fails_at_its_deadline_and_a_piece_not_asked_for_is_refused,
    a_stream_transfer_is_fetched_piece_by_piece_through_both_cores,
    a_provider_that_never_writes_its_spill_holds_consumers_until_the_deadline,
    a_group_given_up_is_not_answered_and_its_members_wait_to_be_taken,
    a_group_with_a_failed_member_is_answered_with_its_error_once_the_others_ended,
    a_fabric_change_an_app_reports_reaches_the_pools_subscribers_unanswered,
    a_demand_after_a_completed_require_is_local_and_only_noticed,
    a_cdo_goes_from_offer_to_demand_through_both_cores,
    a_call_held_for_a_subscribers_acknowledgement_goes_on_at_the_pms_deadline,
);

/// Whether each offer app `app` sent carried its bytes, in order.
fn carried(w: &World, app: usize) -> Vec<bool> {
    (w.sent(app).into_iter())
        .filter_map(|m| match m {
            ToPm::SealOffer { extras, .. } | ToPm::Offer { extras, .. } => {
                Some(extras.inline().is_some())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_producer_told_its_bytes_were_dropped_offers_without_them_for_a_while() {
    let mut w = World::new();
    w.manager().set_policy(pool_core::policy::Policy {
        max_inline_bytes: 150,
        ..Default::default()
    });
    let p = w.join("producer", true);
    // The PM's budget holds the bytes of one offer of 100: the second's are dropped, and
    // the third goes without.
    let offered = ["a", "b", "c"].map(|name| {
        let (cdo, tag) = w.offer(p, name, &[1; 100], true);
        w.pump();
        assert_eq!(w.answer(p, tag), Some(&Ok(cdo)), "{name} offered");
        cdo
    });
    assert_eq!(carried(&w, p), [true, true, false]);
    // Consumers still get each, the third out of the producer's memory.
    let c = w.join("consumer", true);
    for (name, tag) in [("b", 50), ("c", 51)] {
        let want = w.core(c).declare(name).expect("declare");
        w.timed(c, |k, now| k.demand(now, want, tag))
            .expect("demand");
        w.pump();
        assert_eq!(w.core(c).take_arrived(want).expect("arrived").0, [1; 100]);
    }
    // A withdraw of the app makes room: the next offer carries its bytes again.
    w.timed(p, |k, now| k.withdraw(now, offered[0], 60))
        .expect("withdraw");
    w.pump();
    w.offer(p, "d", &[1; 100], true);
    w.pump();
    assert_eq!(carried(&w, p), [true, true, false, true]);
    // Dropped again; a while later the next offer carries its bytes again.
    for name in ["e", "f"] {
        w.offer(p, name, &[1; 100], true);
        w.pump();
    }
    let later = w.now + pool_core::client::INLINE_PAUSE;
    w.run_until(later);
    w.offer(p, "g", &[1; 100], true);
    w.pump();
    assert_eq!(carried(&w, p), [true, true, false, true, true, false, true]);
}

/// Both ends of a subscription's window: the PM sends a window of events ahead of what
/// the app took; the core reports every `TAKEN_REPORT` taken, as a deferred notice, and
/// the PM sends as many more, until every event came, once and in order.
#[test]
fn a_subscriptions_events_come_a_window_ahead_of_what_the_app_took() {
    let mut w = World::new();
    let (s, p) = (w.join("consumer", true), w.join("producer", true));
    let wanted = (
        EventKind::Offer.into(),
        Selector::all().expr().clone(),
        SubscribeOptions::default(),
    );
    w.timed(s, |k, now| k.subscribe(now, wanted, 77, 1))
        .expect("subscribe");
    w.pump();
    let Some(Ok(sub)) = w.answer(s, 1).cloned() else {
        panic!("not subscribed");
    };
    let total = EVENT_WINDOW as usize + 300;
    for i in 0..total {
        w.offer(p, &format!("cdo-{i}"), b"x", true);
    }
    w.pump();
    let serials = |w: &World| -> Vec<(u64, String)> {
        (w.apps[s].news[&77].iter())
            .map(|n| match n {
                News::Event(e) => (e.serial, e.cdo.clone().expect("named")),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(serials(&w).len(), EVENT_WINDOW as usize, "a window ahead");
    // The app takes them one by one: a report every TAKEN_REPORT, deferred.
    let mut taken = 0;
    while taken < serials(&w).len() {
        w.apps[s].sent.clear();
        let serial = serials(&w)[taken].0;
        w.client(s).took(sub, serial);
        taken += 1;
        w.pump();
        let sent: Vec<(ToPm, bool)> = (w.apps[s].sent.iter())
            .map(|t| (t.msg.clone(), t.deferred))
            .collect();
        if taken % TAKEN_REPORT as usize == 0 {
            let count = TAKEN_REPORT;
            assert_eq!(sent, [(ToPm::Taken { sub, count }, true)], "after {taken}");
        } else {
            assert!(sent.is_empty(), "after {taken}: {sent:?}");
        }
    }
    let names: Vec<String> = serials(&w).into_iter().map(|(_, name)| name).collect();
    let want: Vec<String> = (0..total).map(|i| format!("cdo-{i}")).collect();
    assert_eq!(names, want, "every event once, in order");
}
