//! Liveness of control connections by evidence: a peer is dead when its connection closes
//! (its process died: the kernel closes the socket at once) or when it stops answering the
//! kernel's keepalive probes (a node lost without a word). TCP keepalive makes the second
//! visible: after [`IDLE`] without traffic the kernel probes every [`INTERVAL`], and
//! [`PROBES`] unanswered probes end the connection, which the PM then handles as an app
//! that died (about 25 s after the node went silent). A busy or slow peer answers probes
//! from its kernel whatever its processes do, so it is never taken for dead.

use std::os::fd::AsRawFd;

/// Seconds without traffic before the first probe.
pub const IDLE: i32 = 10;
/// Seconds between probes.
pub const INTERVAL: i32 = 5;
/// Unanswered probes that end the connection.
pub const PROBES: i32 = 3;

/// Turns keepalive probing on for a TCP connection (see the module docs). Failures are
/// logged: the connection still works, it just cannot tell a silent node.
pub(crate) fn probe(stream: &impl AsRawFd) {
    let fd = stream.as_raw_fd();
    let set = |level: i32, name: i32, value: i32| {
        // SAFETY: setsockopt on a socket the caller owns, with an int of the right size.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&raw const value).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        }
    };
    let ok = set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1) == 0
        && set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, IDLE) == 0
        && set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, INTERVAL) == 0
        && set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, PROBES) == 0;
    if !ok {
        tracing::debug!(
            "TCP keepalive not set on a control connection: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_is_on_with_the_documented_timing() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let s = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("c");
        probe(&s);
        let get = |level: i32, name: i32| {
            let mut v: i32 = 0;
            let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
            // SAFETY: getsockopt into an int of the right size.
            let rc = unsafe {
                libc::getsockopt(s.as_raw_fd(), level, name, (&raw mut v).cast(), &mut len)
            };
            assert_eq!(rc, 0);
            v
        };
        assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), IDLE);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), INTERVAL);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT), PROBES);
    }
}
