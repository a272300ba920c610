//! The fabric beyond the node (issue #54) against a real InfiniBand stack: ibsim
//! (`ibsim-utils`) simulates switches and adapters from a net file, and the real
//! `ibnetdiscover` (`infiniband-diags`, under ibsim's `libumad2sim.so`) discovers the
//! fabric as it would hardware. `maestro inventory --fabric DUMP --json` must give the
//! switches, hosts, links and hops the net file describes: for ibsim's shipped examples
//! and for a fat tree generated here (2 spines, 4 leaves, 32 adapters), and so must
//! `maestro inventory --discover-fabric` (libibnetdisc through the simulated adapter).
//! `maestro run` serves the fabric to PMIx clients: a C program's `PMIx_Fabric_register`
//! gets the cost matrix and groups, `PMIx_Fabric_update` the fabric after a link is cut in
//! ibsim; Slurm's `topology/tree` places jobs with the exported `topology.conf`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::ibsim::{Ibsim, fat_tree};
use inventory::switches::{End, Topology};

const EXAMPLES: &str = "/usr/share/doc/ibsim-utils/net-examples";

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
    let links = (named_links(t).into_iter())
        .map(|(a, b, _)| (a, b))
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

/// The links of `t` by their ends' names and ports (in order), with their rates.
fn named_links(t: &Topology) -> BTreeSet<(String, String, Option<String>)> {
    let name = |e: End| match e {
        End::Switch(s) => format!("switch {}:", t.switches[s].name),
        End::Host(h) => format!("host {}:", t.hosts[h].name),
    };
    (t.links.iter())
        .map(|l| {
            let ports = l.ports.unwrap_or_default();
            let mut ends = [
                format!("{}{}", name(l.ends[0]), ports[0]),
                format!("{}{}", name(l.ends[1]), ports[1]),
            ];
            ends.sort();
            let [a, b] = ends;
            (a, b, l.rate.clone())
        })
        .collect()
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

/// How long ibnetdiscover and `maestro inventory --discover-fabric` took.
struct Took {
    ibnetdiscover: Duration,
    discovery: Duration,
}

/// Simulates `net` (a net file's text, written to `name`) in ibsim, discovers it with
/// ibnetdiscover and with `maestro inventory --discover-fabric`, and checks that the
/// inventory's view of the dump, and the discovered fabric, are the net file's (and the
/// discovered links' rates the dump's).
fn discover_and_compare(net: &str, name: &str) -> Took {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, net).expect("write the net file");
    let sim = Ibsim::start(&path, name);
    let started = Instant::now();
    let dump = sim.ibnetdiscover().expect("ibnetdiscover");
    let ibnetdiscover = started.elapsed();
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
    let (discovered, discovery) = sim.discover();
    assert_eq!(
        shape(&discovered),
        shape(&truth),
        "{name}: the discovered fabric against the net file"
    );
    assert_eq!(
        named_links(&discovered),
        named_links(&found),
        "{name}: link rates as ibnetdiscover reports them"
    );
    Took {
        ibnetdiscover,
        discovery,
    }
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

#[test]
fn a_fat_tree_of_32_adapters_is_discovered_whole_with_its_hops() {
    let net = fat_tree(2, 4, 8);
    let took = discover_and_compare(&net, "fat-tree");
    eprintln!(
        "2 spines, 4 leaves, 32 adapters: ibnetdiscover {:.3} s, maestro inventory --discover-fabric {:.3} s",
        took.ibnetdiscover.as_secs_f64(),
        took.discovery.as_secs_f64()
    );
    assert!(
        took.discovery < Duration::from_secs(1),
        "discovery of the fat tree took {:?} (the whole command)",
        took.discovery
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
    // Under the checkout, which the cluster's nodes see (each has its own /tmp).
    let dir = tempfile::tempdir_in(common::repo().join("target")).expect("tempdir");
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
    // On a node of the cluster, a C program under `maestro run --fabric topology.conf`
    // gets its node's leaf switch and the hops from it (PMIx_Fabric_register).
    let exe = common::build_c("cc", "fabric_cost.c", Some("pmix"), dir.path());
    let out = common::run(
        cluster
            .srun_on("n5", 1)
            .arg(common::maestro())
            .args(["run", "--fabric"])
            .arg(&topology)
            .arg(&exe),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let got = answer(&out.stdout, "register OK");
    assert!(got.contains(&"switch leaf2"), "{out:?}");
    assert_eq!(cost(&got, "n5", "n8"), Some(2), "{out:?}");
    assert_eq!(cost(&got, "n5", "n1"), Some(4), "{out:?}");
    // Tasks placed by leaf over the free nodes: leaf2 holds four of them, leaf1 one (n4);
    // srun takes the hostfile and starts each rank where it says.
    let placed = common::run(
        Command::new(common::maestro())
            .args(["inventory", "--fabric"])
            .arg(&topology)
            .args([
                "--placement",
                "4",
                "--tasks-per-node",
                "2",
                "--hosts",
                "n[4-8]",
            ]),
        Duration::from_secs(30),
    );
    assert_eq!(placed.code(), Some(0), "{placed:?}");
    let hostfile: Vec<&str> = (placed.stdout.lines())
        .skip_while(|l| !l.starts_with("# SLURM_HOSTFILE"))
        .skip(1)
        .collect();
    assert_eq!(hostfile, ["n5", "n5", "n6", "n6"], "{placed:?}");
    let file = dir.path().join("hostfile");
    std::fs::write(&file, hostfile.join("\n") + "\n").expect("write the hostfile");
    let ran = common::run(
        cluster.srun().env("SLURM_HOSTFILE", &file).args([
            "--distribution=arbitrary",
            "-n",
            "4",
            "-l",
            "hostname",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(ran.code(), Some(0), "{ran:?}");
    let mut by_rank: Vec<&str> = ran.stdout.lines().map(str::trim).collect();
    by_rank.sort_unstable();
    assert_eq!(by_rank, ["0: n5", "1: n5", "2: n6", "3: n6"], "{ran:?}");
    let _ = common::run(
        cluster.command("scancel").arg(&job),
        Duration::from_secs(30),
    );
}

/// What `fabric_cost` (tests/c/fabric_cost.c) printed of one answer: the lines from
/// `register OK` or `update OK` up to the next such line.
fn answer<'a>(stdout: &'a str, first: &str) -> Vec<&'a str> {
    (stdout.lines())
        .skip_while(|l| !l.starts_with(first))
        .skip(1)
        .take_while(|l| !l.starts_with("update"))
        .collect()
}

/// The hops `fabric_cost` printed between `a` and `b` in `lines`.
fn cost(lines: &[&str], a: &str, b: &str) -> Option<u32> {
    let prefix = format!("cost {a} {b} ");
    (lines.iter())
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|h| h.parse().ok())
}

/// A C program calling OpenPMIx's `PMIx_Fabric_register` under `maestro run --fabric
/// topology.conf` gets the groups (leaves), the hosts and the cost matrix (hops) the file
/// describes, and the identifier of where they came from.
#[test]
fn a_c_program_gets_the_cost_matrix_and_groups_of_a_topology_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = common::build_c("cc", "fabric_cost.c", Some("pmix"), dir.path());
    let conf = common::topology_conf(dir.path(), &["n[1-2]", "n[3-4]"]);
    let conf = conf.to_str().expect("utf-8 path");
    let out = common::maestro_run(&["--fabric", conf, exe.to_str().expect("utf-8 path")]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let got = answer(&out.stdout, "register OK");
    assert!(got.contains(&format!("id file:{conf}").as_str()), "{out:?}");
    assert!(got.contains(&"groups 0:n1,n2;1:n3,n4"), "{out:?}");
    assert!(got.contains(&"hosts 4 n1,n2,n3,n4"), "{out:?}");
    assert_eq!(cost(&got, "n1", "n1"), Some(0));
    assert_eq!(cost(&got, "n1", "n2"), Some(2), "under one leaf");
    assert_eq!(cost(&got, "n2", "n4"), Some(4), "through the spine");
    assert_eq!(got.iter().filter(|l| l.starts_with("cost ")).count(), 16);
    // A file that is no description: the job does not start, and says why.
    let bad = common::maestro_run(&["--fabric", "/etc/hostname", "true"]);
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    assert!(
        bad.stderr
            .contains("/etc/hostname: neither a Slurm topology.conf"),
        "{bad:?}"
    );
}

/// A pool manager run as a rank of `maestro run --fabric topology.conf` takes the cost
/// matrix its host serves (`PMIx_Fabric_register`) to order offers by hops.
#[test]
fn a_pool_manager_under_maestro_run_takes_the_hosts_cost_matrix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = common::topology_conf(dir.path(), &["n[1-2]", "n[3-4]"]);
    let mut job = common::Group::spawn(
        Command::new(common::maestro())
            .args(["run", "--fabric"])
            .arg(&conf)
            .arg("--")
            .arg(common::maestro())
            .args(["pm", "--print-info", "--workflow"])
            .arg(format!("cost-matrix-{}", std::process::id()))
            .env("MSTRO_LOG_LEVEL", "info"),
    );
    common::await_line(
        job.child.stderr.take().expect("stderr"),
        "the hops between 4 hosts order offers",
    );
}

/// The PMIx path of a switch link's failure: `maestro run --discover-fabric` (through
/// ibsim) looks at the fabric every half second; when a link is cut in ibsim's console it
/// raises `PMIX_FABRIC_UPDATED` to its job, whose rank running the pool manager asks for
/// the hops now (`PMIx_Fabric_update`) and hands the change to the pool: a subscriber
/// hears `switch link ... down` within 5 s (measured), and the launcher says it.
#[test]
fn a_switch_link_cut_under_maestro_run_is_a_pmix_event_and_a_pool_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = dir.path().join("ring");
    std::fs::write(&net, RING).expect("write the net file");
    let mut sim = Ibsim::start(&net, "pmix-cut");
    let workflow = format!("switch-event-{}", std::process::id());
    let (mut job, info) = common::spawn_pm(
        Command::new(common::maestro())
            .args(["run", "--discover-fabric", "--fabric-watch", "0.5", "--"])
            .arg(common::maestro())
            .args(["pm", "--print-info", "--workflow", &workflow])
            .envs(sim.env()),
    );
    let launcher = common::lines(job.child.stderr.take().expect("stderr"));
    let mut tracer = common::Group::spawn(
        Command::new(common::example("pool_tracer"))
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .env("MSTRO_WORKFLOW_NAME", &workflow)
            .args(["--kinds", "fabric"]),
    );
    common::await_line(tracer.child.stderr.take().expect("stderr"), "subscribed");
    let events = common::lines(tracer.child.stdout.take().expect("stdout"));
    let cut = Instant::now();
    sim.console("Unlink \"s1\"[2]");
    let heard = common::expect_line(
        &events,
        &["\"Fabric\"", "switch link s1[2] - s2[2] down"],
        Duration::from_secs(5),
    );
    eprintln!(
        "switch link cut in ibsim to the pool event through PMIx: {:.3} s",
        cut.elapsed().as_secs_f64()
    );
    assert!(heard.contains("\"kind\":\"Fabric\""), "{heard}");
    // With the hops the host serves now: the pool lists the link down.
    let fabric = common::run(
        Command::new(common::maestro()).args(["pool", "fabric", "--info", &info]),
        Duration::from_secs(30),
    );
    assert!(
        fabric.stdout.contains("switch link s1[2] - s2[2]"),
        "{fabric:?}"
    );
    common::expect_line(
        &launcher,
        &["maestro run: switch link s1[2] - s2[2] down"],
        Duration::from_secs(5),
    );
}

/// `maestro query` asks `maestro run --fabric` for the fabric beyond the node
/// (`maestro.fabric.topology`): JSON with the switches and hosts, text with the leaves.
#[test]
fn maestro_query_shows_the_fabric_beyond_the_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = common::topology_conf(dir.path(), &["n[1-2]", "n[3-4]"]);
    let job = common::Group::spawn(
        Command::new(common::maestro())
            .args(["run", "--tool-support", "--fabric"])
            .arg(&conf)
            .args(["--", "sleep", "60"]),
    );
    let pid = job.pid().to_string();
    let query = |json: bool| {
        let mut cmd = Command::new(common::maestro());
        cmd.args(["query", "--pid", &pid]);
        if json {
            cmd.arg("--json");
        }
        common::run(&mut cmd, Duration::from_secs(30))
    };
    let end = Instant::now() + Duration::from_secs(20);
    let v = loop {
        let out = query(true);
        let v = serde_json::from_str::<serde_json::Value>(out.stdout.trim()).ok();
        if let Some(v) = v.filter(|v| v["fabric"]["topology"].is_object()) {
            break v;
        }
        assert!(Instant::now() < end, "no topology from the host: {out:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let t: Topology =
        serde_json::from_value(v["fabric"]["topology"]["topology"].clone()).expect("topology");
    assert_eq!(t.hosts.len(), 4, "{v}");
    assert_eq!(t.switches.len(), 3, "{v}");
    let text = query(false);
    assert!(
        text.stdout.contains("the fabric beyond the node:")
            && text.stdout.contains("leaf leaf2: 2 hosts: n[3-4]"),
        "{text:?}"
    );
}

/// Three switches in a ring, `a` on s1 and `b` on s2: a ring's shortcut to cut.
const RING: &str = "Switch\t8 \"s1\"\n[1]\t\"a\"[1]\n[2]\t\"s2\"[2]\n[3]\t\"s3\"[3]\n\n\
                    Switch\t8 \"s2\"\n[1]\t\"b\"[1]\n[2]\t\"s1\"[2]\n[4]\t\"s3\"[4]\n\n\
                    Switch\t8 \"s3\"\n[3]\t\"s1\"[3]\n[4]\t\"s2\"[4]\n\n\
                    Hca\t2 \"a\"\n[1]\t\"s1\"[1]\n\n\
                    Hca\t2 \"b\"\n[1]\t\"s2\"[1]\n";

/// Under `maestro run --discover-fabric` (libibnetdisc through ibsim's simulated adapter)
/// a C program's `PMIx_Fabric_register` gets the ring's hops (a to b: 3), and after the
/// s1-s2 link is cut in ibsim's console, `PMIx_Fabric_update` gets the longer way round
/// (4).
#[test]
fn pmix_fabric_update_returns_the_fabric_after_an_ibsim_link_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = common::build_c("cc", "fabric_cost.c", Some("pmix"), dir.path());
    let net = dir.path().join("ring");
    std::fs::write(&net, RING).expect("write the net file");
    let mut sim = Ibsim::start(&net, "ring");
    let go = dir.path().join("cut");
    let mut job = common::Group::spawn(
        Command::new("ibsim-run")
            .arg(common::maestro())
            .args(["run", "--discover-fabric", "--timeout", "60"])
            .arg(&exe)
            .arg(&go)
            .env("IBSIM_SOCKNAME", &sim.socket),
    );
    let stdout = common::lines(job.child.stdout.take().expect("stdout"));
    let stderr = common::lines(job.child.stderr.take().expect("stderr"));
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while !seen.iter().any(|l: &String| l.starts_with("cost b b")) {
        let left = end.saturating_duration_since(Instant::now());
        match stdout.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => panic!(
                "no cost matrix: {seen:?} {:?}",
                stderr.try_iter().collect::<Vec<_>>()
            ),
        }
    }
    sim.console("Unlink \"s1\"[2]");
    std::fs::write(&go, "").expect("touch");
    let ended = job.wait(Duration::from_secs(30));
    seen.extend(stdout.iter());
    let text = seen.join("\n");
    assert_eq!(
        ended.code(),
        Some(0),
        "{text}\n{:?}",
        stderr.iter().collect::<Vec<_>>()
    );
    let before = answer(&text, "register OK");
    let after = answer(&text, "update OK");
    assert!(
        before.contains(&"id infiniband:first-active-port"),
        "{text}"
    );
    assert_eq!(cost(&before, "a", "b"), Some(3), "{text}");
    assert_eq!(cost(&after, "a", "b"), Some(4), "{text}");
    // One leaf group each, in the order discovery found the switches.
    assert!(
        before.contains(&"groups 0:a;1:b") || before.contains(&"groups 0:b;1:a"),
        "{text}"
    );
}
