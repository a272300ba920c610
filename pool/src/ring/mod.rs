//! Control connections through shared memory: the frames between the pool manager and an
//! app on its host go through two rings in a segment the PM creates, one per direction,
//! instead of through the Unix socket. Each ring has one writer and one reader; neither
//! makes a system call while the other is awake: the writer copies a frame in and moves
//! its position, the reader copies it out and moves its own. Only a reader that found its
//! ring empty and went to sleep is woken, by an `eventfd` the writer rings (a writer that
//! found its ring full likewise). The wire format is the same; the rings are a transport
//! of its bytes ([`RingReader`] is an `AsyncRead`, [`RingWriter`] an `AsyncWrite`).
//!
//! The socket stays open beside them: its end is how each side learns that the other is
//! gone (a process that dies closes it), and it carries the setup ([`setup`]): the app
//! asks with [`REQUEST`] before its JOIN, the PM answers with the segment and the
//! `eventfd`s, passed as descriptors (`SCM_RIGHTS`), or says to stay on the socket.
//!
//! The PM trusts nothing of the segment: an app may write anything there. Its positions
//! are checked at each read (a reader's own position is private; the writer's must stay
//! within one ring of it), the bytes go through the frame decoder like a socket's, and
//! the segment is sealed against shrinking (an app cannot make the PM's accesses fault).

pub(crate) mod inlet;
pub(crate) mod setup;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// The rings' socket's name in the PM's socket directory (beside its Unix socket, which
/// the PM info names).
pub(crate) const SOCKET_NAME: &str = "rings.sock";

/// Bytes of each ring: the frames of a burst of a few hundred offers or events fit
/// without the writer waiting for room.
pub(crate) const CAPACITY: usize = 128 << 10;

/// Bytes before the rings: the two rings' control blocks, on a page of their own.
const HEADER: usize = 4096;

/// The segment's size: the header and both rings.
pub(crate) const SEGMENT: usize = HEADER + 2 * CAPACITY;

/// The ring an app writes and the PM reads.
pub(crate) const TO_PM: usize = 0;
/// The ring the PM writes and an app reads.
pub(crate) const TO_APP: usize = 1;

/// A value alone on its cache line (the writer's and the reader's positions would
/// otherwise bounce one line between two cores at every frame).
#[repr(C, align(64))]
struct Line<T>(T);

/// One ring's positions and sleep flags, in the segment's header.
#[repr(C)]
struct Control {
    /// Bytes ever written (the writer's).
    head: Line<AtomicU64>,
    /// Bytes ever read (the reader's).
    tail: Line<AtomicU64>,
    /// The reader found the ring empty and waits for its doorbell.
    sleeping: Line<AtomicU32>,
    /// The writer found the ring full and waits for room.
    waiting: Line<AtomicU32>,
}

const _: () = assert!(2 * std::mem::size_of::<Control>() <= HEADER);

/// The segment mapped into this process, unmapped when both halves are gone.
pub(crate) struct Mapping {
    base: std::ptr::NonNull<u8>,
    /// Held while mapped (the PM's count of its rings, see [`setup::Slots`]).
    _slot: Option<setup::Slot>,
}

// SAFETY: the mapping is plain shared memory; every access to it goes through atomics
// (the control blocks) or copies of byte ranges one side owns at the time.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `SEGMENT` bytes of `fd` shared, readable and writable.
    ///
    /// # Errors
    /// The OS error of `mmap`.
    fn map(fd: &OwnedFd, slot: Option<setup::Slot>) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file at least SEGMENT bytes long (the caller
        // checked or made its size, and its seals keep it from shrinking).
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SEGMENT,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = std::ptr::NonNull::new(at.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap of the ring segment gave null"))?;
        Ok(Mapping { base, _slot: slot })
    }

    /// Ring `ring`'s control block.
    fn control(&self, ring: usize) -> &Control {
        // SAFETY: page-aligned mapping, two control blocks inside the header (asserted
        // above); they hold atomics only, which any bytes form validly.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(ring * std::mem::size_of::<Control>())
                .cast()
        }
    }

    /// Ring `ring`'s bytes.
    fn data(&self, ring: usize) -> *mut u8 {
        // SAFETY: within the mapping.
        unsafe { self.base.as_ptr().add(HEADER + ring * CAPACITY) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this size; nothing refers to it any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), SEGMENT) };
    }
}

/// Why a ring cannot be used any more: the other side moved a position out of range.
fn corrupt(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the shared-memory connection's {what}; closing it"),
    )
}

/// Rings `fd` (an `eventfd`): its reader wakes.
fn ring_bell(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: an 8-byte write from a live value. A full counter (2^64 - 2 rings unread)
    // cannot happen; the reader is awake then anyway.
    unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
}

/// Empties a rung `eventfd` (non-blocking: nothing to empty is no error).
fn silence(fd: &OwnedFd) {
    let mut count: u64 = 0;
    // SAFETY: an 8-byte read into a live value.
    unsafe { libc::read(fd.as_raw_fd(), (&raw mut count).cast(), 8) };
}

/// Copies `n` bytes between a ring's bytes at position `at` (wrapping) and `other`:
/// `into_ring` says which way.
///
/// # Safety
/// `data` holds [`CAPACITY`] bytes; `other` at least `n`; `n <= CAPACITY`.
unsafe fn copy(data: *mut u8, at: u64, other: *mut u8, n: usize, into_ring: bool) {
    let start = (at % CAPACITY as u64) as usize;
    let first = n.min(CAPACITY - start);
    let pieces = [(start, 0, first), (0, first, n - first)];
    for (ring_at, other_at, len) in pieces {
        if len == 0 {
            continue;
        }
        // SAFETY: within both buffers as the caller promised; the ring's range is this
        // side's alone until the position moves.
        unsafe {
            let (r, o) = (data.add(ring_at), other.add(other_at));
            if into_ring {
                std::ptr::copy_nonoverlapping(o, r, len);
            } else {
                std::ptr::copy_nonoverlapping(r, o, len);
            }
        }
    }
}

/// The reading end of one ring, with the socket whose end means the writer's.
pub(crate) struct RingReader {
    map: Arc<Mapping>,
    ring: usize,
    /// Bytes read so far (this side's own count; the segment's copy is for the writer).
    tail: u64,
    /// Rung by the writer when it wrote while this side slept.
    doorbell: AsyncFd<OwnedFd>,
    /// Rung by this side when it made room while the writer waited.
    room: OwnedFd,
    socket: OwnedReadHalf,
}

impl RingReader {
    /// Copies what the ring holds into `buf`, up to its room; the number of bytes.
    ///
    /// # Errors
    /// The writer's position is out of range.
    fn take(&mut self, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
        // SAFETY: the unfilled part's bytes are written before they are marked filled.
        let n = unsafe {
            let out = buf.unfilled_mut();
            let n = take(&self.map, self.ring, &mut self.tail, &self.room, out)?;
            buf.assume_init(n);
            n
        };
        buf.advance(n);
        Ok(n)
    }

    /// Whether the ring holds bytes now.
    fn holds(&self) -> bool {
        let head = self.map.control(self.ring).head.0.load(Ordering::SeqCst);
        head != self.tail
    }

    /// This reading end, shared from now on by a client's reader task and the threads
    /// that wait for its answers (see [`inlet`]).
    ///
    /// # Errors
    /// Registering the doorbell with the runtime again.
    pub(crate) fn into_inlet(self) -> io::Result<inlet::RingIn> {
        inlet::RingIn::new(self)
    }
}

/// Copies what ring `ring` of `map` holds at position `tail` into `out`, up to its
/// length, and moves `tail` (also the segment's copy, for the writer) past it; rings
/// `room` when the writer waited for room. The number of bytes.
///
/// # Errors
/// The writer's position is out of range.
fn take(
    map: &Mapping,
    ring: usize,
    tail: &mut u64,
    room: &OwnedFd,
    out: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<usize> {
    let ctl = map.control(ring);
    let head = ctl.head.0.load(Ordering::Acquire);
    let held = head.wrapping_sub(*tail);
    if held > CAPACITY as u64 {
        return Err(corrupt("writer's position is out of range"));
    }
    let n = (held as usize).min(out.len());
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: `n` bytes of `out`; the ring's range [tail, tail + n) is written and not
    // reused until the tail moves past it.
    unsafe { copy(map.data(ring), *tail, out.as_mut_ptr().cast(), n, false) };
    *tail += n as u64;
    ctl.tail.0.store(*tail, Ordering::SeqCst);
    if ctl.waiting.0.swap(0, Ordering::SeqCst) != 0 {
        ring_bell(room);
    }
    Ok(n)
}

/// Ready once the writer's side of the socket beside a ring is gone (`Ok`: the
/// connection ended), or with an error when it wrote to it (nothing is written to it
/// after the setup).
fn poll_gone(socket: &mut OwnedReadHalf, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    let mut probe = [0u8; 1];
    let mut probe = ReadBuf::new(&mut probe);
    ready!(Pin::new(socket).poll_read(cx, &mut probe))?;
    if probe.filled().is_empty() {
        return Poll::Ready(Ok(()));
    }
    Poll::Ready(Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "the peer wrote to the socket of a shared-memory connection",
    )))
}

impl AsyncRead for RingReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.take(buf)? > 0 || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            // Empty: say so, then look again (a write between the look and the flag
            // would otherwise ring no bell).
            let ctl = this.map.control(this.ring);
            ctl.sleeping.0.store(1, Ordering::SeqCst);
            if this.holds() {
                ctl.sleeping.0.store(0, Ordering::Relaxed);
                continue;
            }
            if let Poll::Ready(ready) = this.doorbell.poll_read_ready(cx) {
                let mut guard = ready?;
                silence(guard.get_inner());
                guard.clear_ready();
                continue;
            }
            // The socket: readable only once the writer's side is gone.
            ready!(poll_gone(&mut this.socket, cx))?;
            // Ended: what the ring still holds was written before; then the end.
            this.take(buf)?;
            tracing::debug!(
                "shared-memory connection: the other side ended ({} bytes left)",
                buf.filled().len()
            );
            return Poll::Ready(Ok(()));
        }
    }
}

/// The writing end of one ring, with the socket it shuts down to end the connection.
pub(crate) struct RingWriter {
    map: Arc<Mapping>,
    ring: usize,
    /// Bytes written so far (this side's own count, under a lock: writes from several
    /// threads stay whole).
    head: Mutex<u64>,
    /// Rung by this side when it wrote while the reader slept.
    doorbell: OwnedFd,
    /// Rung by the reader when it made room while this side waited.
    room: AsyncFd<OwnedFd>,
    socket: OwnedWriteHalf,
}

impl RingWriter {
    /// Copies as much of `buf` as the ring has room for; never waits.
    ///
    /// # Errors
    /// [`io::ErrorKind::WouldBlock`] when the ring is full; the reader's position is out
    /// of range.
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let ctl = self.map.control(self.ring);
        let mut head = self.head.lock().unwrap_or_else(PoisonError::into_inner);
        let n = (CAPACITY - self.used(*head)?).min(buf.len());
        if n == 0 {
            return if buf.is_empty() {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        // SAFETY: `n` bytes of `buf` into the ring's free range [head, head + n), which
        // the reader does not read until the head moves.
        unsafe {
            copy(
                self.map.data(self.ring),
                *head,
                buf.as_ptr().cast_mut(),
                n,
                true,
            )
        };
        *head += n as u64;
        ctl.head.0.store(*head, Ordering::SeqCst);
        if ctl.sleeping.0.swap(0, Ordering::SeqCst) != 0 {
            ring_bell(&self.doorbell);
        }
        Ok(n)
    }

    /// Bytes written and not yet read, with this side's position at `head` (read under
    /// its lock, held until this returns).
    ///
    /// # Errors
    /// The reader's position is out of range.
    fn used(&self, head: u64) -> io::Result<usize> {
        let tail = self.map.control(self.ring).tail.0.load(Ordering::SeqCst);
        match head.wrapping_sub(tail) {
            used if used <= CAPACITY as u64 => Ok(used as usize),
            _ => Err(corrupt("reader's position is out of range")),
        }
    }

    /// Whether the ring has room now.
    fn has_room(&self) -> io::Result<bool> {
        // The lock is held while the reader's position is read: another thread's write
        // between the two would let the reader take past the head seen here, which would
        // look out of range.
        let head = self.head.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(self.used(*head)? < CAPACITY)
    }

    /// Ready once the ring has room.
    ///
    /// # Errors
    /// The reader's position is out of range; the `eventfd`'s error.
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let ctl = self.map.control(self.ring);
        loop {
            if self.has_room()? {
                return Poll::Ready(Ok(()));
            }
            ctl.waiting.0.store(1, Ordering::SeqCst);
            if self.has_room()? {
                ctl.waiting.0.store(0, Ordering::Relaxed);
                return Poll::Ready(Ok(()));
            }
            let mut guard = ready!(self.room.poll_read_ready(cx))?;
            silence(guard.get_inner());
            guard.clear_ready();
        }
    }

    /// Waits for room, or for the reader's side to end.
    ///
    /// # Errors
    /// [`io::ErrorKind::BrokenPipe`] once the reader's side is gone; as
    /// [`RingWriter::try_write`].
    pub(crate) async fn writable(&self) -> io::Result<()> {
        let room = std::future::poll_fn(|cx| self.poll_room(cx));
        let socket = self.socket.as_ref();
        let gone = async {
            loop {
                socket.readable().await?;
                let mut probe = [0u8; 1];
                match socket.try_read(&mut probe) {
                    Ok(_) => return io::Result::Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        };
        // Room first: a reader that ended still had its bytes written before (as a socket
        // takes bytes until it learns of the end).
        tokio::select! {
            biased;
            r = room => r,
            r = gone => r.and(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the other side of the shared-memory connection is gone",
            ))),
        }
    }
}

impl AsyncWrite for RingWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(self.poll_room(cx))?,
                done => return Poll::Ready(done),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Ends the connection: the socket's write side is shut down, which the reader sees
    /// once it has read what the ring holds.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

/// The two `eventfd`s of each ring: its doorbell (rung by its writer) and its room bell
/// (rung by its reader), in the order [`setup`] passes them.
pub(crate) struct Bells {
    /// Ring [`TO_PM`]'s doorbell and room bell.
    pub(crate) to_pm: [OwnedFd; 2],
    /// Ring [`TO_APP`]'s doorbell and room bell.
    pub(crate) to_app: [OwnedFd; 2],
}

/// Which side of the connection this process is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Pm,
    App,
}

/// This side's halves over `map` (a fresh segment: both rings empty, at position 0) with
/// `bells`, and the socket's halves beside them. Must run on a tokio runtime with IO
/// enabled.
///
/// # Errors
/// Registering the `eventfd`s with the runtime.
pub(crate) fn halves(
    map: Mapping,
    bells: Bells,
    side: Side,
    socket: tokio::net::UnixStream,
) -> io::Result<(RingReader, RingWriter)> {
    let map = Arc::new(map);
    let (read_ring, [read_door, read_room], write_ring, [write_door, write_room]) = match side {
        Side::Pm => (TO_PM, bells.to_pm, TO_APP, bells.to_app),
        Side::App => (TO_APP, bells.to_app, TO_PM, bells.to_pm),
    };
    let (r, w) = socket.into_split();
    let reader = RingReader {
        map: map.clone(),
        ring: read_ring,
        tail: 0,
        doorbell: register(read_door)?,
        room: read_room,
        socket: r,
    };
    let writer = RingWriter {
        ring: write_ring,
        head: Mutex::new(0),
        map,
        doorbell: write_door,
        room: register(write_room)?,
        socket: w,
    };
    Ok((reader, writer))
}

/// `fd` (an `eventfd`) registered with the runtime for reading.
///
/// # Errors
/// The runtime's.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the descriptor is owned by the `AsyncFd` from now on: it stays open and the
    // same until the `AsyncFd` is dropped.
    Ok(unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Both sides of one connection in this process: the PM's halves and the app's, over
    /// one segment (each side its own descriptors, as `SCM_RIGHTS` gives them).
    fn pair() -> ((RingReader, RingWriter), (RingReader, RingWriter)) {
        let (memfd, map, bells) = setup::create(
            setup::Slots::new(1, "test").take().expect("a slot"),
            c"test",
        )
        .expect("segment");
        let dup = |fd: &OwnedFd| fd.try_clone().expect("dup");
        let theirs = Bells {
            to_pm: [dup(&bells.to_pm[0]), dup(&bells.to_pm[1])],
            to_app: [dup(&bells.to_app[0]), dup(&bells.to_app[1])],
        };
        let app_map = Mapping::map(&memfd, None).expect("map");
        let (pm_socket, app_socket) = tokio::net::UnixStream::pair().expect("socket pair");
        let pm = halves(map, bells, Side::Pm, pm_socket).expect("PM halves");
        let app = halves(app_map, theirs, Side::App, app_socket).expect("app halves");
        (pm, app)
    }

    /// A pseudo-random sequence (no dependency for it).
    fn noise(seed: u64) -> impl FnMut(usize) -> usize {
        let mut x = seed | 1;
        move |bound| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % bound as u64) as usize
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// Writes `bytes` in pieces of random sizes, waiting for room like the client's
    /// outbox.
    async fn write_in_pieces(w: &RingWriter, bytes: &[u8], seed: u64) {
        let mut size = noise(seed);
        let mut at = 0;
        while at < bytes.len() {
            let end = (at + 1 + size(CAPACITY / 2)).min(bytes.len());
            match w.try_write(&bytes[at..end]) {
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    w.writable().await.expect("room");
                }
                Err(e) => panic!("write: {e}"),
            }
        }
    }

    /// Reads `len` bytes in reads of random sizes.
    async fn read_in_pieces(r: &mut RingReader, len: usize, seed: u64) -> Vec<u8> {
        let mut size = noise(seed);
        let mut got = Vec::with_capacity(len);
        while got.len() < len {
            let mut piece = vec![0u8; 1 + size(CAPACITY / 3)];
            let n = r.read(&mut piece).await.expect("read");
            assert!(n > 0, "ended after {} of {len} bytes", got.len());
            got.extend_from_slice(&piece[..n]);
        }
        got
    }

    #[test]
    fn bytes_cross_both_rings_whole_and_in_order_while_both_sides_run() {
        let rt = runtime();
        let ((mut pm_r, mut pm_w), (mut app_r, app_w)) = rt.block_on(async { pair() });
        let len = 7 * CAPACITY + 12_345;
        let mut byte = noise(99);
        let up: Vec<u8> = (0..len).map(|_| byte(256) as u8).collect();
        let down: Vec<u8> = up.iter().rev().copied().collect();
        rt.block_on(async {
            let expect_up = up.clone();
            let expect_down = down.clone();
            let app = tokio::spawn(async move {
                write_in_pieces(&app_w, &up, 1).await;
                app_w
            });
            let pm = tokio::spawn(async move {
                pm_w.write_all(&down).await.expect("PM writes");
                pm_w
            });
            let read_pm = tokio::spawn(async move { read_in_pieces(&mut pm_r, len, 2).await });
            let read_app = tokio::spawn(async move { read_in_pieces(&mut app_r, len, 3).await });
            let limit = Duration::from_secs(30);
            let got_up = tokio::time::timeout(limit, read_pm).await.expect("in time");
            let got_down = tokio::time::timeout(limit, read_app)
                .await
                .expect("in time");
            assert!(got_up.expect("PM reader") == expect_up, "app to PM intact");
            assert!(
                got_down.expect("app reader") == expect_down,
                "PM to app intact"
            );
            app.await.expect("app writer");
            pm.await.expect("PM writer");
        });
    }

    #[test]
    fn a_sleeping_reader_wakes_for_a_later_write_and_sees_the_end_after_the_bytes() {
        let rt = runtime();
        rt.block_on(async {
            let ((mut pm_r, _pm_w), (_app_r, mut app_w)) = pair();
            let reader = tokio::spawn(async move {
                let mut all = Vec::new();
                pm_r.read_to_end(&mut all).await.map(|_| all)
            });
            // The reader is asleep on its doorbell by now.
            tokio::time::sleep(Duration::from_millis(50)).await;
            app_w.write_all(b"late").await.expect("write");
            tokio::time::sleep(Duration::from_millis(50)).await;
            app_w.write_all(b" and last").await.expect("write");
            app_w.shutdown().await.expect("shutdown");
            let all = tokio::time::timeout(Duration::from_secs(10), reader)
                .await
                .expect("woken and ended in time")
                .expect("reader task")
                .expect("read");
            assert_eq!(all, b"late and last");
        });
    }

    #[test]
    fn a_full_ring_waits_for_room_and_a_gone_reader_fails_the_wait() {
        let rt = runtime();
        rt.block_on(async {
            let ((mut pm_r, _pm_w), (app_r, app_w)) = pair();
            let fill = vec![7u8; CAPACITY];
            assert_eq!(app_w.try_write(&fill).expect("fits"), CAPACITY);
            let full = app_w.try_write(b"x").expect_err("full");
            assert_eq!(full.kind(), io::ErrorKind::WouldBlock);
            let mut some = vec![0u8; 1000];
            let waiting = tokio::spawn(async move {
                app_w.writable().await.expect("room made");
                app_w
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(pm_r.read(&mut some).await.expect("read"), 1000);
            let app_w = tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("woken in time")
                .expect("writer");
            assert_eq!(app_w.try_write(&fill).expect("room"), 1000);
            // The PM's side gone: a writer waiting for room hears it.
            drop((pm_r, _pm_w, app_r));
            let gone = tokio::time::timeout(Duration::from_secs(10), app_w.writable())
                .await
                .expect("in time")
                .expect_err("the reader is gone");
            assert_eq!(gone.kind(), io::ErrorKind::BrokenPipe);
        });
    }

    #[test]
    fn positions_out_of_range_are_refused_not_followed() {
        let rt = runtime();
        rt.block_on(async {
            let ((mut pm_r, pm_w), (_app_r, app_w)) = pair();
            app_w.try_write(b"hello").expect("write");
            // A hostile app moves its head a ring and more past what the PM read.
            let ctl = app_w.map.control(TO_PM);
            ctl.head.0.store(CAPACITY as u64 + 6, Ordering::SeqCst);
            let mut buf = [0u8; 16];
            let e = pm_r.read(&mut buf).await.expect_err("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("out of range"), "{e}");
            // ... or the tail of what the PM writes past the PM's head (a tail behind
            // by at most a ring only makes the PM think it has less room).
            let ctl = app_w.map.control(TO_APP);
            ctl.tail.0.store(10, Ordering::SeqCst);
            let e = pm_w.try_write(b"event").expect_err("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        });
    }

    /// Threads write one ring at once (a client's callers, each under the outbox's lock)
    /// while a task waits for room (its writer task) and the other side reads: a look for
    /// room never sets the position it saw against what the reader took of a later write
    /// (which made the reader's position look out of range and closed the connection).
    #[test]
    fn a_look_for_room_while_threads_write_and_the_reader_reads_stays_in_range() {
        let rt = runtime();
        let ((mut pm_r, _pm_w), (_app_r, app_w)) = rt.block_on(async { pair() });
        let app_w = Arc::new(app_w);
        const WRITERS: usize = 2;
        const FRAMES: usize = 1_000_000;
        const FRAME: [u8; 83] = [5; 83];
        let total = WRITERS * FRAMES * FRAME.len();
        let reader = rt.spawn(async move {
            let mut got = 0;
            let mut buf = vec![0u8; 4096];
            while got < total {
                let n = pm_r.read(&mut buf).await.expect("read");
                assert!(n > 0, "ended after {got} of {total} bytes");
                assert!(buf[..n].iter().all(|&b| b == 5), "bytes intact");
                got += n;
            }
            got
        });
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let looker = {
            let (w, done) = (app_w.clone(), done.clone());
            rt.spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    w.writable().await?;
                    tokio::task::yield_now().await;
                }
                io::Result::Ok(())
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                let w = app_w.clone();
                std::thread::spawn(move || {
                    let give_up = std::time::Instant::now() + Duration::from_secs(60);
                    for _ in 0..FRAMES {
                        let mut at = 0;
                        while at < FRAME.len() {
                            match w.try_write(&FRAME[at..]) {
                                Ok(n) => at += n,
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                    assert!(std::time::Instant::now() < give_up, "room in time");
                                    std::thread::yield_now();
                                }
                                Err(e) => panic!("write: {e}"),
                            }
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, Ordering::Relaxed);
        rt.block_on(async {
            let limit = Duration::from_secs(60);
            let looked = tokio::time::timeout(limit, looker).await.expect("in time");
            looked.expect("looker").expect("positions in range");
            let got = tokio::time::timeout(limit, reader).await.expect("in time");
            assert_eq!(got.expect("reader"), total);
        });
    }

    #[test]
    fn a_reading_thread_takes_bytes_without_the_bell_and_rings_the_task_for_what_it_left() {
        let rt = runtime();
        rt.block_on(async {
            let ((_pm_r, pm_w), (app_r, _app_w)) = pair();
            let mut task = app_r.into_inlet().expect("inlet");
            let inlet = task.inlet().clone();
            let reading = inlet.reading();
            pm_w.try_write(b"abc").expect("write");
            // The PM wrote without ringing: a task asleep now (as when a thread holds
            // the lock) is not woken.
            let asleep = tokio::time::timeout(Duration::from_millis(50), task.wait(true));
            assert!(
                asleep.await.is_err(),
                "the doorbell rang while a thread read"
            );
            {
                let mut taken = inlet.lock();
                assert_eq!(inlet.take(&mut taken).expect("take"), 3);
                assert_eq!(taken.buf, b"abc");
                taken.buf.clear();
            }
            // Bytes come while the thread still reads, then it stops: the task is rung.
            pm_w.try_write(b"left").expect("write");
            drop(reading);
            let woken = tokio::time::timeout(Duration::from_secs(10), task.wait(true));
            assert!(woken.await.expect("rung in time").expect("doorbell"));
            let mut taken = inlet.lock();
            inlet.take(&mut taken).expect("take");
            assert_eq!(taken.buf, b"left");
        });
    }

    #[test]
    fn a_task_and_reading_threads_share_a_ring_in_order_and_the_end_comes_after_the_bytes() {
        let rt = runtime();
        let _in_runtime = rt.enter();
        let ((_pm_r, pm_w), (app_r, _app_w)) = pair();
        let mut task = app_r.into_inlet().expect("inlet");
        let inlet = task.inlet().clone();
        let bytes: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        // What either side took, in the order taken (appended under the inlet's lock).
        let got = Arc::new(Mutex::new(Vec::new()));
        let move_out = |taken: &mut inlet::Taken, got: &Mutex<Vec<u8>>| {
            got.lock().expect("log").append(&mut taken.buf);
        };
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..2)
            .map(|seed| {
                let (inlet, got, done) = (inlet.clone(), got.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut pause = noise(seed + 7);
                    while !done.load(Ordering::Relaxed) {
                        let _reading = inlet.reading();
                        for _ in 0..pause(50) {
                            if let Some(mut taken) = inlet.try_lock() {
                                inlet.take(&mut taken).expect("take");
                                move_out(&mut taken, &got);
                            }
                        }
                        std::thread::sleep(Duration::from_micros(pause(300) as u64));
                    }
                })
            })
            .collect();
        let reader = {
            let (inlet, got) = (inlet.clone(), got.clone());
            rt.spawn(async move {
                loop {
                    let busy = match inlet.try_lock() {
                        Some(mut taken) => {
                            let n = inlet.take(&mut taken).expect("take");
                            move_out(&mut taken, &got);
                            if n > 0 {
                                continue;
                            }
                            false
                        }
                        None => true,
                    };
                    if !task.wait(busy).await.expect("wait") {
                        let mut taken = inlet.lock();
                        inlet.take(&mut taken).expect("take");
                        move_out(&mut taken, &got);
                        return;
                    }
                }
            })
        };
        rt.block_on(async {
            write_in_pieces(&pm_w, &bytes, 3).await;
            let mut pm_w = pm_w;
            pm_w.shutdown().await.expect("shutdown");
            tokio::time::timeout(Duration::from_secs(60), reader)
                .await
                .expect("the task saw the end in time")
                .expect("reader task");
        });
        done.store(true, Ordering::Relaxed);
        threads.into_iter().for_each(|t| t.join().expect("thread"));
        assert!(
            *got.lock().expect("log") == bytes,
            "bytes lost or out of order"
        );
    }
}
