//! Offers not registered with the fabric (protocol 21: an offer that carries its bytes to
//! the PM, or plain memory): copied by consumers on the provider's host only, never read by
//! RMA; a copy that fails sends the offer another way and plans no more copies for that
//! consumer.

mod support;

use pool_core::ConnId;
use pool_core::proto::{FromPm, OfferExtras, Source, ToPm, TransferId};
use support::*;

/// Offers `len` bytes under `name` from `conn`, not registered with the fabric.
fn offer_unregistered(pm: &mut Pm, conn: ConnId, name: &str, len: u64) {
    let cdo = pm.declare(conn, name);
    pm.seal(conn, cdo);
    let extras = OfferExtras::new(Vec::new(), Some(memory_file())).with_unregistered();
    let region = region(len);
    let out = pm.feed(
        conn,
        ToPm::Offer {
            cdo,
            region,
            extras,
        },
    );
    assert_eq!(
        out[0],
        (conn, done(pool_core::proto::Op::Offer, cdo)),
        "{out:?}"
    );
}

/// The source of the ticket `conn` gets for its demand of `name`.
fn demanded(pm: &mut Pm, conn: ConnId, name: &str) -> (TransferId, Source) {
    let want = pm.declare(conn, name);
    let out = pm.feed(conn, ToPm::Demand { cdo: want });
    match out.as_slice() {
        [
            (
                c,
                FromPm::Ticket {
                    transfer, source, ..
                },
            ),
        ] if *c == conn => (*transfer, source.clone()),
        other => panic!("a ticket for {name}: {other:?}"),
    }
}

#[test]
fn a_same_host_consumer_copies_it_and_one_on_another_host_gets_it_by_stream() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    offer_unregistered(&mut pm, p, "t", 100);
    let (c, _) = pm.join("consumer");
    let (_, source) = demanded(&mut pm, c, "t");
    assert!(
        matches!(&source, Source::Rma { region, memory: Some(m), .. }
            if region.len == 100 && m.copy_only && m.process == memory_of("producer")),
        "a copy out of the provider's memory, nothing else: {source:?}"
    );
    // Registered, the same offer is a copy with the RMA read to fall back on.
    pm.offer(p, "r", 100);
    let (_, source) = demanded(&mut pm, c, "r");
    assert!(
        matches!(&source, Source::Rma { memory: Some(m), .. } if !m.copy_only),
        "{source:?}"
    );
    // Over TCP, on two hosts: RMA for the registered offer, a stream for the other.
    let (tp, _) = pm.join_at("tcp-producer", "node1", 90, Some(tcp("tp")));
    let (remote, _) = pm.join_at("remote", "node2", 91, Some(tcp("remote")));
    pm.offer(tp, "tr", 64);
    offer_unregistered(&mut pm, tp, "tu", 64);
    let (_, source) = demanded(&mut pm, remote, "tr");
    assert!(
        matches!(&source, Source::Rma { memory: None, .. }),
        "{source:?}"
    );
    let (_, source) = demanded(&mut pm, remote, "tu");
    assert_eq!(source, Source::Stream { len: 64 }, "never by RMA");
    // Of two offers of a name, the one the consumer reads itself is preferred to the one
    // the PM would relay.
    let (tp2, _) = pm.join_at("tcp-producer-2", "node1", 92, Some(tcp("tp2")));
    offer_unregistered(&mut pm, tp, "both", 64);
    pm.offer(tp2, "both", 64);
    let (_, source) = demanded(&mut pm, remote, "both");
    assert!(
        matches!(&source, Source::Rma { endpoint, .. } if **endpoint == tcp("tp2")),
        "{source:?}"
    );
}

#[test]
fn a_failed_copy_sends_it_by_stream_and_no_more_copies_are_planned_for_that_consumer() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    offer_unregistered(&mut pm, p, "t", 100);
    offer_unregistered(&mut pm, p, "t2", 200);
    let (c, _) = pm.join("consumer");
    // Two copies in flight (a burst), both failing: each goes by stream, none is lost.
    let tickets = [demanded(&mut pm, c, "t"), demanded(&mut pm, c, "t2")];
    for ((transfer, source), len) in tickets.into_iter().zip([100, 200]) {
        assert!(matches!(&source, Source::Rma { memory: Some(m), .. } if m.copy_only));
        let failed = ToPm::TransferDone {
            transfer,
            error: Some("this process cannot copy it".into()),
            direct: None,
        };
        let out = pm.feed(c, failed);
        let again = out.iter().find_map(|(to, m)| match m {
            FromPm::Ticket { source, .. } if *to == c => Some(source.clone()),
            _ => None,
        });
        assert_eq!(again, Some(Source::Stream { len }), "{out:?}");
    }
    // A registered offer is read by RMA from now on, not copied.
    pm.offer(p, "r", 100);
    let (_, source) = demanded(&mut pm, c, "r");
    assert!(
        matches!(&source, Source::Rma { memory: None, .. }),
        "{source:?}"
    );
    // Another consumer still copies.
    let (other, _) = pm.join("other");
    let (_, source) = demanded(&mut pm, other, "t");
    assert!(matches!(&source, Source::Rma { memory: Some(m), .. } if m.copy_only));
}
