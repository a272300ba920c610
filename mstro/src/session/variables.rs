//! Every `MSTRO_*` environment variable this implementation reads, in one table (from which
//! `maestro reference` generates `docs/configuration.md`, and which a test checks against
//! the variables the code reads), and the
//! warning a process gives once for a variable of that family it does not know (a typo
//! such as `MSTRO_POOL_MANGER_INFO` would otherwise be ignored without a word, and the
//! process wait for a pool manager it was never told of).

/// One environment variable the implementation reads: its name, its default and what it
/// sets. The configuration reference (`docs/configuration.md`) is generated from
/// [`VARIABLES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    /// The name.
    pub name: &'static str,
    /// What holds when it is unset.
    pub default: &'static str,
    /// What it sets, and the values it takes.
    pub what: &'static str,
}

/// The variables read, by name.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "MSTRO_COMPONENT_NAME",
        default: "the program's argument",
        what: "the component name an app joins as (when `mstro_init` is given NULL)",
    },
    Variable {
        name: "MSTRO_DROP_UNKNOWN_ATTRIBUTES",
        default: "0",
        what: "1: drop attributes no schema declares instead of refusing them",
    },
    Variable {
        name: "MSTRO_INLINE_MAX",
        default: "4096",
        what: "offers of at most this many bytes carry them to the pool manager (0: never)",
    },
    Variable {
        name: "MSTRO_INVENTORY_CACHE",
        default: "on",
        what: "0: do not cache the node's inventory (in the user's private directory)",
    },
    Variable {
        name: "MSTRO_LOCAL_POOL",
        default: "0",
        what: "1: a rank of a multi-process job that finds no pool manager runs a pool of its own",
    },
    Variable {
        name: "MSTRO_LOG_LEVEL",
        default: "warn",
        what: "the log level: error, warn, info, debug, trace, off (or 0-4); `RUST_LOG` wins",
    },
    Variable {
        name: "MSTRO_NAME_OWNERS",
        default: "none",
        what: "`PREFIX=COMPONENT` entries, separated by spaces: CDO name prefixes only that component may offer",
    },
    Variable {
        name: "MSTRO_NIC_REASON",
        default: "unset",
        what: "why the NIC was chosen (set by the Slurm plugin, shown in the pool's views)",
    },
    Variable {
        name: "MSTRO_OFI_CMA",
        default: "on",
        what: "off: no same-host copies straight from the provider's memory",
    },
    Variable {
        name: "MSTRO_OFI_IFACE",
        default: "the inventory's choice",
        what: "the NIC a process uses",
    },
    Variable {
        name: "MSTRO_OFI_IFACE_EXCLUDE",
        default: "none",
        what: "NICs (comma-separated) the pool never uses",
    },
    Variable {
        name: "MSTRO_OFI_PROGRESS",
        default: "block",
        what: "how fabric progress waits: block or spin",
    },
    Variable {
        name: "MSTRO_OFI_PROVIDER",
        default: "the best one offered",
        what: "the libfabric provider to use (`FI_PROVIDER` too)",
    },
    Variable {
        name: "MSTRO_POOL_MANAGER_INFO",
        default: "unset",
        what: "the pool manager's info line (`maestro pm` prints it)",
    },
    Variable {
        name: "MSTRO_POOL_MANAGER_INFO_FILE",
        default: "unset",
        what: "a file holding the pool manager's info (`maestro pm --info-file`)",
    },
    Variable {
        name: "MSTRO_POOL_MANAGER_RANK",
        default: "0",
        what: "the rank of the job whose job key holds the pool manager's info",
    },
    Variable {
        name: "MSTRO_POOL_MANAGER_WAIT",
        default: "30",
        what: "seconds to look for a pool manager (through PMIx, or for the info file)",
    },
    Variable {
        name: "MSTRO_POOL_RINGS",
        default: "on",
        what: "off: the control connection to a pool manager on this host stays on its Unix socket (no shared-memory rings)",
    },
    Variable {
        name: "MSTRO_PM_RECLAIM_TIMEOUT",
        default: "30",
        what: "seconds a process that lost its pool manager waits for one to take over (a standby, `maestro pm --reclaim`), its calls waiting; 0: they fail at once",
    },
    Variable {
        name: "MSTRO_PM_STANDBY_FOR",
        default: "none",
        what: "makes `mstro_pm_start` stand by for the active pool manager of this PM info file (or `MSTRO_POOL_MANAGER_INFO;<info>;` line): it takes over when that one is gone and writes its info to the file",
    },
    Variable {
        name: "MSTRO_PM_GRACE",
        default: "5",
        what: "seconds of the grace period of a standby that takes over (`MSTRO_PM_STANDBY_FOR`): the apps of the pool manager that is gone rejoin, new apps wait",
    },
    Variable {
        name: "MSTRO_POOL_FABRIC",
        default: "unset",
        what: "the fabric beyond the node for the pool manager `mstro_pm_start` starts (a Slurm topology.conf, an ibnetdiscover dump, or `maestro inventory --json` of one): of several offers of a name, a consumer gets the one fewest hops away; unset: the cost matrix the PMIx host serves, if any",
    },
    Variable {
        name: "MSTRO_PM_SHARDS",
        default: "1",
        what: "how many pool managers `mstro_pm_start` starts for the pool (1 to 1024), each the home of a share of the CDO names, as threads of the process (as `maestro pm --shards`)",
    },
    Variable {
        name: "MSTRO_SCHEMA_LIST",
        default: "none",
        what: "attribute schemas to load (`;`-separated file names)",
    },
    Variable {
        name: "MSTRO_SCHEMA_PATH",
        default: ".",
        what: "where schemas are found (`:`-separated directories)",
    },
    Variable {
        name: "MSTRO_TIMEOUT",
        default: "300",
        what: "seconds each pool operation (a demand, a wait) takes at most",
    },
    Variable {
        name: "MSTRO_TOPOLOGY",
        default: "the machine's",
        what: "an hwloc XML topology the Slurm plugin plans for (shown, not applied)",
    },
    Variable {
        name: "MSTRO_TRANSPORT_DEFAULT",
        default: "RDMA",
        what: "how offers reach consumers: RDMA (the fabric) or GFS (files)",
    },
    Variable {
        name: "MSTRO_TRANSPORT_GFS_DIR",
        default: "unset",
        what: "the directory every process sees, for GFS offers and the pool's kept files",
    },
    Variable {
        name: "MSTRO_WAIT_SPIN",
        default: "0.00005",
        what: "seconds an operation polls for its answer before its thread sleeps",
    },
    Variable {
        name: "MSTRO_WORKFLOW_NAME",
        default: "the program's argument",
        what: "the workflow's name (when `mstro_init` is given NULL)",
    },
];

/// Maestro Core's variables this implementation does not read (a program moved over may
/// still have them set): not warned about.
pub const MAESTRO_CORE_ONLY: &[&str] = &[
    "MSTRO_LOG_COLOR",
    "MSTRO_LOG_DST",
    "MSTRO_LOG_MODULES",
    "MSTRO_MEMLOCK",
    "MSTRO_MIO_CONFIG",
    "MSTRO_NETWORK_CREDENTIAL",
    "MSTRO_OFI_NUM_RECV",
    "MSTRO_OPERATIONS_NUM_THREADS",
    "MSTRO_PM_PC_NUM_THREADS",
    "MSTRO_TELEMETRY_HEARTBEAT",
];

/// The warning for variable `name` of the `MSTRO_`/`MAESTRO_` family, if it is one this
/// implementation does not know: with the known name nearest to it.
pub fn unknown(name: &str) -> Option<String> {
    if !(name.starts_with("MSTRO_") || name.starts_with("MAESTRO_"))
        || VARIABLES.iter().any(|v| v.name == name)
        || MAESTRO_CORE_ONLY.contains(&name)
    {
        return None;
    }
    let asked = name
        .strip_prefix("MAESTRO_")
        .map_or(name.to_string(), |r| format!("MSTRO_{r}"));
    let nearest = VARIABLES
        .iter()
        .map(|v| (distance(&asked, v.name), v.name))
        .min()
        .filter(|(d, _)| *d <= 3)
        .map(|(_, v)| v);
    Some(match nearest {
        Some(v) => format!("{name} is set but maestro reads no such variable: did you mean {v}?"),
        None => format!(
            "{name} is set but maestro reads no such variable (the MSTRO_* variables it reads are listed in the configuration reference)"
        ),
    })
}

/// Warns once per process about each unknown `MSTRO_*`/`MAESTRO_*` variable set.
pub fn warn_unknown_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (key, _) in std::env::vars_os() {
            if let Some(why) = key.to_str().and_then(unknown) {
                tracing::warn!("{why}");
            }
        }
    });
}

/// Edit distance (insertions, deletions, substitutions) between `a` and `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut last = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(last + usize::from(ca != *cb));
            last = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelled_variable_is_told_with_the_nearest_name() {
        let said = |n| unknown(n).unwrap_or_default();
        assert!(said("MSTRO_POOL_MANGER_INFO").contains("did you mean MSTRO_POOL_MANAGER_INFO?"));
        assert!(said("MSTRO_TRANSPORT_DEFALT").contains("did you mean MSTRO_TRANSPORT_DEFAULT?"));
        assert!(
            said("MAESTRO_TRANSPORT_DEFAULT").contains("did you mean MSTRO_TRANSPORT_DEFAULT?")
        );
        assert!(said("MSTRO_SOMETHING_ELSE_ENTIRELY").contains("reads no such variable"));
        for known in ["MSTRO_TIMEOUT", "MSTRO_LOG_COLOR", "PATH", "MSTROX"] {
            assert_eq!(unknown(known), None, "{known}");
        }
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
