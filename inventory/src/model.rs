//! The inventory model: one serde document per node, schema [`SCHEMA`].
//!
//! JSON schema `maestro.inventory/1` (all fields always present unless marked optional):
//! - `schema`: `"maestro.inventory/1"`; `hostname`; `topology`: `"live"` or `"xml:PATH"`;
//! - `providers_known`: whether libfabric was asked (false for an XML topology);
//! - `machine`: `cpus` (list syntax), `packages` and `numa_nodes` (`index`, `cpus`, and
//!   `memory_bytes` for NUMA nodes);
//! - `nics[]`: `name`, `aliases` (other OS devices of the same PCI function, e.g. `mlx5_0`
//!   beside `ib0`), `kind` (`ethernet`, `infiniband`, `loopback`, `other`), `rdma`
//!   (`capable`, `evidence`), `pci` (optional: `address`, `vendor_id`, `device_id`,
//!   optional `vendor`, `device`, `link_gbytes_per_s`), `locality` (optional: `cpus`,
//!   `numa_nodes`, `packages`), `link` (optional `state`, `mtu`, `speed_mbps`, `address`),
//!   `providers[]` (`provider`, `class`, `fabric`, `endpoint`, `caps`), `sources`
//!   (`hwloc`, `kernel`, `libfabric`, `pmix`);
//! - `node_local_providers`: shared-memory providers (`shm`), not tied to a NIC.

use serde::{Deserialize, Serialize};

use crate::cpuset::IndexSet;
use fabric::{Caps, EndpointType, ProviderClass};

/// The schema identifier of this model's JSON form.
pub const SCHEMA: &str = "maestro.inventory/1";

/// A node's fabric inventory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The node's host name.
    pub hostname: String,
    /// Where the topology came from: `live` or `xml:PATH`.
    pub topology: String,
    /// Whether libfabric was asked for providers (false for an XML topology of another
    /// machine: RDMA capability is then inferred from OpenFabrics devices).
    pub providers_known: bool,
    /// CPUs, packages, NUMA nodes.
    pub machine: Machine,
    /// The network interfaces and RDMA devices.
    pub nics: Vec<Nic>,
    /// Providers that move data within the node without a NIC (`shm`).
    pub node_local_providers: Vec<String>,
}

/// The compute side of the node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// All PUs (hardware threads), by OS index.
    pub cpus: IndexSet,
    /// Packages (sockets).
    pub packages: Vec<Domain>,
    /// NUMA nodes.
    pub numa_nodes: Vec<Domain>,
}

/// A package or NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Domain {
    /// OS index.
    pub index: u32,
    /// Its PUs.
    pub cpus: IndexSet,
    /// Local memory (NUMA nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// What kind of network a NIC attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NicKind {
    /// Ethernet.
    Ethernet,
    /// InfiniBand (or an IPoIB interface).
    Infiniband,
    /// The loopback interface.
    Loopback,
    /// Anything else.
    Other,
}

/// A network interface or RDMA device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    /// The interface name (`eth0`, `ib0`), or the device name when it has no interface.
    pub name: String,
    /// Other OS devices of the same PCI function (`mlx5_0` beside `ib0`).
    pub aliases: Vec<String>,
    /// The network kind.
    pub kind: NicKind,
    /// RDMA capability and why we think so.
    pub rdma: Rdma,
    /// PCI identity, for PCI devices.
    pub pci: Option<Pci>,
    /// Where the NIC attaches: the CPUs and NUMA nodes closest to it.
    pub locality: Option<Locality>,
    /// Link state as the OS reports it.
    pub link: Link,
    /// libfabric offers on this NIC.
    pub providers: Vec<Offer>,
    /// Which sources described this NIC (`hwloc`, `kernel`, `libfabric`, `pmix`).
    pub sources: Vec<String>,
}

impl Nic {
    /// A NIC with only a name and kind.
    pub fn named(name: &str, kind: NicKind) -> Nic {
        Nic {
            name: name.to_string(),
            aliases: Vec::new(),
            kind,
            rdma: Rdma::default(),
            pci: None,
            locality: None,
            link: Link::default(),
            providers: Vec::new(),
            sources: Vec::new(),
        }
    }

    /// True if `name` is this NIC's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }

    /// Records a source once.
    pub fn add_source(&mut self, source: &str) {
        if !self.sources.iter().any(|s| s == source) {
            self.sources.push(source.to_string());
        }
    }

    /// The distinct provider names on this NIC, best class first.
    pub fn provider_names(&self) -> Vec<&str> {
        let mut offers: Vec<&Offer> = self.providers.iter().collect();
        offers.sort_by_key(|o| o.class);
        let mut names: Vec<&str> = Vec::new();
        for o in offers {
            if !names.contains(&o.provider.as_str()) {
                names.push(&o.provider);
            }
        }
        names
    }

    /// The best provider class usable for the pool (RDM + RMA) on this NIC.
    pub fn best_class(&self) -> Option<ProviderClass> {
        self.providers
            .iter()
            .filter(|o| o.endpoint == EndpointType::Rdm && o.caps.rma)
            .map(|o| o.class)
            .min()
    }
}

/// RDMA capability.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rdma {
    /// Can do RDMA.
    pub capable: bool,
    /// Why we think so (or not).
    pub evidence: String,
}

/// PCI identity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pci {
    /// `domain:bus:device.function`, e.g. `0000:04:00.0`.
    pub address: String,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// Vendor name, when known.
    pub vendor: Option<String>,
    /// Device name, when known.
    pub device: Option<String>,
    /// PCI link bandwidth in GB/s, when known.
    pub link_gbytes_per_s: Option<f32>,
}

/// Where a device attaches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Locality {
    /// The PUs closest to it (its non-I/O ancestor's cpuset).
    pub cpus: IndexSet,
    /// The NUMA nodes closest to it.
    pub numa_nodes: IndexSet,
    /// The packages those PUs belong to.
    pub packages: IndexSet,
}

impl Locality {
    /// The locality of a device near `cpus` and `numa_nodes`, with the packages of
    /// `machine` those CPUs belong to.
    pub fn near(cpus: IndexSet, numa_nodes: IndexSet, machine: &Machine) -> Locality {
        let packages = machine
            .packages
            .iter()
            .filter(|p| p.cpus.intersects(&cpus))
            .map(|p| p.index)
            .collect();
        Locality {
            cpus,
            numa_nodes,
            packages,
        }
    }
}

/// Link state as the OS reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// `up`, `down`, `unknown`, ... (`/sys/class/net/*/operstate`).
    pub state: Option<String>,
    /// Whether the carrier is on (`/sys/class/net/*/carrier`; unknown while the interface
    /// is down or for a topology from a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<bool>,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Speed in Mbit/s.
    pub speed_mbps: Option<u64>,
    /// Hardware address.
    pub address: Option<String>,
}

impl Link {
    /// Whether the link is usable ([`crate::netif::link_usable`], the one rule).
    pub fn usable(&self) -> bool {
        crate::netif::link_usable(self.state.as_deref(), self.carrier)
    }
}

/// One libfabric offer on a NIC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// The provider (`tcp;ofi_rxm`).
    pub provider: String,
    /// Its class.
    pub class: ProviderClass,
    /// The fabric (subnet).
    pub fabric: String,
    /// The libfabric domain it is offered on (the NIC's name or an alias of it, e.g.
    /// `mlx5_0` for `ib0`): what `MSTRO_OFI_IFACE` names. Empty in inventories written
    /// before it was recorded.
    #[serde(default)]
    pub domain: String,
    /// The endpoint type.
    pub endpoint: EndpointType,
    /// Capabilities.
    pub caps: Caps,
}
