//! The fabric side of `maestro run`: the node's inventory, merged with what PMIx's own
//! plugins collect and delivered back to them; the NIC of each rank; and the keys and query
//! answers through which clients and tools see both.
//!
//! What clients get: job-level `PMIX_FABRIC_DEVICES`/`PMIX_FABRIC_NUM_DEVICES` and
//! [`maestro_keys::FABRIC_INVENTORY`] (the JSON inventory), per rank
//! [`maestro_keys::FABRIC_NIC`] and `PMIX_DEVICE_DISTANCES`; `PMIx_Fabric_register` answers
//! with the devices; `PMIx_Query_info` answers [`maestro_keys::FABRIC_INVENTORY`] and
//! [`maestro_keys::FABRIC_ASSIGNMENT`].

use inventory::{
    Choice, IndexSet, Inventory, choose_nic, device_distances, merge_pmix, to_pmix_devices,
};

use pmix::{Info, Server, Value};

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
mod link_state_tests {
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
}
