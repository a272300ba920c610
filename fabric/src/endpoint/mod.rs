//! An RDM endpoint with its fabric, domain, address vector and completion queue, driven by a
//! progress thread.
//!
//! Ownership (and close order): [`Endpoint`] owns a `Core` (endpoint, address vector,
//! completion queue, the registry of operations in flight) and the progress thread;
//! [`MemoryRegion`]s and the core share a `Shared` (fabric and domain), closed after the
//! last region. Dropping the `Endpoint` stops the progress thread, closes the endpoint
//! (after which the provider touches no buffer) and fails what was still in flight with
//! [`FabricError::Canceled`].
//!
//! The progress thread keeps driving progress, which providers need even on the target side
//! of a remote read (measured: a passive owner never completes a peer's `fi_read` on
//! tcp;ofi_rxm, net or shm), and fails operations past their deadline (see [`Timeouts`]).
//! How it waits is the [`ProgressMode`]. `Block` (the default): for network providers the
//! thread sleeps on the CQ's wait file descriptor (`FI_WAIT_FD`, `fi_trywait`, then `poll`
//! in 100 ms slices; `fi_cq_sread` where the provider gives no descriptor), so an idle
//! endpoint costs nothing, and once woken it keeps polling while the descriptor says the
//! provider has work and for 300 µs after: an owner serving reads sees no completions, and
//! one that slept between the requests and socket writes of a read had to be woken for
//! each (measured on tcp;ofi_rxm: 64 KiB reads 0.47-0.69 of raw sleeping, 0.80-1.44 hot);
//! shm's `fi_cq_sread` (libfabric 1.17) spins on `sched_yield` and ignores its timeout, so
//! for shared memory the thread polls `fi_cq_read`, spinning while work is in flight and
//! backing off to 1 ms sleeps when idle, woken early whenever an operation is posted.
//! `Spin`: the thread polls `fi_cq_read` without ever sleeping (yielding the CPU between
//! polls), like a dedicated progress core (see docs/benchmarks-journal.md for both modes).
//!
//! Rooms: [`Endpoint`] itself (opening, peers, timeouts) here; `info` (`fi_getinfo`, the
//! endpoint's address); `progress` (the progress thread and the operations in flight);
//! `registration` (fabric and domain kept alive by regions, keys, registration); `rma`
//! (reads and writes of remote regions); `tagged` (small tagged messages).

mod info;
mod progress;
mod registration;
mod rma;
mod tagged;

use std::any::Any;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric_sys as sys;

use crate::access::Access;
use crate::discover::{InfoList, ProviderInfo};
use crate::error::{FabricError, Result, check, completion};
use crate::mr::{Buffer, MemoryRegion};
use crate::op::{Op, OpState, Progress};
use crate::select::ProgressMode;
use fabric_types::{Address, RemoteRegion};

use crate::domain::Shared;
pub(crate) use info::open_bound_ep;
use progress::{Core, WaitMode};
#[cfg(feature = "baseline")]
pub(crate) use registration::remote_of;

/// A peer inserted into the endpoint's address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer(pub(crate) sys::fi_addr_t);

/// Operation deadlines: `base + len / min_bandwidth`. An operation past its deadline fails
/// with [`FabricError::Timeout`] (its buffers stay with the endpoint until the provider is
/// done with them). A provider that refuses to even accept an operation ("try again") for
/// `connect` while nothing else of ours is in flight cannot reach the peer:
/// [`FabricError::Unreachable`]. Defaults: 30 s + 100 ms per MiB (10 MB/s); connect 5 s.
///
/// These clocks are the last resort, generous on purpose: a slow peer (a loaded node, 64
/// processes on 2 cores) is not a dead one. Deaths are found by evidence elsewhere: the
/// pool manager sees a dead application's control connection close (or its keepalive
/// probes go unanswered, see `pool::liveness`) and fails or re-tickets its transfers at
/// once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeouts {
    /// Fixed part.
    pub base: Duration,
    /// The slowest transfer rate that is still considered alive, in bytes per second.
    pub min_bandwidth: f64,
    /// How long "try again" may last, with nothing else in flight, before the peer counts
    /// as unreachable.
    pub connect: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            base: Duration::from_secs(30),
            min_bandwidth: 10.0 * 1024.0 * 1024.0,
            connect: Duration::from_secs(5),
        }
    }
}

impl Timeouts {
    fn deadline(&self, len: usize) -> Instant {
        Instant::now() + self.base + Duration::from_secs_f64(len as f64 / self.min_bandwidth)
    }
}

/// An RDM endpoint ready for RMA and tagged messages.
///
/// # Examples
///
/// Two endpoints of one process on shared memory: one registers bytes for peers to read,
/// the other reads them.
///
/// ```
/// use std::time::Duration;
///
/// use fabric::access::{Local, RemoteRead};
/// use fabric::{Buffer, Config, Endpoint, MemoryRegion, Scope, discover, select};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shm = Config { provider: Some("shm".into()), ..Config::default() };
/// let offer = select(&discover()?, &shm, Scope::SameNode, &[])?.remove(0);
/// let owner = Endpoint::open(&offer)?;
/// let reader = Endpoint::open(&offer)?;
/// owner.insert_peer(reader.address())?;
/// let to_owner = reader.insert_peer(owner.address())?;
///
/// // Readable by peers, and nothing else.
/// let offered: MemoryRegion<RemoteRead> = owner.register(Buffer::from_slice(b"hello")?)?;
/// let landing: MemoryRegion<Local> = reader.register(Buffer::new(5)?)?;
/// let got = reader
///     .read(to_owner, landing, offered.remote())?
///     .wait(Duration::from_secs(10))?;
/// assert_eq!(got.as_slice(), b"hello");
/// # Ok(())
/// # }
/// ```
pub struct Endpoint {
    core: Arc<Core>,
    progress: Option<JoinHandle<()>>,
    info: ProviderInfo,
    address: Address,
    timeouts: Timeouts,
}

impl Core {
    /// Opens the completion queue (with a wait descriptor where `mode` sleeps and the
    /// provider offers one), the address vector and the endpoint bound to both, on
    /// `shared`'s domain, for `info`.
    ///
    /// # Errors
    /// [`FabricError::Call`] naming the call that failed; what was opened is closed.
    fn open(shared: &Arc<Shared>, mode: WaitMode, info: &InfoList) -> Result<Core> {
        let mut core = Core {
            mode,
            shared: Arc::clone(shared),
            ep: std::ptr::null_mut(),
            av: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            ops: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            spinners: std::sync::atomic::AtomicUsize::new(0),
            last_spin: AtomicU64::new(0),
            born: Instant::now(),
            wait_fd: None,
        };
        let mut cq_attr = sys::fi_cq_attr {
            format: sys::fi_cq_format_FI_CQ_FORMAT_TAGGED,
            wait_obj: match mode {
                WaitMode::Blocking => sys::fi_wait_obj_FI_WAIT_FD,
                WaitMode::Polling | WaitMode::Spinning => sys::fi_wait_obj_FI_WAIT_NONE,
            },
            ..Default::default()
        };
        let mut av_attr = sys::fi_av_attr {
            type_: sys::fi_av_type_FI_AV_TABLE,
            ..Default::default()
        };
        // SAFETY: the completion queue and address vector are opened on the domain just
        // opened, with attribute structs that live across the calls; `core` closes whatever
        // was opened if a later step fails.
        unsafe {
            // A file descriptor to wait on where the provider offers one (see
            // `Core::poll_or_wait`), else its own blocking read.
            let open = |attr: &mut sys::fi_cq_attr, cq: &mut *mut sys::fid_cq| {
                sys::fi_cq_open(shared.domain, attr, cq, std::ptr::null_mut())
            };
            let mut rc = open(&mut cq_attr, &mut core.cq);
            if rc != 0 && mode == WaitMode::Blocking {
                cq_attr.wait_obj = sys::fi_wait_obj_FI_WAIT_UNSPEC;
                rc = open(&mut cq_attr, &mut core.cq);
            }
            check("fi_cq_open", rc.into())?;
            if cq_attr.wait_obj == sys::fi_wait_obj_FI_WAIT_FD {
                let mut fd: std::ffi::c_int = -1;
                let rc = sys::fi_control(
                    &mut (*core.cq).fid,
                    sys::FI_GETWAIT as std::ffi::c_int,
                    (&raw mut fd).cast(),
                );
                core.wait_fd = (rc == 0 && fd >= 0).then_some(fd);
            }
            check(
                "fi_av_open",
                sys::fi_av_open(
                    shared.domain,
                    &mut av_attr,
                    &mut core.av,
                    std::ptr::null_mut(),
                )
                .into(),
            )?;
            open_bound_ep(shared.domain, info.0, core.av, core.cq, &mut core.ep)?;
        }
        Ok(core)
    }
}

impl Endpoint {
    /// Opens an endpoint on `offer` (one of [`crate::select`]'s results).
    ///
    /// # Errors
    /// [`FabricError::Call`] naming the libfabric call that failed (with a hint for
    /// resource limits).
    pub fn open(offer: &ProviderInfo) -> Result<Endpoint> {
        Endpoint::open_with(offer, ProgressMode::default())
    }

    /// [`Endpoint::open`] with a chosen [`ProgressMode`].
    ///
    /// # Errors
    /// As [`Endpoint::open`].
    pub fn open_with(offer: &ProviderInfo, progress: ProgressMode) -> Result<Endpoint> {
        let info = Self::getinfo(offer)?;
        // SAFETY: `info.0` is a valid, non-empty list from fi_getinfo.
        let fi = unsafe { &*info.0 };

        let shared = Arc::new(Shared::open(fi, &info)?);
        let shm = crate::ProviderClass::of(&offer.provider) == crate::ProviderClass::SharedMemory;
        let mode = match (progress, shm) {
            (ProgressMode::Spin, _) => WaitMode::Spinning,
            (ProgressMode::Block, true) => WaitMode::Polling,
            (ProgressMode::Block, false) => WaitMode::Blocking,
        };
        let core = Core::open(&shared, mode, &info)?;
        let address = Self::name(core.ep)?;
        let core = Arc::new(core);
        let runner = Arc::clone(&core);
        let progress = std::thread::Builder::new()
            .name(format!("fabric-progress-{}", offer.provider))
            .spawn(move || runner.progress_loop())
            .map_err(|e| FabricError::Os {
                what: "starting the progress thread".into(),
                source: e,
                hint: "too many threads: raise `ulimit -u`",
            })?;
        Ok(Endpoint {
            core,
            progress: Some(progress),
            info: offer.clone(),
            address,
            timeouts: Timeouts::default(),
        })
    }

    /// The endpoint's address, to give to peers.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The offer the endpoint was opened on.
    pub fn info(&self) -> &ProviderInfo {
        &self.info
    }

    /// Sets the operation deadlines for operations posted from now on.
    pub fn set_timeouts(&mut self, t: Timeouts) {
        self.timeouts = t;
    }

    /// A weak handle through which waiters drive progress themselves.
    fn progress_handle(&self) -> std::sync::Weak<dyn Progress> {
        let weak: std::sync::Weak<Core> = Arc::downgrade(&self.core);
        weak
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.core.shared
    }

    /// Inserts a peer's address into the address vector.
    ///
    /// # Errors
    /// [`FabricError::Call`] when the provider rejects the address (wrong format for
    /// this provider).
    pub fn insert_peer(&self, addr: &Address) -> Result<Peer> {
        let mut fi_addr: sys::fi_addr_t = sys::FI_ADDR_UNSPEC;
        // SAFETY: one address from a buffer the provider reads during the call.
        let rc = unsafe {
            sys::fi_av_insert(
                self.core.av,
                addr.0.as_ptr().cast(),
                1,
                &mut fi_addr,
                0,
                std::ptr::null_mut(),
            )
        };
        if rc != 1 {
            check(
                "fi_av_insert",
                if rc < 0 {
                    rc.into()
                } else {
                    -(libc::EINVAL as i64)
                },
            )?;
        }
        Ok(Peer(fi_addr))
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.core.stop.store(true, Ordering::Release);
        // Dropped by a completion callback on the progress thread itself (`Op::then`): the
        // thread ends after the callback returns; it cannot wait for itself.
        if let Some(t) = self.progress.take()
            && t.thread().id() != std::thread::current().id()
            && t.join().is_err()
        {
            tracing::warn!("the progress thread panicked");
        }
        // `core` (endpoint, AV, CQ) closes when its last reference goes: here, or when the
        // progress thread ends.
    }
}
