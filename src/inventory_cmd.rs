//! `maestro inventory`: the node's NICs, their locality and providers, and the NIC a
//! process bound to a cpuset should use (with reasons); JSON with `--json`, Slurm lines
//! with `--slurm`.

use std::path::PathBuf;

use inventory::{
    Choice, IndexSet, Inventory, InventoryError, Options, choose_nic, collect, export,
};
use serde::Serialize;

/// Options of `maestro inventory`.
#[derive(Clone, Debug, Default)]
pub struct InventoryOptions {
    /// An hwloc XML topology instead of the live machine.
    pub topology: Option<PathBuf>,
    /// The cpuset to choose a NIC for (default: this process's binding; all CPUs of an XML
    /// topology).
    pub cpuset: Option<String>,
    /// The local rank that spreads ties.
    pub local_rank: u32,
    /// Only consider NICs offering this libfabric provider.
    pub provider: Option<String>,
    /// Print JSON.
    pub json: bool,
    /// Print Slurm configuration lines.
    pub slurm: bool,
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

/// Builds the inventory and prints it.
///
/// # Errors
/// [`InventoryError`] for a bad topology, cpuset or provider, or a libfabric failure.
pub fn run(opts: &InventoryOptions) -> Result<(), InventoryError> {
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
                .any(|o| o.provider == *p || o.provider.split(';').next() == Some(p))
        });
    }
    let choice = choose_nic(&candidates, &cpus, opts.local_rank)?;
    if opts.slurm {
        print!("{}", export::slurm(&inv));
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
