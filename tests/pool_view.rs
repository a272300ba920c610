//! `maestro pool`: a running pool as people, PMIx tools and monitoring see it. A real PM
//! (`maestro pm`), real apps joined over real connections, the views read by the real
//! command and checked against what the apps did, and against the documented JSON Schema.

mod common;

use std::process::Command;
use std::time::Duration;

use common::pool::offer;
use common::{Group, maestro, run, start_pm};
use pool::events::{EventKind, SubscribeOptions};
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

/// `maestro pool ARGS... --json` against the PM of `info`, parsed.
fn view(info: &str, args: &[&str]) -> Value {
    let out = run(
        Command::new(maestro())
            .arg("pool")
            .args(args)
            .args(["--json", "--info", info]),
        T,
    );
    assert_eq!(out.code(), Some(0), "maestro pool {args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// Checks `value` against the view's schema in docs/pool-view.schema.json.
fn conforms(which: &str, value: &Value) {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo().join("docs/pool-view.schema.json"))
            .expect("schema file"),
    )
    .expect("schema JSON");
    let schema = &doc["views"][which];
    let validator = jsonschema::validator_for(schema).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{which}: {errors:?}");
}

/// The documented schema is the one the command prints (so it cannot drift).
#[test]
fn the_documented_schema_is_the_views_schema() {
    let out = run(Command::new(maestro()).args(["pool", "schema"]), T);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let printed: Value = serde_json::from_str(&out.stdout).expect("json");
    let documented: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo().join("docs/pool-view.schema.json"))
            .expect("schema file"),
    )
    .expect("schema JSON");
    assert_eq!(
        printed, documented,
        "docs/pool-view.schema.json is stale: regenerate it with `maestro pool schema`"
    );
}

#[test]
fn a_running_pool_is_seen_exactly() {
    let (pm, info) = start_pm("view", &[]);
    let producer = common::join_tcp_lo(&info, "producer");
    let consumer = common::join_tcp_lo(&info, "consumer");
    offer(&producer, "small", 100);
    offer(&producer, "big", 1 << 20);
    for name in ["small", "big"] {
        let cdo = consumer.declare(name).expect("declare");
        let (data, _) = consumer.demand(cdo).expect("demand");
        assert_eq!(data.len(), if name == "small" { 100 } else { 1 << 20 });
    }
    // A demand of a name nobody offers waits: it shows as waiting (looked at once the PM
    // told a subscriber of the demand).
    let later = consumer
        .selector("(= .maestro.core.cdo.name \"later\")", "")
        .expect("selector");
    let demanded = consumer
        .subscribe(&later, EventKind::Demand, SubscribeOptions::default())
        .expect("subscribe");
    let waiter = std::sync::Arc::new(common::join_tcp_lo(&info, "waiter"));
    let w = std::sync::Arc::clone(&waiter);
    let waiting = std::thread::spawn(move || {
        let cdo = w.declare("later").expect("declare");
        w.demand(cdo).map(|(d, _)| d.len())
    });
    demanded
        .wait_timeout(T)
        .expect("events")
        .expect("the demand's event");
    consumer.unsubscribe(demanded).expect("unsubscribe");
    let listed = view(&info, &["ls", "(= .maestro.core.cdo.name \"later\")"]);
    conforms("ls", &listed);
    assert_eq!(listed["cdos"][0]["state"], "required");
    assert_eq!(listed["cdos"][0]["app"], "waiter:0");
    assert_eq!(listed["cdos"].as_array().map(Vec::len), Some(1));
    // The table names the same id as the JSON, and attributes as selectors write them.
    let table = run(
        Command::new(maestro()).args(["pool", "ls", "--attributes", "--info", &info]),
        T,
    );
    assert_eq!(table.code(), Some(0), "{}", table.stderr);
    let id = listed["cdos"][0]["id"].as_u64().expect("an id");
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.trim_start().starts_with(&id.to_string())),
        "{id} in {}",
        table.stdout
    );
    assert!(
        table.stdout.contains(".maestro.core.cdo.name = \"later\""),
        "{}",
        table.stdout
    );
    assert!(!table.stdout.contains("Str("), "{}", table.stdout);
    // A key no schema declares is said to match nothing (most likely misspelled).
    let misspelled = run(
        Command::new(maestro()).args(["pool", "ls", "(.user.prodcer = 1)", "--info", &info]),
        T,
    );
    assert_eq!(misspelled.code(), Some(0), "{}", misspelled.stderr);
    assert!(
        misspelled
            .stderr
            .contains("no schema known here declares .user.prodcer"),
        "{}",
        misspelled.stderr
    );
    assert!(
        misspelled.stdout.contains("0 listed"),
        "{}",
        misspelled.stdout
    );

    let status = view(&info, &["status"]);
    conforms("status", &status);
    assert_eq!(status["workflow"], "view");
    assert_eq!(status["app_count"], 3);
    assert_eq!(status["observer_count"], 1, "this query's own connection");
    assert_eq!(
        status["cdos"],
        serde_json::json!({"declared": 0, "sealed": 0, "offered": 2, "being withdrawn": 0,
            "withdrawn": 0, "required": 1, "in transfer": 0, "local": 2, "kept": 0}),
        "every state, 0 included"
    );
    let app = |label: &str| -> Value {
        status["apps"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["component"] == label).cloned())
            .unwrap_or_else(|| panic!("{label} in {status}"))
    };
    let moved = 100 + (1 << 20);
    assert_eq!(app("producer")["offered"], 2);
    assert_eq!(app("producer")["bytes_sent"], moved);
    assert_eq!(app("consumer")["demanded"], 2);
    assert_eq!(app("consumer")["bytes_received"], moved);
    assert_eq!(app("waiter")["demanded"], 1);
    assert_eq!(app("consumer")["provider"], "tcp;ofi_rxm");
    assert!(
        status["memory_bytes"].as_u64().is_some_and(|b| b > 1 << 20),
        "{status}"
    );

    // Bytes per NIC and transport are what moved: the small CDO with its ticket, the
    // large one by RMA over the loopback NIC (both apps on it: out and in on one row).
    let fabric = view(&info, &["fabric"]);
    conforms("fabric", &fabric);
    let nics = fabric["nics"].as_array().expect("nics");
    let row = |nic: &str| -> Value {
        nics.iter()
            .find(|n| n["nic"] == nic)
            .cloned()
            .unwrap_or_else(|| panic!("{nic} in {fabric}"))
    };
    assert_eq!(
        (
            row("inline")["bytes_out"].as_u64(),
            row("inline")["bytes_in"].as_u64()
        ),
        (Some(100), Some(100))
    );
    assert_eq!(
        (
            row("lo")["bytes_out"].as_u64(),
            row("lo")["bytes_in"].as_u64()
        ),
        (Some(1 << 20), Some(1 << 20))
    );
    assert_eq!(row("lo")["provider"], "tcp;ofi_rxm");
    assert_eq!(fabric["transports"]["rma"]["bytes"], 1 << 20);
    assert_eq!(fabric["transports"]["inline"]["bytes"], 100);

    let transfers = view(&info, &["transfers"]);
    conforms("transfers", &transfers);
    assert_eq!(
        (
            transfers["completed"].as_u64(),
            transfers["failed"].as_u64()
        ),
        (Some(2), Some(0))
    );
    let names: Vec<&str> = transfers["recent"]
        .as_array()
        .expect("recent")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["small", "big"]);

    // The text views say the same.
    let text = run(
        Command::new(maestro()).args(["pool", "status", "--info", &info]),
        T,
    );
    assert_eq!(text.code(), Some(0), "{}", text.stderr);
    assert!(
        text.stdout.contains("apps 3, observers 1"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("producer:0"), "{}", text.stdout);

    offer(&producer, "later", 8);
    assert_eq!(waiting.join().expect("waiter").expect("demand"), 8);
    drop(pm);
}

#[test]
fn a_wrong_secret_or_no_pm_is_refused_with_the_reason() {
    let (_pm, info) = start_pm("secret", &[]);
    // The same PM info with another secret.
    let (head, _) = info.rsplit_once(':').expect("info");
    let forged = format!("{head}:{}", "00".repeat(32));
    let out = run(
        Command::new(maestro()).args(["pool", "status", "--info", &forged]),
        T,
    );
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr.contains("proof"), "{}", out.stderr);
    // Nothing to find.
    let out = run(
        Command::new(maestro())
            .args(["pool", "status"])
            .env_remove("MSTRO_POOL_MANAGER_INFO")
            .env("XDG_RUNTIME_DIR", tempfile::tempdir().expect("dir").path()),
        T,
    );
    assert_eq!(out.code(), Some(2));
    assert!(
        out.stderr.contains("no pool manager found"),
        "{}",
        out.stderr
    );
    // A selector on another view, a bad selector.
    for (args, says) in [
        (
            vec!["status", "(has x)"],
            "only `maestro pool ls` takes a selector",
        ),
        (vec!["ls", "(= x"], "selector"),
    ] {
        let out = run(
            Command::new(maestro())
                .arg("pool")
                .args(&args)
                .args(["--info", &info]),
            T,
        );
        assert_eq!(out.code(), Some(2), "{args:?}");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

/// A PM run under `maestro run --tool-support` publishes itself; the launcher's PMIx host
/// answers `PMIx_Query_info` for the pool's views, and `maestro pool --pid` reads them.
#[test]
fn the_launchers_pmix_host_answers_pool_queries() {
    let mut job = Group::spawn(Command::new(maestro()).args([
        "run",
        "--tool-support",
        "-n",
        "1",
        "--",
        &maestro().to_string_lossy(),
        "pm",
        "--print-info",
        "--workflow",
        "hosted",
    ]));
    let pid = job.pid().to_string();
    let uri = common::maestro_run_tool_uri(job.pid());
    // The PM prints its info once it published it through PMIx.
    let stdout = job.child.stdout.take().expect("stdout");
    common::await_line(stdout, "MSTRO_POOL_MANAGER_INFO;");
    let ask = |args: &[&str]| {
        run(
            Command::new(maestro())
                .arg("pool")
                .args(args)
                .args(["--json", "--uri", &uri]),
            T,
        )
    };
    let status = ask(&["status"]);
    assert_eq!(status.code(), Some(0), "{}", status.stderr);
    let status: Value = serde_json::from_str(&status.stdout).expect("json");
    conforms("status", &status);
    assert_eq!(status["workflow"], "hosted");
    assert_eq!(status["app_count"], 0);
    let ls = ask(&["ls"]);
    assert_eq!(ls.code(), Some(0), "{}", ls.stderr);
    // Another workflow's name is answered with the reason.
    let wrong = ask(&["status", "--workflow", "other"]);
    assert_eq!(wrong.code(), Some(2));
    assert!(
        wrong
            .stderr
            .contains("no pool manager of workflow \"other\""),
        "{}",
        wrong.stderr
    );
    // --pid finds the same launcher.
    let by_pid = run(
        Command::new(maestro()).args(["pool", "fabric", "--pid", &pid]),
        T,
    );
    assert_eq!(by_pid.code(), Some(0), "{}", by_pid.stderr);
    assert!(
        by_pid.stdout.contains("traffic per NIC"),
        "{}",
        by_pid.stdout
    );
    // `maestro query` shows the pool with the jobs.
    let q = run(
        Command::new(maestro()).args(["query", "--uri", &uri, "--json"]),
        T,
    );
    assert_eq!(q.code(), Some(0), "{}", q.stderr);
    let q: Value = serde_json::from_str(&q.stdout).expect("json");
    assert_eq!(q["pool"]["workflow"], "hosted", "{q}");
    job.terminate(T);
}

/// `--watch` redraws until interrupted; a closed output ends it quietly. Faster than
/// every 0.1 s is refused: it would only cost the PM queries.
#[test]
fn watch_redraws_until_stopped() {
    let (_pm, info) = start_pm("watched", &[]);
    for fast in ["0", "0.01"] {
        let out = common::run(
            Command::new(maestro()).args(["pool", "status", "--watch", fast, "--info", &info]),
            T,
        );
        assert_eq!(out.code(), Some(2), "{out:?}");
        assert!(out.stderr.contains("at most every 0.1 s"), "{}", out.stderr);
    }
    let mut watch = Group::spawn(
        Command::new(maestro()).args(["pool", "status", "--watch", "0.1", "--info", &info]),
    );
    let lines = common::lines(watch.child.stdout.take().expect("stdout"));
    let mut redraws = 0;
    while redraws < 3 {
        let line = lines
            .recv_timeout(T)
            .expect("maestro pool --watch goes on drawing");
        if line.contains("pool manager of workflow \"watched\"") {
            redraws += 1;
        }
    }
    drop(lines);
    // Its reader gone, it ends at its next redraw, with SIGPIPE's status, as `watch` does.
    let out = watch.wait(T);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.stderr);
}

/// `--watch` on a terminal of 24 x 100 draws what fits: 300 finished transfers (the PM
/// keeps the last 256) leave every line of a frame at most 100 characters, the frame within
/// the screen, the newest transfer listed and the rest counted.
#[test]
fn a_watched_view_fits_the_terminal() {
    let (_pm, info) = start_pm("fitted", &[]);
    let producer = common::join_tcp_lo(&info, "producer");
    let consumer = common::join_tcp_lo(&info, "consumer-with-a-long-component-name");
    for i in 0..300 {
        let name = format!("a-rather-long-cdo-name-that-widens-the-table/{i}");
        offer(&producer, &name, 8);
        let cdo = consumer.declare(&name).expect("declare");
        consumer.demand(cdo).expect("demand");
    }
    let watch = common::pty::Pty::spawn(
        Command::new(maestro()).args(["pool", "transfers", "--watch", "0.2", "--info", &info]),
        24,
        100,
    );
    // Two frames drawn: the first is whole.
    let text = watch.wait_for(T, |t| t.matches("\x1b[H\x1b[2J").count() >= 2);
    let frame = text.split("\x1b[H\x1b[2J").nth(1).expect("a frame");
    let lines: Vec<&str> = frame.lines().collect();
    assert!(lines.len() <= 24, "{} lines:\n{frame}", lines.len());
    for l in &lines {
        assert!(
            l.trim_end_matches('\r').chars().count() <= 100,
            "{l:?} is wider than 100"
        );
    }
    assert!(frame.contains("more lines"), "{frame}");
    assert!(
        frame.contains("/299"),
        "the newest transfer first:\n{frame}"
    );
}
