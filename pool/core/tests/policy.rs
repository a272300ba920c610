//! The manager's bounds, in memory: what one app may make it hold, attributes and
//! subscriptions, owned names, pinned transfers' deadlines, memory announcements,
//! reporters, the inline budget.

mod support;

use pool_core::ConnId;
use pool_core::admission::Peer;
use pool_core::attr::{AttrValue, Attributes};
use pool_core::auth::prove;
use pool_core::events::{EventKind, SubscribeOptions, TAKEN_REPORT};
use pool_core::policy::{NameOwner, Policy};
use pool_core::proto::{FromPm, OfferExtras, Op, Refusal, Source, ToPm, cdo_ids};
use pool_core::selector::Expr;
use std::time::Duration;
use support::*;

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
        let out = pm.feed(
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
        pm.feed(a, ToPm::Dispose { cdo, answer: false });
    }
    let cdo = pm.next_cdo(a);
    assert!(pm.feed(a, ToPm::Declare { cdo, name }).is_empty());
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
    let out = pm.feed(
        a,
        ToPm::Seal {
            cdo,
            attributes: big.clone(),
        },
    );
    assert!(is_quota(&out, Op::Seal), "{out:?}");
    let out = pm.feed(
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
        pm.feed(
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
    assert!(is_quota(&pm.feed(a, third.clone()), Op::Subscribe));
    pm.feed(a, ToPm::Unsubscribe { sub: second });
    assert!(matches!(
        pm.feed(a, third).as_slice(),
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
    let out = pm.feed(mallory, offer_msg(evil, 8));
    assert!(
        matches!(&out[..], [(_, FromPm::Refused { op: Op::Offer, why: Refusal::NotAllowed(why), .. })] if why.contains("\"producer\"")),
        "{out:?}"
    );
    // Unowned names are anybody's; the owner offers its own.
    let other = pm.sealed(mallory, "scratch", 1);
    assert_eq!(
        pm.feed(mallory, offer_msg(other, 8)),
        [(mallory, done(Op::Offer, other))]
    );
    let good = pm.sealed(producer, "field-7", 1);
    assert_eq!(
        pm.feed(producer, offer_msg(good, 8)),
        [(producer, done(Op::Offer, good))]
    );
    // The consumer's ticket names the provider.
    let want = pm.declare(consumer, "field-7");
    let out = pm.feed(consumer, ToPm::Demand { cdo: want });
    let provider = out.iter().find_map(|(_, m)| match m {
        FromPm::Ticket { provider, .. } => Some(provider.to_string()),
        _ => None,
    });
    assert_eq!(provider.as_deref(), Some("producer:0"));
}

#[test]
fn a_transfer_that_pins_a_withdrawn_offer_is_abandoned_at_its_deadline() {
    let mut pm = small(|p| p.transfer_timeout = Duration::from_secs(60));
    pm.now = pm.at(0);
    let (p, _) = pm.join("producer");
    let (pinner, _) = pm.join("pinner");
    let (honest, _) = pm.join("honest");
    let cdo = pm.sealed(p, "data", 1);
    pm.feed(p, offer_msg(cdo, 64));
    // The pinner takes a ticket and never reports the transfer done.
    let want = pm.declare(pinner, "data");
    let (_, transfer, ..) = ticket_of(&pm.feed(pinner, ToPm::Demand { cdo: want }));
    assert_eq!(pm.m.poll_timeout(), None, "no deadline while nobody waits");
    // An honest consumer waits for the same name.
    let waits = pm.declare(honest, "data");
    let out = pm.feed(honest, ToPm::Demand { cdo: waits });
    let (_, honest_transfer, ..) = ticket_of(&out);
    pm.feed(honest, transferred(honest_transfer));
    // The provider withdraws: pinned until the deadline, then released.
    assert!(pm.feed(p, ToPm::Withdraw { cdo, keep: None }).is_empty());
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
        pm.feed(pinner, transferred(transfer)),
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
    pm.m.connected_from(
        pm.now,
        conn,
        nonce,
        Peer::Local(Some(memory_of("producer").pid)),
    );
    pm.drain();
    let proof = prove(SECRET, &nonce, "wf", "producer", 0);
    let mut msg = join_msg("producer", &proof);
    if let ToPm::Join(j) = &mut msg {
        j.process = 555;
    }
    assert!(matches!(
        pm.feed(conn, msg)[..],
        [(_, FromPm::Welcome { .. })]
    ));
    pm.apps.insert(conn, (1, *cdo_ids(1).start() - 1));
    // Mallory replays the producer's pid and token from another process.
    let (conn2, nonce2) = (101, [8u8; 32]);
    pm.m.connected(pm.now, conn2, nonce2);
    pm.drain();
    let proof = prove(SECRET, &nonce2, "wf", "mallory", 0);
    let mut msg = join_msg("mallory", &proof);
    if let ToPm::Join(j) = &mut msg {
        j.process = 666;
        j.memory = Some(memory_of("producer"));
    }
    let app = match pm.feed(conn2, msg)[..] {
        [(_, FromPm::Welcome { app, .. })] => app,
        ref other => panic!("{other:?}"),
    };
    pm.apps.insert(conn2, (app, *cdo_ids(app).start() - 1));
    // A connection verified as another pid may not announce the producer's memory either.
    let (conn3, nonce3) = (102, [7u8; 32]);
    pm.m.connected_from(pm.now, conn3, nonce3, Peer::Local(Some(4242)));
    pm.drain();
    let proof = prove(SECRET, &nonce3, "wf", "liar", 0);
    let mut msg = join_msg("liar", &proof);
    if let ToPm::Join(j) = &mut msg {
        j.process = 777;
        j.memory = Some(memory_of("producer"));
    }
    assert!(matches!(
        pm.feed(conn3, msg)[..],
        [(_, FromPm::Welcome { .. })]
    ));
    // A consumer gets mallory's offer by shared memory but never "straight from the
    // producer's memory".
    let (consumer, _) = pm.join("consumer");
    let evil = pm.sealed(conn2, "x", 1);
    pm.feed(conn2, offer_msg(evil, 4096));
    let want = pm.declare(consumer, "x");
    let out = pm.feed(consumer, ToPm::Demand { cdo: want });
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
    pm.feed(conn, offer_msg(good, 4096));
    let want = pm.declare(consumer, "y");
    let out = pm.feed(consumer, ToPm::Demand { cdo: want });
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
    let out = pm.feed(
        a,
        ToPm::Report {
            change: link("10.2.0.1/24"),
        },
    );
    assert!(
        matches!(&out[..], [(c, FromPm::Refused { op: Op::Report, why: Refusal::NotAllowed(_), .. })] if *c == a),
        "{out:?}"
    );
    let out = pm.feed(
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
    let out = pm.feed(
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
    // An offer carrying `bytes` (its region `len` long), which the PM keeps or drops
    // (saying so).
    let offer = |pm: &mut Pm, name: &str, bytes: &[u8], len: u64, dropped: bool| {
        let cdo = pm.declare(p, name);
        assert_eq!(pm.seal(p, cdo), [(p, done(Op::Seal, cdo))]);
        let extras = OfferExtras::new(Vec::new(), None).with_inline(bytes);
        let out = pm.feed(
            p,
            ToPm::Offer {
                cdo,
                region: region(len),
                extras,
            },
        );
        let mut said = vec![(p, done(Op::Offer, cdo))];
        if dropped {
            said.insert(0, (p, FromPm::BytesDropped { cdo }));
        }
        assert_eq!(out, said, "{name}");
        cdo
    };
    // The source of a demand of `name`, and what the transport event says.
    let demand = |pm: &mut Pm, name: &str| {
        let want = pm.declare(c, name);
        let out = pm.feed(c, ToPm::Demand { cdo: want });
        let source = out
            .iter()
            .find_map(|(_, m)| match m {
                FromPm::Ticket { source, .. } => Some(source.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{out:?}"));
        (source, events_to(&out, s)[0].detail.clone())
    };
    let a = offer(&mut pm, "a", &[7; 60], 60, false);
    let (source, detail) = demand(&mut pm, "a");
    match source {
        Source::Inline { bytes } => assert_eq!(&*bytes.0, &[7; 60][..]),
        other => panic!("{other:?}"),
    }
    assert!(
        detail.ends_with("by inline (60 bytes with the ticket)"),
        "{detail}"
    );
    // 60 of the 100 bytes are held: the next 60-byte offer's bytes are dropped.
    offer(&mut pm, "b", &[8; 60], 60, true);
    assert_eq!(demand(&mut pm, "b").0.kind(), "rma");
    // Bytes that do not match the region are not kept either.
    offer(&mut pm, "c", &[9; 10], 20, true);
    assert_eq!(demand(&mut pm, "c").0.kind(), "rma");
    // A withdraw gives its bytes back at once (the ticket handed out keeps its own).
    pm.feed(p, ToPm::Withdraw { cdo: a, keep: None });
    offer(&mut pm, "d", &[10; 60], 60, false);
    assert_eq!(demand(&mut pm, "d").0.kind(), "inline");
}

#[test]
fn one_app_takes_at_most_its_share_of_the_inline_budget_and_one_offer_at_most_64_kib() {
    let mut pm = small(|p| p.max_inline_bytes = 1 << 20);
    let (p, _) = pm.join_at("p", "node1", 1, Some(tcp_at([10, 1, 0, 1])));
    let (q, _) = pm.join_at("q", "node1", 3, Some(tcp_at([10, 1, 0, 3])));
    let (c, _) = pm.join_at("c", "node2", 2, Some(tcp_at([10, 1, 0, 2])));
    // What the PM answers an offer carrying `len` bytes.
    let offer = |pm: &mut Pm, from: ConnId, name: &str, len: usize| {
        let cdo = pm.declare(from, name);
        assert_eq!(pm.seal(from, cdo), [(from, done(Op::Seal, cdo))]);
        let extras = OfferExtras::new(Vec::new(), None).with_inline(&vec![1u8; len][..]);
        let region = region(len as u64);
        let out = pm.feed(
            from,
            ToPm::Offer {
                cdo,
                region,
                extras,
            },
        );
        (cdo, out)
    };
    let kind = |pm: &mut Pm, name: &str| pm.ticket_kind(c, name);
    // One app's share of 1 MiB is 128 KiB: two offers of 64 KiB, not a third, whose
    // producer hears its bytes were dropped (it sends the next offers without).
    for (name, dropped) in [("p0", false), ("p1", false), ("p2", true)] {
        let (cdo, out) = offer(&mut pm, p, name, pool_core::policy::MAX_INLINE_OFFER);
        let mut said = vec![(p, done(Op::Offer, cdo))];
        if dropped {
            said.insert(0, (p, FromPm::BytesDropped { cdo }));
        }
        assert_eq!(out, said, "{name}");
    }
    assert_eq!(
        ["p0", "p1", "p2"].map(|n| kind(&mut pm, n)),
        ["inline", "inline", "rma"]
    );
    // Another app still gets its own share.
    let (q0, out) = offer(&mut pm, q, "q0", pool_core::policy::MAX_INLINE_OFFER);
    assert_eq!(out, [(q, done(Op::Offer, q0))]);
    assert_eq!(kind(&mut pm, "q0"), "inline");
    // One offer past 64 KiB keeps its bytes, whatever the budget (issue #36: 15 MiB).
    let mut pm2 = small(|_| {});
    let (p, _) = pm2.join_at("p", "node1", 1, Some(tcp_at([10, 1, 0, 1])));
    let cdo = pm2.declare(p, "big");
    pm2.seal(p, cdo);
    let extras = OfferExtras::new(Vec::new(), None).with_inline(&vec![1u8; 15 << 20][..]);
    pm2.feed(
        p,
        ToPm::Offer {
            cdo,
            region: region(15 << 20),
            extras,
        },
    );
    let (c, _) = pm2.join_at("c", "node2", 2, Some(tcp_at([10, 1, 0, 2])));
    let want = pm2.declare(c, "big");
    let out = pm2.feed(c, ToPm::Demand { cdo: want });
    assert!(
        out.iter()
            .any(|(_, m)| matches!(m, FromPm::Ticket { source, .. } if source.kind() == "rma")),
        "{out:?}"
    );
}

#[test]
fn an_app_that_leaves_with_many_cdos_is_reaped_a_slice_per_step() {
    let mut pm = Pm::new();
    let (w, _) = pm.join("waiters");
    let (p, papp) = pm.join("provider");
    let (c, _) = pm.join("consumer");
    // 10,000 demands of one name, and one offer the consumer's demand needs.
    let n = 10_000u64;
    for _ in 0..n {
        let cdo = pm.declare(w, "one");
        pm.feed(w, ToPm::Demand { cdo });
    }
    let (_, _) = pm.offer(w, "only-here", 8);
    let want = pm.declare(c, "only-here");
    pm.m.handle(pm.now, c, ToPm::Demand { cdo: want });
    let _ = pm.drain();
    // The app dies: its CDOs go a slice per step of work, not at once.
    pm.m.disconnected(pm.now, w);
    let mut out: Vec<_> = std::iter::from_fn(|| pm.m.poll_output()).collect();
    assert!(pm.m.work(pm.now), "more than one slice to reap");
    out.extend(std::iter::from_fn(|| pm.m.poll_output()));
    // Meanwhile an offer of that name (sent as a driver would, between two steps) tickets
    // none of the gone app's demands.
    let cdo = cdo_ids(papp).start() + 1_000_000;
    for msg in [
        ToPm::Declare {
            cdo,
            name: "one".into(),
        },
        ToPm::Seal {
            cdo,
            attributes: Attributes::new(),
        },
        ToPm::Offer {
            cdo,
            region: region(8),
            extras: OfferExtras::new(Vec::new(), None),
        },
    ] {
        pm.m.handle(pm.now, p, msg);
    }
    let offered: Vec<_> = std::iter::from_fn(|| pm.m.poll_output()).collect();
    assert!(
        !offered
            .iter()
            .any(|(_, m)| matches!(m, FromPm::Ticket { .. })),
        "{offered:?}"
    );
    let mut steps = 1;
    loop {
        steps += 1;
        if !pm.m.work(pm.now) {
            break;
        }
    }
    out.extend(std::iter::from_fn(|| pm.m.poll_output()));
    assert_eq!(steps, (n as usize + 1).div_ceil(pool_core::REAP_SLICE));
    // The consumer's demand, which only the dead app's offer could serve, failed.
    assert!(
        out.contains(&(c, refused(Op::Demand, Some(want), Refusal::NoProvider))),
        "{out:?}"
    );
    // And the PM serves on: a demand of "one" is ticketed from the provider.
    assert_eq!(pm.ticket_kind(c, "one"), "rma");
}

/// `cdo` sealed without attributes and offered (8 bytes), in one message.
fn seal_offer(cdo: pool_core::proto::CdoId) -> ToPm {
    ToPm::SealOffer {
        cdo,
        attributes: Attributes::new(),
        region: region(8),
        extras: OfferExtras::default(),
    }
}

/// `producer` declares, seals and offers a CDO of each of `names`, handled one message
/// after another with nothing taken from the output (one frame's round).
fn offer_unread(pm: &mut Pm, producer: ConnId, names: impl IntoIterator<Item = String>) {
    for name in names {
        let cdo = pm.next_cdo(producer);
        pm.m.handle(pm.now, producer, ToPm::Declare { cdo, name });
        pm.m.handle(pm.now, producer, seal_offer(cdo));
    }
}

/// `field/0`, `field/1`, ...: `n` names.
fn fields(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| format!("field/{i}"))
}

/// One member's 64 subscriptions to every offer, then a frame of 1,000 offers: the events
/// for its connection are charged as they are made and stop at `max_event_bytes` (never
/// built whole first); the connection is cut off before the next output is taken, its app
/// gone, and an honest subscriber with one subscription hears of every offer.
#[test]
fn events_a_round_makes_for_a_connection_are_bounded_as_they_are_made() {
    const BOUND: usize = 256 << 10;
    let mut pm = small(|p| p.max_event_bytes = BOUND);
    let (greedy, _) = pm.join("greedy");
    let (honest, _) = pm.join("honest");
    let (producer, _) = pm.join("producer");
    for _ in 0..64 {
        pm.subscribe(greedy, EventKind::Offer, "", SubscribeOptions::default());
    }
    pm.subscribe(honest, EventKind::Offer, "", SubscribeOptions::default());
    // The frame: handled message by message, the output taken only at the end.
    offer_unread(&mut pm, producer, fields(1000));
    let out = pm.drain();
    let to_greedy = events_to(&out, greedy).len();
    let to_honest = events_to(&out, honest).len();
    // What was made for it before the bound was passed was dropped with it.
    assert_eq!(to_greedy, 0, "its queue was dropped");
    assert_eq!(
        to_honest, 1000,
        "the honest subscriber heard of every offer"
    );
    assert_eq!(pm.m.take_cut(), vec![greedy]);
    assert_eq!(pm.m.app_count(), 2, "the greedy app is gone");
    assert!(!pm.m.is_joined(greedy));
    // The producer was served throughout.
    let done = out
        .iter()
        .filter(|(c, m)| {
            *c == producer
                && matches!(
                    m,
                    FromPm::Done { op: Op::Offer, .. } | FromPm::DoneMany { .. }
                )
        })
        .count();
    assert_eq!(done, 1000);
}

/// The events waiting for a subscriber count against its app's bytes: an app whose CDOs
/// leave it little room is cut off once its events would pass what is left.
#[test]
fn events_waiting_for_a_subscriber_count_against_its_app() {
    let mut pm = small(|p| p.max_app_bytes = 64 << 10);
    let (sub, _) = pm.join("subscriber");
    let (producer, _) = pm.join("producer");
    pm.subscribe(sub, EventKind::Offer, "", SubscribeOptions::default());
    // Most of its quota in its own declared CDOs.
    let mut n = 0;
    loop {
        let cdo = pm.next_cdo(sub);
        let out = pm.feed(
            sub,
            ToPm::Declare {
                cdo,
                name: format!("mine/{n:0>200}"),
            },
        );
        if is_quota(&out, Op::Declare) {
            break;
        }
        n += 1;
    }
    offer_unread(&mut pm, producer, fields(200));
    pm.drain();
    assert_eq!(pm.m.take_cut(), vec![sub], "cut off for its app's bytes");
}

/// The pool's budget holds for all apps together: each app within its quota, the second
/// is refused once the pool holds `max_bytes`, with a message naming the option; what
/// the first gives back makes room again.
#[test]
fn the_pool_holds_at_most_its_budget_for_all_apps_together() {
    let mut pm = small(|p| {
        p.max_app_bytes = 96 << 10;
        p.max_bytes = 128 << 10;
    });
    let fill =
        |pm: &mut Pm, conn: ConnId, prefix: &str| -> (Vec<pool_core::proto::CdoId>, String) {
            let mut made = Vec::new();
            loop {
                let cdo = pm.next_cdo(conn);
                let out = pm.feed(
                    conn,
                    ToPm::Declare {
                        cdo,
                        name: format!("{prefix}/{:0>100}", made.len()),
                    },
                );
                match out.as_slice() {
                    [
                        (
                            _,
                            FromPm::Refused {
                                why: Refusal::Quota(why),
                                ..
                            },
                        ),
                    ] => return (made, why.clone()),
                    _ => made.push(cdo),
                }
            }
        };
    let (a, _) = pm.join("a");
    let (b, _) = pm.join("b");
    let (made_a, why_a) = fill(&mut pm, a, "a");
    assert!(why_a.contains("--max-app-bytes"), "{why_a}");
    let (made_b, why_b) = fill(&mut pm, b, "b");
    assert!(why_b.contains("--max-bytes"), "{why_b}");
    assert!(
        made_b.len() < made_a.len() / 2,
        "{} vs {}",
        made_b.len(),
        made_a.len()
    );
    // a gives back half: b has room again.
    for &cdo in &made_a[..made_a.len() / 2] {
        pm.feed(a, ToPm::Dispose { cdo, answer: false });
    }
    let (more_b, _) = fill(&mut pm, b, "b2");
    assert!(!more_b.is_empty());
    // a leaves: everything it held (half its quota now) is the pool's again.
    pm.feed(a, ToPm::Leave);
    let (c, _) = pm.join("c");
    let (made_c, why_c) = fill(&mut pm, c, "c");
    assert!(why_c.contains("--max-bytes"), "{why_c}");
    assert!(
        made_c.len() > made_b.len(),
        "{} vs {}",
        made_c.len(),
        made_b.len()
    );
}

/// At most `max_apps_per_peer` apps joined at once from one address (one process on the
/// Unix socket); one more is refused, saying which option; once one leaves, another joins.
#[test]
fn apps_joined_from_one_peer_are_bounded() {
    let mut pm = small(|p| p.max_apps_per_peer = 2);
    let from = |pm: &mut Pm, peer: Peer, component: &str| -> (ConnId, Vec<(ConnId, FromPm)>) {
        let conn =
            100 + pm.m.app_count() as ConnId + pm.now.duration_since(pm.t0).as_nanos() as ConnId;
        pm.now += Duration::from_nanos(1);
        let nonce = [7; 32];
        pm.m.connected_from(pm.now, conn, nonce, peer);
        pm.drain();
        let proof = prove(pool_core::sim::SECRET, &nonce, "wf", component, 0);
        (conn, pm.feed(conn, join_msg(component, &proof)))
    };
    let ip = Peer::Tcp("10.0.0.1".parse().expect("ip"));
    let (first, _) = from(&mut pm, ip, "a");
    from(&mut pm, ip, "b");
    let (_, out) = from(&mut pm, ip, "c");
    match out.as_slice() {
        [
            (
                _,
                FromPm::Refused {
                    op: Op::Join,
                    why: Refusal::NotAdmitted(why),
                    ..
                },
            ),
        ] => {
            assert!(
                why.contains("10.0.0.1") && why.contains("--max-apps-per-peer"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Another address, and another process on the Unix socket, are other peers.
    let (_, out) = from(&mut pm, Peer::Tcp("10.0.0.2".parse().expect("ip")), "d");
    assert!(
        matches!(out.as_slice(), [(_, FromPm::Welcome { .. })]),
        "{out:?}"
    );
    let (_, out) = from(&mut pm, Peer::Local(Some(42)), "e");
    assert!(
        matches!(out.as_slice(), [(_, FromPm::Welcome { .. })]),
        "{out:?}"
    );
    // One leaves: room for another.
    pm.m.disconnected(pm.now, first);
    pm.drain();
    let (_, out) = from(&mut pm, ip, "f");
    assert!(
        matches!(out.as_slice(), [(_, FromPm::Welcome { .. })]),
        "{out:?}"
    );
}

/// A new subscription's replay of the current state is bounded by its own limit, not by
/// what a round's operations may make: a subscriber that hears of many CDOs at once and
/// of new offers in the same round is not cut off (the new ones wait for the app to take
/// the past, which fills the subscription's window).
#[test]
fn a_replay_is_not_what_a_rounds_events_are_bounded_by() {
    let mut pm = small(|p| p.max_event_bytes = 64 << 10);
    let (producer, _) = pm.join("producer");
    offer_unread(&mut pm, producer, fields(2000));
    pm.drain();
    let (late, _) = pm.join("late");
    let options = SubscribeOptions {
        replay: true,
        ..SubscribeOptions::default()
    };
    let request = ToPm::Subscribe {
        local: 1,
        kinds: EventKind::Offer.into(),
        selector: Box::new(Expr::Has(".maestro.core.cdo.name".into())),
        options,
    };
    pm.m.handle(pm.now, late, request);
    offer_unread(&mut pm, producer, ["new".to_string()]);
    let out = pm.drain();
    assert!(pm.m.take_cut().is_empty());
    assert_eq!(events_to(&out, late).len(), 2000, "the past");
    // The past fills the subscription's window: the new offer's event waits until the
    // app took enough of it.
    let sub = out
        .iter()
        .find_map(|(_, m)| match m {
            FromPm::Subscribed { sub, .. } => Some(*sub),
            _ => None,
        })
        .expect("subscribed");
    let out = pm.feed(late, ToPm::Taken { sub, count: 2000 });
    let new = events_to(&out, late);
    assert_eq!(new.len(), 1, "then the new offer: {out:?}");
    assert_eq!(new[0].cdo.as_deref(), Some("new"));
}

/// Events waiting past a subscription's window count against the subscriber's app: an
/// app that takes its events (and says so) gives their bytes back and never comes near
/// its bound; one that does not is cut off once those waiting would pass it.
#[test]
fn events_waiting_past_the_window_count_against_the_subscribers_app() {
    let run = |reports: bool| -> Vec<ConnId> {
        let mut pm = small(|p| p.max_app_bytes = 1 << 20);
        let (s, _) = pm.join("subscriber");
        let sub = pm.subscribe(s, EventKind::Declare, "", SubscribeOptions::default());
        let (p, _) = pm.join("producer");
        let mut told = 0;
        for i in 0..20_000 {
            let cdo = pm.next_cdo(p);
            let name = format!("field/{i:0>64}");
            told += pm
                .feed(p, ToPm::Declare { cdo, name })
                .iter()
                .chain(&pm.feed(p, ToPm::Dispose { cdo, answer: false }))
                .filter(|(c, m)| *c == s && matches!(m, FromPm::Event { .. }))
                .count();
            if reports && told >= TAKEN_REPORT as usize {
                told -= TAKEN_REPORT as usize;
                pm.feed(
                    s,
                    ToPm::Taken {
                        sub,
                        count: TAKEN_REPORT,
                    },
                );
            }
            let cut = pm.m.take_cut();
            if !cut.is_empty() {
                return cut;
            }
        }
        Vec::new()
    };
    assert!(run(true).is_empty(), "taken events give their bytes back");
    // The subscriber joined first: connection 1 of a fresh PM.
    assert_eq!(run(false), [1], "cut off for the events waiting");
}
