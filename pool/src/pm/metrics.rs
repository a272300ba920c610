//! The PM's counters for monitoring: an HTTP endpoint (`maestro pm --metrics ADDR`) that
//! serves them in the OpenMetrics text format (which Prometheus scrapes), encoded with
//! `prometheus-client`.
//!
//! A scrape asks the actor for the manager's views (status, transfers, traffic per NIC;
//! bounded as an observer's are) and renders them; nothing is counted twice and the hot
//! path pays nothing for a scraper. However many scrape, the actor is asked and the text
//! rendered at most once per [`RENDER_INTERVAL`]: every scrape within it gets the same
//! text. The endpoint serves `GET /metrics` only, one request per connection, at most
//! [`MAX_SCRAPES`] connections at a time (a connection past it is answered 503 at once),
//! each given [`REQUEST_TIMEOUT`] to send its request: idle connections cannot starve
//! scrapes. It shows counts, host and NIC names, never CDO names or the secret: it listens
//! on loopback unless given an address.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::view::{Fabric, Status, Transfers};

/// Most scrape connections open at once; one past it is answered 503 and closed.
pub const MAX_SCRAPES: usize = 64;
/// Longest a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest the actor may take to answer, and a scraper to take the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes within this long of a render share its text.
pub const RENDER_INTERVAL: Duration = Duration::from_secs(1);
/// Largest request read.
const MAX_REQUEST: usize = 8 << 10;

/// The text last rendered, and when: shared by the scrapes of one interval (the lock is
/// held while one renders, so the others wait for its text instead of asking again).
type Rendered = Arc<tokio::sync::Mutex<Option<(tokio::time::Instant, Arc<String>)>>>;

/// The figures one scrape renders.
pub struct Snapshot {
    /// The PM and its apps.
    pub status: Status,
    /// Transfers.
    pub transfers: Transfers,
    /// Traffic per NIC and transport.
    pub fabric: Fabric,
}

type Labels = Vec<(&'static str, String)>;

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let g: Gauge = Gauge::default();
    g.set(i64::try_from(value).unwrap_or(i64::MAX));
    registry.register(name, help, g);
}

fn counters<'a>(
    registry: &mut Registry,
    (name, help): (&str, &str),
    rows: impl Iterator<Item = (Labels, u64)> + 'a,
) {
    let family = Family::<Labels, Counter>::default();
    for (labels, v) in rows {
        family.get_or_create(&labels).inc_by(v);
    }
    registry.register(name, help, family);
}

/// The OpenMetrics text of `s`.
pub fn render(s: &Snapshot) -> String {
    let mut r = Registry::with_prefix("maestro_pm");
    render_status(&mut r, &s.status);
    render_transfers(&mut r, s);
    render_fabric(&mut r, s);
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

/// Asks the actor for a snapshot: the sender of its answer.
pub(super) type Ask = oneshot::Sender<Snapshot>;

/// Serves `GET /metrics` on `listener`; a scrape sends an [`Ask`] through `actor` when the
/// last render is older than [`RENDER_INTERVAL`].
pub(super) async fn serve(listener: TcpListener, actor: mpsc::UnboundedSender<super::Event>) {
    let slots = Arc::new(Semaphore::new(MAX_SCRAPES));
    let rendered: Rendered = Arc::default();
    loop {
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!("metrics: accept: {e}");
                // Out of descriptors, say: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                let busy = respond(&mut stream, "503 Service Unavailable", "busy\n");
                let _ = tokio::time::timeout(REQUEST_TIMEOUT, busy).await;
            });
            continue;
        };
        let (actor, rendered) = (actor.clone(), rendered.clone());
        tokio::spawn(async move {
            let _permit = permit;
            scrape(stream, &actor, &rendered).await;
        });
    }
}

/// Reads one request (its bytes up to the blank line) from `stream` within
/// [`REQUEST_TIMEOUT`]; `None` for none, too large a one (answered 431) or too slow a one.
async fn request(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
            if request.len() > MAX_REQUEST {
                return false;
            }
        }
        true
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, read).await {
        Ok(true) => Some(request),
        Ok(false) if request.len() > MAX_REQUEST => {
            let _ = respond(stream, "431 Request Header Fields Too Large", "").await;
            None
        }
        _ => None,
    }
}

/// One request on `stream`: `GET /metrics` is answered with the figures, anything else
/// with 404 or 405.
async fn scrape(
    mut stream: tokio::net::TcpStream,
    actor: &mpsc::UnboundedSender<super::Event>,
    rendered: &Rendered,
) {
    let Some(request) = request(&mut stream).await else {
        return;
    };
    let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next(), parts.next());
    let path = path.map(|p| p.split(|&b| b == b'?').next().unwrap_or_default());
    if method != Some(b"GET") {
        let _ = respond(&mut stream, "405 Method Not Allowed", "GET /metrics\n").await;
        return;
    }
    if path != Some(b"/metrics") {
        let _ = respond(&mut stream, "404 Not Found", "GET /metrics\n").await;
        return;
    }
    let answer = async {
        match text(actor, rendered).await {
            Some(body) => respond(&mut stream, "200 OK", &body).await,
            None => respond(&mut stream, "503 Service Unavailable", "stopping\n").await,
        }
    };
    if tokio::time::timeout(SCRAPE_TIMEOUT, answer).await.is_err() {
        tracing::debug!("metrics: a scrape took longer than {SCRAPE_TIMEOUT:?}");
    }
}

/// The text of this interval: rendered now if the last is older than
/// [`RENDER_INTERVAL`]; `None` when the actor is gone.
async fn text(
    actor: &mpsc::UnboundedSender<super::Event>,
    rendered: &Rendered,
) -> Option<Arc<String>> {
    let mut last = rendered.lock().await;
    if let Some((at, body)) = last.as_ref()
        && at.elapsed() < RENDER_INTERVAL
    {
        return Some(Arc::clone(body));
    }
    let (tx, rx) = oneshot::channel();
    actor.send(super::Event::Metrics(tx)).ok()?;
    let body = Arc::new(render(&rx.await.ok()?));
    *last = Some((tokio::time::Instant::now(), Arc::clone(&body)));
    Some(body)
}

async fn respond(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    body: &str,
) -> std::io::Result<()> {
    let kind = if status.starts_with("200") {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// The PM's own figures: uptime, operations, apps, observers, subscriptions, CDOs, memory.
fn render_status(r: &mut Registry, st: &crate::view::Status) {
    counter(
        r,
        "uptime_seconds",
        "Seconds since the pool manager started",
        st.uptime_ms / 1000,
    );
    counters(
        r,
        ("operations", "Operations handled, by kind"),
        st.operations
            .iter()
            .map(|(op, n)| (vec![("op", op.clone())], *n)),
    );
    gauge(r, "apps", "Applications joined", st.app_count);
    gauge(r, "observers", "Observers connected", st.observer_count);
    gauge(
        r,
        "subscriptions",
        "Event subscriptions open",
        st.subscriptions,
    );
    let cdos = Family::<Labels, Gauge>::default();
    for (state, n) in &st.cdos {
        cdos.get_or_create(&vec![("state", state.clone())])
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    r.register("cdos", "Live CDOs by state", cdos);
    gauge(
        r,
        "transfers_in_flight",
        "Transfers ticketed and not finished",
        st.transfers_in_flight,
    );
    gauge(
        r,
        "inline_bytes",
        "Bytes of small CDOs the pool manager holds",
        st.inline_bytes,
    );
    if let Some(rss) = st.memory_bytes {
        gauge(
            r,
            "resident_memory_bytes",
            "The pool manager's resident memory",
            rss,
        );
    }
}

/// Transfers: completed and failed, and by transport.
fn render_transfers(r: &mut Registry, s: &Snapshot) {
    counter(
        r,
        "transfers_completed",
        "Transfers completed",
        s.transfers.completed,
    );
    counter(
        r,
        "transfers_failed",
        "Transfers failed, abandoned or cut off",
        s.transfers.failed,
    );
    let by_transport = |f: fn(&crate::view::TransportTraffic) -> u64| {
        s.fabric
            .transports
            .iter()
            .map(move |(t, n)| (vec![("transport", t.clone())], f(n)))
    };
    counters(
        r,
        (
            "transport_bytes",
            "Bytes of completed transfers, by transport",
        ),
        by_transport(|n| n.bytes),
    );
    counters(
        r,
        ("transport_transfers", "Completed transfers, by transport"),
        by_transport(|n| n.transfers),
    );
    counters(
        r,
        ("transport_failures", "Failed transfers, by transport"),
        by_transport(|n| n.failures),
    );
}

/// Traffic per NIC and provider, and links down.
fn render_fabric(r: &mut Registry, s: &Snapshot) {
    let nic = |n: &crate::view::NicTraffic, direction: &str| -> Labels {
        vec![
            ("host", n.host.clone()),
            ("nic", n.nic.clone()),
            ("provider", n.provider.clone()),
            ("direction", direction.to_string()),
        ]
    };
    counters(
        r,
        (
            "nic_bytes",
            "Bytes of completed transfers through each NIC and provider (out: read from offers behind it; in: read by consumers through it)",
        ),
        s.fabric
            .nics
            .iter()
            .flat_map(|n| [(nic(n, "out"), n.bytes_out), (nic(n, "in"), n.bytes_in)]),
    );
    counters(
        r,
        ("nic_failures", "Failed transfers on each NIC and provider"),
        s.fabric.nics.iter().map(|n| {
            let mut l = nic(n, "");
            l.pop();
            (l, n.failures)
        }),
    );
    gauge(
        r,
        "links_down",
        "Networks of links reported down",
        s.fabric.links_down.len() as u64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{NicTraffic, TransportTraffic};

    #[test]
    fn figures_become_labelled_metrics() {
        let mut status = Status {
            workflow: "wf".into(),
            uptime_ms: 3500,
            app_count: 2,
            ..Status::default()
        };
        status.operations.insert("offer".into(), 5);
        status.cdos.insert("offered".into(), 4);
        let mut fabric = Fabric::default();
        fabric.nics.push(NicTraffic {
            host: "n1".into(),
            nic: "ib0".into(),
            provider: "verbs;ofi_rxm".into(),
            bytes_out: 1024,
            bytes_in: 0,
            transfers_out: 1,
            transfers_in: 0,
            failures: 2,
        });
        fabric.transports.insert(
            "rma".into(),
            TransportTraffic {
                transfers: 1,
                bytes: 1024,
                failures: 0,
            },
        );
        let text = render(&Snapshot {
            status,
            transfers: Transfers::default(),
            fabric,
        });
        for line in [
            "maestro_pm_operations_total{op=\"offer\"} 5",
            "maestro_pm_apps 2",
            "maestro_pm_cdos{state=\"offered\"} 4",
            "maestro_pm_uptime_seconds_total 3",
            "maestro_pm_transport_bytes_total{transport=\"rma\"} 1024",
            "maestro_pm_nic_bytes_total{host=\"n1\",nic=\"ib0\",provider=\"verbs;ofi_rxm\",direction=\"out\"} 1024",
            "maestro_pm_nic_failures_total{host=\"n1\",nic=\"ib0\",provider=\"verbs;ofi_rxm\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
