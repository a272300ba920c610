//! Who is on the other end of the PMIx server's loopback connections, by evidence.
//!
//! PMIx tools and clients reach `maestro run`'s server over TCP on loopback, where
//! OpenPMIx's "native" security takes the user id a peer *claims*. The kernel knows
//! better: both ends of a loopback connection are sockets of this host, listed in its TCP
//! socket table ([`pool::peers::tables`]) with their owner's uid and inode. A connection
//! to the server's port
//! whose client end belongs to another user is another user talking to the launcher,
//! whatever it claims: the host shuts the server's end of it down (libpmix then drops it
//! as a lost connection) and refuses the connection being made.

use std::io;

use pool::peers::Intruder;

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

/// The ports this process listens on over TCP (its PMIx server's, right after
/// `PMIx_server_init`).
///
/// # Errors
/// `/proc` cannot be read.
pub(super) fn own_listening_ports() -> io::Result<Vec<u16>> {
    let mut ports: Vec<u16> = pool::peers::listening_of(std::path::Path::new("/proc/self/fd"))?
        .into_iter()
        .map(|a| a.port())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}
