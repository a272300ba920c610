//! Who is on the other end of the PMIx server's loopback connections, by evidence.
//!
//! PMIx tools and clients reach `maestro run`'s server over TCP on loopback, where
//! OpenPMIx's "native" security takes the user id a peer *claims*. The kernel knows
//! better: both ends of a loopback connection are sockets of this host, listed in
//! `/proc/net/tcp{,6}` with their owner's uid and inode. A connection to the server's port
//! whose client end belongs to another user is another user talking to the launcher,
//! whatever it claims: the host shuts the server's end of it down (libpmix then drops it
//! as a lost connection) and refuses the connection being made.

use std::io;

/// TCP state `ESTABLISHED` in `/proc/net/tcp`.
const ESTABLISHED: u8 = 0x01;

/// One line of `/proc/net/tcp`: the ports of both ends, whether it is established, and
/// the owner and inode of this end's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Socket {
    local: u16,
    remote: u16,
    state: u8,
    uid: u32,
    inode: u64,
}

/// Parses the text of `/proc/net/tcp` or `/proc/net/tcp6`; lines that do not parse are
/// skipped (the header, a future column layout).
fn sockets(text: &str) -> Vec<Socket> {
    let port = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    text.lines()
        .filter_map(|line| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let cols: Vec<&str> = line.split_whitespace().collect();
            Some(Socket {
                local: port(cols.get(1)?)?,
                remote: port(cols.get(2)?)?,
                state: u8::from_str_radix(cols.get(3)?, 16).ok()?,
                uid: cols.get(7)?.parse().ok()?,
                inode: cols.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// Another user's connection to the server: who, and the inode of the server's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Intruder {
    /// The owner of the client end.
    pub(super) uid: u32,
    /// The server end's socket inode (`/proc/self/fd/*` -> `socket:[inode]`).
    server_end: u64,
}

/// The established connections to local `port` whose client end belongs to a uid other
/// than `me`, from the sockets of one table.
fn intruders_in(table: &[Socket], port: u16, me: u32) -> Vec<Intruder> {
    table
        .iter()
        .filter(|c| c.state == ESTABLISHED && c.remote == port && c.uid != me)
        .filter_map(|client| {
            let server = table
                .iter()
                .find(|s| s.local == port && s.remote == client.local)?;
            Some(Intruder {
                uid: client.uid,
                server_end: server.inode,
            })
        })
        .collect()
}

/// Other users' connections to local TCP `port` (IPv4 and IPv6).
///
/// # Errors
/// `/proc/net/tcp` cannot be read (then nothing can be proven: callers refuse).
pub(super) fn intruders(port: u16, me: u32) -> io::Result<Vec<Intruder>> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match std::fs::read_to_string(table) {
            Ok(text) => found.extend(intruders_in(&sockets(&text), port, me)),
            // No IPv6 in this kernel: nothing connected over it.
            Err(e) if table.ends_with('6') && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(found)
}

/// Shuts down the server's end of each intruder's connection (both directions): the
/// intruder sees the connection end and libpmix drops it as a lost peer. The descriptor
/// stays libpmix's to close. Returns how many were found among this process's descriptors.
pub(super) fn cut_off(intruders: &[Intruder]) -> usize {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut cut = 0;
    for entry in fds.filter_map(Result::ok) {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        let inode = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok());
        let fd = entry.file_name().to_string_lossy().parse::<i32>().ok();
        if let (Some(inode), Some(fd)) = (inode, fd)
            && intruders.iter().any(|i| i.server_end == inode)
        {
            // SAFETY: shutdown on a descriptor of this process only ends its connection;
            // the descriptor itself stays open for its owner (libpmix) to close.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            cut += 1;
        }
    }
    cut
}

/// TCP state `LISTEN` in `/proc/net/tcp`.
const LISTEN: u8 = 0x0A;

/// The ports this process listens on over TCP (its PMIx server's, right after
/// `PMIx_server_init`): listening sockets of `/proc/net/tcp{,6}` whose inode is one of this
/// process's descriptors.
///
/// # Errors
/// `/proc` cannot be read.
pub(super) fn own_listening_ports() -> io::Result<Vec<u16>> {
    let mine: Vec<u64> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = match std::fs::read_to_string(table) {
            Ok(t) => t,
            Err(e) if table.ends_with('6') && e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        ports.extend(
            listening(&sockets(&text))
                .filter(|s| mine.contains(&s.inode))
                .map(|s| s.local),
        );
    }
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

fn listening(table: &[Socket]) -> impl Iterator<Item = &Socket> {
    table.iter().filter(|s| s.state == LISTEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shaped as on this VM: a launcher listening on 127.0.0.1:42997 (0xA7F5) with a
    // connection from uid 0 (port 0xD2F0) and one from uid 1001 (port 0xE001), a
    // TIME_WAIT from uid 1002, and another service's connection.
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
    fn another_users_connection_is_found_with_the_servers_end() {
        let table = sockets(TCP);
        assert_eq!(table.len(), 7);
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
        let listeners: Vec<u16> = listening(&table).map(|s| s.local).collect();
        assert_eq!(listeners, vec![0xA7F5]);
        assert!(sockets("garbage\n\n1 2 3").is_empty());
    }
}
