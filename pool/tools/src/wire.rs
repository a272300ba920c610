//! A blocking, framed control connection to the pool manager: sends batches of [`ToPm`] and
//! receives [`FromPm`] with a deadline. Load generators (`maestro bench pm`) use it to
//! pipeline batches, and protocol tests to behave as no real client would (a subscriber
//! that never reads).

use pool::CallError;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use pool::bootstrap::{ControlAddr, PmInfo};
use pool::proto::{self, AppId, FromPm, Op, ToPm};
use pool::{ClientError, Result, bare_join, welcome};

/// Either kind of control stream.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A framed connection.
pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    inbox: VecDeque<FromPm>,
    timeout: Duration,
}

impl Conn {
    /// Connects to the PM at one of its control endpoints.
    ///
    /// # Errors
    /// Connection errors.
    pub fn connect(addr: &ControlAddr, timeout: Duration) -> Result<Conn> {
        let stream = match addr {
            ControlAddr::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, timeout)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            ControlAddr::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
        };
        Ok(Conn {
            stream,
            buf: Vec::new(),
            inbox: VecDeque::new(),
            timeout,
        })
    }

    /// A connection over `stream`, already connected to the PM (a socket another process
    /// made and handed over, as the attack tests do).
    ///
    /// # Errors
    /// The OS refused `TCP_NODELAY`.
    pub fn from_tcp(stream: TcpStream, timeout: Duration) -> Result<Conn> {
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream: Stream::Tcp(stream),
            buf: Vec::new(),
            inbox: VecDeque::new(),
            timeout,
        })
    }

    /// Ends this side's writing (the peer reads the end of the stream; this side still
    /// reads what the peer sends).
    ///
    /// # Errors
    /// The OS error.
    pub fn shutdown_write(&self) -> Result<()> {
        match &self.stream {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Write)?,
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Write)?,
        }
        Ok(())
    }

    /// Answers the PM's challenge and joins (without a fabric endpoint: a load generator
    /// moves no data); returns the app id.
    ///
    /// # Errors
    /// [`CallError::Refused`] for a wrong secret; timeouts and connection errors.
    pub fn join(&mut self, info: &PmInfo, component: &str, index: i64) -> Result<AppId> {
        self.join_as(info, (component, index), proto::Role::App)
    }

    /// As [`Conn::join`], in `role` (an observer sees the views and nothing else).
    ///
    /// # Errors
    /// As [`Conn::join`].
    pub fn join_as(
        &mut self,
        info: &PmInfo,
        (component, index): (&str, i64),
        role: proto::Role,
    ) -> Result<AppId> {
        self.join_with(info, (component, index), |j| j.role = role)
    }

    /// As [`Conn::join`], as `member` of shard 0 at another shard of a sharded pool
    /// (see [`proto::Join::member`]).
    ///
    /// # Errors
    /// As [`Conn::join`]; [`CallError::Refused`] with `Shard` for a member id this shard
    /// does not take.
    pub fn join_member(
        &mut self,
        info: &PmInfo,
        (component, index): (&str, i64),
        member: AppId,
    ) -> Result<AppId> {
        self.join_with(info, (component, index), |j| j.member = Some(member))
    }

    /// Joins with the JOIN [`bare_join`] makes, changed by `edit`.
    fn join_with(
        &mut self,
        info: &PmInfo,
        (component, index): (&str, i64),
        edit: impl FnOnce(&mut proto::Join),
    ) -> Result<AppId> {
        let nonce = match self.recv(Op::Join)? {
            FromPm::Challenge { nonce } => nonce,
            other => {
                return Err(ClientError::Call(CallError::Protocol(format!(
                    "{other:?} instead of a challenge"
                ))));
            }
        };
        let mut join = bare_join(info, component, index, &nonce);
        if let ToPm::Join(j) = &mut join {
            edit(j);
        }
        self.send_batch(&[join])?;
        welcome(self.recv(Op::Join)?).map(|(app, _)| app)
    }

    /// Gives up a send that cannot complete within `limit` (`None`: waits as long as the
    /// peer takes): a client that never reads fills the PM's socket, then its own.
    ///
    /// # Errors
    /// The OS refused the option.
    pub fn set_write_timeout(&self, limit: Option<Duration>) -> Result<()> {
        match &self.stream {
            Stream::Tcp(s) => s.set_write_timeout(limit)?,
            Stream::Unix(s) => s.set_write_timeout(limit)?,
        }
        Ok(())
    }

    /// Sends a batch as one frame.
    ///
    /// # Errors
    /// Encoding (too large) and connection errors.
    pub fn send_batch(&mut self, batch: &[ToPm]) -> Result<()> {
        let frame = proto::encode(batch)?;
        self.stream.io().write_all(&frame)?;
        Ok(())
    }

    /// The next message (queued ones first) within the timeout.
    ///
    /// # Errors
    /// [`CallError::Timeout`] naming `what`; [`CallError::Closed`]; bad frames.
    pub fn recv(&mut self, what: Op) -> Result<FromPm> {
        let end = Instant::now() + self.timeout;
        loop {
            if let Some(m) = self.inbox.pop_front() {
                return Ok(m);
            }
            let left = end
                .checked_duration_since(Instant::now())
                .ok_or(ClientError::Call(CallError::Timeout(what)))?;
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            let mut chunk = [0u8; 64 * 1024];
            let n = match self.stream.io().read(&mut chunk) {
                Ok(0) => return Err(ClientError::Call(CallError::Closed)),
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ClientError::Call(CallError::Timeout(what)));
                }
                Err(e) => return Err(e.into()),
            };
            self.buf.extend_from_slice(&chunk[..n]);
            let inbox = &mut self.inbox;
            proto::drain_frames::<FromPm>(&mut self.buf, |m| inbox.push_back(m))?;
        }
    }
}
