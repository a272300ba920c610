//! What a newcomer types, taken as typed: nothing a user gives on the command line destroys
//! a file of theirs (issue #50's first contact pass), each case run as a user would run it.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Group, maestro};

const LIMIT: Duration = Duration::from_secs(30);

/// `maestro pm --info-file` given a file the user keeps (a mistyped path in a job script):
/// refused, exit 2 with the reason; the file keeps its content and stays, whether the PM
/// stops by SIGINT or its janitor sweeps after it.
#[test]
fn a_pm_never_overwrites_or_removes_a_file_it_did_not_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let precious = dir.path().join("precious.txt");
    std::fs::write(&precious, "precious data\n").expect("write");
    let mut cmd = Command::new(maestro());
    cmd.args(["pm", "--workflow", "fc-precious", "--info-file"])
        .arg(&precious);
    let pm = Group::spawn(&mut cmd);
    // Refused at once as bad input (exit 2): it never serves.
    let out = pm.wait(LIMIT);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr
            .contains("holds something else than a pool manager's info"),
        "{}",
        out.stderr
    );
    // The janitor has had its turn too (it sweeps once the PM is gone).
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        assert_eq!(
            std::fs::read_to_string(&precious).expect("still there"),
            "precious data\n"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&precious).expect("meta").permissions(),
    );
    assert_ne!(mode & 0o777, 0o600, "its mode untouched too");
    // A file a killed PM left (its info) is taken over, written and removed at exit.
    let stale = dir.path().join("stale.info");
    let old = pool::bootstrap::PmInfo {
        workflow: "fc-stale".into(),
        endpoints: vec![pool::bootstrap::ControlAddr::Tcp(
            "127.0.0.1:1".parse().expect("addr"),
        )],
        other_shards: Vec::new(),
        secret: vec![0; 32],
    };
    std::fs::write(&stale, format!("{}\n", old.encode())).expect("write");
    let (text, pm) = info_file_pm(&stale, &old.encode());
    assert!(text.contains(':'), "{text}");
    // SAFETY: signalling the process this test started.
    unsafe { libc::kill(pm.pid(), libc::SIGINT) };
    let out = pm.wait(LIMIT);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(!stale.exists(), "the PM's own file is removed at exit");
}

/// Starts `maestro pm --info-file path` and waits for the file to hold its info (not
/// `before`).
fn info_file_pm(path: &std::path::Path, before: &str) -> (String, Group) {
    let mut cmd = Command::new(maestro());
    cmd.args(["pm", "--workflow", "fc-stale", "--info-file"])
        .arg(path);
    let pm = Group::spawn(&mut cmd);
    let end = Instant::now() + LIMIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.trim() != before && pool::bootstrap::PmInfo::parse(text.trim()).is_ok() {
            return (text, pm);
        }
        assert!(Instant::now() < end, "no info written: {text:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `maestro run` forwards what its ranks write byte for byte (no newline added to output
/// that ends without one, binary and all), and says so and fails when it cannot write it:
/// a full device, a closed standard output.
#[test]
fn forwarded_output_is_byte_exact_and_its_loss_is_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rnd = dir.path().join("rnd.bin");
    let bytes: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&rnd, &bytes).expect("write");
    let out = Command::new(maestro())
        .args(["run", "-n", "1", "--", "cat"])
        .arg(&rnd)
        .output()
        .expect("maestro run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout.len(), bytes.len());
    assert!(out.stdout == bytes, "the bytes differ");
    for (redirect, said) in [
        ("> /dev/full", "cannot be written (No space left on device"),
        (">&-", "standard output was closed when it started"),
    ] {
        let line = format!(
            "'{}' run -n 1 -- cat '{}' {redirect}",
            maestro().display(),
            rnd.display()
        );
        let out = common::run(Command::new("sh").args(["-c", &line]), LIMIT);
        assert_eq!(out.code(), Some(1), "{redirect}: {out:?}");
        assert!(out.stderr.contains(said), "{redirect}: {}", out.stderr);
    }
}

/// Two jobs of one workflow name that each serve a pool manager (the main job run twice,
/// the default name or any other): the second's ranks meet at their own job's PM, never
/// at the first's (whose end would end them), and the second is told its PM serves its
/// job only; a standalone `maestro pm` started for a name another PM is published under is
/// refused, saying so.
#[test]
fn two_jobs_of_one_workflow_name_each_use_their_own_pm() {
    let workflow = format!("fc-two-{}", std::process::id());
    // The first: a PM published under the name, serving for the test's length.
    let mut first = Command::new(maestro());
    first
        .args(["run", "-n", "1", "--", &maestro().display().to_string()])
        .args(["pm", "--print-info", "--workflow", &workflow]);
    let mut first = Group::spawn(&mut first);
    let line = common::await_line(
        first.child.stdout.take().expect("stdout"),
        "MSTRO_POOL_MANAGER_INFO;",
    );
    assert!(line.contains(':'), "{line}");
    // The second: the main job, its rank 0 serving.
    let second = common::run(
        Command::new(maestro())
            .args(["run", "-n", "4", "--"])
            .arg(common::example("pool_workflow"))
            .args(["--cdos", "20", "--max-size", "4096"])
            .env("MSTRO_WORKFLOW_NAME", &workflow),
        Duration::from_secs(120),
    );
    second.assert_workflow(20);
    assert!(
        second.stderr.contains("serves this job only"),
        "{}",
        second.stderr
    );
    // Nobody of the second joined the first.
    let status = common::run(
        Command::new(maestro()).args(["pool", "status", "--json", "--workflow", &workflow]),
        LIMIT,
    );
    assert_eq!(status.code(), Some(0), "{status:?}");
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(
        status["operations"]["join"], 1,
        "only this view joined: {status}"
    );
    // A third, standalone, for the same name: refused.
    let third = common::run(
        Command::new(maestro())
            .args(["run", "-n", "1", "--", &maestro().display().to_string()])
            .args(["pm", "--workflow", &workflow]),
        LIMIT,
    );
    assert_ne!(third.code(), Some(0), "{third:?}");
    assert!(
        third
            .stderr
            .contains("already has a pool manager published"),
        "{}",
        third.stderr
    );
    drop(first);
}

/// Any bytes in the environment or the working directory are taken: `maestro run` and a
/// program of the library run as with text (it panicked in the inventory's cache).
#[test]
fn bytes_that_are_not_utf8_in_the_environment_or_the_directory_are_taken() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"dir-\xff\xfe"));
    std::fs::create_dir(&odd).expect("mkdir");
    let out = common::run(
        Command::new(maestro())
            .args(["run", "-n", "3", "--"])
            .arg(common::example("pool_workflow"))
            .args(["--cdos", "2", "--max-size", "64"])
            .env("FOO", std::ffi::OsStr::from_bytes(b"\xff"))
            .env("FI_ODD", std::ffi::OsStr::from_bytes(b"\xfe"))
            .current_dir(&odd),
        Duration::from_secs(120),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

/// A program's arguments are bytes, as `mpirun` and `srun` pass them: `maestro run -n 1 --
/// printf %s $'\xff\xfe'` runs and its output is those two bytes.
#[test]
fn arguments_that_are_not_utf8_reach_the_program() {
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new(maestro())
        .args(["run", "-n", "1", "--", "printf", "%s"])
        .arg(std::ffi::OsStr::from_bytes(b"\xff\xfe"))
        .output()
        .expect("maestro run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"\xff\xfe");
}

/// A misspelled setting is not ignored without a word: each process of the library warns
/// once with the nearest name it reads.
#[test]
fn a_misspelled_variable_is_told_with_the_name_meant() {
    let out = common::run(
        Command::new(maestro())
            .args(["run", "-n", "3", "--"])
            .arg(common::example("pool_workflow"))
            .args(["--cdos", "2", "--max-size", "64"])
            .env("MSTRO_POOL_MANGER_INFO", "nothing")
            .env("MAESTRO_TRANSPORT_DEFAULT", "GFS"),
        Duration::from_secs(120),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    for said in [
        "MSTRO_POOL_MANGER_INFO is set but maestro reads no such variable: did you mean MSTRO_POOL_MANAGER_INFO?",
        "MAESTRO_TRANSPORT_DEFAULT is set but maestro reads no such variable: did you mean MSTRO_TRANSPORT_DEFAULT?",
    ] {
        assert!(out.stderr.contains(said), "{}", out.stderr);
    }
}

/// `mpirun`'s and `srun`'s options `maestro run` does not take are named as theirs, with
/// what to use instead; `--allow-run-as-root` is taken as `--oversubscribe` is; `-x` takes
/// only a variable's name.
#[test]
fn launcher_options_of_others_are_told_apart() {
    for option in [
        &["-H", "n1,n2"][..],
        &["--host", "n1"],
        &["--hostfile", "hosts"],
        &["--map-by", "node"],
        &["--bind-to", "core"],
        &["-N", "2"],
        &["-c", "2"],
        &["--mca", "btl", "self"],
    ] {
        let out = common::run(
            Command::new(maestro())
                .arg("run")
                .args(option)
                .args(["-n", "1", "--", "true"]),
            LIMIT,
        );
        assert_eq!(out.code(), Some(2), "{option:?}: {out:?}");
        assert!(
            out.stderr.contains("is an option of mpirun or srun")
                && out.stderr.contains("srun --mpi=pmix or mpirun"),
            "{option:?}: {}",
            out.stderr
        );
    }
    let root = common::run(
        Command::new(maestro()).args(["run", "--allow-run-as-root", "-n", "1", "--", "true"]),
        LIMIT,
    );
    assert_eq!(root.code(), Some(0), "{root:?}");
    let spaced = common::run(
        Command::new(maestro()).args(["run", "-x", "A B=c", "-n", "1", "--", "true"]),
        LIMIT,
    );
    assert_eq!(spaced.code(), Some(2), "{spaced:?}");
    assert!(
        spaced.stderr.contains("is not VAR or VAR=VALUE"),
        "{}",
        spaced.stderr
    );
}

/// `maestro pool --watch` into a pipe writes no terminal escapes: with `--json` a stream of
/// JSON documents a program can read one after the other.
#[test]
fn a_watch_into_a_pipe_is_plain_documents() {
    let (pm, line) = common::start_pm("fc-watch", &[]);
    let mut cmd = Command::new(maestro());
    cmd.args([
        "pool", "status", "--json", "--watch", "0.2", "--info", &line,
    ]);
    let mut watch = Group::spawn(&mut cmd);
    // Until two whole documents came (each redraw is one), within the bound.
    let lines = common::lines(watch.child.stdout.take().expect("stdout"));
    let mut text = String::new();
    let docs: Vec<serde_json::Value> = loop {
        let line = lines.recv_timeout(LIMIT).expect("the watch's output");
        text.push_str(&line);
        text.push('\n');
        let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&text)
            .into_iter()
            .map_while(Result::ok)
            .collect();
        if docs.len() >= 2 {
            break docs;
        }
    };
    drop(watch);
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(docs.iter().all(|d| d["workflow"] == "fc-watch"), "{docs:?}");
    drop(pm);
}

/// A standalone `maestro pm` (no PMIx host around it) is found by its workflow's name on
/// its node: by `maestro pool --workflow` and by the jobs of `maestro run` that look the
/// name up; a second one for the name is refused; its entry goes when it stops.
#[test]
fn a_standalone_pm_is_found_by_its_workflow_name_on_its_node() {
    let workflow = format!("fc-node-{}", std::process::id());
    let (pm, _) = common::start_pm(&workflow, &[]);
    let status = || {
        common::run(
            Command::new(maestro()).args(["pool", "status", "--json", "--workflow", &workflow]),
            LIMIT,
        )
    };
    let found = status();
    assert_eq!(found.code(), Some(0), "{found:?}");
    let job = common::run(
        Command::new(maestro())
            .args(["run", "-n", "3", "--"])
            .arg(common::example("pool_workflow"))
            .args(["--cdos", "2", "--max-size", "64", "--join-published", "10"])
            .env("MSTRO_WORKFLOW_NAME", &workflow),
        Duration::from_secs(120),
    );
    // Rank 0 joins instead of serving; rank 1 produces, rank 2 consumes.
    job.assert_workflow_of(1, 2);
    let after: serde_json::Value = serde_json::from_str(&status().stdout).expect("json");
    assert!(
        after["operations"]["join"].as_u64().unwrap_or(0) >= 4,
        "the job's ranks joined it: {after}"
    );
    let second = common::run(
        Command::new(maestro()).args(["pm", "--workflow", &workflow]),
        LIMIT,
    );
    assert_eq!(second.code(), Some(2), "{second:?}");
    assert!(
        second
            .stderr
            .contains("already has a pool manager published on this node"),
        "{}",
        second.stderr
    );
    let stopped = pm.terminate(LIMIT);
    assert_eq!(stopped.code(), Some(0), "{stopped:?}");
    assert_ne!(status().code(), Some(0), "its entry went with it");
}

/// `maestro bench pm --cdos 0` is refused (it printed "inf B per live CDO").
#[test]
fn a_benchmark_of_no_cdos_is_refused() {
    let out = common::run(
        Command::new(maestro()).args(["bench", "pm", "--cdos", "0"]),
        LIMIT,
    );
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("--cdos"), "{}", out.stderr);
    assert!(!out.stdout.contains("inf"), "{}", out.stdout);
}

/// `maestro run --help` tells the habits of `mpirun` it takes and its exit codes, and each
/// code is what a job of that kind ends with.
#[test]
fn the_exit_codes_help_lists_are_the_ones_jobs_end_with() {
    let help = common::maestro_run(&["--help"]);
    for said in [
        "-np N is -n N",
        "--oversubscribe",
        "--allow-run-as-root",
        "124      the job passed --timeout",
        "127      the program was not found (126",
        "128+S",
        "2        a bad command line",
    ] {
        assert!(
            help.stdout.contains(said),
            "{said:?} not in {}",
            help.stdout
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let unrunnable = dir.path().join("data.txt");
    std::fs::write(&unrunnable, "not a program\n").expect("write");
    let unrunnable = unrunnable.to_str().expect("utf-8 path");
    for (args, code) in [
        (&["-n", "2", "--", "true"][..], 0),
        (&["--", "sh", "-c", "exit 3"], 3),
        (&["--", "/nonexistent/program"], 127),
        (&["--", unrunnable], 126),
        (&["--bogus", "--", "true"], 2),
        (&["--timeout", "1", "--", "sleep", "30"], 124),
        (&["--", "sh", "-c", "kill -TERM $$"], 128 + libc::SIGTERM),
    ] {
        let out = common::maestro_run(args);
        assert_eq!(out.code(), Some(code), "{args:?}: {out:?}");
    }
}

/// Messages quote what was wrong without echoing pages of it, and take the values users
/// type: a 10,000-byte workflow name is shown by its start and length; `--limit -1` is
/// told what a limit is (not clap's "use -- -1"); the workflow example takes sizes with
/// units.
#[test]
fn messages_quote_what_was_wrong_in_a_line() {
    let long = "w".repeat(10_000);
    let out = common::run(
        Command::new(maestro()).args(["pm", "--workflow", &long]),
        LIMIT,
    );
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.len() < 600, "{}", out.stderr);
    assert!(out.stderr.contains("(10000 bytes)"), "{}", out.stderr);
    let out = common::run(
        Command::new(maestro()).args(["pool", "ls", "--limit", "-1", "--info", "x"]),
        LIMIT,
    );
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr
            .contains("is not a number of CDOs: give 0 to list all"),
        "{}",
        out.stderr
    );
    let out = common::run(
        Command::new(common::example("pool_workflow")).args(["--max-size", "5G"]),
        LIMIT,
    );
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("\"5G\" is not a size between 1 byte and 4G"),
        "{}",
        out.stderr
    );
}

/// The private directory of a user whose account is gone (`/tmp/maestro-<uid>`) is removed
/// by the next janitor that runs as root; one of a user who has an account stays, as does
/// a link under a gone user's name (not followed).
#[test]
fn a_gone_users_private_directory_is_swept_by_root() {
    use std::os::unix::fs::{MetadataExt, symlink};
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the sweep is root's: run the tests as root");
    // A uid no account has, and one the system has (`daemon`, 1).
    let (gone, kept) = (3_999_000_000 + std::process::id() % 1000, 1);
    let dirs = [gone, kept].map(|uid| std::path::PathBuf::from(format!("/tmp/maestro-{uid}")));
    // The gone user's name is this test's (no account has it: a leftover of an earlier run
    // goes); the existing user's directory is made only if it is not there, and then
    // removed again: one the system had stays as it was.
    let _ = std::fs::remove_dir_all(&dirs[0]);
    let mut made = Vec::new();
    for (dir, uid) in dirs.iter().zip([gone, kept]) {
        if std::fs::create_dir(dir).is_ok() {
            std::fs::write(dir.join("inventory.json"), "{}").expect("a file");
            std::os::unix::fs::chown(dir, Some(uid), Some(uid)).expect("chown");
            made.push(dir.clone());
        }
    }
    assert!(
        made.contains(&dirs[0]),
        "{} could not be made",
        dirs[0].display()
    );
    // A link under a gone user's name is not followed nor removed.
    let target = tempfile::tempdir().expect("tempdir");
    let link = std::path::PathBuf::from(format!("/tmp/maestro-{}", gone + 1));
    let _ = std::fs::remove_file(&link);
    symlink(target.path(), &link).expect("symlink");
    let out = common::maestro_run(&["-n", "1", "true"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let start = Instant::now();
    while dirs[0].exists() && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = !dirs[0].exists();
    let kept_there = std::fs::metadata(&dirs[1]).is_ok_and(|m| m.uid() == kept);
    let link_there = std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink());
    for dir in made {
        let _ = std::fs::remove_dir_all(dir);
    }
    let _ = std::fs::remove_file(&link);
    assert!(left, "{} stayed", dirs[0].display());
    assert!(kept_there, "{} went", dirs[1].display());
    assert!(
        link_there && target.path().exists(),
        "the link or its target went"
    );
}
