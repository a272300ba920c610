//! The product-generation workflow (`examples/pgen`) as a user runs it on one node:
//! `examples/pgen/run.sh`, the forecast, the archiver and the workflow manager each a
//! `maestro run` job of its own, sharing one pool by the workflow's name; the manager
//! spawns a product-generation job per step (`PMIx_Spawn`), the last one only after the
//! forecast has left (its fields then come from the archive); `pgen verify` checks every
//! archived field and every product.
//!
//! The same workflow on 8 nodes of `scripts/cluster.sh` (`examples/pgen/slurm.sh`: batch
//! jobs of their own, product jobs submitted with `sbatch` on nodes the forecast does not
//! use), ten runs in a row, takes minutes on a 2-core machine and is left out of a plain
//! run; run it (as root) with
//!
//!     cargo nextest run --release --test pgen --run-ignored only --no-capture

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Cluster, example, maestro, repo, run};

/// Runs `cmd` to its end (within `limit`), meanwhile calling `watch` every 200 ms until
/// it returns what it looked for; returns the command's output and what `watch` found.
fn watching<T: Send>(
    cmd: &mut Command,
    limit: Duration,
    mut watch: impl FnMut() -> Option<T> + Send,
) -> (common::Output, Option<T>) {
    let ended = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            while !ended.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(found) = watch() {
                    return Some(found);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            None
        });
        let out = run(cmd, limit);
        ended.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, watcher.join().expect("watcher"))
    })
}

/// The programs of a `run.sh` run: the forecast's, archiver's and manager's (`None`:
/// `pgen`), and the product jobs' (`None`: `pgen product`).
#[derive(Clone, Copy, Default)]
struct Programs<'a> {
    jobs: Option<&'a std::path::Path>,
    product: Option<&'a std::path::Path>,
}

/// `examples/pgen/run.sh` in `work`: 3 forecast ranks, 3 steps of 4 fields of 1-16 MiB, a
/// workflow name of this test process's own.
fn run_sh_in(work: &std::path::Path) -> Command {
    let mut cmd = Command::new(repo().join("examples/pgen/run.sh"));
    cmd.arg(work)
        .env("MAESTRO", maestro())
        .env("PGEN", example("pgen"))
        .env("PGEN_FORECAST_RANKS", "3")
        .env(
            "PGEN_SHAPE",
            "--steps 3 --params 2 --levels 2 --min-size 1048576 --max-size 16777216",
        )
        .env(
            "MSTRO_WORKFLOW_NAME",
            format!("pgen-test-{}", std::process::id()),
        );
    cmd
}

/// Runs `examples/pgen/run.sh` (3 forecast ranks, 3 steps of 4 fields of 1-16 MiB) with
/// `programs`, and checks what it said.
fn run_sh(programs: Programs<'_>, late_archiver: &str, last_step_said: &str) {
    let work = tempfile::tempdir().expect("tempdir");
    let mut cmd = run_sh_in(work.path());
    if let Some(p) = programs.product {
        cmd.env("PGEN_PRODUCT_CMD", p);
    }
    if let Some(p) = programs.jobs {
        cmd.env("PGEN_JOBS_CMD", p);
    }
    cmd.env("PGEN_LATE_ARCHIVER", late_archiver);
    // Meanwhile a user looks at step 0's CDOs, as docs/guide/pgen.md says, until all four show.
    let workflow = format!("pgen-test-{}", std::process::id());
    let names = ["2t/l0", "2t/l1", "msl/l0", "msl/l1"].map(|f| format!("pgen/field/s0/{f}"));
    let (out, seen) = watching(&mut cmd, Duration::from_secs(300), || {
        let ls = run(
            Command::new(maestro()).args([
                "pool",
                "ls",
                "--workflow",
                &workflow,
                "(.user.pgen.step = 0)",
            ]),
            Duration::from_secs(30),
        );
        (ls.code() == Some(0) && names.iter().all(|n| ls.stdout.contains(n.as_str())))
            .then_some((ls.stdout, ls.stderr))
    });
    assert_eq!(out.code(), Some(0), "{out:?}");
    let (seen, warned) =
        seen.expect("maestro pool ls never showed step 0's four fields during the run");
    // The schema of the selector's key is the workflow's, not this process's: no word of
    // it when the selector matched.
    assert!(!warned.contains("no schema"), "{warned}");
    assert!(
        !seen.contains("pgen/field/s1/"),
        "the selector let other steps through: {seen}"
    );
    let said = &out.stdout;
    for what in [
        "verified: 12 archived fields",
        "and 3 products",
        // Steps 0 and 1 started as their fields came; step 2 once the forecast left,
        // served by the archive's copies.
        "[manager] manager: step 2 complete; its product job started (after the forecast left: from the archive)",
        last_step_said,
        "[forecast] forecast rank 0: the workflow is done; the pool manager stops",
        "[archiver] archiver: 12 fields written",
    ] {
        assert!(said.contains(what), "{what:?} not in:\n{said}");
    }
    for step in 0..3 {
        assert!(
            work.path()
                .join(format!("products/step-{step}.txt"))
                .exists()
        );
    }
}

/// A forecast of nothing is refused before anything starts (it hung now and then), as a
/// smallest field larger than the largest; the workflow's output into a pipe closed early
/// (`run.sh | head -3`) ends every job without a panic.
#[test]
fn a_shape_of_nothing_is_refused_and_a_pipe_closed_early_ends_the_run_quietly() {
    let work = tempfile::tempdir().expect("tempdir");
    for (shape, said) in [
        ("--steps 0", "invalid value '0' for '--steps <STEPS>'"),
        ("--levels 0", "invalid value '0' for '--levels <LEVELS>'"),
        (
            "--min-size 10 --max-size 4",
            "--min-size 10 is larger than --max-size 4",
        ),
    ] {
        let out = run(
            run_sh_in(work.path()).env("PGEN_SHAPE", shape),
            Duration::from_secs(60),
        );
        assert_eq!(out.code(), Some(1), "{shape}: {out:?}");
        assert!(out.stdout.contains(said), "{shape}: {}", out.stdout);
    }
    let script = repo().join("examples/pgen/run.sh");
    let line = format!(
        "'{}' '{}' | head -3",
        script.display(),
        work.path().join("piped").display()
    );
    let settings = run_sh_in(work.path());
    let out = run(
        Command::new("bash")
            .args(["-c", &line])
            .envs(settings.get_envs().filter_map(|(k, v)| Some((k, v?)))),
        Duration::from_secs(120),
    );
    assert_eq!(out.stdout.lines().count(), 3, "{out:?}");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[test]
fn the_product_generation_workflow_runs_across_jobs_under_maestro_run() {
    run_sh(
        Programs::default(),
        "0",
        "[manager] pgen step 2: 4 fields checked (4 from archive)",
    );
}

/// Without an archiver, with Maestro's GFS settings (`PGEN_GFS=1`): the forecast withdraws
/// its fields once offered and leaves, the last step's product job (started after that)
/// gets them from the pool's files, every field moved through a file, and nothing is left
/// in the directory once the pool manager stopped.
#[test]
fn without_an_archiver_the_fields_outlive_the_forecast_in_the_pools_files() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = run(
        run_sh_in(work.path()).env("PGEN_GFS", "1"),
        Duration::from_secs(300),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    for what in [
        "[manager] manager: step 2 complete; its product job started (after the forecast left: from the pool's files)",
        "[manager] pgen step 2: 4 fields checked (4 from forecast)",
        "[manager] manager: how the data moved: gfs 12 transfers",
        "[forecast] forecast rank 0: the workflow is done; the pool manager stops",
        "verified: 3 products (no archive)",
    ] {
        assert!(
            out.stdout.contains(what),
            "{what:?} not in:\n{}",
            out.stdout
        );
    }
    assert!(
        out.stdout.contains(&format!(
            "0 files left in {}",
            work.path().join("gfs").display()
        )),
        "{}",
        out.stdout
    );
}

/// The same with the product jobs in C (`examples/pgen/product.c` against the installed
/// library): `pgen verify` finds their products the same as Rust's. The archiver comes 3 s
/// after the forecast, which has offered everything by then: it hears of the past offers
/// (current state with signal-before) and still keeps every field.
#[test]
fn product_jobs_in_c_join_the_same_workflow() {
    let c = common::capi::installed();
    run_sh(
        Programs {
            product: Some(&c.bin("pgen_product")),
            ..Programs::default()
        },
        "3",
        "[manager] pgen_product step 2: 4 fields checked (0 from forecast, 4 from archive)",
    );
}

/// The whole workflow in C (`examples/pgen/pgen_c.c`: the forecast, whose rank 0 serves the
/// pool manager with `mstro_pm_start`, the archiver, and the manager, which starts the C
/// product jobs with `PMIx_Spawn`): `pgen verify` finds the same archive and products.
#[test]
fn the_whole_workflow_runs_in_c() {
    let c = common::capi::installed();
    run_sh(
        Programs {
            jobs: Some(&c.bin("pgen_c")),
            product: Some(&c.bin("pgen_product")),
        },
        "1",
        "[manager] pgen_product step 2: 4 fields checked (0 from forecast, 4 from archive)",
    );
}

/// One `examples/pgen/slurm.sh` run on `cluster` in `run_dir` (under the checkout, which
/// every node sees: each has its own /tmp): the forecast on n1-n4, the archiver and the
/// manager on n5, the product jobs on the other nodes, with `env` added to the jobs'
/// environment; meanwhile `watch` (given the PM info file) is called until it finds what it
/// looks for. Returns the manager's and the product jobs' output and what `watch` found
/// (asserting the run passed, with every job's output if not).
fn slurm_run<T: Send>(
    cluster: &Cluster,
    run_dir: &str,
    env: &[(&str, &str)],
    mut watch: impl FnMut(&std::path::Path) -> Option<T> + Send,
) -> (String, String, Option<T>) {
    let work = repo().join("target/pgen-cluster").join(run_dir);
    let _ = std::fs::remove_dir_all(&work);
    let started = std::time::Instant::now();
    let mut cmd = cluster.command(repo().join("examples/pgen/slurm.sh"));
    cmd.arg(&work)
        .env("PGEN", example("pgen"))
        .env("PGEN_FORECAST_SBATCH", "-N 4 -n 8 -w n[1-4]")
        .env("PGEN_SERVICE_SBATCH", "-n 1 -w n5")
        .env("PGEN_PRODUCT_SBATCH", "-n 1 -x n[1-5]")
        .env("PGEN_TIMEOUT", "600")
        .env("MSTRO_WORKFLOW_NAME", format!("pgen-{run_dir}"))
        .envs(env.iter().copied());
    let info_file = work.join("pm.info");
    let (out, watched) = watching(&mut cmd, Duration::from_secs(660), || watch(&info_file));
    eprintln!(
        "{run_dir}: exit {:?} in {:.1} s",
        out.code(),
        started.elapsed().as_secs_f64()
    );
    let logs = |prefix: &str| -> String {
        let mut files: Vec<_> = std::fs::read_dir(&work)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .map(|e| e.path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    };
    let all = ["forecast", "archiver", "manager", "product"]
        .map(logs)
        .concat();
    assert_eq!(out.code(), Some(0), "{run_dir}: {out:?}\n{all}");
    assert!(
        out.stdout.contains("verified: 24 archived fields"),
        "{}",
        out.stdout
    );
    let (manager, products) = (logs("manager"), logs("product"));
    let _ = std::fs::remove_dir_all(&work);
    (manager, products, watched)
}

#[test]
#[ignore = "minutes: cargo nextest run --release --test pgen --run-ignored only"]
fn the_product_generation_workflow_passes_ten_runs_on_the_namespaced_cluster() {
    let cluster = Cluster::start_nodes(8);
    for i in 1..=10 {
        let (manager, products, _) = slurm_run(&cluster, &format!("run-{i}"), &[], |_| None::<()>);
        // The last step's fields outlived the forecast: they came from the archive.
        assert!(
            products.contains("pgen step 3: 6 fields checked (6 from archive)"),
            "{products}"
        );
        assert!(
            manager.contains("manager: how the data moved: "),
            "{manager}"
        );
    }
}

/// The pool of four shards as a job of its own, a shard on each of n5-n8
/// (`PGEN_PM_SHARDS`): ten runs, each with every archived field and product verified,
/// and `maestro pool status` meanwhile one pool of four shards.
#[test]
#[ignore = "minutes: cargo nextest run --release --test pgen --run-ignored only"]
fn the_product_generation_workflow_passes_ten_runs_with_four_shards_on_the_namespaced_cluster() {
    let cluster = Cluster::start_nodes(8);
    let maestro = maestro();
    let maestro = maestro.to_str().expect("utf-8 path");
    for i in 1..=10 {
        let env = [
            ("PGEN_PM_SBATCH", "-N 4 -n 4 -w n[5-8]"),
            ("PGEN_PM_SHARDS", "4"),
            ("MAESTRO", maestro),
        ];
        let (manager, products, shards) =
            slurm_run(&cluster, &format!("shards-{i}"), &env, |info| {
                let out = run(
                    Command::new(maestro)
                        .args(["pool", "status", "--json", "--info-file"])
                        .arg(info),
                    Duration::from_secs(10),
                );
                let status: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
                let shards = status["shards"].as_array()?;
                (status["app_count"].as_u64()? > 0).then_some(shards.len())
            });
        assert_eq!(
            shards,
            Some(4),
            "run {i}: the pool seen as one of four shards"
        );
        assert!(
            products.contains("pgen step 3: 6 fields checked (6 from archive)"),
            "{products}"
        );
        assert!(
            manager.contains("manager: how the data moved: "),
            "{manager}"
        );
    }
}

/// The forecast's nodes (n1-n4) and the product jobs' (n6-n8) share no data network: eth1
/// joins n1-n5, eth2 joins n1 and n5-n8, and eth0, Slurm's management network, is kept
/// free of the pool's traffic (`MSTRO_OFI_IFACE_EXCLUDE=eth0`). The pool manager (rank 0,
/// on n1) is on both: the fields of the forecast ranks on n2-n4 reach the product jobs
/// through it (streams), those of rank 1 (n1) and of the archive (n5) by RMA over eth2,
/// and `maestro pool transfers`, run meanwhile, shows both. The archiver comes 8 s late,
/// so that the first steps' products find the forecast's offers alone.
#[test]
#[ignore = "minutes: cargo nextest run --release --test pgen --run-ignored only"]
fn product_nodes_without_a_data_network_in_common_with_the_forecast_get_its_fields_through_the_pm()
{
    let cluster = Cluster::start_split(8, "1-5", "1,5-8");
    let mut seen = String::new();
    let (manager, products, transfers) = slurm_run(
        &cluster,
        "split",
        &[
            ("MSTRO_OFI_IFACE_EXCLUDE", "eth0"),
            // The archiver comes late: the first steps' products read the forecast's
            // offers, the last step's the archive's copies.
            ("PGEN_ARCHIVER_SBATCH", "-n 1 -w n5 --begin=now+8"),
        ],
        |info_file| {
            let t = run(
                Command::new(maestro())
                    .args(["pool", "transfers", "--info-file"])
                    .arg(info_file),
                Duration::from_secs(30),
            );
            // Rows of finished transfers into a product job, remembered across looks
            // (the view keeps the last few only).
            for row in t
                .stdout
                .lines()
                .filter(|l| l.contains(" pgen:") && l.contains("done"))
            {
                for transport in ["stream", "rma"] {
                    if row.contains(transport) && !seen.contains(transport) {
                        seen.push_str(row);
                        seen.push('\n');
                    }
                }
            }
            (seen.contains("stream") && seen.contains("rma")).then(|| seen.clone())
        },
    );
    assert!(
        products.contains("pgen step 3: 6 fields checked (6 from archive)"),
        "{products}"
    );
    let moved = manager
        .lines()
        .find(|l| l.contains("manager: how the data moved: "))
        .unwrap_or_else(|| panic!("{manager}"));
    assert!(moved.contains("stream") && moved.contains("rma"), "{moved}");
    let transfers = transfers
        .expect("maestro pool transfers never showed a stream and an RMA into a product job");
    eprintln!("maestro pool transfers showed:\n{transfers}");
}

/// Every job in C on the cluster (`examples/pgen/pgen_c.c` and `product.c` against the
/// installed library): the forecast's rank 0 writes the PM info file itself and the C
/// manager submits the C product jobs with `sbatch`.
#[test]
#[ignore = "minutes: cargo nextest run --release --test pgen --run-ignored only"]
fn the_whole_workflow_in_c_runs_on_the_namespaced_cluster() {
    let c = common::capi::installed();
    let cluster = Cluster::start_nodes(8);
    let (jobs, product) = (c.bin("pgen_c"), c.bin("pgen_product"));
    let (manager, products, _) = slurm_run(
        &cluster,
        "in-c",
        &[
            ("PGEN_JOBS_CMD", jobs.to_str().expect("UTF-8 path")),
            ("PGEN_PRODUCT_CMD", product.to_str().expect("UTF-8 path")),
        ],
        |_| None::<()>,
    );
    assert!(
        manager.contains("manager: step 3 complete; its product job started (after the forecast left: from the archive)"),
        "{manager}"
    );
    assert!(
        products
            .contains("pgen_product step 3: 6 fields checked (0 from forecast, 6 from archive)"),
        "{products}"
    );
}

/// The pool manager as a job of its own on n5 (`PGEN_PM_SBATCH`) and a standby on n6
/// (`PGEN_STANDBY_SBATCH`); at a random moment of each of ten runs (fixed seeds) the active
/// manager is killed with SIGKILL: the standby takes over and every run completes with
/// every archived field and product verified. The stall from the kill to the first app
/// rejoined at the standby is printed and under 2 s.
#[test]
#[ignore = "minutes: cargo nextest run --release --test pgen --run-ignored only"]
fn the_workflow_survives_its_pool_manager_killed_with_a_standby_on_the_namespaced_cluster() {
    let cluster = Cluster::start_nodes(8);
    let maestro = maestro();
    let maestro = maestro.to_str().expect("utf-8 path");
    let mut stalls = Vec::new();
    for i in 1..=10u64 {
        let run_dir = format!("failover-{i}");
        // Within the run (about 10 s from the standby's first look to the end).
        let delay = Duration::from_millis(500 + (i * 7919) % 3500);
        let env = [
            ("PGEN_PM_SBATCH", "-n 1 -w n5"),
            ("PGEN_STANDBY_SBATCH", "-n 1 -w n6"),
            ("MAESTRO", maestro),
        ];
        let needle = format!("pm --workflow pgen-{run_dir} --listen 0.0.0.0:0 --info-file");
        let mut seen: Option<std::time::Instant> = None;
        let mut killed: Option<std::time::Instant> = None;
        let mut first_generation = 0;
        let (manager, _, stall) = slurm_run(&cluster, &run_dir, &env, |info| {
            let status = |info: &std::path::Path| -> Option<serde_json::Value> {
                let out = run(
                    Command::new(maestro)
                        .args(["pool", "status", "--json", "--info-file"])
                        .arg(info),
                    Duration::from_secs(10),
                );
                serde_json::from_str(&out.stdout).ok()
            };
            let Some(at) = killed else {
                // The moment counts from the standby's first look (before it, nobody
                // could take over).
                if seen.is_none() {
                    let first = status(info)?;
                    first_generation = first["generation"].as_u64()?;
                    seen =
                        (!first["standbys"].as_array()?.is_empty()).then(std::time::Instant::now);
                    return None;
                }
                let since = seen?;
                if since.elapsed() < delay {
                    return None;
                }
                let pids = run(
                    Command::new("pgrep").args(["-f", &needle]),
                    Duration::from_secs(10),
                );
                for pid in pids
                    .stdout
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    // SAFETY: signalling the pool manager this test's cluster runs.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    killed = Some(std::time::Instant::now());
                }
                return None;
            };
            // The standby's status (another generation), once an app rejoined it.
            let now = status(info)?;
            (now["app_count"].as_u64()? > 0 && now["generation"].as_u64()? != first_generation)
                .then(|| at.elapsed())
        });
        let stall = stall.unwrap_or_else(|| panic!("{run_dir}: no kill, or nobody rejoined"));
        eprintln!(
            "{run_dir}: killed {:.1} s after the standby's first look, first app rejoined the standby {:.2} s later",
            delay.as_secs_f64(),
            stall.as_secs_f64()
        );
        assert!(
            manager.contains("manager: how the data moved: "),
            "{manager}"
        );
        stalls.push(stall);
    }
    assert!(
        stalls.iter().all(|s| *s < Duration::from_secs(2)),
        "stalls {stalls:?}"
    );
}
