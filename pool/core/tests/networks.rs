//! The manager's networks, in memory: links going down and up, transport events that
//! say how and why, the next common network, what apps may report of their fabric.

mod support;

use fabric_types::RemoteRegion;
use pool_core::ConnId;
use pool_core::events::{EventKind, SubscribeOptions};
use pool_core::policy::Policy;
use pool_core::proto::{FromPm, OfferExtras, Op, Source, ToPm};
use support::*;

#[test]
fn a_link_down_moves_new_transfers_off_it_until_it_is_up() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("watcher");
    pm.subscribe(s, EventKind::Fabric, "", SubscribeOptions::default());
    let (p, _) = pm.join_at("p", "node1", 1, Some(tcp_at([10, 1, 0, 1])));
    let (c, _) = pm.join_at("c", "node2", 2, Some(tcp_at([10, 1, 0, 2])));
    let demand = |pm: &mut Pm, name: &str| {
        pm.offer(p, name, 64);
        pm.ticket_kind(c, name)
    };
    assert_eq!(demand(&mut pm, "before"), "rma");
    let path1 = ["10.1.0.9/24".parse().expect("subnet")];
    pm.m.link_changed(pm.now, "veth1", &path1, false);
    let e = &events_to(&pm.drain(), s)[0];
    assert_eq!(e.kind, EventKind::Fabric);
    assert_eq!(e.detail, "link veth1 down (10.1.0.9/24)");
    assert_eq!(demand(&mut pm, "during"), "stream");
    // The same change reported again (by another app of the node, say) is not news.
    pm.m.link_changed(pm.now, "veth1", &path1, false);
    assert!(events_to(&pm.drain(), s).is_empty());
    pm.m.link_changed(pm.now, "veth1", &path1, true);
    assert_eq!(
        events_to(&pm.drain(), s)[0].detail,
        "link veth1 up (10.1.0.9/24)"
    );
    pm.m.link_changed(pm.now, "veth1", &path1, true);
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
        let out = pm.feed(to, ToPm::Demand { cdo: want });
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
    pm.m.link_changed(
        pm.now,
        "eth1",
        &["10.1.0.9/24".parse().expect("subnet")],
        false,
    );
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
        assert_eq!(pm.feed(p, offer), [(p, done(Op::Offer, cdo))]);
        let want = pm.declare(c, name);
        let out = pm.feed(c, ToPm::Demand { cdo: want });
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
    pm.m.link_changed(
        pm.now,
        "eth1",
        &["10.2.0.1/24".parse().expect("subnet")],
        false,
    );
    let (source, detail) = transfer(&mut pm, "b", 2);
    match source {
        Source::Rma { region, via, .. } => assert_eq!((region.key, via), (1002, 0)),
        other => panic!("{other:?}"),
    }
    assert!(detail.contains("from 10.1.0.1 to 10.1.0.2"), "{detail}");
}

/// The product-generation case: a forecast field on one data network, its archived copy on
/// a node of both, the consumer on the other network. The copy it reads directly comes
/// before the older, idle offer that the PM would have to relay; alone, a relayed offer is
/// still served.
#[test]
fn of_several_offers_the_one_a_consumer_reads_directly_comes_first() {
    let mut pm = Pm::new();
    let (forecast, _) = pm.join_on("forecast", "n2", &[(tcp_at([10, 1, 0, 2]), "10.1.0.2/24")]);
    let (archive, _) = pm.join_on(
        "archive",
        "n5",
        &[
            (tcp_at([10, 1, 0, 5]), "10.1.0.5/24"),
            (tcp_at([10, 2, 0, 5]), "10.2.0.5/24"),
        ],
    );
    let (product, _) = pm.join_on("product", "n6", &[(tcp_at([10, 2, 0, 6]), "10.2.0.6/24")]);
    // The archive registers its copy with both of its endpoints.
    let archived = |pm: &mut Pm, name: &str| {
        let cdo = pm.declare(archive, name);
        assert_eq!(pm.seal(archive, cdo), [(archive, done(Op::Seal, cdo))]);
        let region = RemoteRegion {
            addr: 0,
            key: 7,
            len: 64,
        };
        let extras = OfferExtras::new(vec![region], None);
        let offer = ToPm::Offer {
            cdo,
            region,
            extras,
        };
        assert_eq!(pm.feed(archive, offer), [(archive, done(Op::Offer, cdo))]);
    };
    pm.offer(forecast, "only-forecast", 64);
    assert_eq!(pm.ticket_kind(product, "only-forecast"), "stream");
    pm.offer(forecast, "both", 64);
    archived(&mut pm, "both");
    assert_eq!(pm.ticket_kind(product, "both"), "rma");
    // The archive's reader on network 1 still takes the least loaded, here the oldest.
    let (archive_reader, _) = pm.join_on("reader", "n3", &[(tcp_at([10, 1, 0, 3]), "10.1.0.3/24")]);
    pm.offer(forecast, "either", 64);
    archived(&mut pm, "either");
    let want = pm.declare(archive_reader, "either");
    let out = pm.feed(archive_reader, ToPm::Demand { cdo: want });
    let from = rma_from(&out).unwrap_or_else(|| panic!("{out:?}"));
    assert_eq!(
        from,
        std::net::IpAddr::from([10, 1, 0, 2]),
        "the oldest offer, the forecast's"
    );
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
    let out = pm.feed(a, ToPm::Report { change: lost });
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
    let out = pm.feed(a, ToPm::Report { change: link });
    assert_eq!(events_to(&out, s)[0].detail, "link ib0 down (10.9.0.1/16)");
}

/// Of several offers of a name on one network, the consumer gets the one fewest hops away
/// through the switches (after those it reads directly, before the least loaded): the
/// provider under its own leaf switch, though two others offered first; a host the fabric
/// does not name comes last; without distances, the first app's as before.
#[test]
fn of_several_offers_the_one_fewest_hops_away_comes_first() {
    let setup = |distances: Option<pool_core::HostDistances>, with_near: bool| {
        let mut pm = Pm::new();
        if let Some(d) = distances {
            pm.m.set_distances(d);
        }
        let net = |i: u8| (tcp_at([10, 1, 0, i]), "10.1.0.0/24");
        let (stranger, _) = pm.join_on("stranger", "x9", &[net(9)]);
        let (far, _) = pm.join_on("far", "n1", &[net(1)]);
        let (near, _) = pm.join_on("near", "n5", &[net(5)]);
        let (consumer, _) = pm.join_on("consumer", "n6", &[net(6)]);
        pm.offer(stranger, "field", 64);
        pm.offer(far, "field", 64);
        if with_near {
            pm.offer(near, "field", 64);
        }
        let want = pm.declare(consumer, "field");
        let out = pm.feed(consumer, ToPm::Demand { cdo: want });
        rma_from(&out).unwrap_or_else(|| panic!("{out:?}"))
    };
    // Two leaves (n1, n2 | n5, n6) under a spine.
    let hosts = ["n1", "n2", "n5", "n6"].map(String::from).to_vec();
    let hops = vec![0, 2, 4, 4, 2, 0, 4, 4, 4, 4, 0, 2, 4, 4, 2, 0];
    let d = pool_core::HostDistances::new(hosts, hops).expect("distances");
    assert_eq!(
        setup(Some(d.clone()), true),
        std::net::IpAddr::from([10, 1, 0, 5]),
        "n5, under the consumer's leaf"
    );
    assert_eq!(
        setup(Some(d), false),
        std::net::IpAddr::from([10, 1, 0, 1]),
        "n1, four hops away, before the host the fabric does not name"
    );
    assert_eq!(
        setup(None, true),
        std::net::IpAddr::from([10, 1, 0, 9]),
        "without distances: the first app's offer"
    );
}

/// A switch link cut (the driver's watch saw it): subscribers hear of it, the fabric view
/// lists it, a consumer gets a name from a provider still joined to it, a demand left
/// with only providers cut off fails naming the link and a require waits; once the link
/// is back, the require is ticketed and the same demand served.
#[test]
fn a_switch_link_down_moves_demands_to_providers_still_joined_or_fails_naming_it() {
    let mut pm = Pm::new();
    let (s, _) = pm.join("watcher");
    pm.subscribe(s, EventKind::Fabric, "", SubscribeOptions::default());
    let net = |i: u8| (tcp_at([10, 1, 0, i]), "10.1.0.0/24");
    let (far, _) = pm.join_on("far", "n1", &[net(1)]);
    let (near, _) = pm.join_on("near", "n5", &[net(5)]);
    let (consumer, _) = pm.join_on("consumer", "n6", &[net(6)]);
    let hosts = ["n1", "n5", "n6"].map(String::from).to_vec();
    let joined = vec![0, 4, 4, 4, 0, 2, 4, 2, 0];
    pm.m.set_distances(pool_core::HostDistances::new(hosts.clone(), joined.clone()).expect("d"));
    pm.offer(far, "field", 64);
    pm.offer(near, "field", 64);
    pm.offer(near, "lonely", 64);
    // n5's adapter link is cut: n5 is joined to nobody.
    let x = u16::MAX;
    let cut = vec![0, x, 4, x, 0, x, 4, x, 0];
    let d = pool_core::HostDistances::new(hosts.clone(), cut).expect("d");
    let link = "leaf2[1] - n5[1]".to_string();
    pm.m.topology_changed(pm.now, d, &[(link.clone(), false)]);
    let e = &events_to(&pm.drain(), s)[0];
    assert_eq!(e.detail, "switch link leaf2[1] - n5[1] down");
    let fabric = pm.m.view(pm.now, pool_core::view::Query::Fabric);
    let pool_core::view::View::Fabric(f) = fabric else {
        panic!("{fabric:?}")
    };
    assert_eq!(f.links_down, ["switch link leaf2[1] - n5[1]"]);
    let from = rma_from;
    let want = pm.declare(consumer, "field");
    let out = pm.feed(consumer, ToPm::Demand { cdo: want });
    assert_eq!(from(&out), Some([10, 1, 0, 1].into()), "n1's: {out:?}");
    let lonely = pm.declare(consumer, "lonely");
    let out = pm.feed(consumer, ToPm::Demand { cdo: lonely });
    let why = out
        .iter()
        .find_map(|(_, m)| match m {
            FromPm::Refused {
                why: pool_core::proto::Refusal::NoPath(why),
                ..
            } => Some(why.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{out:?}"));
    assert_eq!(
        why,
        "no path through the switches from n6 to the providers on n5 (switch links down: leaf2[1] - n5[1])"
    );
    // A require waits while the link is down, and is ticketed once it is back.
    let ahead = pm.declare(consumer, "lonely");
    let out = pm.feed(consumer, ToPm::Require { cdo: ahead });
    assert_eq!(from(&out), None, "nothing reaches n6 yet: {out:?}");
    pm.m.topology_changed(
        pm.now,
        pool_core::HostDistances::new(hosts, joined).expect("d"),
        &[(link, true)],
    );
    let out = pm.drain();
    assert_eq!(
        from(&out),
        Some([10, 1, 0, 5].into()),
        "the require: {out:?}"
    );
    let out = pm.feed(consumer, ToPm::Demand { cdo: lonely });
    assert_eq!(
        from(&out),
        Some([10, 1, 0, 5].into()),
        "n5's again: {out:?}"
    );
}

/// The address of the provider's endpoint in the first RMA ticket of `out`.
fn rma_from(out: &[(ConnId, FromPm)]) -> Option<std::net::IpAddr> {
    out.iter().find_map(|(_, m)| match m {
        FromPm::Ticket {
            source: Source::Rma { endpoint, .. },
            ..
        } => endpoint.address.ip(),
        _ => None,
    })
}
