//! `maestro inventory`: the node's NICs, their locality and providers, and the NIC a
//! process bound to a cpuset should use (with reasons); JSON with `--json`, Slurm lines
//! with `--slurm`.

use std::path::PathBuf;

use inventory::switches::Source;
use inventory::{
    Choice, IndexSet, Inventory, InventoryError, Options, choose_nic, collect, export,
};
use serde::Serialize;

/// Options of `maestro inventory` (its command line).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct InventoryOptions {
    /// Read an hwloc XML topology (lstopo --of xml) instead of this machine.
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// Choose the NIC for these CPUs (list syntax 0-3,8; default: this process's binding;
    /// all CPUs of an XML topology).
    #[arg(long)]
    pub cpuset: Option<String>,
    /// The local rank, which spreads processes over equally good NICs.
    #[arg(long, default_value_t = 0)]
    pub local_rank: u32,
    /// Only consider NICs offering this libfabric provider (tcp, verbs, ...).
    #[arg(long)]
    pub provider: Option<String>,
    /// Print JSON (schema maestro.inventory/1, plus the choice).
    #[arg(long, conflicts_with = "slurm")]
    pub json: bool,
    /// Print slurm.conf / gres.conf / topology.conf lines for this node.
    #[arg(long)]
    pub slurm: bool,
    /// Print where N tasks of this node go under srun --maestro-bind=near-nic: each
    /// task's NIC and the CPUs near it (for schedulers and hand-written --cpu-bind maps).
    /// With the fabric beyond the node (--fabric, --discover-fabric): where N tasks go
    /// across its nodes (--hosts, default all), leaf switch by leaf switch, with the
    /// hostfile srun --distribution=arbitrary takes.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = pool_tools::cli::positive("tasks"))]
    pub placement: Option<u32>,
    /// The fabric beyond the node (--fabric FILE, --discover-fabric): its switches, leaf
    /// groups and the hops between hosts (with --json, as JSON); with --slurm, the
    /// topology.conf lines for Slurm's topology/tree from it.
    #[command(flatten)]
    pub source: launcher::run::FabricSource,
    /// With --fabric or --discover-fabric: the hops between these hosts only (a Slurm host
    /// list, n[1-64]; a job's nodes). Without it the JSON holds the hops of fabrics of up
    /// to 1024 hosts.
    #[arg(long, value_name = "LIST")]
    pub hosts: Option<String>,
    /// With --placement across the fabric's nodes: tasks on each node.
    #[arg(long, value_name = "M", default_value_t = 1, value_parser = pool_tools::cli::positive("tasks per node"))]
    pub tasks_per_node: u32,
}

/// The JSON document: the inventory and the choice.
#[derive(Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    inventory: &'a Inventory,
    choice: ChoiceReport<'a>,
}

#[derive(Serialize)]
struct ChoiceReport<'a> {
    cpus: String,
    local_rank: u32,
    #[serde(flatten)]
    choice: &'a Choice,
}

/// Most hosts whose hop matrix `--fabric --json` prints without `--hosts`.
const MOST_HOPS: usize = 1024;

/// `--fabric`: the topology `t` for people, or as JSON (with the hops between `--hosts`,
/// or between every host of a fabric of up to [`MOST_HOPS`]).
///
/// # Errors
/// A bad `--hosts` list, or one naming a host the fabric does not have.
fn print_fabric(
    t: &inventory::switches::Topology,
    opts: &InventoryOptions,
) -> Result<(), InventoryError> {
    let among = hosts_among(t, opts)?;
    let hops = match &among {
        Some(idx) => Some(t.hops_among(idx)),
        None if t.hosts.len() <= MOST_HOPS => Some(t.hops()),
        None => None,
    };
    if opts.json {
        let doc = serde_json::json!({
            "topology": t,
            "leaves": t.leaves(),
            "hops": hops,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        );
    } else if let Some(h) = hops.filter(|_| among.is_some()) {
        print!("{}", inventory::switches::describe_switches(t));
        print!("{}", inventory::switches::describe_hops(&h));
    } else {
        print!("{}", inventory::switches::describe(t));
    }
    Ok(())
}

/// `--hosts`: the indices of the fabric's hosts it names (`None` without it).
///
/// # Errors
/// [`InventoryError::Hosts`] for a bad list or a host the fabric does not have.
fn hosts_among(
    t: &inventory::switches::Topology,
    opts: &InventoryOptions,
) -> Result<Option<Vec<usize>>, InventoryError> {
    let Some(list) = &opts.hosts else {
        return Ok(None);
    };
    let names = inventory::switches::hostlist::expand(list)
        .map_err(|e| InventoryError::Hosts(e.to_string()))?;
    let at: std::collections::HashMap<&str, usize> = (t.hosts.iter().enumerate())
        .map(|(i, h)| (h.name.as_str(), i))
        .collect();
    names
        .iter()
        .map(|n| {
            at.get(n.as_str())
                .copied()
                .ok_or_else(|| InventoryError::Hosts(format!("{n} is no host of this fabric")))
        })
        .collect::<Result<Vec<usize>, _>>()
        .map(Some)
}

/// `--placement N` with the fabric: `n` tasks across its nodes by leaf switch (text or
/// JSON), with the hostfile `srun --distribution=arbitrary` takes.
///
/// # Errors
/// A bad `--hosts`, or tasks that do not fit.
fn print_spread(
    t: &inventory::switches::Topology,
    opts: &InventoryOptions,
    n: u32,
) -> Result<(), InventoryError> {
    let hosts: Option<Vec<String>> =
        hosts_among(t, opts)?.map(|idx| idx.iter().map(|&i| t.hosts[i].name.clone()).collect());
    let plan = inventory::switches::spread::spread(t, hosts.as_deref(), n, opts.tasks_per_node)?;
    if opts.json {
        println!("{}", serde_json::json!(plan));
        return Ok(());
    }
    println!(
        "placement of {n} tasks ({} per node) by leaf switch:",
        opts.tasks_per_node
    );
    println!("{:<6} {:<16} LEAF", "TASK", "HOST");
    for p in &plan {
        println!("{:<6} {:<16} {}", p.task, p.host, p.leaf);
    }
    let mut leaves: Vec<&str> = plan.iter().map(|p| p.leaf.as_str()).collect();
    leaves.dedup();
    println!("leaf switches used: {}", leaves.join(", "));
    println!("# SLURM_HOSTFILE (srun --distribution=arbitrary -n {n}), one line per task:");
    for p in &plan {
        println!("{}", p.host);
    }
    Ok(())
}

/// Builds the inventory and prints it.
///
/// # Errors
/// [`InventoryError`] for a bad topology, cpuset or provider, or a libfabric failure.
pub fn run(opts: &InventoryOptions) -> Result<(), InventoryError> {
    let source = opts.source.source();
    if source.is_none() && opts.hosts.is_some() {
        return Err(InventoryError::Hosts(
            "a list of the fabric's hosts: give the fabric too (--fabric FILE or --discover-fabric)"
                .into(),
        ));
    }
    let fabric = source.as_ref().map(Source::load).transpose()?;
    if let (Some(t), Some(n)) = (fabric.as_ref(), opts.placement) {
        return print_spread(t, opts, n);
    }
    if let Some(t) = fabric.as_ref().filter(|_| !opts.slurm) {
        print_fabric(t, opts)?;
        return Ok(());
    }
    let inv = collect(&Options {
        topology: opts.topology.clone(),
        ..Options::default()
    })?;
    let cpus = match &opts.cpuset {
        Some(s) => {
            let set = IndexSet::parse(s)?;
            set.check_within(&inv.machine.cpus)?;
            set
        }
        None if opts.topology.is_some() => inv.machine.cpus.clone(),
        None => inventory::process_cpuset().map_err(InventoryError::Affinity)?,
    };
    let mut candidates = inv.clone();
    if let Some(p) = &opts.provider {
        inv.check_provider(p)?;
        candidates.nics.retain(|n| {
            n.providers
                .iter()
                .any(|o| fabric::provider_matches(p, &o.provider))
        });
    }
    let choice = choose_nic(&candidates, &cpus, opts.local_rank)?;
    if let Some(n) = opts.placement {
        print_placement(&inv, &candidates, n, opts.json)?;
    } else if opts.slurm {
        print_slurm(&inv, fabric.as_ref());
    } else if opts.json {
        let report = Report {
            inventory: &inv,
            choice: ChoiceReport {
                cpus: cpus.to_string(),
                local_rank: opts.local_rank,
                choice: &choice,
            },
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        );
    } else {
        print!(
            "{}",
            export::table(&inv, Some((&cpus, opts.local_rank, &choice)))
        );
    }
    Ok(())
}

/// `--placement N`: the near-NIC placement of `n` tasks over `candidates` (text or JSON),
/// with the `srun` binding that does it by hand.
///
/// # Errors
/// [`InventoryError`] when no placement can be made.
fn print_placement(
    inv: &inventory::Inventory,
    candidates: &inventory::Inventory,
    n: u32,
    json: bool,
) -> Result<(), InventoryError> {
    let plan = inventory::placement(candidates, n)?;
    if json {
        let rows: Vec<serde_json::Value> = plan
            .iter()
            .map(|p| {
                serde_json::json!({
                    "task": p.task,
                    "nic": p.nic,
                    "cpus": p.cpus.as_ref().map(ToString::to_string),
                    "note": p.note,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else {
        println!("near-NIC placement of {n} tasks on {}:", inv.hostname);
        println!("{:<6} {:<10} {:<24} WHY", "TASK", "NIC", "CPUS");
        for p in &plan {
            let cpus = p
                .cpus
                .as_ref()
                .map_or_else(|| "-".to_string(), ToString::to_string);
            println!("{:<6} {:<10} {:<24} {}", p.task, p.nic, cpus, p.note);
        }
        if let Some(masks) = plan
            .iter()
            .map(|p| p.cpus.as_ref().map(hex_mask))
            .collect::<Option<Vec<String>>>()
        {
            println!("by hand: srun --cpu-bind=mask_cpu:{}", masks.join(","));
        }
    }
    Ok(())
}

/// `--slurm`: the Slurm export and the `plugstack.conf` line of the SPANK plugin.
fn print_slurm(inv: &inventory::Inventory, fabric: Option<&inventory::switches::Topology>) {
    print!("{}", export::slurm(inv, fabric));
    // Where scripts/install.sh put the plugin, next to this binary's prefix.
    let plugin = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("lib/maestro_spank.so")))
        .filter(|p| p.exists());
    println!("# plugstack.conf (srun --maestro-nic / --maestro-bind=near-nic per task):");
    match plugin {
        Some(p) => println!("required {}", p.display()),
        None => println!(
            "# (no plugin next to this maestro: scripts/install.sh PREFIX installs it as PREFIX/lib/maestro_spank.so, and this line then names it)"
        ),
    }
}

/// A CPU set as the hexadecimal mask `srun --cpu-bind=mask_cpu:` takes (`0x15` for 0,2,4).
fn hex_mask(cpus: &IndexSet) -> String {
    let Some(top) = cpus.iter().max() else {
        return "0x0".into();
    };
    let mut nibbles = vec![0u8; top as usize / 4 + 1];
    for c in cpus.iter() {
        nibbles[c as usize / 4] |= 1 << (c % 4);
    }
    // The top nibble holds the highest CPU: no leading zeros.
    let hex: String = nibbles
        .iter()
        .rev()
        .filter_map(|n| char::from_digit(u32::from(*n), 16))
        .collect();
    format!("0x{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_what_srun_takes() {
        let m = |s: &str| hex_mask(&IndexSet::parse(s).expect("cpuset"));
        assert_eq!(m("0,2,4"), "0x15");
        assert_eq!(m("6,8,10"), "0x540");
        assert_eq!(m("64"), format!("0x1{}", "0".repeat(16)));
    }
}
