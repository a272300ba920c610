//! The fabric side of `maestro run`: the node's inventory, merged with what PMIx's own
//! plugins collect and delivered back to them; the NIC of each rank; and the keys and query
//! answers through which clients and tools see both.
//!
//! What clients get: job-level `PMIX_FABRIC_DEVICES`/`PMIX_FABRIC_NUM_DEVICES` and
//! [`maestro_keys::FABRIC_INVENTORY`] (the JSON inventory), per rank
//! [`maestro_keys::FABRIC_NIC`] and `PMIX_DEVICE_DISTANCES`; `PMIx_Fabric_register` answers
//! with the devices and, given the fabric beyond the node ([`FabricSource`]: a file or
//! InfiniBand discovery), its cost matrix, groups and topology
//! ([`inventory::to_pmix_switches`]); `PMIx_Fabric_update` reads or discovers it again;
//! `PMIx_Query_info` answers [`maestro_keys::FABRIC_INVENTORY`],
//! [`maestro_keys::FABRIC_ASSIGNMENT`] and [`maestro_keys::FABRIC_TOPOLOGY`].

use std::path::PathBuf;
use std::sync::Mutex;

use inventory::switches::watch::{LinkChange, Watch};
use inventory::switches::{Source, discover::Discovery};
use inventory::{
    Choice, IndexSet, Inventory, InventoryError, choose_nic, device_distances, merge_pmix,
    to_pmix_devices,
};

use pmix::{Info, Server, Value};

/// Where `maestro run` and `maestro inventory` take the fabric beyond the node from (its
/// command-line options).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct FabricSource {
    /// The fabric beyond the node (switches, links, hops between hosts) from FILE: a Slurm
    /// topology.conf, an ibnetdiscover dump, or what `maestro inventory --fabric ...
    /// --json` printed.
    #[arg(long, value_name = "FILE", conflicts_with = "discover_fabric")]
    pub fabric: Option<PathBuf>,
    /// Discover the fabric beyond the node from this node's InfiniBand adapter
    /// (libibnetdisc, as ibnetdiscover; needs read-write access to /dev/infiniband/umad*).
    #[arg(long)]
    pub discover_fabric: bool,
    /// With --discover-fabric: the adapter, and its port, to discover through (mlx5_0,
    /// mlx5_0:1; default: the first active port).
    #[arg(long, value_name = "CA[:PORT]", requires = "discover_fabric", value_parser = parse_ca)]
    pub ib_ca: Option<(String, Option<u8>)>,
}

impl FabricSource {
    /// The source the options name, if any.
    pub fn source(&self) -> Option<Source> {
        if let Some(path) = &self.fabric {
            return Some(Source::File(path.clone()));
        }
        self.discover_fabric.then(|| {
            let (ca, port) = self
                .ib_ca
                .clone()
                .map_or((None, None), |(c, p)| (Some(c), p));
            Source::Discover(Discovery {
                ca,
                port,
                ..Discovery::default()
            })
        })
    }
}

/// Parses `--ib-ca CA[:PORT]`.
///
/// # Errors
/// An empty adapter name or a port that is not 1-255.
fn parse_ca(s: &str) -> Result<(String, Option<u8>), String> {
    let (ca, port) = match s.split_once(':') {
        Some((ca, p)) => {
            let port = p
                .parse::<u8>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{p:?} is no port: a number from 1 to 255"))?;
            (ca, Some(port))
        }
        None => (s, None),
    };
    if ca.is_empty() || ca.contains('\0') {
        return Err(format!(
            "{s:?}: give an adapter as ibstat lists it (mlx5_0), with :PORT if not the first active"
        ));
    }
    Ok((ca.to_string(), port))
}

/// Where [`Switches`] tells of the switch links that changed.
pub type LinkSink = Box<dyn Fn(Vec<LinkChange>) + Send>;

/// The fabric beyond the node as `maestro run` serves it: its source, what was last read
/// or discovered from it, and the hosts it cut off since.
pub struct Switches {
    watch: Mutex<Watch>,
    /// Where the topology comes from (`PMIX_FABRIC_IDENTIFIER`).
    identifier: String,
    /// This node's name among the fabric's hosts.
    hostname: String,
    /// The PMIx infos of the last look (made once per change, however many ranks ask).
    now: Mutex<Vec<Info>>,
    /// Told of every change, whoever looked (the watch thread, a `PMIx_Fabric_update`).
    sink: Mutex<Option<LinkSink>>,
    /// A `PMIx_Fabric_update` is looking again on its thread: others meanwhile get the
    /// last look (one such thread at a time, however often ranks ask).
    updating: std::sync::atomic::AtomicBool,
}

impl Switches {
    /// Reads or discovers the topology from `source` now.
    ///
    /// # Errors
    /// [`InventoryError`] from reading or discovering it.
    pub fn load(source: Source, hostname: &str) -> Result<Switches, InventoryError> {
        let topology = source.load()?;
        tracing::info!(
            "the fabric beyond the node from {}: {} switches, {} hosts, {} links",
            source.identifier(),
            topology.switches.len(),
            topology.hosts.len(),
            topology.links.len()
        );
        let identifier = source.identifier();
        let now = inventory::to_pmix_switches(&topology, &[], &identifier, hostname);
        Ok(Switches {
            identifier,
            watch: Mutex::new(Watch::new(source, topology)),
            hostname: hostname.to_string(),
            now: Mutex::new(now),
            sink: Mutex::new(None),
            updating: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Where the switch links that change are told from now on.
    pub fn tell(&self, sink: LinkSink) {
        *lock(&self.sink) = Some(sink);
    }

    /// Reads or discovers the topology again (for `PMIx_Fabric_update`, and the watch);
    /// the links that changed go to the sink. Keeps the last one when that fails.
    ///
    /// # Errors
    /// [`InventoryError`] from reading or discovering it.
    pub fn reload(&self) -> Result<(), InventoryError> {
        let changed = lock(&self.watch).poll()?;
        if let Some(c) = changed {
            let now = inventory::to_pmix_switches(
                &c.topology,
                &c.cut_off,
                &self.identifier,
                &self.hostname,
            );
            *lock(&self.now) = now;
            if let Some(sink) = lock(&self.sink).as_ref() {
                sink(c.links);
            }
        }
        Ok(())
    }

    /// Answers a `PMIx_Fabric_update`: looks again on a thread of its own (not libpmix's)
    /// and hands `answer` the infos then; while another update is looking, at once with
    /// the last look.
    pub fn update(self: &std::sync::Arc<Self>, answer: impl FnOnce(Vec<Info>) + Send + 'static) {
        use std::sync::atomic::Ordering;
        if self.updating.swap(true, Ordering::AcqRel) {
            return answer(self.infos());
        }
        let me = std::sync::Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("fabric-update".into())
            .spawn(move || {
                if let Err(e) = me.reload() {
                    tracing::warn!("PMIx_Fabric_update: keeping the last fabric: {e}");
                }
                me.updating.store(false, Ordering::Release);
                answer(me.infos());
            });
        if let Err(e) = spawned {
            tracing::warn!("PMIx_Fabric_update: no thread to look again ({e}): the last look");
            self.updating.store(false, Ordering::Release);
        }
    }

    /// The topology's PMIx infos (cost matrix, groups, this node's switch, the JSON), as
    /// last seen (not waiting for a look in progress).
    pub fn infos(&self) -> Vec<Info> {
        lock(&self.now).clone()
    }

    /// The topology as the JSON `--fabric` reads (the infos'
    /// [`maestro_keys::FABRIC_TOPOLOGY`]).
    pub fn json(&self) -> Option<String> {
        let now = lock(&self.now);
        pmix::find(&now, maestro_keys::FABRIC_TOPOLOGY)
            .and_then(Value::as_str)
            .map(String::from)
    }
}

/// `m` locked, whatever a panicking holder left.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Looks at the fabric of `switches` every `every` on a thread of its own, until only this
/// thread holds them (the job is over).
///
/// # Errors
/// The OS error when no thread can be started.
pub fn watch(
    switches: &std::sync::Arc<Switches>,
    every: std::time::Duration,
) -> std::io::Result<()> {
    if every.is_zero() {
        return Ok(());
    }
    let switches = std::sync::Arc::clone(switches);
    std::thread::Builder::new()
        .name("fabric-watch".into())
        .spawn(move || {
            while std::sync::Arc::strong_count(&switches) > 1 {
                std::thread::sleep(every);
                if let Err(e) = switches.reload() {
                    tracing::warn!("the fabric beyond the node: looking again failed: {e}");
                }
            }
        })
        .map(drop)
}

/// The inventory and each rank's NIC.
pub struct FabricView {
    /// The node's inventory.
    pub inventory: Inventory,
    /// The choice for each rank, by rank.
    pub assignment: Vec<Choice>,
    /// The CPUs the ranks run on (the launcher's binding, which they inherit).
    cpus: IndexSet,
}

impl FabricView {
    /// Collects the live inventory, merges what the PMIx server's plugins report, hands the
    /// result back to them, and chooses a NIC per rank (ranks inherit the launcher's
    /// binding; ties spread by rank). `None`, with a warning, when the inventory cannot be
    /// built: the job still runs, only without fabric keys.
    pub fn collect(server: &Server, nprocs: u32) -> Option<FabricView> {
        let mut inv = match inventory::collect_cached() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!("no fabric inventory for this job: {e}");
                return None;
            }
        };
        match server.collect_inventory(&[]) {
            Ok(from_pmix) => {
                let report = merge_pmix(&mut inv, &from_pmix);
                tracing::debug!("PMIx inventory merged: {report:?}");
            }
            Err(e) => tracing::warn!("PMIx_server_collect_inventory: {e}"),
        }
        if let Err(e) = server.deliver_inventory(&to_pmix_devices(&inv), &[]) {
            tracing::warn!("PMIx_server_deliver_inventory: {e}");
        }
        let cpus = match inventory::process_cpuset() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("cannot read the launcher's binding, using all CPUs: {e}");
                inv.machine.cpus.clone()
            }
        };
        let assignment = (0..nprocs)
            .map(|r| choose_nic(&inv, &cpus, r))
            .collect::<Result<Vec<_>, _>>();
        match assignment {
            Ok(assignment) => Some(FabricView {
                inventory: inv,
                assignment,
                cpus,
            }),
            Err(e) => {
                tracing::warn!("no NIC for the ranks: {e}");
                None
            }
        }
    }

    /// Job-level infos to register.
    pub fn job_info(&self) -> Vec<Info> {
        let mut v = to_pmix_devices(&self.inventory);
        v.push(Info::new(
            maestro_keys::FABRIC_INVENTORY,
            Value::String(self.inventory_json()),
        ));
        v
    }

    /// Per-rank infos to register for a job of `nprocs` ranks: job 0's ranks get the NIC
    /// chosen at launch (the assignment tools query), a spawned job's ranks the same rule's
    /// choice for their rank.
    pub fn proc_info(&self, nprocs: u32) -> Vec<Vec<Info>> {
        (0..nprocs)
            .map(|r| {
                let nic = match self.assignment.get(r as usize) {
                    Some(c) => Some(c.nic.clone()),
                    None => choose_nic(&self.inventory, &self.cpus, r)
                        .ok()
                        .map(|c| c.nic),
                };
                nic.map(|nic| Info::new(maestro_keys::FABRIC_NIC, Value::String(nic)))
                    .into_iter()
                    .chain(std::iter::once(Info::new(
                        pmix::keys::DEVICE_DISTANCES,
                        Value::DeviceDistances(device_distances(&self.inventory, &self.cpus)),
                    )))
                    .collect()
            })
            .collect()
    }

    /// The inventory as JSON.
    pub fn inventory_json(&self) -> String {
        serde_json::to_string(&self.inventory).unwrap_or_default()
    }

    /// The assignment as JSON.
    pub fn assignment_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .assignment
            .iter()
            .enumerate()
            .map(|(r, c)| (r.to_string(), serde_json::to_value(c).unwrap_or_default()))
            .collect();
        serde_json::Value::Object(map).to_string()
    }
}

/// `inventory` with the link states in `links` (interface -> up) applied: what the node's
/// fabric looks like now, for `PMIx_Fabric_update`.
pub fn with_link_states(
    inventory: &Inventory,
    links: &std::collections::BTreeMap<String, bool>,
) -> Inventory {
    let mut now = inventory.clone();
    for nic in &mut now.nics {
        if let Some(&up) = links.get(&nic.name) {
            nic.link.state = Some(if up { "up" } else { "down" }.to_string());
        }
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;
    use inventory::{Options, collect};

    #[test]
    fn fabric_answers_carry_the_link_states_seen_since_launch() {
        let xml = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../inventory/tests/data/24em64t-2n6c2t-pci.xml"
        );
        let inv = collect(&Options {
            topology: Some(xml.into()),
            ..Options::default()
        })
        .expect("inventory");
        let links = std::collections::BTreeMap::from([("eth1".to_string(), false)]);
        let now = with_link_states(&inv, &links);
        let state = |i: &Inventory, n: &str| i.nic(n).and_then(|n| n.link.state.clone());
        assert_eq!(state(&now, "eth1").as_deref(), Some("down"));
        assert_eq!(
            state(&now, "eth0"),
            state(&inv, "eth0"),
            "others as they were"
        );
        assert!(!now.nic("eth1").expect("eth1").link.usable());
    }

    #[test]
    fn many_updates_at_once_are_each_answered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("topology.conf");
        std::fs::write(&conf, "SwitchName=a Nodes=n[1-2]\n").expect("write");
        let switches =
            std::sync::Arc::new(Switches::load(Source::File(conf.clone()), "n1").expect("loads"));
        let (tx, rx) = std::sync::mpsc::channel();
        switches.tell(Box::new({
            let tx = tx.clone();
            move |links| {
                let _ = tx.send(links.len());
            }
        }));
        std::fs::write(&conf, "SwitchName=a Nodes=n[1-3]\n").expect("write");
        let (answers, answered) = std::sync::mpsc::channel();
        for _ in 0..50 {
            let answers = answers.clone();
            switches.update(move |infos| {
                let _ = answers.send(infos.len());
            });
        }
        for _ in 0..50 {
            let n = answered
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("every update is answered");
            assert!(n >= 5, "the fabric's infos: {n}");
        }
        // The new host's link was told once, whichever update saw it.
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(1));
        assert!(rx.try_recv().is_err(), "told once");
        drop(tx);
    }
}
