//! The pool manager's IO driver (tokio): listeners (a private Unix socket for processes on
//! the PM's host, then one TCP listener per address), one reader and one writer task per
//! connection, and one actor task that owns the sans-IO
//! [`Manager`] and turns its outputs into frames. A connection that sends a malformed frame
//! is logged and closed; everyone else carries on. A JOIN's PMIx credential is checked in
//! the connection's reader task (off the actor) before the actor sees the JOIN.
//!
//! What a peer can make the PM hold is bounded:
//! - before its JOIN is accepted, a connection may send one frame of at most
//!   [`MAX_JOIN_FRAME`] bytes holding a lone JOIN (no other message is even decoded), and
//!   must do so within [`PmConfig::join_timeout`]; anything else closes it. At most
//!   [`PmConfig::max_unjoined`] TCP connections wait for admission, at most
//!   [`PmConfig::max_unjoined_per_peer`] from one address; a newcomer evicts the oldest
//!   waiting connection of the busiest address (see [`admission`]), so a flood evicts
//!   itself. Warnings about refused connections are rate-limited;
//! - after it, messages read but not yet handled are bounded in bytes for all connections
//!   together ([`PmConfig::max_ingress`]): a reader waits for room before it reads on (the
//!   peer's socket fills up and its writes block) instead of queuing, and a connection has at
//!   most one batch waiting;
//! - answers a connection does not read are bounded by [`PmConfig::max_queued`] (then it is
//!   closed, as if its app had died).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, oneshot};

use crate::bootstrap::{ControlAddr, PmInfo};
use crate::events::FabricChange;
use crate::proto::{self, FromPm, ToPm};
use crate::view::{Query, View};
use crate::{Clock, ConnId, Credential, Manager};

mod admission;
pub mod metrics;

use admission::{Admission, Peer, Throttle};
pub use admission::{PER_PEER as MAX_UNJOINED_PER_PEER, WAITING as MAX_UNJOINED};

/// Validates a PMIx credential (e.g. with `PMIx_Validate_credential`); `Err` says why not.
pub type CredentialCheck = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// How to run a pool manager.
pub struct PmConfig {
    /// The workflow served.
    pub workflow: String,
    /// The workflow secret JOINs must prove.
    pub secret: Vec<u8>,
    /// Control endpoints to listen on (port 0 picks one per address; `0.0.0.0` listens on
    /// every interface and advertises each one's address that is up, loopback last).
    pub listen: Vec<SocketAddr>,
    /// Checks the PMIx credentials JOINs carry (where the PM runs under a PMIx host).
    pub credentials: Option<CredentialCheck>,
    /// Refuse JOINs without a valid credential.
    pub require_credentials: bool,
    /// Also listen on a Unix socket in a private directory (mode 0700, under `$TMPDIR`
    /// (`maestro run` gives each job its own) or `/tmp`, removed when the PM stops),
    /// advertised first: processes of the same user on the PM's host skip TCP. Default on.
    pub unix_socket: bool,
    /// How long an operation waits for subscribers' acknowledgements before it proceeds
    /// (default [`crate::events::ACK_TIMEOUT`]).
    pub ack_timeout: std::time::Duration,
    /// Most bytes queued for one connection that does not read them (a stopped or stuck
    /// application): beyond this the PM closes it, as if the app had died, rather than
    /// grow without bound. Default [`MAX_QUEUED`].
    pub max_queued: usize,
    /// How long a new connection has to send its JOIN (and have it accepted) before it is
    /// closed. Default [`JOIN_TIMEOUT`].
    pub join_timeout: std::time::Duration,
    /// Most bytes of messages read from all connections and not yet handled; readers wait
    /// for room rather than queue more. At least one frame ([`proto::MAX_FRAME`]) is
    /// always admitted. Default [`MAX_INGRESS`].
    pub max_ingress: usize,
    /// Most TCP connections waiting for admission (connected, not joined yet); a newcomer
    /// past it evicts the oldest waiting connection of the address with the most waiting.
    /// Default [`MAX_UNJOINED`].
    pub max_unjoined: usize,
    /// Most TCP connections waiting for admission from one peer address; its next one
    /// evicts its own oldest. Default [`MAX_UNJOINED_PER_PEER`].
    pub max_unjoined_per_peer: usize,
    /// What each application may make the PM hold and do (quotas, transfer deadline,
    /// name owners, fabric reporters; see [`crate::policy::Policy`]).
    pub policy: crate::policy::Policy,
    /// Serve the PM's counters for monitoring at `http://ADDR/metrics` (OpenMetrics text);
    /// `None` (the default): no endpoint.
    pub metrics: Option<SocketAddr>,
}

/// Default of [`PmConfig::max_queued`]: 256 MiB.
pub const MAX_QUEUED: usize = 256 << 20;

/// Default of [`PmConfig::join_timeout`]: 10 s.
pub const JOIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Default of [`PmConfig::max_ingress`]: 64 MiB.
pub const MAX_INGRESS: usize = 64 << 20;

/// Largest frame a connection may send before it has joined (a JOIN with its endpoints and
/// credential takes a few hundred bytes).
pub const MAX_JOIN_FRAME: usize = 64 << 10;

/// Most bytes a joined connection's reader asks the socket for at a time.
const READ_CHUNK: usize = 64 << 10;

/// Bytes a joined connection's reader asks for when its traffic is light; it doubles, up to
/// [`READ_CHUNK`], while reads come back full, and halves back while they come back
/// small. A quiet connection's buffer is given back, so a PM holding a thousand idle apps
/// does not hold a thousand 64 KiB buffers.
const SMALL_READ: usize = 4 << 10;

impl PmConfig {
    /// Serves `workflow` with `secret` on `listen`, without credential checks.
    pub fn new(workflow: &str, secret: &[u8], listen: Vec<SocketAddr>) -> PmConfig {
        PmConfig {
            workflow: workflow.to_string(),
            secret: secret.to_vec(),
            listen,
            credentials: None,
            require_credentials: false,
            unix_socket: true,
            ack_timeout: crate::events::ACK_TIMEOUT,
            max_queued: MAX_QUEUED,
            join_timeout: JOIN_TIMEOUT,
            max_ingress: MAX_INGRESS,
            max_unjoined: MAX_UNJOINED,
            max_unjoined_per_peer: MAX_UNJOINED_PER_PEER,
            policy: crate::policy::Policy::default(),
            metrics: None,
        }
    }
}

enum Event {
    /// A new connection's writer, and its peer process where the kernel said (Unix socket).
    Connected(ConnId, Writer, Option<u32>),
    /// Messages of a joined connection, holding their share of the ingress budget (wire
    /// bytes plus decoded size) until handled.
    Messages(ConnId, Vec<ToPm>, tokio::sync::OwnedSemaphorePermit),
    /// A connection's JOIN with the verdict on its credential; the actor answers whether
    /// the connection is now joined.
    Join(ConnId, ToPm, Credential, oneshot::Sender<bool>),
    Gone(ConnId),
    /// A fabric change reported through [`FabricReporter`].
    Fabric(FabricChange),
    /// A metrics scrape asks for the figures.
    Metrics(metrics::Ask),
}

/// Hands fabric changes to a running pool manager (see [`PoolManager::reporter`]); cheap
/// to clone, usable from any thread.
#[derive(Clone)]
pub struct FabricReporter(mpsc::UnboundedSender<Event>);

impl FabricReporter {
    /// Reports `change`; false if the pool manager has stopped.
    pub fn report(&self, change: FabricChange) -> bool {
        self.0.send(Event::Fabric(change)).is_ok()
    }
}

/// A running pool manager; stops when dropped (or with [`PoolManager::stop`]).
pub struct PoolManager {
    info: PmInfo,
    events: mpsc::UnboundedSender<Event>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The private directory of the Unix socket, removed at shutdown.
    unix_dir: Option<std::path::PathBuf>,
    /// Where the metrics endpoint listens, if it does.
    metrics: Option<SocketAddr>,
}

/// A listener of either kind.
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// An accepted connection: its halves, a description of the peer for the log, and who it
/// is for admission.
type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
    String,
    Peer,
);

impl Listener {
    /// The next connection, split, with a description of the peer.
    async fn accept(&self) -> std::io::Result<Halves> {
        match self {
            Listener::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                crate::liveness::probe(&stream);
                let (r, w) = stream.into_split();
                Ok((
                    Box::new(r),
                    Box::new(w),
                    peer.to_string(),
                    Peer::Tcp(peer.ip().to_canonical()),
                ))
            }
            Listener::Unix(l) => {
                let (stream, _) = l.accept().await?;
                // The kernel's word on the peer process: a JOIN on this connection may
                // announce that process's memory only.
                let pid = stream
                    .peer_cred()
                    .ok()
                    .and_then(|c| c.pid())
                    .and_then(|p| u32::try_from(p).ok());
                let (r, w) = stream.into_split();
                Ok((
                    Box::new(r),
                    Box::new(w),
                    "the unix socket".into(),
                    Peer::Local(pid),
                ))
            }
        }
    }
}

/// Creates a private directory with a listening Unix socket in it (after removing those
/// that killed pool managers left); `None` (with a warning) when that is not possible, for
/// the PM then serves over TCP only.
fn unix_listener(
    rt: &tokio::runtime::Runtime,
) -> Option<(std::path::PathBuf, ControlAddr, Listener)> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    crate::stale::sweep_dead_process_dirs(&base, "maestro-pm-");
    let mut tag = [0u8; 6];
    getrandom::fill(&mut tag).ok()?;
    let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    let dir = base.join(format!("maestro-pm-{}-{tag}", std::process::id()));
    let path = dir.join("pm.sock");
    let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let _guard = rt.enter();
    match made.and_then(|()| UnixListener::bind(&path)) {
        Ok(l) => Some((dir, ControlAddr::Unix(path), Listener::Unix(l))),
        Err(e) => {
            tracing::warn!(
                "pool manager: no unix socket at {} ({e}); TCP only",
                path.display()
            );
            let _ = std::fs::remove_dir_all(&dir);
            None
        }
    }
}

impl PoolManager {
    /// Starts a pool manager on its own runtime thread.
    ///
    /// # Errors
    /// The OS error if an address cannot be bound, no address is given, or the runtime
    /// cannot start.
    pub fn start(config: PmConfig) -> std::io::Result<PoolManager> {
        if config.listen.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a pool manager needs at least one address to listen on",
            ));
        }
        raise_descriptor_limit();
        let rt = tokio::runtime::Builder::new_current_thread()
            .thread_name("pool-manager")
            .enable_all()
            .build()?;
        let mut listeners = Vec::new();
        let mut endpoints = Vec::new();
        let mut unix_dir = None;
        if config.unix_socket
            && let Some((dir, addr, listener)) = unix_listener(&rt)
        {
            unix_dir = Some(dir);
            endpoints.push(addr);
            listeners.push(listener);
        }
        // Addresses given port 0 share one port where they can: the info then names one.
        let mut shared_port = None;
        for addr in &config.listen {
            let same = shared_port.filter(|_| addr.port() == 0).and_then(|port| {
                rt.block_on(TcpListener::bind(SocketAddr::new(addr.ip(), port)))
                    .ok()
            });
            let l = match same {
                Some(l) => l,
                None => rt.block_on(TcpListener::bind(addr)).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("pool manager listening on {addr}: {e}"))
                })?,
            };
            let bound = l.local_addr()?;
            if addr.port() == 0 {
                shared_port.get_or_insert(bound.port());
            }
            if bound.ip().is_unspecified() {
                // Listening everywhere: advertise every interface that is up.
                for ip in inventory::netif::interface_addresses()? {
                    endpoints.push(SocketAddr::new(ip, bound.port()).into());
                }
            } else {
                endpoints.push(bound.into());
            }
            listeners.push(Listener::Tcp(l));
        }
        let metrics = match config.metrics {
            Some(addr) => {
                let l = rt.block_on(TcpListener::bind(addr)).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("metrics endpoint on {addr}: {e}"))
                })?;
                Some(l)
            }
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(TcpListener::local_addr).transpose()?;
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut manager = Manager::new(
            &config.workflow,
            &config.secret,
            u64::from_le_bytes(nonce),
            wall_clock(),
        );
        manager.require_credentials(config.require_credentials);
        manager.set_policy(config.policy.clone());
        manager.set_ack_timeout(config.ack_timeout);
        let info = PmInfo {
            workflow: config.workflow,
            endpoints,
            secret: config.secret,
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let (tx, rx) = mpsc::unbounded_channel::<Event>();
        let events = tx.clone();
        let max_queued = config.max_queued;
        // One batch (a partial frame plus one read) must always fit.
        let budget_size = config
            .max_ingress
            .max(proto::MAX_FRAME + proto::HEADER + READ_CHUNK);
        let ingress = Ingress {
            check: config.credentials,
            join_timeout: config.join_timeout,
            max_unjoined: (config.max_unjoined, config.max_unjoined_per_peer),
            budget: Arc::new(tokio::sync::Semaphore::new(budget_size)),
            budget_size,
            refusals: Arc::new(std::sync::Mutex::new(Throttle::new(
                std::time::Duration::from_secs(1),
                10,
            ))),
        };
        let admission = Admission::new(config.max_unjoined_per_peer, config.max_unjoined);
        let thread = std::thread::Builder::new()
            .name("pool-manager".into())
            .spawn(move || {
                let writers = Writers {
                    max_queued,
                    by_conn: HashMap::new(),
                };
                if let Some(l) = metrics {
                    rt.spawn(metrics::serve(l, tx.clone()));
                }
                rt.block_on(serve(
                    listeners,
                    manager,
                    (ingress, admission),
                    writers,
                    (tx, rx),
                    stop_rx,
                ))
            })?;
        Ok(PoolManager {
            info,
            events,
            stop: Some(stop_tx),
            thread: Some(thread),
            unix_dir,
            metrics: metrics_addr,
        })
    }

    /// Where the metrics endpoint listens (`http://ADDR/metrics`), if it does.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// A handle that reports fabric changes to this pool manager.
    pub fn reporter(&self) -> FabricReporter {
        FabricReporter(self.events.clone())
    }

    /// The first TCP address applications can connect to.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.info.endpoints.iter().find_map(|e| match e {
            ControlAddr::Tcp(a) => Some(*a),
            ControlAddr::Unix(_) => None,
        })
    }

    /// The PM info applications join with (every control endpoint, the secret).
    pub fn info(&self) -> &PmInfo {
        &self.info
    }

    /// Stops serving and waits for the runtime to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(dir) = self.unix_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for PoolManager {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn serve(
    listeners: Vec<Listener>,
    mut manager: Manager,
    (ingress, mut admission): (Ingress, Admission),
    mut writers: Writers,
    (tx, mut rx): (mpsc::UnboundedSender<Event>, mpsc::UnboundedReceiver<Event>),
    mut stop: oneshot::Receiver<()>,
) {
    let (accepted_tx, mut accepted) = mpsc::unbounded_channel::<Halves>();
    let acceptors: Vec<_> = listeners
        .into_iter()
        .map(|l| tokio::spawn(accept_loop(l, accepted_tx.clone())))
        .collect();
    let mut next: ConnId = 1;
    let mut memory = MemoryReturn::default();
    loop {
        // The manager's next deadline (an operation held for acknowledgements), if any: no
        // periodic tick, the driver sleeps until its next input or that instant.
        let deadline = manager.poll_timeout();
        tokio::select! {
            _ = &mut stop => break,
            () = sleep_until(deadline) => {
                manager.handle_timeout(Instant::now());
                flush(&mut manager, &mut writers);
            }
            Some((read, write, peer, who)) = accepted.recv() => {
                let conn = next;
                next += 1;
                if let Some(old) = admission.arrive(conn, who) {
                    // Made room: the evicted connection's tasks stop now, and its Gone
                    // comes after whatever it had already queued.
                    if let Some(w) = writers.by_conn.remove(&old) {
                        w.cut_off();
                    }
                    let _ = tx.send(Event::Gone(old));
                    ingress.refused(|| format!(
                        "connection {old} closed unjoined to admit connection {conn} from {peer}: \
                         too many connections wait to join (at most {} in all, {} per address)",
                        ingress.max_unjoined.0, ingress.max_unjoined.1
                    ));
                }
                tracing::debug!("connection {conn} from {peer}");
                let pid = match who {
                    Peer::Local(pid) => pid,
                    Peer::Tcp(_) => None,
                };
                spawn_connection(conn, read, write, tx.clone(), (ingress.clone(), pid));
            }
            Some(ev) = rx.recv() => {
                manager.set_time(Instant::now());
                match ev {
                    Event::Connected(conn, w, pid) => {
                        writers.by_conn.insert(conn, w);
                        let mut nonce = [0u8; 32];
                        if getrandom::fill(&mut nonce).is_err() {
                            tracing::error!("no randomness for a JOIN challenge; closing {conn}");
                            writers.by_conn.remove(&conn);
                            continue;
                        }
                        manager.connected_from(conn, nonce, pid);
                    }
                    Event::Messages(conn, msgs, _permit) => {
                        for m in msgs {
                            if matches!(m, ToPm::Query { query: Query::Status, .. }) {
                                manager.set_memory_bytes(resident_bytes());
                            }
                            manager.handle(conn, m);
                        }
                    }
                    Event::Join(conn, msg, credential, joined) => {
                        admission.leave(conn);
                        manager.handle_checked(conn, msg, credential);
                        let _ = joined.send(manager.is_joined(conn));
                    }
                    Event::Gone(conn) => {
                        admission.leave(conn);
                        writers.by_conn.remove(&conn);
                        manager.disconnected(conn);
                    }
                    Event::Fabric(change) => manager.fabric_changed(change),
                    Event::Metrics(ask) => {
                        manager.set_memory_bytes(resident_bytes());
                        let _ = ask.send(snapshot(&mut manager));
                    }
                }
                flush(&mut manager, &mut writers);
                memory.after(manager.cdo_count());
            }
        }
    }
    for a in acceptors {
        a.abort();
    }
}

/// The figures a metrics scrape renders.
fn snapshot(manager: &mut Manager) -> metrics::Snapshot {
    let View::Status(status) = manager.view(Query::Status) else {
        unreachable!("a status query is answered with a status")
    };
    let View::Transfers(transfers) = manager.view(Query::Transfers) else {
        unreachable!("a transfers query is answered with transfers")
    };
    let View::Fabric(fabric) = manager.view(Query::Fabric) else {
        unreachable!("a fabric query is answered with the fabric")
    };
    metrics::Snapshot {
        status,
        transfers,
        fabric,
    }
}

/// This process's resident memory in bytes (`/proc/self/statm`), where Linux tells.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|&p| p > 0)?)
}

/// Gives freed memory back to the OS after the CDO population fell to a quarter of its
/// high-water mark (of at least [`MemoryReturn::MIN_HIGH`] CDOs). The manager shrinks its
/// tables; glibc's allocator keeps the freed chunks mapped until `malloc_trim` (measured: a
/// PM that held a million CDOs stays at 140 MiB after they are withdrawn, 23 MiB after a
/// trim).
#[derive(Default)]
struct MemoryReturn {
    high: usize,
}

impl MemoryReturn {
    /// Populations below this are not worth a trim.
    const MIN_HIGH: usize = 100_000;

    fn after(&mut self, live: usize) {
        self.high = self.high.max(live);
        if self.high >= Self::MIN_HIGH && live * 4 < self.high {
            self.high = live;
            #[cfg(target_env = "gnu")]
            // SAFETY: malloc_trim only returns free memory to the OS.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

/// Raises this process's soft limit of open descriptors to its hard limit: a PM holds a
/// socket per application plus those waiting for admission, more than Linux's default
/// soft limit of 1024.
fn raise_descriptor_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::debug!("pool manager: could not raise the descriptor limit");
            }
        }
    }
}

/// The manager's clock: now, on both the monotonic and the wall clock (0 if the wall clock
/// is before the Unix epoch).
fn wall_clock() -> Clock {
    Clock {
        origin: Instant::now(),
        origin_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)),
    }
}

/// Sleeps until `deadline`; forever when there is none (cancel safe: it holds nothing).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn accept_loop(listener: Listener, to: mpsc::UnboundedSender<Halves>) {
    let mut failures = Throttle::new(std::time::Duration::from_secs(10), 1);
    loop {
        match listener.accept().await {
            Ok(conn) => {
                if to.send(conn).is_err() {
                    return;
                }
            }
            Err(e) => {
                // Out of descriptors and the like: log (rarely), breathe, go on.
                if let Some(held) = failures.admit(Instant::now()) {
                    tracing::warn!("pool manager accept: {e} ({held} more failures held back)");
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// The connections' writer tasks, with what each has still to write.
struct Writers {
    max_queued: usize,
    by_conn: HashMap<ConnId, Writer>,
}

/// One connection's writer task: frames to write (`None`: close) and the bytes queued;
/// with the handles of its reader and writer tasks, to cut it off.
struct Writer {
    tx: mpsc::UnboundedSender<Option<Vec<u8>>>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    tasks: [tokio::task::AbortHandle; 2],
}

impl Writer {
    /// Closes the connection once what is queued is written.
    fn close(self) {
        let _ = self.tx.send(None);
    }

    /// Closes the connection now, dropping what is queued and what it sent unread (its
    /// peer does not read: waiting for the queue to drain would never end).
    fn cut_off(self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Sends the manager's output, one frame per connection per round. A connection whose
/// unwritten output would pass the limit is closed and the manager told it is gone (its
/// subscribers hear why), which may produce more output: sent in the next round.
fn flush(manager: &mut Manager, writers: &mut Writers) {
    loop {
        let mut batches: HashMap<ConnId, Vec<FromPm>> = HashMap::new();
        while let Some((conn, msg)) = manager.poll_output() {
            batches.entry(conn).or_default().push(msg);
        }
        let mut stuck = Vec::new();
        for (conn, batch) in batches {
            let frames = match proto::encode_split(&proto::pack_done(batch)) {
                Ok(f) => f,
                Err(e) => {
                    tracing::error!("encoding a reply to {conn}: {e}");
                    continue;
                }
            };
            let Some(w) = writers.by_conn.get(&conn) else {
                continue;
            };
            let bytes: usize = frames.iter().map(Vec::len).sum();
            let queued = w.queued.fetch_add(bytes, Ordering::Relaxed) + bytes;
            if queued > writers.max_queued {
                stuck.push((conn, queued));
                continue;
            }
            for f in frames {
                let _ = w.tx.send(Some(f));
            }
        }
        for conn in manager.take_closing() {
            if let Some(w) = writers.by_conn.remove(&conn) {
                w.close();
            }
        }
        if stuck.is_empty() {
            return;
        }
        for (conn, queued) in stuck {
            tracing::error!(
                "connection {conn} does not read what the pool manager sends ({queued} bytes waiting); closing it"
            );
            if let Some(w) = writers.by_conn.remove(&conn) {
                w.cut_off();
            }
            manager.disconnected_because(
                conn,
                "it stopped reading from the pool manager (its output queue overflowed)",
            );
        }
    }
}

/// What connection readers share: the credential check, the admission deadline and
/// limits, the ingress budget in bytes, and the rate limit of warnings about refused
/// connections.
#[derive(Clone)]
struct Ingress {
    check: Option<CredentialCheck>,
    join_timeout: std::time::Duration,
    /// [`PmConfig::max_unjoined`] and [`PmConfig::max_unjoined_per_peer`], for messages.
    max_unjoined: (usize, usize),
    budget: Arc<tokio::sync::Semaphore>,
    /// The budget's size in bytes.
    budget_size: usize,
    refusals: Arc<std::sync::Mutex<Throttle>>,
}

impl Ingress {
    /// Logs why a connection was refused or closed, at most ten lines a second (a flood of
    /// bad connections is not a flood of log lines); the next line says how many were held
    /// back.
    fn refused(&self, why: impl FnOnce() -> String) {
        let admitted = match self.refusals.lock() {
            Ok(mut t) => t.admit(Instant::now()),
            Err(_) => Some(0),
        };
        match admitted {
            Some(0) => tracing::warn!("pool manager: {}", why()),
            Some(held) => tracing::warn!(
                "pool manager: {} ({held} similar messages held back)",
                why()
            ),
            None => {}
        }
    }
}

fn spawn_connection(
    conn: ConnId,
    mut read: Box<dyn AsyncRead + Unpin + Send>,
    mut write: Box<dyn AsyncWrite + Unpin + Send>,
    events: mpsc::UnboundedSender<Event>,
    (ingress, pid): (Ingress, Option<u32>),
) {
    let (tx, mut wrx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let left = queued.clone();
    let writer = tokio::spawn(async move {
        while let Some(Some(frame)) = wrx.recv().await {
            if write.write_all(&frame).await.is_err() {
                break;
            }
            left.fetch_sub(frame.len(), Ordering::Relaxed);
        }
        let _ = write.shutdown().await;
    });
    let connected = events.clone();
    // The reader starts once the actor has heard of the connection (same channel: order).
    let (start, started) = oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        if started.await.is_err() {
            return;
        }
        let mut buf = Vec::new();
        let admitted = admit(conn, &mut read, &mut buf, &events, &ingress).await;
        let ended = match admitted {
            Ok(()) => serve_joined(conn, &mut read, buf, &events, &ingress).await,
            Err(why) => Err(why),
        };
        match ended {
            Ok(()) => tracing::debug!("connection {conn} closed"),
            Err(why) => ingress.refused(|| format!("connection {conn} {why}; closing it")),
        }
        let _ = events.send(Event::Gone(conn));
    });
    let tasks = [writer.abort_handle(), reader.abort_handle()];
    let _ = connected.send(Event::Connected(conn, Writer { tx, queued, tasks }, pid));
    let _ = start.send(());
}

/// Reads more of a connection into `buf`, at most `room` bytes.
///
/// # Errors
/// What went wrong (end of stream or the OS error), for the log.
async fn read_some(
    read: &mut (dyn AsyncRead + Unpin + Send),
    buf: &mut Vec<u8>,
    room: usize,
) -> Result<usize, String> {
    buf.reserve(room);
    let mut limited = (&mut *read).take(room as u64);
    match limited.read_buf(buf).await {
        Ok(0) => Err("ended".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("failed ({e})")),
    }
}

/// Admission: the first frame, small and within the deadline, must be a JOIN the manager
/// accepts. Leaves in `buf` what the peer sent after it.
///
/// # Errors
/// Why the connection is refused, for the log (the manager has answered a refused JOIN).
async fn admit(
    conn: ConnId,
    read: &mut (dyn AsyncRead + Unpin + Send),
    buf: &mut Vec<u8>,
    events: &mpsc::UnboundedSender<Event>,
    ingress: &Ingress,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + ingress.join_timeout;
    let len = loop {
        if buf.len() >= proto::HEADER {
            let mut header = [0u8; proto::HEADER];
            header.copy_from_slice(&buf[..proto::HEADER]);
            let len = proto::payload_len(&header).map_err(|e| format!("sent a bad frame ({e})"))?;
            if len > MAX_JOIN_FRAME {
                return Err(format!(
                    "announced a {len}-byte frame before joining (at most {MAX_JOIN_FRAME})"
                ));
            }
            if buf.len() >= proto::HEADER + len {
                break len;
            }
        }
        // A JOIN takes a few hundred bytes: read a little at a time, up to the limit.
        let room = (proto::HEADER + MAX_JOIN_FRAME - buf.len()).min(SMALL_READ);
        match tokio::time::timeout_at(deadline, read_some(read, buf, room)).await {
            Ok(r) => drop(r.map_err(|e| format!("{e} before joining"))?),
            Err(_) => {
                return Err(format!("did not join within {:?}", ingress.join_timeout));
            }
        }
    };
    let join = proto::decode_join(&buf[proto::HEADER..proto::HEADER + len])
        .map_err(|e| format!("sent a bad first frame ({e})"))?;
    buf.drain(..proto::HEADER + len);
    let credential = join.credential.clone();
    let verdict = verify(credential, ingress.check.clone()).await;
    let (answer, joined) = oneshot::channel();
    events
        .send(Event::Join(conn, ToPm::Join(join), verdict, answer))
        .map_err(|_| "outlived the pool manager".to_string())?;
    match tokio::time::timeout_at(deadline, joined).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err("was refused at JOIN".into()),
        Ok(Err(_)) => Err("outlived the pool manager".into()),
        Err(_) => Err(format!(
            "was not admitted within {:?}",
            ingress.join_timeout
        )),
    }
}

/// Reads a joined connection's frames and hands them to the actor in order, each batch
/// holding its bytes' share of the ingress `budget` until handled: past the budget the
/// reader waits instead of reading on.
///
/// # Errors
/// Why the connection ended abnormally (a bad frame, the OS error), for the log.
async fn serve_joined(
    conn: ConnId,
    read: &mut (dyn AsyncRead + Unpin + Send),
    mut buf: Vec<u8>,
    events: &mpsc::UnboundedSender<Event>,
    ingress: &Ingress,
) -> Result<(), String> {
    let mut want = SMALL_READ;
    loop {
        let before = buf.len();
        let mut msgs = Vec::new();
        proto::drain_frames::<ToPm>(&mut buf, |m| msgs.push(m))
            .map_err(|e| format!("sent a bad frame ({e})"))?;
        if !msgs.is_empty() {
            // What the batch holds: its wire bytes and the decoded messages.
            let bytes = (before - buf.len() + msgs.len() * std::mem::size_of::<ToPm>())
                .clamp(1, ingress.budget_size);
            let permit = Arc::clone(&ingress.budget)
                .acquire_many_owned(u32::try_from(bytes).unwrap_or(u32::MAX))
                .await
                .map_err(|_| "outlived the pool manager".to_string())?;
            if events.send(Event::Messages(conn, msgs, permit)).is_err() {
                return Err("outlived the pool manager".into());
            }
        }
        if buf.is_empty() && want == SMALL_READ && buf.capacity() > SMALL_READ {
            // Quiet: the memory goes back until the app speaks again.
            buf = Vec::new();
        }
        match read_some(read, &mut buf, want).await {
            Ok(n) if n == want => want = (want * 2).min(READ_CHUNK),
            Ok(n) if n < want / 4 => want = (want / 2).max(SMALL_READ),
            Ok(_) => {}
            Err(e) if e == "ended" => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

async fn verify(credential: Option<Vec<u8>>, check: Option<CredentialCheck>) -> Credential {
    let (Some(cred), Some(check)) = (credential, check) else {
        return Credential::Unchecked;
    };
    match tokio::task::spawn_blocking(move || check(&cred)).await {
        Ok(Ok(())) => Credential::Valid,
        Ok(Err(why)) => Credential::Invalid(why),
        Err(e) => Credential::Invalid(format!("the credential check failed: {e}")),
    }
}
