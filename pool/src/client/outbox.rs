//! The sending side of the control connection. Whoever sends a message writes it to the
//! socket at once, on its own thread, when the socket takes it: a blocking call does not
//! wait for the client's runtime thread to wake up and write for it (one thread hand-over
//! less per round trip). What the socket does not take waits in the outbox for the writer
//! task, which writes it when the socket has room. Every write happens under the outbox's
//! lock and never waits, so messages keep their order and no caller can leave half a
//! frame behind by giving up.
//!
//! A notice nobody waits for (the demand of a CDO whose `require` already brought it) is
//! not written at once ([`Outbox::send_deferred`]): it goes with the next message, or by
//! the writer task within [`DEFER`]. Its write(2) would otherwise be most of the call.
//! (Deferring declares and disposes as well was measured and left: the cold demand of
//! 64 KiB that followed took 45-68 µs instead of 27-33 µs, the PM then handling them on
//! the next call's critical path.)
//!
//! A thread that polls many operations at once (a blocking client's `block_on` of a
//! pipeline: a producer offering 256 CDOs, a consumer demanding what its events name) polls
//! them corked ([`corked`]): what they queue during one poll is written together when the
//! poll returns, one write(2) and one wake-up of the PM for them all instead of one each.

use crate::CallError;
use std::cell::RefCell;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use super::{ClientError, Result};
use crate::proto::{self, ToPm};

/// The write half of a control connection, usable from any thread without waiting.
pub(crate) enum WriteIo {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    Unix(tokio::net::unix::OwnedWriteHalf),
    /// A shared-memory ring to a PM on this host ([`crate::ring`]).
    Ring(crate::ring::RingWriter),
}

impl WriteIo {
    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteIo::Tcp(w) => w.try_write(buf),
            WriteIo::Unix(w) => w.try_write(buf),
            WriteIo::Ring(w) => w.try_write(buf),
        }
    }

    async fn writable(&self) -> io::Result<()> {
        match self {
            WriteIo::Tcp(w) => w.writable().await,
            WriteIo::Unix(w) => w.writable().await,
            WriteIo::Ring(w) => w.writable().await,
        }
    }

    /// Writes all of `buf`, waiting for room (before the outbox exists: the JOIN).
    pub(crate) async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            self.writable().await?;
            match self.try_write(buf) {
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

struct State {
    /// The socket's write half; `None` before the connection is open (`pending`) and once
    /// it failed or the client closed it: nothing is sent any more then.
    io: Option<Arc<WriteIo>>,
    /// The connection is not open yet (a shard's, opened when the app first needs it):
    /// what is sent waits in `unsent` until [`Outbox::attach`].
    pending: bool,
    /// Encoded bytes the socket has not taken yet.
    unsent: Vec<u8>,
    /// `unsent` holds deferred notices only (the socket had room): the writer task sends
    /// them after [`DEFER`], or the next message takes them along.
    deferred: bool,
    /// The writer task ticks every [`DEFER`] for deferred notices (woken by the first, it
    /// keeps ticking while more come, so a stream of notices wakes it once, not each).
    ticking: bool,
    /// A notice was deferred since the writer task's last tick.
    fresh: bool,
}

/// How long a deferred notice may wait for a message to go with before the writer task
/// sends it alone.
pub(crate) const DEFER: Duration = Duration::from_millis(1);

thread_local! {
    /// While this thread runs [`corked`], the outboxes it queued messages in, written
    /// when it ends.
    static CORK: RefCell<Option<Corked>> = const { RefCell::new(None) };
}

/// The outboxes a cork held back: mostly one (a shard's), with no allocation for it.
type Corked = smallvec::SmallVec<[Arc<Outbox>; 2]>;

/// Runs `poll` (one poll of a future) corked: messages it sends on this thread are queued,
/// and written together when it returns (or unwinds). Nested, the outermost writes.
pub(crate) fn corked<R>(poll: impl FnOnce() -> R) -> R {
    /// Writes what the cork held back, also when `poll` panics.
    struct Uncork;
    impl Drop for Uncork {
        fn drop(&mut self) {
            let held = CORK.with(|c| c.borrow_mut().take());
            for out in held.into_iter().flatten() {
                out.uncork();
            }
        }
    }
    let outermost = CORK.with(|c| {
        let mut c = c.borrow_mut();
        c.is_none().then(|| *c = Some(Corked::new())).is_some()
    });
    let _uncork = outermost.then(|| Uncork);
    poll()
}

/// Messages on their way to the PM.
pub(crate) struct Outbox {
    state: Mutex<State>,
    /// Wakes the writer task when bytes wait for room.
    kick: Notify,
}

impl Outbox {
    pub(crate) fn new(io: WriteIo) -> Arc<Outbox> {
        Outbox::with(Some(io))
    }

    /// The outbox of a connection not open yet: what is sent waits until
    /// [`Outbox::attach`] gives it the connection.
    pub(crate) fn pending() -> Arc<Outbox> {
        Outbox::with(None)
    }

    /// The outbox of `io`, or of a connection not open yet.
    fn with(io: Option<WriteIo>) -> Arc<Outbox> {
        Arc::new(Outbox {
            state: Mutex::new(State {
                pending: io.is_none(),
                io: io.map(Arc::new),
                unsent: Vec::new(),
                deferred: false,
                ticking: false,
                fresh: false,
            }),
            kick: Notify::new(),
        })
    }

    /// Whether the connection was never opened (see [`Outbox::pending`]).
    pub(crate) fn never_opened(&self) -> bool {
        self.state().pending
    }

    /// Closes the write half now, whoever still holds the client's shared state (a
    /// forgotten subscription, say): the PM sees the connection end. What waits is written
    /// first, as far as the connection takes it at once: the deferred notices (a
    /// transfer's end) would otherwise be lost with the connection, and the PM count the
    /// transfers they end as failed.
    pub(crate) fn close(&self) {
        let mut st = self.state();
        Self::flush(&mut st);
        st.io = None;
        st.pending = false;
        st.unsent.clear();
        drop(st);
        self.kick.notify_one();
    }

    /// Writes to `io` from now on: the connection opened for a pending outbox (what
    /// waits is written now), or a new connection to the PM (a client that rejoined a
    /// manager that took over: see `reclaim`; nothing of the old one is left).
    pub(crate) fn attach(&self, io: WriteIo) {
        let mut st = self.state();
        st.io = Some(Arc::new(io));
        if std::mem::take(&mut st.pending) {
            Self::flush(&mut st);
            let left = !st.unsent.is_empty() || st.ticking;
            drop(st);
            if left {
                self.kick.notify_one();
            }
            return;
        }
        st.unsent.clear();
        st.deferred = false;
        st.ticking = false;
        st.fresh = false;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `msgs` in order, framed together: written now if the socket takes them (one
    /// write for the reports of a burst of transfers), else left to the writer task.
    /// Never waits.
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) once the connection failed; an encoding error.
    pub(crate) fn send_all(self: &Arc<Self>, msgs: &[ToPm]) -> Result<()> {
        if msgs.is_empty() {
            return Ok(());
        }
        if self.held_back() {
            let mut st = self.state();
            Self::queue(&mut st, msgs)?;
            st.deferred = false;
            return Ok(());
        }
        let mut st = self.state();
        // Behind bytes that wait for room (not deferred notices, which go now with it), the
        // writer task sends them in order.
        let waiting = !st.unsent.is_empty() && !st.deferred;
        Self::queue(&mut st, msgs)?;
        if waiting {
            return Ok(());
        }
        st.deferred = false;
        Self::flush(&mut st);
        // Left bytes, or the connection just failed: the writer task takes over (and, on
        // failure, ends, which closes the client).
        let broken = st.io.is_none() && !st.pending;
        if broken || !st.unsent.is_empty() {
            self.kick.notify_one();
        }
        if broken {
            return Err(ClientError::Call(CallError::Closed));
        }
        Ok(())
    }

    /// Whether this thread is corked ([`corked`]): then this outbox is written when the
    /// cork ends.
    fn held_back(self: &Arc<Self>) -> bool {
        CORK.with(|c| match &mut *c.borrow_mut() {
            Some(held) => {
                if !held.iter().any(|o| Arc::ptr_eq(o, self)) {
                    held.push(Arc::clone(self));
                }
                true
            }
            None => false,
        })
    }

    /// Writes what a cork held back (and whatever else waits) now, leaving the rest to
    /// the writer task.
    fn uncork(&self) {
        let mut st = self.state();
        Self::flush(&mut st);
        let left = st.io.is_none() || !st.unsent.is_empty();
        drop(st);
        if left {
            self.kick.notify_one();
        }
    }

    /// Sends `msg`, a notice nobody waits for, with the next message or within [`DEFER`]:
    /// never written by the caller, and the writer task is woken only when it is not
    /// ticking already (see `State::ticking`).
    ///
    /// # Errors
    /// As [`Outbox::send_all`].
    pub(crate) fn send_deferred(&self, msg: ToPm) -> Result<()> {
        let mut st = self.state();
        let only_notices = st.unsent.is_empty();
        Self::queue(&mut st, std::slice::from_ref(&msg))?;
        st.deferred |= only_notices;
        st.fresh = true;
        if !st.ticking {
            st.ticking = true;
            drop(st);
            self.kick.notify_one();
        }
        Ok(())
    }

    /// Appends the frames of `msgs` to what is unsent.
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) once the connection failed; an encoding error.
    fn queue(st: &mut State, msgs: &[ToPm]) -> Result<()> {
        if st.io.is_none() && !st.pending {
            return Err(ClientError::Call(CallError::Closed));
        }
        Ok(proto::encode_split_into(msgs, &mut st.unsent)?)
    }

    /// Writes what the socket takes now.
    fn flush(st: &mut State) {
        let Some(io) = st.io.clone() else {
            return;
        };
        let mut done = 0;
        while done < st.unsent.len() {
            match io.try_write(&st.unsent[done..]) {
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!("pool client: writing to the pool manager: {e}");
                    st.io = None;
                    st.unsent.clear();
                    return;
                }
            }
        }
        st.unsent.drain(..done);
    }

    /// The writer task: writes what callers left behind whenever the socket has room,
    /// and deferred notices every [`DEFER`] while they keep coming. Returns when the
    /// connection failed.
    pub(crate) async fn drain(&self) {
        loop {
            self.kick.notified().await;
            while self.state().ticking {
                // Give the callers' next messages the chance to take the notices along.
                tokio::time::sleep(DEFER).await;
                {
                    let mut st = self.state();
                    st.deferred = false;
                    if !std::mem::take(&mut st.fresh) {
                        st.ticking = false;
                    }
                }
                if !self.write_unsent().await {
                    return;
                }
            }
            if !self.write_unsent().await {
                return;
            }
        }
    }

    /// Writes what waits, waiting for room as long as it takes; false once the connection
    /// failed.
    async fn write_unsent(&self) -> bool {
        loop {
            let Some(io) = self.state().io.clone() else {
                return false;
            };
            if let Err(e) = io.writable().await {
                tracing::warn!("pool client: waiting to write to the pool manager: {e}");
                self.state().io = None;
                return false;
            }
            drop(io);
            let mut st = self.state();
            Self::flush(&mut st);
            match &st.io {
                None => return false,
                Some(_) if st.unsent.is_empty() => return true,
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outbox writing into one end of a Unix socket pair (known writable, as after the
    /// JOIN), and the other end.
    fn pair(rt: &tokio::runtime::Runtime) -> (Arc<Outbox>, tokio::net::UnixStream) {
        let (ours, theirs) = tokio::net::UnixStream::pair().expect("socket pair");
        let (_, w) = ours.into_split();
        let io = WriteIo::Unix(w);
        rt.block_on(io.writable()).expect("writable");
        (Outbox::new(io), theirs)
    }

    /// The messages the other end has received (waiting up to 100 ms for the first bytes).
    fn readable(rt: &tokio::runtime::Runtime, theirs: &tokio::net::UnixStream) -> Vec<ToPm> {
        let ready = rt.block_on(tokio::time::timeout(
            Duration::from_millis(100),
            theirs.readable(),
        ));
        if ready.is_err() {
            return Vec::new();
        }
        let mut buf = vec![0u8; 1 << 16];
        let mut got = Vec::new();
        loop {
            match theirs.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        let mut out = Vec::new();
        proto::drain_frames::<ToPm>(&mut got, |m| out.push(m)).expect("frames");
        out
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn messages_sent_together_go_in_one_frame_in_order() {
        let rt = runtime();
        let _guard = rt.enter();
        let (out, theirs) = pair(&rt);
        out.send_all(&[ToPm::Leave]).expect("send");
        assert_eq!(readable(&rt, &theirs), [ToPm::Leave], "written at once");
        let reports: Vec<ToPm> = (1..=3)
            .map(|transfer| ToPm::TransferDone {
                transfer,
                error: None,
                direct: None,
            })
            .collect();
        out.send_all(&reports).expect("send");
        assert_eq!(readable(&rt, &theirs), reports);
    }

    #[test]
    fn a_corked_poll_writes_what_it_sent_once_when_it_ends() {
        let rt = runtime();
        let _guard = rt.enter();
        let (out, theirs) = pair(&rt);
        let during = corked(|| {
            out.send_all(&[ToPm::Declare {
                cdo: 1,
                name: "a".into(),
            }])
            .expect("send");
            out.send_all(&[ToPm::Demand { cdo: 1 }]).expect("send");
            // Nested: the outermost writes.
            corked(|| out.send_all(&[ToPm::Leave]).expect("send"));
            readable(&rt, &theirs)
        });
        assert!(during.is_empty(), "held back while corked: {during:?}");
        assert_eq!(
            readable(&rt, &theirs),
            [
                ToPm::Declare {
                    cdo: 1,
                    name: "a".into()
                },
                ToPm::Demand { cdo: 1 },
                ToPm::Leave
            ]
        );
    }

    #[test]
    fn a_deferred_notice_waits_for_the_next_message_and_goes_before_it() {
        let rt = runtime();
        let _guard = rt.enter();
        let (out, theirs) = pair(&rt);
        out.send_deferred(ToPm::Demand { cdo: 7 }).expect("notice");
        assert!(
            readable(&rt, &theirs).is_empty(),
            "left for the writer's tick"
        );
        out.send_all(&[ToPm::Leave]).expect("send");
        assert_eq!(
            readable(&rt, &theirs),
            [ToPm::Demand { cdo: 7 }, ToPm::Leave]
        );
    }

    #[test]
    fn a_close_writes_the_deferred_notices_first() {
        let rt = runtime();
        let _guard = rt.enter();
        let (out, theirs) = pair(&rt);
        let done = ToPm::TransferDone {
            transfer: 3,
            error: None,
            direct: None,
        };
        out.send_deferred(done.clone()).expect("notice");
        out.close();
        assert_eq!(readable(&rt, &theirs), [done], "the notice, then the end");
        assert!(out.send_all(&[ToPm::Leave]).is_err(), "closed");
    }
}
