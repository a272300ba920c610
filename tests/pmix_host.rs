//! `maestro run` as a PMIx host answers what ordinary PMIx programs call, the way they call
//! it, and never hangs a job: programs of our own in `tests/c/`, each run under
//! `maestro run` and, where Open MPI's `mpirun` supports the same call, under `mpirun` too.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Group, build_c, children_of, maestro, maestro_run_dir, run};

#[test]
fn pmix_log_writes_each_channel_with_the_rank_and_answers_truthfully() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_c("cc", "pmix_log.c", Some("pmix"), dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    let out = run(
        Command::new(maestro()).args(["run", "-n", "2", "--timeout", "30", "--", exe]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?}",
        out.elapsed
    );
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
        for (channel, status) in [
            ("pmix.log.stderr", "SUCCESS"),
            ("pmix.log.stdout", "SUCCESS"),
            ("pmix.log.nosuchchannel", "NOT-SUPPORTED"),
        ] {
            assert_eq!(
                out.lines_with(&format!("R{rank} log {channel} {status}"))
                    .len(),
                1,
                "{channel}: {}",
                out.stdout
            );
        }
        // Syslog where the machine has one, an honest NOT-SUPPORTED where it has none.
        let syslog = if std::path::Path::new("/dev/log").exists() {
            "SUCCESS"
        } else {
            "NOT-SUPPORTED"
        };
        assert_eq!(
            out.lines_with(&format!("R{rank} log pmix.log.syslog {syslog}"))
                .len(),
            1,
            "{}",
            out.stdout
        );
    }
    // The reference: under mpirun the same program logs to stderr and stdout too.
    let out = run(
        Command::new("mpirun").args(["--allow-run-as-root", "--oversubscribe", "-np", "2", exe]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    for channel in ["stderr", "stdout"] {
        assert_eq!(
            out.lines_with(&format!(" log pmix.log.{channel} SUCCESS"))
                .len(),
            2,
            "{}",
            out.stdout
        );
    }
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
    let ranks = children_of(launcher);
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    let closed = Instant::now();
    drop(out);
    let end = job.wait(Duration::from_secs(20));
    assert_eq!(end.code(), Some(141), "{end:?}");
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "took {:?} to end",
        closed.elapsed()
    );
    for p in ranks {
        assert!(!common::alive(p), "rank pid {p} survived");
    }
    assert!(!maestro_run_dir(launcher).exists());
}
