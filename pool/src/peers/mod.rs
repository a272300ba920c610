//! Who is on the other end of a TCP connection from this host, by the kernel's word.
//!
//! Both ends of a connection between two processes of this host (over loopback or any of
//! its addresses) are sockets the kernel lists with their owner's uid and inode (through
//! `sock_diag` netlink, else `/proc/net/tcp{,6}`); a peer on another host has no
//! line there. A server that must know which
//! local user connected (the pool manager admitting a JOIN over TCP on loopback, `maestro
//! run`'s PMIx server, whose OpenPMIx believes the uid a TCP peer *claims*) reads it here
//! instead of trusting what the peer says. The tables are those of the reading process's
//! network namespace, the one its sockets live in.

mod diag;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// TCP state `ESTABLISHED` in `/proc/net/tcp`.
pub const ESTABLISHED: u8 = 0x01;
/// TCP state `LISTEN` in `/proc/net/tcp`.
pub const LISTEN: u8 = 0x0A;

/// One line of `/proc/net/tcp`: the addresses of both ends, the state, and the owner and
/// inode of this end's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Socket {
    /// This end's address (IPv4-mapped IPv6 addresses in their IPv4 form).
    pub local_addr: SocketAddr,
    /// The other end's address.
    pub remote_addr: SocketAddr,
    /// The TCP state ([`ESTABLISHED`], [`LISTEN`], ...).
    pub state: u8,
    /// The uid owning this end.
    pub uid: u32,
    /// This end's socket inode (`/proc/<pid>/fd/*` -> `socket:[inode]`).
    pub inode: u64,
}

/// Parses the text of `/proc/net/tcp` or `/proc/net/tcp6`; lines that do not parse are
/// skipped (the header, a future column layout).
#[must_use]
pub fn sockets(text: &str) -> Vec<Socket> {
    text.lines()
        .filter_map(|line| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (local_addr, remote_addr) = (address(cols.get(1)?)?, address(cols.get(2)?)?);
            Some(Socket {
                local_addr,
                remote_addr,
                state: u8::from_str_radix(cols.get(3)?, 16).ok()?,
                uid: cols.get(7)?.parse().ok()?,
                inode: cols.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// An address of `/proc/net/tcp{,6}`: hex of the address as the kernel stores it (32-bit
/// words in host order) and of the port.
fn address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        ip.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?.to_ne_bytes())),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes)).to_canonical()
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The IPv4 and IPv6 tables (the second empty where the kernel has no IPv6): from
/// `sock_diag` netlink, or where the kernel has none, `/proc/net/tcp{,6}`.
///
/// # Errors
/// A table cannot be read: nothing can be proven from it.
pub fn tables() -> io::Result<[Vec<Socket>; 2]> {
    match (
        diag::tcp_sockets(libc::AF_INET),
        diag::tcp_sockets(libc::AF_INET6),
    ) {
        (Ok(v4), Ok(v6)) => return Ok([v4, v6]),
        (Ok(v4), Err(e)) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            return Ok([v4, Vec::new()]);
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::debug!("TCP sockets from /proc/net/tcp (sock_diag: {e})");
        }
    }
    proc_tables()
}

/// [`tables`] from `/proc/net/tcp{,6}`.
///
/// # Errors
/// A table cannot be read.
fn proc_tables() -> io::Result<[Vec<Socket>; 2]> {
    let v4 = sockets(&std::fs::read_to_string("/proc/net/tcp")?);
    let v6 = match std::fs::read_to_string("/proc/net/tcp6") {
        Ok(text) => sockets(&text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok([v4, v6])
}

/// Another user's connection to the server: who, and the inode of the server's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intruder {
    /// The owner of the client end.
    pub uid: u32,
    /// The server end's socket inode (`/proc/self/fd/*` -> `socket:[inode]`).
    pub server_end: u64,
}

/// Whether `s` is a connection's end a process holds, in any TCP state (established,
/// half-closed, closing): a `TIME_WAIT` line or an orphaned end has inode 0 and names no
/// owner (its uid column reads 0, which is not root's word).
fn owned_connection(s: &Socket) -> bool {
    s.inode != 0 && s.state != LISTEN
}

/// The connections to local `port`, in any state a process still holds, whose client end
/// belongs to a uid other than `me`, from the sockets of one table.
fn intruders_in(table: &[Socket], port: u16, me: u32) -> Vec<Intruder> {
    table
        .iter()
        .filter(|c| owned_connection(c) && c.remote_addr.port() == port && c.uid != me)
        .filter_map(|client| {
            let server = table
                .iter()
                .find(|s| s.local_addr.port() == port && s.remote_addr == client.local_addr)?;
            Some(Intruder {
                uid: client.uid,
                server_end: server.inode,
            })
        })
        .collect()
}

/// Other users' connections to this host's TCP `port` (IPv4 and IPv6).
///
/// # Errors
/// `/proc/net/tcp` cannot be read (then nothing can be proven: callers refuse).
pub fn intruders(port: u16, me: u32) -> io::Result<Vec<Intruder>> {
    Ok(tables()?
        .iter()
        .flat_map(|t| intruders_in(t, port, me))
        .collect())
}

/// The listening sockets of `table`.
pub fn listening(table: &[Socket]) -> impl Iterator<Item = &Socket> {
    table.iter().filter(|s| s.state == LISTEN)
}

/// The TCP addresses a process listens on: the listening sockets of `/proc/net/tcp{,6}`
/// whose inode is one of the descriptors in `fds` (`/proc/self/fd`, `/proc/PID/fd`).
///
/// # Errors
/// `fds` or the tables cannot be read.
pub fn listening_of(fds: &std::path::Path) -> io::Result<Vec<SocketAddr>> {
    let inodes: Vec<u64> = std::fs::read_dir(fds)?
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect();
    Ok(tables()?
        .iter()
        .flat_map(|t| {
            listening(t)
                .filter(|s| inodes.contains(&s.inode))
                .map(|s| s.local_addr)
                .collect::<Vec<_>>()
        })
        .collect())
}

/// The owner of the client end, in `table`, of the connection from `peer` to `server`, in
/// any state a process still holds it (a peer that shut its writing half down is still
/// its owner's); `None` if no socket of this host is that end.
#[must_use]
pub fn client_uid(table: &[Socket], server: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let (server, peer) = (canonical(server), canonical(peer));
    table
        .iter()
        .find(|s| owned_connection(s) && s.local_addr == peer && s.remote_addr == server)
        .map(|s| s.uid)
}

/// Who is at the other end of a TCP connection, by the kernel's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEnd {
    /// A process of this host owned by this uid.
    Owner(u32),
    /// A peer on another host: its users are not this kernel's to name.
    Remote,
    /// A peer on one of this host's own addresses whose end no process holds any more (it
    /// closed, or its line is gone): nothing proves who it was, so it is nobody's.
    Unmatched,
}

/// Who is at the other end of the connection accepted on `server` from `peer`: the uid
/// of the process of this host that holds it, a peer of another host, or a local end that
/// cannot be matched to an owner (see [`PeerEnd`]). `local` says whether an address is
/// one of this host's.
///
/// # Errors
/// `/proc/net/tcp{,6}` cannot be read.
pub fn peer_end(
    server: SocketAddr,
    peer: SocketAddr,
    local: impl Fn(IpAddr) -> bool,
) -> io::Result<PeerEnd> {
    // A client of a dual-stack listener may sit in either table (an IPv4 socket shows
    // in `tcp` though the server's end is IPv4-mapped in `tcp6`): both are searched.
    if let Some(uid) = tables()?.iter().find_map(|t| client_uid(t, server, peer)) {
        return Ok(PeerEnd::Owner(uid));
    }
    let ip = peer.ip().to_canonical();
    Ok(
        if ip.is_loopback() || ip == server.ip().to_canonical() || local(ip) {
            PeerEnd::Unmatched
        } else {
            PeerEnd::Remote
        },
    )
}

/// Whether `ip` is an address of one of this host's interfaces (or loopback); an error
/// reading the interfaces counts as "yes" (the caller then refuses what it cannot prove).
#[must_use]
pub fn is_host_address(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    ip.is_loopback()
        || inventory::netif::all_addresses().map_or(true, |all| {
            all.iter().any(|a| a.address.to_canonical() == ip)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped as on this VM: a server listening on 127.0.0.1:42997 (0xA7F5) with a
    /// connection from uid 0 (port 0xD2F0) and one from uid 1001 (port 0xE001), a
    /// TIME_WAIT from uid 1002, and another service's connection.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A7F5 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A7F5 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 81240 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D2F0 0100007F:A7F5 01 00000000:00000000 00:00000000 00000000     0        0 81239 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:E001 0100007F:A7F5 01 00000000:00000000 00:00000000 00000000  1001        0 81301 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:A7F5 0100007F:E001 01 00000000:00000000 00:00000000 00000000     0        0 81302 1 0000000000000000 20 4 30 10 -1
   5: 0100007F:E002 0100007F:A7F5 06 00000000:00000000 03:00000C2A 00000000  1002        0 0 3 0000000000000000
   6: 0100007F:1F90 0100007F:E003 01 00000000:00000000 00:00000000 00000000  1003        0 81400 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn the_client_end_names_its_owner() {
        let table = sockets(TCP);
        assert_eq!(table.len(), 7);
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let server = at(0xA7F5);
        assert_eq!(table[1].local_addr, server);
        assert_eq!(client_uid(&table, server, at(0xD2F0)), Some(0));
        assert_eq!(client_uid(&table, server, at(0xE001)), Some(1001));
        // An IPv4-mapped server address is the same address.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:42997".parse().expect("addr");
        assert_eq!(client_uid(&table, mapped, at(0xE001)), Some(1001));
        // TIME_WAIT (inode 0, "uid 0") is not a live peer; an unknown port or another
        // host is nobody.
        assert_eq!(client_uid(&table, server, at(0xE002)), None);
        assert_eq!(client_uid(&table, server, at(1)), None);
        let remote = SocketAddr::from(([10, 0, 0, 1], 0xE001));
        assert_eq!(client_uid(&table, server, remote), None);
        assert!(sockets("garbage\n\n1 2 3").is_empty());
        // IPv6: ::1 as the kernel prints it.
        let v6 = sockets(
            "0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:A7F5 01 0:0 0:0 0 1000 0 77 1",
        );
        assert_eq!(v6[0].local_addr, "[::1]:8080".parse().expect("addr"));
    }

    #[test]
    fn another_users_connection_is_found_with_the_servers_end() {
        let table = sockets(TCP);
        assert_eq!(
            intruders_in(&table, 0xA7F5, 0),
            vec![Intruder {
                uid: 1001,
                server_end: 81302
            }]
        );
        // Seen from uid 1001's side, root's connection is the intruder.
        assert_eq!(
            intruders_in(&table, 0xA7F5, 1001),
            vec![Intruder {
                uid: 0,
                server_end: 81240
            }]
        );
        assert!(intruders_in(&table, 1, 0).is_empty());
        let listeners: Vec<u16> = listening(&table).map(|s| s.local_addr.port()).collect();
        assert_eq!(listeners, vec![0xA7F5]);
    }

    #[test]
    fn a_real_local_connection_is_this_users() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(server.local_addr().expect("addr")).expect("connect");
        let (_accepted, peer) = server.accept().expect("accept");
        assert_eq!(peer, client.local_addr().expect("addr"));
        let here = server.local_addr().expect("addr");
        let end = |peer| peer_end(here, peer, is_host_address).expect("tables");
        assert_eq!(end(peer), PeerEnd::Owner(safefs::euid()));
        // Half-closed: still its owner's.
        client
            .shutdown(std::net::Shutdown::Write)
            .expect("shutdown");
        assert_eq!(end(peer), PeerEnd::Owner(safefs::euid()));
        let elsewhere: SocketAddr = "10.1.2.3:4000".parse().expect("addr");
        assert_eq!(
            peer_end(here, elsewhere, |_| false).expect("tables"),
            PeerEnd::Remote
        );
        // A loopback port nobody holds, or an address the host has: unmatched.
        let gone: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        assert_eq!(end(gone), PeerEnd::Unmatched);
        assert_eq!(
            peer_end(here, elsewhere, |_| true).expect("tables"),
            PeerEnd::Unmatched
        );
    }

    #[test]
    fn a_half_closed_or_closing_end_is_still_its_owners() {
        // uid 1001's end in FIN_WAIT2 (05) after shutdown(SHUT_WR), the server's end in
        // CLOSE_WAIT (08): found, and found as an intruder.
        let table = sockets(
            "0: 0100007F:E001 0100007F:A7F5 05 0:0 0:0 0 1001 0 81301 1\n1: 0100007F:A7F5 0100007F:E001 08 0:0 0:0 0 0 0 81302 1\n",
        );
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(client_uid(&table, at(0xA7F5), at(0xE001)), Some(1001));
        assert_eq!(
            intruders_in(&table, 0xA7F5, 0),
            vec![Intruder {
                uid: 1001,
                server_end: 81302
            }]
        );
    }

    /// The kernel's two listings agree: a listener and both ends of a connection to it,
    /// with their owner and inodes, as netlink and `/proc/net/tcp` give them.
    #[test]
    fn netlink_and_proc_list_the_same_sockets() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = listener.local_addr().expect("addr");
        let client = std::net::TcpStream::connect(server).expect("connect");
        let (_accepted, peer) = listener.accept().expect("accept");
        assert_eq!(client.local_addr().expect("addr"), peer);
        let ours = |t: &[Socket]| -> Vec<Socket> {
            let mut v: Vec<Socket> = t
                .iter()
                .filter(|s| s.local_addr == server || s.remote_addr == server)
                .copied()
                .collect();
            v.sort_by_key(|s| (s.local_addr, s.remote_addr));
            v
        };
        let netlink = diag::tcp_sockets(libc::AF_INET).expect("sock_diag");
        let proc = proc_tables().expect("/proc/net/tcp");
        let listed = ours(&netlink);
        assert_eq!(listed.len(), 3, "the listener and both ends: {listed:?}");
        assert_eq!(listed, ours(&proc[0]));
        assert!(
            listed
                .iter()
                .all(|s| s.uid == safefs::euid() && s.inode != 0)
        );
        assert_eq!(
            client_uid(&netlink, server, peer),
            Some(safefs::euid()),
            "the client end names its owner"
        );
    }
}
