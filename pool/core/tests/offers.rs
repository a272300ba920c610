//! An app's offers through its protocol core ([`ClientCore`]) against the pool manager in
//! memory ([`World`]): the transport the core chooses for an offer, the pieces of an offer
//! the PM asks for, and the withdraw that hands a file of the global file system over to a
//! PM that keeps such files (the driver links it: [`Event::HandOver`]), withdraws without it
//! when the PM cannot keep it or the link fails, and refuses a second withdraw meanwhile.
//! Nothing here waits: every answer comes at the instant the world started.

mod support;

use pool_core::attr::{self, AttrValue, Attributes};
use pool_core::client::{CallError, ClientCore, Event, GfsUse, Phase, Transport};
use pool_core::policy::Policy;
use pool_core::proto::{CdoId, FromPm, Op, Refusal, ToPm};
use pool_core::sim::{Plain, World};
use support::{demanded, withdraws, wrong};

/// The PM's directory of kept files.
const KEEP: &str = "/gfs/kept";

/// A PM keeping files in [`KEEP`] (`keep`) or none, and a producer of `node1` with the
/// world's global file system and no fabric.
fn world(keep: bool) -> (World, usize) {
    let mut w = World::new();
    if keep {
        w.manager().set_keep_dir(Some(KEEP));
    }
    let p = w.join_with_gfs_only("producer", "node1");
    (w, p)
}

fn sealed_with(transport: &str) -> Attributes {
    let mut a = Attributes::new();
    a.insert(attr::TRANSPORT.into(), AttrValue::Str(transport.into()));
    a
}

#[test]
fn the_core_chooses_each_offers_transport_from_its_attributes_and_the_apps_default() {
    let mut core = ClientCore::<Plain>::new(1, pool_core::sim::CALL_TIMEOUT);
    let cdo = core.declare("field").expect("declare");
    let none = Attributes::new();
    // No GFS directory: the fabric, and a CDO asking for the file system is refused.
    assert_eq!(core.transport(cdo, Some(&none)), Ok(Transport::Fabric));
    let refused = core
        .transport(cdo, Some(&sealed_with("GFS")))
        .expect_err("no GFS");
    assert_eq!(refused, CallError::NoGfs { cdo });
    assert!(
        refused.to_string().contains("set MSTRO_TRANSPORT_GFS_DIR"),
        "{refused}"
    );
    let mio = core
        .transport(cdo, Some(&sealed_with("MIO")))
        .expect_err("no transport");
    assert!(
        matches!(&mio, CallError::Attribute(e) if e.to_string().contains("\"GFS\" or \"RDMA\"")),
        "{mio}"
    );
    // With one, the attributes choose; without them, the app's default does.
    core.set_gfs(GfsUse {
        dir: true,
        by_default: false,
    });
    assert_eq!(core.transport(cdo, Some(&none)), Ok(Transport::Fabric));
    assert_eq!(
        core.transport(cdo, Some(&sealed_with("gfs"))),
        Ok(Transport::Gfs)
    );
    core.set_gfs(GfsUse {
        dir: true,
        by_default: true,
    });
    assert_eq!(core.transport(cdo, Some(&none)), Ok(Transport::Gfs));
    assert_eq!(
        core.transport(cdo, Some(&sealed_with("RDMA"))),
        Ok(Transport::Fabric)
    );
}

#[test]
fn a_sealed_transport_chooses_the_offer_that_follows_the_seal() {
    let (mut w, p) = world(false);
    let cdo = w.declare(p, "sealed-first").expect("declare");
    w.timed(p, |k, now| k.seal(now, cdo, sealed_with("RDMA"), 1))
        .expect("seal");
    w.pump();
    assert_eq!(w.answer(p, 1), Some(&Ok(cdo)));
    w.client(p).set_gfs(GfsUse {
        dir: true,
        by_default: true,
    });
    assert_eq!(w.client(p).transport(cdo, None), Ok(Transport::Fabric));
}

#[test]
fn a_withdraw_hands_the_file_over_and_a_consumer_after_the_producer_reads_it() {
    let (mut w, p) = world(true);
    let start = w.now;
    assert_eq!(w.core(p).keep_dir().map(|d| &**d), Some(KEEP), "welcomed");
    let (cdo, tag) = w.offer_to_gfs(p, "field", b"forty-two");
    w.pump();
    assert_eq!(w.answer(p, tag), Some(&Ok(cdo)));
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    w.pump();
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    assert_eq!(withdraws(&w, p), [Some(format!("{KEEP}/{cdo}"))]);
    assert_eq!(w.client(p).phase(cdo), Some(Phase::Sealed));
    w.timed(p, |k, now| k.leave(now, 8)).expect("leave");
    w.pump();
    assert_eq!(w.answer(p, 8), Some(&Ok(0)), "bye");
    // The pool offers the linked file in the producer's stead.
    assert_eq!(demanded(&mut w, "node2", "field"), b"forty-two");
    assert_eq!(w.now, start, "nothing waited");
}

#[test]
fn nothing_goes_out_until_the_file_is_linked_and_a_second_withdraw_meanwhile_is_refused() {
    let (mut w, p) = world(true);
    let (cdo, _) = w.offer_to_gfs(p, "field", b"bytes");
    w.pump();
    w.apps[p].sent.clear();
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    let Some(Event::HandOver { cdo: linked, dir }) = w.core(p).poll_event() else {
        panic!("no hand-over");
    };
    assert_eq!((linked, &*dir), (cdo, KEEP));
    assert!(w.core(p).poll_transmit().is_none(), "the withdraw waits");
    assert_eq!(
        w.timed(p, |k, now| k.withdraw(now, cdo, 8)),
        Err(CallError::Refused {
            op: Op::Withdraw,
            why: wrong(Op::Withdraw, "being withdrawn"),
        })
    );
    w.core(p)
        .handed_over(cdo, Ok(Some(format!("{KEEP}/{cdo}").into())));
    w.pump();
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    assert_eq!(w.answer(p, 8), None, "refused at once, never filed");
    assert_eq!(withdraws(&w, p).len(), 1);
}

#[test]
fn a_file_the_pm_cannot_keep_is_withdrawn_without_it_in_the_same_call() {
    let (mut w, p) = world(true);
    w.manager().set_policy(Policy {
        max_kept_bytes: 0,
        ..Policy::default()
    });
    let (cdo, _) = w.offer_to_gfs(p, "too-much", b"bytes");
    w.pump();
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    w.pump();
    // Refused as "not kept", then withdrawn without: the call hears only the end.
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    assert_eq!(withdraws(&w, p), [Some(format!("{KEEP}/{cdo}")), None]);
    assert_eq!(w.client(p).phase(cdo), Some(Phase::Sealed));
}

#[test]
fn a_link_that_fails_or_a_pm_that_keeps_nothing_withdraws_at_once() {
    let (mut w, p) = world(true);
    w.unlinkable = Some("Invalid cross-device link".into());
    let (cdo, _) = w.offer_to_gfs(p, "elsewhere", b"bytes");
    w.pump();
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    w.pump();
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    assert_eq!(withdraws(&w, p), [None]);

    let (mut w, p) = world(false);
    let (cdo, _) = w.offer_to_gfs(p, "no-keeper", b"bytes");
    w.pump();
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    assert!(
        w.core(p).poll_event().is_none(),
        "no hand-over without a keeper"
    );
    w.pump();
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    assert_eq!(withdraws(&w, p), [None]);
}

#[test]
fn a_file_written_at_the_pms_request_is_handed_over_too() {
    let (mut w, p) = world(true);
    // In memory (no fabric: served by stream or a file); a consumer of another host
    // shares no network with it, so the PM has the producer write it to a file.
    let (cdo, _) = w.offer(p, "spilt", b"spilt bytes", false);
    w.pump();
    assert_eq!(demanded(&mut w, "node2", "spilt"), b"spilt bytes");
    assert!(
        w.sent(p)
            .iter()
            .any(|m| matches!(m, ToPm::Spilled { file: Ok(_), .. })),
        "spilled"
    );
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    w.pump();
    assert_eq!(w.answer(p, 7), Some(&Ok(cdo)));
    assert_eq!(withdraws(&w, p), [Some(format!("{KEEP}/{cdo}"))]);
    w.timed(p, |k, now| k.leave(now, 8)).expect("leave");
    w.pump();
    assert_eq!(demanded(&mut w, "node3", "spilt"), b"spilt bytes");
}

#[test]
fn the_pm_is_served_pieces_within_an_offer_and_no_others() {
    let (mut w, p) = world(false);
    let (cdo, _) = w.offer(p, "streamed", &[7; 100], false);
    w.pump();
    let now = w.now;
    let serve = |cdo: CdoId, offset, len| FromPm::Serve {
        transfer: 5,
        cdo,
        offset,
        len,
    };
    for (asked, served) in [
        (serve(cdo, 90, 10), true),
        (serve(cdo, 90, 11), false),
        (serve(cdo, u64::MAX, 2), false),
        (serve(cdo + 1, 0, 1), false),
    ] {
        w.core(p).handle(now, asked);
        let event = w.core(p).poll_event();
        assert_eq!(
            matches!(
                event,
                Some(Event::Serve {
                    offset: 90,
                    len: 10,
                    ..
                })
            ),
            served
        );
    }
    w.core(p).served(5, 90, vec![7; 10]).expect("served");
    assert!(matches!(
        w.core(p).poll_transmit().map(|t| t.msg),
        Some(ToPm::Chunk(c)) if c.transfer == 5 && c.offset == 90 && c.data == [7; 10]
    ));
    // Withdrawn: nothing of it is served any more.
    w.timed(p, |k, now| k.withdraw(now, cdo, 7))
        .expect("withdraw");
    w.pump();
    w.core(p).handle(now, serve(cdo, 0, 1));
    assert!(w.core(p).poll_event().is_none());
}

#[test]
fn a_refused_offer_is_not_served_and_leaves_nothing_to_withdraw() {
    let (mut w, p) = world(false);
    let (cdo, _) = w.offer(p, "once", b"first", false);
    w.pump();
    // Offered twice: the second is refused and the first stays as it was.
    let twice = pool_core::client::Offer {
        cdo,
        bytes: b"second, longer",
        region: fabric_types::RemoteRegion {
            addr: 0,
            key: 0,
            len: 14,
        },
        registered: true,
        alternates: Vec::new(),
        file: None,
        seal: None,
        gfs: None,
    };
    w.timed(p, |k, now| k.offer(now, twice, 3)).expect("offer");
    w.pump();
    assert!(matches!(
        w.answer(p, 3),
        Some(Err(CallError::Refused {
            why: Refusal::WrongState { .. },
            ..
        }))
    ));
    let now = w.now;
    w.core(p).handle(
        now,
        FromPm::Serve {
            transfer: 5,
            cdo,
            offset: 0,
            len: 6,
        },
    );
    assert!(w.core(p).poll_event().is_none(), "the first offer's length");
}

support::at_three_shards!(
    the_pm_is_served_pieces_within_an_offer_and_no_others,
    nothing_goes_out_until_the_file_is_linked_and_a_second_withdraw_meanwhile_is_refused,
    a_withdraw_hands_the_file_over_and_a_consumer_after_the_producer_reads_it,
    a_sealed_transport_chooses_the_offer_that_follows_the_seal,
    a_refused_offer_is_not_served_and_leaves_nothing_to_withdraw,
    a_link_that_fails_or_a_pm_that_keeps_nothing_withdraws_at_once,
    a_file_written_at_the_pms_request_is_handed_over_too,
);
