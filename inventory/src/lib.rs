//! The node's fabric inventory: what NICs a node has, where they attach, what libfabric can
//! drive on them, and which one a process should use.
//!
//! [`collect`] builds one [`Inventory`] from hwloc (packages, NUMA nodes, PCI network and
//! OpenFabrics devices and their locality; the live machine or an XML file), the kernel
//! (link state, MTU, speed of every interface) and libfabric (`fi_getinfo` offers, matched
//! to NICs by domain name). [`merge_pmix`] folds in what a PMIx host reports
//! (`PMIX_FABRIC_DEVICES`), and [`to_pmix_devices`] is the inverse, used by `maestro run` to
//! answer `PMIx_Fabric_register`. [`choose_nic`] picks the NIC for a cpuset and says why.
//! [`export`] renders the table, and the lines a Slurm admin pastes.
//!
//! The JSON form is versioned ([`SCHEMA`]); see the `model` module docs for its fields.

mod cache;
mod choose;
mod cpuset;
pub mod export;
mod kernel;
mod model;
pub mod netif;
mod placement;
mod pmix_io;
pub mod switches;
mod topo;

use std::path::{Path, PathBuf};

pub use cache::collect_cached;
pub use choose::{Choice, ChoiceError, Proximity, choose_nic, proximity};
pub use cpuset::{CpuSetError, IndexSet};
pub use model::{
    Domain, Inventory, Link, Locality, Machine, Nic, NicKind, Offer, Pci, Rdma, SCHEMA,
};
pub use placement::{NicRequest, Placement, PlacementError, TaskNic, placement, task_nic};
pub use pmix_io::{
    MOST_MATRIX_HOSTS, MergeReport, device_distances, merge_pmix, to_pmix_devices, to_pmix_switches,
};

use fabric::{EndpointType, ProviderClass};

/// Why an inventory could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// hwloc could not load the topology.
    #[error("cannot load {what}: {reason}")]
    Topology {
        /// The live topology or the file.
        what: String,
        /// hwloc's reason.
        reason: String,
    },
    /// libfabric discovery failed.
    #[error("libfabric: {0}")]
    Fabric(#[from] fabric::FabricError),
    /// A bad cpuset.
    #[error("bad cpuset: {0}")]
    CpuSet(#[from] CpuSetError),
    /// No NIC could be chosen.
    #[error("{0}")]
    Choice(#[from] ChoiceError),
    /// No placement or task NIC could be given.
    #[error("{0}")]
    Placement(#[from] PlacementError),
    /// The process's CPU binding cannot be read.
    #[error("cannot read this process's CPU binding: {0}")]
    Affinity(std::io::Error),
    /// A fabric description (a `topology.conf`, an `ibnetdiscover` dump) that cannot be
    /// read or is no such description.
    #[error("{path}: {why}")]
    Description {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A host list that is bad, or names a host the fabric does not have.
    #[error("--hosts: {0}")]
    Hosts(String),
    /// Tasks that cannot be placed across the fabric's nodes.
    #[error("{0}")]
    Spread(#[from] switches::spread::SpreadError),
    /// The InfiniBand fabric could not be discovered from this node.
    #[error("{0}")]
    Discover(#[from] switches::discover::DiscoverError),
    /// No NIC offers the requested provider.
    #[error("no NIC offers provider {name:?}; providers here: {known}")]
    UnknownProvider {
        /// What was asked for.
        name: String,
        /// What exists.
        known: String,
    },
}

/// What to build the inventory from.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// An hwloc XML topology instead of the live machine (providers are then unknown).
    pub topology: Option<PathBuf>,
    /// The host name to record (default: this machine's).
    pub hostname: Option<String>,
    /// Where the kernel's interfaces are (default `/sys/class/net`).
    pub sysfs_net: Option<PathBuf>,
}

/// Builds the inventory.
///
/// # Examples
///
/// This machine's NICs and the one a process bound to this thread's CPUs should use.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let inv = inventory::collect(&inventory::Options::default())?;
/// let cpus = inventory::process_cpuset()?;
/// let choice = inventory::choose_nic(&inv, &cpus, 0)?;
/// assert!(inv.nic(&choice.nic).is_some());
/// println!("use {} because {}", choice.nic, choice.reasons.join("; "));
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// [`InventoryError::Topology`] for a missing or malformed topology;
/// [`InventoryError::Fabric`] if libfabric fails (not when it merely has no providers).
pub fn collect(opts: &Options) -> Result<Inventory, InventoryError> {
    let topo = topo::load(opts.topology.as_deref())?;
    let machine = topo::machine(&topo);
    let mut nics = topo::nics(&topo, &machine);
    let live = opts.topology.is_none();
    let mut node_local = Vec::new();
    if live {
        let root = opts
            .sysfs_net
            .clone()
            .unwrap_or_else(|| PathBuf::from("/sys/class/net"));
        add_kernel(&mut nics, &root);
        add_offers(&mut nics, &mut node_local, fabric::discover()?);
    } else {
        for nic in nics.iter_mut().filter(|n| !n.rdma.capable) {
            nic.rdma.evidence = "no OpenFabrics device (providers unknown: XML topology)".into();
        }
    }
    let hostname = opts
        .hostname
        .clone()
        .or_else(|| if live { None } else { topo::hostname(&topo) })
        .unwrap_or_else(local_hostname);
    Ok(Inventory {
        schema: SCHEMA.to_string(),
        hostname,
        topology: match &opts.topology {
            None => "live".to_string(),
            Some(p) => format!("xml:{}", p.display()),
        },
        providers_known: live,
        machine,
        nics,
        node_local_providers: node_local,
    })
}

/// Merges the kernel's interfaces: link facts for known NICs, new NICs for the rest.
fn add_kernel(nics: &mut Vec<Nic>, root: &Path) {
    for k in kernel::interfaces(root) {
        let nic = match nics.iter_mut().position(|n| n.name == k.name) {
            Some(i) => &mut nics[i],
            None => {
                nics.push(Nic::named(&k.name, k.kind));
                nics.last_mut()
                    .unwrap_or_else(|| unreachable!("just pushed"))
            }
        };
        if nic.kind == NicKind::Other {
            nic.kind = k.kind;
        }
        let address = nic.link.address.take();
        nic.link = k.link;
        nic.link.address = nic.link.address.take().or(address);
        nic.add_source("kernel");
    }
}

/// Attaches libfabric offers to NICs by domain name; shared memory goes to `node_local`.
fn add_offers(
    nics: &mut Vec<Nic>,
    node_local: &mut Vec<String>,
    offers: Vec<fabric::ProviderInfo>,
) {
    for o in offers.into_iter().filter(|o| !o.is_ipv6_link_local()) {
        let class = ProviderClass::of(&o.provider);
        if class == ProviderClass::SharedMemory {
            if !node_local.contains(&o.provider) {
                node_local.push(o.provider);
            }
            continue;
        }
        if class == ProviderClass::Other {
            continue;
        }
        let idx = match nics.iter().position(|n| n.answers_to(&o.domain)) {
            Some(i) => i,
            None => {
                nics.push(Nic::named(&o.domain, NicKind::Other));
                nics.len() - 1
            }
        };
        let nic = &mut nics[idx];
        let offer = Offer {
            provider: o.provider,
            class,
            fabric: o.fabric,
            domain: o.domain,
            endpoint: o.endpoint,
            caps: o.caps,
        };
        if !nic.providers.contains(&offer) {
            nic.providers.push(offer);
        }
        nic.add_source("libfabric");
    }
    for nic in nics.iter_mut() {
        let native = nic
            .providers
            .iter()
            .find(|o| o.class == ProviderClass::NativeRdma && o.endpoint == EndpointType::Rdm);
        match native {
            Some(o) => {
                nic.rdma = Rdma {
                    capable: true,
                    evidence: format!("libfabric provider {}", o.provider),
                }
            }
            None if !nic.rdma.capable => {
                nic.rdma.evidence = match nic.best_class() {
                    Some(c) => format!("no RDMA provider; best is {c}"),
                    None => "no libfabric provider".to_string(),
                }
            }
            None => {}
        }
    }
}

/// The CPUs this process may run on (`sched_getaffinity`), i.e. its binding.
///
/// # Errors
/// The OS error if the affinity cannot be read.
pub fn process_cpuset() -> std::io::Result<IndexSet> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: size and pointer describe `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: i is below CPU_SETSIZE.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .filter_map(|i| u32::try_from(i).ok())
        .collect())
}

/// The NIC this process should use, computed locally from the live machine (its cached
/// inventory, see [`collect_cached`]): for clients under hosts that do not provide one
/// (Slurm, mpirun).
///
/// # Errors
/// As [`collect`]; [`InventoryError::Affinity`] if the binding cannot be read;
/// [`InventoryError::Choice`] if no NIC exists.
pub fn nic_for_this_process(local_rank: u32) -> Result<(Inventory, Choice), InventoryError> {
    let inv = collect_cached()?;
    let cpus = process_cpuset().map_err(InventoryError::Affinity)?;
    let choice = choose_nic(&inv, &cpus, local_rank)?;
    Ok((inv, choice))
}

/// This machine's host name, read from the kernel once per process (`localhost` if it
/// cannot be read). The one place the project asks for it.
pub fn local_hostname() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "localhost".to_string())
    })
    .clone()
}

impl Inventory {
    /// The NIC named `name`; else one with that alias, preferring an InfiniBand port (an
    /// OpenFabrics device such as `mlx4_0` may serve an Ethernet and an InfiniBand port).
    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name).or_else(|| {
            let mut with_alias: Vec<&Nic> =
                self.nics.iter().filter(|n| n.answers_to(name)).collect();
            with_alias.sort_by_key(|n| n.kind != NicKind::Infiniband);
            with_alias.first().copied()
        })
    }

    /// Checks that some NIC offers `provider` (as `MSTRO_OFI_PROVIDER` or `--provider`
    /// would name it; `tcp` matches `tcp;ofi_rxm`).
    ///
    /// # Errors
    /// [`InventoryError::UnknownProvider`] listing the providers that exist.
    pub fn check_provider(&self, provider: &str) -> Result<(), InventoryError> {
        let mut known: Vec<&str> = self
            .nics
            .iter()
            .flat_map(|n| n.providers.iter().map(|o| o.provider.as_str()))
            .chain(self.node_local_providers.iter().map(String::as_str))
            .collect();
        known.sort_unstable();
        known.dedup();
        let matches = |p: &str| fabric::provider_matches(provider, p);
        if known.iter().any(|p| matches(p)) {
            return Ok(());
        }
        Err(InventoryError::UnknownProvider {
            name: provider.to_string(),
            known: if known.is_empty() {
                "none (providers unknown for an XML topology)".into()
            } else {
                known.join(", ")
            },
        })
    }
}
