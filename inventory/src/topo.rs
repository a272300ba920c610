//! hwloc (through hwlocality) → our model: the machine's packages and NUMA nodes, and one
//! [`Nic`] per network OS device, with its PCI identity and locality. OpenFabrics devices
//! (`mlx5_0`) become aliases of the interfaces on the same PCI function (`ib0`), or NICs of
//! their own when no interface shares it.

use std::path::Path;

use hwlocality::Topology;
use hwlocality::bitmap::Bitmap;
use hwlocality::object::TopologyObject;
use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::types::{OSDeviceType, ObjectType};
use hwlocality::topology::builder::TypeFilter;

use crate::InventoryError;
use crate::cpuset::IndexSet;
use crate::model::{Domain, Locality, Machine, Nic, NicKind, Pci, Rdma};

/// Loads the live topology, or `xml` like `lstopo --input`, with all I/O devices.
///
/// # Errors
/// [`InventoryError::Topology`] with hwloc's reason (missing or malformed file, ...).
pub(crate) fn load(xml: Option<&Path>) -> Result<Topology, InventoryError> {
    let what = xml.map_or_else(
        || "the live topology".to_string(),
        |p| p.display().to_string(),
    );
    let err = |e: &dyn std::fmt::Display| InventoryError::Topology {
        what: what.clone(),
        reason: e.to_string(),
    };
    let mut b = Topology::builder();
    if let Some(p) = xml {
        if !p.is_file() {
            return Err(err(
                &"no such file; give an hwloc XML file (lstopo --of xml)",
            ));
        }
        b = b.from_xml_file(p).map_err(|e| err(&e))?;
    }
    b.with_io_type_filter(TypeFilter::KeepAll)
        .map_err(|e| err(&e))?
        .build()
        .map_err(|e| err(&e))
}

fn set_of<S: AsRef<Bitmap>>(b: &S) -> IndexSet {
    let b: &Bitmap = b.as_ref();
    b.iter_set()
        .filter_map(|i| u32::try_from(usize::from(i)).ok())
        .collect()
}

/// The host name recorded in the topology (XML files carry the machine they came from).
pub(crate) fn hostname(topo: &Topology) -> Option<String> {
    info(topo.root_object(), "HostName")
}

/// CPUs, packages and NUMA nodes.
pub(crate) fn machine(topo: &Topology) -> Machine {
    let domains = |ty: ObjectType| -> Vec<Domain> {
        topo.objects_with_type(ty)
            .map(|o| Domain {
                index: o
                    .os_index()
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or(0),
                cpus: o.cpuset().map(|c| set_of(&*c)).unwrap_or_default(),
                memory_bytes: match o.attributes() {
                    Some(ObjectAttributes::NUMANode(n)) => n.local_memory().map(u64::from),
                    _ => None,
                },
            })
            .collect()
    };
    Machine {
        cpus: set_of(&*topo.cpuset()),
        packages: domains(ObjectType::Package),
        numa_nodes: domains(ObjectType::NUMANode),
    }
}

fn osdev_type(o: &TopologyObject) -> Option<OSDeviceType> {
    match o.attributes() {
        Some(ObjectAttributes::OSDevice(a)) => Some(a.device_type()),
        _ => None,
    }
}

fn name(o: &TopologyObject) -> String {
    o.name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn info(o: &TopologyObject, key: &str) -> Option<String> {
    o.info(key).map(|v| v.to_string_lossy().into_owned())
}

fn pci_of(dev: &TopologyObject) -> Option<Pci> {
    let parent = dev.parent()?;
    let Some(ObjectAttributes::PCIDevice(p)) = parent.attributes() else {
        return None;
    };
    let speed = p.link_speed();
    Some(Pci {
        address: format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            p.domain(),
            p.bus_id(),
            p.bus_device(),
            p.function()
        ),
        vendor_id: p.vendor_id(),
        device_id: p.device_id(),
        vendor: info(parent, "PCIVendor"),
        device: info(parent, "PCIDevice"),
        link_gbytes_per_s: (speed > 0.0).then_some(speed),
    })
}

fn locality_of(dev: &TopologyObject, machine: &Machine) -> Option<Locality> {
    let anc = dev.first_non_io_ancestor()?;
    let cpus = anc.cpuset().map(|c| set_of(&*c)).unwrap_or_default();
    let numa_nodes = anc.nodeset().map(|n| set_of(&*n)).unwrap_or_default();
    Some(Locality::near(cpus, numa_nodes, machine))
}

/// Same PCI function (same parent object).
fn siblings(a: &TopologyObject, b: &TopologyObject) -> bool {
    match (a.parent(), b.parent()) {
        (Some(pa), Some(pb)) => pa.global_persistent_index() == pb.global_persistent_index(),
        _ => false,
    }
}

/// One NIC per network interface, plus OpenFabrics devices without an interface.
pub(crate) fn nics(topo: &Topology, machine: &Machine) -> Vec<Nic> {
    let osdevs: Vec<&TopologyObject> = topo.objects_with_type(ObjectType::OSDevice).collect();
    let fabrics: Vec<&TopologyObject> = osdevs
        .iter()
        .copied()
        .filter(|o| osdev_type(o) == Some(OSDeviceType::OpenFabrics))
        .collect();
    let mut out = Vec::new();
    let mut claimed = Vec::new();
    for dev in osdevs
        .iter()
        .filter(|o| osdev_type(o) == Some(OSDeviceType::Network))
    {
        let n = name(dev);
        let address = info(dev, "Address");
        let mut nic = Nic::named(&n, kind_of(&n, address.as_deref()));
        nic.link.address = address;
        nic.pci = pci_of(dev);
        nic.locality = locality_of(dev, machine);
        for f in fabrics.iter().filter(|f| siblings(dev, f)) {
            nic.aliases.push(name(f));
            claimed.push(f.global_persistent_index());
        }
        if !nic.aliases.is_empty() {
            nic.rdma = Rdma {
                capable: true,
                evidence: format!(
                    "OpenFabrics device {} on the same PCI function",
                    nic.aliases.join(", ")
                ),
            };
        }
        nic.add_source("hwloc");
        out.push(nic);
    }
    for f in fabrics
        .iter()
        .filter(|f| !claimed.contains(&f.global_persistent_index()))
    {
        let n = name(f);
        let mut nic = Nic::named(&n, NicKind::Infiniband);
        nic.pci = pci_of(f);
        nic.locality = locality_of(f, machine);
        nic.rdma = Rdma {
            capable: true,
            evidence: format!("OpenFabrics device {n}"),
        };
        nic.add_source("hwloc");
        out.push(nic);
    }
    out
}

/// The network kind from the name and the hardware address (InfiniBand addresses are 20
/// bytes, Ethernet 6).
pub(crate) fn kind_of(name: &str, address: Option<&str>) -> NicKind {
    if name == "lo" {
        return NicKind::Loopback;
    }
    match address.map(|a| a.split(':').count()) {
        Some(20) => NicKind::Infiniband,
        Some(6) => NicKind::Ethernet,
        _ if name.starts_with("ib") => NicKind::Infiniband,
        _ if name.starts_with("eth") || name.starts_with("en") => NicKind::Ethernet,
        _ => NicKind::Other,
    }
}
