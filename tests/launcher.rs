//! `maestro run` as a PMIx host, with real OpenPMIx clients: identity, put/fence/get,
//! publish/lookup, credentials, events, failure and abort propagation, signals, tools, and
//! bad input.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Group, alive, children_named, example, maestro, maestro_run};

fn ex(name: &str) -> String {
    example(name).to_string_lossy().into_owned()
}

#[test]
fn ranks_get_their_pmix_rank() {
    let out = maestro_run(&["-n", "3", "--", "sh", "-c", "echo rank=$PMIX_RANK"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["rank=0", "rank=1", "rank=2"]);
}

#[test]
fn exit_code_is_the_worst_rank_status() {
    let out = maestro_run(&["-n", "3", "--", "sh", "-c", "exit $PMIX_RANK"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
}

#[test]
fn labels_prefix_each_line() {
    let out = maestro_run(&["-n", "2", "--label", "--", "sh", "-c", "echo a; echo b"]);
    assert_eq!(out.code(), Some(0));
    for r in 0..2 {
        assert_eq!(
            out.lines_with(&format!("[{r}] ")).len(),
            2,
            "{}",
            out.stdout
        );
    }
}

#[test]
fn stdin_goes_to_the_rank_the_user_names_and_only_to_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input");
    std::fs::write(&input, "line1\nline2\n").expect("write input");
    let with_stdin = |args: &[&str]| {
        let file = std::fs::File::open(&input).expect("open input");
        Group::spawn_with_stdin(
            Command::new(maestro())
                .args(["run", "-n", "2", "--label"])
                .args(args)
                .args(["--", "sh", "-c", "sed 's/^/got: /'; echo eof"]),
            file.into(),
        )
        .wait(Duration::from_secs(30))
    };
    // As mpirun: rank 0 by default; the others read end of file at once.
    for (args, reader) in [
        (&[][..], Some(0)),
        (&["--stdin", "1"][..], Some(1)),
        (&["--stdin", "none"][..], None),
    ] {
        let out = with_stdin(args);
        assert_eq!(out.code(), Some(0), "{args:?}: {out:?}");
        for r in 0..2 {
            let got = out.lines_with(&format!("[{r}] got: line")).len();
            assert_eq!(
                got,
                if reader == Some(r) { 2 } else { 0 },
                "{args:?}: {}",
                out.stdout
            );
            assert_eq!(
                out.lines_with(&format!("[{r}] eof")).len(),
                1,
                "{}",
                out.stdout
            );
        }
    }
    let out = maestro_run(&["-n", "2", "--stdin", "2", "--", "true"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("ranks 0 to 1 only"), "{}", out.stderr);
}

#[test]
fn put_fence_get_publish_lookup_and_credentials_across_three_ranks() {
    let out = maestro_run(&["-n", "3", &ex("pmix_hello")]);
    out.assert_hello(3);
    assert_eq!(
        out.lines_with("publish/lookup: ok (").len(),
        2,
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("rank 0: publish/lookup: published"));
    assert_eq!(
        out.lines_with("rank 1: credential: validated (uid Some(")
            .len(),
        1,
        "{}",
        out.stdout
    );
}

#[test]
fn ranks_get_the_fabric_and_their_nic_from_the_host() {
    let out = maestro_run(&["-n", "2", &ex("fabric_info")]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    for r in 0..2 {
        let dev = out.lines_with(&format!("rank {r}: PMIx fabric: "));
        assert_eq!(dev.len(), 1, "{}", out.stdout);
        assert!(dev[0].contains("lo"), "{}", dev[0]);
        // Traffic counters of the network interfaces, loopback among them.
        let traffic = out.lines_with(&format!("rank {r}: traffic: "));
        assert_eq!(traffic.len(), 1, "{}", out.stdout);
        assert!(traffic[0].contains("lo rx="), "{}", traffic[0]);
        let dist = out.lines_with(&format!("rank {r}: device distances: "));
        assert_eq!(dist.len(), 1, "{}", out.stdout);
        assert!(!dist[0].contains("not provided"), "{}", dist[0]);
        let nic = out.lines_with(&format!("rank {r}: NIC "));
        assert!(
            nic[0].ends_with("(from the host; local choice agrees: yes)"),
            "{}",
            out.stdout
        );
    }
}

#[test]
fn an_event_from_rank_0_reaches_ranks_1_and_2() {
    let out = maestro_run(&["-n", "3", &ex("pmix_events")]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    for r in 1..3 {
        assert!(
            out.stdout.contains(&format!(
                "rank {r}: received event -3042 from rank 0: hello from rank 0"
            )),
            "{}",
            out.stdout
        );
    }
}

#[test]
fn abort_propagates_to_the_others_and_sets_the_exit_code() {
    let out = maestro_run(&["-n", "3", "--grace", "0.5", &ex("pmix_fail"), "abort", "7"]);
    assert_eq!(out.code(), Some(7), "{out:?}");
    assert!(
        out.stderr.contains("rank 0 called PMIx_Abort(7)"),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.lines_with("rank Some(0) failed (event -7, exit code Some(7))")
            .len(),
        2,
        "{}",
        out.stdout
    );
}

#[test]
fn a_crashing_rank_is_reported_with_128_plus_signal() {
    let out = maestro_run(&["-n", "3", "--grace", "0.5", &ex("pmix_fail"), "crash"]);
    assert_eq!(out.code(), Some(137), "{out:?}");
    assert!(out.stderr.contains("rank 0 (pid "), "{}", out.stderr);
    assert!(out.stderr.contains("was killed by signal 9"));
    assert_eq!(
        out.lines_with("rank Some(0) failed (event -7, exit code Some(137))")
            .len(),
        2
    );
}

#[test]
fn the_ranks_stopped_because_one_failed_are_counted_and_the_cause_named() {
    let script = "if [ \"$PMIX_RANK\" = 1 ]; then exit 5; fi; exec sleep 30";
    let out = maestro_run(&["-n", "3", "--grace", "0.2", "--", "sh", "-c", script]);
    assert_eq!(out.code(), Some(5), "{out:?}");
    for says in [
        "rank 1 (pid ",
        "exited with status 5",
        "stopping the 2 rank(s) still running because rank 1 failed (status 5)",
    ] {
        assert!(out.stderr.contains(says), "{says}: {}", out.stderr);
    }
}

#[test]
fn exiting_without_finalize_is_a_failure() {
    let out = maestro_run(&["-n", "2", "--grace", "0.5", &ex("pmix_fail"), "exit", "0"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("exited without calling PMIx_Finalize (mstro_finalize, for a program"),
        "{}",
        out.stderr
    );
    assert_eq!(out.lines_with("rank Some(0) failed").len(), 1);
}

#[test]
fn sigterm_leaves_no_process_behind() {
    let mut cmd = Command::new(maestro());
    cmd.args(["run", "-n", "2", "--", "sleep", "1000"]);
    let g = Group::spawn(&mut cmd);
    let launcher = g.pid();
    let deadline = Instant::now() + Duration::from_secs(20);
    let ranks = loop {
        // Only the ranks (`sleep`), not the janitor or a child between fork and exec.
        let c = children_named(launcher, "sleep");
        if c.len() == 2 {
            break c;
        }
        assert!(Instant::now() < deadline, "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: signalling the launcher we started.
    unsafe { libc::kill(launcher, libc::SIGTERM) };
    // The ranks (`sleep 1000`) end only by the forwarded signal.
    let out = g.wait(Duration::from_secs(60));
    assert_eq!(out.code(), Some(143), "{out:?}");
    for p in ranks {
        assert!(!alive(p), "rank pid {p} survived");
    }
    assert!(!common::maestro_run_dir(launcher).exists());
}

#[test]
fn a_launcher_killed_with_sigkill_leaves_nothing_behind() {
    // A workflow mid-run: ranks with fabric endpoints (16 MiB files in /dev/shm each), a
    // pool manager published node-wide, the launcher's private directory.
    let mut cmd = Command::new(maestro());
    cmd.args(["run", "-n", "3", "--"])
        .arg(example("pool_workflow"))
        .args(["--cdos", "1000000"]);
    let mut g = Group::spawn(&mut cmd);
    let launcher = g.pid();
    let said = common::lines(g.child.stdout.take().expect("stdout"));
    let announced = said
        .recv_timeout(Duration::from_secs(30))
        .expect("rank 0 announces its pool manager");
    assert!(announced.contains("pool manager at"), "{announced}");
    let ranks = children_named(launcher, "pool_workflow");
    assert_eq!(ranks.len(), 3, "{ranks:?}");
    let shm_of = |pids: &[i32]| -> Vec<String> {
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| pids.iter().any(|p| n.starts_with(&format!("mstro.{p}."))))
                    .collect()
            })
            .unwrap_or_default()
    };
    let published = || -> bool {
        // Where `maestro run` shares what its jobs publish (docs/guide/maestro-run.md, "across jobs").
        let dir = safefs::node_user_dir()
            .expect("the user's node-wide directory")
            .join("pmix");
        std::fs::read_dir(dir).is_ok_and(|d| {
            d.flatten().any(|e| {
                std::fs::read_to_string(e.path())
                    .is_ok_and(|t| t.contains(&format!("\nhost {launcher}\n")))
            })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while shm_of(&ranks).len() < 3 || !published() {
        assert!(Instant::now() < deadline, "the workflow did not get going");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: killing the launcher we started.
    unsafe { libc::kill(launcher, libc::SIGKILL) };
    let _ = g.child.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = (
            common::maestro_run_dir(launcher).exists(),
            shm_of(&ranks),
            published(),
            ranks.iter().filter(|&&p| alive(p)).count(),
        );
        if left == (false, Vec::new(), false, 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind (run dir, /dev/shm files, publication, live ranks): {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_tool_attaches_and_queries_the_namespaces() {
    let mut cmd = Command::new(maestro());
    cmd.args(["run", "-n", "2", "--tool-support", "--", "sleep", "30"]);
    let g = Group::spawn(&mut cmd);
    let pid = g.pid().to_string();
    // The launcher announces tool support once its server is up; retry until it answers.
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = common::run(
            Command::new(maestro()).args(["query", "--pid", &pid, "--json"]),
            Duration::from_secs(30),
        );
        // Tools may attach before the job is fully up: wait for the ranks and the fabric.
        let ready = serde_json::from_str::<serde_json::Value>(out.stdout.trim()).is_ok_and(|v| {
            let procs = v["jobs"][0]["procs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            !procs.is_empty()
                && procs.iter().all(|p| p["pid"].as_i64().unwrap_or(0) > 0)
                && v["fabric"]["inventory"].is_object()
        });
        if out.code() == Some(0) && ready {
            break out;
        }
        assert!(Instant::now() < deadline, "query never succeeded: {out:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    let job = &v["jobs"][0];
    assert_eq!(job["nspace"], format!("maestro.job.{pid}"));
    assert_eq!(job["size"], 2);
    assert_eq!(job["procs"].as_array().map(Vec::len), Some(2));
    assert_eq!(job["procs"][0]["state"], "running", "states in words: {v}");
    assert_eq!(v["fabric"]["inventory"]["schema"], "maestro.inventory/1");
    assert!(v["fabric"]["assignment"]["1"]["nic"].is_string(), "{v}");
    let launcher = g.pid();
    let end = g.terminate(Duration::from_secs(10));
    assert_eq!(end.code(), Some(143), "{end:?}");
    assert!(!common::maestro_run_dir(launcher).exists());
}

#[test]
fn a_tool_finds_the_system_server_without_its_pid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(maestro());
    cmd.env("TMPDIR", tmp.path())
        .args(["run", "-n", "1", "--system-server", "--", "sleep", "30"]);
    let g = Group::spawn(&mut cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = common::run(
            Command::new(maestro())
                .args(["query", "--system", "--system-tmpdir"])
                .arg(tmp.path()),
            Duration::from_secs(30),
        );
        if out.code() == Some(0)
            && out
                .stdout
                .contains(&format!("job maestro.job.{} (1 ranks)", g.pid()))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "system server never answered: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(g);
}

#[test]
fn mpirun_and_srun_habits_mean_what_they_mean_there() {
    // -np N, -x VAR=VALUE and -x VAR (its value here), --oversubscribe (ranks share the
    // cores anyway), -l (srun's --label); the program's own options are its own.
    let out = common::run(
        Command::new(maestro())
            .env("MAESTRO_TEST_EXPORTED", "from-the-launcher")
            .args(["run", "-np", "2", "-x", "MAESTRO_TEST_SET=given", "-x"])
            .args(["MAESTRO_TEST_EXPORTED", "--oversubscribe", "-l", "--"])
            .args([
                "sh",
                "-c",
                "echo $MAESTRO_TEST_SET $MAESTRO_TEST_EXPORTED",
                "-np",
            ]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        ["[0] given from-the-launcher", "[1] given from-the-launcher"],
        "{out:?}"
    );
}

#[test]
fn maestro_pm_refuses_settings_that_cannot_work_before_starting() {
    let long = "w".repeat(5000);
    for (args, says) in [
        (&["--workflow", ""][..], "the workflow name is empty"),
        (&["--workflow", long.as_str()][..], "at most 255"),
        (&["--join-timeout", "0"][..], "a time limit of 0"),
        (&["--ack-timeout", "0"][..], "a time limit of 0"),
        (&["--max-ingress", "-1"][..], "\"-1\" is not a size"),
    ] {
        let out = common::run(
            Command::new(maestro()).arg("pm").args(args),
            Duration::from_secs(60),
        );
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn bad_usage_is_exit_code_2_with_a_message() {
    let out = maestro_run(&["-n", "0", "--", "true"]);
    assert_eq!(out.code(), Some(2));
    assert!(
        out.stderr.contains("1 or more are needed"),
        "{}",
        out.stderr
    );
    // Negative numbers are values with a message, not unknown options.
    for args in [
        &["-n", "-1", "--", "true"][..],
        &["--timeout", "-1", "--", "true"][..],
    ] {
        let out = maestro_run(args);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("invalid value '-1'"), "{}", out.stderr);
    }
    // Options it does not know are not run as the program; --nprocs is -n.
    for (args, said) in [
        (
            &["-N", "2", "true"][..],
            "-N (a number of nodes or ranks per node) is an option of mpirun or srun",
        ),
        (&["--bogus", "true"][..], "unknown option --bogus"),
    ] {
        let out = maestro_run(args);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(said), "{}", out.stderr);
    }
    // An unknown option before `--` is no program either; nor is a time limit of 0 or of
    // more seconds than a command line takes, nor -x of a variable not set here.
    for (args, says) in [
        (
            &["--bogus-flag", "2", "--", "true"][..],
            "unknown option --bogus-flag",
        ),
        (&["--timeout", "0", "--", "true"][..], "a time limit of 0"),
        (&["--timeout", "1e300", "--", "true"][..], "longer than"),
        (
            &["-x", "MAESTRO_TEST_UNSET_VAR", "--", "true"][..],
            "give -x MAESTRO_TEST_UNSET_VAR=VALUE",
        ),
        (&["-x", "=1", "--", "true"][..], "is not VAR or VAR=VALUE"),
    ] {
        let out = maestro_run(args);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    let out = maestro_run(&["--nprocs", "2", "--", "true"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let out = maestro_run(&["-n", "2", "--grace", "soon", "--", "true"]);
    assert_eq!(out.code(), Some(2));
    assert!(
        out.stderr.contains("is not a number of seconds"),
        "{}",
        out.stderr
    );
    let out = maestro_run(&["-n", "1", "--", "/nonexistent/program"]);
    assert_eq!(out.code(), Some(127), "{out:?}");
    assert!(out.stderr.contains("cannot start"), "{}", out.stderr);
    let out = common::run(
        Command::new(maestro()).args(["query", "--pid", "1"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains("process 1 lets no PMIx tools attach"),
        "{}",
        out.stderr
    );
    let out = common::run(
        Command::new(maestro()).args(["query", "--uri", "garbage"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains("is not a PMIx server URI"),
        "{}",
        out.stderr
    );
}

#[test]
fn time_limit_stops_the_job_with_124() {
    let out = maestro_run(&[
        "-n",
        "2",
        "--timeout",
        "0.5",
        "--kill-after",
        "0.2",
        "--",
        "sleep",
        "100",
    ]);
    // 124 is the time limit's code: `sleep 100` ending by itself would be 0.
    assert_eq!(out.code(), Some(124), "{out:?}");
}

/// Every tool of OpenPMIx's libpmix-bin against `maestro run --tool-support`: each gets an
/// answer or a clean error (or dies of its own bug: Debian's `pquery` 4.2.2rc2 of SIGFPE,
/// `plookup` of SIGSEGV on a missing key), and the job runs to its normal exit. (OpenPMIx
/// 4.2's server itself crashed answering `pattrs --host`: the launcher refuses that query.)
#[test]
fn pmix_tools_never_take_the_job_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let done = dir.path().join("done");
    let mut cmd = Command::new(maestro());
    cmd.args(["run", "-n", "2", "--tool-support", "--", "sh", "-c"])
        .arg(format!(
            "while [ ! -e {} ]; do sleep 0.05; done",
            done.display()
        ));
    let mut g = Group::spawn(&mut cmd);
    let err = common::lines(g.child.stderr.take().expect("stderr"));
    common::expect_line(&err, &["tools may attach"], Duration::from_secs(30));
    let pid = g.pid().to_string();
    let tools: [&[&str]; 9] = [
        &["pps"],
        &["pattrs", "--host", "all"],
        &["pattrs", "--server", "all"],
        &["pattrs", "--client", "all"],
        &["pquery", "pmix.qry.nspaces"],
        &["pquery", "pmix.qry.attrs"],
        &["pevent", "--event", "-1", "--range", "3"],
        &["plookup", "--timeout", "1", "some.key"],
        &["plookup", "--wait", "--timeout", "1", "some.key"],
    ];
    for tool in tools {
        let out = common::run(
            Command::new(tool[0])
                .arg("--pid")
                .arg(&pid)
                .args(&tool[1..]),
            Duration::from_secs(30),
        );
        eprintln!("{tool:?}: {:?} {}", out.status, out.stdout.trim());
        assert!(
            alive(g.pid()),
            "{tool:?} took the launcher down: {}",
            out.stderr
        );
    }
    std::fs::write(&done, b"").expect("done file");
    let end = g.wait(Duration::from_secs(30));
    let said: Vec<String> = err.try_iter().collect();
    assert_eq!(end.code(), Some(0), "{end:?}\n{}", said.join("\n"));
    assert!(
        !said.iter().any(|l| l.contains("terminated with signal")),
        "{}",
        said.join("\n")
    );
}

/// libfabric is loaded only when used: when it cannot be loaded the error names the
/// library and why, while a job that needs no fabric still runs.
#[test]
fn an_unloadable_libfabric_is_named_and_pmix_jobs_still_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("libfabric.so.1"), b"").expect("fake library");
    let broken = |cmd: &mut Command| {
        cmd.env("LD_LIBRARY_PATH", dir.path())
            .env("MSTRO_INVENTORY_CACHE", "0");
    };
    let mut inv = Command::new(maestro());
    inv.arg("inventory");
    broken(&mut inv);
    let out = common::run(&mut inv, Duration::from_secs(60));
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains("cannot load libfabric.so.1"),
        "{}",
        out.stderr
    );
    let mut run = Command::new(maestro());
    run.args(["run", "-n", "2", &ex("pmix_hello")]);
    broken(&mut run);
    let out = common::run(&mut run, Duration::from_secs(60));
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("rank 1"), "{}", out.stdout);
}

/// With the node's inventory cached, the launcher never loads libfabric (whose
/// dependencies' constructors cost 0.2 s on Debian): the rank looks at its launcher's
/// mappings.
#[test]
fn a_cached_inventory_keeps_libfabric_out_of_the_launcher() {
    let runtime = tempfile::tempdir().expect("private runtime dir");
    let maps = |cmd: &mut Command| {
        cmd.env("XDG_RUNTIME_DIR", runtime.path()).args([
            "run",
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            "grep -c libfabric /proc/$PPID/maps || true",
        ]);
        let out = common::run(cmd, Duration::from_secs(60));
        assert_eq!(out.code(), Some(0), "{out:?}");
        out.stdout.trim().parse::<u32>().expect("a count")
    };
    assert!(
        maps(&mut Command::new(maestro())) > 0,
        "the first launch collects"
    );
    assert!(
        runtime.path().join("maestro/inventory.json").exists(),
        "cached"
    );
    assert_eq!(
        maps(&mut Command::new(maestro())),
        0,
        "the next one does not load it"
    );
}
