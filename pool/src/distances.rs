//! Where a pool manager gets the hops between its hosts ([`pool_core::HostDistances`]):
//! the inventory's view of the fabric beyond the node (a `topology.conf`, an
//! `ibnetdiscover` dump, InfiniBand discovery: [`of_topology`]) or the cost matrix a PMIx
//! host serves with `PMIx_Fabric_register` (`maestro run --fabric`: [`from_pmix`]);
//! [`for_pm`] takes the first of them a pool manager has, [`from_host`] asks the host.

use std::time::Duration;

use inventory::switches::{Source, Topology};
use pmix::{Info, Value, keys};
pub use pool_core::{DistancesError, HostDistances};

/// The hops between the hosts of `t`.
///
/// # Errors
/// [`DistancesError::TooMany`] for a fabric of more than
/// [`pool_core::MAX_DISTANCE_HOSTS`] hosts.
pub fn of_topology(t: &Topology) -> Result<HostDistances, DistancesError> {
    of_topology_with(t, &[])
}

/// As [`of_topology`], with `cut_off` too: hosts the fabric had and no longer reaches,
/// kept with no path to any other (so offers there are known to be out of reach, not of
/// an unknown host).
///
/// # Errors
/// As [`of_topology`].
pub fn of_topology_with(t: &Topology, cut_off: &[String]) -> Result<HostDistances, DistancesError> {
    let n = t.hosts.len() + cut_off.len();
    if n > pool_core::MAX_DISTANCE_HOSTS {
        return Err(DistancesError::TooMany(n));
    }
    let (hosts, matrix) = t.cost_matrix(cut_off);
    HostDistances::new(hosts, matrix)
}

/// How long a pool manager's process waits for its PMIx host's fabric.
pub const HOST_TIMEOUT: Duration = Duration::from_secs(5);

/// The hops the PMIx host of `client` serves (`PMIx_Fabric_register`, or with `update`
/// `PMIx_Fabric_update`: the fabric now); `None` when it serves no cost matrix.
///
/// # Errors
/// The host's error, or a matrix that does not fit its hosts, in words.
pub fn from_host(client: &pmix::Client, update: bool) -> Result<Option<HostDistances>, String> {
    let infos = if update {
        client.fabric_update(HOST_TIMEOUT)
    } else {
        client.fabric_register(HOST_TIMEOUT)
    };
    from_pmix(&infos.map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

/// A pool manager's hops at its start, with the topology they came from when it is to be
/// watched: from `source` (`--fabric`, `--discover-fabric`, `MSTRO_POOL_FABRIC`), else from
/// the PMIx host's cost matrix, if it serves one (its failure only logged).
///
/// # Errors
/// A `source` that cannot be read or discovered, or that has too many hosts, in words.
pub fn for_pm(
    source: Option<&Source>,
    host: Option<&pmix::Client>,
) -> Result<(Option<HostDistances>, Option<Topology>), String> {
    if let Some(source) = source {
        let t = source.load().map_err(|e| e.to_string())?;
        let d = of_topology(&t).map_err(|e| format!("{}: {e}", source.identifier()))?;
        return Ok((Some(d), Some(t)));
    }
    let d = host.and_then(|c| {
        from_host(c, false)
            .inspect_err(|e| tracing::info!("no fabric from the PMIx host: {e}"))
            .ok()
            .flatten()
    });
    Ok((d, None))
}

/// The hops in a `PMIx_Fabric_register` answer: `PMIX_FABRIC_COST_MATRIX` (a `uint16_t`
/// array, row by row) between the hosts of [`maestro_keys::FABRIC_HOSTS`]. `None` when the
/// answer has no such matrix (a host that serves only the node's devices).
///
/// # Errors
/// [`DistancesError`] for a matrix that does not fit its hosts.
pub fn from_pmix(infos: &[Info]) -> Result<Option<HostDistances>, DistancesError> {
    let (Some(Value::Uint16s(hops)), Some(Value::Strings(hosts))) = (
        pmix::find(infos, keys::FABRIC_COST_MATRIX),
        pmix::find(infos, maestro_keys::FABRIC_HOSTS),
    ) else {
        return Ok(None);
    };
    HostDistances::new(hosts.clone(), hops.clone()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topology_and_its_pmix_answer_give_the_same_hops() {
        let t = inventory::switches::read(
            "SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[3-4]\nSwitchName=s Switches=l[1-2]\n",
        )
        .expect("topology.conf");
        let d = of_topology(&t).expect("distances");
        assert_eq!(d.between("n1", "n2"), Some(2));
        assert_eq!(d.between("n1", "n4"), Some(4));
        let answer = inventory::to_pmix_switches(&t, &[], "file:x", "n1");
        assert_eq!(from_pmix(&answer), Ok(Some(d)));
        assert_eq!(from_pmix(&[]), Ok(None), "no matrix: none");
        let with = of_topology_with(&t, &["n9".into()]).expect("distances");
        assert_eq!(with.between("n1", "n4"), Some(4));
        assert_eq!(with.between("n1", "n9"), None, "cut off");
        assert!(with.knows("n9"));
        let bad = vec![
            Info::new(keys::FABRIC_COST_MATRIX, Value::Uint16s(vec![0, 1, 2])),
            Info::new(
                maestro_keys::FABRIC_HOSTS,
                Value::Strings(vec!["a".into(), "b".into()]),
            ),
        ];
        assert!(matches!(
            from_pmix(&bad),
            Err(DistancesError::Shape {
                entries: 3,
                hosts: 2
            })
        ));
    }
}
