//! Across nodes: a 3-node Slurm cluster in network namespaces (`scripts/cluster.sh`, two
//! networks), `srun -N 3 --mpi=pmix` of pmix_hello, of the pool workflow (PM and a producer
//! on n1, a producer on n2, the consumer on n3: data over TCP between nodes, shm only
//! within one), and of the C programs (PM tool, producer, consumer on three nodes); and
//! Open MPI's `mpirun` across the same nodes (`cluster.sh rsh` as its launch agent) of
//! pmix_hello and the pool workflow.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::capi::installed;
use common::{Cluster, example, run};

/// pmix_hello's three ranks ran, one on each node, in order.
fn assert_one_rank_per_node(out: &common::Output) {
    out.assert_hello(3);
    for (rank, node) in [(0, "n1"), (1, "n2"), (2, "n3")] {
        let on = format!("rank {rank} of 3 on {node}");
        assert!(out.stdout.contains(&on), "no {on:?} in\n{}", out.stdout);
    }
}

#[test]
fn pmix_hello_runs_one_rank_per_node() {
    let cluster = Cluster::start();
    let out = run(
        cluster
            .srun()
            .args(["-N", "3", "-n", "3", "--mpi=pmix"])
            .arg(example("pmix_hello")),
        Duration::from_secs(120),
    );
    assert_one_rank_per_node(&out);
}

#[test]
fn mpirun_places_one_rank_per_node_through_the_launch_agent() {
    let cluster = Cluster::start();
    let out = run(
        cluster
            .mpirun("n1,n2,n3")
            .args(["-np", "3"])
            .arg(example("pmix_hello")),
        Duration::from_secs(120),
    );
    assert_one_rank_per_node(&out);
    // Publish/lookup goes through mpirun's data server across the nodes.
    assert_eq!(
        out.lines_with("publish/lookup: ok (").len(),
        2,
        "{}",
        out.stdout
    );
}

#[test]
fn the_pool_workflow_spans_three_nodes_under_mpirun() {
    let cluster = Cluster::start();
    let out = run(
        cluster
            .mpirun("n1:2,n2,n3")
            .args(["-np", "4"])
            .arg(example("pool_workflow"))
            .args(["--cdos", "20", "--max-size", "4194304"]),
        Duration::from_secs(180),
    );
    out.assert_workflow(20);
    // The PM (rank 0, on n1) is reached at n1's addresses, not this host's.
    assert!(out.stdout.contains("198.18.7.1:"), "{}", out.stdout);
}

#[test]
fn the_pool_workflow_spans_three_nodes() {
    let cluster = Cluster::start();
    let out = run(
        cluster
            .srun()
            .args(["-N", "3", "-n", "4", "--mpi=pmix"])
            .arg(example("pool_workflow"))
            .args(["--cdos", "30", "--max-size", "8388608"]),
        Duration::from_secs(180),
    );
    out.assert_workflow(30);
    // Rank 0 advertises both networks of n1 (and no address of this host's).
    assert!(
        out.stdout.contains("198.18.7.1:") && out.stdout.contains("198.18.8.1:"),
        "{}",
        out.stdout
    );
}

/// `maestro pm --shards K` as a Slurm job of `K` tasks, one on each of `nodes` (`n[5-8]`,
/// say; in order: shard `s` on the `s`-th), each task serving a shard and rank 0 telling
/// the pool's info: the job and that info, checked to list each node's address for its
/// shard.
fn sharded_pm(
    cluster: &Cluster,
    workflow: &str,
    nodes: &str,
    addresses: &[&str],
) -> (common::Group, String) {
    let k = addresses.len().to_string();
    let (pm, info) = common::spawn_pm(
        cluster
            .srun()
            .args(["-N", &k, "-n", &k, "-w", nodes, "--mpi=pmix"])
            .arg(common::maestro())
            .args([
                "pm",
                "--shards",
                &k,
                "--listen",
                "0.0.0.0:0",
                "--print-info",
            ])
            .args(["--workflow", workflow]),
    );
    let parsed = pool::bootstrap::PmInfo::parse(&info).expect("the PM info parses");
    assert_eq!(parsed.shards().count(), addresses.len());
    for (s, node) in addresses.iter().enumerate() {
        let listed = parsed
            .shard(s)
            .expect("a shard")
            .iter()
            .map(ToString::to_string);
        assert!(
            listed.clone().any(|a| a.starts_with(node)),
            "shard {s}: {:?}",
            listed.collect::<Vec<_>>()
        );
    }
    (pm, info)
}

/// Runs the pool workflow (placed by `srun`'s options `place`: nodes and ranks, two of
/// them not producers; 30 CDOs of up to 4 MiB each producer) against the pool of `info`
/// and checks every CDO of the `producers` arrived intact; then `maestro pool status`
/// sees one pool of `shards` shards.
fn workflow_against(
    cluster: &Cluster,
    info: &str,
    (place, producers): (&[&str], usize),
    shards: usize,
) {
    let out = run(
        cluster
            .srun()
            .args(place)
            .arg("--mpi=pmix")
            .env("MSTRO_POOL_MANAGER_INFO", info)
            .arg(example("pool_workflow"))
            .args(["--cdos", "30", "--max-size", "4194304"]),
        Duration::from_secs(180),
    );
    out.assert_workflow_of(producers, 30);
    eprintln!("{}", out.lines_with("consumer: ").join("\n"));
    let status = run(
        std::process::Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_INFO", info)
            .args(["pool", "status"]),
        Duration::from_secs(30),
    );
    let one = format!("one pool of {shards} shards");
    assert!(status.stdout.contains(&one), "{status:?}");
}

/// `maestro pm --shards 3` as a Slurm job of three tasks, one per node: each node's task
/// serves a shard, rank 0 tells the pool's info listing the three nodes' addresses; the
/// workflow (four ranks over the nodes) moves every CDO through them, and `maestro pool
/// status` sees one pool of three shards.
#[test]
fn the_pool_workflow_runs_against_three_shards_on_three_nodes() {
    let cluster = Cluster::start();
    let workflow = format!("shards-{}", std::process::id());
    let nodes = ["198.18.7.1:", "198.18.7.2:", "198.18.7.3:"];
    let (pm, info) = sharded_pm(&cluster, &workflow, "n[1-3]", &nodes);
    workflow_against(&cluster, &info, (&["-N", "3", "-n", "4"], 2), 3);
    drop(pm);
}

/// On 8 nodes: the pool as four shards on n5-n8, the workflow's eight ranks on n1-n4
/// (every CDO crosses nodes to and from its home shard), ten runs against the same pool,
/// each with every checksum verified, the pool one of four shards throughout.
#[test]
#[ignore = "minutes: cargo nextest run --release --test cluster --run-ignored only -E 'test(ten_runs)'"]
fn the_pool_workflow_passes_ten_runs_against_four_shards_on_four_nodes_of_eight() {
    let cluster = Cluster::start_nodes(8);
    let workflow = format!("shards4-{}", std::process::id());
    let nodes = ["198.18.7.5:", "198.18.7.6:", "198.18.7.7:", "198.18.7.8:"];
    let (pm, info) = sharded_pm(&cluster, &workflow, "n[5-8]", &nodes);
    for run in 1..=10 {
        eprintln!("run {run} of 10");
        let place = ["-N", "4", "-n", "8", "-w", "n[1-4]"];
        workflow_against(&cluster, &info, (&place, 6), 4);
    }
    drop(pm);
}

#[test]
fn c_programs_on_three_nodes() {
    let c = installed();
    let cluster = Cluster::start();
    let dir = cluster.scratch("c-roles");
    let script = dir.join("roles.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$PMIX_RANK\" in\n  0) exec {} --clients 2 ;;\n  1) exec {} --cdos 8 ;;\n  2) exec {} --expect 2 ;;\nesac\nexit 3\n",
            c.bin("pm_tool").display(),
            c.bin("producer").display(),
            c.bin("consumer").display()
        ),
    )
    .expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = run(
        cluster
            .srun()
            .args(["-N", "3", "-n", "3", "--mpi=pmix", "--label"])
            .env("MSTRO_SCHEMA_PATH", common::repo().join("examples/c"))
            .env("MSTRO_SCHEMA_LIST", "ecmwf.yaml")
            .env("MSTRO_WORKFLOW_NAME", "cluster-c")
            .env_remove("MSTRO_POOL_MANAGER_INFO")
            .arg(&script),
        Duration::from_secs(120),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout
            .contains("2: consumer: 2 CDOs, 2097152 bytes, all checksums match"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("0: pm-tool: 2 joined, 2 left; stopping"),
        "{}",
        out.stdout
    );
}

/// Runs `pool_workflow` (2 producers of 6 CDOs up to 64 KiB, every one over the fabric:
/// none inline) as `srun -N 2 -n 4 SRUN_ARGS` (with `env` in its environment) with a PM and a tracer of transport events on
/// this host, reached over the bridge (the PM listens everywhere, as on a login node);
/// returns the tracer's 12 events of the fields (of 14: the producers' `ready` CDOs too).
/// Ranks 0-2 run on n1, rank 3 (the consumer) on n2.
fn traced_transfers(
    cluster: &Cluster,
    workflow: &str,
    srun_args: &[&str],
    env: &[(&str, &str)],
) -> Vec<String> {
    let (pm, info) = common::start_pm(workflow, &["--listen", "0.0.0.0:0"]);
    let mut tracer_cmd = std::process::Command::new(example("pool_tracer"));
    tracer_cmd
        .env("MSTRO_POOL_MANAGER_INFO", &info)
        .env("MSTRO_WORKFLOW_NAME", workflow)
        .args(["--kinds", "transport-started", "--count", "14"]);
    let mut tracer = common::Group::spawn(&mut tracer_cmd);
    common::await_line(
        tracer.child.stderr.take().expect("stderr"),
        "pool_tracer: subscribed",
    );
    let mut srun = cluster.srun();
    srun.envs(env.iter().copied());
    let out = run(
        srun.args(["-N", "2", "-n", "4", "--mpi=pmix"])
            .args(srun_args)
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .env("MSTRO_WORKFLOW_NAME", workflow)
            .env("MSTRO_INLINE_MAX", "0")
            .arg(example("pool_workflow"))
            .args(["--cdos", "6", "--max-size", "65536"]),
        Duration::from_secs(120),
    );
    out.assert_workflow(6);
    let events = tracer.wait(Duration::from_secs(30));
    pm.terminate(Duration::from_secs(10));
    // The fields' transfers (the producers' 0-byte `ready` CDOs go with their tickets).
    let lines: Vec<String> = events
        .stdout
        .lines()
        .filter(|l| l.contains("TransportStarted") && l.contains("/field-"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 12, "{}", events.stdout);
    lines
}

/// Two producers on one node with two NICs get different NICs (ties spread by local rank)
/// and their CDOs travel over their own NIC: the transport events name the producer's
/// address.
#[test]
fn each_rank_moves_data_over_its_own_nic() {
    let cluster = Cluster::start();
    let events = traced_transfers(&cluster, "nics", &[], &[]);
    let rma: Vec<&String> = events
        .iter()
        .filter(|l| l.contains("by rma over tcp"))
        .collect();
    // Producer 1 (local rank 1) on eth1, producer 2 (local rank 2) on eth0; the consumer
    // (local rank 0 on n2) first on eth0, and on eth1 too: producer 1's CDOs reach it there.
    // Each producer's 0-byte field goes with its ticket, whatever MSTRO_INLINE_MAX says.
    let from = |from: &str, to: &str| {
        rma.iter()
            .filter(|l| l.contains(&format!("from {from} to {to}")))
            .count()
    };
    assert_eq!(from("198.18.8.1", "198.18.8.2"), 5, "{events:#?}");
    assert_eq!(from("198.18.7.1", "198.18.7.2"), 5, "{events:#?}");
    let inline = events.iter().filter(|l| l.contains("by inline (0 bytes"));
    assert_eq!(inline.count(), 2, "{events:#?}");
}

/// Two nodes sharing a directory, as a parallel file system is shared: with Maestro's GFS
/// settings every field travels as a file the producer on n1 wrote and the consumer on n2
/// read (none by RMA), and nothing is left in the directory after the job.
#[test]
fn across_nodes_the_fields_go_through_files_both_nodes_see() {
    let cluster = Cluster::start();
    let dir = cluster.scratch("gfs");
    let dir_text = dir.display().to_string();
    let events = traced_transfers(
        &cluster,
        "gfs-nodes",
        &[],
        &[
            ("MSTRO_TRANSPORT_DEFAULT", "GFS"),
            ("MSTRO_TRANSPORT_GFS_DIR", &dir_text),
        ],
    );
    let by_file = format!("by gfs (the file {dir_text}/maestro-gfs-");
    assert_eq!(
        events.iter().filter(|l| l.contains(&by_file)).count(),
        12,
        "{events:#?}"
    );
    assert!(!events.iter().any(|l| l.contains("by rma")), "{events:#?}");
    assert_eq!(
        std::fs::read_dir(&dir).expect("dir").count(),
        0,
        "nothing left behind"
    );
}

/// Data that outlives its producer across nodes: a PM keeping GFS offers in a directory
/// every node sees; the C producer on n1 offers four fields through files, withdraws and
/// disposes them at once and ends; only then does the C consumer on n2 start, and it gets
/// all four, named as the producer's. When the PM stops, only the field marked to persist
/// is left.
#[test]
fn across_nodes_fields_outlive_their_producer_in_files_both_nodes_see() {
    let c = installed();
    let cluster = Cluster::start();
    let dir = cluster.scratch("gfs-outlive");
    let dir_text = dir.display().to_string();
    let (pm, info) = common::start_pm(
        "gfs-outlive",
        &["--listen", "0.0.0.0:0", "--gfs-dir", &dir_text],
    );
    let role = |node: &str, role: &str| {
        let out = run(
            cluster
                .srun_on(node, 1)
                .env("MSTRO_POOL_MANAGER_INFO", &info)
                .env("MSTRO_WORKFLOW_NAME", "gfs-outlive")
                .env("MSTRO_TRANSPORT_DEFAULT", "GFS")
                .env("MSTRO_TRANSPORT_GFS_DIR", &dir_text)
                .arg(c.bin("outlive"))
                .args([role, "4"]),
            Duration::from_secs(120),
        );
        assert_eq!(out.code(), Some(0), "{role} on {node}: {out:?}");
        assert!(out.stdout.contains("outlive: all hold"), "{out:?}");
        out
    };
    role("n1", "produce");
    let consumed = role("n2", "consume");
    assert_eq!(
        consumed.stdout.matches("comes from forecast:0").count(),
        4,
        "{consumed:?}"
    );
    common::assert_only_persisted(
        pm,
        &dir,
        "gfs-outlive",
        &["field-3", "field-3.maestro.json"],
    );
}

/// `--maestro-nic=lo`: every chosen endpoint is 127.0.0.1, which on n2 is n2 itself. The
/// producers (n1) and the consumer (n2) still move everything: over their endpoints on the
/// cluster's networks (every app opens one per network), else the stream.
#[test]
fn loopback_as_the_nic_of_several_nodes_never_carries_a_transfer_between_them() {
    let cluster = Cluster::start();
    let moved: Vec<String> = traced_transfers(&cluster, "lo-nics", &["--maestro-nic=lo"], &[])
        .into_iter()
        .filter(|t| !t.contains("by inline (0 bytes"))
        .collect();
    assert_eq!(moved.len(), 10, "{moved:#?}");
    for t in moved {
        assert!(
            t.contains("the provider's endpoint 127.0.0.1 is a loopback address, which does not reach from n1 to n2")
                && !t.contains("from 127.0.0.1"),
            "{t}"
        );
    }
}

/// `srun --maestro-nic` on a node with two NICs: its two tasks get different NICs (the tie
/// spread by local task id), which is what the pool's endpoints then open on.
#[test]
fn the_spank_plugin_gives_two_tasks_of_a_two_nic_node_different_nics() {
    let cluster = Cluster::start();
    let out = run(
        cluster
            .srun_on("n1", 2)
            .args(["--maestro-nic", "--maestro-verbose"])
            .args([
                "sh",
                "-c",
                "echo \"task $SLURM_LOCALID: [$MSTRO_OFI_IFACE]\"",
            ]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("task 0: [eth0]"), "{}", out.stdout);
    assert!(out.stdout.contains("task 1: [eth1]"), "{}", out.stdout);
    assert!(
        out.stderr.contains("maestro-spank: task 1 on n1: NIC eth1")
            && out
                .stderr
                .contains("tie among eth0, eth1 spread by local rank 1"),
        "{}",
        out.stderr
    );
    // The NIC named must exist on the node.
    let bad = run(
        cluster
            .srun_on("n2", 1)
            .args(["--maestro-nic=eth7", "true"]),
        Duration::from_secs(60),
    );
    assert_ne!(bad.code(), Some(0), "{bad:?}");
    assert!(
        bad.stderr
            .contains("no NIC \"eth7\" on node n2; NICs here: eth0, eth1, lo"),
        "{}",
        bad.stderr
    );
}

/// `--maestro-bind=near-nic` with a real machine's topology (MSTRO_TOPOLOGY): tasks are
/// given the InfiniBand NIC and CPUs near it, shown but not applied to this machine; on the
/// node's own NICs (locality unknown in a VM) the tasks stay as launched, and say why.
#[test]
fn near_nic_placement_says_what_it_does_and_why_not() {
    let cluster = Cluster::start();
    let xml = common::repo().join("inventory/tests/data/24em64t-2n6c2t-pci.xml");
    let foreign = run(
        cluster
            .srun_on("n1", 2)
            .args(["--maestro-nic"])
            .args(["--maestro-bind=near-nic", "--maestro-verbose"])
            .env("MSTRO_TOPOLOGY", &xml)
            .args([
                "sh",
                "-c",
                "echo \"task $SLURM_LOCALID: [$MSTRO_OFI_IFACE]\"",
            ]),
        Duration::from_secs(60),
    );
    assert_eq!(foreign.code(), Some(0), "{foreign:?}");
    assert_eq!(foreign.lines_with(": [ib0]").len(), 2, "{}", foreign.stdout);
    for cpus in ["0,2,4,6,8,10", "12,14,16,18,20,22"] {
        assert!(
            foreign.stderr.contains(&format!(
                "not applied (MSTRO_TOPOLOGY describes another machine): CPUs {cpus}"
            )),
            "{}",
            foreign.stderr
        );
    }
    let own = run(
        cluster
            .srun_on("n1", 2)
            .args(["--maestro-bind=near-nic", "--maestro-verbose", "true"]),
        Duration::from_secs(60),
    );
    assert_eq!(own.code(), Some(0), "{own:?}");
    assert!(
        own.stderr
            .contains("near-nic placement not applied: eth0: locality unknown"),
        "{}",
        own.stderr
    );
    // --cpu-bind=none asks for no binding: nothing "asked for" is kept.
    let none = run(
        cluster.srun_on("n1", 2).args([
            "--cpu-bind=none",
            "--maestro-bind=near-nic",
            "--maestro-verbose",
            "true",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(none.code(), Some(0), "{none:?}");
    assert!(!none.stderr.contains("is kept"), "{}", none.stderr);
}

/// A pool manager and a tracer on this host, reached from the nodes over the bridge, and
/// Python tasks (maestro_core from the test installation) on nodes that join it.
struct HostPool {
    pm: common::Group,
    info: String,
    workflow: &'static str,
    site: std::path::PathBuf,
    tracer: common::Group,
    /// What the tracer prints, as JSON lines.
    events: std::sync::mpsc::Receiver<String>,
}

impl HostPool {
    /// Starts the PM for `workflow` and a tracer of the event `kinds`.
    fn start(workflow: &'static str, kinds: &str) -> HostPool {
        HostPool::start_with(workflow, kinds, &[])
    }

    /// As [`HostPool::start`], the PM started with `pm_args` too.
    fn start_with(workflow: &'static str, kinds: &str, pm_args: &[&str]) -> HostPool {
        HostPool::start_with_env(workflow, kinds, pm_args, &[])
    }

    /// As [`HostPool::start_with`], the PM with `env` added to its environment.
    fn start_with_env(
        workflow: &'static str,
        kinds: &str,
        pm_args: &[&str],
        env: &[(&str, &str)],
    ) -> HostPool {
        let site = installed().site_packages();
        // The nodes reach this host over the bridge (see `each_rank_moves_data_over_its_own_nic`).
        let mut args = vec!["--listen", "0.0.0.0:0"];
        args.extend_from_slice(pm_args);
        let (pm, info) = common::start_pm_with_env(workflow, &args, env);
        let mut cmd = std::process::Command::new(example("pool_tracer"));
        cmd.env("MSTRO_POOL_MANAGER_INFO", &info)
            .env("MSTRO_WORKFLOW_NAME", workflow)
            .args(["--kinds", kinds]);
        let mut tracer = common::Group::spawn(&mut cmd);
        common::await_line(tracer.child.stderr.take().expect("stderr"), "subscribed");
        let events = common::lines(tracer.child.stdout.take().expect("stdout"));
        HostPool {
            pm,
            info,
            workflow,
            site,
            tracer,
            events,
        }
    }

    /// `srun -N 1 -n 1 -w NODE SRUN_ARGS python -c SCRIPT ARGS` joining this pool.
    fn python(
        &self,
        cluster: &Cluster,
        node: &str,
        srun_args: &[&str],
        script: &str,
        args: &[&str],
    ) -> std::process::Command {
        let mut cmd = cluster.srun_on(node, 1);
        cmd.env("MSTRO_POOL_MANAGER_INFO", &self.info)
            .env("MSTRO_WORKFLOW_NAME", self.workflow)
            .env("PYTHONPATH", &self.site)
            .args(srun_args)
            .arg(common::repo().join(".venv/bin/python"))
            .args(["-c", script])
            .args(args);
        cmd
    }

    /// Runs [`HostPool::python`] to its end (60 s at most), which must succeed; what it
    /// printed.
    fn run_python(&self, cluster: &Cluster, node: &str, script: &str, args: &[&str]) -> String {
        let mut cmd = self.python(cluster, node, &[], script, args);
        let done = common::Group::spawn(&mut cmd).wait(Duration::from_secs(60));
        assert_eq!(done.code(), Some(0), "{done:?}");
        done.stdout
    }

    /// Stops the tracer and the PM.
    fn stop(self) {
        self.tracer.terminate(Duration::from_secs(10));
        self.pm.terminate(Duration::from_secs(10));
    }
}

/// A Python provider: offers the CDO named by argv[1], of argv[3] bytes, as component
/// argv[2], prints `offered NAME` and stays.
const PROVIDE: &str = "import sys, time, numpy as np, maestro_core as M\n\
    M.mstro_init(None, sys.argv[2], 0)\n\
    keep = []\n\
    for name in sys.argv[1].split(','):\n    c = M.mstro_cdo_declare(name, None)\n    a = np.full(int(sys.argv[3]), 7, dtype=np.uint8)\n    M.mstro_cdo_attribute_set(c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, a)\n    M.mstro_cdo_seal(c)\n    M.mstro_cdo_offer(c)\n    keep.append(a)\n\
    print('offered', sys.argv[1], flush=True)\n\
    time.sleep(600)\n";

/// Starts a provider of `names` (comma-separated) and waits until they are offered.
fn provider(
    pool: &HostPool,
    cluster: &Cluster,
    node: &str,
    srun_args: &[&str],
    names: &str,
    component: &str,
    size: usize,
) -> common::Group {
    let size = size.to_string();
    let mut cmd = pool.python(
        cluster,
        node,
        srun_args,
        PROVIDE,
        &[names, component, &size],
    );
    let mut g = common::Group::spawn(&mut cmd);
    common::await_line(g.child.stdout.take().expect("stdout"), "offered");
    g
}

/// A provider on n2 offers `lost` (64 MiB), one on n1 offers `kept`. With n2's provider
/// stopped mid-transfer, the consumer on n3 demands `lost`; then node n2 is killed whole
/// (its slurmd and tasks): the tracer (on this host) sees n2's app leave, the demand of
/// `lost` fails with MSTRO_NOENT (no provider left), and `kept` still arrives.
#[test]
fn a_node_that_dies_takes_only_what_it_alone_provided() {
    let cluster = Cluster::start();
    let pool = HostPool::start("node-loss", "app-leave,transport-started");
    let _doomed = provider(&pool, &cluster, "n2", &[], "lost", "doomed", 64 << 20);
    let _survivor = provider(&pool, &cluster, "n1", &[], "kept", "survivor", 1 << 20);
    // Stop n2's provider: its reads stall, as a dying node's would.
    let doomed: Vec<i32> = std::fs::read_dir("/proc")
        .expect("proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("doomed"))
                && std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.starts_with("python"))
        })
        .collect();
    assert_eq!(doomed.len(), 1, "the provider on n2: {doomed:?}");
    // SAFETY: stopping the test's own child process.
    unsafe { libc::kill(doomed[0], libc::SIGSTOP) };
    const CONSUME: &str = "import maestro_core as M\n\
        M.mstro_init(None, 'consumer', 0)\n\
        lost = M.mstro_cdo_declare('lost', None)\n\
        kept = M.mstro_cdo_declare('kept', None)\n\
        M.mstro_cdo_require(kept)\n\
        print('demanding lost', flush=True)\n\
        try:\n    M.mstro_cdo_demand(lost)\n    print('lost: arrived', flush=True)\n\
        except M.MaestroError as e:\n    print('lost:', e.status, e.message, flush=True)\n\
        M.mstro_cdo_demand(kept)\n\
        print('kept:', len(M.mstro_cdo_access_ptr(kept)), 'bytes', flush=True)\n\
        M.mstro_cdo_dispose(kept)\n\
        M.mstro_finalize()\n";
    let mut consumer = common::Group::spawn(&mut pool.python(&cluster, "n3", &[], CONSUME, &[]));
    let said = common::lines(consumer.child.stdout.take().expect("stdout"));
    let t = Duration::from_secs(60);
    common::expect_line(&said, &["demanding lost"], t);
    // The transfer of `lost` from the stopped provider has started (the PM said so).
    common::expect_line(
        &pool.events,
        &["\"TransportStarted\"", "\"cdo\":\"lost\""],
        t,
    );
    let killed = cluster.script(&["kill-node", "2"]);
    assert_eq!(killed.code(), Some(0), "{killed:?}");
    let lost = common::expect_line(&said, &["lost:"], t);
    assert!(
        lost.starts_with("lost: 7 ") && lost.contains("no provider"),
        "MSTRO_NOENT expected: {lost}"
    );
    assert_eq!(
        common::expect_line(&said, &["kept:"], t),
        "kept: 1048576 bytes"
    );
    let done = consumer.wait(t);
    assert_eq!(done.code(), Some(0), "{done:?}");
    common::expect_line(
        &pool.events,
        &["\"component\":\"doomed\"", "connection lost"],
        t,
    );
    pool.stop();
}

/// A producer on n1 whose endpoint is on eth1 (`--maestro-nic=eth1`) and a consumer on n2:
/// the first CDO moves by RMA from n1's eth1 address; then n1's eth1 goes down, the
/// producer's client reports it, a subscriber on this host gets the fabric event, and the
/// next CDO goes by RMA over the other network (both apps have an endpoint there).
#[test]
fn a_link_down_on_one_node_reroutes_the_next_transfer() {
    use std::io::Write;
    let cluster = Cluster::start();
    let pool = HostPool::start("link-down", "fabric,transport-started");
    let _producer = provider(
        &pool,
        &cluster,
        "n1",
        &["--maestro-nic=eth1"],
        "before,after",
        "producer",
        1 << 20,
    );
    const CONSUME: &str = "import sys, maestro_core as M\n\
        M.mstro_init(None, 'consumer', 0)\n\
        for name in ('before', 'after'):\n    c = M.mstro_cdo_declare(name, None)\n    M.mstro_cdo_demand(c)\n    v = M.mstro_cdo_access_ptr(c)\n    print(name + ':', len(v), 'bytes', set(v.tobytes()) == {7}, flush=True)\n    del v\n    M.mstro_cdo_dispose(c)\n    sys.stdin.readline()\n\
        M.mstro_finalize()\n";
    let mut consumer = common::Group::spawn_with_stdin(
        &mut pool.python(&cluster, "n2", &[], CONSUME, &[]),
        std::process::Stdio::piped(),
    );
    let said = common::lines(consumer.child.stdout.take().expect("stdout"));
    let mut go = consumer.child.stdin.take().expect("stdin");
    let t = Duration::from_secs(30);
    assert_eq!(
        common::expect_line(&said, &["before:"], t),
        "before: 1048576 bytes True"
    );
    common::expect_line(
        &pool.events,
        &[
            "\"TransportStarted\"",
            "by rma over tcp;ofi_rxm from 198.18.8.1",
        ],
        t,
    );
    let down = cluster.script(&["link", "1", "eth1", "down"]);
    assert_eq!(down.code(), Some(0), "{down:?}");
    common::expect_line(&pool.events, &["link eth1 down", "198.18.8.1/24"], t);
    writeln!(go, "go").expect("consumer stdin");
    assert_eq!(
        common::expect_line(&said, &["after:"], t),
        "after: 1048576 bytes True"
    );
    common::expect_line(
        &pool.events,
        &[
            "\"TransportStarted\"",
            "by rma over tcp;ofi_rxm from 198.18.7.1 to 198.18.7.2 (another network: the provider's endpoint 198.18.8.1 is on a link that is down",
        ],
        t,
    );
    writeln!(go, "go").expect("consumer stdin");
    drop(go);
    let done = consumer.wait(Duration::from_secs(60));
    assert_eq!(done.code(), Some(0), "{done:?}");
    pool.stop();
}

/// The fabric beyond the node orders offers: a pool manager given the cluster's switches
/// (`maestro pm --fabric topology.conf`: n1-n4 under leaf1, n5-n8 under leaf2, a spine
/// above) tickets a consumer on n7 from the provider on n6, under its own leaf, though the
/// one on n2 offered the same name first; a consumer on n3 from n2's. Without the
/// topology, both get the first offer (n2's).
#[test]
fn of_two_offers_a_consumer_gets_the_one_under_its_own_leaf() {
    let cluster = Cluster::start_nodes(8);
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = common::topology_conf(dir.path(), &["n[1-4]", "n[5-8]"]);
    let conf = conf.to_str().expect("utf-8 path");
    const CONSUME: &str = "import maestro_core as M\n\
        M.mstro_init(None, 'consumer', 0)\n\
        c = M.mstro_cdo_declare('field', None)\n\
        M.mstro_cdo_demand(c)\n\
        print('field:', len(M.mstro_cdo_access_ptr(c)), 'bytes', flush=True)\n\
        M.mstro_cdo_dispose(c)\n\
        M.mstro_finalize()\n";
    // Which provider the consumer on `node` was ticketed from: the component of the app
    // whose offer the transport-started event names.
    let served = |pool: &HostPool, node: &str| {
        let said = pool.run_python(&cluster, node, CONSUME, &[]);
        assert!(said.contains("field: 4096 bytes"), "{said}");
        let started = common::expect_line(
            &pool.events,
            &["\"TransportStarted\"", "\"cdo\":\"field\""],
            Duration::from_secs(30),
        );
        ["far", "near"]
            .into_iter()
            .find(|p| started.contains(&format!("from {p}:0 by")))
            .unwrap_or_else(|| panic!("which provider? {started}"))
    };
    for (fabric, n7, n3) in [(true, "near", "far"), (false, "far", "far")] {
        let pm_args: &[&str] = if fabric { &["--fabric", conf] } else { &[] };
        let workflow = if fabric { "near-leaf" } else { "no-leaf" };
        let pool = HostPool::start_with(workflow, "transport-started", pm_args);
        let _far = provider(&pool, &cluster, "n2", &[], "field", "far", 4096);
        let _near = provider(&pool, &cluster, "n6", &[], "field", "near", 4096);
        assert_eq!(served(&pool, "n7"), n7, "n7, with the fabric: {fabric}");
        assert_eq!(served(&pool, "n3"), n3, "n3, with the fabric: {fabric}");
        pool.stop();
    }
}

/// A switch link cut in a simulated InfiniBand fabric (ibsim, the cluster's nodes as its
/// adapters: n1, n2 under leaf1, n3, n4 under leaf2) reaches the pool: the PM discovers the
/// fabric (`--discover-fabric`, libibnetdisc) and looks again every half second; when n3's
/// link is cut in ibsim's console, a subscriber hears `switch link leaf2[1] - n3[1] down`
/// within 5 s, `maestro pool fabric` lists it, a consumer on n4 that got `field` from n3
/// (its leaf) gets it from n1 now, and its demand of `lonely`, which only n3 offers, fails
/// naming the link.
#[test]
fn a_switch_link_cut_in_ibsim_is_a_pool_event_and_moves_demands() {
    let cluster = Cluster::start_nodes(8);
    let dir = tempfile::tempdir().expect("tempdir");
    let net = dir.path().join("two-leaves");
    std::fs::write(&net, common::ibsim::fat_tree(1, 2, 2)).expect("write the net file");
    let mut sim = common::ibsim::Ibsim::start(&net, "cut");
    let pool = HostPool::start_with_env(
        "switch-cut",
        "fabric,transport-started",
        &["--discover-fabric", "--fabric-watch", "0.5"],
        &sim.env(),
    );
    let _far = provider(&pool, &cluster, "n1", &[], "field", "far", 4096);
    let _near = provider(&pool, &cluster, "n3", &[], "field,lonely", "near", 4096);
    const CONSUME: &str = "import sys, maestro_core as M\n\
        M.mstro_init(None, 'consumer', 0)\n\
        for name in sys.argv[1].split(','):\n    c = M.mstro_cdo_declare(name, None)\n    try:\n        M.mstro_cdo_demand(c)\n        print(name + ':', len(M.mstro_cdo_access_ptr(c)), 'bytes', flush=True)\n        M.mstro_cdo_dispose(c)\n    except M.MaestroError as e:\n        print(name + ':', e.status, e.message, flush=True)\n\
        M.mstro_finalize()\n";
    let consume = |names: &str| pool.run_python(&cluster, "n4", CONSUME, &[names]);
    let ticketed_from = || {
        common::expect_line(
            &pool.events,
            &["\"TransportStarted\"", "\"cdo\":\"field\""],
            Duration::from_secs(30),
        )
    };
    assert!(consume("field").contains("field: 4096 bytes"));
    assert!(
        ticketed_from().contains("from near:0 by"),
        "n3, under n4's leaf"
    );
    let cut = Instant::now();
    sim.console("Unlink \"n3\"");
    common::expect_line(
        &pool.events,
        &["\"Fabric\"", "switch link leaf2[1] - n3[1] down"],
        Duration::from_secs(5),
    );
    let heard = cut.elapsed();
    eprintln!(
        "switch link cut in ibsim to the pool event: {:.3} s",
        heard.as_secs_f64()
    );
    let fabric = common::run(
        Command::new(common::maestro()).args(["pool", "fabric", "--info", &pool.info]),
        Duration::from_secs(30),
    );
    assert!(
        fabric.stdout.contains("switch link leaf2[1] - n3[1]"),
        "{fabric:?}"
    );
    let said = consume("field,lonely");
    assert!(said.contains("field: 4096 bytes"), "{said}");
    assert!(ticketed_from().contains("from far:0 by"), "n1 now");
    assert!(
        said.contains("lonely: 7 ") && said.contains("no path through the switches from n4 to the providers on n3 (switch links down: leaf2[1] - n3[1])"),
        "{said}"
    );
    pool.stop();
}
