//! A same-host provider's memory, taken straight: mapped from its memory file (no copy)
//! where the provider shared one of its own and the application lent no memory, copied out
//! of a view of its slab kept mapped where the offer lies in one, else copied with
//! `process_vm_readv` ([`fabric::cma`]); checked first to be the process that announced it
//! (its token). What cannot be taken this way goes by RMA ([`super::rma`]).

use crate::CallError;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric::Buffer;
use fabric::cma::Origin;

use super::Pace;
use super::crew::Dst;
use super::rma::endpoint_via;
use crate::client::data::CdoData;
use crate::client::{ClientError, Result, Shared};
use crate::proto::{Direct, HostMemory, ProcessMemory};

/// Takes `len` bytes at `addr` of the provider's memory `m` (see [`take_from_process`]):
/// on the caller's thread when that takes microseconds (small copies, views of huge
/// pages), copies the crew makes at `pace` ([`Pace`]) by the client's copy crew (several
/// at once, a large one by two threads), views of many 4 KiB pages on a thread that may
/// block. [`Taken::NotHere`] when the process id does not name the provider or
/// the kernel refuses.
///
/// # Errors
/// A landing buffer that cannot be had.
pub(super) async fn take(
    shared: &Arc<Shared>,
    (via, m, addr, len): CopySource,
    (lent, pace): (Option<Buffer>, Pace),
) -> Result<Taken> {
    match taker(shared, &m, len, (lent.as_ref(), pace)) {
        Taker::Nobody => Ok(Taken::NotHere(lent)),
        Taker::Caller => take_from_process(shared, (via, m, addr, len), lent),
        Taker::Crew => {
            let dst = landing(shared, via, len, lent)?;
            let (dst, copied) = shared
                .crew
                .copy((origin(shared, &m), addr), dst, len)
                .await
                .ok_or_else(|| {
                    ClientError::Call(CallError::Protocol(
                        "copying the offer failed: the copy was lost".into(),
                    ))
                })?;
            Ok(copied_or_not(shared, (m.process.pid, copied), dst, len))
        }
        Taker::Blocking => {
            let owner = shared.clone();
            let take = move || take_from_process(&owner, (via, m, addr, len), lent);
            tokio::task::spawn_blocking(take).await.map_err(|e| {
                ClientError::Call(CallError::Protocol(format!("taking the offer failed: {e}")))
            })?
        }
    }
}

/// Who takes `len` bytes of a same-host provider's memory `m` (see [`take`]), into `lent`
/// if given, at `pace`.
pub(super) enum Taker {
    /// Nobody here: the process id does not name the provider, or this client no longer
    /// copies from other processes.
    Nobody,
    /// The caller's thread: a small copy, a view of huge pages (microseconds: not worth a
    /// hop to another thread).
    Caller,
    /// The copy crew ([`crew`]).
    Crew,
    /// A thread that may block: a view of many 4 KiB pages (it costs as much as a copy).
    Blocking,
}

/// See [`Taker`].
pub(super) fn taker(
    shared: &Shared,
    m: &HostMemory,
    len: usize,
    (lent, pace): (Option<&Buffer>, Pace),
) -> Taker {
    if !genuine(shared, m.process) {
        return Taker::Nobody;
    }
    let view = mappable(m, lent);
    if !view && len >= pace.offload() && shared.crew.helps() {
        Taker::Crew
    } else if len <= INLINE_COPY || (view && fabric::cma::huge_shared_pages()) {
        Taker::Caller
    } else {
        Taker::Blocking
    }
}

/// Copies up to this many bytes from a provider's memory on the runtime's thread.
pub(super) const INLINE_COPY: usize = 2 << 20;

/// Whether a same-host ticket will be mapped rather than copied: its offer is in a memory
/// file of its own (the provider chose that where mapping pays, see
/// [`Buffer::for_offer`]) and the application lent no memory for it.
pub(super) fn mappable(m: &HostMemory, lent: Option<&Buffer>) -> bool {
    m.file.is_some_and(|f| f.slab.is_none()) && lent.is_none()
}

/// Where a copy of an offer in the provider's memory `m` reads: the view of its slab this
/// client keeps, mapped now if need be, when the offer lies in one (see
/// [`fabric::cma::Views`]), else the provider's memory by system call. A slab that cannot
/// be mapped is read by system call.
pub(super) fn origin(shared: &Shared, m: &HostMemory) -> Origin {
    let pid = m.process.pid;
    let Some(file) = m.file.filter(|f| f.slab.is_some()) else {
        return Origin::Process(pid);
    };
    match shared.views.view(pid, file) {
        Ok(view) => Origin::View(view),
        Err(e) => {
            refused(shared, &e);
            tracing::debug!("pool client: no view of process {pid}'s slab ({e}); copying");
            Origin::Process(pid)
        }
    }
}

/// How often a client lets go of the views of slabs it did not read since the last time
/// ([`fabric::cma::Views::sweep`]).
const VIEWS_SWEPT: std::time::Duration = std::time::Duration::from_secs(10);

/// Lets go of `shared`'s unused views every [`VIEWS_SWEPT`], for the client's life.
pub(crate) async fn sweep_views(shared: Arc<Shared>) {
    let mut every = tokio::time::interval(VIEWS_SWEPT);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        shared.views.sweep();
    }
}

/// Takes a CDO straight from the provider's memory: maps its memory file
/// ([`fabric::cma::map`], no copy) where [`mappable`], else copies the bytes
/// ([`fabric::cma::read`]) into `lent` (if given) or a landing buffer of endpoint `via`.
/// [`Taken::NotHere`] when neither can be done here (the kernel refuses): the caller reads
/// by RMA, into `lent` still. The process was found [`genuine`] first.
///
/// # Errors
/// A landing buffer that cannot be had.
pub(super) fn take_from_process(
    shared: &Arc<Shared>,
    (via, m, addr, len): CopySource,
    lent: Option<Buffer>,
) -> Result<Taken> {
    let pid = m.process.pid;
    if let Some(file) = m.file.filter(|_| mappable(&m, lent.as_ref())) {
        match fabric::cma::map(pid, file, len) {
            Ok(view) => return Ok(Taken::Here(CdoData::mapped(view), Direct::Mapped)),
            Err(e) => {
                refused(shared, &e);
                tracing::debug!("pool client: taking from process {pid} failed ({e}); copying");
            }
        }
    }
    let mut dst = landing(shared, via, len, lent)?;
    let copied = origin(shared, &m).read(addr, &mut dst.as_mut_slice()[..len]);
    Ok(copied_or_not(shared, (pid, copied), dst, len))
}

/// Where a copy of `len` bytes lands: `lent`, else a landing buffer of endpoint `via`.
///
/// # Errors
/// A landing buffer that cannot be had.
pub(super) fn landing(shared: &Shared, via: u8, len: usize, lent: Option<Buffer>) -> Result<Dst> {
    Ok(match lent {
        Some(b) => Dst::Lent(b),
        None => Dst::Landing(shared.landing.take(endpoint_via(shared, via)?, len)?),
    })
}

/// The bytes a copy from process `pid` put in `dst`, or nothing when it failed: then the
/// kernel's refusal is noted and the memory lent handed back for the read by RMA.
fn copied_or_not(
    shared: &Shared,
    (pid, copied): (u32, std::result::Result<(), fabric::cma::CmaError>),
    dst: Dst,
    len: usize,
) -> Taken {
    match copied {
        Ok(()) => Taken::Here(dst.into_data(len, shared), Direct::Copied),
        Err(e) => {
            refused(shared, &e);
            tracing::debug!("pool client: taking from process {pid} failed ({e}); reading by RMA");
            Taken::NotHere(dst.give_back(shared))
        }
    }
}

/// What [`take_from_process`] did.
pub(super) enum Taken {
    /// The bytes, and how they were taken.
    Here(CdoData, Direct),
    /// Nothing: the memory lent for them, unused.
    NotHere(Option<Buffer>),
}

/// Whether the process `m` names holds its token (checked once per announcement), and the
/// client still copies from other processes' memory.
pub(super) fn genuine(shared: &Shared, m: ProcessMemory) -> bool {
    let mut verified = shared
        .verified
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ok = *verified.entry(m).or_insert_with(|| {
        match fabric::cma::holds(m.pid, m.token_addr, m.token) {
            Ok(true) => true,
            Ok(false) => {
                tracing::debug!(
                    "pool client: process {} is not the provider that announced it; reading by RMA",
                    m.pid
                );
                false
            }
            Err(e) => {
                refused(shared, &e);
                tracing::debug!("pool client: not copying from process {}: {e}", m.pid);
                false
            }
        }
    });
    ok && shared.cross_memory.load(Ordering::Relaxed)
}

/// Stops copying from other processes' memory for good when the kernel refuses it (said
/// once).
pub(super) fn refused(shared: &Shared, e: &fabric::cma::CmaError) {
    if matches!(e, fabric::cma::CmaError::Denied { .. })
        && shared.cross_memory.swap(false, Ordering::Relaxed)
    {
        tracing::info!("pool client: {e}");
    }
}

/// Where a same-host copy comes from: the consumer endpoint a fallback would read with,
/// the provider's process (and the offer's memory file), the address and the length.
type CopySource = (u8, HostMemory, u64, usize);
