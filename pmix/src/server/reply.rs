//! Answers to host upcalls.
//!
//! PMIx hands every upcall a C callback plus `cbdata`; the host must call it exactly once,
//! now or later. Each reply type here owns that pair, is `Send` (so a host may answer from
//! another thread, e.g. a lookup that waits for a publish), is consumed by its `send`
//! method, and, if dropped unanswered, answers with an error so the requesting client never
//! hangs.
//!
//! Every answer is made on one thread of this crate's ([`replier`]), never on the stack of
//! the upcall that asked: OpenPMIx 4.2 still holds locks of its own around some upcalls
//! (`log`, `notify_event`), and a callback made from inside them waits for those locks
//! forever. Answers keep their order.

use std::ffi::{c_char, c_void};

use pmix_sys as sys;

use crate::client::Published;
use crate::error::Status;
use crate::value::Proc;
use crate::value::{Info, InfoArray};
use crate::value::{bytes_to_raw, copy_cstr};

/// The status a dropped, unanswered reply sends.
const UNANSWERED: i32 = sys::PMIX_ERROR;

macro_rules! reply_type {
    ($(#[$doc:meta])* $name:ident, $cb:ty, $fail:expr) => {
        $(#[$doc])*
        pub struct $name {
            cb: $cb,
            cbdata: *mut c_void,
        }

        // SAFETY: PMIx's callbacks may be called from any thread; cbdata is opaque to us.
        unsafe impl Send for $name {}

        impl $name {
            pub(crate) fn new(cb: $cb, cbdata: *mut c_void) -> Self {
                $name { cb, cbdata }
            }

            /// Takes the callback out, so that drop does not answer a second time.
            fn take(&mut self) -> ($cb, *mut c_void) {
                (self.cb.take(), self.cbdata)
            }
        }

        impl Drop for $name {
            /// An abandoned upcall is answered with an error, once.
            fn drop(&mut self) {
                let (cb, cbdata) = self.take();
                if cb.is_some() {
                    let fail: fn($name, Status) = $fail;
                    fail($name { cb, cbdata }, Status(UNANSWERED));
                }
            }
        }
    };
}

reply_type!(
    /// Answers an upcall with a plain status (`pmix_op_cbfunc_t`).
    OpReply,
    sys::pmix_op_cbfunc_t,
    |r, s| r.send(Err(s))
);
reply_type!(
    /// Answers a fence or direct-modex upcall with a data blob (`pmix_modex_cbfunc_t`).
    ModexReply,
    sys::pmix_modex_cbfunc_t,
    |r, s| r.send(Err(s))
);
reply_type!(
    /// Answers a lookup upcall with published data (`pmix_lookup_cbfunc_t`).
    LookupReply,
    sys::pmix_lookup_cbfunc_t,
    |r, s| r.send(Err(s))
);
reply_type!(
    /// Answers a query (or fabric) upcall with infos (`pmix_info_cbfunc_t`).
    InfoReply,
    sys::pmix_info_cbfunc_t,
    |r, s| r.send(s, Vec::new())
);
reply_type!(
    /// Answers a tool connection with the tool's assigned name.
    ToolReply,
    sys::pmix_tool_connection_cbfunc_t,
    |r, s| r.send(Err(s))
);
reply_type!(
    /// Answers a credential request.
    CredentialReply,
    sys::pmix_credential_cbfunc_t,
    |r, s| r.send(Err(s))
);
reply_type!(
    /// Answers a credential validation with what is known of its owner.
    ValidationReply,
    sys::pmix_validation_cbfunc_t,
    |r, s| r.send(Err(s))
);

reply_type!(
    /// Answers a spawn with the new job's namespace (`pmix_spawn_cbfunc_t`).
    SpawnReply,
    sys::pmix_spawn_cbfunc_t,
    |r, s| r.send(Err(s))
);

fn status_of<T>(r: &Result<T, Status>) -> i32 {
    match r {
        Ok(_) => sys::PMIX_SUCCESS as i32,
        Err(s) => s.0,
    }
}

impl OpReply {
    /// Answers with success or the given status (from the replier thread).
    pub fn send(self, result: Result<(), Status>) {
        replier::run(move || self.send_now(result));
    }

    fn send_now(mut self, result: Result<(), Status>) {
        let (cb, cbdata) = self.take();
        if let Some(cb) = cb {
            // SAFETY: the callback PMIx gave for this upcall, called once.
            unsafe { cb(status_of(&result), cbdata) };
        }
    }
}

/// Frees a blob handed to PMIx by [`ModexReply::send`].
unsafe extern "C" fn release_blob(cbdata: *mut c_void) {
    crate::ffi::guard("PMIx callback release_blob", (), || {
        // SAFETY: cbdata is the Box<Vec<u8>> leaked in send.
        drop(unsafe { Box::from_raw(cbdata as *mut Vec<u8>) });
    })
}

impl ModexReply {
    /// Answers with the blob (PMIx frees it through a release callback) or a status
    /// (from the replier thread).
    pub fn send(self, result: Result<Vec<u8>, Status>) {
        replier::run(move || self.send_now(result));
    }

    fn send_now(mut self, result: Result<Vec<u8>, Status>) {
        let (cb, cbdata) = self.take();
        let Some(cb) = cb else { return };
        match result {
            Ok(data) => {
                let boxed = Box::new(data);
                let (ptr, len) = (boxed.as_ptr() as *const c_char, boxed.len());
                let rel = Box::into_raw(boxed) as *mut c_void;
                // SAFETY: the blob stays valid until PMIx calls release_blob.
                unsafe {
                    cb(
                        sys::PMIX_SUCCESS as i32,
                        ptr,
                        len,
                        cbdata,
                        Some(release_blob),
                        rel,
                    )
                };
            }
            Err(s) => {
                // SAFETY: no data, no release.
                unsafe { cb(s.0, std::ptr::null(), 0, cbdata, None, std::ptr::null_mut()) };
            }
        }
    }
}

impl LookupReply {
    /// Answers with the data found (`PMIX_ERR_NOT_FOUND` when empty) or a status (from
    /// the replier thread).
    pub fn send(self, result: Result<Vec<Published>, Status>) {
        replier::run(move || self.send_now(result));
    }

    fn send_now(mut self, result: Result<Vec<Published>, Status>) {
        let (cb, cbdata) = self.take();
        let Some(cb) = cb else { return };
        let found = match result {
            Ok(f) if !f.is_empty() => f,
            Ok(_) => {
                // SAFETY: answering once with no data.
                unsafe { cb(sys::PMIX_ERR_NOT_FOUND, std::ptr::null_mut(), 0, cbdata) };
                return;
            }
            Err(s) => {
                // SAFETY: answering once with no data.
                unsafe { cb(s.0, std::ptr::null_mut(), 0, cbdata) };
                return;
            }
        };
        // SAFETY: zeroed pdata array of found.len() entries.
        let pd = unsafe { sys::mpmix_pdata_create(found.len()) };
        let mut filled = 0;
        for (i, p) in found.iter().enumerate() {
            // SAFETY: i < len.
            let slot = unsafe { &mut *pd.add(i) };
            let ok = p.publisher.to_raw().map(|r| slot.proc_ = r).is_ok()
                && copy_cstr(&mut slot.key, &p.key, "key").is_ok()
                // SAFETY: slot.value is zeroed.
                && unsafe { p.value.load(&mut slot.value) }.is_ok();
            if ok {
                filled += 1;
            }
        }
        let status = if filled == found.len() {
            sys::PMIX_SUCCESS as i32
        } else {
            sys::PMIX_ERR_BAD_PARAM
        };
        // SAFETY: PMIx copies the data during the callback; freed right after.
        unsafe {
            cb(status, pd, found.len(), cbdata);
            sys::mpmix_pdata_free(pd, found.len());
        }
    }
}

/// Frees an info array handed to PMIx by [`InfoReply::send`].
unsafe extern "C" fn release_infos(cbdata: *mut c_void) {
    crate::ffi::guard("PMIx callback release_infos", (), || {
        // SAFETY: cbdata is the Box<InfoArray> leaked in send.
        drop(unsafe { Box::from_raw(cbdata as *mut InfoArray) });
    })
}

impl InfoReply {
    /// Answers with a status and infos (PMIx frees them through a release callback), from
    /// the replier thread. Use `PMIX_ERR_PARTIAL_SUCCESS` when only some queries were
    /// answered.
    pub fn send(self, status: Status, infos: Vec<Info>) {
        replier::run(move || self.send_now(status, infos));
    }

    fn send_now(mut self, status: Status, infos: Vec<Info>) {
        let (cb, cbdata) = self.take();
        let Some(cb) = cb else { return };
        match InfoArray::new(&infos) {
            Ok(arr) => {
                let (p, n) = (arr.as_ptr(), arr.len());
                let rel = Box::into_raw(Box::new(arr)) as *mut c_void;
                // SAFETY: the array lives until PMIx calls release_infos.
                unsafe { cb(status.0, p, n, cbdata, Some(release_infos), rel) };
            }
            Err(e) => {
                tracing::warn!("query answer not representable: {e}");
                // SAFETY: answering once with no data.
                unsafe {
                    cb(
                        sys::PMIX_ERR_BAD_PARAM,
                        std::ptr::null_mut(),
                        0,
                        cbdata,
                        None,
                        std::ptr::null_mut(),
                    )
                };
            }
        }
    }
}

impl ToolReply {
    /// Leaves the connection unanswered, for good. OpenPMIx 4.2 cannot refuse a tool:
    /// its error path removes the tool's namespace from a list it was never put in and
    /// crashes the server. A host that must turn a tool away abandons the reply (the
    /// pending connection is never set up, so the tool gets no service) and cuts the
    /// tool's socket itself (the tool's init then fails).
    pub fn abandon(mut self) {
        let _ = self.take();
    }

    /// Answers with the name assigned to the tool, or a refusal (from the replier thread).
    pub fn send(self, result: Result<Proc, Status>) {
        replier::run(move || self.send_now(result));
    }

    fn send_now(mut self, result: Result<Proc, Status>) {
        let (cb, cbdata) = self.take();
        let Some(cb) = cb else { return };
        match result.map(|p| p.to_raw()) {
            Ok(Ok(mut raw)) => {
                // SAFETY: PMIx copies the proc during the call.
                unsafe { cb(sys::PMIX_SUCCESS as i32, &mut raw, cbdata) };
            }
            // OpenPMIx 4.2 reads the proc even with an error status (a NULL one crashes
            // the server): refusals carry an empty name.
            refused => {
                let status = match refused {
                    Err(s) => s.0,
                    _ => sys::PMIX_ERR_BAD_PARAM,
                };
                let mut none = sys::pmix_proc_t::default();
                // SAFETY: answering once; PMIx copies the proc during the call.
                unsafe { cb(status, &mut none, cbdata) };
            }
        }
    }
}

impl SpawnReply {
    /// Answers with the namespace of the job that was started, or why none was (from the
    /// replier thread). A namespace PMIx cannot carry (a NUL inside) answers
    /// `PMIX_ERR_BAD_PARAM`.
    pub fn send(self, result: Result<String, Status>) {
        replier::run(move || self.send_now(result));
    }

    fn send_now(mut self, result: Result<String, Status>) {
        let (cb, cbdata) = self.take();
        let Some(cb) = cb else { return };
        let named = result
            .and_then(|ns| std::ffi::CString::new(ns).map_err(|_| Status(sys::PMIX_ERR_BAD_PARAM)));
        match named {
            Ok(ns) => {
                // SAFETY: PMIx copies the namespace during the call.
                unsafe { cb(sys::PMIX_SUCCESS as i32, ns.as_ptr().cast_mut(), cbdata) };
            }
            Err(s) => {
                // SAFETY: answering once; no namespace with an error.
                unsafe { cb(s.0, std::ptr::null_mut(), cbdata) };
            }
        }
    }
}

impl CredentialReply {
    /// Answers with a credential and infos describing it (`PMIX_CRED_TYPE`, ...), from the
    /// replier thread.
    pub fn send(self, result: Result<(Vec<u8>, Vec<Info>), Status>) {
        replier::run(move || self.send_now(result));
    }

    fn send_now(mut self, result: Result<(Vec<u8>, Vec<Info>), Status>) {
        let (cb, cbdata) = self.take();
        let Some(cb) = cb else { return };
        match result {
            Ok((bytes, info)) => {
                let mut bo = bytes_to_raw(&bytes);
                let arr = InfoArray::new(&info).ok();
                let (p, n) = arr
                    .as_ref()
                    .map_or((std::ptr::null_mut(), 0), |a| (a.as_ptr(), a.len()));
                // SAFETY: PMIx copies credential and infos during the call; freed after.
                unsafe {
                    cb(sys::PMIX_SUCCESS as i32, &mut bo, p, n, cbdata);
                    sys::mpmix_byte_object_destruct(&mut bo);
                }
            }
            Err(s) => {
                // SAFETY: answering once.
                unsafe { cb(s.0, std::ptr::null_mut(), std::ptr::null_mut(), 0, cbdata) };
            }
        }
    }
}

impl ValidationReply {
    /// Answers with what is known of the credential's owner, or `PMIX_ERR_INVALID_CRED`
    /// (from the replier thread).
    pub fn send(self, result: Result<Vec<Info>, Status>) {
        replier::run(move || self.send_now(result));
    }

    fn send_now(mut self, result: Result<Vec<Info>, Status>) {
        let (cb, cbdata) = self.take();
        let Some(cb) = cb else { return };
        match result {
            Ok(info) => {
                let arr = InfoArray::new(&info).ok();
                let (p, n) = arr
                    .as_ref()
                    .map_or((std::ptr::null_mut(), 0), |a| (a.as_ptr(), a.len()));
                // SAFETY: PMIx copies the infos during the call.
                unsafe { cb(sys::PMIX_SUCCESS as i32, p, n, cbdata) };
            }
            Err(s) => {
                // SAFETY: answering once.
                unsafe { cb(s.0, std::ptr::null_mut(), 0, cbdata) };
            }
        }
    }
}

/// The one thread that makes every answer to an upcall (see the module docs).
pub(crate) mod replier {
    use std::sync::mpsc::{Sender, channel};
    use std::sync::{Mutex, OnceLock, PoisonError};
    use std::time::Duration;

    type Job = Box<dyn FnOnce() + Send>;

    fn queue() -> Option<&'static Mutex<Sender<Job>>> {
        static QUEUE: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
        QUEUE
            .get_or_init(|| {
                let (tx, rx) = channel::<Job>();
                let spawned = std::thread::Builder::new()
                    .name("pmix-replies".into())
                    .spawn(move || {
                        for job in rx {
                            crate::ffi::guard("a PMIx upcall's answer", (), job);
                        }
                    });
                match spawned {
                    Ok(_) => Some(Mutex::new(tx)),
                    Err(e) => {
                        tracing::error!("no thread for PMIx answers ({e}); answering in place");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Runs `job` (an answer) on the replier thread, after those queued before it; in
    /// place if that thread could not be started.
    pub(crate) fn run(job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        let Some(q) = queue() else {
            return job();
        };
        let tx = q.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(returned) = tx.send(job) {
            drop(tx);
            (returned.0)();
        }
    }

    /// Waits (at most `limit`) until every answer queued so far is made: before the
    /// server finalizes, no callback may be left for later.
    pub(crate) fn flush(limit: Duration) -> bool {
        let (done, wait) = channel();
        run(move || {
            let _ = done.send(());
        });
        wait.recv_timeout(limit).is_ok()
    }
}
