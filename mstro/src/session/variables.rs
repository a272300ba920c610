//! Every `MSTRO_*` environment variable this implementation reads, in one table, and the
//! warning a process gives once for a variable of that family it does not know (a typo
//! such as `MSTRO_POOL_MANGER_INFO` would otherwise be ignored without a word, and the
//! process wait for a pool manager it was never told of).

/// The variables read, with what each sets.
pub const VARIABLES: &[(&str, &str)] = &[
    ("MSTRO_COMPONENT_NAME", "the component name an app joins as"),
    (
        "MSTRO_DROP_UNKNOWN_ATTRIBUTES",
        "drop attributes no schema declares instead of refusing them",
    ),
    (
        "MSTRO_INLINE_MAX",
        "offers of at most this many bytes carry them to the pool manager",
    ),
    (
        "MSTRO_INVENTORY_CACHE",
        "where the node's inventory is cached",
    ),
    (
        "MSTRO_LOCAL_POOL",
        "1: a rank that finds no pool manager runs a pool of its own",
    ),
    ("MSTRO_LOG_LEVEL", "the log level"),
    ("MSTRO_NAME_OWNERS", "CDO name prefixes bound to components"),
    (
        "MSTRO_NIC_REASON",
        "why the NIC was chosen (set by the Slurm plugin)",
    ),
    (
        "MSTRO_OFI_CMA",
        "off: no same-host copies from the provider's memory",
    ),
    ("MSTRO_OFI_IFACE", "the NIC a process uses"),
    ("MSTRO_OFI_IFACE_EXCLUDE", "NICs the pool never uses"),
    (
        "MSTRO_OFI_PROGRESS",
        "how fabric progress waits (spin, block)",
    ),
    ("MSTRO_OFI_PROVIDER", "the libfabric provider to use"),
    ("MSTRO_POOL_MANAGER_INFO", "the pool manager's info line"),
    (
        "MSTRO_POOL_MANAGER_INFO_FILE",
        "a file holding the pool manager's info",
    ),
    (
        "MSTRO_POOL_MANAGER_RANK",
        "the rank whose job key holds the pool manager's info",
    ),
    (
        "MSTRO_POOL_MANAGER_WAIT",
        "seconds to look for a pool manager",
    ),
    ("MSTRO_SCHEMA_LIST", "attribute schemas to load"),
    ("MSTRO_SCHEMA_PATH", "where schemas are found"),
    ("MSTRO_TIMEOUT", "seconds each pool operation waits at most"),
    (
        "MSTRO_TOPOLOGY",
        "an hwloc topology file to read instead of the machine's",
    ),
    (
        "MSTRO_TRANSPORT_DEFAULT",
        "how offers reach consumers (RDMA, GFS)",
    ),
    ("MSTRO_TRANSPORT_GFS_DIR", "the directory of GFS offers"),
    (
        "MSTRO_WAIT_SPIN",
        "seconds an operation polls before its thread sleeps",
    ),
    ("MSTRO_WORKFLOW_NAME", "the workflow's name"),
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
        || VARIABLES.iter().any(|(v, _)| *v == name)
        || MAESTRO_CORE_ONLY.contains(&name)
    {
        return None;
    }
    let asked = name
        .strip_prefix("MAESTRO_")
        .map_or(name.to_string(), |r| format!("MSTRO_{r}"));
    let nearest = VARIABLES
        .iter()
        .map(|(v, _)| (distance(&asked, v), *v))
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
