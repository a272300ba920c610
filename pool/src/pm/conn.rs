//! One connection's IO: reading frames within the ingress budget, the JOIN's first frame
//! and who its sender is, and writing what the manager sends, cutting off a peer that stops
//! reading. How long a connection may take to join and how many may wait is the manager's
//! (see [`crate::admission`]): the driver closes what the manager closes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use pool_core::HashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::identity::{PeerUser, identity};
use super::listen::Stream;
use super::{
    CONN_INGRESS, CredentialCheck, Event, MAX_JOIN_FRAME, PmConfig, READ_CHUNK, SMALL_READ,
};
use crate::admission::{Peer, Throttle};
use crate::proto::{FromPm, ToPm};
use crate::{ConnId, Manager, proto, ring};

/// Where the manager's output goes: the connections' writer tasks, with what each has
/// still to write; the directory of kept CDOs' files, if the PM keeps any.
pub(super) struct Writers {
    pub(super) max_queued: usize,
    pub(super) by_conn: HashMap<ConnId, Writer>,
    pub(super) kept: Option<super::kept::KeptDir>,
    /// The manager's own inbox: what checks made off its thread report back.
    pub(super) events: mpsc::UnboundedSender<Event>,
    /// Each connection's messages of the round being flushed (empty between rounds).
    pub(super) staged: HashMap<ConnId, Vec<FromPm>>,
    /// Emptied lists of past rounds, for the next round's connections: a round
    /// allocates nothing but its frames.
    pub(super) spare: Vec<Vec<FromPm>>,
}

/// Most emptied lists kept for the next rounds ...
const SPARE_LISTS: usize = 64;
/// ... each with room for at most this many messages (a round's burst to one
/// connection may be far longer: its list is dropped).
const SPARE_ROOM: usize = 256;

/// Bytes a round's buffer of frames starts with per message: an answer, a ticket or an
/// event of a CDO with a few attributes fits ...
const FRAME_ROOM_PER_MESSAGE: usize = 128;
/// ... up to this much: a round of thousands of answers packs them into a few bytes
/// each, and a buffer made for the worst case would hold (and fragment) megabytes the
/// frames never use; a larger round grows it.
const FRAME_ROOM_MAX: usize = 16 << 10;

/// Most messages' room a connection's reader makes for its next batch ([`serve_joined`]):
/// at most 72 bytes each, 72 KiB.
const BATCH_ROOM: usize = 1024;

/// One connection's writer task: frames to write (`None`: close) and the bytes queued;
/// with the handles of its reader and writer tasks, to cut it off.
pub(super) struct Writer {
    pub(super) tx: mpsc::UnboundedSender<Option<Vec<u8>>>,
    pub(super) queued: Arc<Backlog>,
    pub(super) tasks: [tokio::task::AbortHandle; 2],
}

/// Most bytes queued for an observer before its reader stops reading what it sends (an
/// observer that asks without reading the answers is slowed to the pace it reads at; the
/// rest of the pool is not).
const PAUSE_READING_AT: usize = 4 << 20;

/// What one connection has still to be written, and a wake-up for its reader when that
/// falls back under [`PAUSE_READING_AT`].
#[derive(Default)]
pub(super) struct Backlog {
    bytes: std::sync::atomic::AtomicUsize,
    drained: tokio::sync::Notify,
}

impl Backlog {
    /// Bytes queued now.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// `n` bytes were written: wakes a paused reader once under the mark.
    fn written(&self, n: usize) {
        let left = self.bytes.fetch_sub(n, Ordering::Relaxed).saturating_sub(n);
        if left <= PAUSE_READING_AT {
            self.drained.notify_waiters();
        }
    }

    /// Returns once at most [`PAUSE_READING_AT`] bytes are queued (cancel-safe: dropping
    /// the future loses nothing).
    async fn room(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.bytes() <= PAUSE_READING_AT {
                return;
            }
            drained.await;
        }
    }
}

impl Writer {
    /// Closes the connection once what is queued is written, and stops reading from it
    /// now: the manager is done with it (what it sent unread is dropped).
    pub(super) fn close(self) {
        let _ = self.tx.send(None);
        self.tasks[1].abort();
    }

    /// Closes the connection now, dropping what is queued and what it sent unread (its
    /// peer does not read: waiting for the queue to drain would never end).
    pub(super) fn cut_off(self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Keeps `batch`, emptied, for a connection of a later round (unless enough are kept, or
/// it grew too long to keep).
fn keep_spare(spare: &mut Vec<Vec<FromPm>>, mut batch: Vec<FromPm>) {
    batch.clear();
    if spare.len() < SPARE_LISTS && batch.capacity() <= SPARE_ROOM {
        spare.push(batch);
    }
}

/// Sends the manager's output, one frame per connection per round. A connection whose
/// unwritten output would pass the limit is closed and the manager told it is gone (its
/// subscribers hear why), which may produce more output: sent in the next round.
pub(super) fn flush(manager: &mut Manager, writers: &mut Writers) {
    loop {
        let (staged, spare) = (&mut writers.staged, &mut writers.spare);
        while let Some((conn, msg)) = manager.poll_output() {
            staged
                .entry(conn)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push(msg);
        }
        let mut stuck = Vec::new();
        for (conn, mut batch) in staged.drain() {
            let Some(w) = writers.by_conn.get(&conn) else {
                keep_spare(spare, batch);
                continue;
            };
            // The round's frames for the connection in one buffer, encoded in place, with
            // room for the usual messages at once (growing from nothing reallocated the
            // buffer several times a round).
            proto::pack_done(&mut batch);
            let room = (FRAME_ROOM_PER_MESSAGE * batch.len()).min(FRAME_ROOM_MAX);
            let mut frames = Vec::with_capacity(room);
            let encoded = proto::encode_split_into(&batch, &mut frames);
            keep_spare(spare, batch);
            if let Err(e) = encoded {
                tracing::error!("encoding a reply to {conn}: {e}");
                continue;
            }
            let bytes = frames.len();
            // Held exactly: what would pass the limit is not queued at all. (Only this
            // thread adds; the writer only takes away.)
            let queued = w.queued.bytes() + bytes;
            if queued > writers.max_queued {
                stuck.push((conn, queued));
                continue;
            }
            w.queued.bytes.fetch_add(bytes, Ordering::Relaxed);
            let _ = w.tx.send(Some(frames));
        }
        for conn in manager.take_closing() {
            if let Some(w) = writers.by_conn.remove(&conn) {
                w.close();
            }
        }
        // Their events passed their bounds: what they still had to read is dropped.
        for conn in manager.take_cut() {
            if let Some(w) = writers.by_conn.remove(&conn) {
                w.cut_off();
            }
        }
        if let Some(kept) = &mut writers.kept {
            kept.discard(manager.take_discarded());
            let events = writers.events.clone();
            kept.check(manager.take_kept_checks(), move |id, outcome| {
                let _ = events.send(Event::KeptChecked(id, outcome));
            });
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
                Instant::now(),
                conn,
                "it stopped reading from the pool manager (its output queue overflowed)",
            );
        }
    }
}

/// A batch's shares of its connection's ingress budget and the PM's, given back when the
/// batch is handled (dropped).
pub(super) struct Held {
    _own: tokio::sync::OwnedSemaphorePermit,
    _all: tokio::sync::OwnedSemaphorePermit,
}

/// What connection readers share: the credential check, the ingress budget in bytes, and
/// the rate limit of warnings about closed connections.
#[derive(Clone)]
pub(super) struct Ingress {
    pub(super) check: Option<CredentialCheck>,
    pub(super) budget: Arc<tokio::sync::Semaphore>,
    /// The budget's size in bytes.
    pub(super) budget_size: usize,
    pub(super) refusals: Arc<std::sync::Mutex<Throttle>>,
    /// The shared-memory rings the PM may still grant.
    pub(super) rings: ring::setup::Slots,
}

impl Ingress {
    /// Logs why a connection was refused or closed, at most ten lines a second (a flood of
    /// bad connections is not a flood of log lines); the next line says how many were held
    /// back.
    pub(super) fn refused(&self, why: impl FnOnce() -> String) {
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

/// Boxed halves of a connection's transport.
type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
);

pub(super) fn spawn_connection(
    conn: ConnId,
    stream: Stream,
    events: mpsc::UnboundedSender<Event>,
    (ingress, peer, user): (Ingress, Peer, PeerUser),
) {
    let (tx, mut wrx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let queued = Arc::new(Backlog::default());
    let left = queued.clone();
    let backlog = queued.clone();
    // The writer's half comes from the reader once it knows the transport.
    let (half, got_half) = oneshot::channel::<Box<dyn AsyncWrite + Unpin + Send>>();
    let writer = tokio::spawn(async move {
        let Ok(mut write) = got_half.await else {
            return;
        };
        while let Some(Some(frame)) = wrx.recv().await {
            if let Err(e) = write.write_all(&frame).await {
                // A peer gone is the usual end; a broken shared segment is the app's doing.
                if e.kind() == std::io::ErrorKind::InvalidData {
                    tracing::warn!("connection {conn}: {e}");
                } else {
                    tracing::debug!("connection {conn}: writing failed ({e})");
                }
                break;
            }
            left.written(frame.len());
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
        let transport = match stream {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                Ok((
                    Box::new(r) as Box<dyn AsyncRead + Unpin + Send>,
                    Box::new(w) as _,
                ))
            }
            Stream::Unix { stream, rings } => unix_transport(conn, stream, rings, &ingress).await,
        };
        let ended = match transport {
            Ok((mut read, write)) => {
                if half.send(write).is_err() {
                    return;
                }
                let mut buf = Vec::new();
                let admitted = admit(conn, (&mut read, user), &mut buf, &events, &ingress).await;
                match admitted {
                    // Refused: the manager said why in its log and closes the connection.
                    Ok(None) => return,
                    Ok(Some(role)) => {
                        // Only an observer waits for its answers before it asks again: an
                        // app's reader may itself be writing reports, so it is never paused
                        // (its queue is bounded by the cut-off instead).
                        let paced = (role == proto::Role::Observer).then_some(&*backlog);
                        serve_joined(conn, &mut read, buf, (&events, paced), &ingress).await
                    }
                    Err(why) => Err(why),
                }
            }
            Err(why) => Err(why),
        };
        match ended {
            Ok(()) => tracing::debug!("connection {conn} closed"),
            Err(why) => ingress.refused(|| format!("connection {conn} {why}; closing it")),
        }
        let _ = events.send(Event::Gone(conn));
    });
    let tasks = [writer.abort_handle(), reader.abort_handle()];
    let _ = connected.send(Event::Connected(conn, Writer { tx, queued, tasks }, peer));
    let _ = start.send(());
}

/// A Unix connection's transport: shared-memory rings when it came through the rings'
/// socket (`rings`) and the PM grants them (see [`crate::ring`]), else the socket.
///
/// # Errors
/// Why the connection is closed, for the log: the socket's errors.
async fn unix_transport(
    conn: ConnId,
    stream: tokio::net::UnixStream,
    rings: bool,
    ingress: &Ingress,
) -> Result<Halves, String> {
    if rings {
        let granted = ring::setup::answer(&stream, &ingress.rings)
            .await
            .map_err(|e| format!("could not be answered on the rings' socket ({e})"))?;
        if let Some((map, bells)) = granted {
            let (r, w) = ring::halves(map, bells, ring::Side::Pm, stream)
                .map_err(|e| format!("got no shared-memory connection ({e})"))?;
            tracing::debug!("connection {conn} moved to shared-memory rings");
            return Ok((Box::new(r), Box::new(w)));
        }
    }
    let (r, w) = stream.into_split();
    Ok((Box::new(r), Box::new(w)))
}

/// Reads more of a connection into `buf`, at most `room` bytes.
///
/// # Errors
/// What went wrong (end of stream or the OS error), for the log.
pub(super) async fn read_some(
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

/// Admission: the first frame, small, must be a JOIN the manager accepts (within the
/// manager's deadline: it closes the connection, and this task with it, when that passes).
/// Leaves in `buf` what the peer sent after it; returns the role it joined in, or `None`
/// if the manager refused it (and said why in its log).
///
/// # Errors
/// Why the connection is closed, for the log: a bad or too large first frame, the read's
/// error.
pub(super) async fn admit(
    conn: ConnId,
    (read, user): (&mut (dyn AsyncRead + Unpin + Send), PeerUser),
    buf: &mut Vec<u8>,
    events: &mpsc::UnboundedSender<Event>,
    ingress: &Ingress,
) -> Result<Option<proto::Role>, String> {
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
        read_some(read, buf, room)
            .await
            .map_err(|e| format!("{e} before joining"))?;
    };
    let join = proto::decode_join(&buf[proto::HEADER..proto::HEADER + len])
        .map_err(|e| format!("sent a bad first frame ({e})"))?;
    buf.drain(..proto::HEADER + len);
    let role = join.role;
    let credential = join.credential.clone();
    let check = ingress.check.clone();
    // Both may block (a PMIx round trip, a read of /proc): off the runtime's threads.
    let who = tokio::task::spawn_blocking(move || {
        let verdict = credential.zip(check).map(|(cred, check)| check(&cred));
        identity(safefs::euid(), user.resolve(), verdict)
    })
    .await
    .map_err(|e| format!("could not be identified ({e})"))?;
    let (answer, joined) = oneshot::channel();
    events
        .send(Event::Join(conn, ToPm::Join(join), who, answer))
        .map_err(|_| "outlived the pool manager".to_string())?;
    match joined.await {
        Ok(true) => Ok(Some(role)),
        Ok(false) => Ok(None),
        Err(_) => Err("outlived the pool manager".into()),
    }
}

/// Reads a joined connection's frames and hands them to the actor in order, each batch
/// holding its bytes' share of the ingress `budget` until handled: past the budget the
/// reader waits instead of reading on.
///
/// # Errors
/// Why the connection ended abnormally (a bad frame, the OS error), for the log.
pub(super) async fn serve_joined(
    conn: ConnId,
    read: &mut (dyn AsyncRead + Unpin + Send),
    mut buf: Vec<u8>,
    (events, paced): (&mpsc::UnboundedSender<Event>, Option<&Backlog>),
    ingress: &Ingress,
) -> Result<(), String> {
    let mut want = SMALL_READ;
    let own = Arc::new(tokio::sync::Semaphore::new(CONN_INGRESS));
    let gone = |_| "outlived the pool manager".to_string();
    // Room for as many messages as the last batch had: a batch of hundreds grown from
    // nothing by doubling costs the allocator several large requests, each sweeping its
    // small free chunks.
    let mut room = 0;
    loop {
        let before = buf.len();
        let mut msgs = Vec::with_capacity(room);
        proto::drain_frames::<ToPm>(&mut buf, |m| msgs.push(m))
            .map_err(|e| format!("sent a bad frame ({e})"))?;
        if !msgs.is_empty() {
            room = msgs.len().min(BATCH_ROOM);
        }
        let wire = before - buf.len();
        match paced {
            // An observer's questions go one at a time, each holding the connection's
            // whole share until answered, and only while its unread answers stay under
            // the mark: a page may be hundreds of KiB, so what it asked is what it gets
            // queued, not a batch of thousands of pages at once.
            Some(backlog) => {
                let each = wire / msgs.len().max(1);
                for m in msgs {
                    backlog.room().await;
                    let held = hold((&own, CONN_INGRESS), ingress, each)
                        .await
                        .map_err(gone)?;
                    if events.send(Event::Messages(conn, vec![m], held)).is_err() {
                        return Err("outlived the pool manager".into());
                    }
                }
            }
            None if !msgs.is_empty() => {
                // What the batch holds: its wire bytes and the decoded messages; first of
                // this connection's share, then of the PM's.
                let bytes = wire + msgs.len() * std::mem::size_of::<ToPm>();
                let held = hold((&own, bytes), ingress, bytes).await.map_err(gone)?;
                if events.send(Event::Messages(conn, msgs, held)).is_err() {
                    return Err("outlived the pool manager".into());
                }
            }
            None => {}
        }
        if buf.is_empty() && want == SMALL_READ && buf.capacity() > SMALL_READ {
            // Quiet: the memory goes back until the app speaks again.
            buf = Vec::new();
        }
        // An observer that does not read what it is sent is not read from either.
        if let Some(backlog) = paced {
            backlog.room().await;
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

/// Waits for `own_bytes` of the connection's share (`own`) and `bytes` of the PM's
/// budget, each at least 1 and at most the whole.
async fn hold(
    (own, own_bytes): (&Arc<tokio::sync::Semaphore>, usize),
    ingress: &Ingress,
    bytes: usize,
) -> Result<Held, tokio::sync::AcquireError> {
    let permits = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let own = Arc::clone(own)
        .acquire_many_owned(permits(own_bytes.clamp(1, CONN_INGRESS)))
        .await?;
    let all = Arc::clone(&ingress.budget)
        .acquire_many_owned(permits(bytes.clamp(1, ingress.budget_size)))
        .await?;
    Ok(Held {
        _own: own,
        _all: all,
    })
}

impl Ingress {
    /// The bounds of `config`; the PM's shared segments are named after `label`.
    pub(super) fn new(config: &PmConfig, label: &str) -> Ingress {
        // One batch (a partial frame plus one read) must always fit.
        let budget_size = config
            .max_ingress
            .max(proto::MAX_FRAME + proto::HEADER + READ_CHUNK);
        Ingress {
            check: config.credentials.clone(),
            budget: Arc::new(tokio::sync::Semaphore::new(budget_size)),
            budget_size,
            refusals: Arc::new(std::sync::Mutex::new(Throttle::new(
                std::time::Duration::from_secs(1),
                10,
            ))),
            rings: ring::setup::Slots::new(config.max_rings, label),
        }
    }
}
