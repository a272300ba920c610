//! The pool manager's IO driver (tokio): listeners (a private Unix socket for processes on
//! the PM's host, then one TCP listener per address), one reader and one writer task per
//! connection, and one actor task that owns the sans-IO
//! [`Manager`] and turns its outputs into frames. A connection that sends a malformed frame
//! is logged and closed; everyone else carries on. A JOIN's PMIx credential is checked in
//! the connection's reader task (off the actor) before the actor sees the JOIN.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, oneshot};

use crate::bootstrap::{ControlAddr, PmInfo};
use crate::events::FabricChange;
use crate::manager::{ConnId, Credential, Manager};
use crate::proto::{self, FromPm, ToPm};

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
}

/// Default of [`PmConfig::max_queued`]: 256 MiB.
pub const MAX_QUEUED: usize = 256 << 20;

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
        }
    }
}

enum Event {
    Connected(ConnId, Writer),
    Messages(ConnId, Vec<ToPm>),
    Join(ConnId, ToPm, Credential),
    Gone(ConnId),
    /// A fabric change reported through [`FabricReporter`].
    Fabric(FabricChange),
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
}

/// A listener of either kind.
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
    String,
);

impl Listener {
    /// The next connection, split, with a description of the peer.
    async fn accept(&self) -> std::io::Result<Halves> {
        match self {
            Listener::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                let (r, w) = stream.into_split();
                Ok((Box::new(r), Box::new(w), peer.to_string()))
            }
            Listener::Unix(l) => {
                let (stream, _) = l.accept().await?;
                let (r, w) = stream.into_split();
                Ok((Box::new(r), Box::new(w), "the unix socket".into()))
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
    sweep_stale_socket_dirs(&base);
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

/// Removes `maestro-pm-<pid>-<tag>` directories in `base` whose pool manager process is
/// gone (killed before it could remove its own) and that belong to this user.
fn sweep_stale_socket_dirs(base: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("maestro-pm-")
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if ours && !alive {
            tracing::debug!("removing the stale pool manager directory {name}");
            let _ = std::fs::remove_dir_all(e.path());
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
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
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
        for addr in &config.listen {
            let l = rt.block_on(TcpListener::bind(addr)).map_err(|e| {
                std::io::Error::new(e.kind(), format!("pool manager listening on {addr}: {e}"))
            })?;
            let bound = l.local_addr()?;
            if bound.ip().is_unspecified() {
                // Listening everywhere: advertise every interface that is up.
                for ip in crate::bootstrap::interface_addresses()? {
                    endpoints.push(SocketAddr::new(ip, bound.port()).into());
                }
            } else {
                endpoints.push(bound.into());
            }
            listeners.push(Listener::Tcp(l));
        }
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut manager = Manager::new(&config.workflow, &config.secret, u64::from_le_bytes(nonce));
        manager.require_credentials(config.require_credentials);
        manager.set_ack_timeout(config.ack_timeout);
        let info = PmInfo {
            workflow: config.workflow,
            endpoints,
            secret: config.secret,
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let check = config.credentials;
        let (tx, rx) = mpsc::unbounded_channel::<Event>();
        let events = tx.clone();
        let max_queued = config.max_queued;
        let thread = std::thread::Builder::new()
            .name("pool-manager".into())
            .spawn(move || {
                let writers = Writers {
                    max_queued,
                    by_conn: HashMap::new(),
                };
                rt.block_on(serve(listeners, manager, check, writers, (tx, rx), stop_rx))
            })?;
        Ok(PoolManager {
            info,
            events,
            stop: Some(stop_tx),
            thread: Some(thread),
            unix_dir,
        })
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
    check: Option<CredentialCheck>,
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
    // Ends holds whose subscribers did not acknowledge in time.
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = ticks.tick() => {
                manager.tick(now_ns());
                flush(&mut manager, &mut writers);
            }
            Some((read, write, peer)) = accepted.recv() => {
                let conn = next;
                next += 1;
                tracing::debug!("connection {conn} from {peer}");
                spawn_connection(conn, read, write, tx.clone(), check.clone());
            }
            Some(ev) = rx.recv() => {
                manager.set_time(now_ns());
                match ev {
                    Event::Connected(conn, w) => {
                        writers.by_conn.insert(conn, w);
                        let mut nonce = [0u8; 32];
                        if getrandom::fill(&mut nonce).is_err() {
                            tracing::error!("no randomness for a JOIN challenge; closing {conn}");
                            writers.by_conn.remove(&conn);
                            continue;
                        }
                        manager.connected(conn, nonce);
                    }
                    Event::Messages(conn, msgs) => {
                        for m in msgs {
                            manager.handle(conn, m);
                        }
                    }
                    Event::Join(conn, msg, credential) => {
                        manager.handle_checked(conn, msg, credential);
                    }
                    Event::Gone(conn) => {
                        writers.by_conn.remove(&conn);
                        manager.disconnected(conn);
                    }
                    Event::Fabric(change) => manager.fabric_changed(change),
                }
                flush(&mut manager, &mut writers);
            }
        }
    }
    for a in acceptors {
        a.abort();
    }
}

/// The wall clock in nanoseconds since the Unix epoch (0 if the clock is before it).
fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

async fn accept_loop(listener: Listener, to: mpsc::UnboundedSender<Halves>) {
    loop {
        match listener.accept().await {
            Ok(conn) => {
                if to.send(conn).is_err() {
                    return;
                }
            }
            Err(e) => {
                // Out of descriptors and the like: log, breathe, go on.
                tracing::warn!("pool manager accept: {e}");
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

/// One connection's writer task: frames to write (`None`: close) and the bytes queued.
struct Writer {
    tx: mpsc::UnboundedSender<Option<Vec<u8>>>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl Writer {
    fn close(self) {
        let _ = self.tx.send(None);
    }
}

/// Sends the manager's output, one frame per connection per round. A connection whose
/// unwritten output would pass the limit is closed and the manager told it is gone (its
/// subscribers hear why), which may produce more output: sent in the next round.
fn flush(manager: &mut Manager, writers: &mut Writers) {
    use std::sync::atomic::Ordering;
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
                w.close();
            }
            manager.disconnected_because(
                conn,
                "it stopped reading from the pool manager (its output queue overflowed)",
            );
        }
    }
}

fn spawn_connection(
    conn: ConnId,
    mut read: Box<dyn AsyncRead + Unpin + Send>,
    mut write: Box<dyn AsyncWrite + Unpin + Send>,
    events: mpsc::UnboundedSender<Event>,
    check: Option<CredentialCheck>,
) {
    let (tx, mut wrx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let left = queued.clone();
    let _ = events.send(Event::Connected(conn, Writer { tx, queued }));
    tokio::spawn(async move {
        while let Some(Some(frame)) = wrx.recv().await {
            if write.write_all(&frame).await.is_err() {
                break;
            }
            left.fetch_sub(frame.len(), std::sync::atomic::Ordering::Relaxed);
        }
        let _ = write.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = Vec::with_capacity(256 * 1024);
        loop {
            // Read straight into the buffer's spare room (no intermediate copy).
            buf.reserve(64 * 1024);
            match read.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            match proto::drain_frames::<ToPm>(&mut buf) {
                Ok(msgs) if msgs.is_empty() => {}
                Ok(msgs) => {
                    if forward(conn, msgs, &events, &check).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!("connection {conn} sent a bad frame ({e}); closing it");
                    break;
                }
            }
        }
        let _ = events.send(Event::Gone(conn));
    });
}

/// Hands a connection's messages to the actor, in order; a JOIN goes alone, with the verdict
/// on its credential.
async fn forward(
    conn: ConnId,
    msgs: Vec<ToPm>,
    events: &mpsc::UnboundedSender<Event>,
    check: &Option<CredentialCheck>,
) -> Result<(), mpsc::error::SendError<Event>> {
    let mut run = Vec::new();
    for m in msgs {
        if let ToPm::Join(join) = &m {
            if !run.is_empty() {
                events.send(Event::Messages(conn, std::mem::take(&mut run)))?;
            }
            let verdict = verify(join.credential.clone(), check.clone()).await;
            events.send(Event::Join(conn, m, verdict))?;
        } else {
            run.push(m);
        }
    }
    if !run.is_empty() {
        events.send(Event::Messages(conn, run))?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_of_dead_pool_managers_are_swept() {
        let base = tempfile::tempdir().expect("tempdir");
        let dead = format!("maestro-pm-{}-abc", u32::MAX - 1);
        let live = format!("maestro-pm-{}-def", std::process::id());
        for d in [
            &dead,
            &live,
            &"maestro-pm-x-1".to_string(),
            &"other".to_string(),
        ] {
            std::fs::create_dir(base.path().join(d)).expect("mkdir");
        }
        sweep_stale_socket_dirs(base.path());
        let mut left: Vec<String> = std::fs::read_dir(base.path())
            .expect("read")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        let mut want = vec![live, "maestro-pm-x-1".to_string(), "other".to_string()];
        left.sort();
        want.sort();
        assert_eq!(left, want);
    }
}
