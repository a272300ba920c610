//! Choosing the NIC for a process from its cpuset.
//!
//! Order: usable links before links the OS reports down; real NICs before loopback;
//! RDMA-capable before TCP-only; native InfiniBand before RDMA over Ethernet; then nearest by locality ([`Proximity`]: the NIC's local
//! CPUs cover the cpuset, overlap it, share a package with it, or only the machine); then
//! faster links. NICs equal on all of these are spread over processes by local rank. The
//! [`Choice`] carries the reasons in words.

use serde::Serialize;

use crate::cpuset::IndexSet;
use crate::model::{Inventory, Nic, NicKind};

/// How close a NIC is to a cpuset. Declared nearest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proximity {
    /// The NIC's local CPUs include every CPU of the cpuset.
    Local,
    /// The NIC's local CPUs include some of the cpuset.
    Partial,
    /// Same package, other NUMA node.
    SamePackage,
    /// Only the same machine: remote.
    Machine,
    /// The NIC's locality is unknown (virtual or loopback interface).
    Unknown,
}

impl Proximity {
    fn describe(self) -> &'static str {
        match self {
            Proximity::Local => "local to the cpuset",
            Proximity::Partial => "local to part of the cpuset",
            Proximity::SamePackage => "on the same package, another NUMA node",
            Proximity::Machine => "remote (attached to another package)",
            Proximity::Unknown => "of unknown locality",
        }
    }
}

/// The chosen NIC and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Choice {
    /// The NIC's name.
    pub nic: String,
    /// Its proximity to the cpuset.
    pub proximity: Proximity,
    /// True when it is attached to another package than the cpuset's.
    pub remote: bool,
    /// RDMA-capable.
    pub rdma: bool,
    /// The reasons, in order of weight.
    pub reasons: Vec<String>,
}

/// Why no NIC could be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// The inventory has no NIC at all.
    #[error("no network interface in the inventory")]
    NoNic,
    /// The cpuset is empty.
    #[error("empty cpuset: give the CPUs of the process, e.g. 0-3")]
    EmptyCpuset,
}

/// How close `nic` is to a process bound to `cpus`.
pub fn proximity(nic: &Nic, cpus: &IndexSet, inv: &Inventory) -> Proximity {
    let Some(loc) = nic.locality.as_ref().filter(|l| !l.cpus.is_empty()) else {
        return Proximity::Unknown;
    };
    if loc.cpus.includes(cpus) {
        return Proximity::Local;
    }
    if loc.cpus.intersects(cpus) {
        return Proximity::Partial;
    }
    let same_package = inv
        .machine
        .packages
        .iter()
        .any(|p| p.cpus.intersects(cpus) && loc.packages.iter().any(|i| i == p.index));
    if same_package {
        Proximity::SamePackage
    } else {
        Proximity::Machine
    }
}

/// The sort key: smaller is better.
fn key(nic: &Nic, prox: Proximity) -> (bool, bool, bool, bool, Proximity, std::cmp::Reverse<u64>) {
    (
        !nic.link.usable(),
        nic.kind == NicKind::Loopback,
        !nic.rdma.capable,
        nic.rdma.capable && nic.kind != NicKind::Infiniband,
        prox,
        std::cmp::Reverse(nic.link.speed_mbps.unwrap_or(0)),
    )
}

/// Picks the NIC for a process bound to `cpus`, spreading ties by `local_rank`.
///
/// # Errors
/// [`ChoiceError`] when there is no NIC or the cpuset is empty.
pub fn choose_nic(
    inv: &Inventory,
    cpus: &IndexSet,
    local_rank: u32,
) -> Result<Choice, ChoiceError> {
    if cpus.is_empty() {
        return Err(ChoiceError::EmptyCpuset);
    }
    let mut ranked: Vec<(&Nic, Proximity)> = inv
        .nics
        .iter()
        .map(|n| (n, proximity(n, cpus, inv)))
        .collect();
    ranked.sort_by_key(|&(n, p)| key(n, p));
    let &(_, best_prox) = ranked.first().ok_or(ChoiceError::NoNic)?;
    let best_key = key(ranked[0].0, best_prox);
    let tied: Vec<&Nic> = ranked
        .iter()
        .take_while(|&&(n, p)| key(n, p) == best_key)
        .map(|&(n, _)| n)
        .collect();
    let nic = tied[local_rank as usize % tied.len()];
    let mut reasons = Vec::new();
    reasons.push(if nic.rdma.capable {
        format!("RDMA-capable ({})", nic.rdma.evidence)
    } else {
        format!("TCP only ({})", nic.rdma.evidence)
    });
    let mut loc = best_prox.describe().to_string();
    if let Some(l) = &nic.locality {
        loc.push_str(&format!(
            " (NIC local to CPUs {}, NUMA node {})",
            l.cpus, l.numa_nodes
        ));
    }
    reasons.push(loc);
    if let Some(s) = nic.link.speed_mbps {
        reasons.push(format!("link {s} Mbit/s"));
    }
    if !nic.link.usable() {
        reasons.push("link is down, but no NIC with a usable link exists".into());
    }
    if nic.kind == NicKind::Loopback {
        reasons.push("loopback: no other usable interface; only this node is reachable".into());
    }
    if tied.len() > 1 {
        let names: Vec<&str> = tied.iter().map(|n| n.name.as_str()).collect();
        reasons.push(format!(
            "tie among {} spread by local rank {local_rank}",
            names.join(", ")
        ));
    }
    for &(other, p) in ranked
        .iter()
        .filter(|(o, _)| !tied.iter().any(|t| t.name == o.name))
        .take(3)
    {
        let why = if nic.rdma.capable && !other.rdma.capable {
            "TCP only"
        } else if other.rdma.capable
            && other.kind != NicKind::Infiniband
            && nic.kind == NicKind::Infiniband
        {
            "RDMA over Ethernet; InfiniBand preferred"
        } else if other.kind == NicKind::Loopback {
            "loopback"
        } else if !other.link.usable() {
            "link down"
        } else if p > best_prox {
            p.describe()
        } else {
            "slower link"
        };
        reasons.push(format!("preferred over {} ({why})", other.name));
    }
    Ok(Choice {
        nic: nic.name.clone(),
        proximity: best_prox,
        remote: best_prox == Proximity::Machine,
        rdma: nic.rdma.capable,
        reasons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Domain, Locality, Machine, Rdma};

    fn set(s: &str) -> IndexSet {
        IndexSet::parse(s).expect("valid set")
    }

    /// Two packages (0-7, 8-15), one NUMA node each.
    fn machine() -> Machine {
        let halves = || {
            vec![
                Domain {
                    index: 0,
                    cpus: set("0-7"),
                    memory_bytes: None,
                },
                Domain {
                    index: 1,
                    cpus: set("8-15"),
                    memory_bytes: None,
                },
            ]
        };
        Machine {
            cpus: set("0-15"),
            packages: halves(),
            numa_nodes: halves(),
        }
    }

    fn nic(name: &str, kind: NicKind, rdma: bool, pkg: Option<u32>) -> Nic {
        let mut n = Nic::named(name, kind);
        n.rdma = Rdma {
            capable: rdma,
            evidence: if rdma {
                "OpenFabrics device".into()
            } else {
                "none".into()
            },
        };
        n.locality = pkg.map(|p| Locality {
            cpus: if p == 0 { set("0-7") } else { set("8-15") },
            numa_nodes: IndexSet::from_iter([p]),
            packages: IndexSet::from_iter([p]),
        });
        n
    }

    fn inv(nics: Vec<Nic>) -> Inventory {
        Inventory {
            schema: crate::SCHEMA.into(),
            hostname: "h".into(),
            topology: "test".into(),
            providers_known: false,
            machine: machine(),
            nics,
            node_local_providers: Vec::new(),
        }
    }

    #[test]
    fn each_package_picks_its_own_rdma_nic() {
        let i = inv(vec![
            nic("eth0", NicKind::Ethernet, false, Some(0)),
            nic("ib0", NicKind::Infiniband, true, Some(0)),
            nic("ib1", NicKind::Infiniband, true, Some(1)),
            nic("lo", NicKind::Loopback, false, None),
        ]);
        let c0 = choose_nic(&i, &set("0-3"), 0).expect("choice");
        assert_eq!(
            (c0.nic.as_str(), c0.proximity, c0.remote),
            ("ib0", Proximity::Local, false)
        );
        let c1 = choose_nic(&i, &set("8-11"), 0).expect("choice");
        assert_eq!((c1.nic.as_str(), c1.proximity), ("ib1", Proximity::Local));
        assert!(
            c1.reasons.iter().any(|r| r.contains("preferred over ib0")),
            "{:?}",
            c1.reasons
        );
        let span = choose_nic(&i, &set("6-9"), 0).expect("choice");
        assert_eq!(span.proximity, Proximity::Partial);
    }

    #[test]
    fn a_remote_rdma_nic_beats_a_local_tcp_nic() {
        let i = inv(vec![
            nic("eth0", NicKind::Ethernet, false, Some(1)),
            nic("ib0", NicKind::Infiniband, true, Some(0)),
        ]);
        let c = choose_nic(&i, &set("8-15"), 0).expect("choice");
        assert_eq!((c.nic.as_str(), c.remote, c.rdma), ("ib0", true, true));
        assert!(
            c.reasons.iter().any(|r| r.contains("remote")),
            "{:?}",
            c.reasons
        );
        assert!(
            c.reasons
                .iter()
                .any(|r| r == "preferred over eth0 (TCP only)"),
            "{:?}",
            c.reasons
        );
    }

    #[test]
    fn ties_spread_by_local_rank_and_down_links_lose() {
        let mut i = inv(vec![
            nic("ib0", NicKind::Infiniband, true, Some(0)),
            nic("ib1", NicKind::Infiniband, true, Some(0)),
        ]);
        assert_eq!(choose_nic(&i, &set("0"), 0).expect("choice").nic, "ib0");
        assert_eq!(choose_nic(&i, &set("0"), 1).expect("choice").nic, "ib1");
        assert_eq!(choose_nic(&i, &set("0"), 2).expect("choice").nic, "ib0");
        i.nics[0].link.state = Some("down".into());
        assert_eq!(choose_nic(&i, &set("0"), 0).expect("choice").nic, "ib1");
        assert_eq!(choose_nic(&i, &set("0"), 1).expect("choice").nic, "ib1");
    }

    #[test]
    fn loopback_only_as_last_resort_and_errors() {
        let i = inv(vec![
            nic("lo", NicKind::Loopback, false, None),
            nic("eth0", NicKind::Ethernet, false, None),
        ]);
        assert_eq!(choose_nic(&i, &set("0"), 0).expect("choice").nic, "eth0");
        let only_lo = inv(vec![nic("lo", NicKind::Loopback, false, None)]);
        let c = choose_nic(&only_lo, &set("0"), 0).expect("choice");
        assert!(c.reasons.iter().any(|r| r.starts_with("loopback")));
        assert_eq!(
            choose_nic(&inv(vec![]), &set("0"), 0),
            Err(ChoiceError::NoNic)
        );
        assert_eq!(
            choose_nic(&only_lo, &IndexSet::new(), 0),
            Err(ChoiceError::EmptyCpuset)
        );
    }
}
