//! What the PM listens on: TCP addresses and a private Unix socket (whose peers' processes
//! are known), bound at start, and the loop that accepts connections on each.

use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::PmConfig;
use super::identity::PeerUser;
use crate::admission::{Peer, Throttle};
use crate::bootstrap::ControlAddr;

/// Binds what `config` asks for: the private Unix socket (when asked and possible) and
/// every TCP address; addresses given port 0 share one port where they can, so the PM
/// info names one. Returns the listeners, the endpoints to advertise (for an unspecified
/// address: every interface that is up but those of
/// [`PmConfig::exclude_interfaces`]) and the Unix socket's directory.
///
/// # Errors
/// The OS error of an address that cannot be bound, naming it.
pub(super) fn bind(
    config: &PmConfig,
    rt: &tokio::runtime::Runtime,
) -> std::io::Result<(Vec<Listener>, Vec<ControlAddr>, Option<std::path::PathBuf>)> {
    let mut listeners = Vec::new();
    let mut endpoints = Vec::new();
    let mut unix_dir = None;
    if config.unix_socket
        && let Some((dir, addr, listener)) = unix_listener(rt)
    {
        if config.max_rings > 0 {
            listeners.extend(rings_listener(rt, &dir));
        }
        unix_dir = Some(dir);
        endpoints.push(addr);
        listeners.push(listener);
    }
    // Addresses given port 0 share one port where they can: the info then names one.
    let mut shared_port = None;
    for addr in &config.listen {
        let same = shared_port.filter(|_| addr.port() == 0).and_then(|port| {
            rt.block_on(TcpListener::bind(SocketAddr::new(addr.ip(), port)))
                .ok()
        });
        let l = match same {
            Some(l) => l,
            None => rt.block_on(TcpListener::bind(addr)).map_err(|e| {
                std::io::Error::new(e.kind(), format!("pool manager listening on {addr}: {e}"))
            })?,
        };
        let bound = l.local_addr()?;
        if addr.port() == 0 {
            shared_port.get_or_insert(bound.port());
        }
        if bound.ip().is_unspecified() {
            // Listening everywhere: advertise every interface that is up and not kept
            // free of the pool's traffic.
            for ip in inventory::netif::interface_addresses(&config.exclude_interfaces)? {
                endpoints.push(SocketAddr::new(ip, bound.port()).into());
            }
        } else {
            endpoints.push(bound.into());
        }
        listeners.push(Listener::Tcp(l));
    }
    Ok((listeners, endpoints, unix_dir))
}

/// A listener of either kind.
pub(super) enum Listener {
    Tcp(TcpListener),
    /// The Unix socket; `rings`: the one beside it whose connections are offered
    /// shared-memory rings at once ([`crate::ring`]).
    Unix {
        listener: UnixListener,
        rings: bool,
    },
}

impl Listener {
    /// The next connection, with a description of the peer.
    async fn accept(&self) -> std::io::Result<Accepted> {
        match self {
            Listener::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                crate::liveness::probe(&stream);
                let server = stream.local_addr()?;
                Ok((
                    Stream::Tcp(stream),
                    peer.to_string(),
                    Peer::Tcp(peer.ip().to_canonical()),
                    PeerUser::Tcp { server, peer },
                ))
            }
            Listener::Unix { listener, rings } => {
                let (stream, _) = listener.accept().await?;
                // The kernel's word on the peer process: a JOIN on this connection may
                // announce that process's memory only, and must be of the PM's user.
                let cred = stream.peer_cred().ok();
                let pid = cred
                    .and_then(|c| c.pid())
                    .and_then(|p| u32::try_from(p).ok());
                Ok((
                    Stream::Unix {
                        stream,
                        rings: *rings,
                    },
                    "the unix socket".into(),
                    Peer::Local(pid),
                    PeerUser::Known(cred.map(|c| c.uid())),
                ))
            }
        }
    }
}

/// An accepted connection's stream: one of the rings' Unix socket moves to shared-memory
/// rings before it joins, if the PM grants them (see [`crate::ring`]).
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix { stream: UnixStream, rings: bool },
}

/// An accepted connection: its stream, a description of the peer for the log, who it is
/// for admission, and where its user is learnt.
pub(super) type Accepted = (Stream, String, Peer, PeerUser);

/// The prefix of a pool manager's socket directory (`pm-<pid>-<tag>` in the user's
/// private directory, [`safefs::user_dir`]).
pub const PM_DIR_PREFIX: &str = "pm-";

/// The socket's name in that directory.
pub(super) const SOCKET_NAME: &str = "pm.sock";

/// Creates a private directory with a listening Unix socket in it, inside the user's
/// private directory (after removing those that killed pool managers left); `None` (with
/// a warning naming why) when that is not possible, for the PM then serves over TCP only.
pub(super) fn unix_listener(
    rt: &tokio::runtime::Runtime,
) -> Option<(std::path::PathBuf, ControlAddr, Listener)> {
    let base = match safefs::user_dir() {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("pool manager: no unix socket ({e}); TCP only");
            return None;
        }
    };
    crate::stale::sweep_dead_process_dirs(&base, PM_DIR_PREFIX);
    let mut tag = [0u8; 6];
    getrandom::fill(&mut tag).ok()?;
    let dir = base.join(format!(
        "{PM_DIR_PREFIX}{}-{}",
        std::process::id(),
        hex::encode(tag)
    ));
    let path = dir.join(SOCKET_NAME);
    let made = safefs::new_private_dir(&dir).map_err(safefs::Error::into_io);
    let _guard = rt.enter();
    match made.and_then(|()| UnixListener::bind(&path)) {
        Ok(listener) => Some((
            dir,
            ControlAddr::Unix(path),
            Listener::Unix {
                listener,
                rings: false,
            },
        )),
        Err(e) => {
            tracing::warn!(
                "pool manager: no unix socket at {} ({e}); TCP only",
                path.display()
            );
            let _ = std::fs::remove_dir_all(&dir);
            None
        }
    }
}

/// The rings' socket in the PM's socket directory `dir` (see [`crate::ring`]); `None`
/// (with a warning naming why) when it cannot be bound: apps then stay on the socket.
fn rings_listener(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> Option<Listener> {
    let path = dir.join(crate::ring::SOCKET_NAME);
    let _guard = rt.enter();
    match UnixListener::bind(&path) {
        Ok(listener) => Some(Listener::Unix {
            listener,
            rings: true,
        }),
        Err(e) => {
            tracing::warn!(
                "pool manager: no shared-memory connections ({}: {e})",
                path.display()
            );
            None
        }
    }
}

pub(super) async fn accept_loop(listener: Listener, to: mpsc::UnboundedSender<Accepted>) {
    let mut failures = Throttle::new(std::time::Duration::from_secs(10), 1);
    loop {
        match listener.accept().await {
            Ok(conn) => {
                if to.send(conn).is_err() {
                    return;
                }
            }
            Err(e) => {
                // Out of descriptors and the like: log (rarely), breathe, go on.
                if let Some(held) = failures.admit(Instant::now()) {
                    tracing::warn!("pool manager accept: {e} ({held} more failures held back)");
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
