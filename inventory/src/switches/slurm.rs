//! Slurm's `topology.conf` (the `topology/tree` plugin): read into a [`Topology`] where
//! the site describes its fabric so (Ethernet, a cluster the nodes cannot see the fabric
//! of), and written from one for Slurm to place jobs by leaf switch.
//!
//! ```text
//! SwitchName=leaf1 Nodes=n[1-4]
//! SwitchName=leaf2 Nodes=n[5-8]
//! SwitchName=spine Switches=leaf[1-2]
//! ```

use std::fmt::Write;

use super::hostlist::{self, HostListError};
use super::{End, Topology};

/// Most lines of a `topology.conf` read (the file is a site's, but bounded all the same).
pub const MAX_LINES: usize = 100_000;

/// Why a `topology.conf` is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyConfError {
    /// A line that is not `SwitchName=NAME` with `Switches=`, `Nodes=` and `LinkSpeed=`.
    #[error("topology.conf line {line}: {why}")]
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong and what to write instead.
        why: String,
    },
    /// A host list that does not expand.
    #[error("topology.conf line {line}: {error}")]
    HostList {
        /// Its number, from 1.
        line: usize,
        /// Why.
        error: HostListError,
    },
    /// A switch listed under `Switches=` that no line defines.
    #[error("topology.conf: switch {child:?} under {parent:?} has no SwitchName= line of its own")]
    Undefined {
        /// The switch that lists it.
        parent: String,
        /// The switch without a line.
        child: String,
    },
    /// More than [`MAX_LINES`] lines.
    #[error("topology.conf has more than {MAX_LINES} lines")]
    TooLong,
}

/// The topology `text` (a `topology.conf`) describes: every switch, its nodes as hosts
/// and its child switches, each linked to it.
///
/// # Errors
/// [`TopologyConfError`] naming the line and what is wrong.
pub fn parse(text: &str) -> Result<Topology, TopologyConfError> {
    let mut t = Topology::default();
    // (line, parent, children): resolved once every switch is known.
    let mut children: Vec<(usize, String, Vec<String>)> = Vec::new();
    let mut defined: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if line > MAX_LINES {
            return Err(TopologyConfError::TooLong);
        }
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let bad = |why: String| TopologyConfError::Line { line, why };
        let (mut name, mut nodes, mut switches) = (None, None, None);
        for word in content.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| bad(format!("{word:?} is no KEY=VALUE")))?;
            match key.to_ascii_lowercase().as_str() {
                "switchname" => name = Some(value),
                "nodes" => nodes = Some(value),
                "switches" => switches = Some(value),
                "linkspeed" => {}
                _ => {
                    return Err(bad(format!(
                        "{key} is no key of topology.conf (SwitchName, Switches, Nodes, LinkSpeed)"
                    )));
                }
            }
        }
        let name = name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("a line without SwitchName=NAME".into()))?;
        if defined.iter().any(|d| d == name) {
            return Err(bad(format!("switch {name:?} is defined twice")));
        }
        defined.push(name.to_string());
        let s = t.switch(name, None);
        let expand = |list: &str| {
            hostlist::expand(list).map_err(|error| TopologyConfError::HostList { line, error })
        };
        if let Some(nodes) = nodes {
            for host in expand(nodes)? {
                let h = t.host(&host, None);
                t.link(End::Switch(s), End::Host(h), None, None);
            }
        }
        if let Some(list) = switches {
            children.push((line, name.to_string(), expand(list)?));
        }
    }
    for (_, parent, names) in children {
        let p = t.switch(&parent, None);
        for child in names {
            if !defined.contains(&child) {
                return Err(TopologyConfError::Undefined { parent, child });
            }
            let c = t.switch(&child, None);
            t.link(End::Switch(p), End::Switch(c), None, None);
        }
    }
    Ok(t)
}

/// `t` as a `topology.conf`: each leaf switch with its hosts, each switch above with the
/// switches one level below it linked to it (its level: [`Topology::levels`]); where the
/// fabric is one but its top is several switches (the spines of a fat tree, two leaves
/// linked to each other), a switch named `fabric` above them, so that Slurm sees one tree
/// and places a job across all of it when it must. Switches no leaf reaches are left out,
/// saying so.
pub fn render(t: &Topology) -> String {
    let mut s = String::new();
    let levels = t.levels();
    let neighbours = t.neighbours();
    let mut tops = Vec::new();
    for (i, sw) in t.switches.iter().enumerate() {
        let Some(level) = levels[i] else {
            let _ = writeln!(s, "# {} reaches no host: left out", sw.name);
            continue;
        };
        let near = neighbours.of(End::Switch(i));
        let hosts: Vec<&str> = (t.hosts.iter().enumerate())
            .filter(|(h, _)| near.contains(&End::Host(*h)))
            .map(|(_, h)| h.name.as_str())
            .collect();
        let below: Vec<&str> = near
            .iter()
            .filter_map(|e| match *e {
                End::Switch(o) if levels[o].is_some_and(|l| l < level) => {
                    Some(t.switches[o].name.as_str())
                }
                _ => None,
            })
            .collect();
        let above = near
            .iter()
            .any(|e| matches!(*e, End::Switch(o) if levels[o].is_some_and(|l| l > level)));
        if !above {
            tops.push(sw.name.as_str());
        }
        let mut line = format!("SwitchName={}", sw.name);
        if !below.is_empty() {
            let _ = write!(line, " Switches={}", hostlist::compress(&below));
        }
        if !hosts.is_empty() {
            let _ = write!(line, " Nodes={}", hostlist::compress(&hosts));
        }
        let _ = writeln!(s, "{line}");
    }
    if tops.len() > 1 && connected(t) {
        let _ = writeln!(
            s,
            "# no one switch is above {}: one above them all, for Slurm's one tree",
            tops.join(", ")
        );
        let _ = writeln!(
            s,
            "SwitchName=fabric Switches={}",
            hostlist::compress(&tops)
        );
    }
    s
}

/// Whether every host reaches every other.
fn connected(t: &Topology) -> bool {
    t.hops().hops.iter().flatten().all(Option::is_some)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAT: &str = "# a small fat tree\n\
        SwitchName=leaf1 Nodes=n[1-4]\n\
        SwitchName=leaf2 Nodes=n[5-8] LinkSpeed=100\n\
        switchname=spine1 switches=leaf[1-2]\n\
        SwitchName=spine2 Switches=leaf[1-2]\n";

    #[test]
    fn a_topology_conf_reads_into_switches_hosts_and_links() {
        let t = parse(FAT).expect("parses");
        assert_eq!(t.switches.len(), 4);
        assert_eq!(t.hosts.len(), 8);
        assert_eq!(t.links.len(), 8 + 4);
        let hops = t.hops();
        assert_eq!(hops.hops[0][1], Some(2));
        assert_eq!(hops.hops[0][7], Some(4));
        let leaves = t.leaves();
        assert_eq!(leaves[1].switch, "leaf2");
        assert_eq!(leaves[1].hosts, ["n5", "n6", "n7", "n8"]);
    }

    #[test]
    fn rendered_and_read_again_it_is_the_same_fabric() {
        let t = parse(FAT).expect("parses");
        let text = render(&t);
        assert_eq!(
            text,
            "SwitchName=leaf1 Nodes=n[1-4]\n\
             SwitchName=leaf2 Nodes=n[5-8]\n\
             SwitchName=spine1 Switches=leaf[1-2]\n\
             SwitchName=spine2 Switches=leaf[1-2]\n\
             # no one switch is above spine1, spine2: one above them all, for Slurm's one tree\n\
             SwitchName=fabric Switches=spine[1-2]\n"
        );
        let again = parse(&text).expect("parses again");
        assert_eq!(again.hops(), t.hops());
        assert_eq!(again.leaves(), t.leaves());
    }

    #[test]
    fn leaves_linked_to_each_other_get_one_switch_above_them() {
        let mut t = Topology::default();
        let (a, b) = (t.switch("sw1", None), t.switch("sw2", None));
        t.link(End::Switch(a), End::Switch(b), Some([3, 3]), None);
        for (s, h) in [(a, "h1"), (b, "h2")] {
            let h = t.host(h, None);
            t.link(End::Switch(s), End::Host(h), None, None);
        }
        let text = render(&t);
        assert!(
            text.ends_with("SwitchName=fabric Switches=sw[1-2]\n"),
            "{text}"
        );
        let again = parse(&text).expect("parses");
        assert_eq!(again.hops().hops[0][1], Some(4), "through the added top");
    }

    #[test]
    fn a_fabric_of_two_thousand_hosts_is_read_and_measured() {
        let mut text = String::new();
        for l in 1..=64 {
            let first = (l - 1) * 32 + 1;
            text += &format!("SwitchName=leaf{l} Nodes=n[{first}-{}]\n", first + 31);
        }
        for s in 1..=4 {
            text += &format!("SwitchName=spine{s} Switches=leaf[1-64]\n");
        }
        let t = parse(&text).expect("parses");
        assert_eq!((t.switches.len(), t.hosts.len()), (68, 2048));
        let counts = t.hop_counts();
        // Under one leaf: 64 x C(32, 2) pairs, 2 hops; the rest through a spine, 4.
        assert_eq!(counts.get(&Some(2)), Some(&(64 * 32 * 31 / 2)));
        assert_eq!(
            counts.get(&Some(4)),
            Some(&(2048 * 2047 / 2 - 64 * 32 * 31 / 2))
        );
        let again = parse(&render(&t)).expect("rendered, read again");
        assert_eq!(again.leaves(), t.leaves());
    }

    #[test]
    fn a_bad_topology_conf_says_which_line_and_why() {
        let cases = [
            ("SwitchName=a Nodes=n[1-2\n", "line 1"),
            ("\nNodes=n1\n", "line 2: a line without SwitchName"),
            ("SwitchName=a Hosts=n1\n", "Hosts is no key"),
            ("SwitchName=a Nodes\n", "\"Nodes\" is no KEY=VALUE"),
            ("SwitchName=a\nSwitchName=a\n", "defined twice"),
            ("SwitchName=top Switches=x\n", "switch \"x\" under \"top\""),
        ];
        for (text, says) in cases {
            let e = parse(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let long = "# x\n".repeat(MAX_LINES + 1);
        assert_eq!(parse(&long), Err(TopologyConfError::TooLong));
    }
}
