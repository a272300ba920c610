//! The fabric beyond the node (issue #54) against a real InfiniBand stack: ibsim
//! (`ibsim-utils`) simulates switches and adapters from a net file, and the real
//! `ibnetdiscover` (`infiniband-diags`, under ibsim's `libumad2sim.so`) discovers the
//! fabric as it would hardware. `maestro inventory --fabric DUMP --json` must give the
//! switches, hosts, links and hops the net file describes: for ibsim's shipped examples
//! and for a fat tree generated here (2 spines, 4 leaves, 32 adapters).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inventory::switches::{End, Topology};

const EXAMPLES: &str = "/usr/share/doc/ibsim-utils/net-examples";

/// An ibsim of its own (its socket named for this test), stopped when dropped (its
/// process group is).
struct Ibsim {
    /// Held for its drop, which ends ibsim's process group.
    _group: common::Group,
    socket: String,
    _out: [std::sync::mpsc::Receiver<String>; 2],
}

impl Ibsim {
    /// Starts ibsim on `net` and waits until ibnetdiscover reaches it.
    fn start(net: &Path, name: &str) -> Ibsim {
        let socket = format!("maestro-{name}-{}", std::process::id());
        let mut group = common::Group::spawn_with_stdin(
            Command::new("ibsim")
                .arg("-s")
                .arg(net)
                .env("IBSIM_SOCKNAME", &socket),
            Stdio::piped(),
        );
        let out = [
            common::lines(group.child.stdout.take().expect("stdout")),
            common::lines(group.child.stderr.take().expect("stderr")),
        ];
        let sim = Ibsim {
            _group: group,
            socket,
            _out: out,
        };
        let end = Instant::now() + Duration::from_secs(10);
        while sim.ibnetdiscover().is_none() {
            assert!(
                Instant::now() < end,
                "ibsim on {} did not come up",
                net.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sim
    }

    /// ibnetdiscover's dump of the simulated fabric, once it answers.
    fn ibnetdiscover(&self) -> Option<String> {
        let out = common::run(
            Command::new("ibsim-run")
                .arg("ibnetdiscover")
                .env("IBSIM_SOCKNAME", &self.socket),
            Duration::from_secs(30),
        );
        (out.code() == Some(0) && out.stdout.contains("Switch")).then_some(out.stdout)
    }
}

/// The fabric an ibsim net file describes (its records: `Switch|Hca PORTS "name"`, then
/// `[port] "remote"[port]` lines): the truth the discovery is compared with.
fn net_truth(text: &str) -> Topology {
    let mut t = Topology::default();
    let mut kinds = std::collections::HashMap::new();
    for line in text.lines().map(str::trim) {
        if let Some(kind) = ["Switch", "Hca"].iter().find(|k| line.starts_with(**k)) {
            kinds.insert(quoted(line).to_string(), *kind == "Switch");
        }
    }
    let end = |t: &mut Topology, name: &str| {
        if kinds[name] {
            End::Switch(t.switch(name, None))
        } else {
            End::Host(t.host(name, None))
        }
    };
    let mut node = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with("Switch") || line.starts_with("Hca") {
            node = Some(quoted(line).to_string());
        } else if let Some(rest) = line.strip_prefix('[') {
            let here = node.clone().expect("a port after its node");
            let (port, rest) = rest.split_once(']').expect("[port]");
            let remote = quoted(rest);
            let remote_port = rest
                .rsplit_once('[')
                .and_then(|(_, p)| p.split_once(']'))
                .expect("remote [port]")
                .0;
            let (a, b) = (end(&mut t, &here), end(&mut t, remote));
            let ports = [
                port.trim().parse().expect("port"),
                remote_port.parse().expect("port"),
            ];
            t.link(a, b, Some(ports), None);
        }
    }
    t
}

fn quoted(s: &str) -> &str {
    s.split('"').nth(1).expect("a quoted name")
}

/// What is compared: switch and host names, links by their ends' names and ports, hops
/// by host names.
type Shape = (
    BTreeSet<String>,
    BTreeSet<String>,
    BTreeSet<(String, String)>,
    BTreeSet<(String, String, Option<u32>)>,
);

fn shape(t: &Topology) -> Shape {
    let name = |e: End| match e {
        End::Switch(s) => format!("switch {}:", t.switches[s].name),
        End::Host(h) => format!("host {}:", t.hosts[h].name),
    };
    let links = t
        .links
        .iter()
        .map(|l| {
            let ports = l.ports.unwrap_or_default();
            let mut ends = [
                format!("{}{}", name(l.ends[0]), ports[0]),
                format!("{}{}", name(l.ends[1]), ports[1]),
            ];
            ends.sort();
            let [a, b] = ends;
            (a, b)
        })
        .collect();
    let hops = t.hops();
    let mut pairs = BTreeSet::new();
    for (i, a) in hops.hosts.iter().enumerate() {
        for (j, b) in hops.hosts.iter().enumerate() {
            pairs.insert((a.clone(), b.clone(), hops.hops[i][j]));
        }
    }
    (
        t.switches.iter().map(|s| s.name.clone()).collect(),
        t.hosts.iter().map(|h| h.name.clone()).collect(),
        links,
        pairs,
    )
}

/// What `maestro inventory ARGS --fabric FILE` prints, FILE holding `dump`.
fn inventory_with(dump: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fabric.ibnet");
    std::fs::write(&file, dump).expect("write the dump");
    let out = common::run(
        Command::new(common::maestro())
            .arg("inventory")
            .args(args)
            .arg("--fabric")
            .arg(&file),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    out.stdout
}

/// The topology `maestro inventory --fabric DUMP --json` reads from `dump`.
fn inventory_of(dump: &str) -> (Topology, serde_json::Value) {
    let v: serde_json::Value =
        serde_json::from_str(&inventory_with(dump, &["--json"])).expect("JSON");
    let t: Topology = serde_json::from_value(v["topology"].clone()).expect("a topology");
    (t, v)
}

/// Discovers the fabric of `net` (a net file's text, written to `name`) through ibsim and
/// checks the inventory's view of it against the net file; the time ibnetdiscover took.
fn discover_and_compare(net: &str, name: &str) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, net).expect("write the net file");
    let sim = Ibsim::start(&path, name);
    let started = Instant::now();
    let dump = sim.ibnetdiscover().expect("ibnetdiscover");
    let took = started.elapsed();
    let (found, json) = inventory_of(&dump);
    let truth = net_truth(net);
    assert_eq!(
        shape(&found),
        shape(&truth),
        "{name}: the inventory against the net file"
    );
    assert_eq!(
        json["hops"]["hosts"].as_array().map(Vec::len),
        Some(truth.hosts.len())
    );
    took
}

#[test]
fn the_shipped_fabrics_are_read_as_ibsim_builds_them() {
    for example in [
        "net",
        "net.1",
        "net.2sw2path",
        "net.2sw2path4hca",
        "net.2sw2path4hca2port",
    ] {
        let net = std::fs::read_to_string(Path::new(EXAMPLES).join(example)).expect("example");
        discover_and_compare(&net, example);
    }
}

/// A fat tree: `spines` spines, `leaves` leaves each linked once to every spine, and
/// `per_leaf` adapters on each leaf, as an ibsim net file.
fn fat_tree(spines: usize, leaves: usize, per_leaf: usize) -> String {
    let mut net = String::new();
    for s in 1..=spines {
        net += &format!("Switch\t36 \"spine{s}\"\n");
        for l in 1..=leaves {
            net += &format!("[{l}]\t\"leaf{l}\"[{}]\n", per_leaf + s);
        }
        net += "\n";
    }
    for l in 1..=leaves {
        net += &format!("Switch\t36 \"leaf{l}\"\n");
        for h in 1..=per_leaf {
            net += &format!("[{h}]\t\"n{}\"[1]\n", (l - 1) * per_leaf + h);
        }
        for s in 1..=spines {
            net += &format!("[{}]\t\"spine{s}\"[{l}]\n", per_leaf + s);
        }
        net += "\n";
    }
    for l in 1..=leaves {
        for h in 1..=per_leaf {
            net += &format!(
                "Hca\t2 \"n{}\"\n[1]\t\"leaf{l}\"[{h}]\n\n",
                (l - 1) * per_leaf + h
            );
        }
    }
    net
}

#[test]
fn a_fat_tree_of_32_adapters_is_discovered_whole_with_its_hops() {
    let net = fat_tree(2, 4, 8);
    let took = discover_and_compare(&net, "fat-tree");
    eprintln!(
        "ibnetdiscover of 2 spines, 4 leaves, 32 adapters: {:.3} s",
        took.as_secs_f64()
    );
    let truth = net_truth(&net);
    let hops = truth.hops();
    let at = |h: &str| hops.hosts.iter().position(|x| x == h).expect("host");
    assert_eq!(hops.hops[at("n1")][at("n8")], Some(2), "under one leaf");
    assert_eq!(hops.hops[at("n1")][at("n9")], Some(4), "through a spine");
    // Slurm's lines: a leaf with its 8 nodes, each spine above the 4 leaves, one switch
    // above both spines.
    let text = inventory::switches::slurm::render(&truth);
    assert!(text.contains("SwitchName=leaf1 Nodes=n[1-8]\n"), "{text}");
    assert!(
        text.contains("SwitchName=spine1 Switches=leaf[1-4]\n"),
        "{text}"
    );
    assert!(
        text.contains("SwitchName=fabric Switches=spine[1-2]\n"),
        "{text}"
    );
}

/// The `topology.conf` lines `maestro inventory --fabric DUMP --slurm` prints.
fn slurm_lines(dump: &str) -> String {
    inventory_with(dump, &["--slurm"])
        .split("# topology.conf:\n")
        .nth(1)
        .and_then(|rest| rest.split("# plugstack.conf").next())
        .expect("topology.conf lines")
        .to_string()
}

/// Slurm's `topology/tree` with the `topology.conf` the inventory exports from the
/// discovered fabric (two leaves of four nodes under two spines, the nodes named as the
/// namespaced cluster's): with three nodes of the first leaf taken, a 2-node job lands
/// under the second leaf, not across the spines (n4 and n5, which Slurm picks without the
/// topology); 10 of 10 runs.
#[test]
fn slurm_places_a_two_node_job_under_one_leaf_with_the_exported_topology() {
    let net = fat_tree(2, 2, 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("two-leaves");
    std::fs::write(&path, &net).expect("write the net file");
    let dump = {
        let sim = Ibsim::start(&path, "two-leaves");
        sim.ibnetdiscover().expect("ibnetdiscover")
    };
    let topology = dir.path().join("topology.conf");
    let lines = slurm_lines(&dump);
    assert!(lines.contains("SwitchName=leaf1 Nodes=n[1-4]"), "{lines}");
    std::fs::write(&topology, &lines).expect("write topology.conf");
    let cluster = common::Cluster::start_with_topology(8, &topology);
    let shown = common::run(
        cluster.command("scontrol").args(["show", "topology"]),
        Duration::from_secs(30),
    );
    assert!(
        shown.stdout.contains("SwitchName=leaf2") && shown.stdout.contains("Nodes=n[5-8]"),
        "{shown:?}"
    );
    // n1-n3 taken: leaf1 has one node free, leaf2 four.
    let mut hold = cluster.command("sbatch");
    // Its output nowhere: a batch job writes slurm-JOB.out where it is submitted.
    hold.args([
        "--parsable",
        "--output=/dev/null",
        "--exclusive",
        "-N",
        "3",
        "-w",
        "n[1-3]",
        "--wrap",
        "sleep 600",
    ]);
    let held = common::run(&mut hold, Duration::from_secs(30));
    assert_eq!(held.code(), Some(0), "{held:?}");
    let job = held.stdout.trim().to_string();
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let q = common::run(
            cluster
                .command("squeue")
                .args(["-h", "-j", &job, "-o", "%T"]),
            Duration::from_secs(30),
        );
        if q.stdout.trim() == "RUNNING" {
            break;
        }
        assert!(Instant::now() < end, "the holding job does not run: {q:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    for run in 1..=10 {
        let out = common::run(
            cluster.srun().args(["-N", "2", "--exclusive", "hostname"]),
            Duration::from_secs(60),
        );
        assert_eq!(out.code(), Some(0), "run {run}: {out:?}");
        let nodes: BTreeSet<&str> = out.stdout.lines().map(str::trim).collect();
        let under_leaf2 = ["n5", "n6", "n7", "n8"];
        assert!(
            nodes.len() == 2 && nodes.iter().all(|n| under_leaf2.contains(n)),
            "run {run}: the job ran on {nodes:?}, not under one leaf"
        );
    }
    let _ = common::run(
        cluster.command("scancel").arg(&job),
        Duration::from_secs(30),
    );
}
