//! The inventory over real hwloc: the two reference machines' XML topologies (copied from
//! the project's shared data) and the live machine with real libfabric.

use std::path::PathBuf;

use inventory::{IndexSet, InventoryError, NicKind, Options, Proximity, choose_nic, collect};

fn xml(name: &str) -> Options {
    Options {
        topology: Some(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data")
                .join(name),
        ),
        hostname: Some("testnode".into()),
        sysfs_net: None,
    }
}

fn set(s: &str) -> IndexSet {
    IndexSet::parse(s).expect("valid cpuset")
}

#[test]
fn mlx4_ib0_is_local_to_numa_node_0() {
    let inv = collect(&xml("24em64t-2n6c2t-pci.xml")).expect("inventory");
    assert!(!inv.providers_known);
    assert_eq!(inv.machine.packages.len(), 2);
    assert_eq!(inv.machine.numa_nodes.len(), 2);
    let ib = inv.nic("mlx4_0").expect("mlx4_0 found");
    assert_eq!(ib.name, "ib0");
    assert_eq!(ib.kind, NicKind::Infiniband);
    assert!(ib.rdma.capable, "{:?}", ib.rdma);
    assert!(ib.rdma.evidence.contains("OpenFabrics"));
    let loc = ib.locality.as_ref().expect("locality");
    assert_eq!(loc.numa_nodes.to_string(), "0");
    assert_eq!(
        ib.pci.as_ref().map(|p| p.address.as_str()),
        Some("0000:05:00.0")
    );
    // eth0/eth1 are plain Ethernet.
    let eth0 = inv.nic("eth0").expect("eth0");
    assert!(!eth0.rdma.capable);
    assert!(eth0.rdma.evidence.contains("providers unknown"));

    let package0 = inv
        .machine
        .packages
        .iter()
        .find(|p| p.index == 0)
        .expect("package 0")
        .cpus
        .clone();
    let package1 = inv
        .machine
        .packages
        .iter()
        .find(|p| p.index == 1)
        .expect("package 1")
        .cpus
        .clone();
    let local = choose_nic(&inv, &package0, 0).expect("choice");
    assert_eq!(
        (local.nic.as_str(), local.proximity, local.remote),
        ("ib0", Proximity::Local, false)
    );
    let remote = choose_nic(&inv, &package1, 0).expect("choice");
    assert_eq!(remote.nic, "ib0", "{:?}", remote.reasons);
    assert!(remote.remote, "{remote:?}");
    assert!(
        remote.reasons.iter().any(|r| r.contains("remote")),
        "{:?}",
        remote.reasons
    );
}

#[test]
fn mlx5_ib0_is_found_on_the_other_topology() {
    let inv = collect(&xml("32em64t-2n8c2t-pci-normalio.xml")).expect("inventory");
    let ib = inv.nic("mlx5_0").expect("mlx5_0 found");
    assert_eq!(ib.name, "ib0");
    assert!(ib.rdma.capable);
    let loc = ib.locality.as_ref().expect("locality");
    let home = loc.packages.iter().next().expect("a package");
    let other = inv
        .machine
        .packages
        .iter()
        .find(|p| p.index != home)
        .expect("another package");
    let c = choose_nic(&inv, &other.cpus, 0).expect("choice");
    assert_eq!(c.nic, "ib0");
    assert!(c.remote);
    let c = choose_nic(&inv, &loc.cpus, 0).expect("choice");
    assert_eq!((c.nic.as_str(), c.proximity), ("ib0", Proximity::Local));
    // Round trip through JSON keeps everything.
    let json = serde_json::to_string(&inv).expect("json");
    let back: inventory::Inventory = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, inv);
    assert!(json.contains("\"schema\":\"maestro.inventory/1\""));
}

#[test]
fn bad_topologies_are_errors() {
    let missing = collect(&xml("no-such.xml"));
    assert!(
        matches!(missing, Err(InventoryError::Topology { ref reason, .. }) if reason.contains("no such file")),
        "{missing:?}"
    );
    let dir = std::env::temp_dir().join(format!("inventory-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let bad = dir.join("bad.xml");
    std::fs::write(&bad, "<topology><object type=").expect("write");
    let r = collect(&Options {
        topology: Some(bad),
        ..Options::default()
    });
    std::fs::remove_dir_all(&dir).expect("cleanup");
    assert!(matches!(r, Err(InventoryError::Topology { .. })), "{r:?}");
}

#[test]
fn the_live_machine_lists_loopback_and_its_providers() {
    let inv = collect(&Options::default()).expect("inventory");
    assert!(inv.providers_known);
    let lo = inv.nic("lo").expect("lo");
    assert_eq!(lo.kind, NicKind::Loopback);
    assert!(lo.link.mtu.is_some());
    let provs: Vec<&str> = lo.providers.iter().map(|o| o.provider.as_str()).collect();
    assert!(provs.contains(&"tcp;ofi_rxm"), "{provs:?}");
    assert!(provs.contains(&"udp;ofi_rxd"), "{provs:?}");
    assert!(inv.node_local_providers.iter().any(|p| p == "shm"));
    let c = choose_nic(&inv, &inv.machine.cpus, 0).expect("choice");
    assert!(!c.reasons.is_empty());
    assert!(inv.check_provider("tcp").is_ok());
    assert!(matches!(
        inv.check_provider("nonesuch"),
        Err(InventoryError::UnknownProvider { .. })
    ));
    let out_of_range = set("100000").check_within(&inv.machine.cpus);
    assert!(out_of_range.is_err());
}

#[test]
fn near_nic_placement_spreads_tasks_over_the_cpus_of_the_rdma_nic() {
    let inv = collect(&xml("24em64t-2n6c2t-pci.xml")).expect("inventory");
    let ib_cpus: Vec<u32> = inv
        .nic("ib0")
        .and_then(|n| n.locality.as_ref())
        .expect("ib0 locality")
        .cpus
        .iter()
        .collect();
    assert_eq!(ib_cpus.len(), 12, "package 0: 6 cores x 2 threads");
    let plan = inventory::placement(&inv, 4).expect("placement");
    // Only the RDMA NIC; each task gets 3 of its 12 local CPUs, none shared.
    let mut seen = IndexSet::new();
    for p in &plan {
        assert_eq!(p.nic, "ib0", "{p:?}");
        let cpus = p.cpus.as_ref().expect("bound");
        assert_eq!(cpus.iter().count(), 3, "{p:?}");
        for c in cpus.iter() {
            assert!(ib_cpus.contains(&c), "{p:?}");
            assert!(!seen.iter().any(|s| s == c), "CPU {c} given twice");
            seen.insert(c);
        }
    }
    // More tasks than CPUs near the NIC: left as launched, with the reason.
    let crowded = inventory::placement(&inv, 13).expect("placement");
    assert!(crowded.iter().all(|p| p.cpus.is_none()));
    assert!(crowded[0].note.contains("too few"), "{:?}", crowded[0]);
    // A hundred thousand tasks are planned at once (the plan is linear in the tasks).
    let many = inventory::placement(&inv, 100_000).expect("placement");
    assert_eq!(many.len(), 100_000);
    assert!(
        many.iter()
            .enumerate()
            .all(|(i, p)| p.task == i as u32 && p.cpus.is_none())
    );
    assert!(
        many[99_999]
            .note
            .contains("12 CPUs near it for 100000 tasks"),
        "{:?}",
        many[99_999]
    );
    assert!(matches!(
        inventory::placement(&inv, 0),
        Err(inventory::PlacementError::NoTasks)
    ));
}

#[test]
fn a_task_gets_the_named_nic_or_an_error_listing_the_nics_there() {
    use inventory::{NicRequest, PlacementError, task_nic};
    let inv = collect(&xml("32em64t-2n8c2t-pci-normalio.xml")).expect("inventory");
    let all = inv.machine.cpus.clone();
    let ib = task_nic(&inv, &all, 0, &NicRequest::Named("mlx5_0".into())).expect("alias");
    assert_eq!(ib.nic, "ib0");
    // Providers are unknown in an XML topology: the interface name, no provider.
    assert_eq!((ib.iface.as_str(), ib.provider.as_deref()), ("ib0", None));
    let auto = task_nic(&inv, &all, 1, &NicRequest::Auto).expect("auto");
    assert_eq!(auto.nic, "ib0", "{:?}", auto.reasons);
    match task_nic(&inv, &all, 0, &NicRequest::Named("eth7".into())) {
        Err(PlacementError::NoSuchNic { available, .. }) => {
            assert!(available.contains("ib0"), "{available}")
        }
        other => panic!("expected NoSuchNic, got {other:?}"),
    }
}
