//! The kernel's TCP sockets through `sock_diag` netlink (`NETLINK_SOCK_DIAG`, as `ss`
//! reads them): one dump per address family. Reading `/proc/net/tcp` walks the kernel's
//! whole connection hash again for each page it hands out, and did so for IPv6 with no
//! socket at all: 1.8 ms a file on the development VM, paid at each PMIx client's
//! connection to `maestro run` (whose server checks its peers then) and each TCP JOIN of a
//! pool manager. Both families' dump take 0.8 ms there.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::Socket;

/// `NETLINK_SOCK_DIAG` (linux/netlink.h).
const NETLINK_SOCK_DIAG: libc::c_int = 4;
/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h): the request and answer message type.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST | NLM_F_DUMP` (linux/netlink.h).
const DUMP_REQUEST: u16 = 0x1 | 0x300;
/// `NLMSG_ERROR`, `NLMSG_DONE` (linux/netlink.h).
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// Bytes of `struct nlmsghdr`, `struct inet_diag_req_v2` and `struct inet_diag_msg`.
const HEADER: usize = 16;
const REQUEST: usize = 56;
const MESSAGE: usize = 72;
/// How long the kernel may take to answer (it answers at once; a bound all the same).
const ANSWER: libc::timeval = libc::timeval {
    tv_sec: 2,
    tv_usec: 0,
};
/// Most sockets one dump returns before it is given up (far beyond any host's).
const MAX_SOCKETS: usize = 1 << 22;

/// Every TCP socket of `family` (`AF_INET`, `AF_INET6`) in this network namespace, in
/// any state, with its owner and inode.
///
/// # Errors
/// The kernel has no `sock_diag` for TCP (no `inet_diag`), refuses, or does not answer.
pub(super) fn tcp_sockets(family: libc::c_int) -> io::Result<Vec<Socket>> {
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let answer = ANSWER;
    // SAFETY: SO_RCVTIMEO with a timeval of the right size.
    let set = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const answer).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    let request = request(family);
    // SAFETY: sends the bytes of `request`; the kernel is the default destination.
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 << 10];
    let mut sockets = Vec::new();
    loop {
        // SAFETY: receives into `buf`, as long as it says.
        let got = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "sock_diag did not answer within 2 s",
                ));
            }
            return Err(e);
        }
        let got = usize::try_from(got).unwrap_or_default();
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "sock_diag closed",
            ));
        }
        if parse(&buf[..got], &mut sockets)? {
            return Ok(sockets);
        }
        if sockets.len() > MAX_SOCKETS {
            return Err(io::Error::other(format!(
                "sock_diag lists more than {MAX_SOCKETS} TCP sockets"
            )));
        }
    }
}

/// The dump request of `family`'s TCP sockets in every state.
fn request(family: libc::c_int) -> [u8; HEADER + REQUEST] {
    let mut r = [0u8; HEADER + REQUEST];
    r[0..4].copy_from_slice(&((HEADER + REQUEST) as u32).to_ne_bytes());
    r[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    r[6..8].copy_from_slice(&DUMP_REQUEST.to_ne_bytes());
    r[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // struct inet_diag_req_v2: family, protocol, extensions, padding, states, sockid.
    r[HEADER] = u8::try_from(family).unwrap_or_default();
    r[HEADER + 1] = libc::IPPROTO_TCP as u8;
    r[HEADER + 4..HEADER + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
    r
}

/// Reads the netlink messages of one datagram into `out`; `true` once the dump is done.
///
/// # Errors
/// The kernel's error, or a message too short for what it says it is.
fn parse(mut data: &[u8], out: &mut Vec<Socket>) -> io::Result<bool> {
    let short = || io::Error::new(io::ErrorKind::InvalidData, "a short sock_diag message");
    while data.len() >= HEADER {
        let word =
            |at: usize| u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let len = usize::try_from(word(0)).unwrap_or(usize::MAX);
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        if len < HEADER || len > data.len() {
            return Err(short());
        }
        let body = &data[HEADER..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = body
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or_else(short)?;
                return Err(io::Error::from_raw_os_error(-code));
            }
            SOCK_DIAG_BY_FAMILY => out.push(socket(body).ok_or_else(short)?),
            _ => {}
        }
        // Messages are aligned to 4 bytes.
        data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(false)
}

/// One `struct inet_diag_msg` as a [`Socket`] (IPv4-mapped addresses in their IPv4
/// form, as in `/proc/net/tcp6`).
fn socket(m: &[u8]) -> Option<Socket> {
    let m = m.get(..MESSAGE)?;
    let word = |at: usize| u32::from_ne_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]]);
    let port = |at: usize| u16::from_be_bytes([m[at], m[at + 1]]);
    let ip = |at: usize| -> Option<IpAddr> {
        match libc::c_int::from(m[0]) {
            libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(
                m[at],
                m[at + 1],
                m[at + 2],
                m[at + 3],
            ))),
            libc::AF_INET6 => {
                let bytes: [u8; 16] = m[at..at + 16].try_into().ok()?;
                Some(IpAddr::V6(Ipv6Addr::from(bytes)).to_canonical())
            }
            _ => None,
        }
    };
    Some(Socket {
        local_addr: SocketAddr::new(ip(8)?, port(4)),
        remote_addr: SocketAddr::new(ip(24)?, port(6)),
        state: m[1],
        uid: word(64),
        inode: u64::from(word(68)),
    })
}
