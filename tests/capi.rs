//! The C API as C programs use it: `scripts/install.sh` installs `maestro.h`,
//! `libmaestro` and `maestro.pc`; the examples in `examples/c/` and the checks in
//! `tests/c/` are compiled against that installation with `pkg-config` (C99 and C++11,
//! `-Wall -Wextra -pedantic -Werror`) and run: a local pool, bad calls, C++, and a PM tool +
//! producer + consumer as separate processes (`maestro pm` or the C PM tool, info by
//! environment) and as one job under `maestro run`, `srun --mpi=pmix` and `mpirun`, where
//! the PM is found through PMIx with no environment plumbing.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::capi::{Installed, assert_tool_saw_two, installed, tool_info};
use common::{Group, Output, Slurm, await_line, maestro, repo, run, start_pm, start_pm_with_env};

/// The environment of the examples: their schema, and a workflow name of this test's own
/// (published names are shared between `maestro run` jobs of a user).
fn env<'a>(cmd: &'a mut Command, workflow: &str) -> &'a mut Command {
    cmd.env("MSTRO_SCHEMA_PATH", repo().join("examples/c"))
        .env("MSTRO_SCHEMA_LIST", "ecmwf.yaml")
        .env("MSTRO_WORKFLOW_NAME", workflow)
        .env_remove("MSTRO_POOL_MANAGER_INFO")
}

/// Checks the producer's and the consumer's reports (8 CDOs of 1 MiB offered, 2 matched).
fn assert_exchange(out: &str) {
    assert!(
        out.contains("producer: offered 8 CDOs of 1048576 bytes from its own buffers"),
        "{out}"
    );
    assert!(
        out.contains("consumer: 2 CDOs, 2097152 bytes, all checksums match"),
        "{out}"
    );
    assert!(out.contains("producer: withdrew everything"), "{out}");
    for field in ["field-2", "field-6"] {
        assert!(
            out.contains(&format!(
                "consumer: heard of {field} from producer (needs ack: 1)"
            )),
            "{out}"
        );
    }
}

/// Runs producer and consumer as processes of their own, joining through the environment.
fn producer_and_consumer(c: &Installed, workflow: &str, info: &str) -> String {
    exchange(c, workflow, info, &["--cdos", "8"])
}

/// [`producer_and_consumer`] with the producer's arguments.
fn exchange(c: &Installed, workflow: &str, info: &str, producer_args: &[&str]) -> String {
    exchange_launched(
        c,
        (workflow, ("MSTRO_POOL_MANAGER_INFO", info)),
        producer_args,
        &[],
    )
}

/// [`exchange`], each program started by `launcher` (e.g. `maestro run -n 1 --`, a job of
/// its own) or bare where it is empty, finding the PM by the variable `found_by` (name,
/// value).
fn exchange_launched(
    c: &Installed,
    (workflow, found_by): (&str, (&str, &str)),
    producer_args: &[&str],
    launcher: &[&str],
) -> String {
    let spawn = |name: &str, args: &[&str]| {
        let mut cmd = match launcher {
            [first, rest @ ..] => {
                let mut cmd = Command::new(first);
                cmd.args(rest).arg(c.bin(name));
                cmd
            }
            [] => Command::new(c.bin(name)),
        };
        env(&mut cmd, workflow)
            .args(args)
            .env(found_by.0, found_by.1);
        Group::spawn(&mut cmd)
    };
    let consumer = spawn("consumer", &["--expect", "2"]);
    let producer = spawn("producer", producer_args);
    let p = producer.wait(Duration::from_secs(60));
    let k = consumer.wait(Duration::from_secs(60));
    assert_eq!(p.code(), Some(0), "producer: {p:?}");
    assert_eq!(k.code(), Some(0), "consumer: {k:?}");
    format!("{}{}", p.stdout, k.stdout)
}

/// Maestro's settings for the global file system (`MSTRO_TRANSPORT_DEFAULT=GFS`,
/// `MSTRO_TRANSPORT_GFS_DIR`) move the C producer's CDOs through files under that
/// directory: the consumer reads them, the PM counts them as `gfs`, and nothing is left in
/// the directory afterwards. A directory that is not there stops the producer with what to
/// do.
#[test]
fn maestros_gfs_settings_move_the_c_programs_cdos_through_files() {
    let c = installed();
    let (_pm, info) = start_pm("capi-gfs", &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let spawn = |name: &str, args: &[&str], gfs: &std::path::Path| {
        let mut cmd = Command::new(c.bin(name));
        env(&mut cmd, "capi-gfs")
            .args(args)
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .env("MSTRO_TRANSPORT_DEFAULT", "GFS")
            .env("MSTRO_TRANSPORT_GFS_DIR", gfs);
        Group::spawn(&mut cmd)
    };
    let consumer = spawn("consumer", &["--expect", "2"], dir.path());
    let producer = spawn("producer", &["--cdos", "8"], dir.path());
    let p = producer.wait(Duration::from_secs(60));
    let k = consumer.wait(Duration::from_secs(60));
    assert_eq!(p.code(), Some(0), "producer: {p:?}");
    assert_eq!(k.code(), Some(0), "consumer: {k:?}");
    assert_exchange(&format!("{}{}", p.stdout, k.stdout));
    let out = run(
        Command::new(maestro()).args(["pool", "fabric", "--json", "--info", &info]),
        Duration::from_secs(60),
    );
    let fabric: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let gfs = &fabric["transports"]["gfs"];
    assert!(gfs["bytes"].as_u64() >= Some(2 << 20), "{fabric}");
    assert!(fabric["transports"].get("rma").is_none(), "{fabric}");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "nothing left behind"
    );

    let lost = spawn(
        "producer",
        &["--cdos", "1"],
        std::path::Path::new("/nonexistent/gfs"),
    );
    let out = lost.wait(Duration::from_secs(60));
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("is no directory here: create it"),
        "{out:?}"
    );
}

/// Data that outlives its producer, as C programs use it: with a GFS directory, fields that
/// ask for it (`MSTRO_ATTR_CORE_CDO_TRANSPORT` = "GFS", no `MSTRO_TRANSPORT_DEFAULT`) and a
/// PM that keeps such offers (`maestro pm --gfs-dir`), a C producer offers four fields,
/// withdraws and disposes each at once and ends; a C consumer started after it demands
/// all four and gets their bytes, naming the producer as their provider. When the PM
/// stops, only the field marked to persist is left, named after its CDO.
#[test]
fn a_c_producers_fields_outlive_it_in_the_pools_files() {
    let c = installed();
    let dir = tempfile::tempdir().expect("tempdir");
    let gfs = dir.path().display().to_string();
    let (pm, info) = start_pm("capi-outlive", &["--gfs-dir", &gfs]);
    let role = |role: &str| {
        let mut cmd = Command::new(c.bin("outlive"));
        env(&mut cmd, "capi-outlive")
            .args([role, "4"])
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .env("MSTRO_TRANSPORT_GFS_DIR", &gfs);
        run(&mut cmd, Duration::from_secs(60))
    };
    let p = role("produce");
    assert_eq!(p.code(), Some(0), "producer: {p:?}");
    assert!(p.stdout.contains("outlive: all hold"), "{p:?}");
    let k = role("consume");
    assert_eq!(k.code(), Some(0), "consumer: {k:?}");
    assert_eq!(
        k.stdout.matches("comes from forecast:0").count(),
        4,
        "{k:?}"
    );
    assert!(k.stdout.contains("outlive: all hold"), "{k:?}");
    common::assert_only_persisted(
        pm,
        dir.path(),
        "capi-outlive",
        &["field-3", "field-3.maestro.json"],
    );
}

#[test]
fn local_pool_threads_exchange_the_producers_own_buffer() {
    let c = installed();
    let out = run(
        &mut Command::new(c.bin("local_pool")),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout
            .contains("8388608 bytes, zero copy (the producer's own buffer)"),
        "{out:?}"
    );
}

#[test]
fn bad_calls_get_statuses_and_messages_not_crashes() {
    let c = installed();
    let out = run(
        Command::new(c.bin("bad_calls"))
            .env("MSTRO_TIMEOUT", "1")
            .env("MSTRO_LOG_LEVEL", "debug"),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("bad_calls: all hold"), "{}", out.stdout);
    // The selector's message points at the column.
    assert!(out.stdout.contains("selector column"), "{}", out.stdout);
    // Every failing call logged its reason, at debug level (the program has the status).
    for said in [
        "mstro_cdo_declare: name is NULL",
        "mstro_cdo_seal: NULL CDO handle",
        "mstro_cdo_offer: offer of CDO \"field\": the CDO is not sealed",
    ] {
        assert!(out.stderr.contains(said), "{said}: {}", out.stderr);
    }
}

#[test]
fn asynchronous_demands_overlap_and_their_bad_uses_are_refused() {
    let c = installed();
    let out = run(
        Command::new(c.bin("async_demand")).env("MSTRO_TIMEOUT", "1"),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("async_demand: all hold"),
        "{}",
        out.stdout
    );
}

/// A C producer's row-major matrix read by a consumer that declared it column-major gets the
/// consumer's order, in one process (a local pool) and as two ranks of `maestro run` (the
/// C PM tool as rank 0), by the fabric and through the global file system; a consumer
/// declaring another array is refused naming both layouts.
#[test]
fn a_column_major_consumer_gets_its_own_order() {
    let c = installed();
    let alone = run(
        Command::new(c.bin("layout")).env("MSTRO_TIMEOUT", "10"),
        Duration::from_secs(60),
    );
    assert_eq!(alone.code(), Some(0), "{}\n{}", alone.stdout, alone.stderr);
    assert!(
        alone.stdout.contains("layout: all hold"),
        "{}",
        alone.stdout
    );
    assert!(
        alone
            .stdout
            .contains("ok   column-major in the lent memory: 0 3 1 4 2 5"),
        "{}",
        alone.stdout
    );
    let layout = c.bin("layout").display().to_string();
    // By the fabric, then through the global file system (Maestro's settings; the PM
    // tool's PM keeps the withdrawn matrices and removes them at its end).
    let gfs = tempfile::tempdir().expect("tempdir");
    for through_files in [false, true] {
        let mut cmd = Command::new(maestro());
        roles(
            &c,
            env(&mut cmd, "capi-layout").args(["run", "-n", "3", "--"]),
        )
        .env("ROLES_PRODUCER", format!("{layout} producer"))
        .env("ROLES_CONSUMER", format!("{layout} consumer"));
        if through_files {
            cmd.env("MSTRO_TRANSPORT_DEFAULT", "GFS")
                .env("MSTRO_TRANSPORT_GFS_DIR", gfs.path());
        }
        let out = run(&mut cmd, Duration::from_secs(90));
        assert_eq!(out.code(), Some(0), "{out:?}");
        assert_eq!(
            out.stdout.matches("layout: all hold").count(),
            2,
            "{}",
            out.stdout
        );
        assert!(
            out.stdout
                .contains("ok   column-major in library memory: 0 3 1 4 2 5"),
            "{}",
            out.stdout
        );
    }
    assert_eq!(
        std::fs::read_dir(gfs.path()).expect("dir").count(),
        0,
        "nothing left in the GFS directory"
    );
}

#[test]
fn groups_move_whole_and_their_bad_uses_are_refused() {
    let c = installed();
    let out = run(
        Command::new(c.bin("groups")).env("MSTRO_TIMEOUT", "1"),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("groups: all hold"), "{}", out.stdout);
}

#[test]
fn a_late_subscriber_hears_of_the_current_state_first() {
    let c = installed();
    let out = run(
        &mut Command::new(c.bin("late_subscriber")),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("late_subscriber: all hold"),
        "{}",
        out.stdout
    );
}

#[test]
fn cxx_programs_spell_payloads_both_ways() {
    let c = installed();
    let out = run(&mut Command::new(c.bin("api_cxx")), Duration::from_secs(60));
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout.contains("c++: offer of cxx-field by cxx"),
        "{out:?}"
    );
    assert!(
        out.stdout.contains("c++: withdraw of cxx-field by cxx"),
        "{out:?}"
    );
}

#[test]
fn c_programs_with_maestro_pm() {
    let c = installed();
    let (pm, info) = start_pm("capi-pm", &[]);
    let out = producer_and_consumer(&c, "capi-pm", &info);
    assert_exchange(&out);
    pm.terminate(Duration::from_secs(10));
}

/// A C producer that allocates its buffers with `mstro_mem_alloc` (16 MiB: memory files
/// from there even on 4 KiB pages) has them mapped by the C consumer on its node: no copy,
/// as the transport events of both CDOs say (the consumer requires each first, so even the
/// one it lends a buffer for arrives as a view), and the consumer's checksums match.
#[test]
fn c_library_memory_is_mapped_by_consumers_on_the_node() {
    let c = installed();
    let (pm, info) = start_pm("capi-mem", &[]);
    let mut tracer = Group::spawn(
        Command::new(common::example("pool_tracer"))
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .args(["--kinds", "transport-completed"]),
    );
    await_line(tracer.child.stderr.take().expect("stderr"), "subscribed");
    let traced = common::lines(tracer.child.stdout.take().expect("stdout"));
    let size = (16 << 20).to_string();
    let args = ["--cdos", "8", "--size", &size, "--library-memory", "1"];
    let out = exchange(&c, "capi-mem", &info, &args);
    assert!(
        out.contains("producer: offered 8 CDOs of 16777216 bytes from library memory"),
        "{out}"
    );
    assert!(
        out.contains("consumer: 2 CDOs, 33554432 bytes, all checksums match"),
        "{out}"
    );
    let (mut seen, end) = (String::new(), Instant::now() + Duration::from_secs(30));
    let both = |s: &str| s.matches("mapped: no copy").count() == 2;
    while !both(&seen) {
        match traced.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push_str(&(line + "\n")),
            Err(_) => break,
        }
    }
    assert!(both(&seen), "transport events: {seen}");
    drop(tracer);
    pm.terminate(Duration::from_secs(10));
}

#[test]
fn c_programs_with_the_c_pm_tool() {
    let c = installed();
    let mut cmd = Command::new(c.bin("pm_tool"));
    env(&mut cmd, "capi-tool").args(["--clients", "2"]);
    let mut tool = Group::spawn(&mut cmd);
    let (info, reader) = tool_info(&mut tool);
    let out = producer_and_consumer(&c, "capi-tool", &info);
    assert_exchange(&out);
    assert_tool_saw_two(tool, reader);
}

/// The C PM tool serving a pool of three shards (`MSTRO_PM_SHARDS=3`): its info lists
/// them, the C producer and consumer exchange every CDO through them, and the tool hears
/// each app join and leave once.
#[test]
fn c_programs_with_the_c_pm_tool_serving_three_shards() {
    let c = installed();
    let mut cmd = Command::new(c.bin("pm_tool"));
    env(&mut cmd, "capi-tool-shards")
        .env("MSTRO_PM_SHARDS", "3")
        .args(["--clients", "2"]);
    let mut tool = Group::spawn(&mut cmd);
    let (info, reader) = tool_info(&mut tool);
    assert!(info.starts_with("mstro-pm-v2:"), "{info}");
    let out = producer_and_consumer(&c, "capi-tool-shards", &info);
    assert_exchange(&out);
    assert_tool_saw_two(tool, reader);
    let mut cmd = Command::new(c.bin("pm_tool"));
    env(&mut cmd, "capi-tool-shards").env("MSTRO_PM_SHARDS", "none");
    let refused = run(&mut cmd, Duration::from_secs(30));
    assert_ne!(refused.code(), Some(0), "{refused:?}");
    assert!(
        format!("{}{}", refused.stdout, refused.stderr).contains("MSTRO_PM_SHARDS=\"none\""),
        "{refused:?}"
    );
}

/// The workflow of separate jobs: the C PM tool in a `maestro run` of its own, the
/// producer in a second and the consumer in a third, joined by the PM info alone (each
/// launcher issues its own PMIx credentials, which the others cannot check: the secret and
/// the kernel's word on the user decide); meanwhile `maestro pool status` watches the PM
/// through the tool's launcher (`--pid`) and through the node's publications.
#[test]
fn components_of_separate_maestro_runs_share_one_pm_and_tools_watch_it() {
    let c = installed();
    let mut cmd = Command::new(maestro());
    env(&mut cmd, "capi-jobs")
        .args(["run", "-n", "1", "--tool-support", "--"])
        .arg(c.bin("pm_tool"))
        .args(["--clients", "2"]);
    let mut tool = Group::spawn(&mut cmd);
    let (info, reader) = tool_info(&mut tool);
    let launcher = tool.child.id().to_string();
    for how in [
        &["--pid", launcher.as_str()][..],
        &["--workflow", "capi-jobs"],
    ] {
        let mut cmd = Command::new(maestro());
        cmd.args(["pool", "status"]).args(how);
        let out = run(&mut cmd, Duration::from_secs(30));
        assert_eq!(out.code(), Some(0), "maestro pool status {how:?}: {out:?}");
        assert!(
            out.stdout
                .contains("pool manager of workflow \"capi-jobs\""),
            "{how:?}: {}",
            out.stdout
        );
        // The tool's job, by its launcher's name for it.
        assert!(
            out.stdout.contains("jobs 1, hosts 1") && out.stdout.contains("maestro.job."),
            "{how:?}: {}",
            out.stdout
        );
    }
    let m = maestro();
    let launch = [m.to_str().expect("utf-8 path"), "run", "-n", "1", "--"];
    let found_by = ("MSTRO_POOL_MANAGER_INFO", info.as_str());
    let out = exchange_launched(&c, ("capi-jobs", found_by), &["--cdos", "8"], &launch);
    assert_exchange(&out);
    assert_tool_saw_two(tool, reader);
}

/// Jobs of other allocations find the PM by its info file on a shared file system
/// (`MSTRO_POOL_MANAGER_INFO_FILE`), the secret never on a command line: the C producer and
/// consumer with nothing but that variable, the file written by `maestro pm --info-file`.
#[test]
fn c_programs_find_the_pm_by_its_info_file() {
    let c = installed();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("wf.info");
    let path = file.to_str().expect("utf-8 path");
    let (pm, _) = start_pm("capi-file", &["--info-file", path]);
    let found_by = ("MSTRO_POOL_MANAGER_INFO_FILE", path);
    let out = exchange_launched(&c, ("capi-file", found_by), &["--cdos", "8"], &[]);
    assert_exchange(&out);
    pm.terminate(Duration::from_secs(10));
}

/// A C producer and consumer written against Maestro's API ride out the death of their
/// pool manager: `kill -9` of it at three moments of their exchange (before it, early in
/// it, later), the PM restarted with `maestro pm --reclaim` 100 ms after; both end well,
/// every checksum matching, with no change to the programs (`MSTRO_PM_RECLAIM_TIMEOUT`'s
/// default holds their calls meanwhile).
#[test]
fn c_programs_ride_out_a_killed_pm_restarted_with_reclaim() {
    let c = installed();
    for (run, delay_ms) in [0u64, 150, 400].into_iter().enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("wf.info");
        let path = file.to_str().expect("utf-8 path");
        let workflow = format!("capi-failover-{}-{run}", std::process::id());
        let tmp = [("TMPDIR", dir.path().to_str().expect("utf-8 path"))];
        let (mut pm, _) = start_pm_with_env(&workflow, &["--info-file", path], &tmp);
        let spawn = |name: &str, args: &[&str]| {
            let mut cmd = Command::new(c.bin(name));
            env(&mut cmd, &workflow)
                .args(args)
                .env("MSTRO_POOL_MANAGER_INFO_FILE", path);
            Group::spawn(&mut cmd)
        };
        let consumer = spawn("consumer", &["--expect", "2"]);
        let producer = spawn("producer", &["--cdos", "8"]);
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: signalling the PM's process, which this test started.
        unsafe { libc::kill(pm.pid(), libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(100));
        let (mut next, _) = start_pm_with_env(
            &workflow,
            &["--info-file", path, "--reclaim", "--grace", "2"],
            &tmp,
        );
        let logs =
            [&mut pm, &mut next].map(|g| common::lines(g.child.stderr.take().expect("stderr")));
        let p = producer.wait(Duration::from_secs(120));
        let k = consumer.wait(Duration::from_secs(120));
        if p.code() != Some(0) || k.code() != Some(0) {
            let [killed, next] = logs.map(|l| l.try_iter().collect::<Vec<_>>().join("\n"));
            panic!(
                "kill after {delay_ms} ms: producer: {p:?}\nconsumer: {k:?}\nthe killed PM's log:\n{killed}\nthe next PM's log:\n{next}"
            );
        }
        assert_exchange(&format!("{}{}", p.stdout, k.stdout));
        eprintln!(
            "kill after {delay_ms} ms: producer ran {:.2} s, consumer {:.2} s",
            p.elapsed.as_secs_f64(),
            k.elapsed.as_secs_f64()
        );
        drop((pm, next));
    }
}

/// A job of two ranks and no pool manager anywhere: each rank fails at its first pool
/// operation within `MSTRO_POOL_MANAGER_WAIT` plus a second, saying how to start one
/// (it used to run a silent pool of its own and wait out `MSTRO_TIMEOUT`); asked for
/// (`MSTRO_LOCAL_POOL=1`) each runs a local pool at once instead.
#[test]
fn a_job_without_a_pool_manager_fails_at_once_and_says_how_to_start_one() {
    let c = installed();
    let consumer = c.bin("consumer");
    let mut cmd = Command::new(maestro());
    env(&mut cmd, "capi-nopm")
        .env("MSTRO_POOL_MANAGER_WAIT", "2")
        .env("MSTRO_TIMEOUT", "60")
        .args(["run", "-n", "2", "--"])
        .arg(&consumer)
        .args(["--expect", "2"]);
    let started = Instant::now();
    let out = run(&mut cmd, Duration::from_secs(60));
    let took = started.elapsed();
    assert_ne!(out.code(), Some(0), "{out:?}");
    // Two seconds of looking, a second of grace, and the launcher's own start and end.
    assert!(took < Duration::from_secs(8), "took {took:?}: {out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    for what in [
        "no pool manager for workflow \"capi-nopm\"",
        "looked for 2.0 s (MSTRO_POOL_MANAGER_WAIT)",
        "looked once: this is the rank that would serve it",
        "mstro_pm_start()",
        "MSTRO_LOCAL_POOL=1",
    ] {
        assert!(said.contains(what), "{what:?} not in: {said}");
    }
    // Asked for: a local pool in each rank, found at once (nothing offered there, so the
    // consumer's demand times out as a local pool's does: MSTRO_TIMEOUT=1).
    let mut cmd = Command::new(maestro());
    env(&mut cmd, "capi-nopm")
        .env("MSTRO_LOCAL_POOL", "1")
        .env("MSTRO_TIMEOUT", "1")
        .env("MSTRO_LOG_LEVEL", "info")
        .args(["run", "-n", "2", "--"])
        .arg(&consumer)
        .args(["--expect", "2"]);
    let out = run(&mut cmd, Duration::from_secs(60));
    let said = format!("{}{}", out.stdout, out.stderr);
    let local = "no pool manager to join (MSTRO_LOCAL_POOL=1): a local pool inside this process";
    assert_eq!(said.matches(local).count(), 2, "{said}");
    assert!(!said.contains("no pool manager for workflow"), "{said}");
}

/// Adds the shipped `examples/c/roles.sh` (PM tool as rank 0, producer 1, consumer 2) to
/// `cmd`, running the programs installed for the test.
fn roles<'a>(c: &Installed, cmd: &'a mut Command) -> &'a mut Command {
    let bin = c.bin("pm_tool");
    cmd.env(
        "ROLES_EXAMPLES",
        bin.parent().expect("the examples' directory"),
    )
    .arg(repo().join("examples/c/roles.sh"))
}

/// Checks a one-job run: the exchange, and the PM tool saw both clients join and leave.
fn assert_job(out: &Output) {
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert_exchange(&out.stdout);
    assert!(
        out.stdout.contains("pm-tool: 2 joined, 2 left; stopping"),
        "{}",
        out.stdout
    );
}

#[test]
fn c_programs_under_maestro_run_find_the_pm_through_pmix() {
    let c = installed();
    let mut cmd = Command::new(maestro());
    roles(&c, env(&mut cmd, "capi-run").args(["run", "-n", "3", "--"]));
    assert_job(&run(&mut cmd, Duration::from_secs(90)));
}

#[test]
fn c_programs_under_srun_find_the_pm_through_pmix() {
    let c = installed();
    let slurm = Slurm::start();
    let mut cmd = slurm.srun();
    roles(
        &c,
        env(&mut cmd, "capi-srun").args(["--mpi=pmix", "-n", "3"]),
    );
    assert_job(&run(&mut cmd, Duration::from_secs(120)));
}

#[test]
fn c_programs_under_mpirun_find_the_pm_through_pmix() {
    let c = installed();
    let mut cmd = Command::new("mpirun");
    roles(
        &c,
        env(&mut cmd, "capi-mpirun").args(["--allow-run-as-root", "--oversubscribe", "-np", "3"]),
    );
    assert_job(&run(&mut cmd, Duration::from_secs(120)));
}

/// Runs `program ARGS` under valgrind's leak check (system libraries' own leaks
/// suppressed by `capi/valgrind.supp`).
fn valgrind(c: &Installed, workflow: &str, info: &str, program: &str, args: &[&str]) -> Group {
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--error-exitcode=9",
    ])
    .arg(format!(
        "--suppressions={}",
        repo().join("capi/valgrind.supp").display()
    ))
    .arg(c.bin(program))
    .args(args);
    env(&mut cmd, workflow).env("MSTRO_POOL_MANAGER_INFO", info);
    Group::spawn(&mut cmd)
}

#[test]
fn producer_and_consumer_leak_nothing_under_valgrind() {
    let c = installed();
    let (pm, info) = start_pm_with_env("capi-valgrind", &[], &[("MSTRO_LOG_LEVEL", "info")]);
    let consumer = valgrind(&c, "capi-valgrind", &info, "consumer", &["--expect", "2"]);
    let producer = valgrind(&c, "capi-valgrind", &info, "producer", &["--cdos", "8"]);
    let mut pm = Some(pm);
    for (name, run) in [("producer", producer), ("consumer", consumer)] {
        let out = run.wait(Duration::from_secs(300));
        if out.code() != Some(0) {
            let said = pm.take().map(|pm| pm.terminate(Duration::from_secs(10)));
            panic!(
                "{name} under valgrind: {}\nthe pool manager said: {}",
                out.stderr,
                said.map(|o| o.stderr).unwrap_or_default()
            );
        }
        assert!(
            out.stderr.contains("definitely lost: 0 bytes in 0 blocks")
                && out.stderr.contains("ERROR SUMMARY: 0 errors"),
            "{name}: {}",
            out.stderr
        );
    }
    if let Some(pm) = pm {
        pm.terminate(Duration::from_secs(10));
    }
}

#[test]
fn the_installed_maestro_pm_line_is_what_the_c_programs_read() {
    // `maestro pm` from the installation prints the line launch scripts parse.
    let c = installed();
    let mut cmd = Command::new(c.prefix.join("bin/maestro"));
    cmd.args(["pm", "--print-info", "--workflow", "capi-line"]);
    let mut pm = Group::spawn(&mut cmd);
    let line = await_line(
        pm.child.stdout.take().expect("stdout"),
        "MSTRO_POOL_MANAGER_INFO;",
    );
    assert!(line.starts_with("MSTRO_POOL_MANAGER_INFO;mstro-pm-v1:") && line.ends_with(';'));
    pm.terminate(Duration::from_secs(10));
}

/// The functions `maestro.h` declares, by reading it (a declaration is a line that names
/// `mstro_...(` right before its first parenthesis, outside comments and macros).
fn declared_functions(header: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut in_comment = false;
    for line in header.lines() {
        let l = line.trim();
        if in_comment || l.starts_with("/*") {
            in_comment = !l.contains("*/");
            continue;
        }
        if l.starts_with('#') || l.starts_with("typedef") {
            continue;
        }
        // The identifier right before the first `(`.
        let Some((before, _)) = l.split_once('(') else {
            continue;
        };
        let name = before.rsplit([' ', '*']).next().unwrap_or_default();
        if name.starts_with("mstro_") {
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn the_library_exports_exactly_what_the_header_declares() {
    let c = installed();
    let lib = c.prefix.join("lib/libmaestro.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}", lib.display());
    let exported: std::collections::BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("mstro_"))
        .map(str::to_string)
        .collect();
    let header = std::fs::read_to_string(c.prefix.join("include/maestro.h")).expect("header");
    let declared = declared_functions(&header);
    assert!(declared.len() > 40, "read {} declarations", declared.len());
    let missing: Vec<_> = declared.difference(&exported).collect();
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing.is_empty() && undeclared.is_empty(),
        "declared but not exported: {missing:?}; exported but not declared: {undeclared:?}"
    );
}

/// A C program told its workflow's name but no pool manager says, once, that it runs a
/// local pool of its own (it would otherwise wait for other processes' CDOs in silence).
#[test]
fn a_program_of_a_named_workflow_without_a_pm_says_it_runs_a_local_pool() {
    let c = installed();
    let mut cmd = Command::new(c.bin("consumer"));
    env(&mut cmd, "capi-nopm")
        .args(["--expect", "1"])
        .env("MSTRO_TIMEOUT", "1");
    let out = run(&mut cmd, Duration::from_secs(60));
    assert_ne!(out.code(), Some(0), "{out:?}");
    let said = "no pool manager of workflow \"capi-nopm\" found";
    assert_eq!(out.stderr.matches(said).count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("runs a local pool of its own"),
        "{}",
        out.stderr
    );
    // The failed call (its timeout) is the program's to tell, not a library warning.
    assert!(!out.stderr.contains("WARN maestro:"), "{}", out.stderr);
}

/// A one-process program's local pool leaves no socket directory behind in the user's
/// private directory, whether the program exits without `mstro_finalize` (a failed call,
/// `exit(1)`) or is stopped by Ctrl-C.
#[test]
fn a_local_pool_leaves_no_socket_directory_when_its_program_exits_or_is_interrupted() {
    use std::os::unix::process::ExitStatusExt;
    let c = installed();
    let tmp = tempfile::tempdir().expect("tempdir");
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let private = tmp.path().join(format!("maestro-{uid}"));
    let pm_dirs = || -> Vec<String> {
        std::fs::read_dir(&private)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("pm-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    for interrupt in [false, true] {
        let mut cmd = Command::new(c.bin("consumer"));
        env(&mut cmd, "capi-exit")
            .args(["--expect", "1"])
            .env("TMPDIR", tmp.path())
            .env("MSTRO_TIMEOUT", if interrupt { "120" } else { "1" });
        let program = Group::spawn(&mut cmd);
        if interrupt {
            let start = std::time::Instant::now();
            while pm_dirs().is_empty() {
                assert!(start.elapsed() < Duration::from_secs(30), "no local pool");
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: signalling the process this test started.
            unsafe { libc::kill(program.pid(), libc::SIGINT) };
        }
        let out = program.wait(Duration::from_secs(60));
        // Interrupted, it dies by the signal, or exits with 1 where the handler of a
        // library loaded before (libinfinipath, by libfabric's psm provider) does that.
        let interrupted = interrupt && out.status.signal() == Some(libc::SIGINT);
        assert!(interrupted || out.code() == Some(1), "{out:?}");
        assert_eq!(pm_dirs(), Vec::<String>::new(), "interrupted: {interrupt}");
    }
}

/// The front page's C program is `examples/c/first.c`, character for character, and runs
/// as it says: the consumer reads the producer's own memory.
#[test]
fn the_front_pages_c_program_is_the_example_and_runs() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    let block = readme
        .split("```c\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a C block on the front page");
    let file = std::fs::read_to_string(repo().join("examples/c/first.c")).expect("first.c");
    assert_eq!(
        block, file,
        "README.md's C program differs from examples/c/first.c"
    );
    let c = installed();
    let out = run(&mut Command::new(c.bin("first")), Duration::from_secs(60));
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, "1048576 bytes: the producer's memory\n");
}
