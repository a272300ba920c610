//! The producer/consumer workflow (examples/pool_workflow.rs) under our PMIx host, Open MPI
//! and without any host (local pool). The Slurm run is in tests/slurm.rs.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{example, maestro_run, run};

/// Smaller than the main job's defaults, for a debug build.
const ARGS: [&str; 4] = ["--cdos", "40", "--max-size", "8388608"];

#[test]
fn under_maestro_run() {
    let exe = example("pool_workflow");
    let mut args = vec!["-n", "4", exe.to_str().expect("utf-8 path")];
    args.extend(ARGS);
    let out = maestro_run(&args);
    out.assert_workflow(40);
    // Our host issues credentials, so the PM has every app's checked by it.
    assert!(
        out.stdout
            .contains("JOIN needs the workflow secret; credentials checked by this PMIx host"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_workflow_of_no_cdos_ends_every_time() {
    // The consumer has nothing to wait for but the producers' word that they want its
    // `consumer-done`: before, it offered and withdrew it before they asked, and they
    // waited for it until killed (3 runs in 5).
    let exe = example("pool_workflow");
    for _ in 0..3 {
        let out = maestro_run(&["-n", "4", exe.to_str().expect("utf-8 path"), "--cdos", "0"]);
        out.assert_workflow(0);
    }
}

#[test]
fn a_pool_manager_rank_the_job_does_not_have_is_refused_by_name() {
    let out = run(
        Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_RANK", "7")
            .args(["run", "-n", "4"])
            .arg(example("pool_workflow"))
            .args(["--cdos", "1"]),
        Duration::from_secs(120),
    );
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("MSTRO_POOL_MANAGER_RANK=7 names no rank of this job of 4 (0 to 3)"),
        "{}",
        out.stderr
    );
}

#[test]
fn under_mpirun() {
    let out = run(
        Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
            .arg(example("pool_workflow"))
            .args(ARGS),
        Duration::from_secs(180),
    );
    out.assert_workflow(40);
}

#[test]
fn without_a_pmix_host_as_a_local_pool() {
    let out = run(
        Command::new(example("pool_workflow")).args(ARGS),
        Duration::from_secs(180),
    );
    assert!(
        out.stdout.contains("running a local pool"),
        "{}",
        out.stdout
    );
    out.assert_workflow(40);
}

#[test]
fn bad_options_exit_2() {
    let out = run(
        Command::new(example("pool_workflow")).args(["--cdos", "many"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("not a number"), "{}", out.stderr);
}

#[test]
fn the_pm_benchmark_runs_and_reports() {
    let out = run(
        Command::new(common::maestro()).args([
            "bench",
            "pm",
            "--injectors",
            "1",
            "--cdos",
            "3000",
            "--batch",
            "500",
            "--require",
            "--subscribers",
            "2",
            "--json",
        ]),
        Duration::from_secs(120),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(
        (&v["cdos"], &v["subscribers"], &v["injectors"]),
        (&3000.into(), &2.into(), &1.into())
    );
    for rate in ["offers_per_sec", "requires_per_sec", "events_per_sec"] {
        assert!(v[rate].as_f64().is_some_and(|r| r > 0.0), "{rate}: {v}");
    }
    let bad = run(
        Command::new(common::maestro_bench()).args([
            "pm-injector",
            "--pm",
            "nonsense",
            "--role",
            "producer",
            "--index",
            "0",
            "--cdos",
            "1",
            "--batch",
            "1",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(bad.code(), Some(1), "{bad:?}");
    assert!(
        bad.stderr.contains("is not of the form mstro-pm-v1"),
        "{}",
        bad.stderr
    );
}

#[test]
fn a_standalone_pool_manager_serves_another_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let info_file = dir.path().join("pm.info");
    let file_arg = info_file.to_string_lossy().into_owned();
    let (pm, info) = common::start_pm("standalone", &["--info-file", &file_arg]);
    let on_disk = std::fs::read_to_string(&info_file).expect("info file");
    assert_eq!(on_disk.trim(), info);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&info_file)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let exe = example("pool_workflow");
    let out = run(
        Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .args(["run", "-n", "3"])
            .arg(exe)
            .args(["--cdos", "10", "--max-size", "65536"]),
        Duration::from_secs(120),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout.contains("consumer: 10 CDOs") && out.stdout.contains("all checksums match"),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("rank 0: pool manager at"),
        "the job must not start its own PM"
    );
    let end = pm.terminate(Duration::from_secs(10));
    assert_eq!(end.code(), Some(0), "{end:?}");
    assert!(!info_file.exists(), "the info file is removed at exit");
}

/// `maestro pm --shards 4`: four pool managers sharing the CDO names, one PM info listing
/// them all; a job of the workflow joins it and moves every CDO through the shards its
/// names live at, as through one manager.
#[test]
fn a_pool_of_four_shards_serves_a_workflow_as_one_manager_does() {
    let workflow = format!("sharded-{}", std::process::id());
    let (pm, info) = common::start_pm(&workflow, &["--shards", "4"]);
    let parsed = pool::bootstrap::PmInfo::parse(&info).expect("the PM info parses");
    assert_eq!(parsed.shards().count(), 4, "{info}");
    assert!(info.starts_with("mstro-pm-v2:"), "{info}");
    let exe = example("pool_workflow");
    let out = run(
        Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .args(["run", "-n", "4"])
            .arg(exe)
            .args(ARGS),
        Duration::from_secs(180),
    );
    out.assert_workflow(40);
    // `maestro pool` shows one pool: every shard's part, the apps of shard 0.
    let status = run(
        Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .args(["pool", "status"]),
        Duration::from_secs(30),
    );
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        status.stdout.contains("one pool of 4 shards"),
        "{}",
        status.stdout
    );
    for s in 0..4 {
        assert!(
            status.stdout.contains(&format!("shard {s} of 4:")),
            "{}",
            status.stdout
        );
    }
    let json = run(
        Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .args(["pool", "status", "--json"]),
        Duration::from_secs(30),
    );
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON status");
    let shards = v["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 4, "{v}");
    let offers: u64 = shards.iter().filter_map(|s| s["cdos"].as_u64()).sum();
    let offered = v["operations"]["offer"].as_u64().unwrap_or(0);
    assert!(
        offered >= 80,
        "two producers offered 40 CDOs each, over the shards: {v}"
    );
    assert_eq!(
        offers,
        v["cdos"]
            .as_object()
            .map_or(0, |c| c.values().filter_map(|n| n.as_u64()).sum()),
        "{v}"
    );
    let end = pm.terminate(Duration::from_secs(10));
    assert_eq!(end.code(), Some(0), "{end:?}");
    let refused = run(
        Command::new(common::maestro()).args(["pm", "--shards", "0"]),
        Duration::from_secs(30),
    );
    assert_eq!(refused.code(), Some(2), "{refused:?}");
    assert!(refused.stderr.contains("--shards"), "{refused:?}");
}

/// The workflow as a job of three ranks that joins the pool manager another job
/// published for `workflow` (in the node's publications under `runtime_dir`), with
/// success.
fn join_published(runtime_dir: &std::path::Path, workflow: &str) -> common::Output {
    let out = run(
        Command::new(common::maestro())
            .env("XDG_RUNTIME_DIR", runtime_dir)
            .env("MSTRO_WORKFLOW_NAME", workflow)
            .env_remove("MSTRO_POOL_MANAGER_INFO")
            .args(["run", "-n", "3"])
            .arg(example("pool_workflow"))
            .args(["--cdos", "10", "--max-size", "65536"])
            .args(["--join-published", "20"]),
        Duration::from_secs(120),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    out
}

/// `maestro pm` run as a job of its own under `maestro run` publishes its PM info through
/// PMIx; a second `maestro run` job of the workflow finds it by lookup (no environment
/// variable, no file) and moves every CDO through it. The entry is gone once the PM's job
/// ended.
#[test]
fn another_job_finds_the_pool_manager_by_pmix_lookup() {
    let runtime_dir = tempfile::tempdir().expect("tempdir");
    let workflow = format!("cross-job-{}", std::process::id());
    let mut pm_cmd = Command::new(common::maestro());
    pm_cmd
        .env("XDG_RUNTIME_DIR", runtime_dir.path())
        .args(["run", "-n", "1", "--"])
        .arg(common::maestro())
        .args(["pm", "--print-info", "--workflow", &workflow]);
    let (pm, _) = common::spawn_pm(&mut pm_cmd);
    let store = runtime_dir.path().join("maestro").join("pmix");
    let entries = || std::fs::read_dir(&store).map(|d| d.count()).unwrap_or(0);
    assert_eq!(entries(), 1, "the PM info is published node-wide");
    let out = join_published(runtime_dir.path(), &workflow);
    assert!(
        out.stdout
            .contains("joining the pool manager another job published")
            && out.stdout.contains("all checksums match"),
        "{}",
        out.stdout
    );
    // The launcher forwards SIGTERM to the PM and, stopped by it, exits with 128 + 15.
    let end = pm.terminate(Duration::from_secs(10));
    assert_eq!(end.code(), Some(143), "{end:?}");
    assert!(
        end.stderr
            .contains("announced through PMIx to this job and other jobs"),
        "{end:?}"
    );
    assert_eq!(
        entries(),
        0,
        "the job's publications are removed when it ends"
    );
}

/// `maestro pm --shards 3` as a job of three ranks: each rank is a shard (its own
/// process), rank 0 announces the pool's PM info listing all three; another job finds it
/// by lookup and moves every CDO through the shards; `maestro pool` shows one pool. A job
/// of another number of ranks is refused, saying how many to run.
#[test]
fn the_ranks_of_a_job_are_the_shards_of_one_pool() {
    let runtime_dir = tempfile::tempdir().expect("tempdir");
    let workflow = format!("rank-shards-{}", std::process::id());
    let mut pm_cmd = Command::new(common::maestro());
    pm_cmd
        .env("XDG_RUNTIME_DIR", runtime_dir.path())
        .args(["run", "-n", "3", "--"])
        .arg(common::maestro())
        .args([
            "pm",
            "--shards",
            "3",
            "--print-info",
            "--workflow",
            &workflow,
        ]);
    let (pm, info) = common::spawn_pm(&mut pm_cmd);
    let parsed = pool::bootstrap::PmInfo::parse(&info).expect("the PM info parses");
    assert_eq!(parsed.shards().count(), 3, "{info}");
    let out = join_published(runtime_dir.path(), &workflow);
    assert!(out.stdout.contains("all checksums match"), "{}", out.stdout);
    let status = run(
        Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .args(["pool", "status"]),
        Duration::from_secs(30),
    );
    assert!(status.stdout.contains("one pool of 3 shards"), "{status:?}");
    // The launcher forwards SIGTERM to every shard and, stopped by it, exits 128 + 15.
    let end = pm.terminate(Duration::from_secs(10));
    assert_eq!(end.code(), Some(143), "{end:?}");
    for s in 0..3 {
        assert!(
            end.stderr.contains(&format!("shard {s} of 3 of workflow")),
            "{end:?}"
        );
    }
    let refused = run(
        Command::new(common::maestro())
            .env("XDG_RUNTIME_DIR", runtime_dir.path())
            .args(["run", "-n", "2", "--"])
            .arg(common::maestro())
            .args(["pm", "--shards", "3", "--workflow", &workflow]),
        Duration::from_secs(60),
    );
    assert_ne!(refused.code(), Some(0), "{refused:?}");
    assert!(
        refused.stderr.contains("--shards 3 in a job of 2 ranks"),
        "{refused:?}"
    );
}

/// Without a published pool manager, `--join-published` gives up after its wait and
/// says what to do.
#[test]
fn join_published_without_a_pool_manager_says_what_to_do() {
    let runtime_dir = tempfile::tempdir().expect("tempdir");
    let out = run(
        Command::new(common::maestro())
            .env("XDG_RUNTIME_DIR", runtime_dir.path())
            .env("MSTRO_WORKFLOW_NAME", "nobody-serves-this")
            .env_remove("MSTRO_POOL_MANAGER_INFO")
            .args(["run", "-n", "3"])
            .arg(example("pool_workflow"))
            .args(["--cdos", "1", "--join-published", "1"]),
        Duration::from_secs(60),
    );
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("no pool manager for workflow \"nobody-serves-this\"")
            && out
                .stderr
                .contains("maestro pm --workflow nobody-serves-this"),
        "{out:?}"
    );
}

/// `maestro bench pool` runs end to end on both providers users compare (a provider
/// process, a real PM, verified first demands, the raw baseline, the event-driven stream
/// with every CDO's bytes checked: on shm, eight of 1 MiB leased and copied in pieces by
/// the consumer's copy crew, offered and taken in batches of 16; over tcp, two in flight;
/// and the CPU the consumer, the PM and the
/// provider spent per CDO of it) and reports every size.
#[test]
fn the_pool_benchmark_runs_and_reports() {
    for provider in ["shm", "tcp;ofi_rxm"] {
        let mut bench = Command::new(common::maestro());
        bench.args([
            "bench",
            "pool",
            "--provider",
            provider,
            "--sizes",
            "64,1M",
            "--volume",
            "8M",
            "--window",
            "2",
            "--events",
            "--verify-all",
            "--json",
        ]);
        // Same node: next to Open MPI's send/recv, as users compare; over the network
        // with a require before each demand, landing in the consumer's own memory.
        let mpi = provider == "shm";
        if mpi {
            // With groups, whose reference is MPI with all their messages in flight; the
            // provider's buffers plain, so that consumers copy them (never map them).
            bench.args(["--mpi", "--group", "3", "--buffers", "plain"]);
            // The stream offered and taken in batches (`offer_many`, `fetch_many`).
            bench.args(["--events-batch", "16"]);
        } else {
            bench.args(["--require", "--user-memory"]);
        }
        let out = run(&mut bench, Duration::from_secs(300));
        assert_eq!(out.code(), Some(0), "{provider}: {out:?}");
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
        let rows = v["rows"].as_array().expect("rows");
        let sizes: Vec<u64> = rows.iter().filter_map(|r| r["size"].as_u64()).collect();
        assert_eq!(sizes, [64, 1 << 20], "{v}");
        for r in rows {
            let mut keys = vec![
                "p50_us",
                "p99_us",
                "round_trip_p50_us",
                "gbps",
                "raw_gbps",
                "events_cdos_per_sec",
                "events_gbps",
                "events_consumer_cpu_us",
                "events_pm_cpu_us",
                "events_provider_cpu_us",
            ];
            let batch = r["events_batch"].as_u64();
            assert_eq!(batch, mpi.then_some(16), "{provider}: {r}");
            if mpi {
                keys.extend([
                    "mpi_gbps",
                    "mpi_fresh_gbps",
                    "group_cdos_per_sec",
                    "group_gbps",
                    "group_mpi_gbps",
                ]);
            }
            for k in keys {
                assert!(
                    r[k].as_f64().is_some_and(|x| x > 0.0),
                    "{provider} {k}: {r}"
                );
            }
        }
    }
}

/// What [`same_host`] starts: a PM watched for transport-completed events, a
/// `maestro-bench pool-provider` offering one CDO over shm, and a way to join consumers.
struct SameHost {
    pm: pool::PoolManager,
    watcher: pool::Client,
    sub: pool::Subscription,
    provider: common::Group,
    /// Joins a consumer over shm, taking from the provider's memory unless told not to.
    consumer: Box<dyn Fn(bool) -> pool::Client>,
}

/// Starts a [`SameHost`] for workflow `tag`: the provider offers `bench-<size>` for each of
/// `sizes` from `--buffers` memory (and, with `group` > 0, a group of that many members of
/// each size) and has said it is ready.
fn same_host(tag: &str, (sizes, group): (&[usize], usize), buffers: &str) -> SameHost {
    use fabric::{Config, Scope};
    use pool::JoinOptions;

    let (pm, info, watcher, sub) = common::pool::watched_pm(
        tag,
        pool::events::EventKind::TransportCompleted,
        SAME_HOST_T,
    );
    let mut provider = common::Group::spawn_with_stdin(
        Command::new(common::maestro_bench()).args([
            "pool-provider",
            "--pm",
            &info.encode(),
            "--provider",
            "shm",
            "--sizes",
            &sizes
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
            "--buffers",
            buffers,
            "--group",
            &group.to_string(),
        ]),
        std::process::Stdio::piped(),
    );
    let stdout = provider.child.stdout.take().expect("stdout");
    common::await_line(stdout, "ready");
    let consumer = Box::new(move |no_cross_memory| {
        let cfg = Config {
            provider: Some("shm".into()),
            no_cross_memory,
            ..Config::default()
        };
        let opts = JoinOptions::new("consumer", 0)
            .fabric_with(&cfg, Scope::SameNode)
            .expect("shm")
            .isolated()
            .timeout(SAME_HOST_T);
        pool::Client::join(&info, opts).expect("join")
    });
    SameHost {
        pm,
        watcher,
        sub,
        provider,
        consumer,
    }
}

/// Waits for the next transport-completed event of `sub`; checks whether it says the bytes
/// were copied straight from the provider's memory.
fn next_transport(sub: &pool::Subscription, copied: bool) {
    let done = sub
        .wait_timeout(SAME_HOST_T)
        .expect("subscription")
        .expect("a transport-completed event");
    let says = done.detail.contains("copied from the provider's memory");
    assert_eq!(says, copied, "{done:?}");
}

/// The limit of every wait in the same-host tests.
const SAME_HOST_T: Duration = Duration::from_secs(60);

/// A consumer on the provider's host copies an offer straight out of the provider's memory
/// (cross-memory attach): no work for the provider, so even a stopped provider serves it,
/// and the transport event says so. A consumer with the copy switched off (the setting of
/// `MSTRO_OFI_CMA=off`) reads the same CDO by shared-memory RMA: the same bytes. Both land
/// a demand in memory the application lends (at the demand, or at a require before it),
/// without a copy after the transfer.
#[test]
fn same_host_consumers_copy_straight_from_the_providers_memory() {
    const SIZE: usize = 8 << 20;
    let SameHost {
        pm,
        watcher,
        sub,
        provider,
        consumer,
    } = same_host("cma", (&[SIZE], 0), "plain");
    let name = format!("bench-{SIZE}");
    let (copier, reader) = (consumer(false), consumer(true));
    let (copied, read) = cdo_copied_then_read((&sub, provider.pid()), (&copier, &reader), SIZE);
    assert!(*copied == *read, "the copy differs from the RMA read");
    // Into memory the application lends, both ways, lent at the demand or at a require
    // before it: the bytes land there, no copy after.
    for (client, at_require) in [(&copier, false), (&reader, false), (&copier, true)] {
        let mut mine = vec![0u8; SIZE + 1];
        let want = client.declare(&name).expect("declare");
        // SAFETY: `mine` outlives the data and nothing else touches it meanwhile.
        let dst = unsafe { fabric::Buffer::borrowed(mine.as_mut_ptr(), mine.len()) };
        let (data, _) = if at_require {
            client
                .require_into(want, dst)
                .expect("require into lent memory");
            client.demand(want)
        } else {
            client.demand_into(want, dst)
        }
        .expect("demand into lent memory");
        assert_eq!(data.as_ptr(), mine.as_ptr(), "landed in the lent memory");
        assert!(*data == *read);
        drop(data);
        assert!(mine[..SIZE] == *read && mine[SIZE] == 0);
    }
    drop((copied, read, copier, reader, provider));
    watcher.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// A group's members from a same-host provider arrive in bursts of tickets, and the
/// consumer copies each burst out of the provider's memory in one batch: even with the
/// provider stopped, every member arrives, equal to what RMA reads of the same group bring,
/// and each member's transport event says it was copied. Small members (at most the inline
/// size) are not registered with the fabric: copied all the same (the copy their tickets
/// name, with no RMA read to fall back on), and a consumer that does not copy gets them
/// with its tickets.
#[test]
fn a_groups_members_are_copied_from_a_stopped_provider_in_batches() {
    // Bursts of members the offers carry, of small ones and of members of several pages.
    const SIZES: [usize; 3] = [2 << 10, 16 << 10, 64 << 10];
    const MEMBERS: usize = 100;
    let SameHost {
        pm,
        watcher,
        sub,
        provider,
        consumer,
    } = same_host("cma-group", (&SIZES, MEMBERS), "plain");
    let (copier, reader) = (consumer(false), consumer(true));
    for size in SIZES {
        group_copied_then_read((&sub, provider.pid()), (&copier, &reader), (size, MEMBERS));
    }
    drop((copier, reader, provider));
    watcher.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// Demands the provider's CDO of `size` (see [`copied_then_read`]), checked to be a
/// pattern of `size` bytes both ways; the copy and the RMA read.
fn cdo_copied_then_read(
    provider: (&pool::Subscription, i32),
    clients: (&pool::Client, &pool::Client),
    size: usize,
) -> (pool::CdoData, pool::CdoData) {
    let name = format!("bench-{size}");
    let (copied, read) = copied_then_read(provider, clients, (&name, 1), |c, want| {
        c.demand(want).expect("demand").0
    });
    assert_eq!((copied.len(), read.len()), (size, size));
    assert!(copied.iter().any(|&b| b != 0), "the offer is a pattern");
    (copied, read)
}

/// Demands `name` with `copier` while the provider (process `pid`) is stopped, the next
/// `events` transport events on `sub` saying they copied from the provider's memory, then
/// with `reader` by RMA (as many events, saying they did not): what `demand` brought each.
fn copied_then_read<T>(
    (sub, pid): (&pool::Subscription, i32),
    (copier, reader): (&pool::Client, &pool::Client),
    (name, events): (&str, usize),
    demand: impl Fn(&pool::Client, pool::proto::CdoId) -> T,
) -> (T, T) {
    // SAFETY: signalling the process the calling test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let copied = demand(copier, copier.declare(name).expect("declare"));
    for _ in 0..events {
        next_transport(sub, true);
    }
    // SAFETY: signalling a process the calling test started and still owns (its child,
    // not yet reaped).
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let read = demand(reader, reader.declare(name).expect("declare"));
    for _ in 0..events {
        next_transport(sub, false);
    }
    (copied, read)
}

/// Demands the provider's group of `members` CDOs of `size` with `copier` while the
/// provider (process `pid`) is stopped, every member's transport event on `sub` saying it
/// was copied from the provider's memory, then with `reader` by RMA; checks that both bring
/// the same members, named in order, a pattern of `size` bytes each.
fn group_copied_then_read(
    provider: (&pool::Subscription, i32),
    clients: (&pool::Client, &pool::Client),
    (size, members): (usize, usize),
) {
    let name = format!("bench-group-{size}");
    let (copied, read) = copied_then_read(provider, clients, (&name, members), |c, want| {
        c.demand_group(want).expect("the group's members").0
    });
    assert_eq!((copied.len(), read.len()), (members, members));
    for (i, (c, r)) in copied.iter().zip(&read).enumerate() {
        assert_eq!(c.name, format!("{name}/{i}"));
        assert_eq!(c.data.len(), size);
        assert!(
            *c.data == *r.data,
            "{size}: member {i} differs from its RMA read"
        );
    }
    assert!(
        copied[0].data.iter().any(|&b| b != 0),
        "the offers are a pattern"
    );
}

/// Small offers past the app's share of the PM's budget for carried bytes lose them at the
/// PM (and the producer, told so, sends the next ones without): they are not registered
/// with the fabric, so only a copy out of the provider's memory reaches them on its host.
/// A consumer that said it does not copy (`MSTRO_OFI_CMA=off`) gets them all the same, by
/// the stream the PM plans for it, equal to a CDO whose bytes the PM kept.
#[test]
fn a_consumer_that_does_not_copy_gets_offers_only_copies_reach() {
    use std::io::Write;
    const SIZE: usize = 4 << 10;
    // An app's share of the PM's budget for carried bytes is 8 MiB: 2,048 such offers.
    const OFFERS: usize = 2_100;
    let mut host = same_host("copy-only", (&[SIZE], 0), "plain");
    // The provider makes the buffers, then offers them (its `prepared` is drained): the
    // demands below wait for the offers.
    let mut stdin = host.provider.child.stdin.take().expect("stdin");
    writeln!(stdin, "events {SIZE} {OFFERS}\ngo").expect("tell the provider");
    let reader = (host.consumer)(true);
    let fetch = |i: usize| {
        let want = reader
            .declare(&format!("bench-events-{SIZE}/{i}"))
            .expect("declare");
        let (data, _) = reader.demand(want).expect("demand");
        assert_eq!(data.len(), SIZE);
        data.to_vec()
    };
    let (kept, dropped) = (fetch(0), fetch(OFFERS - 1));
    assert!(kept.iter().any(|&b| b != 0), "the offers are a pattern");
    assert!(kept == dropped, "an offer only copies reach came changed");
    drop((reader, stdin));
    let SameHost {
        pm,
        watcher,
        sub,
        provider,
        ..
    } = host;
    drop((sub, provider));
    watcher.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// A same-host consumer of a shareable offer maps the provider's memory file: no copy, the
/// bytes are those an RMA read gets, the view outlives the provider's withdrawal and exit,
/// and memory the consumer lends is filled by a copy instead.
#[test]
fn same_host_consumers_map_a_shareable_offer() {
    const SIZE: usize = 4 << 20;
    let SameHost {
        pm,
        watcher,
        sub,
        mut provider,
        consumer,
    } = same_host("map", (&[SIZE], 0), "shareable");
    let name = format!("bench-{SIZE}");
    let mapper = consumer(false);
    let want = mapper.declare(&name).expect("declare");
    let (mapped, _) = mapper
        .demand(want)
        .expect("a view of the provider's memory");
    assert!(mapped.is_mapped(), "{mapped:?}");
    let done = sub
        .wait_timeout(SAME_HOST_T)
        .expect("subscription")
        .expect("event");
    assert!(done.detail.contains("mapped: no copy"), "{done:?}");
    let reader = consumer(true);
    let want = reader.declare(&name).expect("declare");
    let (read, _) = reader.demand(want).expect("demand by RMA");
    assert!(!read.is_mapped());
    sub.wait_timeout(SAME_HOST_T)
        .expect("subscription")
        .expect("event");
    assert_eq!(mapped.len(), SIZE);
    assert!(mapped.iter().any(|&b| b != 0), "the offer is a pattern");
    assert!(*mapped == *read, "the view differs from the RMA read");
    // Lent memory: filled by a copy.
    let mut mine = vec![0u8; SIZE];
    let want = mapper.declare(&name).expect("declare");
    // SAFETY: `mine` outlives the data and nothing else touches it meanwhile.
    let dst = unsafe { fabric::Buffer::borrowed(mine.as_mut_ptr(), mine.len()) };
    let (data, _) = mapper
        .demand_into(want, dst)
        .expect("demand into lent memory");
    assert!(!data.is_mapped() && data.as_ptr() == mine.as_ptr());
    let done = sub
        .wait_timeout(SAME_HOST_T)
        .expect("subscription")
        .expect("event");
    assert!(done.detail.contains("copied"), "{done:?}");
    drop(data);
    // The provider withdraws, disposes and exits (stdin closed): the view keeps its bytes.
    drop(provider.child.stdin.take());
    let out = provider.wait(SAME_HOST_T);
    assert!(out.status.success(), "{out:?}");
    assert!(*mapped == *read, "the view changed after the provider left");
    assert!(mine == *read);
    drop((mapped, read, mapper, reader));
    watcher.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// Offers in slabs (the library's offer buffers below the size that pays for a memory
/// file of its own) are copied out of a view of the slab the consumer maps once: single
/// CDOs, a large one the copy crew takes in pieces, and a group's members in a burst, all
/// from a stopped provider (no work of its own) and equal to what RMA reads bring; the
/// consumer's process then maps the provider's slabs (a view kept, not a view per CDO).
#[test]
fn same_host_consumers_copy_slab_offers_out_of_a_view_kept_mapped() {
    const SIZES: [usize; 3] = [16 << 10, 64 << 10, 3 << 20];
    const MEMBERS: usize = 50;
    let host = same_host("slabs", (&SIZES, MEMBERS), "offer");
    let clients = ((host.consumer)(false), (host.consumer)(true));
    let provider = (&host.sub, host.provider.pid());
    for size in SIZES {
        let (copied, read) = cdo_copied_then_read(provider, (&clients.0, &clients.1), size);
        assert!(
            *copied == *read,
            "{size}: the copy differs from the RMA read"
        );
        group_copied_then_read(provider, (&clients.0, &clients.1), (size, MEMBERS));
    }
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let views = maps
        .lines()
        .filter(|l| l.contains("memfd:maestro-cdo"))
        .count();
    // 16 KiB and 64 KiB offers fill one slab each, the 51 of 3 MiB six (10 slots each):
    // a view per slab, not per CDO (153 of them).
    assert!(
        (1..=8).contains(&views),
        "{views} slab views mapped: one per slab wanted"
    );
    drop(clients);
    let SameHost {
        pm, watcher, sub, ..
    } = host;
    drop(sub);
    watcher.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}
