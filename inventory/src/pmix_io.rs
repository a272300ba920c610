//! The inventory in PMIx's terms: `PMIX_FABRIC_DEVICES` (an array of per-device info
//! arrays with the `PMIX_FABRIC_DEVICE_*` keys of the standard) plus our own per-device
//! keys under `maestro.fabric.*` (locality, RDMA, providers). [`to_pmix_devices`] writes
//! it, [`merge_pmix`] reads what a host delivered and folds it into an inventory.

use pmix::{
    DEVTYPE_NETWORK, DEVTYPE_OPENFABRICS, DeviceDistance, Info, LINK_DOWN, LINK_STATE_UNKNOWN,
    LINK_UP, Value, keys,
};

use crate::cpuset::IndexSet;
use crate::model::{Inventory, Locality, Nic, NicKind, Rdma};
use crate::switches::Topology;

fn kind_name(k: NicKind) -> &'static str {
    match k {
        NicKind::Ethernet => "Ethernet",
        NicKind::Infiniband => "InfiniBand",
        NicKind::Loopback => "Loopback",
        NicKind::Other => "Other",
    }
}

/// The inventory's NICs as one `PMIX_FABRIC_DEVICES` info (plus `PMIX_FABRIC_NUM_DEVICES`).
pub fn to_pmix_devices(inv: &Inventory) -> Vec<Info> {
    let devices: Vec<Info> = inv
        .nics
        .iter()
        .enumerate()
        .map(|(i, n)| Info::new(keys::FABRIC_DEVICE, Value::Infos(device(i, n))))
        .collect();
    vec![
        Info::new(keys::FABRIC_NUM_DEVICES, Value::Size(devices.len())),
        Info::new(keys::FABRIC_DEVICES, Value::Infos(devices)),
    ]
}

fn device(index: usize, n: &Nic) -> Vec<Info> {
    let mut d = vec![
        Info::new(keys::FABRIC_DEVICE_NAME, Value::String(n.name.clone())),
        Info::new(keys::FABRIC_DEVICE_INDEX, Value::Uint32(index as u32)),
        Info::new(
            keys::FABRIC_DEVICE_TYPE,
            Value::String(kind_name(n.kind).into()),
        ),
        Info::new(
            keys::FABRIC_DEVICE_STATE,
            Value::LinkState(match (n.link.state.is_some(), n.link.usable()) {
                (_, false) => LINK_DOWN,
                (true, true) => LINK_UP,
                (false, true) => LINK_STATE_UNKNOWN,
            }),
        ),
        Info::new(maestro_keys::FABRIC_RDMA, Value::Bool(n.rdma.capable)),
        Info::new(
            maestro_keys::FABRIC_ALIASES,
            Value::Strings(n.aliases.clone()),
        ),
        Info::new(
            maestro_keys::FABRIC_PROVIDERS,
            Value::Strings(n.provider_names().into_iter().map(String::from).collect()),
        ),
    ];
    if let Some(a) = &n.link.address {
        d.push(Info::new(
            keys::FABRIC_DEVICE_ADDRESS,
            Value::String(a.clone()),
        ));
    }
    if let Some(m) = n.link.mtu {
        d.push(Info::new(keys::FABRIC_DEVICE_MTU, Value::Size(m as usize)));
    }
    if let Some(s) = n.link.speed_mbps {
        d.push(Info::new(
            keys::FABRIC_DEVICE_SPEED,
            Value::Size(s as usize),
        ));
    }
    if let Some(p) = &n.pci {
        d.push(Info::new(
            keys::FABRIC_DEVICE_BUS_TYPE,
            Value::String("pci".into()),
        ));
        d.push(Info::new(
            keys::FABRIC_DEVICE_PCI_DEVID,
            Value::String(p.address.clone()),
        ));
        d.push(Info::new(
            keys::FABRIC_DEVICE_VENDORID,
            Value::String(format!("{:04x}", p.vendor_id)),
        ));
        if let Some(v) = &p.vendor {
            d.push(Info::new(
                keys::FABRIC_DEVICE_VENDOR,
                Value::String(v.clone()),
            ));
        }
    }
    // Traffic counters where the kernel keeps them (network interfaces), read now: a
    // PMIx_Fabric_update sees what moved since.
    if let Some(c) = crate::netif::counters(&n.name) {
        for (key, v) in [
            (maestro_keys::FABRIC_RX_BYTES, c.rx_bytes),
            (maestro_keys::FABRIC_TX_BYTES, c.tx_bytes),
            (maestro_keys::FABRIC_RX_PACKETS, c.rx_packets),
            (maestro_keys::FABRIC_TX_PACKETS, c.tx_packets),
            (maestro_keys::FABRIC_ERRORS, c.rx_errors + c.tx_errors),
        ] {
            d.push(Info::new(key, Value::Uint64(v)));
        }
    }
    if let Some(l) = &n.locality {
        d.push(Info::new(
            maestro_keys::FABRIC_CPUS,
            Value::String(l.cpus.to_string()),
        ));
        d.push(Info::new(
            maestro_keys::FABRIC_NUMA,
            Value::String(l.numa_nodes.to_string()),
        ));
    }
    d
}

/// Most hosts whose cost matrix [`to_pmix_switches`] gives (their count squared, two bytes
/// each: 32 MiB).
pub const MOST_MATRIX_HOSTS: usize = 4096;

/// The fabric beyond the node in PMIx's terms, as `PMIx_Fabric_register` answers with it:
/// `PMIX_FABRIC_IDENTIFIER` (where it came from), `PMIX_FABRIC_COST_MATRIX` (the hops
/// between hosts, row by row, `u16::MAX` where no path joins two; a `uint16_t` data array,
/// not the standard's pointer, which cannot cross processes; up to [`MOST_MATRIX_HOSTS`]
/// hosts; the hosts `cut_off` since, which it no longer reaches, last, with no path to
/// any), [`maestro_keys::FABRIC_HOSTS`] (the hosts of its rows), `PMIX_FABRIC_GROUPS`
/// (the leaf switches' hosts, `0:n1,n2;1:n3,n4`), `PMIX_FABRIC_SWITCH` (the leaf switches
/// host `me` is linked to, comma-separated, when it is one of the fabric's hosts) and
/// [`maestro_keys::FABRIC_TOPOLOGY`] (the whole topology as JSON, which `--fabric` reads).
pub fn to_pmix_switches(t: &Topology, cut_off: &[String], identifier: &str, me: &str) -> Vec<Info> {
    let leaves = t.leaves();
    let groups = (leaves.iter().enumerate())
        .map(|(i, g)| format!("{i}:{}", g.hosts.join(",")))
        .collect::<Vec<_>>()
        .join(";");
    let mut out = vec![
        Info::new(keys::FABRIC_IDENTIFIER, Value::String(identifier.into())),
        Info::new(keys::FABRIC_GROUPS, Value::String(groups)),
    ];
    if t.hosts.len() + cut_off.len() <= MOST_MATRIX_HOSTS {
        let (hosts, costs) = t.cost_matrix(cut_off);
        out.push(Info::new(keys::FABRIC_COST_MATRIX, Value::Uint16s(costs)));
        out.push(Info::new(maestro_keys::FABRIC_HOSTS, Value::Strings(hosts)));
    }
    let mine: Vec<&str> = (leaves.iter())
        .filter(|g| g.hosts.iter().any(|h| h == me))
        .map(|g| g.switch.as_str())
        .collect();
    if !mine.is_empty() {
        out.push(Info::new(
            keys::FABRIC_SWITCH,
            Value::String(mine.join(",")),
        ));
    }
    let doc = serde_json::json!({ "topology": t });
    out.push(Info::new(
        maestro_keys::FABRIC_TOPOLOGY,
        Value::String(doc.to_string()),
    ));
    out
}

/// `PMIX_DEVICE_DISTANCES` for a process bound to `cpus`: one entry per network interface
/// (`net://<hardware address or name>`) and per OpenFabrics device (`fab://<name>`), loopback
/// excluded. The distance is the [`crate::Proximity`] class (1 = local to the CPUs, 2 =
/// partly local, 3 = same package, 4 = another package, 5 = unknown): consumers such as
/// Open MPI pick the smallest.
pub fn device_distances(inv: &Inventory, cpus: &IndexSet) -> Vec<DeviceDistance> {
    let mut out = Vec::new();
    for nic in inv.nics.iter().filter(|n| n.kind != NicKind::Loopback) {
        let dist = crate::proximity(nic, cpus, inv) as u16 + 1;
        let id = nic.link.address.clone().unwrap_or_else(|| nic.name.clone());
        out.push(DeviceDistance {
            uuid: format!("net://{id}"),
            osname: nic.name.clone(),
            device_type: DEVTYPE_NETWORK,
            mindist: dist,
            maxdist: dist,
        });
        for alias in &nic.aliases {
            out.push(DeviceDistance {
                uuid: format!("fab://{alias}"),
                osname: alias.clone(),
                device_type: DEVTYPE_OPENFABRICS,
                mindist: dist,
                maxdist: dist,
            });
        }
    }
    out
}

/// What [`merge_pmix`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Devices matched to NICs already in the inventory.
    pub matched: Vec<String>,
    /// Devices added as new NICs.
    pub added: Vec<String>,
    /// Entries that were not devices we understand, with why.
    pub skipped: Vec<String>,
}

/// Folds a PMIx inventory (`PMIX_FABRIC_DEVICES` entries, as [`to_pmix_devices`] writes
/// them or a host's `PMIx_server_collect_inventory` returns them) into `inv`: devices are
/// matched by name, alias or PCI address; facts the inventory lacks are filled in; unknown
/// devices become new NICs. Every NIC touched gets the source `pmix`.
pub fn merge_pmix(inv: &mut Inventory, infos: &[Info]) -> MergeReport {
    let mut report = MergeReport::default();
    for info in infos {
        if info.key == keys::FABRIC_NUM_DEVICES {
            continue;
        }
        let Value::Infos(devices) = &info.value else {
            report
                .skipped
                .push(format!("{}: not a device list", info.key));
            continue;
        };
        if info.key != keys::FABRIC_DEVICES {
            report.skipped.push(format!("{}: unknown key", info.key));
            continue;
        }
        for dev in devices {
            match &dev.value {
                Value::Infos(fields) => merge_device(inv, fields, &mut report),
                _ => report.skipped.push(format!("{}: not a device", dev.key)),
            }
        }
    }
    report
}

fn merge_device(inv: &mut Inventory, d: &[Info], report: &mut MergeReport) {
    let s = |k: &str| pmix::find(d, k).and_then(Value::as_str).map(str::to_string);
    let Some(name) = s(keys::FABRIC_DEVICE_NAME) else {
        report
            .skipped
            .push("device without PMIX_FABRIC_DEVICE_NAME".into());
        return;
    };
    let pci = s(keys::FABRIC_DEVICE_PCI_DEVID);
    let aliases = match pmix::find(d, maestro_keys::FABRIC_ALIASES) {
        Some(Value::Strings(a)) => a.clone(),
        _ => Vec::new(),
    };
    let locality = locality_of(d, &inv.machine);
    let found = inv.nics.iter().position(|x| {
        x.answers_to(&name)
            || aliases.iter().any(|a| x.answers_to(a))
            || (pci.is_some() && x.pci.as_ref().map(|p| &p.address) == pci.as_ref())
    });
    let nic = match found {
        Some(i) => {
            report.matched.push(name.clone());
            &mut inv.nics[i]
        }
        None => {
            let kind = match s(keys::FABRIC_DEVICE_TYPE).as_deref() {
                Some("InfiniBand") => NicKind::Infiniband,
                Some("Ethernet") => NicKind::Ethernet,
                Some("Loopback") => NicKind::Loopback,
                _ => NicKind::Other,
            };
            report.added.push(name.clone());
            inv.nics.push(Nic::named(&name, kind));
            inv.nics
                .last_mut()
                .unwrap_or_else(|| unreachable!("just pushed"))
        }
    };
    fill_link(&mut nic.link, d);
    if !nic.rdma.capable
        && pmix::find(d, maestro_keys::FABRIC_RDMA).and_then(Value::as_bool) == Some(true)
    {
        nic.rdma = Rdma {
            capable: true,
            evidence: "reported by the PMIx host".into(),
        };
    }
    if nic.locality.is_none() {
        nic.locality = locality;
    }
    for a in aliases.iter().chain(std::iter::once(&name)) {
        if !nic.answers_to(a) {
            nic.aliases.push(a.clone());
        }
    }
    nic.add_source("pmix");
}

/// Fills what the host says of a device's link where the inventory does not know it:
/// address, MTU, speed, state.
fn fill_link(link: &mut crate::Link, d: &[Info]) {
    let s = |k: &str| pmix::find(d, k).and_then(Value::as_str).map(str::to_string);
    let n = |k: &str| pmix::find(d, k).and_then(Value::as_u64);
    link.address = link
        .address
        .take()
        .or_else(|| s(keys::FABRIC_DEVICE_ADDRESS));
    link.mtu = link
        .mtu
        .or_else(|| n(keys::FABRIC_DEVICE_MTU).and_then(|v| u32::try_from(v).ok()));
    link.speed_mbps = link.speed_mbps.or_else(|| n(keys::FABRIC_DEVICE_SPEED));
    if link.state.is_none() {
        link.state = match pmix::find(d, keys::FABRIC_DEVICE_STATE) {
            Some(Value::LinkState(s)) if *s == LINK_UP => Some("up".into()),
            Some(Value::LinkState(s)) if *s == LINK_DOWN => Some("down".into()),
            _ => None,
        };
    }
}

/// A device's locality as the host describes it (`maestro.fabric.cpus` and `.numa`), with
/// the packages of `machine` its CPUs are on.
fn locality_of(d: &[Info], machine: &crate::Machine) -> Option<Locality> {
    let s = |k: &str| pmix::find(d, k).and_then(Value::as_str).map(str::to_string);
    let cpus = IndexSet::parse(&s(maestro_keys::FABRIC_CPUS)?).ok()?;
    let numa_nodes = s(maestro_keys::FABRIC_NUMA)
        .and_then(|v| IndexSet::parse(&v).ok())
        .unwrap_or_default();
    Some(Locality::near(cpus, numa_nodes, machine))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Link, Machine, Pci};

    fn inventory(nics: Vec<Nic>) -> Inventory {
        Inventory {
            schema: crate::SCHEMA.into(),
            hostname: "h".into(),
            topology: "test".into(),
            providers_known: false,
            machine: Machine::default(),
            nics,
            node_local_providers: Vec::new(),
        }
    }

    #[test]
    fn devices_round_trip_through_pmix_values() {
        let mut ib = Nic::named("ib0", NicKind::Infiniband);
        ib.aliases = vec!["mlx5_0".into()];
        ib.rdma = Rdma {
            capable: true,
            evidence: "x".into(),
        };
        ib.link = Link {
            state: Some("up".into()),
            carrier: None,
            mtu: Some(4092),
            speed_mbps: Some(100_000),
            address: Some("80:00".into()),
        };
        ib.pci = Some(Pci {
            address: "0000:04:00.0".into(),
            vendor_id: 0x15b3,
            device_id: 0x1013,
            vendor: Some("Mellanox".into()),
            device: None,
            link_gbytes_per_s: None,
        });
        ib.locality = Some(Locality {
            cpus: IndexSet::parse("0-7").expect("set"),
            numa_nodes: IndexSet::parse("0").expect("set"),
            packages: IndexSet::parse("0").expect("set"),
        });
        let source = inventory(vec![ib]);
        let infos = to_pmix_devices(&source);
        let mut target = inventory(Vec::new());
        let report = merge_pmix(&mut target, &infos);
        assert_eq!(report.added, ["ib0"]);
        let got = &target.nics[0];
        assert_eq!(got.kind, NicKind::Infiniband);
        assert!(got.rdma.capable);
        assert_eq!(got.link, source.nics[0].link);
        assert_eq!(got.aliases, ["mlx5_0"]);
        assert_eq!(
            got.locality.as_ref().map(|l| l.cpus.to_string()),
            Some("0-7".into())
        );
        assert_eq!(got.sources, ["pmix"]);
        // Merging into an inventory that knows the NIC fills gaps and keeps what it had.
        let mut known = inventory(vec![Nic::named("mlx5_0", NicKind::Infiniband)]);
        known.nics[0].link.mtu = Some(2044);
        let report = merge_pmix(&mut known, &infos);
        assert_eq!(report.matched, ["ib0"]);
        assert_eq!(known.nics[0].link.mtu, Some(2044));
        assert_eq!(known.nics[0].link.speed_mbps, Some(100_000));
        assert!(known.nics[0].answers_to("ib0"));
    }

    #[test]
    fn distances_follow_proximity_and_skip_loopback() {
        let cpus = IndexSet::parse("0-3").expect("set");
        let mut near = Nic::named("ib0", NicKind::Infiniband);
        near.aliases = vec!["mlx5_0".into()];
        near.locality = Some(Locality {
            cpus: IndexSet::parse("0-7").expect("set"),
            ..Locality::default()
        });
        let far = Nic::named("eth1", NicKind::Ethernet);
        let inv = inventory(vec![near, far, Nic::named("lo", NicKind::Loopback)]);
        let d = device_distances(&inv, &cpus);
        let by_name = |n: &str| {
            d.iter()
                .find(|x| x.osname == n)
                .map(|x| (x.mindist, x.device_type))
        };
        assert_eq!(by_name("ib0"), Some((1, DEVTYPE_NETWORK)));
        assert_eq!(by_name("mlx5_0"), Some((1, DEVTYPE_OPENFABRICS)));
        assert_eq!(by_name("eth1"), Some((5, DEVTYPE_NETWORK)));
        assert_eq!(by_name("lo"), None);
    }

    #[test]
    fn junk_is_skipped_with_reasons() {
        let mut inv = inventory(Vec::new());
        let report = merge_pmix(
            &mut inv,
            &[
                Info::new("pmix.other", Value::Infos(vec![])),
                Info::new(keys::FABRIC_DEVICES, Value::Uint32(3)),
                Info::new(
                    keys::FABRIC_DEVICES,
                    Value::Infos(vec![Info::new(keys::FABRIC_DEVICE, Value::Infos(vec![]))]),
                ),
            ],
        );
        assert!(inv.nics.is_empty());
        assert_eq!(report.skipped.len(), 3, "{report:?}");
    }
}
