//! The pool manager's IO driver (tokio): listeners (a private Unix socket for processes on
//! the PM's host, then one TCP listener per address), one reader and one writer task per
//! connection, and one actor task that owns the sans-IO
//! [`Manager`] and turns its outputs into frames. A connection that sends a malformed frame
//! is logged and closed; everyone else carries on. Who sends a JOIN is established in the
//! connection's reader task (off the actor) before the actor sees the JOIN: the kernel's
//! word on a local peer's user and the PM's PMIx host's on the JOIN's credential (see
//! [`identity`]).
//!
//! What a peer can make the PM hold is bounded:
//! - before its JOIN is accepted, a connection may send one frame of at most
//!   [`MAX_JOIN_FRAME`] bytes holding a lone JOIN (no other message is even decoded), and
//!   must do so within [`PmConfig::join_timeout`]; anything else closes it. At most
//!   [`PmConfig::max_unjoined`] TCP connections wait for admission, at most
//!   [`PmConfig::max_unjoined_per_peer`] from one address; a newcomer evicts the oldest
//!   waiting connection of the busiest address, so a flood evicts itself. The manager
//!   keeps these deadlines and counts (see [`crate::admission`]); the driver closes what
//!   it closes. Warnings about refused connections are rate-limited;
//! - after it, messages read but not yet handled are bounded in bytes for all connections
//!   together ([`PmConfig::max_ingress`]): a reader waits for room before it reads on (the
//!   peer's socket fills up and its writes block) instead of queuing, and a connection has at
//!   most one batch waiting;
//! - answers a connection does not read are bounded by [`PmConfig::max_queued`] (then it is
//!   closed, as if its app had died).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::bootstrap::{ControlAddr, PmInfo};
use crate::events::FabricChange;
use crate::proto::ToPm;
use crate::view::{Query, View};
use crate::{ConnId, Identity, Manager};

mod at_exit;
mod conn;
mod identity;
mod kept;
mod listen;
pub mod metrics;
mod resources;
mod sharded;
pub mod standby;

pub use crate::admission::{
    JOIN_TIMEOUT, PER_PEER as MAX_UNJOINED_PER_PEER, WAITING as MAX_UNJOINED,
};
use crate::admission::{Limits, Peer};
use conn::{Ingress, Writer, Writers, flush, spawn_connection};
pub use listen::PM_DIR_PREFIX;
use listen::{Accepted, Listener, accept_loop};
use resources::{MemoryReturn, raise_descriptor_limit, wall_clock};
pub use resources::{default_max_bytes, resident_bytes};
pub use sharded::ShardedPool;

/// Asks the PM's PMIx host about a JOIN's credential (`PMIx_Validate_credential`).
pub type CredentialCheck = Arc<dyn Fn(&[u8]) -> CredentialVerdict + Send + Sync>;

/// What the PM's PMIx host says of a credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialVerdict {
    /// Genuine, issued to a process of this uid (where the host said).
    Valid {
        /// The uid the host vouches for.
        uid: Option<u32>,
    },
    /// The host calls it forged or expired (`PMIX_ERR_INVALID_CRED`): why.
    Forged(String),
    /// The host cannot check it (another launcher's, another kind, no host at all): no
    /// evidence either way; why, for the log.
    Unverifiable(String),
}

/// How to run a pool manager.
pub struct PmConfig {
    /// The workflow served.
    pub workflow: String,
    /// The workflow secret JOINs must prove.
    pub secret: Vec<u8>,
    /// Control endpoints to listen on (port 0 picks one per address; `0.0.0.0` listens on
    /// every interface and advertises each one's address that is up, loopback last).
    pub listen: Vec<SocketAddr>,
    /// Interfaces whose addresses a PM listening on every interface does not advertise
    /// (`fabric::Config::exclude`, from `MSTRO_OFI_IFACE_EXCLUDE`): apps then reach it,
    /// and the bytes it relays travel, on the other networks only. Default none.
    pub exclude_interfaces: Vec<String>,
    /// Checks the PMIx credentials JOINs carry (where the PM runs under a PMIx host): a
    /// valid one for another user, or a forged one, refuses the JOIN; one the host cannot
    /// check leaves the secret to decide.
    pub credentials: Option<CredentialCheck>,
    /// Also listen on a Unix socket in a private directory (mode 0700, under `$TMPDIR`
    /// (`maestro run` gives each job its own) or `/tmp`, removed when the PM stops),
    /// advertised first: processes of the same user on the PM's host skip TCP. Default on.
    pub unix_socket: bool,
    /// Most apps on the PM's host whose control connections move to shared-memory rings
    /// at once (each holds a 260 KiB segment of shared memory; see
    /// `docs/developers/rings.md`); the others, and any app past it, stay on the Unix
    /// socket. 0: none. Default [`MAX_RINGS`].
    pub max_rings: usize,
    /// Remove that directory also when the process ends without stopping the PM: through
    /// `exit` (a C program returning from `main` without `mstro_finalize`), or by SIGINT,
    /// SIGTERM or SIGHUP whose action is the default when the PM starts (handlers of its
    /// own are installed then, which end the process as the default would). For the
    /// library's programs; off for a program that handles those signals itself. Default
    /// off.
    pub remove_at_exit: bool,
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
    /// for room rather than queue more. At least one frame ([`proto::MAX_FRAME`](crate::proto::MAX_FRAME)) is
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
    /// The global file system directory every process of the workflow sees
    /// (`MSTRO_TRANSPORT_GFS_DIR`): the PM keeps there, in a directory of its own, the
    /// files of GFS offers their producers withdraw, and offers them until their lifetime
    /// (`.maestro.core.cdo.lifetime`) or the workflow ends (see [`pool_core::KeptFile`]).
    /// `None` (the default): a producer's withdraw ends its CDO.
    pub gfs_dir: Option<std::path::PathBuf>,
    /// Directories of CDOs an earlier workflow persisted (`GFS_DIR/maestro-persist-WORKFLOW`)
    /// to offer again from the start, as kept CDOs (needs [`PmConfig::gfs_dir`]; the files
    /// move into the PM's directory). Default none.
    pub adopt: Vec<std::path::PathBuf>,
    /// Take over from a pool manager of the workflow that is gone (give it the same
    /// secret): for this long only the apps that held state with it join, each reclaiming
    /// its app id and replaying what it holds; then new apps join too (see
    /// docs/developers/failover.md). With [`PmConfig::gfs_dir`], it adopts the CDOs the
    /// managers of the workflow that are gone kept there. Default `None`: a new pool.
    pub grace: Option<std::time::Duration>,
    /// The apps of the PM that is gone, as a standby last saw them (id and
    /// `component:index`): the grace period ends once all of them reclaimed what they
    /// held (at once when it saw none), and the failover event names those that did not.
    /// Default `None`: not known (the period runs its length).
    pub expect: Option<Vec<(crate::proto::AppId, String)>>,
    /// This manager's place among the shards of a sharded pool (see
    /// docs/developers/shards.md; each shard its own `PoolManager`, all with the same
    /// workflow and secret). Default `None`: the pool's only manager.
    pub shard: Option<pool_core::shards::Place>,
    /// The hops between the pool's hosts (the fabric beyond the node): of several offers
    /// of a name, a consumer is ticketed from the one fewest hops away
    /// ([`pool_core::Manager::set_distances`]). Default none: every provider as near.
    pub distances: Option<pool_core::HostDistances>,
}

/// Default of [`PmConfig::max_queued`]: 256 MiB.
pub const MAX_QUEUED: usize = 256 << 20;

/// Default of [`PmConfig::max_rings`]: 256 (about 65 MiB of shared memory at most).
pub const MAX_RINGS: usize = 256;

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

/// Most bytes of one connection's messages read and not yet handled (of the PM-wide
/// [`PmConfig::max_ingress`]): a connection that floods the PM has at most this much
/// ahead of everyone else's messages, so an honest app's request waits behind a few
/// batches of it, not behind all it sent.
const CONN_INGRESS: usize = 256 << 10;

impl PmConfig {
    /// Serves `workflow` with `secret` on `listen`, without credential checks (the secret
    /// and, for local peers, the kernel's word on their user decide).
    pub fn new(workflow: &str, secret: &[u8], listen: Vec<SocketAddr>) -> PmConfig {
        PmConfig {
            workflow: workflow.to_string(),
            secret: secret.to_vec(),
            listen,
            exclude_interfaces: Vec::new(),
            credentials: None,
            unix_socket: true,
            max_rings: MAX_RINGS,
            remove_at_exit: false,
            ack_timeout: crate::events::ACK_TIMEOUT,
            max_queued: MAX_QUEUED,
            join_timeout: JOIN_TIMEOUT,
            max_ingress: MAX_INGRESS,
            max_unjoined: MAX_UNJOINED,
            max_unjoined_per_peer: MAX_UNJOINED_PER_PEER,
            policy: crate::policy::Policy {
                max_bytes: resources::default_max_bytes(),
                ..crate::policy::Policy::default()
            },
            metrics: None,
            gfs_dir: None,
            adopt: Vec::new(),
            grace: None,
            expect: None,
            shard: None,
            distances: None,
        }
    }
}

enum Event {
    /// A new connection's writer, and where it comes from.
    Connected(ConnId, Writer, Peer),
    /// Messages of a joined connection, holding their share of the ingress budget and of
    /// the connection's own (wire bytes plus decoded size) until handled.
    Messages(ConnId, Vec<ToPm>, conn::Held),
    /// A connection's JOIN with what is known of its sender; the actor answers whether
    /// the connection is now joined.
    Join(ConnId, ToPm, Identity, oneshot::Sender<bool>),
    Gone(ConnId),
    /// A fabric change reported through [`FabricReporter`].
    Fabric(FabricChange),
    /// The fabric beyond the node changed: the hops now and each switch link's change.
    Topology(pool_core::HostDistances, Vec<(String, bool)>),
    /// A metrics scrape asks for the figures.
    Metrics(metrics::Ask),
    /// A kept CDO's file was checked and described, or is not one the pool keeps, and
    /// why (see [`pool_core::KeptCheck`]).
    KeptChecked(pool_core::proto::CdoId, Result<(), String>),
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

    /// Reports that the fabric beyond the node changed: `distances` are the hops now,
    /// `links` each switch link that went down (false) or up
    /// ([`pool_core::Manager::topology_changed`]); false if the pool manager has stopped.
    pub fn topology(
        &self,
        distances: pool_core::HostDistances,
        links: Vec<(String, bool)>,
    ) -> bool {
        self.0.send(Event::Topology(distances, links)).is_ok()
    }
}

/// A running pool manager; stops when dropped (or with [`PoolManager::stop`]).
pub struct PoolManager {
    info: PmInfo,
    events: mpsc::UnboundedSender<Event>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
    /// The private directory of the Unix socket, removed at shutdown.
    unix_dir: Option<std::path::PathBuf>,
    /// Its removal should the process end before (see [`PmConfig::remove_at_exit`]).
    exit_watch: Option<at_exit::Watch>,
    /// Where the metrics endpoint listens, if it does.
    metrics: Option<SocketAddr>,
}

impl PoolManager {
    /// The CPU time the manager's thread has used so far (what one shard of a sharded
    /// pool costs, say); `None` once it ended, or where the clock cannot be read.
    pub fn cpu_time(&self) -> Option<std::time::Duration> {
        use std::os::unix::thread::JoinHandleExt;
        let thread = self.thread.as_ref()?.as_pthread_t();
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the thread is joinable (its handle is held), so its id is valid.
        if unsafe { libc::pthread_getcpuclockid(thread, &mut clock) } != 0 {
            return None;
        }
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: reads the thread's CPU clock into `ts`.
        if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
            return None;
        }
        let secs = u64::try_from(ts.tv_sec).ok()?;
        Some(std::time::Duration::new(
            secs,
            u32::try_from(ts.tv_nsec).ok()?,
        ))
    }

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
        let (listeners, endpoints, unix_dir) = listen::bind(&config, &rt)?;
        let remove_at_exit = config.remove_at_exit;
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
        manager.set_policy(config.policy.clone());
        if let Some(d) = config.distances.clone() {
            tracing::info!("the hops between {} hosts order offers", d.len());
            manager.set_distances(d);
        }
        if let Some(place) = config.shard {
            manager.set_shard(place);
        }
        if let Some(grace) = config.grace {
            manager.reclaiming(Instant::now() + grace);
            if let Some(apps) = &config.expect {
                manager.expecting(apps.iter().cloned());
            }
        }
        let mut kept = config
            .gfs_dir
            .as_deref()
            .map(|root| kept::KeptDir::create(root, &config.workflow))
            .transpose()?;
        manager.set_keep_dir(kept.as_ref().map(kept::KeptDir::path).transpose()?);
        match &mut kept {
            Some(k) if !config.adopt.is_empty() => {
                let n = k.adopt(&mut manager, &config.adopt);
                tracing::info!("adopted {n} persisted CDOs");
            }
            None if !config.adopt.is_empty() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "adopting persisted CDOs needs the GFS directory (--gfs-dir, MSTRO_TRANSPORT_GFS_DIR): the pool keeps them there",
                ));
            }
            _ => {}
        }
        if let (Some(k), Some(_)) = (&mut kept, config.grace) {
            let n = k.take_over(&mut manager);
            tracing::info!(
                "took over {n} kept CDOs of the pool managers of the workflow that are gone"
            );
        }
        manager.set_ack_timeout(config.ack_timeout);
        manager.set_admission(Limits {
            join_timeout: config.join_timeout,
            max_unjoined: config.max_unjoined,
            max_unjoined_per_peer: config.max_unjoined_per_peer,
        });
        // The PM's segments are named after its socket directory (in /proc/PID/maps).
        let label = unix_dir
            .as_ref()
            .and_then(|d| d.file_name())
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let ingress = Ingress::new(&config, &label);
        let info = PmInfo {
            workflow: config.workflow,
            endpoints,
            other_shards: Vec::new(),
            secret: config.secret,
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let (tx, rx) = mpsc::unbounded_channel::<Event>();
        let events = tx.clone();
        let max_queued = config.max_queued;
        let thread = std::thread::Builder::new()
            .name("pool-manager".into())
            .spawn(move || {
                let writers = Writers {
                    max_queued,
                    by_conn: pool_core::HashMap::default(),
                    kept,
                    events: tx.clone(),
                    staged: pool_core::HashMap::default(),
                    spare: Vec::new(),
                };
                if let Some(l) = metrics {
                    rt.spawn(metrics::serve(l, tx.clone()));
                }
                rt.block_on(serve(
                    listeners,
                    manager,
                    ingress,
                    writers,
                    (tx, rx),
                    stop_rx,
                ))
            })?;
        let exit_watch = unix_dir.as_ref().filter(|_| remove_at_exit).and_then(|d| {
            let sockets = [listen::SOCKET_NAME, crate::ring::SOCKET_NAME];
            at_exit::watch(d, &sockets.map(|s| d.join(s)))
        });
        Ok(PoolManager {
            info,
            events,
            stop: Some(stop_tx),
            thread: Some(thread),
            unix_dir,
            exit_watch,
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
    ///
    /// # Errors
    /// Files of CDOs marked to persist that could not go to the workflow's directory of
    /// persisted files, and where each is instead (nothing is deleted for it: see
    /// `kept`), or the runtime's panic: the caller should exit with a failure.
    pub fn stop(mut self) -> Result<(), String> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let ended = match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(ended)) => ended,
            Some(Err(_)) => Err("the pool manager's thread panicked".into()),
            None => Ok(()),
        };
        if let Some(dir) = self.unix_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(w) = self.exit_watch.take() {
            at_exit::unwatch(w);
        }
        ended
    }
}

impl Drop for PoolManager {
    fn drop(&mut self) {
        // What went wrong was logged as it happened; nobody is left to tell.
        let _ = self.shutdown();
    }
}

async fn serve(
    listeners: Vec<Listener>,
    mut manager: Manager,
    ingress: Ingress,
    mut writers: Writers,
    (tx, mut rx): (mpsc::UnboundedSender<Event>, mpsc::UnboundedReceiver<Event>),
    mut stop: oneshot::Receiver<()>,
) -> Result<(), String> {
    let (accepted_tx, mut accepted) = mpsc::unbounded_channel::<Accepted>();
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
            () = crate::sleep_until(deadline) => {
                manager.handle_timeout(Instant::now());
                flush(&mut manager, &mut writers);
            }
            Some((stream, peer, who, user)) = accepted.recv() => {
                let conn = next;
                next += 1;
                tracing::debug!("connection {conn} from {peer}");
                spawn_connection(conn, stream, tx.clone(), (ingress.clone(), who, user));
            }
            Some(ev) = rx.recv() => {
                handle_event(ev, &mut manager, &mut writers);
                flush(&mut manager, &mut writers);
                memory.after(manager.cdo_count());
            }
            // Work left (a group's members to ticket): a slice once the writers have sent
            // what is flushed, between the other inputs.
            () = tokio::task::yield_now(), if manager.has_work() => {
                manager.work(Instant::now());
                flush(&mut manager, &mut writers);
            }
        }
    }
    for a in acceptors {
        a.abort();
    }
    say_bye(&mut manager, &mut writers).await;
    // The workflow ends here: the kept CDOs' files go (or persist).
    match writers.kept.take() {
        Some(kept) => kept.finish(manager.kept_files()).await,
        None => Ok(()),
    }
}

/// Longest a stopping PM waits for its BYEs to be written.
const BYE_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The PM stops: every app hears BYE, so that its client does not wait for a manager to
/// take over (`Manager::closing`); written within [`BYE_LIMIT`].
async fn say_bye(manager: &mut Manager, writers: &mut Writers) {
    manager.closing();
    flush(manager, writers);
    let by = tokio::time::Instant::now() + BYE_LIMIT;
    for w in writers.by_conn.values() {
        let _ = w.tx.send(None);
    }
    // A writer whose task ended (its peer gone) writes nothing more: not waited for.
    let unwritten = |w: &Writer| w.queued.bytes() > 0 && !w.tx.is_closed();
    while writers.by_conn.values().any(unwritten) && tokio::time::Instant::now() < by {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Hands one event of a connection task (or of the metrics endpoint or a fabric reporter)
/// to the manager.
fn handle_event(ev: Event, manager: &mut Manager, writers: &mut Writers) {
    let now = Instant::now();
    match ev {
        Event::Connected(conn, w, peer) => {
            writers.by_conn.insert(conn, w);
            let mut nonce = [0u8; 32];
            if getrandom::fill(&mut nonce).is_err() {
                tracing::error!("no randomness for a JOIN challenge; closing {conn}");
                writers.by_conn.remove(&conn);
                return;
            }
            manager.connected_from(now, conn, nonce, peer);
        }
        // A connection the manager let go (cut off, closed) is heard no more.
        Event::Messages(conn, _, _) if !writers.by_conn.contains_key(&conn) => {}
        Event::Messages(conn, msgs, _permit) => {
            for m in msgs {
                if matches!(
                    m,
                    ToPm::Query {
                        query: Query::Status,
                        ..
                    }
                ) {
                    manager.set_memory_bytes(resident_bytes());
                }
                manager.handle(now, conn, m);
            }
        }
        Event::Join(conn, msg, identity, joined) => {
            manager.handle_checked(now, conn, msg, identity);
            let _ = joined.send(manager.is_joined(conn));
        }
        Event::Gone(conn) => {
            writers.by_conn.remove(&conn);
            manager.disconnected(now, conn);
        }
        Event::Fabric(change) => manager.fabric_changed(now, change),
        Event::Topology(distances, links) => manager.topology_changed(now, distances, &links),
        Event::Metrics(ask) => {
            manager.set_memory_bytes(resident_bytes());
            let _ = ask.send(snapshot(now, manager));
        }
        Event::KeptChecked(id, outcome) => manager.kept_checked(
            now,
            id,
            outcome.as_ref().map(|_| ()).map_err(String::as_str),
        ),
    }
}

/// The figures a metrics scrape renders.
fn snapshot(now: Instant, manager: &mut Manager) -> metrics::Snapshot {
    let View::Status(status) = manager.view(now, Query::Status) else {
        unreachable!("a status query is answered with a status")
    };
    let View::Transfers(transfers) = manager.view(now, Query::Transfers) else {
        unreachable!("a transfers query is answered with transfers")
    };
    let View::Fabric(fabric) = manager.view(now, Query::Fabric) else {
        unreachable!("a fabric query is answered with the fabric")
    };
    metrics::Snapshot {
        status,
        transfers,
        fabric,
    }
}
