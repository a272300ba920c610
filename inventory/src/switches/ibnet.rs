//! An InfiniBand fabric as `ibnetdiscover` describes it (its default output: a record per
//! node, `Switch`/`Ca`/`Rt` with its ports and what each is linked to), read into a
//! [`Topology`]: what a site keeps of its fabric, and what the tests compare discovery
//! with.
//!
//! ```text
//! switchguid=0x200000(200000)
//! Switch  8 "S-0000000000200000"      # "Switch1" base port 0 lid 1 lmc 0
//! [1]     "H-0000000000100000"[1](100001)     # "Hca1" lid 2 4xSDR
//! [3]     "S-0000000000200001"[3]     # "Switch2" lid 3 4xSDR
//!
//! caguid=0x100000
//! Ca      2 "H-0000000000100000"      # "n1 mlx5_0"
//! [1](100001)     "S-0000000000200000"[1]     # lid 2 lmc 0 "Switch1" lid 1 4xSDR
//! ```
//!
//! A switch is named by its node description (by its id `S-<guid>` when two share one); a
//! channel adapter's host by the first word of its description (`n1 mlx5_0`: `n1`), so
//! that the adapters of one host are one host. Routers are read as switches.

use std::collections::HashMap;

use super::{End, Topology};

/// Most lines of a dump read.
pub const MAX_LINES: usize = 4_000_000;

/// Why a dump is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IbnetError {
    /// A line that is neither a node's, a port's, a `key=value` header nor a comment.
    #[error("ibnetdiscover line {line}: {why}")]
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// A port linked to a node the dump does not describe (a partial dump).
    #[error(
        "ibnetdiscover line {line}: linked to {id}, which the dump does not describe: give the whole fabric's dump (ibnetdiscover without options)"
    )]
    Unknown {
        /// The port line's number.
        line: usize,
        /// The node named there.
        id: String,
    },
    /// More than [`MAX_LINES`] lines.
    #[error("the ibnetdiscover dump has more than {MAX_LINES} lines")]
    TooLong,
}

/// A node as ibnetdiscover names it (and libibnetdisc, which [`super::discover`] reads,
/// returns it): its id (`S-<guid>` for a switch, `H-<guid>` for an adapter, `R-<guid>` for
/// a router), whether a switch (or router), its node description and its ports' links.
pub(super) struct Record {
    /// `S-`, `H-` or `R-` and the node GUID in 16 hexadecimal digits.
    pub id: String,
    /// A switch or a router (read as switches), not a channel adapter.
    pub switch: bool,
    /// The node description (`Switch1`, `n1 mlx5_0`).
    pub description: String,
    /// The linked ports.
    pub ports: Vec<PortLink>,
}

/// A port of a [`Record`] and the port it is linked to.
pub(super) struct PortLink {
    /// The port's number on its node.
    pub local: u8,
    /// The id of the node at the other end.
    pub remote: String,
    /// The port's number there.
    pub remote_port: u8,
    /// The link's width and speed (`4xHDR`), where known.
    pub rate: Option<String>,
    /// The dump's line naming the link (0 for a discovered fabric).
    pub line: usize,
}

/// The topology the dump `text` describes.
///
/// # Errors
/// [`IbnetError`] naming the line and what is wrong.
pub fn parse(text: &str) -> Result<Topology, IbnetError> {
    let mut nodes: Vec<Record> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if line > MAX_LINES {
            return Err(IbnetError::TooLong);
        }
        let bad = |why: &str| IbnetError::Line {
            line,
            why: why.to_string(),
        };
        let (body, comment) = match raw.split_once('#') {
            Some((b, c)) => (b.trim(), Some(c)),
            None => (raw.trim(), None),
        };
        if body.is_empty() || body.contains('=') && !body.starts_with('[') {
            continue;
        }
        if body.starts_with('[') {
            let node = nodes
                .last_mut()
                .ok_or_else(|| bad("a port before any node"))?;
            let (local, remote, remote_port) = port_line(body)
                .ok_or_else(|| bad("a port line is [PORT](GUID)? \"ID\"[PORT](GUID)?"))?;
            let rate = comment
                .and_then(|c| c.split_whitespace().last())
                .filter(|r| is_rate(r))
                .map(str::to_string);
            node.ports.push(PortLink {
                local,
                remote,
                remote_port,
                rate,
                line,
            });
            continue;
        }
        let mut words = body.split_whitespace();
        let kind = words.next().unwrap_or("");
        let switch = match kind {
            "Switch" | "Rt" => true,
            "Ca" => false,
            _ => return Err(bad(&format!("{kind:?}: a node is Switch, Ca or Rt"))),
        };
        let id = quoted(body).ok_or_else(|| bad("a node line names its id in quotes"))?;
        let description = comment.and_then(quoted).unwrap_or(id).to_string();
        nodes.push(Record {
            id: id.to_string(),
            switch,
            description,
            ports: Vec::new(),
        });
    }
    build(&nodes)
}

/// The topology of `nodes`: a switch named by its description (by its id when two
/// switches share one), an adapter's host by its description's first word.
///
/// # Errors
/// [`IbnetError::Unknown`] for a port linked to a node not among `nodes`.
pub(super) fn build(nodes: &[Record]) -> Result<Topology, IbnetError> {
    let mut t = Topology::default();
    let mut described: HashMap<&str, usize> = HashMap::new();
    for n in nodes.iter().filter(|n| n.switch) {
        *described.entry(n.description.as_str()).or_default() += 1;
    }
    let ends: Vec<End> = nodes
        .iter()
        .map(|n| {
            let guid =
                n.id.split_once('-')
                    .and_then(|(_, hex)| u64::from_str_radix(hex, 16).ok());
            if n.switch {
                let shared = described.get(n.description.as_str()).copied().unwrap_or(0) > 1;
                let name = if shared { &n.id } else { &n.description };
                End::Switch(t.switch(name, guid))
            } else {
                let host = n.description.split_whitespace().next().unwrap_or(&n.id);
                End::Host(t.host(host, guid))
            }
        })
        .collect();
    let by_id: HashMap<&str, usize> = (nodes.iter().enumerate())
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    for (n, node) in nodes.iter().enumerate() {
        for p in &node.ports {
            let r = *by_id
                .get(p.remote.as_str())
                .ok_or_else(|| IbnetError::Unknown {
                    line: p.line,
                    id: p.remote.clone(),
                })?;
            t.link(
                ends[n],
                ends[r],
                Some([p.local, p.remote_port]),
                p.rate.clone(),
            );
        }
    }
    Ok(t)
}

/// The first quoted string of `s`.
fn quoted(s: &str) -> Option<&str> {
    let start = s.find('"')? + 1;
    let end = start + s[start..].find('"')?;
    Some(&s[start..end])
}

/// `[1](guid) "ID"[2](guid)`: the local port, the remote id and port.
fn port_line(body: &str) -> Option<(u8, String, u8)> {
    let local = body.strip_prefix('[')?;
    let (local, rest) = local.split_once(']')?;
    let id = quoted(rest)?;
    let after = &rest[rest.find('"')? + id.len() + 2..];
    let remote = after.trim_start().strip_prefix('[')?.split_once(']')?.0;
    Some((
        local.trim().parse().ok()?,
        id.to_string(),
        remote.trim().parse().ok()?,
    ))
}

/// Whether `word` is a link rate as ibnetdiscover writes it (`4xSDR`, `2xNDR`).
fn is_rate(word: &str) -> bool {
    word.split_once('x').is_some_and(|(w, s)| {
        !w.is_empty()
            && w.bytes().all(|c| c.is_ascii_digit())
            && !s.is_empty()
            && s.bytes().all(|c| c.is_ascii_uppercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ibnetdiscover` of ibsim's `net.2sw2path4hca` (two switches linked twice, two
    /// adapters on each).
    const TWO_SWITCHES: &str = r#"#
# Topology file: generated on Sun Nov 29 10:54:50 2026
#
vendid=0x0
devid=0x0
sysimgguid=0x200001
switchguid=0x200001(200001)
Switch	8 "S-0000000000200001"		# "Switch2" base port 0 lid 0 lmc 0
[1]	"H-0000000000100003"[1](100004) 		# "Hca2" lid 0 4xSDR
[2]	"H-0000000000100009"[1](10000a) 		# "Hca4" lid 0 4xSDR
[3]	"S-0000000000200000"[3]		# "Switch1" lid 0 4xSDR
[5]	"S-0000000000200000"[5]		# "Switch1" lid 0 4xSDR

switchguid=0x200000(200000)
Switch	8 "S-0000000000200000"		# "Switch1" base port 0 lid 0 lmc 0
[1]	"H-0000000000100000"[1](100001) 		# "Hca1" lid 0 4xSDR
[2]	"H-0000000000100006"[1](100007) 		# "Hca3" lid 0 4xSDR
[3]	"S-0000000000200001"[3]		# "Switch2" lid 0 4xSDR
[5]	"S-0000000000200001"[5]		# "Switch2" lid 0 4xSDR

caguid=0x100009
Ca	2 "H-0000000000100009"		# "Hca4"
[1](10000a) 	"S-0000000000200001"[2]		# lid 0 lmc 0 "Switch2" lid 0 4xSDR

caguid=0x100003
Ca	2 "H-0000000000100003"		# "Hca2"
[1](100004) 	"S-0000000000200001"[1]		# lid 0 lmc 0 "Switch2" lid 0 4xSDR

caguid=0x100006
Ca	2 "H-0000000000100006"		# "Hca3"
[1](100007) 	"S-0000000000200000"[2]		# lid 0 lmc 0 "Switch1" lid 0 4xSDR

caguid=0x100000
Ca	2 "H-0000000000100000"		# "Hca1"
[1](100001) 	"S-0000000000200000"[1]		# lid 0 lmc 0 "Switch1" lid 0 4xSDR
"#;

    #[test]
    fn a_dump_reads_into_switches_adapters_and_links() {
        let t = parse(TWO_SWITCHES).expect("parses");
        let names: Vec<&str> = t.switches.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["Switch2", "Switch1"]);
        assert_eq!(t.switches[0].guid, Some(0x200001));
        assert_eq!(t.hosts.len(), 4);
        // Four adapter links and two between the switches, each once.
        assert_eq!(t.links.len(), 6);
        assert!(t.links.iter().all(|l| l.rate.as_deref() == Some("4xSDR")));
        let hops = t.hops();
        let at = |h: &str| hops.hosts.iter().position(|x| x == h).expect("host");
        assert_eq!(hops.hops[at("Hca1")][at("Hca3")], Some(2));
        assert_eq!(hops.hops[at("Hca1")][at("Hca2")], Some(3));
        let leaves = t.leaves();
        assert_eq!(leaves.len(), 2);
    }

    #[test]
    fn the_adapters_of_one_host_are_one_host() {
        let text = "Switch\t4 \"S-01\"\t# \"leaf\"\n[1] \"H-02\"[1](3)\t# \"n1 mlx5_0\" 4xHDR\n[2] \"H-04\"[1](5)\n\n\
                    Ca\t1 \"H-02\"\t# \"n1 mlx5_0\"\n[1](3) \"S-01\"[1]\n\n\
                    Ca\t1 \"H-04\"\t# \"n1 mlx5_1\"\n[1](5) \"S-01\"[2]\n";
        let t = parse(text).expect("parses");
        assert_eq!(t.hosts.len(), 1);
        assert_eq!(t.hosts[0].name, "n1");
        assert_eq!(t.links.len(), 2, "two links to one host");
    }

    #[test]
    fn a_bad_dump_says_which_line_and_why() {
        let cases = [
            ("[1] \"S-1\"[1]\n", "line 1: a port before any node"),
            ("Switch 8 \"S-1\"\n[x] \"S-2\"[1]\n", "line 2: a port line"),
            ("Hub 8 \"S-1\"\n", "\"Hub\": a node is Switch, Ca or Rt"),
            ("Switch 8 S-1\n", "names its id in quotes"),
            (
                "Switch 8 \"S-1\"\n[1] \"S-9\"[1]\n",
                "linked to S-9, which the dump",
            ),
        ];
        for (text, says) in cases {
            let e = parse(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
