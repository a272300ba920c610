//! The helper apps (`pool_archiver`, `pool_librarian`, `pool_tracer`) as real processes
//! around real pool managers, and what the pool does when a provider is killed.

mod common;

use pool::CallError;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Group, await_line, example, run, start_pm};
use fabric::Buffer;
use pool::attr::{AttrValue, Attributes};
use pool::bootstrap::PmInfo;
use pool::events::EventKind;
use pool::proto::Refusal;
use pool::{Client, ClientError};
use pool_tools::archive::Archive;

const T: Duration = Duration::from_secs(60);

/// The environment helper apps of `pool_workflow` runs need: the PM and the schemas.
fn helper(name: &str, info: &str) -> Command {
    let mut cmd = Command::new(example(name));
    cmd.env("MSTRO_POOL_MANAGER_INFO", info)
        .env("MSTRO_SCHEMA_PATH", common::repo().join("examples"))
        .env("MSTRO_SCHEMA_LIST", "pool_workflow.yaml");
    cmd
}

/// FNV-1a, as `pool_workflow` puts it in `.user.checksum`.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Run 1: a workflow's producer CDOs are archived by `pool_archiver` (which holds each
/// offer until it required it). Run 2, with another pool manager: `pool_librarian` serves
/// the archive and a consumer gets every CDO back, bytes and attributes.
#[test]
fn archiver_and_librarian_round_trip_cdos_across_two_workflow_runs() {
    let archive_dir = tempfile::tempdir().expect("tempdir");
    let dir = archive_dir.path().to_string_lossy().into_owned();
    let (pm1, info1) = start_pm("run-1", &[]);
    let mut archiver = Group::spawn(helper("pool_archiver", &info1).args([
        "--dir",
        &dir,
        "--selector",
        "(has .user.checksum)",
        "--count",
        "10",
    ]));
    await_line(
        archiver.child.stderr.take().expect("stderr"),
        "archiving offers",
    );
    let out = run(
        Command::new(common::maestro())
            .env("MSTRO_POOL_MANAGER_INFO", &info1)
            .env("MSTRO_WORKFLOW_NAME", "run-1")
            .args(["run", "-n", "3"])
            .arg(example("pool_workflow"))
            .args(["--cdos", "10", "--max-size", "1048576"]),
        T,
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let archived = archiver.wait(T);
    assert_eq!(archived.code(), Some(0), "{archived:?}");
    assert_eq!(
        archived
            .stdout
            .lines()
            .filter(|l| l.starts_with("archived "))
            .count(),
        10
    );
    drop(pm1);

    let names = Archive::open(archive_dir.path())
        .expect("archive")
        .names()
        .expect("names");
    assert_eq!(names.len(), 10, "{names:?}");
    let (pm2, info2) = start_pm("run-2", &[]);
    let mut librarian = Group::spawn(helper("pool_librarian", &info2).args(["--dir", &dir]));
    await_line(librarian.child.stderr.take().expect("stderr"), "serving");
    let info = PmInfo::parse(&info2).expect("info");
    let mut schemas = pool::schema::Schemas::builtin();
    pool::schema::load_file(
        &mut schemas,
        &common::repo().join("examples/pool_workflow.yaml"),
    )
    .expect("schema");
    let c =
        Client::join(&info, common::tcp_lo_options("consumer").schemas(schemas)).expect("consumer");
    for name in &names {
        let cdo = c.declare(name).expect("declare");
        let (data, attrs) = c.demand(cdo).expect("demand from the librarian");
        assert_eq!(
            attrs.get(".user.checksum"),
            Some(&AttrValue::Uint(fnv(&data))),
            "{name}: bytes and attributes came back together"
        );
        c.dispose(cdo).expect("dispose");
    }
    c.leave().expect("leave");
    let served = librarian.terminate(T);
    assert_eq!(served.code(), Some(0), "{served:?}");
    assert_eq!(
        served
            .stdout
            .lines()
            .filter(|l| l.starts_with("offered "))
            .count(),
        10
    );
    drop(pm2);
}

/// `pool_tracer` prints the events of its selector as JSON lines.
#[test]
fn a_librarian_of_a_directory_that_does_not_exist_says_so_and_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nowhere = dir.path().join("nowhere");
    let out = run(
        Command::new(example("pool_librarian"))
            .arg("--dir")
            .arg(&nowhere),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains("no archive at") && out.stderr.contains("pool_archiver --dir"),
        "{}",
        out.stderr
    );
    assert!(!nowhere.exists());
}

#[test]
fn the_tracer_logs_matching_events_as_json_lines() {
    let (_pm, info) = start_pm("traced", &[]);
    let mut tracer = Group::spawn(helper("pool_tracer", &info).args([
        "--kinds",
        "offer,withdraw",
        "--selector",
        "(.maestro.core.cdo.name ~= \"^keep/\")",
        "--count",
        "2",
    ]));
    await_line(tracer.child.stderr.take().expect("stderr"), "subscribed");
    let p = Client::join(
        &PmInfo::parse(&info).expect("info"),
        common::tcp_lo_options("producer"),
    )
    .expect("join");
    for name in ["keep/a", "skip/b"] {
        let cdo = p.declare(name).expect("declare");
        p.seal(cdo, Attributes::new()).expect("seal");
        p.offer(cdo, Buffer::from_slice(b"abc").expect("buffer"))
            .expect("offer");
        p.withdraw(cdo).expect("withdraw");
    }
    p.leave().expect("leave");
    let out = tracer.wait(T);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let events: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds, ["Offer", "Withdraw"], "{}", out.stdout);
    assert!(
        events.iter().all(|e| e["cdo"] == "keep/a"),
        "{}",
        out.stdout
    );
}

/// A tracer started late first shows what was offered before it started.
#[test]
fn a_late_tracer_shows_the_cdos_offered_before_it_started() {
    let (_pm, info) = start_pm("late", &[]);
    let p = Client::join(
        &PmInfo::parse(&info).expect("info"),
        common::tcp_lo_options("producer"),
    )
    .expect("join");
    let cdo = p.declare("early").expect("declare");
    p.seal(cdo, Attributes::new()).expect("seal");
    p.offer(cdo, Buffer::from_slice(b"abc").expect("buffer"))
        .expect("offer");
    let tracer =
        Group::spawn(helper("pool_tracer", &info).args(["--kinds", "offer", "--count", "1"]));
    let out = tracer.wait(T);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let event: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!(
        (&event["kind"], &event["cdo"], &event["detail"]),
        (
            &serde_json::json!("Offer"),
            &serde_json::json!("early"),
            &serde_json::json!("before this subscription")
        )
    );
    assert_eq!(event["attributes"][".maestro.core.cdo.scope.local-size"], 3);
    p.withdraw(cdo).expect("withdraw");
}

/// A provider is stopped while a consumer demands its CDO, then killed with SIGKILL: the
/// consumer gets a clear error at once (within 5 s on a loaded machine), subscribers see the app leave, and the
/// pool manager goes on serving the others.
#[test]
fn killing_a_provider_fails_the_demand_at_once_and_is_an_event() {
    let archive_dir = tempfile::tempdir().expect("tempdir");
    Archive::open(archive_dir.path())
        .expect("archive")
        .store("big", &vec![7u8; 64 << 20], &Attributes::new())
        .expect("store");
    let (pm, info, watcher, sub) = common::pool::watched_pm(
        "killing",
        EventKind::Offer | EventKind::AppLeave | EventKind::TransportStarted,
        T,
    );
    let mut librarian = Group::spawn(
        helper("pool_librarian", &info.encode())
            .env("MSTRO_OFI_PROVIDER", "tcp;ofi_rxm")
            .env("MSTRO_OFI_IFACE", "lo")
            .args(["--dir", &archive_dir.path().to_string_lossy(), "--eager"]),
    );
    let offered = sub.wait().expect("the librarian offers");
    assert_eq!(offered.cdo.as_deref(), Some("big"));
    let provider = offered.app;
    // SAFETY: signalling the process this test started.
    unsafe { libc::kill(librarian.pid(), libc::SIGSTOP) };
    let consumer =
        Arc::new(Client::join(&info, common::tcp_lo_options("consumer")).expect("consumer"));
    let c = consumer.clone();
    let demand = std::thread::spawn(move || {
        let cdo = c.declare("big").expect("declare");
        let r = c.demand(cdo).map(drop);
        (r, Instant::now())
    });
    // The PM has ticketed the transfer (the read goes to the stopped provider).
    let started = sub.wait().expect("a transport-started event");
    assert_eq!(
        (started.kind, started.cdo.as_deref()),
        (EventKind::TransportStarted, Some("big"))
    );
    assert!(
        !demand.is_finished(),
        "the stopped provider cannot serve the read"
    );
    let killed = Instant::now();
    // SAFETY: signalling a process this test started and still owns (its child, not yet
    // reaped).
    unsafe { libc::kill(librarian.pid(), libc::SIGKILL) };
    let _ = librarian.child.wait();
    eprintln!(
        "the provider was reaped {:?} after the kill",
        killed.elapsed()
    );
    let (result, failed_at) = demand.join().expect("demand thread");
    let took = failed_at.saturating_duration_since(killed);
    match result {
        Err(ClientError::Call(CallError::Refused {
            why: Refusal::NoProvider,
            ..
        })) => {}
        other => panic!("the demand should fail with NoProvider: {other:?}"),
    }
    // The refusal is the PM's answer to the provider's closed connection (evidence), not
    // a timeout (the demand would have waited for its own, and failed with Timeout).
    eprintln!("the demand failed {took:?} after the kill");
    let left = sub.wait().expect("an app-leave event");
    assert_eq!((left.kind, left.app), (EventKind::AppLeave, provider));
    assert_eq!(left.component, "librarian");
    assert!(left.detail.contains("connection lost"), "{left:?}");
    // An observer of the pool sees the failed transfer with its reason.
    let mut observer = pool::Observer::connect(&info, "test", T).expect("observer");
    let pool::view::View::Transfers(t) = observer
        .query(pool::view::Query::Transfers)
        .expect("transfers")
    else {
        panic!("not the transfers");
    };
    let failed = t
        .recent
        .iter()
        .find(|x| x.ok == Some(false))
        .unwrap_or_else(|| panic!("no failed transfer in {t:?}"));
    assert_eq!(
        (
            failed.name.as_str(),
            failed.from.as_str(),
            failed.error.as_deref()
        ),
        ("big", "librarian:0 (gone)", Some("the provider is gone"))
    );
    assert_eq!(t.failed, 1);
    drop(observer);
    // The others carry on.
    let p = Client::join(&info, common::tcp_lo_options("producer")).expect("producer");
    let cdo = p.declare("after").expect("declare");
    p.seal(cdo, Attributes::new()).expect("seal");
    p.offer(cdo, Buffer::from_slice(b"still here").expect("buffer"))
        .expect("offer");
    let want = consumer.declare("after").expect("declare");
    let (data, _) = consumer.demand(want).expect("demand");
    assert_eq!(&*data, b"still here");
    p.withdraw(cdo).expect("withdraw");
    p.leave().expect("leave");
    drop(consumer);
    watcher.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// A consumer (`pool_archiver`, which requires every offer before letting it happen) is
/// killed with SIGKILL while it reads a 512 MiB CDO: the provider's offer and withdraw
/// still complete, the PM stays up and serves a new app.
#[test]
fn killing_a_consumer_mid_transfer_leaves_the_provider_able_to_withdraw() {
    let (pm, info, watcher, sub) = common::pool::watched_pm(
        "consumer-killed",
        EventKind::TransportStarted | EventKind::AppLeave,
        T,
    );
    let archive_dir = tempfile::tempdir().expect("tempdir");
    let mut archiver = Group::spawn(
        helper("pool_archiver", &info.encode())
            .env("MSTRO_OFI_PROVIDER", "tcp;ofi_rxm")
            .env("MSTRO_OFI_IFACE", "lo")
            .args([
                "--dir",
                &archive_dir.path().to_string_lossy(),
                "--selector",
                "(has .maestro.core.cdo.name)",
                "--count",
                "1",
            ]),
    );
    await_line(
        archiver.child.stderr.take().expect("stderr"),
        "archiving offers",
    );
    let producer =
        Arc::new(Client::join(&info, common::tcp_lo_options("producer")).expect("producer"));
    let cdo = producer.declare("huge").expect("declare");
    producer.seal(cdo, Attributes::new()).expect("seal");
    let p = Arc::clone(&producer);
    // The archiver holds the offer until it has the bytes: offer from a thread.
    let offering =
        std::thread::spawn(move || p.offer(cdo, Buffer::new(512 << 20).expect("buffer")));
    let started = sub.wait().expect("a transport-started event");
    assert_eq!(started.kind, EventKind::TransportStarted, "{started:?}");
    // SAFETY: signalling the process this test started.
    unsafe { libc::kill(archiver.pid(), libc::SIGKILL) };
    let killed = Instant::now();
    let left = sub.wait().expect("an app-leave event");
    assert_eq!(left.kind, EventKind::AppLeave, "{left:?}");
    offering
        .join()
        .expect("offer thread")
        .expect("the offer completes once its holder is gone");
    let back = producer
        .withdraw(cdo)
        .expect("the withdraw completes after the consumer died");
    assert_eq!(back.len(), 512 << 20);
    let took = killed.elapsed();
    eprintln!("offer and withdraw done {took:?} after the kill");
    let _ = archiver.wait(T);
    // The PM still serves.
    let newcomer =
        Client::join(&info, common::tcp_lo_options("newcomer")).expect("the PM serves a new app");
    newcomer.declare("after").expect("declare");
    drop((newcomer, sub, watcher));
    pm.stop().expect("the PM ends with nothing lost");
}
