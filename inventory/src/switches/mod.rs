//! The fabric beyond the node (issue #54): its switches, the links between them and the
//! hosts, the hop distances between hosts and the leaf groups (the hosts under one
//! switch), as a [`Topology`] built from what describes the fabric: an `ibnetdiscover`
//! dump of an InfiniBand fabric ([`ibnet`]) or the `topology.conf` a Slurm site keeps
//! ([`slurm`]), which it also renders for Slurm's `topology/tree`. Pure logic: the
//! descriptions are text the caller read.

pub mod hostlist;
pub mod ibnet;
pub mod slurm;

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// Why a fabric description could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DescriptionError {
    /// A `topology.conf` that is not one.
    #[error("{0}")]
    Slurm(#[from] slurm::TopologyConfError),
    /// An `ibnetdiscover` dump that is not one.
    #[error("{0}")]
    Ibnet(#[from] ibnet::IbnetError),
    /// Text that is neither.
    #[error(
        "neither a Slurm topology.conf (SwitchName= lines) nor an ibnetdiscover dump (Switch and Ca records): give one of them"
    )]
    Unknown,
}

/// The topology a fabric description `text` gives: a Slurm `topology.conf` (it has
/// `SwitchName=` lines) or an `ibnetdiscover` dump (`Switch`/`Ca` records).
///
/// # Errors
/// [`DescriptionError`]: what is wrong, and where.
pub fn read(text: &str) -> Result<Topology, DescriptionError> {
    let words = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty());
    for line in words {
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("switchname=") {
            return Ok(slurm::parse(text)?);
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if matches!(first, "Switch" | "Ca" | "Rt") {
            return Ok(ibnet::parse(text)?);
        }
    }
    Err(DescriptionError::Unknown)
}

/// A fabric's switches, hosts and the links between them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// The switches, each once.
    pub switches: Vec<Switch>,
    /// The hosts (an InfiniBand channel adapter's node, a Slurm node), each once.
    pub hosts: Vec<Host>,
    /// The links, each once (two links between the same two ports are one; parallel links
    /// between two switches through different ports are several).
    pub links: Vec<Link>,
}

/// A switch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    /// Its name: the node description an InfiniBand switch gives, or `topology.conf`'s.
    pub name: String,
    /// Its node GUID, where the description has one.
    pub guid: Option<u64>,
}

/// A host attached to the fabric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Its name: the host name (an InfiniBand adapter's node description's first word).
    pub name: String,
    /// Its adapter's node GUID, where the description has one.
    pub guid: Option<u64>,
}

/// One end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum End {
    /// The switch of this index in [`Topology::switches`].
    Switch(usize),
    /// The host of this index in [`Topology::hosts`].
    Host(usize),
}

/// A link between two ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Its ends.
    pub ends: [End; 2],
    /// The port numbers at each end, where the description has them.
    pub ports: Option<[u8; 2]>,
    /// Its width and speed as the description says (`4xHDR`), if it does.
    pub rate: Option<String>,
}

/// The hop distance between every two hosts: links on the shortest path (0 for a host
/// and itself, 2 under one switch); `None` where no path joins them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hops {
    /// The hosts, in the topology's order.
    pub hosts: Vec<String>,
    /// `hops[i][j]`: from host `i` to host `j`.
    pub hops: Vec<Vec<Option<u32>>>,
}

/// A leaf switch and the hosts linked to it: what Slurm places a job under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// The switch.
    pub switch: String,
    /// Its hosts, in the topology's order.
    pub hosts: Vec<String>,
}

impl Topology {
    /// The switch named `name`, added when new.
    pub fn switch(&mut self, name: &str, guid: Option<u64>) -> usize {
        match self.switches.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                self.switches.push(Switch {
                    name: name.to_string(),
                    guid,
                });
                self.switches.len() - 1
            }
        }
    }

    /// The host named `name`, added when new.
    pub fn host(&mut self, name: &str, guid: Option<u64>) -> usize {
        match self.hosts.iter().position(|h| h.name == name) {
            Some(i) => i,
            None => {
                self.hosts.push(Host {
                    name: name.to_string(),
                    guid,
                });
                self.hosts.len() - 1
            }
        }
    }

    /// Adds the link between `a` and `b` (through `ports`, when known) unless the same
    /// link is there already (a description names each link from both ends).
    pub fn link(&mut self, a: End, b: End, ports: Option<[u8; 2]>, rate: Option<String>) {
        let key = |ends: [End; 2], ports: Option<[u8; 2]>| {
            let (x, y) = (
                (ends[0], ports.map(|p| p[0])),
                (ends[1], ports.map(|p| p[1])),
            );
            if x <= y { (x, y) } else { (y, x) }
        };
        let new = key([a, b], ports);
        if self.links.iter().any(|l| key(l.ends, l.ports) == new) {
            return;
        }
        self.links.push(Link {
            ends: [a, b],
            ports,
            rate,
        });
    }

    /// Each end's neighbours (once each, however many links join them).
    fn neighbours(&self) -> HashMap<End, Vec<End>> {
        let mut n: HashMap<End, Vec<End>> = HashMap::new();
        for l in &self.links {
            let [a, b] = l.ends;
            for (x, y) in [(a, b), (b, a)] {
                let list = n.entry(x).or_default();
                if !list.contains(&y) {
                    list.push(y);
                }
            }
        }
        n
    }

    /// The hop distances between hosts (breadth first from each host).
    pub fn hops(&self) -> Hops {
        let neighbours = self.neighbours();
        let hops = (0..self.hosts.len())
            .map(|h| {
                let dist = distances(&neighbours, End::Host(h));
                (0..self.hosts.len())
                    .map(|o| dist.get(&End::Host(o)).copied())
                    .collect()
            })
            .collect();
        Hops {
            hosts: self.hosts.iter().map(|h| h.name.clone()).collect(),
            hops,
        }
    }

    /// The leaf switches (those with hosts linked to them) and their hosts, in the
    /// topology's order.
    pub fn leaves(&self) -> Vec<Group> {
        let neighbours = self.neighbours();
        (0..self.switches.len())
            .filter_map(|s| {
                let mut hosts: Vec<usize> = (neighbours.get(&End::Switch(s))?.iter())
                    .filter_map(|e| match e {
                        End::Host(h) => Some(*h),
                        End::Switch(_) => None,
                    })
                    .collect();
                hosts.sort_unstable();
                (!hosts.is_empty()).then(|| Group {
                    switch: self.switches[s].name.clone(),
                    hosts: hosts.iter().map(|&h| self.hosts[h].name.clone()).collect(),
                })
            })
            .collect()
    }

    /// Each switch's level: 1 for a leaf, one more than its lowest neighbouring switch's
    /// above (breadth first from the leaves); `None` for a switch no leaf reaches.
    fn levels(&self) -> Vec<Option<u32>> {
        let neighbours = self.neighbours();
        let mut level = vec![None; self.switches.len()];
        let mut queue = VecDeque::new();
        for (s, l) in level.iter_mut().enumerate() {
            let leaf = (neighbours.get(&End::Switch(s)).into_iter().flatten())
                .any(|e| matches!(e, End::Host(_)));
            if leaf {
                *l = Some(1);
                queue.push_back(s);
            }
        }
        while let Some(s) = queue.pop_front() {
            let next = level[s].map(|l| l + 1);
            for e in neighbours.get(&End::Switch(s)).into_iter().flatten() {
                if let End::Switch(o) = *e
                    && level[o].is_none()
                {
                    level[o] = next;
                    queue.push_back(o);
                }
            }
        }
        level
    }
}

/// `t` for people: its size, each leaf switch's hosts, the switches above them, and the
/// hops between hosts (as a matrix up to 16 hosts, else as counts per distance).
pub fn describe(t: &Topology) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} switches, {} hosts, {} links",
        t.switches.len(),
        t.hosts.len(),
        t.links.len()
    );
    let leaves = t.leaves();
    for g in &leaves {
        let _ = writeln!(
            s,
            "leaf {}: {} hosts: {}",
            g.switch,
            g.hosts.len(),
            hostlist::compress(&g.hosts)
        );
    }
    let levels = t.levels();
    for (i, sw) in t.switches.iter().enumerate() {
        if let Some(l) = levels[i].filter(|l| *l > 1) {
            let _ = writeln!(s, "level {l} switch {}", sw.name);
        }
    }
    let hops = t.hops();
    if hops.hosts.len() <= 16 {
        let width = hops.hosts.iter().map(String::len).max().unwrap_or(0).max(4);
        let _ = write!(s, "{:width$}", "hops");
        for h in &hops.hosts {
            let _ = write!(s, " {h:>width$}");
        }
        let _ = writeln!(s);
        for (h, row) in hops.hosts.iter().zip(&hops.hops) {
            let _ = write!(s, "{h:width$}");
            for d in row {
                let d = d.map_or_else(|| "-".to_string(), |d| d.to_string());
                let _ = write!(s, " {d:>width$}");
            }
            let _ = writeln!(s);
        }
    } else {
        let mut counts: std::collections::BTreeMap<Option<u32>, usize> = Default::default();
        for (i, row) in hops.hops.iter().enumerate() {
            for d in &row[i + 1..] {
                *counts.entry(*d).or_default() += 1;
            }
        }
        for (d, n) in counts {
            match d {
                Some(d) => {
                    let _ = writeln!(s, "{n} pairs of hosts {d} hops apart");
                }
                None => {
                    let _ = writeln!(s, "{n} pairs of hosts with no path between them");
                }
            }
        }
    }
    s
}

/// Hops from `from` to every end it reaches.
fn distances(neighbours: &HashMap<End, Vec<End>>, from: End) -> HashMap<End, u32> {
    let mut dist = HashMap::from([(from, 0)]);
    let mut queue = VecDeque::from([from]);
    while let Some(e) = queue.pop_front() {
        let d = dist[&e];
        for n in neighbours.get(&e).into_iter().flatten() {
            if !dist.contains_key(n) {
                dist.insert(*n, d + 1);
                // Paths go through switches: a host is an end, not a way through.
                if matches!(n, End::Switch(_)) {
                    queue.push_back(*n);
                }
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two leaves of two hosts each under one spine.
    fn small_tree() -> Topology {
        let mut t = Topology::default();
        let spine = t.switch("spine", None);
        for (leaf, hosts) in [("leaf1", ["a", "b"]), ("leaf2", ["c", "d"])] {
            let l = t.switch(leaf, None);
            t.link(End::Switch(spine), End::Switch(l), None, None);
            for h in hosts {
                let h = t.host(h, None);
                t.link(End::Switch(l), End::Host(h), None, None);
            }
        }
        t
    }

    #[test]
    fn hops_count_the_links_between_hosts() {
        let hops = small_tree().hops();
        assert_eq!(hops.hosts, ["a", "b", "c", "d"]);
        assert_eq!(hops.hops[0], [Some(0), Some(2), Some(4), Some(4)]);
        assert_eq!(hops.hops[3], [Some(4), Some(4), Some(2), Some(0)]);
    }

    #[test]
    fn a_link_named_from_both_ends_is_one_and_a_host_is_no_way_through() {
        let mut t = Topology::default();
        let (s1, s2) = (t.switch("s1", None), t.switch("s2", None));
        let h = t.host("h", None);
        let g = t.host("g", None);
        t.link(End::Switch(s1), End::Host(h), Some([1, 1]), None);
        t.link(End::Host(h), End::Switch(s1), Some([1, 1]), None);
        // A host with two ports on two switches does not join them.
        t.link(End::Switch(s2), End::Host(h), Some([1, 2]), None);
        t.link(End::Switch(s2), End::Host(g), Some([2, 1]), None);
        assert_eq!(t.links.len(), 3);
        let hops = t.hops();
        assert_eq!(hops.hops[0][1], Some(2), "h and g share s2");
        assert_eq!(t.levels(), [Some(1), Some(1)]);
    }

    #[test]
    fn leaves_are_the_switches_with_hosts() {
        let t = small_tree();
        let leaves = t.leaves();
        assert_eq!(leaves.len(), 2);
        assert_eq!(leaves[0].switch, "leaf1");
        assert_eq!(leaves[1].hosts, ["c", "d"]);
        assert_eq!(t.levels(), [Some(2), Some(1), Some(1)]);
    }

    #[test]
    fn hosts_on_separate_fabrics_have_no_distance() {
        let mut t = Topology::default();
        for (s, h) in [("s1", "a"), ("s2", "b")] {
            let s = t.switch(s, None);
            let h = t.host(h, None);
            t.link(End::Switch(s), End::Host(h), None, None);
        }
        assert_eq!(t.hops().hops[0], [Some(0), None]);
    }
}
