//! The client's IO: connecting and the JOIN handshake, then one task per client for its
//! control connection. Its writer half writes what the socket did not take when a caller
//! sent it (see `outbox`); its reader half hands each message to the protocol's core
//! ([`pool_core::client::ClientCore`]) and does what it says (see `Shared::with_core`).
//! The task itself, which rejoins a manager that takes over when the connection ends, is
//! `reclaim`'s.

use crate::CallError;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::drains::Watch;
use super::outbox::WriteIo;
use super::{ClientError, Result, Shared};
use crate::bootstrap::{ControlAddr, PmInfo};
use crate::proto::{self, AppId, FromPm, Op, ToPm};
use crate::ring::inlet::{Inlet, RingIn, Taken};

type Reader = Box<dyn AsyncRead + Unpin + Send>;

/// How frames come: a socket's bytes (with its [`Watch`]), or a shared-memory ring whose
/// reading end the threads waiting for answers share ([`crate::ring::inlet`]).
enum Io {
    Stream(Reader, Arc<Watch>),
    Ring(RingIn),
}

impl Io {
    /// A socket's reading half (of the socket `S`), watched by its descriptor, which is
    /// open as long as the half.
    fn socket<R, S>(read: R) -> Io
    where
        R: AsyncRead + AsRef<S> + Unpin + Send + 'static,
        S: std::os::fd::AsRawFd,
    {
        let watch = Watch::new(read.as_ref().as_raw_fd());
        Io::Stream(Box::new(read), watch)
    }
}

/// Longest wait for one PM endpoint to accept a connection.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

pub(crate) use pool_core::client::Piece;

/// Reads frames off the control connection.
pub(crate) struct FrameReader {
    io: Io,
    /// A socket's bytes not framed yet (a ring's are its inlet's).
    buf: Vec<u8>,
    inbox: VecDeque<FromPm>,
    /// The connection ended: nothing comes after the inbox.
    ended: bool,
    /// A socket's last drain not noted yet: the instant of a read that took less than it
    /// had room for, so everything written before it is in the buffer or the inbox.
    drained: Option<Instant>,
}

impl FrameReader {
    fn new(io: Io) -> FrameReader {
        FrameReader {
            io,
            buf: Vec::new(),
            inbox: VecDeque::new(),
            ended: false,
            drained: None,
        }
    }

    /// The next message; `None` when the PM closed the connection.
    async fn next(&mut self) -> Result<Option<FromPm>> {
        loop {
            if let Some(m) = self.inbox.pop_front() {
                return Ok(Some(m));
            }
            if self.ended {
                return Ok(None);
            }
            let inbox = &mut self.inbox;
            match &mut self.io {
                Io::Stream(io, watch) => {
                    // Straight into the buffer's spare room.
                    self.buf.reserve(64 * 1024);
                    let room = self.buf.capacity() - self.buf.len();
                    let (n, at) = timed_read(io, &mut self.buf, watch).await?;
                    if n == 0 {
                        self.ended = true;
                        continue;
                    }
                    if n < room {
                        self.drained = Some(at);
                    }
                    proto::drain_frames::<FromPm>(&mut self.buf, |m| inbox.push_back(m))?;
                }
                Io::Ring(ring) => {
                    let inlet = Arc::clone(ring.inlet());
                    let take = |inbox: &mut VecDeque<FromPm>| -> Result<usize> {
                        let mut taken = inlet.lock();
                        let n = inlet.take(&mut taken)?;
                        proto::drain_frames::<FromPm>(&mut taken.buf, |m| inbox.push_back(m))?;
                        Ok(n)
                    };
                    // Ended: what the ring still held was written before; then the end.
                    if take(inbox)? == 0 && !ring.wait(false).await? {
                        take(inbox)?;
                        self.ended = true;
                    }
                }
            }
        }
    }

    /// The next message already read, if any: never waits.
    fn next_read(&mut self) -> Option<FromPm> {
        self.inbox.pop_front()
    }

    /// The next message within `limit`, which must exist.
    pub(crate) async fn expect(&mut self, op: Op, limit: Duration) -> Result<FromPm> {
        match tokio::time::timeout(limit, self.next()).await {
            Ok(Ok(Some(m))) => Ok(m),
            Ok(Ok(None)) => Err(ClientError::Call(CallError::Closed)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClientError::Call(CallError::Timeout(op))),
        }
    }
}

/// A connected, not yet joined control connection.
pub(crate) struct Connected {
    pub(crate) reader: FrameReader,
    pub(crate) writer: WriteIo,
}

/// How a client reaches its PM: the interfaces whose networks it keeps off, and whether
/// a connection to a PM on this host asks for shared-memory rings ([`crate::ring`]).
#[derive(Clone, Default)]
pub(crate) struct Route {
    pub(crate) exclude: Vec<String>,
    pub(crate) rings: bool,
}

/// Connects to the first of a PM's `endpoints` that accepts (those of one shard of the
/// PM info), skipping TCP endpoints on the networks of this host's interfaces that
/// `route` keeps off.
///
/// # Errors
/// [`ClientError::Unreachable`] listing each endpoint's error.
pub(crate) async fn connect(
    endpoints: &[ControlAddr],
    limit: Duration,
    route: &Route,
) -> Result<Connected> {
    let exclude = &route.exclude;
    let mut errors = Vec::new();
    // An endpoint on a network this host cannot reach must not eat the whole timeout.
    let per_endpoint = limit.min(CONNECT_LIMIT);
    let kept_off: Vec<_> = exclude
        .iter()
        .flat_map(|name| {
            inventory::netif::networks_of(name)
                .into_iter()
                .map(move |n| (name, n.trunc()))
        })
        .collect();
    for addr in endpoints {
        if let ControlAddr::Tcp(a) = addr
            && let Some((name, net)) = kept_off.iter().find(|(_, n)| n.contains(&a.ip()))
        {
            errors.push(format!(
                "{addr}: not tried, on {name}'s network {net}, which MSTRO_OFI_IFACE_EXCLUDE keeps the pool off"
            ));
            continue;
        }
        let (r, w) = match tokio::time::timeout(per_endpoint, open(addr, route.rings)).await {
            Ok(Ok(halves)) => halves,
            Ok(Err(e)) => {
                errors.push(format!("{addr}: {e}"));
                continue;
            }
            Err(_) => {
                errors.push(format!("{addr}: no answer in {per_endpoint:?}"));
                continue;
            }
        };
        return Ok(Connected {
            reader: FrameReader::new(r),
            writer: w,
        });
    }
    Err(ClientError::Unreachable(errors.join("; ")))
}

/// Opens a control connection to `addr`, split into its halves; on a Unix socket, over
/// shared-memory rings when `rings` and the PM grants them.
async fn open(addr: &ControlAddr, rings: bool) -> std::io::Result<(Io, WriteIo)> {
    Ok(match addr {
        ControlAddr::Tcp(a) => {
            let stream = tokio::net::TcpStream::connect(a).await?;
            let _ = stream.set_nodelay(true);
            crate::liveness::probe(&stream);
            let (r, w) = stream.into_split();
            (Io::socket::<_, tokio::net::TcpStream>(r), WriteIo::Tcp(w))
        }
        ControlAddr::Unix(path) => {
            if rings && let Some(halves) = open_rings(path).await? {
                return Ok(halves);
            }
            let (r, w) = tokio::net::UnixStream::connect(path).await?.into_split();
            (Io::socket::<_, tokio::net::UnixStream>(r), WriteIo::Unix(w))
        }
    })
}

/// A connection through the rings' socket beside the PM's Unix socket `path` (the PM
/// answers first): over shared-memory rings if it grants them, else on that socket;
/// `None` when there is no such socket or the answer cannot be used (the caller connects
/// to `path` itself).
///
/// # Errors
/// Registering the rings with the runtime.
async fn open_rings(path: &std::path::Path) -> std::io::Result<Option<(Io, WriteIo)>> {
    let Ok(stream) =
        tokio::net::UnixStream::connect(path.with_file_name(crate::ring::SOCKET_NAME)).await
    else {
        return Ok(None);
    };
    Ok(match crate::ring::setup::granted(&stream).await {
        Ok(Some((map, bells))) => {
            let (r, w) = crate::ring::halves(map, bells, crate::ring::Side::App, stream)?;
            Some((Io::Ring(r.into_inlet()?), WriteIo::Ring(w)))
        }
        // Refused: this connection stays on the socket.
        Ok(None) => {
            let (r, w) = stream.into_split();
            Some((Io::socket::<_, tokio::net::UnixStream>(r), WriteIo::Unix(w)))
        }
        Err(e) => {
            tracing::debug!("pool client: no shared-memory connection ({e}); the socket");
            None
        }
    })
}

/// Joins shard 0 of the pool of `info` with `join` over `c` (connected to that shard),
/// proving knowledge of the workflow secret: runs the handshake of a new protocol core
/// ([`pool_core::client::Sharded::connect`]), writing what it sends, handing it each
/// message of the PM and waking it at its deadline (`limit` from now; the calls' limit
/// too). Returns the core, joined, with the app's id and the PM's instance.
///
/// # Errors
/// The PM's refusal; [`CallError::Timeout`](crate::CallError::Timeout) of `join`; connection errors.
pub(crate) async fn handshake(
    c: &mut Connected,
    join: proto::Join,
    info: &PmInfo,
    limit: Duration,
) -> Result<(super::Core, AppId, u64)> {
    let mut core = super::Core::connect(Instant::now(), join, &info.secret, limit, info.shards());
    // Shard 0's connection is this one.
    let _ = core.poll_connect();
    loop {
        let out: Vec<ToPm> =
            std::iter::from_fn(|| core.poll_transmit().map(|(_, t)| t.msg)).collect();
        if !out.is_empty() {
            c.writer.write_all(&proto::encode(&out)?).await?;
        }
        if let Some(joined) = core.joined() {
            let (app, pool) = joined.clone()?;
            return Ok((core, app, pool));
        }
        let next = c.reader.next();
        let got = match core.poll_timeout() {
            Some(at) => tokio::time::timeout_at(at.into(), next).await.ok(),
            None => Some(next.await),
        };
        match got {
            None => core.handle_timeout(Instant::now()),
            Some(Ok(Some(m))) => core.handle(Instant::now(), 0, m),
            Some(Ok(None)) => core.close(0),
            Some(Err(e)) => return Err(e),
        }
    }
}

/// Hands the core what the manager of shard `shard` sends until the connection ends.
pub(crate) async fn read_loop(r: &mut FrameReader, shared: &Arc<Shared>, shard: usize) {
    // What the handshake read beyond its answer first.
    deliver(shared, shard, r.inbox.drain(..));
    let ended = match &mut r.io {
        Io::Ring(ring) if !r.ended => ring_loop(ring, shared, shard).await,
        _ => stream_loop(r, shared, shard).await,
    };
    if let Err(e) = ended {
        tracing::warn!("pool client: {e}; closing the connection");
    }
}

/// Reads into `buf`'s spare room: how many bytes, and the instant of the read that got
/// them (every byte written before it was there to read). `watch` says the reader is
/// parked while the read waits (everything read before is handled: the caller reads only
/// once its inbox is empty).
async fn timed_read(
    io: &mut Reader,
    buf: &mut Vec<u8>,
    watch: &Watch,
) -> std::io::Result<(usize, Instant)> {
    let mut read = std::pin::pin!(io.read_buf(buf));
    let mut at = Instant::now();
    let n = std::future::poll_fn(|cx| {
        watch.park(false);
        at = Instant::now();
        let polled = read.as_mut().poll(cx);
        watch.park(polled.is_pending());
        polled
    })
    .await?;
    Ok((n, at))
}

/// [`read_loop`] of a socket: each drain noted once what it read is handled, the socket
/// watched meanwhile ([`super::drains`]).
async fn stream_loop(r: &mut FrameReader, shared: &Arc<Shared>, shard: usize) -> Result<()> {
    let _watched = match &r.io {
        Io::Stream(_, watch) => Some(shared.watch(shard, watch)),
        Io::Ring(_) => None,
    };
    while let Some(m) = r.next().await? {
        let rest = std::iter::from_fn(|| r.next_read());
        deliver(shared, shard, std::iter::once(m).chain(rest));
        if let Some(at) = r.drained.take() {
            shared.drains.note(shard, at);
        }
    }
    Ok(())
}

/// [`read_loop`] of a ring, whose reading end the threads waiting for an answer share
/// meanwhile ([`Shared::read_rings`]).
async fn ring_loop(ring: &mut RingIn, shared: &Arc<Shared>, shard: usize) -> Result<()> {
    let _shared = shared.share_inlet(shard, ring.inlet());
    loop {
        let busy = match ring.inlet().try_lock() {
            Some(mut taken) => {
                if take_and_deliver(ring.inlet(), &mut taken, shared, shard)? > 0 {
                    continue;
                }
                false
            }
            None => true,
        };
        if !ring.wait(busy).await? {
            // Ended: what the ring still holds was written before.
            let mut taken = ring.inlet().lock();
            take_and_deliver(ring.inlet(), &mut taken, shared, shard)?;
            return Ok(());
        }
    }
}

/// Takes what the ring of `inlet` holds (its lock held as `taken`) and hands the whole
/// frames to the core, then notes the drain ([`super::drains`]); the number of bytes
/// taken.
///
/// # Errors
/// The PM's position in the ring is out of range; a malformed frame.
pub(crate) fn take_and_deliver(
    inlet: &Inlet,
    taken: &mut Taken,
    shared: &Arc<Shared>,
    shard: usize,
) -> Result<usize> {
    let at = Instant::now();
    let n = inlet.take(taken)?;
    let mut got = taken.take_messages();
    let framed = proto::drain_frames::<FromPm>(&mut taken.buf, |m| got.push(m));
    // The whole frames before a bad one are the PM's: handed on before the error.
    deliver(shared, shard, got.drain(..));
    taken.keep_messages(got);
    framed?;
    shared.drains.note(shard, at);
    Ok(n)
}

/// Hands `msgs`, what one read brought, to the core as a burst: the core handles it in
/// one step (one lock, one write of what it queues), and the copies its tickets ask for
/// are made together at its end. Fails only for a message the core answers when the
/// connection is gone.
fn deliver(shared: &Arc<Shared>, shard: usize, msgs: impl IntoIterator<Item = FromPm>) {
    let mut msgs = msgs.into_iter().peekable();
    if msgs.peek().is_none() {
        return;
    }
    let burst = super::transport::burst::TICKETS;
    super::transport::burst::during(shared, burst, || {
        let now = Instant::now();
        let _ = shared.with_core(|c| {
            msgs.for_each(|m| c.handle(now, shard, m));
            Ok(())
        });
    });
}

/// The connection to shard `shard` ended for good: every call waiting there fails, every
/// subscription hears it (shard 0's: the app is out of the pool, every shard's core
/// closes).
pub(crate) fn close(shared: &Arc<Shared>, shard: usize) {
    let _ = shared.with_core(|c| {
        c.close(shard);
        Ok(())
    });
}
