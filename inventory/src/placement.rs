//! Which NIC a task of a launch uses and where it runs: what the Slurm SPANK plugin does per
//! task (`srun --maestro-nic`, `--maestro-bind=near-nic`) and `maestro inventory --placement`
//! prints for a whole node. Pure functions of an [`Inventory`].

use crate::choose::{ChoiceError, choose_nic};
use crate::cpuset::IndexSet;
use fabric::ProviderClass;

use crate::model::{Inventory, Nic, NicKind};

/// What a task asks for (`--maestro-nic[=auto|none|NAME]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NicRequest {
    /// The inventory's choice for the task's CPUs, ties spread by its local rank.
    Auto,
    /// This NIC (name or alias), which must exist on the node.
    Named(String),
}

impl NicRequest {
    /// Parses an option value: empty or `auto`, `none` (`Ok(None)`: leave the task alone),
    /// or a NIC name.
    ///
    /// # Errors
    /// [`PlacementError::BadRequest`] for a value that cannot be a NIC name.
    pub fn parse(value: &str) -> Result<Option<NicRequest>, PlacementError> {
        let v = value.trim();
        match v {
            "" | "auto" => Ok(Some(NicRequest::Auto)),
            "none" => Ok(None),
            name if name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-:".contains(c)) =>
            {
                Ok(Some(NicRequest::Named(name.to_string())))
            }
            other => Err(PlacementError::BadRequest(other.to_string())),
        }
    }
}

/// Why a task's NIC or a placement cannot be given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The option's value is not `auto`, `none` or a NIC name.
    #[error(
        "{0:?} is not a NIC: use auto, none or an interface name (maestro inventory lists them)"
    )]
    BadRequest(String),
    /// The NIC named does not exist on this node.
    #[error("no NIC {name:?} on node {node}; NICs here: {available}")]
    NoSuchNic {
        /// The name asked for.
        name: String,
        /// This node.
        node: String,
        /// The NICs it has.
        available: String,
    },
    /// No NIC could be chosen.
    #[error(transparent)]
    Choice(#[from] ChoiceError),
    /// Placement for no tasks.
    #[error("a placement needs at least one task")]
    NoTasks,
    /// The node has no NIC a task could use.
    #[error("node {0} has no usable NIC (only loopback or links down)")]
    NoUsableNic(String),
}

/// The NIC of one task and what to export for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskNic {
    /// The NIC (its interface name).
    pub nic: String,
    /// The name libfabric knows it by (`MSTRO_OFI_IFACE`): the domain of its best offer
    /// (`mlx5_0` for `ib0` under verbs), else the interface name.
    pub iface: String,
    /// The provider to use (`MSTRO_OFI_PROVIDER`) when it matters: the NIC's RDMA provider;
    /// `None` for TCP-only NICs (the fabric's own ranking picks then).
    pub provider: Option<String>,
    /// Why, in words.
    pub reasons: Vec<String>,
}

fn best_offer(nic: &Nic) -> Option<&crate::model::Offer> {
    nic.providers.iter().min_by_key(|o| o.class)
}

fn task_nic_of(nic: &Nic, reasons: Vec<String>) -> TaskNic {
    let best = best_offer(nic);
    TaskNic {
        nic: nic.name.clone(),
        iface: best
            .map(|o| o.domain.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| nic.name.clone()),
        provider: best
            .filter(|o| o.class == ProviderClass::NativeRdma)
            .map(|o| o.provider.clone()),
        reasons,
    }
}

/// The NIC for a task bound to `cpus` with local rank `local_rank`.
///
/// # Errors
/// [`PlacementError::NoSuchNic`] for a name the node does not have (listing those it has);
/// [`PlacementError::Choice`] when nothing can be chosen.
pub fn task_nic(
    inv: &Inventory,
    cpus: &IndexSet,
    local_rank: u32,
    request: &NicRequest,
) -> Result<TaskNic, PlacementError> {
    match request {
        NicRequest::Auto => {
            let choice = choose_nic(inv, cpus, local_rank)?;
            let nic = inv.nic(&choice.nic).ok_or(ChoiceError::NoNic)?;
            Ok(task_nic_of(nic, choice.reasons))
        }
        NicRequest::Named(name) => {
            let nic = inv.nic(name).ok_or_else(|| PlacementError::NoSuchNic {
                name: name.clone(),
                node: inv.hostname.clone(),
                available: inv
                    .nics
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
            Ok(task_nic_of(
                nic,
                vec![format!("named by the user ({name})")],
            ))
        }
    }
}

/// Where one task of a node runs under `--maestro-bind=near-nic`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The task's local index on the node.
    pub task: u32,
    /// Its NIC.
    pub nic: String,
    /// The CPUs to bind it to; `None` when it stays as launched (see `note`).
    pub cpus: Option<IndexSet>,
    /// Why it is placed so, or why it is not bound.
    pub note: String,
}

/// Spreads `ntasks` tasks of a node over its NICs of the best kind present (InfiniBand, else
/// other RDMA NICs, else TCP: as [`choose_nic`] ranks them; round robin, faster links first)
/// and gives each task CPUs local to its NIC: the CPUs near a NIC are split evenly among
/// all tasks whose NICs share them. Tasks stay unbound when the NIC's locality is unknown
/// or it has fewer CPUs than tasks.
///
/// # Errors
/// [`PlacementError::NoTasks`]; [`PlacementError::NoUsableNic`].
pub fn placement(inv: &Inventory, ntasks: u32) -> Result<Vec<Placement>, PlacementError> {
    if ntasks == 0 {
        return Err(PlacementError::NoTasks);
    }
    let tier = |n: &Nic| {
        (
            !n.rdma.capable,
            n.rdma.capable && n.kind != NicKind::Infiniband,
        )
    };
    let usable: Vec<&Nic> = inv
        .nics
        .iter()
        .filter(|n| n.kind != NicKind::Loopback && n.link.usable())
        .collect();
    let best = usable
        .iter()
        .map(|n| tier(n))
        .min()
        .ok_or_else(|| PlacementError::NoUsableNic(inv.hostname.clone()))?;
    let mut nics: Vec<&Nic> = usable.into_iter().filter(|n| tier(n) == best).collect();
    nics.sort_by_key(|n| {
        (
            std::cmp::Reverse(n.link.speed_mbps.unwrap_or(0)),
            n.name.clone(),
        )
    });
    let k = nics.len();
    let nic_of = |task: u32| nics[task as usize % k];
    // Tasks whose NICs are near the same CPUs share those CPUs: each NIC's class (the first
    // NIC with its CPUs), how many tasks each class gets, and how many it has placed so far
    // (linear in the tasks: 100,000 of them take milliseconds).
    let near: Vec<Option<String>> = nics
        .iter()
        .map(|n| n.locality.as_ref().map(|l| l.cpus.to_string()))
        .collect();
    let class: Vec<usize> = (0..k)
        .map(|i| near.iter().position(|c| *c == near[i]).unwrap_or(i))
        .collect();
    let mut size = vec![0u32; k];
    for i in 0..k {
        // Tasks i, i + k, i + 2k, ... below ntasks go to NIC i.
        let tasks = ntasks / k as u32 + u32::from((i as u32) < ntasks % k as u32);
        size[class[i]] += tasks;
    }
    let mut placed = vec![0u32; k];
    let mut out = Vec::with_capacity(ntasks as usize);
    for task in 0..ntasks {
        let nic = nic_of(task);
        let Some(l) = &nic.locality else {
            out.push(Placement {
                task,
                nic: nic.name.clone(),
                cpus: None,
                note: format!("{}: locality unknown, left as launched", nic.name),
            });
            continue;
        };
        let c = class[task as usize % k];
        let (turn, group) = (placed[c] as usize, size[c] as usize);
        placed[c] += 1;
        let local: Vec<u32> = l.cpus.iter().collect();
        let chunk = local.len() / group;
        let (cpus, note) = if chunk == 0 {
            let note = format!(
                "{}: {} CPUs near it for {} tasks: too few, left as launched",
                nic.name,
                local.len(),
                group
            );
            (None, note)
        } else {
            let mine: IndexSet = local[turn * chunk..(turn + 1) * chunk]
                .iter()
                .copied()
                .collect();
            let note = format!(
                "{}: {chunk} of the {} CPUs local to it (NUMA node {})",
                nic.name,
                local.len(),
                l.numa_nodes
            );
            (Some(mine), note)
        };
        out.push(Placement {
            task,
            nic: nic.name.clone(),
            cpus,
            note,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(NicRequest::parse(""), Ok(Some(NicRequest::Auto)));
        assert_eq!(NicRequest::parse("auto"), Ok(Some(NicRequest::Auto)));
        assert_eq!(NicRequest::parse("none"), Ok(None));
        assert_eq!(
            NicRequest::parse("ib0"),
            Ok(Some(NicRequest::Named("ib0".into())))
        );
        assert!(matches!(
            NicRequest::parse("eth0; rm -rf"),
            Err(PlacementError::BadRequest(_))
        ));
    }
}
