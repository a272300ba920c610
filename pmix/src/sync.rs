//! Waiting for PMIx callbacks with a deadline.
//!
//! The non-blocking PMIx calls (`*_nb`, the server's upcall replies, ...) report through a C
//! callback with a `cbdata` pointer. A [`Completion`] is that pointer: an `Arc` whose one
//! strong reference is lent to C for as long as the callback may still come. The caller
//! waits with a timeout; if the timeout wins, the caller returns and the `Arc` (with any
//! argument buffers kept inside) lives on until PMIx calls back, so nothing is freed under
//! PMIx's feet and no wait is unbounded.

use std::any::Any;
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use pmix_sys as sys;

use crate::error::{Error, Result, check};
use crate::value::{Info, InfoArray};

/// A one-shot result slot filled by a C callback.
pub(crate) struct Completion<T> {
    slot: Mutex<Option<T>>,
    cv: Condvar,
    /// Argument buffers PMIx may read until it calls back (kept alive, never read here).
    keep: Mutex<Vec<Box<dyn Any + Send>>>,
}

/// Locks a mutex, ignoring poisoning (a panicking holder leaves consistent data here: every
/// critical section in this crate is a single assignment or push).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T: Send + 'static> Completion<T> {
    /// A new, empty completion.
    pub(crate) fn new() -> Arc<Completion<T>> {
        Arc::new(Completion {
            slot: Mutex::new(None),
            cv: Condvar::new(),
            keep: Mutex::new(Vec::new()),
        })
    }

    /// Keeps `v` alive as long as the completion (for argument buffers PMIx reads late).
    pub(crate) fn keep(&self, v: impl Any + Send) {
        lock(&self.keep).push(Box::new(v));
    }

    /// Lends one strong reference to C as `cbdata`.
    pub(crate) fn lend(self: &Arc<Self>) -> *mut c_void {
        Arc::into_raw(Arc::clone(self)) as *mut c_void
    }

    /// Takes back the reference lent with [`Completion::lend`] when the C call failed
    /// synchronously and will never call back.
    ///
    /// # Safety
    /// `cbdata` must come from `lend` on this type and not have been reclaimed yet.
    pub(crate) unsafe fn reclaim(cbdata: *mut c_void) {
        // SAFETY: `cbdata` came from `lend` (one `Arc::into_raw`) and is reclaimed once
        // (this function's contract).
        drop(unsafe { Arc::from_raw(cbdata as *const Completion<T>) });
    }

    /// Fills the slot from a C callback and drops the lent reference.
    ///
    /// # Safety
    /// `cbdata` must come from `lend` on this type, and each lent reference may complete
    /// only once.
    pub(crate) unsafe fn complete(cbdata: *mut c_void, v: T) {
        // SAFETY: `cbdata` came from `lend` (one `Arc::into_raw`) and completes once (this
        // function's contract).
        let this = unsafe { Arc::from_raw(cbdata as *const Completion<T>) };
        *lock(&this.slot) = Some(v);
        this.cv.notify_all();
    }

    /// Waits for the result until `timeout` elapses; `None` on timeout.
    pub(crate) fn wait(&self, timeout: Duration) -> Option<T> {
        let slot = lock(&self.slot);
        let (mut slot, _) = self
            .cv
            .wait_timeout_while(slot, timeout, |s| s.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        slot.take()
    }
}

/// Starts a non-blocking PMIx call and waits for its status callback.
///
/// `start` receives the `cbdata` to pass to C and returns the call's immediate status.
/// `PMIX_OPERATION_SUCCEEDED` means "done, no callback". Errors map through [`check`];
/// running past `timeout` is [`Error::Timeout`].
pub(crate) fn call_op(
    op: &'static str,
    timeout: Duration,
    keep: Option<InfoArray>,
    start: impl FnOnce(*mut c_void) -> i32,
) -> Result<()> {
    let done = Completion::<i32>::new();
    if let Some(k) = keep {
        done.keep(k);
    }
    let cbdata = done.lend();
    let rc = start(cbdata);
    if rc != sys::PMIX_SUCCESS as i32 {
        // SAFETY: the call failed or completed synchronously; no callback will come.
        unsafe { Completion::<i32>::reclaim(cbdata) };
        return check(op, rc);
    }
    match done.wait(timeout) {
        Some(status) => check(op, status),
        None => Err(Error::Timeout { op }),
    }
}

/// The `pmix_op_cbfunc_t` for a `Completion<i32>`.
pub(crate) unsafe extern "C" fn op_cb(status: i32, cbdata: *mut c_void) {
    crate::ffi::guard("PMIx callback op_cb", (), || {
        // SAFETY: PMIx hands back the cbdata we lent for this callback type.
        unsafe { Completion::<i32>::complete(cbdata, status) };
    })
}

/// The `pmix_info_cbfunc_t` for a `Completion<(i32, Vec<Info>)>`.
pub(crate) unsafe extern "C" fn info_cb(
    status: i32,
    info: *mut sys::pmix_info_t,
    ninfo: usize,
    cbdata: *mut c_void,
    release_fn: sys::pmix_release_cbfunc_t,
    release_cbdata: *mut c_void,
) {
    crate::ffi::guard("PMIx callback info_cb", (), || {
        // SAFETY: PMIx lends `ninfo` valid infos until release_fn is called.
        let infos = unsafe { Info::vec_from_raw(info, ninfo) };
        if let Some(release) = release_fn {
            // SAFETY: releasing what PMIx lent, once.
            unsafe { release(release_cbdata) };
        }
        // SAFETY: cbdata is ours.
        unsafe { Completion::<(i32, Vec<Info>)>::complete(cbdata, (status, infos)) };
    })
}

/// Builds the C array for a call's directives.
pub(crate) fn infos(list: &[Info]) -> Result<InfoArray> {
    InfoArray::new(list)
}
