//! Discovery of an InfiniBand fabric from this node (libibnetdisc, the library behind
//! `ibnetdiscover`): subnet-management packets sent through one of the node's adapters walk
//! every switch, adapter and router and the links between their ports. The nodes are
//! named as `ibnetdiscover` names them, so a discovered [`Topology`] is the one its dump
//! of the same fabric reads into ([`super::ibnet`]).
//!
//! libibnetdisc is opened when a fabric is first discovered ([`ibnetdisc_sys::SONAME`]);
//! a machine without it gets [`DiscoverError::Library`]. Discovery needs read and write
//! access to the adapter's `/dev/infiniband/umad*` (root, or the `rdma` group where the
//! site grants it) and a subnet manager that brought the port up.

use std::ffi::{CStr, CString, c_void};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ibnetdisc_sys::{IbNetDisc, MAD_FIELDS, ibnd_config_t, ibnd_fabric_t, ibnd_node_t};

use super::Topology;
use super::ibnet::{PortLink, Record, build};

/// Most nodes a discovered fabric may have (the largest fabrics have tens of thousands).
pub const MAX_NODES: usize = 1 << 20;

/// How to discover: through which adapter and port, and how long to wait at most.
#[derive(Clone, Debug)]
pub struct Discovery {
    /// The adapter (`mlx5_0`); `None`: the first with an active port, as ibnetdiscover.
    pub ca: Option<String>,
    /// Its port; `None`: the first active one.
    pub port: Option<u8>,
    /// Longest the whole discovery may take.
    pub timeout: Duration,
}

impl Default for Discovery {
    fn default() -> Discovery {
        Discovery {
            ca: None,
            port: None,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Why a fabric could not be discovered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoverError {
    /// libibnetdisc could not be opened.
    #[error(
        "cannot load {soname} ({why}): InfiniBand discovery needs rdma-core's libibnetdisc (apt-get install libibnetdisc5), or give the fabric as a file (--fabric)",
        soname = ibnetdisc_sys::SONAME
    )]
    Library {
        /// The loader's message.
        why: String,
    },
    /// An adapter name with a NUL byte.
    #[error("adapter name {0:?} has a NUL byte: give a name as ibstat lists them (mlx5_0)")]
    BadCa(String),
    /// libibnetdisc found no fabric through the adapter.
    #[error(
        "no InfiniBand fabric discovered through {through}: is there an adapter with an active port (ibstat), a subnet manager running, and read-write access to /dev/infiniband/umad* (root or the rdma group)?"
    )]
    Failed {
        /// The adapter and port asked for (`the first active port` when none was).
        through: String,
    },
    /// Discovery took longer than allowed.
    #[error(
        "InfiniBand discovery did not finish within {0:?}: the fabric is large or a part of it does not answer; give a longer timeout or the fabric as a file (--fabric)"
    )]
    Timeout(Duration),
    /// The fabric has more nodes than [`MAX_NODES`].
    #[error("the discovered fabric has more than {MAX_NODES} nodes")]
    TooLarge,
    /// A port linked to a node the discovery did not return.
    #[error("the discovered fabric is inconsistent: {0}")]
    Inconsistent(String),
}

/// A discovered fabric and what discovering it took.
#[derive(Clone, Debug)]
pub struct Discovered {
    /// The fabric.
    pub topology: Topology,
    /// How long libibnetdisc took.
    pub took: Duration,
}

/// Discovers the fabric this node's adapter is on.
///
/// Runs libibnetdisc on a thread of its own so that [`Discovery::timeout`] bounds the wait
/// whatever the fabric does; a discovery given up finishes (or times out in libibnetdisc)
/// on that thread and is thrown away.
///
/// # Errors
/// [`DiscoverError`]: no library, no fabric through the adapter, too slow, too large.
pub fn discover(how: &Discovery) -> Result<Discovered, DiscoverError> {
    let lib = library()?;
    let ca = (how.ca.clone())
        .map(|c| CString::new(c.clone()).map_err(|_| DiscoverError::BadCa(c)))
        .transpose()?;
    let port = how.port;
    let through = match (&how.ca, port) {
        (Some(c), Some(p)) => format!("{c} port {p}"),
        (Some(c), None) => format!("{c} (its first active port)"),
        (None, Some(p)) => format!("port {p} of the first adapter"),
        (None, None) => "the first active adapter port".into(),
    };
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("ibnd-discover".into())
        .spawn(move || {
            let started = Instant::now();
            // SAFETY: `lib` is loaded for the life of the process; `ca` outlives the call.
            let found = unsafe { walk(lib, ca.as_ref(), port) };
            let _ = tx.send(found.map(|t| (t, started.elapsed())));
        })
        .map_err(|e| DiscoverError::Inconsistent(format!("cannot start a thread: {e}")))?;
    let (records, took) = match rx.recv_timeout(how.timeout) {
        Ok(Ok(found)) => found,
        Ok(Err(Walk::Failed)) => return Err(DiscoverError::Failed { through }),
        Ok(Err(Walk::TooLarge)) => return Err(DiscoverError::TooLarge),
        Err(_) => return Err(DiscoverError::Timeout(how.timeout)),
    };
    let topology = build(&records).map_err(|e| DiscoverError::Inconsistent(e.to_string()))?;
    Ok(Discovered { topology, took })
}

/// libibnetdisc, opened once for the life of the process.
fn library() -> Result<&'static IbNetDisc, DiscoverError> {
    static LIB: OnceLock<Result<IbNetDisc, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: opening a shared library runs its constructors; rdma-core's set up no
        // signal handlers and no threads.
        unsafe { IbNetDisc::new(ibnetdisc_sys::SONAME) }.map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|why| DiscoverError::Library { why: why.clone() })
}

/// Why a walk returned nothing.
enum Walk {
    Failed,
    TooLarge,
}

/// The fabric discovered through `ca` (`None`: the first adapter) and `port`, as records
/// in ibnetdiscover's order (switches, adapters, routers).
///
/// # Safety
/// `lib` is a loaded libibnetdisc.
unsafe fn walk(
    lib: &IbNetDisc,
    ca: Option<&CString>,
    port: Option<u8>,
) -> Result<Vec<Record>, Walk> {
    let mut config = ibnd_config_t::default();
    let name = ca.map_or(std::ptr::null_mut(), |c| c.as_ptr().cast_mut());
    // SAFETY: `name` is NULL or a NUL-terminated string libibnetdisc only reads; no
    // starting point (`from`: this node); `config` is zeroed (each field its default).
    let fabric = unsafe {
        lib.ibnd_discover_fabric(
            name,
            i32::from(port.unwrap_or(0)),
            std::ptr::null_mut(),
            &mut config,
        )
    };
    if fabric.is_null() {
        return Err(Walk::Failed);
    }
    // SAFETY: a fabric libibnetdisc returned, read before it is destroyed.
    let records = unsafe { records(lib, fabric) };
    // SAFETY: destroyed once, nothing of it kept (the records own their strings).
    unsafe { lib.ibnd_destroy_fabric(fabric) };
    records
}

/// The nodes of `fabric` as records.
///
/// # Safety
/// `fabric` is a live fabric of `lib`.
unsafe fn records(lib: &IbNetDisc, fabric: *const ibnd_fabric_t) -> Result<Vec<Record>, Walk> {
    let mut by_kind: [Vec<Record>; 3] = Default::default();
    let mut seen = 0usize;
    // SAFETY: the fabric's node list is NULL-terminated and lives as long as the fabric.
    let mut node = unsafe { (*fabric).nodes };
    while !node.is_null() {
        seen += 1;
        if seen > MAX_NODES {
            return Err(Walk::TooLarge);
        }
        // SAFETY: a node of the list.
        let n = unsafe { &*node };
        let (kind, switch) = match n.type_ as u32 {
            ibnetdisc_sys::MAD_NODE_TYPE_IB_NODE_SWITCH => (0, true),
            ibnetdisc_sys::MAD_NODE_TYPE_IB_NODE_CA => (1, false),
            _ => (2, true),
        };
        // SAFETY: as above, for each of the node's linked ports.
        let ports = unsafe { ports(lib, n) };
        by_kind[kind].push(Record {
            id: id(n),
            switch,
            description: text(&n.nodedesc),
            ports,
        });
        node = n.next;
    }
    Ok(by_kind.into_iter().flatten().collect())
}

/// The linked ports of `n` (port 0, a switch's own management port, never is).
///
/// # Safety
/// `n` is a node of a live fabric of `lib`.
unsafe fn ports(lib: &IbNetDisc, n: &ibnd_node_t) -> Vec<PortLink> {
    if n.ports.is_null() {
        return Vec::new();
    }
    let count = n.numports.clamp(0, i32::from(u8::MAX));
    let mut out = Vec::new();
    for i in 1..=count as usize {
        // SAFETY: `ports` has `numports + 1` entries, each NULL or a port of the fabric.
        let p = unsafe { *n.ports.add(i) };
        if p.is_null() {
            continue;
        }
        // SAFETY: a port of the fabric; its remote port and that port's node too.
        let (p, remote) = unsafe { (&*p, (*p).remoteport) };
        if remote.is_null() {
            continue;
        }
        // SAFETY: as above.
        let (remote, remote_node) = unsafe { (&*remote, (*remote).node) };
        if remote_node.is_null() {
            continue;
        }
        let (Ok(local), Ok(remote_port)) = (u8::try_from(p.portnum), u8::try_from(remote.portnum))
        else {
            continue;
        };
        out.push(PortLink {
            local,
            // SAFETY: as above.
            remote: id(unsafe { &*remote_node }),
            remote_port,
            // SAFETY: `info` is the port's PortInfo record, which mad_get_field decodes.
            rate: unsafe { rate(lib, p.info.as_ptr()) },
            line: 0,
        });
    }
    out
}

/// A node's id as ibnetdiscover writes it.
fn id(n: &ibnd_node_t) -> String {
    let prefix = match n.type_ as u32 {
        ibnetdisc_sys::MAD_NODE_TYPE_IB_NODE_SWITCH => 'S',
        ibnetdisc_sys::MAD_NODE_TYPE_IB_NODE_CA => 'H',
        _ => 'R',
    };
    format!("{prefix}-{:016x}", n.guid)
}

/// A fixed C string field (NUL-terminated within it, or all of it).
fn text(field: &[std::ffi::c_char]) -> String {
    // SAFETY: reinterpreting c_char as u8, same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(field.as_ptr().cast::<u8>(), field.len()) };
    match CStr::from_bytes_until_nul(bytes) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// The active width and speed of the port whose PortInfo is `info`, as ibnetdiscover
/// writes them (`4xSDR`, `4xHDR`).
///
/// # Safety
/// `info` is a PortInfo record (`IB_SMP_DATA_SIZE` bytes).
unsafe fn rate(lib: &IbNetDisc, info: *const u8) -> Option<String> {
    let field = |f: MAD_FIELDS| {
        // SAFETY: mad_get_field reads the field at its fixed offset within the record.
        unsafe { lib.mad_get_field(info.cast_mut().cast::<c_void>(), 0, f) }
    };
    // PortInfo's CapabilityMask bit 14: extended link speeds are supported.
    const HAS_EXT_SPEEDS: u32 = 1 << 14;
    let ext = if field(MAD_FIELDS::IB_PORT_CAPMASK_F) & HAS_EXT_SPEEDS != 0 {
        field(MAD_FIELDS::IB_PORT_LINK_SPEED_EXT_ACTIVE_F)
    } else {
        0
    };
    link_rate(
        field(MAD_FIELDS::IB_PORT_LINK_WIDTH_ACTIVE_F),
        field(MAD_FIELDS::IB_PORT_LINK_SPEED_ACTIVE_F),
        ext,
    )
}

/// `4xSDR` from PortInfo's LinkWidthActive, LinkSpeedActive and LinkSpeedExtActive
/// values; `None` for values the standard does not define.
fn link_rate(width: u32, speed: u32, ext: u32) -> Option<String> {
    let width = match width {
        1 => "1x",
        2 => "4x",
        4 => "8x",
        8 => "12x",
        16 => "2x",
        _ => return None,
    };
    let speed = match (ext, speed) {
        (1, _) => "FDR",
        (2, _) => "EDR",
        (4, _) => "HDR",
        (8, _) => "NDR",
        (16, _) => "XDR",
        (_, 1) => "SDR",
        (_, 2) => "DDR",
        (_, 4) => "QDR",
        _ => return None,
    };
    Some(format!("{width}{speed}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_ibnetdiscover_writes_them() {
        assert_eq!(link_rate(2, 1, 0).as_deref(), Some("4xSDR"));
        assert_eq!(link_rate(2, 4, 4).as_deref(), Some("4xHDR"));
        assert_eq!(link_rate(8, 2, 0).as_deref(), Some("12xDDR"));
        assert_eq!(link_rate(16, 4, 8).as_deref(), Some("2xNDR"));
        assert_eq!(link_rate(3, 1, 0), None, "no such width");
        assert_eq!(link_rate(2, 0, 0), None, "no speed");
    }

    #[test]
    fn node_descriptions_end_at_their_nul() {
        let mut field = [0 as std::ffi::c_char; 8];
        for (d, s) in field.iter_mut().zip(b"n1 mlx") {
            *d = *s as std::ffi::c_char;
        }
        assert_eq!(text(&field), "n1 mlx");
        let full = [b'x' as std::ffi::c_char; 4];
        assert_eq!(text(&full), "xxxx", "unterminated: all of it");
    }
}
