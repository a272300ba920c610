//! Renderings of an inventory: a readable table, and the lines a Slurm admin pastes into
//! `slurm.conf`, `gres.conf` and `topology.conf`.

use std::fmt::Write;

use crate::choose::Choice;
use crate::cpuset::IndexSet;
use crate::model::{Inventory, NicKind};

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

/// The readable table; with `choice`, also the NIC chosen for `cpus` and why.
pub fn table(inv: &Inventory, choice: Option<(&IndexSet, u32, &Choice)>) -> String {
    let mut s = String::new();
    let m = &inv.machine;
    let providers = if inv.providers_known {
        "providers from libfabric"
    } else {
        "providers unknown; RDMA inferred from OpenFabrics devices"
    };
    let _ = writeln!(
        s,
        "node {} ({} topology; {providers})",
        inv.hostname, inv.topology
    );
    let _ = writeln!(
        s,
        "CPUs {} in {} package(s), {} NUMA node(s)\n",
        m.cpus,
        m.packages.len(),
        m.numa_nodes.len()
    );
    let rows: Vec<[String; 9]> = inv.nics.iter().map(nic_row).collect();
    let header = [
        "NIC",
        "KIND",
        "RDMA",
        "STATE",
        "MTU",
        "SPEED",
        "LOCALITY",
        "PCI",
        "PROVIDERS",
    ];
    s.push_str(&aligned(&header, &rows));
    if !inv.node_local_providers.is_empty() {
        let _ = writeln!(
            s,
            "\nwithin the node: {}",
            inv.node_local_providers.join(" ")
        );
    }
    for n in inv
        .nics
        .iter()
        .filter(|n| n.rdma.capable || !inv.providers_known)
    {
        let _ = writeln!(
            s,
            "{}: RDMA {} ({})",
            n.name,
            if n.rdma.capable { "yes" } else { "no" },
            n.rdma.evidence
        );
    }
    if let Some((cpus, rank, c)) = choice {
        let _ = writeln!(
            s,
            "\nchosen NIC for CPUs {cpus} (local rank {rank}): {}",
            c.nic
        );
        for r in &c.reasons {
            let _ = writeln!(s, "  - {r}");
        }
    }
    s
}

/// One NIC's row of [`table`]: name (aliases), kind, RDMA, link state, MTU, speed,
/// locality, PCI address, providers.
fn nic_row(n: &crate::Nic) -> [String; 9] {
    let provs = n.provider_names();
    let name = if n.aliases.is_empty() {
        n.name.clone()
    } else {
        format!("{} ({})", n.name, n.aliases.join(","))
    };
    [
        name,
        format!("{:?}", n.kind).to_lowercase(),
        if n.rdma.capable { "yes" } else { "no" }.to_string(),
        or_dash(n.link.state.clone()),
        or_dash(n.link.mtu.map(|v| v.to_string())),
        or_dash(n.link.speed_mbps.map(|v| format!("{v}Mb/s"))),
        or_dash(
            n.locality
                .as_ref()
                .map(|l| format!("NUMA {} CPUs {}", l.numa_nodes, l.cpus)),
        ),
        or_dash(n.pci.as_ref().map(|p| p.address.clone())),
        if provs.is_empty() {
            "-".to_string()
        } else {
            provs.join(" ")
        },
    ]
}

/// `rows` under `header`, each column as wide as its widest cell.
fn aligned<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut s = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, c) in cells.enumerate() {
            let _ = write!(l, "{c:<w$}  ", w = widths[i]);
        }
        let _ = writeln!(s, "{}", l.trim_end());
    };
    line(&mut header.iter().copied());
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
    s
}

/// Lines for Slurm: node `Features=` naming the fabrics and RDMA NICs, a `Gres=` count of
/// NICs per kind with the matching `gres.conf` lines, and the `topology.conf` switch
/// lines of `fabric` (the fabric beyond the node, from a description: see
/// [`crate::switches`]), or a comment saying there is none.
pub fn slurm(inv: &Inventory, fabric: Option<&crate::switches::Topology>) -> String {
    let mut s = String::new();
    let host = &inv.hostname;
    // Real NICs: PCI devices, or interfaces whose link is usable (not loopback, not
    // virtual devices that are down such as ifb).
    let nics: Vec<_> = inv
        .nics
        .iter()
        .filter(|n| n.kind != NicKind::Loopback && (n.pci.is_some() || n.link.usable()))
        .collect();
    let mut features: Vec<String> = Vec::new();
    let mut push = |f: String| {
        if !features.contains(&f) {
            features.push(f);
        }
    };
    for n in &nics {
        push(format!("fabric_{}", format!("{:?}", n.kind).to_lowercase()));
    }
    if nics.iter().any(|n| n.rdma.capable) {
        push("rdma".into());
    }
    for n in nics.iter().filter(|n| n.rdma.capable) {
        push(format!("nic_{}", n.name));
        for a in &n.aliases {
            push(format!("nic_{a}"));
        }
    }
    let mut counts: Vec<(String, usize)> = Vec::new();
    for n in &nics {
        let k = format!("{:?}", n.kind).to_lowercase();
        match counts.iter_mut().find(|(c, _)| *c == k) {
            Some((_, v)) => *v += 1,
            None => counts.push((k, 1)),
        }
    }
    let _ = writeln!(
        s,
        "# maestro inventory --slurm for {host} ({} topology)",
        inv.topology
    );
    let _ = writeln!(s, "# slurm.conf (add GresTypes=nic):");
    let gres: Vec<String> = counts.iter().map(|(k, c)| format!("nic:{k}:{c}")).collect();
    let _ = writeln!(
        s,
        "NodeName={host} Features={} Gres={}",
        features.join(","),
        gres.join(",")
    );
    let _ = writeln!(s, "# gres.conf:");
    for (k, c) in &counts {
        let _ = writeln!(s, "NodeName={host} Name=nic Type={k} Count={c}");
    }
    let _ = writeln!(s, "# topology.conf:");
    match fabric {
        Some(t) => s.push_str(&crate::switches::slurm::render(t)),
        None => {
            let _ = writeln!(
                s,
                "# no switch information (give the fabric's description: --fabric FILE): nothing to add for {host}"
            );
        }
    }
    s
}
