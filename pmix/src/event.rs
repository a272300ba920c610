//! PMIx events delivered into Rust.
//!
//! [`EventHandler`] registers for an explicit list of status codes (PMIx 4.2 servers drop a
//! client's catch-all registration, so there is no "all events" form) and queues every
//! notification into a channel that [`EventHandler::recv_timeout`] reads. The handler is
//! deregistered when dropped. It borrows the client, server or tool that made it, so it
//! cannot outlive PMIx finalisation.

use std::ffi::c_void;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use pmix_sys as sys;

use crate::error::{Result, Status, check, from_status};
use crate::sync::infos;
use crate::value::Info;
use crate::value::{Proc, Value};

/// The reach of an event or of published data (`pmix_data_range_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    /// Only the calling process.
    ProcLocal,
    /// Processes on this node.
    Local,
    /// The caller's namespace (job).
    Namespace,
    /// The session (allocation).
    Session,
    /// Everyone the host reaches.
    Global,
    /// The processes named by a `PMIX_EVENT_CUSTOM_RANGE` info of the event.
    Custom,
}

impl Range {
    /// The range as PMIx numbers it (`pmix_data_range_t`), as [`crate::Value::Range`]
    /// carries it.
    pub fn raw(self) -> u8 {
        (match self {
            Range::ProcLocal => sys::PMIX_RANGE_PROC_LOCAL,
            Range::Local => sys::PMIX_RANGE_LOCAL,
            Range::Namespace => sys::PMIX_RANGE_NAMESPACE,
            Range::Session => sys::PMIX_RANGE_SESSION,
            Range::Global => sys::PMIX_RANGE_GLOBAL,
            Range::Custom => sys::PMIX_RANGE_CUSTOM,
        }) as u8
    }
}

/// One notification.
#[derive(Clone, Debug)]
pub struct Event {
    /// The event code (`PMIX_ERR_PROC_ABORTED`, an application code, ...).
    pub status: Status,
    /// Who raised it, when PMIx says.
    pub source: Option<Proc>,
    /// The attached information (affected procs, message, ...), minus PMIx's internal
    /// return-object entry.
    pub info: Vec<Info>,
}

impl Event {
    /// The process the event is about (`PMIX_EVENT_AFFECTED_PROC`), if named.
    pub fn affected_proc(&self) -> Option<&Proc> {
        match crate::value::find(&self.info, crate::keys::EVENT_AFFECTED_PROC) {
            Some(Value::Proc(p)) => Some(p),
            _ => None,
        }
    }
}

/// A registered event handler; events queue up until read. Deregisters on drop.
pub struct EventHandler<'a> {
    id: usize,
    rx: Receiver<Event>,
    ctx: *mut Sender<Event>,
    _owner: std::marker::PhantomData<&'a ()>,
}

// SAFETY: `ctx` is only dereferenced by PMIx's progress thread (a `Sender`, which is Send +
// Sync) and freed in drop after deregistration.
unsafe impl Send for EventHandler<'_> {}

impl EventHandler<'_> {
    /// Registers for `codes`. Used by `Client`, `Server` and `Tool`, which tie the lifetime.
    pub(crate) fn register(codes: &[Status]) -> Result<Self> {
        let (tx, rx) = channel();
        let ctx = Box::into_raw(Box::new(tx));
        let directives = infos(&[Info::new(
            crate::keys::EVENT_RETURN_OBJECT,
            Value::Pointer(ctx as usize),
        )]);
        let directives = match directives {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: ctx was just leaked from a Box and never shared.
                drop(unsafe { Box::from_raw(ctx) });
                return Err(e);
            }
        };
        let mut raw_codes: Vec<i32> = codes.iter().map(|s| s.0).collect();
        // SAFETY: blocking registration (cbfunc NULL): returns the handler id (>= 0) or an
        // error; codes and directives stay valid for the call.
        let rc = unsafe {
            sys::PMIx_Register_event_handler(
                raw_codes.as_mut_ptr(),
                raw_codes.len(),
                directives.as_ptr(),
                directives.len(),
                Some(trampoline),
                None,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            // SAFETY: registration failed; PMIx holds no reference to ctx.
            drop(unsafe { Box::from_raw(ctx) });
            return Err(from_status("PMIx_Register_event_handler", rc, None));
        }
        Ok(EventHandler {
            id: rc as usize,
            rx,
            ctx,
            _owner: std::marker::PhantomData,
        })
    }

    /// Waits up to `timeout` for the next event; `None` if none came.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Event> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// The next queued event, without waiting.
    pub fn try_recv(&self) -> Option<Event> {
        self.rx.try_recv().ok()
    }
}

impl Drop for EventHandler<'_> {
    fn drop(&mut self) {
        // SAFETY: blocking deregistration; afterwards PMIx no longer calls the trampoline
        // with ctx, so it can be freed.
        let rc = unsafe { sys::PMIx_Deregister_event_handler(self.id, None, std::ptr::null_mut()) };
        if let Err(e) = check("PMIx_Deregister_event_handler", rc) {
            tracing::warn!("{e}; leaking the handler context");
            return;
        }
        // SAFETY: leaked from a Box in register; no longer referenced by PMIx.
        drop(unsafe { Box::from_raw(self.ctx) });
    }
}

/// The C handler: forwards the event into the channel named by the return object, then
/// lets PMIx continue the handler chain.
unsafe extern "C" fn trampoline(
    _id: usize,
    status: i32,
    source: *const sys::pmix_proc_t,
    info: *mut sys::pmix_info_t,
    ninfo: usize,
    _results: *mut sys::pmix_info_t,
    _nresults: usize,
    cbfunc: sys::pmix_event_notification_cbfunc_fn_t,
    cbdata: *mut c_void,
) {
    crate::ffi::guard("PMIx callback trampoline", (), || {
        // SAFETY: PMIx lends `ninfo` valid infos for the duration of the call.
        let mut all = unsafe { Info::vec_from_raw(info, ninfo) };
        let target = all
            .iter()
            .position(|i| i.key == crate::keys::EVENT_RETURN_OBJECT)
            .map(|pos| all.remove(pos));
        let source = if source.is_null() {
            None
        } else {
            // SAFETY: non-NULL here; PMIx lends the source proc until the handler returns,
            // and it is copied.
            Some(unsafe { Proc::from_raw(source) })
        };
        if let Some(Info {
            value: Value::Pointer(p),
            ..
        }) = target
        {
            // SAFETY: p is the Sender we registered; it lives until deregistration.
            let tx = unsafe { &*(p as *const Sender<Event>) };
            let _ = tx.send(Event {
                status: Status(status),
                source,
                info: all,
            });
        }
        if let Some(cb) = cbfunc {
            // SAFETY: PMIx requires the chain to be continued exactly once.
            unsafe {
                cb(
                    sys::PMIX_SUCCESS as i32,
                    std::ptr::null_mut(),
                    0,
                    None,
                    std::ptr::null_mut(),
                    cbdata,
                )
            };
        }
    })
}

/// Raises `status` with `source` as the origin (`PMIx_Notify_event`), waiting up to 10 s for
/// PMIx to accept it. Shared by client, server and tool.
pub(crate) fn notify(
    status: Status,
    source: Option<&Proc>,
    range: Range,
    info: &[Info],
) -> Result<()> {
    let raw_source = source.map(Proc::to_raw).transpose()?;
    let dirs = infos(info)?;
    let (dp, dn) = (dirs.as_ptr(), dirs.len());
    let src_ptr = raw_source
        .as_ref()
        .map_or(std::ptr::null(), |p| p as *const sys::pmix_proc_t);
    crate::sync::call_op(
        "PMIx_Notify_event",
        Duration::from_secs(10),
        Some(dirs),
        // SAFETY: source and info are valid for the call; info is kept until the callback.
        |cbdata| unsafe {
            sys::PMIx_Notify_event(
                status.0,
                src_ptr,
                range.raw(),
                dp,
                dn,
                Some(crate::sync::op_cb),
                cbdata,
            )
        },
    )
}
