//! `maestro run` as a PMIx host answers what ordinary PMIx programs call, the way they call
//! it, and never hangs a job: programs of our own in `tests/c/`, each run under
//! `maestro run` and, where Open MPI's `mpirun` supports the same call, under `mpirun` too.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Group, Output, build_c, maestro, maestro_run_dir, run};

/// `maestro run -n N --timeout 30 -- ARGS...`, at most a minute.
/// `maestro run -n N -- ARGS...` with a 30 s time limit: a job that hangs ends with code
/// 124, not 0, so a test's exit-code check also says that nothing hung.
fn under_maestro_run(n: &str, args: &[&str]) -> Output {
    run(
        Command::new(maestro())
            .args(["run", "-n", n, "--timeout", "30", "--"])
            .args(args),
        Duration::from_secs(60),
    )
}

/// `mpirun -np 2 ARGS...` (the reference host), at most a minute.
fn under_mpirun(args: &[&str]) -> Output {
    run(
        Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
            .args(args),
        Duration::from_secs(60),
    )
}

/// Asserts that each of `lines` is printed exactly once.
fn expect_once(out: &Output, lines: &[&str]) {
    for line in lines {
        assert_eq!(out.lines_with(line).len(), 1, "{line}: {}", out.stdout);
    }
}

#[test]
fn pmix_log_writes_each_channel_with_the_rank_and_answers_truthfully() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_log.c", Some("pmix"), dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    let out = under_maestro_run("2", &[exe]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    for rank in 0..2 {
        // Each line through the launcher's output, with the rank in front; the stdout
        // line with the time it was logged.
        assert!(
            out.stderr
                .contains(&format!("[{rank}] pmix-log-test stderr from rank {rank}")),
            "{}",
            out.stderr
        );
        let stamped = out
            .lines_with(&format!("[{rank}] pmix-log-test stdout from rank {rank}"))
            .into_iter()
            .any(|l| l.len() > 24 && l.as_bytes()[4] == b'-' && l.contains('T'));
        assert!(stamped, "{}", out.stdout);
        // Syslog where the machine has one, an honest NOT-SUPPORTED where it has none.
        let syslog = if std::path::Path::new("/dev/log").exists() {
            "SUCCESS"
        } else {
            "NOT-SUPPORTED"
        };
        expect_once(
            &out,
            &[
                &format!("R{rank} log pmix.log.stderr SUCCESS"),
                &format!("R{rank} log pmix.log.stdout SUCCESS"),
                &format!("R{rank} log pmix.log.nosuchchannel NOT-SUPPORTED"),
                &format!("R{rank} log pmix.log.syslog {syslog}"),
            ],
        );
    }
    // The reference: under mpirun the same program logs to stderr and stdout too. Open MPI
    // 4.1's mpirun is not reliable here (seen on this machine: a program's status line after
    // a forwarded log line lost, and mpirun itself killed by SIGSEGV in
    // orte_iof_base_write_handler, about one run in ten), so the reference gets three tries
    // and one clean run must show both channels written for both ranks.
    let wrote_both = |out: &Output| {
        out.code() == Some(0)
            && [("stderr", &out.stderr), ("stdout", &out.stdout)]
                .iter()
                .all(|(channel, text)| {
                    text.matches(&format!("pmix-log-test {channel} from rank"))
                        .count()
                        == 2
                })
    };
    let runs: Vec<Output> = (0..3).map(|_| under_mpirun(&[exe])).collect();
    assert!(runs.iter().any(wrote_both), "{runs:?}");
}

#[test]
fn a_closed_output_pipe_ends_the_job_like_sigpipe() {
    // `maestro run -n 2 -- yes | head -2`: the reader goes away after two lines.
    let mut job = Group::spawn(Command::new(maestro()).args(["run", "-n", "2", "--", "yes"]));
    let launcher = job.pid();
    let mut out = BufReader::new(job.child.stdout.take().expect("stdout"));
    let mut line = String::new();
    for _ in 0..2 {
        line.clear();
        out.read_line(&mut line).expect("a line");
        assert_eq!(line, "y\n");
    }
    // Both ranks run (the lines read may all be rank 0's, from before rank 1 started).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ranks = common::children_named(launcher, "yes");
    while ranks.len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        ranks = common::children_named(launcher, "yes");
    }
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    drop(out);
    // 141: the ranks died of SIGPIPE, the closed pipe's doing (they run `yes`, which
    // nothing else ends).
    let end = job.wait(Duration::from_secs(60));
    assert_eq!(end.code(), Some(141), "{end:?}");
    for p in ranks {
        assert!(!common::alive(p), "rank pid {p} survived");
    }
    assert!(!maestro_run_dir(launcher).exists());
}

#[test]
fn queries_answer_what_the_host_knows_even_mixed_with_what_it_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_control.c", Some("pmix"), dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    let out = under_maestro_run("2", &[exe, "query"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    // One known and one unknown key: the known one's answer reaches the program
    // (PARTIAL_SUCCESS would have reached it as no result at all).
    expect_once(
        &out,
        &[
            "query mixed SUCCESS 1",
            "query nsinfo SUCCESS 1",
            "query debug SUCCESS 1",
        ],
    );
    // The reference answers the mixed query the same way.
    expect_once(&under_mpirun(&[exe, "query"]), &["query mixed SUCCESS 1"]);
}

#[test]
fn job_control_signals_ranks_accepts_registrations_and_kills_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_control.c", Some("pmix"), dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    let out = under_maestro_run("2", &[exe, "signal"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    expect_once(
        &out,
        &[
            "control preemptible SUCCESS",
            "control signal SUCCESS",
            "R1 got SIGUSR1",
        ],
    );
    // A rank kills its own job: every rank dies of SIGKILL at once, the launcher says 137.
    let out = under_maestro_run("2", &[exe, "kill"]);
    assert_eq!(out.code(), Some(137), "{out:?}");
}

#[test]
fn a_tool_kills_a_running_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tool = build_c("cc", "pmix_tool_control.c", Some("pmix"), dir.path());
    let (job, uri) = common::tool_support_launcher(&["-n", "2", "--", "sleep", "60"]);
    let launcher = job.pid();
    let out = run(
        Command::new(&tool).args([&uri, &format!("maestro.job.{launcher}"), "kill"]),
        Duration::from_secs(20),
    );
    assert!(out.stdout.contains("proc-table SUCCESS 1"), "{out:?}");
    assert!(out.stdout.contains("kill SUCCESS"), "{out:?}");
    let end = job.wait(Duration::from_secs(10));
    assert_eq!(end.code(), Some(137), "{end:?}");
}

#[test]
fn pmix_spawn_starts_a_connected_job_and_tells_the_requestor_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_spawn.c", Some("pmix"), dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    let out = run(
        Command::new(maestro())
            .args(["run", "--label", "-n", "2", "--timeout", "30", "--"])
            .arg(exe),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    expect_once(
        &out,
        &[
            "P0 spawn SUCCESS",
            // The children are a job of their own that knows its parent, size and the
            // environment the request gave it.
            "C0 parent-id SUCCESS",
            "C1 parent-id SUCCESS",
            "C0 job-size SUCCESS 2",
            "C0 env yes",
            "C1 env yes",
            "C0 cwd /",
            "C1 cwd /",
            // Parents and children connect, see each other's data, disconnect.
            "P0 read-peer SUCCESS child 0",
            "P1 read-peer SUCCESS child 0",
            "C0 read-peer SUCCESS parent 0",
            "C1 read-peer SUCCESS parent 0",
            "P0 job-end SEEN children 0",
            // What cannot be started is said at once.
            "P0 spawn-missing-program JOB FAILED TO LAUNCH",
            "P0 spawn-zero-procs BAD-PARAM",
            // One request may start at most --max-spawn (256) processes.
            "P0 spawn-too-many BAD-PARAM",
        ],
    );
    for tag in ["P0", "P1", "C0", "C1"] {
        expect_once(
            &out,
            &[
                &format!("{tag} connect SUCCESS"),
                &format!("{tag} disconnect SUCCESS"),
            ],
        );
    }
    // Children's lines carry their namespace; the parents' their rank.
    assert!(
        out.stdout.contains(".1:0] C0 env yes") && out.stdout.contains("[1] P1 connect"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("/nonexistent/program")
            && out.stderr.contains("asks for 0 processes")
            && out.stderr.contains("asks for 65534 processes")
            && out.stderr.contains("--max-spawn"),
        "{}",
        out.stderr
    );
}

/// A rank that spawns again and again without waiting: the processes alive under the
/// launcher are capped (`--max-procs`, the ranks counted), requests past it are refused at
/// once with a line naming the option, and room comes back as the spawned processes end.
#[test]
fn spawned_processes_alive_at_once_are_capped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_spawn_flood.c", Some("pmix"), dir.path());
    let out = run(
        Command::new(maestro())
            .args([
                "run",
                "-n",
                "1",
                "--max-spawn",
                "32",
                "--max-procs",
                "70",
                "--timeout",
                "60",
                "--",
            ])
            .arg(&exe)
            .args(["32", "4", "2"]),
        Duration::from_secs(90),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    // 1 rank + 32 + 32 = 65 alive; a third 32 would pass 70.
    expect_once(
        &out,
        &[
            "spawn 0 SUCCESS",
            "spawn 1 SUCCESS",
            "spawn 2 BAD-PARAM",
            "spawn 3 BAD-PARAM",
            "spawn later SUCCESS",
        ],
    );
    assert!(
        out.stderr.contains("may start 5 more now") && out.stderr.contains("--max-procs"),
        "{}",
        out.stderr
    );
}

#[test]
fn mpi_comm_spawn_runs_under_maestro_run_as_under_mpirun() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("mpicc", "mpi_spawn.c", None, dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    let expected = [
        "parent 0 got 1100",
        "parent 1 got 1101",
        "child 0 of 2 got 100 from its parent",
        "child 1 of 2 got 101 from its parent",
    ];
    for out in [under_maestro_run("2", &[exe]), under_mpirun(&[exe])] {
        assert_eq!(out.code(), Some(0), "{out:?}");
        expect_once(&out, &expected);
    }
}

#[test]
fn a_tool_spawns_a_job_into_a_running_launcher_and_hears_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tool = build_c("cc", "pmix_tool_control.c", Some("pmix"), dir.path());
    let (job, uri) = common::tool_support_launcher(&["-n", "1", "--", "sleep", "60"]);
    let launcher = job.pid();
    let out = run(
        Command::new(&tool).args([
            &uri,
            &format!("maestro.job.{launcher}"),
            "spawn",
            "/bin/sh",
            "-c",
            "echo spawned-by-tool; exit 3",
        ]),
        Duration::from_secs(30),
    );
    assert!(
        out.stdout
            .contains(&format!("spawn SUCCESS maestro.job.{launcher}.1")),
        "{out:?}"
    );
    assert!(out.stdout.contains("job-end SEEN 3"), "{out:?}");
    // It asked for the job's stdout (PMIX_FWD_STDOUT): all of it, before the job's end.
    assert_eq!(out.lines_with("spawned-by-tool").len(), 2, "{out:?}");
    // The same rules for every job: the tool's job failed, so the launcher stops job 0
    // (after --grace) and exits with the failure's code.
    let end = job.wait(Duration::from_secs(20));
    assert_eq!(end.code(), Some(3), "{end:?}");
    assert_eq!(end.lines_with("spawned-by-tool").len(), 2, "{end:?}");
}

#[test]
fn a_tool_pulls_the_output_of_a_running_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tool = build_c("cc", "pmix_tool_iof.c", Some("pmix"), dir.path());
    let go = dir.path().join("go");
    // Each rank waits for the test's go (the tool's pull is in place), then writes a line
    // on each stream.
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; echo out-$PMIX_RANK; echo err-$PMIX_RANK >&2",
        go.display()
    );
    let (job, uri) =
        common::tool_support_launcher(&["-n", "2", "--timeout", "30", "--", "sh", "-c", &script]);
    let launcher = job.pid();
    let mut puller =
        Group::spawn(Command::new(&tool).args([&uri, &format!("maestro.job.{launcher}"), "4"]));
    let said = common::lines(puller.child.stdout.take().expect("stdout"));
    let first = said
        .recv_timeout(Duration::from_secs(20))
        .expect("the tool says whether its pull was accepted");
    assert_eq!(first, "pull SUCCESS");
    std::fs::write(&go, "").expect("touch go");
    let mut got = Vec::new();
    while let Ok(line) = said.recv_timeout(Duration::from_secs(20)) {
        if line.starts_with("seen ") {
            break;
        }
        got.push(line);
    }
    got.sort();
    assert_eq!(
        got,
        [
            "iof stderr 0 err-0",
            "iof stderr 1 err-1",
            "iof stdout 0 out-0",
            "iof stdout 1 out-1"
        ]
    );
    assert_eq!(puller.wait(Duration::from_secs(10)).code(), Some(0));
    // The launcher still writes the output itself, and ends cleanly.
    let end = job.wait(Duration::from_secs(20));
    assert_eq!(end.code(), Some(0), "{end:?}");
    assert_eq!(end.lines_with("out-").len(), 2, "{end:?}");
}

#[test]
fn heartbeat_monitoring_alerts_the_job_when_a_rank_falls_silent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_monitor.c", Some("pmix"), dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    for out in [under_maestro_run("2", &[exe]), under_mpirun(&[exe])] {
        assert_eq!(out.code(), Some(0), "{out:?}");
        expect_once(
            &out,
            &[
                "R0 monitor SUCCESS",
                // No alert while it beats; one once it stops.
                "R0 beating 0",
                "R1 beating 0",
                "R1 silent alert SEEN",
            ],
        );
    }
}

#[test]
fn groups_are_constructed_with_unique_context_ids_and_destructed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_group.c", Some("pmix"), dir.path());
    let out = under_maestro_run("3", &[exe.to_str().expect("utf-8 path")]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let id = |step: &str| -> Vec<String> {
        out.lines_with(step)
            .iter()
            .map(|l| {
                assert!(l.contains(" SUCCESS "), "{l}");
                l.rsplit(' ').next().unwrap_or_default().to_string()
            })
            .collect()
    };
    let all = id("construct-all");
    let evens = id("construct-evens");
    assert_eq!(all.len(), 3, "{}", out.stdout);
    assert_eq!(evens.len(), 2, "{}", out.stdout);
    // Every member learns the same id; the two groups' ids differ.
    assert!(all.iter().all(|i| *i == all[0] && i != "0"), "{all:?}");
    assert!(
        evens.iter().all(|i| *i == evens[0] && *i != all[0]),
        "{evens:?}"
    );
    assert_eq!(out.lines_with("destruct-all SUCCESS").len(), 3);
    assert_eq!(out.lines_with("destruct-evens SUCCESS").len(), 2);
}

#[test]
fn groups_assemble_by_invitation_and_nothing_waits_forever() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_group_invite.c", Some("pmix"), dir.path());
    let out = under_maestro_run("3", &[exe.to_str().expect("utf-8 path")]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    expect_once(
        &out,
        &[
            "R1 invited SEEN",
            "R2 invited SEEN",
            "R1 join SUCCESS",
            "R2 join SUCCESS",
            "R0 invite SUCCESS",
            "R2 construct-solo SUCCESS",
            // OpenPMIx 4.2's server does not implement leave; it must not hang.
            "R2 leave ",
        ],
    );
    assert_eq!(out.lines_with(" destruct ").len(), 3, "{}", out.stdout);
}

#[test]
fn a_debugger_releases_ranks_held_in_init() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tool = build_c("cc", "pmix_tool_control.c", Some("pmix"), dir.path());
    let client = build_c("cc", "pmix_client.c", Some("pmix"), dir.path());
    let mut job = Group::spawn(Command::new(maestro()).args([
        "run",
        "--stop-in-init",
        "-n",
        "2",
        "--timeout",
        "30",
        "--",
        client.to_str().expect("utf-8 path"),
    ]));
    let launcher = job.pid();
    let said = common::lines(job.child.stdout.take().expect("stdout"));
    // The launcher says how they are released.
    let hint = common::await_line(
        job.child.stderr.take().expect("stderr"),
        "wait in PMIx_Init for a debugger",
    );
    assert!(
        hint.contains(&format!(
            "attached to pid {launcher} releases them by raising PMIX_DEBUGGER_RELEASE to job maestro.job.{launcher}"
        )),
        "{hint}"
    );
    let uri = common::maestro_run_tool_uri(launcher);
    // Held: nothing gets past PMIx_Init until the debugger says so.
    assert!(
        said.recv_timeout(Duration::from_secs(1)).is_err(),
        "a rank ran before the release"
    );
    let out = run(
        Command::new(&tool).args([&uri, &format!("maestro.job.{launcher}"), "release"]),
        Duration::from_secs(20),
    );
    assert!(out.stdout.contains("release SUCCESS"), "{out:?}");
    let first = said
        .recv_timeout(Duration::from_secs(10))
        .expect("the ranks run after the release");
    assert!(first.contains(" OK "), "{first}");
    let end = job.wait(Duration::from_secs(20));
    assert_eq!(end.code(), Some(0), "{end:?}");
}

#[test]
fn a_debugger_launches_a_job_held_in_init_and_releases_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tool = build_c("cc", "pmix_tool_control.c", Some("pmix"), dir.path());
    let client = build_c("cc", "pmix_client.c", Some("pmix"), dir.path());
    let (job, uri) = common::tool_support_launcher(&["-n", "1", "--", "sleep", "60"]);
    let launcher = job.pid();
    let out = run(
        Command::new(&tool).args([
            &uri,
            &format!("maestro.job.{launcher}"),
            "debug",
            client.to_str().expect("utf-8 path"),
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("job-end SEEN 0"), "{out:?}");
    // Nothing of the job ran before the release; all of it after.
    let lines: Vec<&str> = out.stdout.lines().collect();
    let released = lines
        .iter()
        .position(|l| *l == "releasing")
        .unwrap_or_else(|| panic!("{out:?}"));
    let ran: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains(" OK "))
        .collect();
    assert_eq!(out.lines_with("OK c.client.rank").len(), 2, "{out:?}");
    assert!(ran.iter().all(|&i| i > released), "{out:?}");
}
