//! Setting up a shared-memory connection on the PM's rings' socket: the PM sends one byte
//! as soon as the app connects, [`YES`] with the segment and the four `eventfd`s as
//! descriptors, or [`NO`] (the connection stays on the socket). Only the PM creates
//! segments: it sizes and seals them, so what it maps is what it made.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::Interest;
use tokio::net::UnixStream;

use super::{Bells, Mapping, SEGMENT};

/// The PM's answer: rings, their descriptors attached.
const YES: u8 = b'R';
/// The PM's answer: stay on the socket.
const NO: u8 = b'S';

/// Descriptors passed with [`YES`]: the segment, then each ring's doorbell and room bell.
const FDS: usize = 5;

/// How many rings a PM may have at once (each is [`SEGMENT`] bytes of shared memory);
/// the apps past it stay on the socket.
#[derive(Clone)]
pub(crate) struct Slots {
    used: Arc<AtomicUsize>,
    max: usize,
    /// The segments' name: `maestro-ring` and the PM's label (its socket directory's
    /// name), which `/proc/PID/maps` shows.
    name: std::ffi::CString,
}

/// One of [`Slots`], given back when its segment is unmapped.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slots {
    /// At most `max` rings at once (0: none), their segments named after `label`.
    pub(crate) fn new(max: usize, label: &str) -> Slots {
        let name = format!("maestro-ring {label}").replace('\0', "");
        Slots {
            used: Arc::default(),
            max,
            name: std::ffi::CString::new(name).unwrap_or_default(),
        }
    }

    pub(super) fn take(&self) -> Option<Slot> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.used.clone()))
    }
}

/// The PM's side: gives the app at the other end of `stream` a new segment and its bells
/// (returned to map into halves), or tells it to stay on the socket and returns `None`: when `slots` are all taken, when the peer is not of the PM's user, or when the
/// segment cannot be made (said in the log).
///
/// # Errors
/// Writing the answer.
pub(crate) async fn answer(
    stream: &UnixStream,
    slots: &Slots,
) -> io::Result<Option<(Mapping, Bells)>> {
    let same_user = stream.peer_cred().is_ok_and(|c| c.uid() == safefs::euid());
    let made = match slots.take().filter(|_| same_user) {
        None => None,
        Some(slot) => match create(slot, &slots.name) {
            Ok(made) => Some(made),
            Err(e) => {
                tracing::warn!("pool manager: no shared-memory connection ({e}); socket");
                None
            }
        },
    };
    let Some((memfd, map, bells)) = made else {
        send(stream, NO, &[]).await?;
        return Ok(None);
    };
    let fds = [
        memfd.as_raw_fd(),
        bells.to_pm[0].as_raw_fd(),
        bells.to_pm[1].as_raw_fd(),
        bells.to_app[0].as_raw_fd(),
        bells.to_app[1].as_raw_fd(),
    ];
    send(stream, YES, &fds).await?;
    Ok(Some((map, bells)))
}

/// The app's side: the PM's answer on `stream` (connected to its rings' socket): the
/// segment mapped and the bells, or `None` when the PM said to stay on the socket.
///
/// # Errors
/// The socket's errors; an answer that is neither (a bad byte, missing descriptors, a
/// segment of the wrong size).
pub(crate) async fn granted(stream: &UnixStream) -> io::Result<Option<(Mapping, Bells)>> {
    let (byte, fds) = loop {
        stream.readable().await?;
        match stream.try_io(Interest::READABLE, || recv_fds(stream.as_raw_fd())) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            got => break got?,
        }
    };
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    match (byte, fds.len()) {
        (None, _) => Err(io::ErrorKind::UnexpectedEof.into()),
        (Some(NO), 0) => Ok(None),
        (Some(YES), FDS) => {
            let mut fds = fds.into_iter();
            let mut next = || fds.next().ok_or_else(|| bad("descriptors missing".into()));
            let memfd = next()?;
            let bells = Bells {
                to_pm: [next()?, next()?],
                to_app: [next()?, next()?],
            };
            let size = std::fs::File::from(memfd.try_clone()?).metadata()?.len();
            if size != SEGMENT as u64 {
                return Err(bad(format!(
                    "the pool manager's ring segment has {size} bytes, not {SEGMENT}"
                )));
            }
            Ok(Some((Mapping::map(&memfd, None)?, bells)))
        }
        (Some(b), n) => Err(bad(format!(
            "the pool manager answered the shared-memory request with byte {b} and {n} descriptors"
        ))),
    }
}

/// A new segment named `name` (sealed at its size), mapped, and four fresh `eventfd`s.
pub(super) fn create(slot: Slot, name: &std::ffi::CStr) -> io::Result<(OwnedFd, Mapping, Bells)> {
    let check = |rc: libc::c_int| {
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc)
        }
    };
    // SAFETY: a C string literal; flags as documented.
    let fd = check(unsafe {
        libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: just created, owned by nobody else.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain calls on an owned descriptor.
    check(unsafe { libc::ftruncate(memfd.as_raw_fd(), SEGMENT as libc::off_t) })?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    let map = Mapping::map(&memfd, Some(slot))?;
    let bell = || -> io::Result<OwnedFd> {
        // SAFETY: flags as documented; the descriptor is owned at once.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: just created.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let bells = Bells {
        to_pm: [bell()?, bell()?],
        to_app: [bell()?, bell()?],
    };
    Ok((memfd, map, bells))
}

/// Writes `byte` with `fds` attached to `stream`.
async fn send(stream: &UnixStream, byte: u8, fds: &[RawFd]) -> io::Result<()> {
    loop {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || {
            send_fds(stream.as_raw_fd(), byte, fds)
        }) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            done => return done,
        }
    }
}

/// Room for [`FDS`] descriptors' control message.
const CONTROL: usize = 64;

/// Runs `f` on a `msghdr` whose one data byte is `byte` and whose control buffer is
/// `control` (length 0 here: `f` sets what it uses).
fn with_message<R>(
    byte: &mut u8,
    control: &mut [u64; CONTROL / 8],
    f: impl FnOnce(&mut libc::msghdr) -> R,
) -> R {
    let mut iov = libc::iovec {
        iov_base: std::ptr::from_mut(byte).cast(),
        iov_len: 1,
    };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive `f`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    f(&mut msg)
}

/// One `sendmsg` of `byte` with `fds` as `SCM_RIGHTS`.
fn send_fds(socket: RawFd, byte: u8, fds: &[RawFd]) -> io::Result<()> {
    let mut byte = byte;
    let mut control = [0u64; CONTROL / 8];
    let n = with_message(&mut byte, &mut control, |msg| {
        if fds.is_empty() {
            msg.msg_control = std::ptr::null_mut();
        } else {
            let bytes = std::mem::size_of_val(fds);
            // SAFETY: CMSG_SPACE of a small length; the buffer holds it (checked).
            let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
            assert!(
                space <= CONTROL,
                "room for the descriptors' control message"
            );
            msg.msg_controllen = space;
            // SAFETY: msg_control points at `space` zeroed, aligned bytes: the first
            // header and its data fit.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
                std::ptr::copy_nonoverlapping(
                    fds.as_ptr().cast::<u8>(),
                    libc::CMSG_DATA(cmsg),
                    bytes,
                );
            }
        }
        // SAFETY: a valid msghdr as built above.
        unsafe { libc::sendmsg(socket, msg, libc::MSG_NOSIGNAL) }
    });
    match n {
        1 => Ok(()),
        0 => Err(io::ErrorKind::WriteZero.into()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// One `recvmsg` of a byte and the descriptors passed with it (owned at once, closed on
/// any error); `None` for the byte at the end of the stream.
fn recv_fds(socket: RawFd) -> io::Result<(Option<u8>, Vec<OwnedFd>)> {
    let mut byte = 0u8;
    let mut control = [0u64; CONTROL / 8];
    with_message(&mut byte, &mut control, |msg| {
        msg.msg_controllen = CONTROL;
        // SAFETY: a valid msghdr; received descriptors are close-on-exec.
        let n = unsafe { libc::recvmsg(socket, msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fds = Vec::new();
        // SAFETY: walking the control messages the kernel wrote into `control`.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                    for i in 0..len / std::mem::size_of::<RawFd>() {
                        let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(msg, cmsg);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more descriptors than a shared-memory answer holds",
            ));
        }
        Ok((n == 1, fds))
    })
    .map(|(got, fds)| (got.then_some(byte), fds))
}
