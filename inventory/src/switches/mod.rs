//! The fabric beyond the node (issue #54): its switches, the links between them and the
//! hosts, the hop distances between hosts and the leaf groups (the hosts under one
//! switch), as a [`Topology`] built from what describes the fabric: an `ibnetdiscover`
//! dump of an InfiniBand fabric ([`ibnet`]) or the `topology.conf` a Slurm site keeps
//! ([`slurm`]), which it also renders for Slurm's `topology/tree`, or discovered from this
//! node on InfiniBand ([`discover`], libibnetdisc). Apart from [`discover`], pure logic:
//! the descriptions are text the caller read.

pub mod discover;
pub mod hostlist;
pub mod ibnet;
pub mod slurm;
pub mod spread;
pub mod watch;

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::InventoryError;

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
        "neither a Slurm topology.conf (SwitchName= lines), an ibnetdiscover dump (Switch and Ca records) nor maestro inventory's JSON: give one of them"
    )]
    Unknown,
    /// JSON that is not the topology `maestro inventory --fabric ... --json` prints.
    #[error(
        "not maestro inventory's fabric JSON ({0}): give what `maestro inventory --fabric FILE --json` or `--discover-fabric --json` printed"
    )]
    Json(String),
}

/// The topology in maestro inventory's JSON (`{"topology": {...}, ...}`), checked: every
/// link's ends exist.
fn from_json(text: &str) -> Result<Topology, DescriptionError> {
    #[derive(Deserialize)]
    struct Doc {
        topology: Topology,
    }
    let doc: Doc = serde_json::from_str(text).map_err(|e| DescriptionError::Json(e.to_string()))?;
    let t = doc.topology;
    for (i, l) in t.links.iter().enumerate() {
        for e in l.ends {
            let there = match e {
                End::Switch(s) => s < t.switches.len(),
                End::Host(h) => h < t.hosts.len(),
            };
            if !there {
                return Err(DescriptionError::Json(format!(
                    "link {i} names {e:?}, which the topology does not have"
                )));
            }
        }
    }
    Ok(t)
}

/// Where a fabric's topology comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A description the site keeps: a Slurm `topology.conf`, an `ibnetdiscover` dump, or
    /// the JSON `maestro inventory --fabric ... --json` printed.
    File(PathBuf),
    /// Discovered from this node on InfiniBand ([`discover`]).
    Discover(discover::Discovery),
}

impl Source {
    /// The topology, read or discovered now (again each time: a file the site updated, a
    /// fabric whose links changed).
    ///
    /// # Errors
    /// [`InventoryError::Description`] naming the file and what is wrong in it;
    /// [`InventoryError::Discover`] when discovery fails.
    pub fn load(&self) -> Result<Topology, InventoryError> {
        match self {
            Source::File(path) => read_file(path),
            Source::Discover(how) => Ok(discover::discover(how)?.topology),
        }
    }

    /// Where the topology comes from, for people and as `PMIX_FABRIC_IDENTIFIER`
    /// (`file:/etc/slurm/topology.conf`, `infiniband:mlx5_0`).
    pub fn identifier(&self) -> String {
        match self {
            Source::File(path) => format!("file:{}", path.display()),
            Source::Discover(how) => format!(
                "infiniband:{}",
                how.ca.as_deref().unwrap_or("first-active-port")
            ),
        }
    }
}

/// Most bytes of a fabric description read: `ibnetdiscover` of a large fabric is tens of
/// MB.
pub const MAX_DESCRIPTION: u64 = 256 << 20;

/// The topology the fabric description in the file at `path` gives (see [`read`]).
///
/// # Errors
/// [`InventoryError::Description`] naming the file and what is wrong in it.
pub fn read_file(path: &Path) -> Result<Topology, InventoryError> {
    let bad = |why: String| InventoryError::Description {
        path: path.to_path_buf(),
        why,
    };
    // A site's file (another user's, as Slurm's is), read up to a bound.
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| {
            std::io::Read::read_to_string(
                &mut std::io::Read::take(f, MAX_DESCRIPTION + 1),
                &mut text,
            )
        })
        .map_err(|e| bad(e.to_string()))?;
    if text.len() as u64 > MAX_DESCRIPTION {
        return Err(bad(format!(
            "larger than {} MiB: not a fabric description",
            MAX_DESCRIPTION >> 20
        )));
    }
    read(&text).map_err(|e| bad(e.to_string()))
}

/// The topology a fabric description `text` gives: a Slurm `topology.conf` (it has
/// `SwitchName=` lines), an `ibnetdiscover` dump (`Switch`/`Ca` records), or the JSON of
/// `maestro inventory --fabric ... --json` (an object with a `topology`).
///
/// # Errors
/// [`DescriptionError`]: what is wrong, and where.
pub fn read(text: &str) -> Result<Topology, DescriptionError> {
    if text.trim_start().starts_with('{') {
        return from_json(text);
    }
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
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Topology {
    /// The switches, each once.
    pub switches: Vec<Node>,
    /// The hosts (an InfiniBand channel adapter's node, a Slurm node), each once.
    pub hosts: Vec<Node>,
    /// The links, each once (two links between the same two ports are one; parallel links
    /// between two switches through different ports are several).
    pub links: Vec<Link>,
    /// Where each switch and host is in its list, by name, and the links there are:
    /// descriptions of large fabrics are read in time linear in their size.
    #[serde(skip)]
    index: Index,
}

/// The lookups of a [`Topology`] (made again when its lists changed without them, as
/// after deserializing).
#[derive(Clone, Debug, Default)]
struct Index {
    switches: HashMap<String, usize>,
    hosts: HashMap<String, usize>,
    links: std::collections::HashSet<LinkKey>,
}

/// A link's two ends with their ports, in order: the same link named from either end.
type LinkKey = ((End, Option<u8>), (End, Option<u8>));

impl PartialEq for Topology {
    fn eq(&self, other: &Topology) -> bool {
        (&self.switches, &self.hosts, &self.links) == (&other.switches, &other.hosts, &other.links)
    }
}

impl Eq for Topology {}

/// A switch or a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Its name: a switch's node description (or `topology.conf`'s name), a host's name
    /// (an InfiniBand adapter's node description's first word).
    pub name: String,
    /// Its node GUID, where the description has one.
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
        self.reindex();
        named(&mut self.switches, &mut self.index.switches, name, guid)
    }

    /// The host named `name`, added when new.
    pub fn host(&mut self, name: &str, guid: Option<u64>) -> usize {
        self.reindex();
        named(&mut self.hosts, &mut self.index.hosts, name, guid)
    }

    /// Adds the link between `a` and `b` (through `ports`, when known) unless the same
    /// link is there already (a description names each link from both ends).
    pub fn link(&mut self, a: End, b: End, ports: Option<[u8; 2]>, rate: Option<String>) {
        self.reindex();
        if self.index.links.insert(link_key([a, b], ports)) {
            self.links.push(Link {
                ends: [a, b],
                ports,
                rate,
            });
        }
    }

    /// Makes the lookups again when the lists were changed without them.
    fn reindex(&mut self) {
        let i = &self.index;
        if i.switches.len() == self.switches.len()
            && i.hosts.len() == self.hosts.len()
            && i.links.len() == self.links.len()
        {
            return;
        }
        let names = |list: &[Node]| {
            (list.iter().enumerate())
                .map(|(n, x)| (x.name.clone(), n))
                .collect()
        };
        self.index = Index {
            switches: names(&self.switches),
            hosts: names(&self.hosts),
            links: (self.links.iter())
                .map(|l| link_key(l.ends, l.ports))
                .collect(),
        };
    }

    /// Each end's neighbours (once each, however many links join them).
    fn neighbours(&self) -> Graph {
        let mut g = Graph {
            switches: self.switches.len(),
            adjacent: vec![Vec::new(); self.switches.len() + self.hosts.len()],
        };
        for l in &self.links {
            let [a, b] = l.ends;
            for (x, y) in [(a, b), (b, a)] {
                let slot = g.slot(x);
                let list = &mut g.adjacent[slot];
                if !list.contains(&y) {
                    list.push(y);
                }
            }
        }
        g
    }

    /// The hop distances between hosts (breadth first from each host).
    pub fn hops(&self) -> Hops {
        let all: Vec<usize> = (0..self.hosts.len()).collect();
        self.hops_among(&all)
    }

    /// The hop distances between the hosts of these indices (a job's nodes, say: the
    /// matrix of a whole large fabric is its host count squared).
    pub fn hops_among(&self, hosts: &[usize]) -> Hops {
        let neighbours = self.neighbours();
        let hops = hosts
            .iter()
            .map(|&h| {
                let dist = distances(&neighbours, End::Host(h));
                (hosts.iter())
                    .map(|o| dist[neighbours.slot(End::Host(*o))])
                    .collect()
            })
            .collect();
        Hops {
            hosts: hosts.iter().map(|&h| self.hosts[h].name.clone()).collect(),
            hops,
        }
    }

    /// The hosts and the hops between them as a cost matrix (row by row, `u16::MAX` where
    /// no path joins two), with `cut_off` after them: hosts the fabric had and no longer
    /// reaches, with no path to any other.
    pub fn cost_matrix(&self, cut_off: &[String]) -> (Vec<String>, Vec<u16>) {
        let hops = self.hops();
        let n = hops.hosts.len() + cut_off.len();
        let cost =
            |h: &Option<u32>| h.map_or(u16::MAX, |h| u16::try_from(h).unwrap_or(u16::MAX - 1));
        let mut costs = Vec::with_capacity(n * n);
        for row in &hops.hops {
            costs.extend(row.iter().map(cost));
            costs.extend(std::iter::repeat_n(u16::MAX, cut_off.len()));
        }
        for i in 0..cut_off.len() {
            let me = hops.hosts.len() + i;
            costs.extend((0..n).map(|j| if j == me { 0 } else { u16::MAX }));
        }
        let mut hosts = hops.hosts;
        hosts.extend(cut_off.iter().cloned());
        (hosts, costs)
    }

    /// How many pairs of hosts are how many hops apart (`None`: no path), without the
    /// matrix.
    pub fn hop_counts(&self) -> std::collections::BTreeMap<Option<u32>, usize> {
        let neighbours = self.neighbours();
        let mut counts = std::collections::BTreeMap::new();
        for h in 0..self.hosts.len() {
            let dist = distances(&neighbours, End::Host(h));
            for o in h + 1..self.hosts.len() {
                *counts
                    .entry(dist[neighbours.slot(End::Host(o))])
                    .or_default() += 1;
            }
        }
        counts
    }

    /// The leaf switches (those with hosts linked to them) and their hosts, in the
    /// topology's order.
    pub fn leaves(&self) -> Vec<Group> {
        let neighbours = self.neighbours();
        (0..self.switches.len())
            .filter_map(|s| {
                let mut hosts: Vec<usize> = (neighbours.of(End::Switch(s)).iter())
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
    pub fn levels(&self) -> Vec<Option<u32>> {
        let neighbours = self.neighbours();
        let mut level = vec![None; self.switches.len()];
        let mut queue = VecDeque::new();
        for (s, l) in level.iter_mut().enumerate() {
            let leaf = (neighbours.of(End::Switch(s)).iter()).any(|e| matches!(e, End::Host(_)));
            if leaf {
                *l = Some(1);
                queue.push_back(s);
            }
        }
        while let Some(s) = queue.pop_front() {
            let next = level[s].map(|l| l + 1);
            for e in neighbours.of(End::Switch(s)) {
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
/// hops between hosts (as a matrix up to 16 hosts, else as how many pairs are how far).
pub fn describe(t: &Topology) -> String {
    let mut s = describe_switches(t);
    if t.hosts.len() <= 16 {
        s += &describe_hops(&t.hops());
    } else {
        s += &describe_counts(&t.hop_counts());
    }
    s
}

/// `t`'s size, each leaf switch's hosts and the switches above them, for people.
pub fn describe_switches(t: &Topology) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} switches, {} hosts, {} links",
        t.switches.len(),
        t.hosts.len(),
        t.links.len()
    );
    for g in &t.leaves() {
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
    s
}

/// `hops` for people: a matrix up to 16 hosts, else how many pairs are how far.
pub fn describe_hops(hops: &Hops) -> String {
    if hops.hosts.len() > 16 {
        let mut counts = std::collections::BTreeMap::new();
        for (i, row) in hops.hops.iter().enumerate() {
            for d in &row[i + 1..] {
                *counts.entry(*d).or_default() += 1;
            }
        }
        return describe_counts(&counts);
    }
    let mut s = String::new();
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
    s
}

/// How many pairs of hosts are how many hops apart, for people.
fn describe_counts(counts: &std::collections::BTreeMap<Option<u32>, usize>) -> String {
    let mut s = String::new();
    for (d, n) in counts {
        let _ = match d {
            Some(d) => writeln!(s, "{n} pairs of hosts {d} hops apart"),
            None => writeln!(s, "{n} pairs of hosts with no path between them"),
        };
    }
    s
}

/// The index of the node named `name` in `list` (its lookup `index`), added when new.
fn named(
    list: &mut Vec<Node>,
    index: &mut HashMap<String, usize>,
    name: &str,
    guid: Option<u64>,
) -> usize {
    if let Some(&i) = index.get(name) {
        return i;
    }
    list.push(Node {
        name: name.to_string(),
        guid,
    });
    index.insert(name.to_string(), list.len() - 1);
    list.len() - 1
}

/// `ends` with their `ports` in order (see [`LinkKey`]).
fn link_key(ends: [End; 2], ports: Option<[u8; 2]>) -> LinkKey {
    let x = (ends[0], ports.map(|p| p[0]));
    let y = (ends[1], ports.map(|p| p[1]));
    if x <= y { (x, y) } else { (y, x) }
}

/// Every end's neighbours, by slot (the switches' first, then the hosts').
pub(crate) struct Graph {
    switches: usize,
    adjacent: Vec<Vec<End>>,
}

impl Graph {
    /// The slot of `e`.
    fn slot(&self, e: End) -> usize {
        match e {
            End::Switch(s) => s,
            End::Host(h) => self.switches + h,
        }
    }

    /// The neighbours of `e`.
    pub(crate) fn of(&self, e: End) -> &[End] {
        &self.adjacent[self.slot(e)]
    }
}

/// Hops from `from` to every end, by slot (`None`: not reached).
fn distances(g: &Graph, from: End) -> Vec<Option<u32>> {
    let mut dist = vec![None; g.adjacent.len()];
    dist[g.slot(from)] = Some(0);
    let mut queue = VecDeque::from([from]);
    while let Some(e) = queue.pop_front() {
        let next = dist[g.slot(e)].map(|d| d + 1);
        for &n in g.of(e) {
            let slot = g.slot(n);
            if dist[slot].is_none() {
                dist[slot] = next;
                // Paths go through switches: a host is an end, not a way through.
                if matches!(n, End::Switch(_)) {
                    queue.push_back(n);
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

    #[test]
    fn the_json_printed_reads_back_and_a_link_to_nowhere_is_refused() {
        let t = small_tree();
        let doc = serde_json::json!({ "topology": &t, "leaves": t.leaves() }).to_string();
        let back = read(&doc).expect("reads back");
        assert_eq!(back, t);
        assert_eq!(back.hops(), t.hops(), "lookups made again");
        let mut broken = t.clone();
        broken.links[0].ends[1] = End::Host(9);
        let doc = serde_json::json!({ "topology": &broken }).to_string();
        let e = read(&doc).expect_err("a link to host 9").to_string();
        assert!(e.contains("link 0 names Host(9)"), "{e}");
        let e = read("{\"switches\": []}")
            .expect_err("no topology")
            .to_string();
        assert!(e.contains("missing field `topology`"), "{e}");
    }
}
