//! The PM's counters for monitoring: an HTTP endpoint (`maestro pm --metrics ADDR`) that
//! serves them as Prometheus scrapes them: OpenMetrics when the request's `Accept` asks for
//! it (Prometheus does), else Prometheus' text format 0.0.4 (`curl`, `promtool check
//! metrics`); both written from one description of the figures ([`text`]).
//!
//! A scrape asks the actor for the manager's views (status, transfers, traffic per NIC;
//! bounded as an observer's are) and reads the process' own figures (`process_*`, as every
//! Prometheus client exports them); nothing is counted twice and the hot path pays nothing
//! for a scraper. However many scrape, the actor is asked at most once per
//! [`RENDER_INTERVAL`]: every scrape within it gets the same figures. The endpoint serves
//! `GET /metrics` only, one request per connection. A connection has [`REQUEST_TIMEOUT`] to
//! send its request; at most [`MAX_PENDING`] wait for theirs ([`PER_PEER_PENDING`] of one
//! address), a newcomer past either taking the place of the oldest waiting of its address
//! or of the busiest (the rules of the PM's admission): connections
//! that send nothing, or a request byte by byte, cannot keep a scraper out (one whose
//! request came whole with its connection, as a scraper sends it, never waits among them). A slot among
//! [`MAX_SCRAPES`] is taken only by a complete request (one past it is answered 503). It
//! shows counts, host and NIC names, never CDO names or the secret: it listens on loopback
//! unless given an address.

pub mod text;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::resources::ProcessStats;
use crate::admission::{Admission, Limits, Peer};
use crate::view::{Fabric, Status, Transfers};
use text::{Family, Format, Kind, Labels, Value};

/// Most complete requests answered at once; one past it is answered 503 and closed.
pub const MAX_SCRAPES: usize = 64;
/// Most connections waiting to send their request; a newcomer past it takes the place of
/// the oldest waiting of the busiest address.
pub const MAX_PENDING: usize = 512;
/// Most connections of one address waiting to send their request; a newcomer past it
/// takes the place of that address' longest waiting.
pub const PER_PEER_PENDING: usize = 64;
/// Longest a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest the actor may take to answer, and a scraper to take the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes within this long of a render share its figures.
pub const RENDER_INTERVAL: Duration = Duration::from_secs(1);
/// Largest request read.
const MAX_REQUEST: usize = 8 << 10;

/// The figures last gathered, and when: shared by the scrapes of one interval (the lock is
/// held while one gathers, so the others wait for its figures instead of asking again).
type Rendered = Arc<tokio::sync::Mutex<Option<(tokio::time::Instant, Arc<Vec<Family>>)>>>;

/// The figures one scrape renders.
pub struct Snapshot {
    /// The PM and its apps.
    pub status: Status,
    /// Transfers.
    pub transfers: Transfers,
    /// Traffic per NIC and transport.
    pub fabric: Fabric,
}

/// A family named `maestro_pm_<name>`.
fn pm(name: &str, help: &'static str, kind: Kind, samples: Vec<(Labels, Value)>) -> Family {
    Family {
        name: format!("maestro_pm_{name}"),
        help,
        kind,
        samples,
    }
}

/// One unlabelled sample of `maestro_pm_<name>`.
fn pm_one(name: &str, help: &'static str, kind: Kind, value: impl Into<Value>) -> Family {
    pm(name, help, kind, vec![(Vec::new(), value.into())])
}

/// The figures of `s` and of the process (`process`, where `/proc` tells), as families.
pub fn families(s: &Snapshot, process: Option<&ProcessStats>) -> Vec<Family> {
    let mut out = vec![pm(
        "build",
        "The pool manager's version and wire protocol",
        Kind::Info,
        vec![(
            vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("protocol", s.status.protocol.to_string()),
            ],
            Value::Int(1),
        )],
    )];
    status_families(&mut out, &s.status);
    transfer_families(&mut out, s);
    fabric_families(&mut out, s);
    if let Some(p) = process {
        process_families(&mut out, p);
    }
    // A shard of a sharded pool labels every sample with its index: the scrapes of the
    // pool's shards sum to the pool's figures.
    if let Some(shard) = s.status.shards.first().filter(|x| x.count > 1) {
        for f in &mut out {
            for (labels, _) in &mut f.samples {
                labels.push(("shard", shard.index.to_string()));
            }
        }
    }
    out
}

/// Asks the actor for a snapshot: the sender of its answer.
pub(super) type Ask = oneshot::Sender<Snapshot>;

/// Serves `GET /metrics` on `listener`; a scrape sends an [`Ask`] through `actor` when the
/// last render is older than [`RENDER_INTERVAL`].
pub(super) async fn serve(listener: TcpListener, actor: mpsc::UnboundedSender<super::Event>) {
    let slots = Arc::new(Semaphore::new(MAX_SCRAPES));
    let rendered: Rendered = Arc::default();
    let pending = Arc::new(Mutex::new(Pending::default()));
    let mut next: u64 = 0;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!("metrics: accept: {e}");
                // Out of descriptors, say: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // What the peer sent already (an honest scraper sends its whole request at once):
        // a complete request never waits among the pending.
        let Some((stream, first)) = sent_already(stream) else {
            continue;
        };
        let complete = is_complete(&first);
        next += 1;
        let id = next;
        let (go, started) = oneshot::channel::<()>();
        let (actor, rendered, slots, waiting) = (
            actor.clone(),
            rendered.clone(),
            slots.clone(),
            pending.clone(),
        );
        let task = tokio::spawn(async move {
            if started.await.is_err() {
                return;
            }
            handle((stream, first), (&actor, &rendered, &slots), (&waiting, id)).await;
        });
        if !complete {
            pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .admit(id, peer.ip(), task.abort_handle());
        }
        let _ = go.send(());
        // The connections' readers run before the next accept: a burst of connections
        // cannot evict one whose request has come before it was read.
        tokio::task::yield_now().await;
    }
}

/// `stream` with the bytes its peer has sent already (read without waiting, straight from
/// the socket); `None` when the connection failed.
fn sent_already(stream: tokio::net::TcpStream) -> Option<(tokio::net::TcpStream, Vec<u8>)> {
    use std::io::Read;
    let mut socket = stream.into_std().ok()?;
    let mut first = vec![0u8; MAX_REQUEST + 1];
    let n = match socket.read(&mut first) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(_) => return None,
    };
    first.truncate(n);
    Some((tokio::net::TcpStream::from_std(socket).ok()?, first))
}

/// Whether `request` holds a whole request head (up to its blank line).
fn is_complete(request: &[u8]) -> bool {
    request.windows(4).any(|w| w == b"\r\n\r\n")
}

/// The connections waiting to send their request, under the rules of the PM's own
/// admission ([`Admission`]: per address and in all, a newcomer past a bound taking the
/// place of the oldest waiting of its address or of the busiest one), and their tasks.
struct Pending {
    admission: Admission,
    tasks: HashMap<u64, tokio::task::AbortHandle>,
}

impl Default for Pending {
    fn default() -> Pending {
        Pending {
            admission: Admission::new(Limits {
                join_timeout: REQUEST_TIMEOUT,
                max_unjoined: MAX_PENDING,
                max_unjoined_per_peer: PER_PEER_PENDING,
            }),
            tasks: HashMap::new(),
        }
    }
}

impl Pending {
    /// Counts connection `id` of `peer` in, closing the one that must make room for it.
    fn admit(&mut self, id: u64, peer: IpAddr, task: tokio::task::AbortHandle) {
        let now = std::time::Instant::now();
        if let Some(old) = self.admission.arrive(now, id, Peer::Tcp(peer))
            && let Some(t) = self.tasks.remove(&old)
        {
            t.abort();
        }
        self.tasks.insert(id, task);
    }

    /// Connection `id` sent its request (or gave up): it waits no more.
    fn done(&mut self, id: u64) {
        self.admission.leave(id);
        self.tasks.remove(&id);
    }
}

/// One connection: its request read (within [`REQUEST_TIMEOUT`], counted among the
/// [`Pending`]), then answered in a slot, or 503 when none is free.
async fn handle(
    (mut stream, first): (tokio::net::TcpStream, Vec<u8>),
    (actor, rendered, slots): (
        &mpsc::UnboundedSender<super::Event>,
        &Rendered,
        &Arc<Semaphore>,
    ),
    (pending, id): (&Mutex<Pending>, u64),
) {
    let request = request(&mut stream, first).await;
    pending
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .done(id);
    let Some(request) = request else {
        return;
    };
    let Ok(_permit) = slots.clone().try_acquire_owned() else {
        let busy = respond(&mut stream, "503 Service Unavailable", None, "busy\n");
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, busy).await;
        return;
    };
    scrape(stream, &request, actor, rendered).await;
}

/// Reads one request (its bytes up to the blank line, after `first`, read already) from
/// `stream` within [`REQUEST_TIMEOUT`]; `None` for none, too large a one (answered 431) or
/// too slow a one.
async fn request(stream: &mut tokio::net::TcpStream, first: Vec<u8>) -> Option<Vec<u8>> {
    let mut request = first;
    let mut buf = [0u8; 1024];
    let read = async {
        while !is_complete(&request) {
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
            let _ = respond(stream, "431 Request Header Fields Too Large", None, "").await;
            None
        }
        _ => None,
    }
}

/// The value of header `name` in `request` (its bytes up to the blank line), if it is there
/// and text.
fn header<'a>(request: &'a [u8], name: &str) -> Option<&'a str> {
    request.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = std::str::from_utf8(line).ok()?;
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// One request on `stream`: `GET /metrics` is answered with the figures in the format its
/// `Accept` asks for, anything else with 404 or 405.
async fn scrape(
    mut stream: tokio::net::TcpStream,
    request: &[u8],
    actor: &mpsc::UnboundedSender<super::Event>,
    rendered: &Rendered,
) {
    let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next(), parts.next());
    let path = path.map(|p| p.split(|&b| b == b'?').next().unwrap_or_default());
    if method != Some(b"GET") {
        let _ = respond(
            &mut stream,
            "405 Method Not Allowed",
            None,
            "GET /metrics\n",
        )
        .await;
        return;
    }
    if path != Some(b"/metrics") {
        let _ = respond(&mut stream, "404 Not Found", None, "GET /metrics\n").await;
        return;
    }
    let format = Format::from_accept(header(request, "accept"));
    let answer = async {
        match figures(actor, rendered).await {
            Some(f) => {
                let body = text::encode(&f, format);
                respond(&mut stream, "200 OK", Some(format), &body).await
            }
            None => respond(&mut stream, "503 Service Unavailable", None, "stopping\n").await,
        }
    };
    if tokio::time::timeout(SCRAPE_TIMEOUT, answer).await.is_err() {
        tracing::debug!("metrics: a scrape took longer than {SCRAPE_TIMEOUT:?}");
    }
}

/// The figures of this interval: gathered now if the last are older than
/// [`RENDER_INTERVAL`]; `None` when the actor is gone.
async fn figures(
    actor: &mpsc::UnboundedSender<super::Event>,
    rendered: &Rendered,
) -> Option<Arc<Vec<Family>>> {
    let mut last = rendered.lock().await;
    if let Some((at, f)) = last.as_ref()
        && at.elapsed() < RENDER_INTERVAL
    {
        return Some(Arc::clone(f));
    }
    let (tx, rx) = oneshot::channel();
    actor.send(super::Event::Metrics(tx)).ok()?;
    let snapshot = rx.await.ok()?;
    // Reading /proc is a few small files in memory: no blocking worth a thread.
    let f = Arc::new(families(&snapshot, ProcessStats::read().as_ref()));
    *last = Some((tokio::time::Instant::now(), Arc::clone(&f)));
    Some(f)
}

/// Answers `status` with `body`, of `format` (else plain text), and closes.
async fn respond(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    format: Option<Format>,
    body: &str,
) -> std::io::Result<()> {
    let kind = format.map_or("text/plain; charset=utf-8", Format::content_type);
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// A family of `rows` labelled samples.
fn labelled(
    name: &str,
    help: &'static str,
    kind: Kind,
    rows: impl Iterator<Item = (Labels, u64)>,
) -> Family {
    pm(
        name,
        help,
        kind,
        rows.map(|(l, v)| (l, Value::Int(v))).collect(),
    )
}

/// The PM's own figures: start, operations, apps, observers, subscriptions, CDOs, memory.
fn status_families(out: &mut Vec<Family>, st: &Status) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    out.extend([
        pm_one(
            "start_time_seconds",
            "When the pool manager started, in seconds since the Unix epoch",
            Kind::Gauge,
            now - st.uptime_ms as f64 / 1e3,
        ),
        labelled(
            "operations",
            "Operations handled, by kind",
            Kind::Counter,
            st.operations
                .iter()
                .map(|(op, n)| (vec![("op", op.clone())], *n)),
        ),
        pm_one("apps", "Applications joined", Kind::Gauge, st.app_count),
        pm_one(
            "observers",
            "Observer connections open (maestro pool status, ls, watch and other tools; a scrape is none)",
            Kind::Gauge,
            st.observer_count,
        ),
        pm_one(
            "subscriptions",
            "Event subscriptions open",
            Kind::Gauge,
            st.subscriptions,
        ),
        labelled(
            "cdos",
            "Live CDOs by state (every state, 0 included)",
            Kind::Gauge,
            st.cdos
                .iter()
                .map(|(state, n)| (vec![("state", state.clone())], *n)),
        ),
        pm_one(
            "transfers_in_flight",
            "Transfers ticketed and not finished",
            Kind::Gauge,
            st.transfers_in_flight,
        ),
        pm_one(
            "inline_bytes",
            "Bytes of small CDOs the pool manager holds",
            Kind::Gauge,
            st.inline_bytes,
        ),
        pm_one(
            "kept_bytes",
            "Bytes the pool manager holds for the CDOs it keeps after their producers left (their data is in files)",
            Kind::Gauge,
            st.kept_bytes,
        ),
    ]);
}

/// Transfers: completed and failed, and by transport.
fn transfer_families(out: &mut Vec<Family>, s: &Snapshot) {
    let by_transport = |f: fn(&crate::view::TransportTraffic) -> u64| {
        s.fabric
            .transports
            .iter()
            .map(move |(t, n)| (vec![("transport", t.clone())], f(n)))
    };
    out.extend([
        pm_one(
            "transfers_completed",
            "Transfers completed",
            Kind::Counter,
            s.transfers.completed,
        ),
        pm_one(
            "transfers_failed",
            "Transfers failed, abandoned or cut off",
            Kind::Counter,
            s.transfers.failed,
        ),
        labelled(
            "transport_bytes",
            "Bytes of completed transfers, by transport (rma, copy, map, inline, stream, same-process, gfs)",
            Kind::Counter,
            by_transport(|n| n.bytes),
        ),
        labelled(
            "transport_transfers",
            "Completed transfers, by transport",
            Kind::Counter,
            by_transport(|n| n.transfers),
        ),
        labelled(
            "transport_failures",
            "Failed transfers, by transport",
            Kind::Counter,
            by_transport(|n| n.failures),
        ),
    ]);
}

/// Traffic per NIC and provider (real NICs only: bytes the PM relayed or handed over
/// inline, by stream or within a process are counted by transport), and links down.
fn fabric_families(out: &mut Vec<Family>, s: &Snapshot) {
    let nics = || s.fabric.nics.iter().filter(|n| !n.provider.is_empty());
    let nic = |n: &crate::view::NicTraffic| -> Labels {
        vec![
            ("host", n.host.clone()),
            ("nic", n.nic.clone()),
            ("provider", n.provider.clone()),
        ]
    };
    let direction = |n: &crate::view::NicTraffic, d: &str| {
        let mut l = nic(n);
        l.push(("direction", d.to_string()));
        l
    };
    out.extend([
        labelled(
            "nic_bytes",
            "Bytes of completed transfers through each NIC and provider (out: read from offers behind it; in: read by consumers through it)",
            Kind::Counter,
            nics().flat_map(|n| {
                [
                    (direction(n, "out"), n.bytes_out),
                    (direction(n, "in"), n.bytes_in),
                ]
            }),
        ),
        labelled(
            "nic_failures",
            "Failed transfers on each NIC and provider",
            Kind::Counter,
            nics().map(|n| (nic(n), n.failures)),
        ),
        pm_one(
            "links_down",
            "Networks of links reported down",
            Kind::Gauge,
            s.fabric.links_down.len() as u64,
        ),
    ]);
}

/// The figures every Prometheus client exports about its process.
fn process_families(out: &mut Vec<Family>, p: &ProcessStats) {
    let rows = [
        (
            "cpu_seconds",
            "Total user and system CPU time spent in seconds",
            Kind::Counter,
            Value::Float(p.cpu_seconds),
        ),
        (
            "start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            Kind::Gauge,
            Value::Float(p.start_time_seconds),
        ),
        (
            "resident_memory_bytes",
            "Resident memory size in bytes",
            Kind::Gauge,
            Value::Int(p.resident_bytes),
        ),
        (
            "virtual_memory_bytes",
            "Virtual memory size in bytes",
            Kind::Gauge,
            Value::Int(p.virtual_bytes),
        ),
        (
            "open_fds",
            "Number of open file descriptors",
            Kind::Gauge,
            Value::Int(p.open_fds),
        ),
        (
            "max_fds",
            "Maximum number of open file descriptors",
            Kind::Gauge,
            Value::Int(p.max_fds),
        ),
    ];
    out.extend(rows.map(|(name, help, kind, value)| {
        Family::one(format!("process_{name}"), help, kind, value)
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{NicTraffic, TransportTraffic};

    #[test]
    fn a_shards_samples_carry_its_index_and_a_lone_managers_none() {
        let mut status = Status {
            app_count: 2,
            ..Status::default()
        };
        status.cdos.insert("offered".into(), 4);
        let shard = |index, count| crate::view::ShardStatus {
            index,
            count,
            ..crate::view::ShardStatus::default()
        };
        status.shards = vec![shard(2, 4)];
        let snapshot = Snapshot {
            status: status.clone(),
            transfers: Transfers::default(),
            fabric: Fabric::default(),
        };
        let text = text::encode(&families(&snapshot, None), Format::Prometheus);
        for line in [
            "maestro_pm_apps{shard=\"2\"} 2",
            "maestro_pm_cdos{state=\"offered\",shard=\"2\"} 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        status.shards = vec![shard(0, 1)];
        let alone = Snapshot {
            status,
            transfers: Transfers::default(),
            fabric: Fabric::default(),
        };
        let text = text::encode(&families(&alone, None), Format::Prometheus);
        assert!(!text.contains("shard="), "{text}");
    }

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
        fabric.nics.push(NicTraffic {
            host: "n1".into(),
            nic: "inline".into(),
            transfers_in: 3,
            ..NicTraffic::default()
        });
        fabric.transports.insert(
            "rma".into(),
            TransportTraffic {
                transfers: 1,
                bytes: 1024,
                failures: 0,
            },
        );
        let snapshot = Snapshot {
            status,
            transfers: Transfers::default(),
            fabric,
        };
        let text = text::encode(&families(&snapshot, None), Format::OpenMetrics);
        for line in [
            "maestro_pm_operations_total{op=\"offer\"} 5",
            "maestro_pm_apps 2",
            "maestro_pm_cdos{state=\"offered\"} 4",
            "maestro_pm_build_info{version=\"0.1.0\",protocol=\"0\"} 1",
            "maestro_pm_transport_bytes_total{transport=\"rma\"} 1024",
            "maestro_pm_nic_bytes_total{host=\"n1\",nic=\"ib0\",provider=\"verbs;ofi_rxm\",direction=\"out\"} 1024",
            "maestro_pm_nic_failures_total{host=\"n1\",nic=\"ib0\",provider=\"verbs;ofi_rxm\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("nic=\"inline\""), "{text}");
        let start = text
            .lines()
            .find_map(|l| l.strip_prefix("maestro_pm_start_time_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("a start time");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        assert!((now - 3.5 - start).abs() < 60.0, "{start} vs {now}");
    }
}
