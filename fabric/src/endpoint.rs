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
//! How it waits is the [`ProgressMode`]. `Block` (the default): network providers block in
//! `fi_cq_sread` on the CQ's wait object (100 ms slices), so an idle endpoint costs nothing;
//! shm's `fi_cq_sread` (libfabric 1.17) spins on `sched_yield` and ignores its timeout, so
//! for shared memory the thread polls `fi_cq_read`, spinning while work is in flight and
//! backing off to 1 ms sleeps when idle, woken early whenever an operation is posted.
//! `Spin`: the thread polls `fi_cq_read` without ever sleeping (yielding the CPU between
//! polls), like a dedicated progress core. An owner serving remote reads sees no
//! completions, so only `Spin` answers them at full speed: measured here, `Block` owners cost
//! 5-25 % of the bandwidth of 1-16 MiB reads (see BENCHMARKS.md).

use std::any::Any;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric_sys as sys;
use serde::{Deserialize, Serialize};

use crate::discover::ProviderInfo;
use crate::error::{FabricError, Result, check, completion};
use crate::mr::{Access, Buffer, MemoryRegion};
use crate::op::{Op, OpState, Progress};
use fabric_types::{Address, RemoteRegion};

/// The memory-registration modes this layer supports: local descriptors, virtual
/// addresses, app-allocated memory, provider keys. (`FI_MR_ENDPOINT` is not supported:
/// providers needing it are not selected.)
const SUPPORTED_MR_MODE: u32 =
    sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY;

/// A peer inserted into the endpoint's address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer(pub(crate) sys::fi_addr_t);

/// Operation deadlines: `base + len / min_bandwidth`. An operation past its deadline fails
/// with [`FabricError::Timeout`] (its buffers stay with the endpoint until the provider is
/// done with them). A provider that refuses to even accept an operation ("try again") for
/// `connect` while nothing else of ours is in flight cannot reach the peer:
/// [`FabricError::Unreachable`]. Defaults: 1 s + 10 ms per MiB (100 MB/s); connect 1 s.
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
            base: Duration::from_secs(1),
            min_bandwidth: 100.0 * 1024.0 * 1024.0,
            connect: Duration::from_secs(1),
        }
    }
}

impl Timeouts {
    fn deadline(&self, len: usize) -> Instant {
        Instant::now() + self.base + Duration::from_secs_f64(len as f64 / self.min_bandwidth)
    }
}

/// Fabric and domain: what memory registrations need to stay valid.
pub(crate) struct Shared {
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    mr_mode: u32,
    /// Bits of the keys the application picks (`mr_key_size` bytes, at most 8).
    key_mask: u64,
}

impl Shared {
    /// A key for a new registration: random within the domain's key size, or 0 where the
    /// provider issues keys itself.
    fn fresh_key(&self) -> Result<u64> {
        if self.mr_mode & sys::FI_MR_PROV_KEY != 0 {
            return Ok(0);
        }
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| {
            FabricError::InvalidArgument(format!(
                "no randomness for a memory key ({e}); the kernel's getrandom must work"
            ))
        })?;
        Ok(u64::from_ne_bytes(bytes) & self.key_mask)
    }
}

// SAFETY: FI_THREAD_SAFE domain; the pointers are only closed in drop.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

fn close_fid(what: &str, fid: *mut sys::fid) {
    if fid.is_null() {
        return;
    }
    // SAFETY: each fid is closed once, by its owner.
    let rc = unsafe { sys::fi_close(fid) };
    if rc != 0 {
        tracing::warn!("fi_close({what}): {rc}");
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: taking the address of the embedded fid of live objects.
        unsafe {
            if !self.domain.is_null() {
                close_fid("domain", &mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                close_fid("fabric", &mut (*self.fabric).fid);
            }
        }
    }
}

/// How an endpoint's progress thread waits: see the module docs. `MSTRO_OFI_PROGRESS`
/// (`block` or `spin`) sets it for endpoints opened with [`crate::Config`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// Sleep when idle (blocking wait or backoff).
    #[default]
    Block,
    /// Never sleep: poll and yield.
    Spin,
}

/// How the progress thread waits for completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitMode {
    /// `fi_cq_sread` on the CQ's wait object.
    Blocking,
    /// `fi_cq_read` with backoff (shared memory).
    Polling,
    /// `fi_cq_read` and yield, never sleeping.
    Spinning,
}

/// Endpoint, AV, CQ and the operations in flight.
struct Core {
    mode: WaitMode,
    shared: Arc<Shared>,
    ep: *mut sys::fid_ep,
    av: *mut sys::fid_av,
    cq: *mut sys::fid_cq,
    ops: Mutex<HashMap<usize, Arc<OpState>>>,
    stop: AtomicBool,
    /// Waiters currently driving progress themselves.
    spinners: std::sync::atomic::AtomicUsize,
    /// When the last waiter stopped spinning (ns since `born`): waiters come back quickly
    /// between operations, and a progress thread that slipped into a blocking read in the
    /// gap would compete with them.
    last_spin: AtomicU64,
    born: Instant,
}

// SAFETY: FI_THREAD_SAFE endpoint and CQ; the registry is behind a mutex.
unsafe impl Send for Core {}
// SAFETY: as above.
unsafe impl Sync for Core {}

impl Core {
    fn ops(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Arc<OpState>>> {
        self.ops.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Completes the operation whose context is `ctx`, if it is ours.
    fn complete(&self, ctx: *mut c_void, result: Result<(usize, u64)>) {
        let op = self.ops().remove(&(ctx as usize));
        match op {
            Some(op) => drop(op.finish(result)),
            None => tracing::debug!("completion for an unknown context {ctx:?}"),
        }
    }

    /// Fails operations past their deadline (they stay registered until really over).
    fn expire(&self, now: Instant) {
        let overdue: Vec<Arc<OpState>> = self
            .ops()
            .values()
            .filter(|o| o.deadline <= now)
            .cloned()
            .collect();
        for op in overdue {
            // SAFETY: asking the provider to cancel a posted operation; harmless if it
            // already finished or cannot be canceled.
            unsafe { sys::fi_cancel(&mut (*self.ep).fid, op.context()) };
            op.expire();
        }
    }

    /// Dispatches a batch of completions (or one error entry); returns what `fi_cq_read` /
    /// `fi_cq_sread` returned.
    fn dispatch(&self, n: isize, entries: &[sys::fi_cq_tagged_entry]) {
        if n > 0 {
            for e in &entries[..n as usize] {
                self.complete(e.op_context, Ok((e.len, e.tag)));
            }
        } else if n == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: reading one error entry.
            let rc = unsafe { sys::fi_cq_readerr(self.cq, &mut err, 0) };
            if rc > 0 {
                let what = self
                    .ops()
                    .get(&(err.op_context as usize))
                    .map_or("operation", |o| o.what);
                self.complete(
                    err.op_context,
                    Err(completion(what, err.err, err.prov_errno)),
                );
            }
        } else if n != -(sys::FI_EAGAIN as isize) && n != -(libc::ETIMEDOUT as isize) {
            tracing::warn!("reading the completion queue: {n}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn progress_loop(&self) {
        let mut entries = [sys::fi_cq_tagged_entry::default(); 64];
        let mut last_expiry = Instant::now();
        let mut idle_rounds: u32 = 0;
        while !self.stop.load(Ordering::Acquire) {
            if self.waiters_busy() {
                // A waiter drives progress: stay out of its way (two threads reading one
                // CQ on a 2-core node halve the bandwidth).
                std::thread::park_timeout(Duration::from_millis(1));
                self.expire_every(&mut last_expiry);
                continue;
            }
            // SAFETY: reading into a local array of the CQ's format.
            let n = unsafe {
                match self.mode {
                    WaitMode::Blocking => sys::fi_cq_sread(
                        self.cq,
                        entries.as_mut_ptr().cast(),
                        entries.len(),
                        std::ptr::null(),
                        100,
                    ),
                    WaitMode::Polling | WaitMode::Spinning => {
                        sys::fi_cq_read(self.cq, entries.as_mut_ptr().cast(), entries.len())
                    }
                }
            };
            if self.mode == WaitMode::Spinning && n == -(sys::FI_EAGAIN as isize) {
                std::thread::yield_now();
            }
            if self.mode == WaitMode::Polling {
                if n == -(sys::FI_EAGAIN as isize) && self.ops().is_empty() {
                    idle_rounds = idle_rounds.saturating_add(1);
                    backoff(idle_rounds);
                } else {
                    idle_rounds = 0;
                }
            }
            self.dispatch(n, &entries);
            self.expire_every(&mut last_expiry);
        }
    }

    /// True while a waiter spins, or spun within the last 2 ms.
    fn waiters_busy(&self) -> bool {
        if self.spinners.load(Ordering::Acquire) > 0 {
            return true;
        }
        let now = self.born.elapsed().as_nanos() as u64;
        now.saturating_sub(self.last_spin.load(Ordering::Acquire)) < 2_000_000
    }

    /// Runs [`Core::expire`] at most every 50 ms.
    fn expire_every(&self, last: &mut Instant) {
        let now = Instant::now();
        if now.duration_since(*last) >= Duration::from_millis(50) {
            *last = now;
            self.expire(now);
        }
    }
}

impl Progress for Core {
    fn poll(&self) -> bool {
        let mut entries = [sys::fi_cq_tagged_entry::default(); 16];
        // SAFETY: reading into a local array of the CQ's format.
        let n = unsafe { sys::fi_cq_read(self.cq, entries.as_mut_ptr().cast(), entries.len()) };
        self.dispatch(n, &entries);
        n > 0
    }

    fn spinning(&self, on: bool) {
        // The progress thread notices the change within its 1 ms park; waking it here would
        // cost a syscall per operation.
        if on {
            self.spinners.fetch_add(1, Ordering::AcqRel);
        } else {
            self.last_spin
                .store(self.born.elapsed().as_nanos() as u64, Ordering::Release);
            self.spinners.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Idle backoff of a polling progress thread: yield for a while, then sleep (parked, so a
/// new operation wakes it at once) up to 1 ms.
fn backoff(idle_rounds: u32) {
    if idle_rounds < 256 {
        std::thread::yield_now();
    } else {
        let micros = 1u64 << (idle_rounds - 256).min(10);
        std::thread::park_timeout(Duration::from_micros(micros.min(1000)));
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: closing the endpoint first stops all data movement into our buffers, then
        // the AV and CQ it was bound to.
        unsafe {
            close_fid("endpoint", &mut (*self.ep).fid);
            close_fid("av", &mut (*self.av).fid);
            close_fid("cq", &mut (*self.cq).fid);
        }
        let left: Vec<Arc<OpState>> = self.ops().drain().map(|(_, o)| o).collect();
        for op in left {
            drop(op.finish(Err(FabricError::Canceled(op.what))));
        }
    }
}

/// An RDM endpoint ready for RMA and tagged messages.
pub struct Endpoint {
    core: Arc<Core>,
    progress: Option<JoinHandle<()>>,
    info: ProviderInfo,
    address: Address,
    timeouts: Timeouts,
}

/// `fi_getinfo` for this library's API version with `hints` (NULL: everything). "No data"
/// gives an empty (NULL) list.
///
/// # Errors
/// Any other libfabric error.
pub(crate) fn getinfo_raw(hints: *const sys::fi_info) -> Result<InfoList> {
    let mut out: *mut sys::fi_info = std::ptr::null_mut();
    let version = sys::make_version(sys::FI_MAJOR_VERSION, sys::FI_MINOR_VERSION);
    // SAFETY: hints NULL or valid; `out` receives a list owned by the returned InfoList.
    let rc = unsafe {
        sys::fi_getinfo(
            version,
            std::ptr::null(),
            std::ptr::null(),
            0,
            hints,
            &mut out,
        )
    };
    let list = InfoList(out);
    if rc == -(sys::FI_ENODATA as i32) {
        return Ok(list);
    }
    check("fi_getinfo", rc.into())?;
    Ok(list)
}

/// Opens an endpoint on `info`, binds it to `av` and `cq` (transmit and receive) and
/// enables it. Shared by [`Endpoint`] and the benchmark's bare baseline.
///
/// # Safety
/// `domain`, `av` and `cq` must be open objects of one domain; `info` a valid info for it.
pub(crate) unsafe fn open_bound_ep(
    domain: *mut sys::fid_domain,
    info: *mut sys::fi_info,
    av: *mut sys::fid_av,
    cq: *mut sys::fid_cq,
    ep: &mut *mut sys::fid_ep,
) -> Result<()> {
    // SAFETY: guaranteed by the caller; a returned info has its fabric attributes.
    let provider = unsafe { (*(*info).fabric_attr).prov_name };
    // SAFETY: prov_name is NULL or a NUL-terminated string owned by `info`.
    if !provider.is_null() && unsafe { std::ffi::CStr::from_ptr(provider) }.to_bytes() == b"shm" {
        crate::shm_files::sweep_once();
    }
    // SAFETY: guaranteed by the caller.
    unsafe {
        check(
            "fi_endpoint",
            sys::fi_endpoint(domain, info, ep, std::ptr::null_mut()).into(),
        )?;
        check(
            "fi_ep_bind(av)",
            sys::fi_ep_bind(*ep, &mut (*av).fid, 0).into(),
        )?;
        let flags = u64::from(sys::FI_TRANSMIT | sys::FI_RECV);
        check(
            "fi_ep_bind(cq)",
            sys::fi_ep_bind(*ep, &mut (*cq).fid, flags).into(),
        )?;
        check("fi_enable", sys::fi_enable(*ep).into())
    }
}

/// How peers address registration `mr` of `buf`, requested with `key`: the provider's key
/// under `FI_MR_PROV_KEY`, the buffer's virtual address under `FI_MR_VIRT_ADDR` (else
/// offsets from 0).
///
/// # Safety
/// `mr` is an open registration of `buf`.
pub(crate) unsafe fn remote_of(
    mr_mode: u32,
    mr: *mut sys::fid_mr,
    key: u64,
    buf: &crate::Buffer,
) -> RemoteRegion {
    let key = if mr_mode & sys::FI_MR_PROV_KEY != 0 {
        // SAFETY: guaranteed by the caller.
        unsafe { sys::fi_mr_key(mr) }
    } else {
        key
    };
    let addr = if mr_mode & sys::FI_MR_VIRT_ADDR != 0 {
        buf.as_ptr() as u64
    } else {
        0
    };
    RemoteRegion {
        addr,
        key,
        len: buf.len() as u64,
    }
}

/// Frees an `fi_info` list on drop.
pub(crate) struct InfoList(pub(crate) *mut sys::fi_info);

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a list from fi_getinfo/fi_allocinfo, freed once.
            unsafe { sys::fi_freeinfo(self.0) };
        }
    }
}

/// A C string of libfabric as text ("" for NULL).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

fn strdup(s: &str, what: &str) -> Result<*mut std::ffi::c_char> {
    let c = CString::new(s)
        .map_err(|_| FabricError::InvalidArgument(format!("{what} {s:?} has a NUL byte")))?;
    // SAFETY: libfabric frees these strings with free() in fi_freeinfo.
    Ok(unsafe { libc::strdup(c.as_ptr()) })
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

        let mut shared = Shared {
            fabric: std::ptr::null_mut(),
            domain: std::ptr::null_mut(),
            // SAFETY: domain_attr of a returned info is valid.
            mr_mode: unsafe { (*fi.domain_attr).mr_mode } as u32,
            // SAFETY: as above.
            key_mask: match unsafe { (*fi.domain_attr).mr_key_size } {
                0 | 8.. => u64::MAX,
                n => (1u64 << (8 * n)) - 1,
            },
        };
        // SAFETY: objects opened in order from the info; each failure leaves what was
        // opened to the owners' drops.
        unsafe {
            check(
                "fi_fabric",
                sys::fi_fabric(fi.fabric_attr, &mut shared.fabric, std::ptr::null_mut()).into(),
            )?;
            check(
                "fi_domain",
                sys::fi_domain(
                    shared.fabric,
                    info.0,
                    &mut shared.domain,
                    std::ptr::null_mut(),
                )
                .into(),
            )?;
        }
        let shared = Arc::new(shared);
        let shm = crate::ProviderClass::of(&offer.provider) == crate::ProviderClass::SharedMemory;
        let mode = match (progress, shm) {
            (ProgressMode::Spin, _) => WaitMode::Spinning,
            (ProgressMode::Block, true) => WaitMode::Polling,
            (ProgressMode::Block, false) => WaitMode::Blocking,
        };
        let mut core = Core {
            mode,
            shared: Arc::clone(&shared),
            ep: std::ptr::null_mut(),
            av: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            ops: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            spinners: std::sync::atomic::AtomicUsize::new(0),
            last_spin: AtomicU64::new(0),
            born: Instant::now(),
        };
        let mut cq_attr = sys::fi_cq_attr {
            format: sys::fi_cq_format_FI_CQ_FORMAT_TAGGED,
            wait_obj: match mode {
                WaitMode::Blocking => sys::fi_wait_obj_FI_WAIT_UNSPEC,
                WaitMode::Polling | WaitMode::Spinning => sys::fi_wait_obj_FI_WAIT_NONE,
            },
            ..Default::default()
        };
        let mut av_attr = sys::fi_av_attr {
            type_: sys::fi_av_type_FI_AV_TABLE,
            ..Default::default()
        };
        // SAFETY: as above; `core` closes whatever was opened if a later step fails.
        unsafe {
            check(
                "fi_cq_open",
                sys::fi_cq_open(
                    shared.domain,
                    &mut cq_attr,
                    &mut core.cq,
                    std::ptr::null_mut(),
                )
                .into(),
            )?;
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

    /// `fi_getinfo` restricted to the offer's provider, fabric and domain, with our
    /// capabilities, modes and thread safety.
    pub(crate) fn getinfo(offer: &ProviderInfo) -> Result<InfoList> {
        // SAFETY: fi_allocinfo returns a zeroed info with all attribute structs allocated.
        let hints = InfoList(unsafe { sys::fi_allocinfo() });
        if hints.0.is_null() {
            return Err(FabricError::InvalidArgument(
                "fi_allocinfo failed (out of memory)".into(),
            ));
        }
        // SAFETY: filling the freshly allocated hints; strings are malloc'ed (freed by
        // fi_freeinfo).
        unsafe {
            let h = &mut *hints.0;
            h.caps = u64::from(
                sys::FI_RMA
                    | sys::FI_TAGGED
                    | sys::FI_READ
                    | sys::FI_WRITE
                    | sys::FI_REMOTE_READ
                    | sys::FI_REMOTE_WRITE
                    | sys::FI_SEND
                    | sys::FI_RECV,
            );
            h.mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*h.ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            (*h.domain_attr).mr_mode = SUPPORTED_MR_MODE as i32;
            (*h.domain_attr).threading = sys::fi_threading_FI_THREAD_SAFE;
            (*h.domain_attr).name = strdup(&offer.domain, "domain")?;
            (*h.fabric_attr).prov_name = strdup(&offer.provider, "provider")?;
            (*h.fabric_attr).name = strdup(&offer.fabric, "fabric")?;
        }
        let list = getinfo_raw(hints.0)?;
        // Layered providers (`tcp;ofi_rxm`) ignore the domain and fabric names in the
        // hints and list every interface: take the offer's own entry (its source address
        // binds the endpoint to the chosen NIC).
        let mut at = list.0;
        while !at.is_null() {
            // SAFETY: a node of the list fi_getinfo returned, with its attribute structs.
            let i = unsafe { &*at };
            // SAFETY: as above; names are NULL or NUL-terminated strings.
            let (domain, fabric) =
                unsafe { (cstr((*i.domain_attr).name), cstr((*i.fabric_attr).name)) };
            if domain == offer.domain && fabric == offer.fabric {
                // SAFETY: duplicating one valid node; the copy is freed by its InfoList.
                let one = InfoList(unsafe { sys::fi_dupinfo(at) });
                if one.0.is_null() {
                    return Err(FabricError::InvalidArgument(
                        "fi_dupinfo failed (out of memory)".into(),
                    ));
                }
                return Ok(one);
            }
            at = i.next;
        }
        Err(FabricError::InvalidArgument(format!(
            "{} on {} ({}) offers no RDM endpoint with RMA and tagged messages",
            offer.provider, offer.domain, offer.fabric
        )))
    }

    pub(crate) fn name(ep: *mut sys::fid_ep) -> Result<Address> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buffer and length describe `buf`.
        let mut rc = unsafe { sys::fi_getname(&mut (*ep).fid, buf.as_mut_ptr().cast(), &mut len) };
        if rc == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above, with the size the provider asked for.
            rc = unsafe { sys::fi_getname(&mut (*ep).fid, buf.as_mut_ptr().cast(), &mut len) };
        }
        check("fi_getname", rc.into())?;
        buf.truncate(len);
        Ok(Address(buf))
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

    /// Registers `buf` for local use and the remote `access` its role needs (an offered
    /// CDO: [`Access::RemoteRead`]; a landing buffer: [`Access::Local`]). Where the
    /// application picks keys (no `FI_MR_PROV_KEY`), the key is random, so a peer cannot
    /// reach a region whose descriptor it was not given by guessing.
    ///
    /// # Errors
    /// [`FabricError::Call`]; `ulimit -l` is named when the provider cannot pin memory.
    pub fn register(&self, buf: Buffer, access: Access) -> Result<MemoryRegion> {
        let shared = &self.core.shared;
        let mut mr: *mut sys::fid_mr = std::ptr::null_mut();
        let len = buf.len().max(1);
        let mut attempts = 0;
        let key = loop {
            let key = shared.fresh_key()?;
            // SAFETY: the buffer outlives the registration (both live in the MemoryRegion,
            // which closes the registration first).
            let rc = unsafe {
                sys::fi_mr_reg(
                    shared.domain,
                    buf.as_ptr().cast(),
                    len,
                    access.flags(),
                    0,
                    key,
                    0,
                    &mut mr,
                    std::ptr::null_mut(),
                )
            };
            // A random key already in use: draw another (a handful of times at most).
            attempts += 1;
            if rc == -(sys::FI_ENOKEY as i32) && attempts < 8 {
                continue;
            }
            check("fi_mr_reg", rc.into())?;
            break key;
        };
        // SAFETY: a registration just created, of `buf` with `key`.
        let (desc, remote) = unsafe {
            (
                sys::fi_mr_desc(mr),
                remote_of(shared.mr_mode, mr, key, &buf),
            )
        };
        Ok(MemoryRegion {
            buf,
            mr,
            desc,
            remote,
            shared: Arc::clone(shared),
        })
    }

    /// Posts `post` for an operation on `len` bytes, keeping `keep` alive, retrying while
    /// the provider's queues are full.
    fn post(
        &self,
        what: &'static str,
        len: usize,
        keep: Option<Box<dyn Any + Send>>,
        post: impl Fn(*mut c_void) -> isize,
    ) -> Result<Arc<OpState>> {
        let started = Instant::now();
        let state = OpState::new(what, len, self.timeouts.deadline(len), keep);
        let ctx = state.context();
        self.core.ops().insert(ctx as usize, Arc::clone(&state));
        loop {
            let rc = post(ctx);
            if rc == 0 {
                // A polling progress thread may be backing off: wake it for the new work.
                if self.core.mode == WaitMode::Polling
                    && let Some(t) = &self.progress
                {
                    t.thread().unpark();
                }
                return Ok(state);
            }
            if rc != -(sys::FI_EAGAIN as isize) {
                self.core.ops().remove(&(ctx as usize));
                check(what, rc as i64)?;
            }
            // Connection-based providers answer EAGAIN while they cannot reach the peer
            // (refused or vanished); a full queue drains as our other operations finish.
            let alone = self.core.ops().len() == 1;
            if Instant::now() >= state.deadline
                || (alone && started.elapsed() >= self.timeouts.connect)
            {
                self.core.ops().remove(&(ctx as usize));
                return Err(FabricError::Unreachable {
                    what,
                    waited: started.elapsed(),
                });
            }
            // Queues full: the progress thread is draining them.
            std::thread::yield_now();
        }
    }

    /// Reads `remote` (from `peer`) into the start of `dst`. The region comes back with the
    /// completion.
    ///
    /// # Errors
    /// [`FabricError::InvalidArgument`] if `dst` is smaller than `remote`; posting errors.
    /// The [`Op`] fails if the peer is gone, the key is wrong, or the deadline passes.
    pub fn read(
        &self,
        peer: Peer,
        dst: MemoryRegion,
        remote: RemoteRegion,
    ) -> Result<Op<MemoryRegion>> {
        self.rma(false, peer, dst, remote)
    }

    /// Writes the first `remote.len` bytes of `src` into `remote` at `peer`. The write asks
    /// for `FI_DELIVERY_COMPLETE`: its completion means the provider delivered the data, not
    /// merely sent it. (Measured: the `net` provider of libfabric 1.17 may report it a moment
    /// before the target's CPU sees the bytes; the pool moves data by reads, where the reader
    /// owns the completion.)
    ///
    /// # Errors
    /// As [`Endpoint::read`].
    pub fn write(
        &self,
        peer: Peer,
        src: MemoryRegion,
        remote: RemoteRegion,
    ) -> Result<Op<MemoryRegion>> {
        self.rma(true, peer, src, remote)
    }

    /// Posts an RMA read into (or, with `write`, a delivery-complete write from) the start
    /// of `local`, keeping the region until the completion.
    fn rma(
        &self,
        write: bool,
        peer: Peer,
        local: MemoryRegion,
        remote: RemoteRegion,
    ) -> Result<Op<MemoryRegion>> {
        let len = usize::try_from(remote.len).unwrap_or(usize::MAX);
        if len > local.len() {
            return Err(FabricError::InvalidArgument(format!(
                "remote region of {len} bytes does not fit the {}-byte local region",
                local.len()
            )));
        }
        let (ptr, desc) = (local.buf.as_ptr(), local.desc);
        let ep = self.core.ep;
        let what = if write { "fi_write" } else { "fi_read" };
        let state = self.post(what, len, Some(Box::new(local)), |ctx| {
            let iov = libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len,
            };
            let rma = sys::fi_rma_iov {
                addr: remote.addr,
                len,
                key: remote.key,
            };
            let mut desc = desc;
            let msg = sys::fi_msg_rma {
                msg_iov: (&raw const iov).cast(),
                desc: &mut desc,
                iov_count: 1,
                addr: peer.0,
                rma_iov: &rma,
                rma_iov_count: 1,
                context: ctx,
                data: 0,
            };
            // SAFETY: the message describes the local region, kept alive by the operation
            // state; libfabric copies the message itself during the call.
            unsafe {
                if write {
                    sys::fi_writemsg(ep, &msg, u64::from(sys::FI_DELIVERY_COMPLETE))
                } else {
                    sys::fi_readmsg(ep, &msg, 0)
                }
            }
        })?;
        Ok(Op::new(state, take_region, self.progress_handle()))
    }

    /// Sends a small tagged message (copied).
    ///
    /// # Errors
    /// Allocation, registration or posting errors.
    pub fn send(&self, peer: Peer, tag: u64, data: &[u8]) -> Result<Op<()>> {
        let region = self.register(Buffer::from_slice(data)?, Access::Local)?;
        let (ptr, desc, len) = (region.buf.as_ptr(), region.desc, data.len());
        let ep = self.core.ep;
        let state = self.post("fi_tsend", len, Some(Box::new(region)), |ctx| {
            // SAFETY: the message buffer is kept alive by the operation state.
            unsafe { sys::fi_tsend(ep, ptr.cast(), len, desc, peer.0, tag, ctx) }
        })?;
        Ok(Op::new(state, |_, _, _| Ok(()), self.progress_handle()))
    }

    /// Receives one tagged message of at most `max_len` bytes matching `tag` from anyone.
    /// The deadline is the endpoint's for `max_len` bytes; wait longer by posting again.
    ///
    /// # Errors
    /// Allocation, registration or posting errors; the [`Op`] fails on truncation.
    pub fn recv(&self, tag: u64, max_len: usize) -> Result<Op<Vec<u8>>> {
        let region = self.register(Buffer::new(max_len)?, Access::Local)?;
        let (ptr, desc) = (region.buf.as_ptr(), region.desc);
        let ep = self.core.ep;
        let state = self.post("fi_trecv", max_len, Some(Box::new(region)), |ctx| {
            // SAFETY: the receive buffer is kept alive by the operation state.
            unsafe {
                sys::fi_trecv(
                    ep,
                    ptr.cast(),
                    max_len,
                    desc,
                    sys::FI_ADDR_UNSPEC,
                    tag,
                    0,
                    ctx,
                )
            }
        })?;
        Ok(Op::new(
            state,
            |n, _, keep| {
                let region = downcast_region(keep)?;
                Ok(region.as_slice()[..n.min(region.len())].to_vec())
            },
            self.progress_handle(),
        ))
    }
}

fn downcast_region(keep: Option<Box<dyn Any + Send>>) -> Result<MemoryRegion> {
    keep.and_then(|k| k.downcast::<MemoryRegion>().ok())
        .map(|b| *b)
        .ok_or_else(|| FabricError::InvalidArgument("operation lost its buffer".into()))
}

fn take_region(_: usize, _: u64, keep: Option<Box<dyn Any + Send>>) -> Result<MemoryRegion> {
    downcast_region(keep)
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.core.stop.store(true, Ordering::Release);
        if let Some(t) = self.progress.take()
            && t.join().is_err()
        {
            tracing::warn!("the progress thread panicked");
        }
        // `core` (endpoint, AV, CQ) closes here, when its last reference goes.
    }
}
