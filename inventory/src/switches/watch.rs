//! Changes of the fabric beyond the node: the links that went down or came up between two
//! looks at it ([`diff`], pure), and a [`Watch`] that looks again (reads the file again,
//! discovers again) when its driver asks, remembering every host it saw so that a host
//! cut off from the fabric stays known as unreachable rather than unknown.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use super::{End, Source, Topology};
use crate::InventoryError;

/// A link that went down or came up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinkChange {
    /// The link, by its ends' names and ports (`leaf2[3] - spine1[2]`).
    pub link: String,
    /// Up now (true) or down.
    pub up: bool,
}

impl fmt::Display for LinkChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.up { "up" } else { "down" };
        write!(f, "switch link {} {state}", self.link)
    }
}

/// The links of `t` by their ends' names and ports, each named the same from either end.
fn named_links(t: &Topology) -> BTreeSet<String> {
    let name = |e: End| match e {
        End::Switch(s) => t.switches[s].name.as_str(),
        End::Host(h) => t.hosts[h].name.as_str(),
    };
    (t.links.iter())
        .map(|l| {
            let ports = l.ports.map_or([String::new(), String::new()], |p| {
                p.map(|n| format!("[{n}]"))
            });
            let mut ends = [
                format!("{}{}", name(l.ends[0]), ports[0]),
                format!("{}{}", name(l.ends[1]), ports[1]),
            ];
            ends.sort();
            format!("{} - {}", ends[0], ends[1])
        })
        .collect()
}

/// The links of `before` missing from `after` (down) and new in `after` (up), in order.
pub fn diff(before: &Topology, after: &Topology) -> Vec<LinkChange> {
    let (was, now) = (named_links(before), named_links(after));
    let down = (was.difference(&now)).map(|l| LinkChange {
        link: l.clone(),
        up: false,
    });
    let up = (now.difference(&was)).map(|l| LinkChange {
        link: l.clone(),
        up: true,
    });
    down.chain(up).collect()
}

/// What changed since the last look.
#[derive(Clone, Debug)]
pub struct Changed {
    /// The fabric now.
    pub topology: Topology,
    /// The links that went down or came up.
    pub links: Vec<LinkChange>,
    /// Hosts seen before that the fabric no longer reaches (cut off), in the order seen.
    pub cut_off: Vec<String>,
}

/// Looks at a fabric again and again, for what changed.
pub struct Watch {
    source: Source,
    last: Topology,
    /// Every host seen, in the order first seen.
    seen: Vec<String>,
}

impl Watch {
    /// Watches `source`, whose last look gave `first`.
    pub fn new(source: Source, first: Topology) -> Watch {
        let seen = first.hosts.iter().map(|h| h.name.clone()).collect();
        Watch {
            source,
            last: first,
            seen,
        }
    }

    /// Looks again: what changed, or `None` when no link did.
    ///
    /// # Errors
    /// [`InventoryError`] when the file cannot be read or the fabric discovered now (the
    /// last look stays).
    pub fn poll(&mut self) -> Result<Option<Changed>, InventoryError> {
        let now = self.source.load()?;
        Ok(self.compare(now))
    }

    /// What `now` changed against the last look (which it becomes).
    pub fn compare(&mut self, now: Topology) -> Option<Changed> {
        let links = diff(&self.last, &now);
        if links.is_empty() {
            return None;
        }
        let present: HashSet<&str> = now.hosts.iter().map(|h| h.name.as_str()).collect();
        let cut_off = (self.seen.iter())
            .filter(|h| !present.contains(h.as_str()))
            .cloned()
            .collect();
        for h in &now.hosts {
            if !self.seen.contains(&h.name) {
                self.seen.push(h.name.clone());
            }
        }
        self.last = now.clone();
        Some(Changed {
            topology: now,
            links,
            cut_off,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switches::ibnet;

    /// n1 and n2 on leaf `a`, n3 on leaf `b`, the leaves linked twice.
    const DUMP: &str = "Switch 8 \"S-a\" # \"a\"\n[1] \"H-1\"[1] # \"n1\"\n[2] \"H-2\"[1] # \"n2\"\n[5] \"S-b\"[5]\n[6] \"S-b\"[6]\n\n\
                        Switch 8 \"S-b\" # \"b\"\n[1] \"H-3\"[1] # \"n3\"\n[5] \"S-a\"[5]\n[6] \"S-a\"[6]\n\n\
                        Ca 1 \"H-1\" # \"n1\"\n[1] \"S-a\"[1]\n\nCa 1 \"H-2\" # \"n2\"\n[1] \"S-a\"[2]\n\nCa 1 \"H-3\" # \"n3\"\n[1] \"S-b\"[1]\n";

    fn without(text: &str, lines: &[&str]) -> Topology {
        let kept: Vec<&str> = text.lines().filter(|l| !lines.contains(l)).collect();
        ibnet::parse(&kept.join("\n")).expect("dump")
    }

    #[test]
    fn a_link_cut_and_a_host_cut_off_are_told_once() {
        let full = ibnet::parse(DUMP).expect("dump");
        let mut w = Watch::new(Source::File("unused".into()), full.clone());
        assert!(w.compare(full.clone()).is_none(), "nothing changed");
        // One of the two inter-switch links: the hops stay, the link is told.
        let one = without(DUMP, &["[6] \"S-b\"[6]", "[6] \"S-a\"[6]"]);
        let c = w.compare(one.clone()).expect("a change");
        assert_eq!(
            c.links,
            [LinkChange {
                link: "a[6] - b[6]".into(),
                up: false
            }]
        );
        assert_eq!(c.links[0].to_string(), "switch link a[6] - b[6] down");
        assert!(c.cut_off.is_empty());
        // n3's adapter unlinked: it is no longer discovered, and is cut off.
        let cut = ibnet::parse(
            "Switch 8 \"S-a\" # \"a\"\n[1] \"H-1\"[1] # \"n1\"\n[2] \"H-2\"[1] # \"n2\"\n[5] \"S-b\"[5]\n\nSwitch 8 \"S-b\" # \"b\"\n[5] \"S-a\"[5]\n\n\
             Ca 1 \"H-1\" # \"n1\"\n[1] \"S-a\"[1]\n\nCa 1 \"H-2\" # \"n2\"\n[1] \"S-a\"[2]\n",
        )
        .expect("dump");
        let c = w.compare(cut).expect("a change");
        assert_eq!(c.cut_off, ["n3"]);
        assert_eq!(c.links.len(), 1);
        assert_eq!(c.links[0].link, "b[1] - n3[1]");
        // Back: both links up, nobody cut off.
        let c = w.compare(full).expect("a change");
        assert!(c.links.iter().all(|l| l.up) && c.links.len() == 2, "{c:?}");
        assert!(c.cut_off.is_empty());
    }
}
