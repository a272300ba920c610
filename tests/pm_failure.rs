//! What applications see when their pool manager fails: killed with SIGKILL mid-workflow
//! (every call, including one already waiting, fails with an error naming the PM, from the
//! evidence of the closed connection, not a timeout; leaving and dropping return; the next
//! PM removes what the dead one left), or not there at all when they join (`Unreachable`
//! within the join timeout).

mod common;

use pool::CallError;
use std::time::{Duration, Instant};

use pool::bootstrap::{ControlAddr, PmInfo};
use pool::{Client, ClientError, JoinOptions};

/// Joins with an operation timeout longer than the test may run (it is killed as hung
/// after minutes): a call that fails did so on evidence, not by timing out.
fn join(info: &PmInfo, component: &str) -> Client {
    Client::join(
        info,
        JoinOptions::new(component, 0)
            .timeout(Duration::from_secs(3600))
            .isolated(),
    )
    .expect("join")
}

/// The PM's private socket directory, from its Unix endpoint.
fn socket_dir(info: &PmInfo) -> std::path::PathBuf {
    info.endpoints
        .iter()
        .find_map(|e| match e {
            ControlAddr::Unix(p) => p.parent().map(std::path::Path::to_path_buf),
            ControlAddr::Tcp(_) => None,
        })
        .expect("a unix endpoint")
}

/// The error of a call whose PM is gone: the connection closed or broke (not a timeout),
/// and the message says it was the pool manager's.
fn names_the_pm(e: &ClientError) -> bool {
    matches!(e, ClientError::Call(CallError::Closed) | ClientError::Io(_))
        && e.to_string().contains("pool manager")
}

#[test]
fn killing_the_pm_fails_every_call_on_the_evidence_of_the_closed_connection() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The PMs keep their socket directories in a TMPDIR of their own.
    let pm_env = [("TMPDIR", tmp.path())];
    let (pm, info) = {
        let mut cmd = std::process::Command::new(common::maestro());
        cmd.args(["pm", "--print-info", "--workflow", "pm-failure"])
            .envs(pm_env);
        let mut g = common::Group::spawn(&mut cmd);
        let line = common::await_line(
            g.child.stdout.take().expect("stdout"),
            "MSTRO_POOL_MANAGER_INFO;",
        );
        let info = line
            .trim()
            .strip_prefix("MSTRO_POOL_MANAGER_INFO;")
            .and_then(|l| l.strip_suffix(';'))
            .expect("PM info")
            .to_string();
        (g, PmInfo::parse(&info).expect("parse"))
    };
    let dir = socket_dir(&info);
    let watcher = join(&info, "watcher");
    let demands = watcher
        .subscribe(
            &pool::selector::Selector::all(),
            pool::events::EventKind::Demand,
            pool::events::SubscribeOptions::default(),
        )
        .expect("subscribe");
    let producer = join(&info, "producer");
    let consumer = join(&info, "consumer");
    let offered = producer.declare("offered").expect("declare");
    producer
        .seal_and_offer(
            offered,
            Default::default(),
            fabric::Buffer::from_slice(b"bytes").expect("buffer"),
        )
        .expect("offer");
    // A demand nobody can serve yet waits at the PM when it dies.
    let missing = consumer.declare("never-offered").expect("declare");
    let waiting = std::thread::spawn(move || {
        let r = consumer.demand(missing).map(|_| ());
        drop(consumer);
        r
    });
    let seen = demands.wait().expect("the demand reached the PM");
    assert_eq!(seen.cdo.as_deref(), Some("never-offered"));

    // SAFETY: signalling the PM's process, which this test started.
    unsafe { libc::kill(pm.pid(), libc::SIGKILL) };

    let e = waiting
        .join()
        .expect("demand thread")
        .expect_err("a demand survived its PM");
    assert!(names_the_pm(&e), "unclear error: {e}");
    // A declare is not answered, so one made before the producer's reader saw the
    // connection end is sent into it unnoticed; from that evidence on, every call fails.
    let end = Instant::now() + Duration::from_secs(10);
    let e = loop {
        match producer.declare("after-death") {
            Err(e) => break e,
            Ok(_) => assert!(
                Instant::now() < end,
                "declares still succeed 10 s after the PM died"
            ),
        }
        std::thread::yield_now();
    };
    assert!(names_the_pm(&e), "{e}");
    // Leaving a dead PM returns (its error is the closed connection's).
    let _ = producer.leave();
    drop((demands, watcher, pm));

    // What the killed PM left (its socket directory) is gone once the next PM started
    // there: swept by the killed PM's janitor (which takes the unreaped PM for the dead
    // process it is) or by the next PM, whichever comes first.
    let mut cmd = std::process::Command::new(common::maestro());
    cmd.args(["pm", "--print-info", "--workflow", "pm-failure-next"])
        .envs(pm_env);
    let mut next = common::Group::spawn(&mut cmd);
    common::await_line(
        next.child.stdout.take().expect("stdout"),
        "MSTRO_POOL_MANAGER_INFO;",
    );
    assert!(!dir.exists(), "{} was left behind", dir.display());
    drop(next);
}

#[test]
fn joining_an_unreachable_pm_fails_on_the_refused_connection() {
    // A port that was just free: nobody listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let info = PmInfo {
        workflow: "unreachable".into(),
        endpoints: vec![ControlAddr::Tcp(([127, 0, 0, 1], port).into())],
        other_shards: Vec::new(),
        secret: b"secret".to_vec(),
    };
    // The refused connection is the evidence: no waiting for the timeout (a join that
    // waited for it would take an hour, and the test would be killed as hung).
    let timeout = Duration::from_secs(3600);
    let r = Client::join(
        &info,
        JoinOptions::new("lonely", 0).timeout(timeout).isolated(),
    );
    match r {
        Err(ClientError::Unreachable(why)) => eprintln!("Unreachable: {why}"),
        Err(e) => panic!("expected Unreachable, got {e}"),
        Ok(_) => panic!("joined a PM that is not there"),
    }
}

#[test]
fn joining_a_pm_that_never_answers_fails_within_the_timeout() {
    // Connections complete in the backlog, but nobody ever answers them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let info = PmInfo {
        workflow: "silent".into(),
        endpoints: vec![ControlAddr::Tcp(silent.local_addr().expect("addr"))],
        other_shards: Vec::new(),
        secret: b"secret".to_vec(),
    };
    let timeout = Duration::from_secs(2);
    let start = Instant::now();
    let r = Client::join(
        &info,
        JoinOptions::new("patient", 0).timeout(timeout).isolated(),
    );
    let took = start.elapsed();
    // Nothing but the timeout can end this join: it fails as one, once it has passed (a
    // join that ignored it would hang, and the test be killed as hung).
    match r {
        Err(e @ (ClientError::Unreachable(_) | ClientError::Call(CallError::Timeout(_)))) => {
            eprintln!("{e} after {took:?}");
        }
        Err(e) => panic!("expected Unreachable or Timeout, got {e}"),
        Ok(_) => panic!("joined a PM that never answered"),
    }
    assert!(
        took >= timeout,
        "gave up after {took:?}, before the {timeout:?} timeout"
    );
}

#[test]
fn a_pm_killed_with_sigkill_leaves_no_info_file_or_socket_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pm.info");
    let path = file.to_str().expect("utf-8 path");
    let (mut pm, info) = common::start_pm("killed", &["--info-file", path]);
    let sockets = socket_dir(&PmInfo::parse(&info).expect("parse"));
    assert!(file.exists() && sockets.exists());
    // SAFETY: killing the PM we started.
    unsafe { libc::kill(pm.pid(), libc::SIGKILL) };
    let _ = pm.child.wait();
    // The janitor removes them once it sees the PM gone; a wait with a timeout, not a
    // measure of how fast.
    let deadline = Instant::now() + Duration::from_secs(60);
    while file.exists() || sockets.exists() {
        assert!(
            Instant::now() < deadline,
            "left behind: info file {}, socket directory {}",
            file.exists(),
            sockets.exists()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_pm_logs_who_joins_and_leaves_at_info_level() {
    let (mut pm, info) = common::start_pm_with_env("who", &[], &[("MSTRO_LOG_LEVEL", "info")]);
    let log = common::lines(pm.child.stderr.take().expect("stderr"));
    let info = PmInfo::parse(&info).expect("parse");
    let app = join(&info, "visitor");
    app.leave().expect("leave");
    drop(join(&info, "dropped"));
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("app dropped:0 gone"))
    {
        match log.recv_timeout(Duration::from_secs(10)) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("the PM did not log the departure: {seen:#?}"),
        }
    }
    let said = |what: &str| seen.iter().any(|l| l.contains(what));
    assert!(
        said("app visitor:0 joined (app ") && said("no fabric endpoint: data by stream"),
        "{seen:#?}"
    );
    assert!(said("app visitor:0 left"), "{seen:#?}");
    assert!(said("connection lost without LEAVE"), "{seen:#?}");
    pm.terminate(Duration::from_secs(10));
}

#[test]
fn a_second_pm_on_the_same_info_file_is_refused_and_the_first_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pm.info");
    let path = file.to_str().expect("utf-8 path");
    let (first, info) = common::start_pm("info-file", &["--info-file", path]);
    let second = common::run(
        std::process::Command::new(common::maestro()).args([
            "pm",
            "--workflow",
            "info-file",
            "--info-file",
            path,
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(second.code(), Some(2), "{second:?}");
    assert!(
        second.stderr.contains(&format!("--info-file {path}"))
            && second.stderr.contains("another running pool manager"),
        "{}",
        second.stderr
    );
    // The first PM's info is intact, and goes with it.
    let kept = std::fs::read_to_string(&file).expect("the info file stays");
    assert_eq!(kept.trim(), info);
    let end = first.terminate(Duration::from_secs(10));
    assert_eq!(end.code(), Some(0), "{end:?}");
    assert!(!file.exists(), "the PM removes its info file at exit");
}
