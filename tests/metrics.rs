//! `maestro pm --metrics`: what a monitoring stack gets. A real HTTP client scrapes the
//! figures of what moved in both text formats, Prometheus' own `promtool` checks them, and
//! a real Prometheus (Debian's `prometheus`, started here with a configuration of its own)
//! scrapes the PM and answers queries for its series.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::pool::offer;
use common::{Group, start_pm};
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

/// A PM with its metrics on loopback, a producer and a consumer that moved one CDO of
/// 1 MiB (by RMA) and one of 8 bytes (inline): the PM, its metrics URL, the apps (kept
/// joined).
fn pm_that_moved() -> (Group, String, [pool::Client; 2]) {
    // A name of its own: a standalone PM's name is published on the node, one PM each.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let workflow = format!("metrics-{}-{n}", std::process::id());
    let (mut pm, info) = start_pm(&workflow, &["--metrics", "127.0.0.1:0"]);
    let line = common::await_line(
        pm.child.stderr.take().expect("stderr"),
        "metrics at http://",
    );
    let url = line
        .split("metrics at ")
        .nth(1)
        .map(str::trim)
        .expect("url")
        .to_string();
    let producer = common::join_tcp_lo(&info, "producer");
    let consumer = common::join_tcp_lo(&info, "consumer");
    for (name, len) in [("big", 1 << 20), ("small", 8)] {
        offer(&producer, name, len);
        let cdo = consumer.declare(name).expect("declare");
        consumer.demand(cdo).expect("demand");
    }
    (pm, url, [producer, consumer])
}

/// GETs `url` with `accept` (if any): the content type and the body.
fn scrape(url: &str, accept: Option<&str>) -> (String, String) {
    let mut req = ureq::get(url);
    if let Some(a) = accept {
        req = req.header("Accept", a);
    }
    let mut response = req.call().expect("scrape");
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (kind, response.body_mut().read_to_string().expect("body"))
}

/// The figures of what moved, in Prometheus' text format (which `promtool check metrics`
/// passes: help text for every family, counters named with `_total`) unless OpenMetrics is
/// asked for; every CDO state is a series, 0 included; the PM's process figures and its
/// build are there; bytes handed over inline are a transport, not a NIC.
#[test]
fn the_metrics_endpoint_serves_what_moved() {
    let (_pm, url, _apps) = pm_that_moved();
    let (kind, body) = scrape(&url, None);
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let parsed = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("the Prometheus text format");
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        parsed
            .samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
            .unwrap_or_else(|| panic!("{name} {labels:?} not in\n{body}"))
    };
    assert_eq!(value("maestro_pm_apps", &[]), 2.0);
    assert_eq!(
        value("maestro_pm_operations_total", &[("op", "offer")]),
        2.0
    );
    assert_eq!(value("maestro_pm_cdos", &[("state", "offered")]), 2.0);
    assert_eq!(value("maestro_pm_cdos", &[("state", "withdrawn")]), 0.0);
    assert_eq!(value("maestro_pm_transfers_completed_total", &[]), 2.0);
    let mib = f64::from(1u32 << 20);
    assert_eq!(
        value(
            "maestro_pm_nic_bytes_total",
            &[
                ("nic", "lo"),
                ("provider", "tcp;ofi_rxm"),
                ("direction", "out")
            ]
        ),
        mib
    );
    assert_eq!(
        value("maestro_pm_transport_bytes_total", &[("transport", "rma")]),
        mib
    );
    assert_eq!(
        value(
            "maestro_pm_transport_bytes_total",
            &[("transport", "inline")]
        ),
        8.0
    );
    assert!(!body.contains("nic=\"inline\""), "{body}");
    assert!(value("process_open_fds", &[]) >= 3.0);
    assert!(value("process_resident_memory_bytes", &[]) > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let started = value("maestro_pm_start_time_seconds", &[]);
    assert!(
        started <= now && started > now - 120.0,
        "{started} vs {now}"
    );
    assert_eq!(
        value(
            "maestro_pm_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );

    // Prometheus' own checker.
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/setup.sh installs it)");
    use std::io::Write;
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("to promtool");
    let checked = check.wait_with_output().expect("promtool");
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {checked:?}\n{body}"
    );

    // OpenMetrics for those who ask for it.
    let (kind, om) = scrape(&url, Some("application/openmetrics-text;version=1.0.0"));
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(
        om.lines()
            .any(|l| l == "# TYPE maestro_pm_operations counter"),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");

    // Only GET /metrics is served.
    let other = ureq::get(url.replace("/metrics", "/secret")).call();
    assert!(
        matches!(other, Err(ureq::Error::StatusCode(404))),
        "{other:?}"
    );
}

/// A free port on loopback (bound and let go; Prometheus is started again on a clash).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port()
}

/// Prometheus, started on a free port of loopback with `config` and its storage in `dir`,
/// ready for queries: the process and its API's base URL.
fn start_prometheus(dir: &std::path::Path, config: &std::path::Path) -> (Group, String) {
    for _ in 0..3 {
        let port = free_port();
        let mut prometheus = Group::spawn(Command::new("prometheus").args([
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", dir.join("data").display()),
            &format!("--web.listen-address=127.0.0.1:{port}"),
            "--log.level=info",
        ]));
        let lines = common::lines(prometheus.child.stderr.take().expect("stderr"));
        let start = Instant::now();
        let mut seen = Vec::new();
        while start.elapsed() < T {
            match lines.recv_timeout(Duration::from_secs(1)) {
                Ok(l) if l.contains("Server is ready to receive web requests") => {
                    return (prometheus, format!("http://127.0.0.1:{port}/api/v1"));
                }
                Ok(l) => seen.push(l),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let out = prometheus.wait(Duration::from_secs(10));
        assert!(
            seen.iter().any(|l| l.contains("address already in use")),
            "prometheus did not start: {out:?}\n{}",
            seen.join("\n")
        );
    }
    panic!("prometheus found no free port in three tries");
}

/// `query` against Prometheus' API at `api`, asked again every 200 ms until `accept` takes
/// its result (within [`T`]): the result.
fn query_until(api: &str, query: &str, accept: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < T {
        let answer: Option<Value> = ureq::get(format!("{api}/query"))
            .query("query", query)
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|body| serde_json::from_str(&body).ok());
        if let Some(a) = answer {
            if let Some(result) = a["data"]["result"].as_array()
                && accept(result)
            {
                return result.clone();
            }
            last = a;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("Prometheus never answered {query:?} as wanted; last answer: {last}");
}

/// The first sample's value of a query result.
fn first_value(result: &[Value]) -> Option<f64> {
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// A real Prometheus scrapes the PM every second (asking for OpenMetrics, as it does) and
/// has its series: the target is up, the apps and every CDO state are there, and the bytes
/// moved by RMA and inline are counted by transport.
#[test]
fn a_real_prometheus_scrapes_the_pool_manager() {
    let (_pm, url, _apps) = pm_that_moved();
    let target = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: maestro-pm\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("config");
    let (_prometheus, api) = start_prometheus(dir.path(), &config);

    let up = query_until(&api, "up{job=\"maestro-pm\"}", |r| {
        first_value(r) == Some(1.0)
    });
    assert_eq!(up[0]["metric"]["instance"], target.as_str());
    query_until(&api, "maestro_pm_apps", |r| first_value(r) == Some(2.0));
    let states = query_until(&api, "maestro_pm_cdos", |r| r.len() == 9);
    let offered = states
        .iter()
        .find(|s| s["metric"]["state"] == "offered")
        .and_then(|s| s["value"][1].as_str());
    assert_eq!(offered, Some("2"), "{states:?}");
    query_until(
        &api,
        "maestro_pm_transport_bytes_total{transport=\"inline\"}",
        |r| first_value(r) == Some(8.0),
    );
    query_until(
        &api,
        "maestro_pm_transport_bytes_total{transport=\"rma\"}",
        |r| first_value(r) == Some(f64::from(1u32 << 20)),
    );
    query_until(&api, "process_open_fds{job=\"maestro-pm\"}", |r| {
        first_value(r).is_some_and(|v| v >= 3.0)
    });
    // Every query of the shipped Grafana dashboard runs and finds series.
    let dashboard = std::fs::read_to_string(common::repo().join("docs/grafana-dashboard.json"))
        .expect("docs/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 6, "{dashboard}");
    for panel in panels {
        for t in panel["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("expr");
            let expr = expr
                .replace("$job", "maestro-pm")
                .replace("$instance", &target)
                .replace("$__rate_interval", "1m");
            query_until(&api, &expr, |r| !r.is_empty());
        }
    }
    query_until(&api, "maestro_pm_build_info", |r| r.len() == 1);
    // Prometheus read every sample it was given.
    let targets = ureq::get(format!("{api}/targets"))
        .call()
        .expect("targets")
        .body_mut()
        .read_to_string()
        .expect("body");
    let targets: Value = serde_json::from_str(&targets).expect("json");
    let active = &targets["data"]["activeTargets"][0];
    assert_eq!(active["health"], "up", "{targets}");
    assert_eq!(active["lastError"], "", "{targets}");
}
