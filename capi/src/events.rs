//! C event lists: each event of a poll or wait becomes a `struct mstro_pool_event_` (the
//! header's layout, mirrored by [`Event`]) at the head of a node that also owns its strings
//! and the layer's event (for acknowledgements). Live nodes are tracked, so disposing or
//! acknowledging something that is not a live event list is `MSTRO_INVARG`.

use std::collections::HashSet;
use std::ffi::{CString, c_char};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mstro::{Error, EventKind, PoolEvent, Subscription};

use crate::{mstro_subscription, raw};

/// `struct mstro_pool_event_cdo`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CdoPayload {
    cdo_name: *const c_char,
    appid: u64,
    component_name: *const c_char,
    component_index: i64,
    detail: *const c_char,
}

/// `struct mstro_pool_event_app`.
#[repr(C)]
#[derive(Clone, Copy)]
struct AppPayload {
    appid: u64,
    component_name: *const c_char,
    component_index: i64,
    detail: *const c_char,
}

/// The payload union.
#[repr(C)]
union Payload {
    cdo: CdoPayload,
    app: AppPayload,
}

/// `struct mstro_pool_event_`.
#[repr(C)]
pub struct Event {
    kind: u32,
    serial: u64,
    time_ns: i64,
    before: bool,
    needs_ack: bool,
    next: *mut Event,
    payload: Payload,
}

/// The layout the header's event structs must have (checked against the C compiler's by
/// `abi_check`): `(C expression, value)` pairs.
#[cfg(test)]
pub(crate) fn layout() -> Vec<(String, usize)> {
    use std::mem::{offset_of, size_of};
    // `sizeof(C)` of a Rust type, and `offsetof(C, field)` of its fields (same names).
    macro_rules! figures {
        ($(($c:literal, $t:ty, [$($f:ident),*])),* $(,)?) => {
            vec![$(
                (format!("sizeof({})", $c), size_of::<$t>()),
                $((format!("offsetof({}, {})", $c, stringify!($f)), offset_of!($t, $f)),)*
            )*]
        };
    }
    figures![
        (
            "struct mstro_pool_event_",
            Event,
            [kind, serial, time_ns, before, needs_ack, next, payload]
        ),
        ("union mstro_pool_event_payload", Payload, []),
        (
            "struct mstro_pool_event_cdo",
            CdoPayload,
            [cdo_name, appid, component_name, component_index, detail]
        ),
        (
            "struct mstro_pool_event_app",
            AppPayload,
            [appid, component_name, component_index, detail]
        ),
    ]
}

/// An event and what it owns; `event` first, so a pointer to the node is one to the event.
#[repr(C)]
struct Node {
    event: Event,
    _strings: Vec<CString>,
    source: PoolEvent,
}

/// Addresses of live nodes.
static LIVE: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(Mutex::default);

fn live() -> MutexGuard<'static, HashSet<usize>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

/// A node for `e`, linked before `next`.
fn node(e: PoolEvent, next: *mut Event) -> *mut Event {
    let name = c_string(e.cdo.as_deref().unwrap_or(""));
    let component = c_string(&e.component);
    let detail = c_string(&e.detail);
    let payload = if e.kind.is_cdo_event() {
        Payload {
            cdo: CdoPayload {
                cdo_name: name.as_ptr(),
                appid: e.app,
                component_name: component.as_ptr(),
                component_index: e.index,
                detail: detail.as_ptr(),
            },
        }
    } else {
        Payload {
            app: AppPayload {
                appid: e.app,
                component_name: component.as_ptr(),
                component_index: e.index,
                detail: detail.as_ptr(),
            },
        }
    };
    let boxed = Box::new(Node {
        event: Event {
            kind: e.kind.bit(),
            serial: e.serial,
            time_ns: i64::try_from(e.time).unwrap_or(i64::MAX),
            before: e.before,
            needs_ack: e.needs_ack,
            next,
            payload,
        },
        // The CStrings' heap buffers do not move with the Vec.
        _strings: vec![name, component, detail],
        source: e,
    });
    let p = Box::into_raw(boxed);
    live().insert(p.addr());
    p.cast()
}

/// The list of `events`, oldest first; NULL if empty.
fn list(events: Vec<PoolEvent>) -> *mut Event {
    events
        .into_iter()
        .rev()
        .fold(std::ptr::null_mut(), |next, e| node(e, next))
}

/// The nodes of the list at `head`, checked live.
fn nodes(head: *mut Event) -> mstro::Result<Vec<*mut Node>> {
    let live = live();
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        if !live.contains(&p.addr()) || out.len() > live.len() {
            return Err(Error::invarg(
                "not a live event list (disposed already, or not from poll/wait)",
            ));
        }
        out.push(p.cast::<Node>());
        // SAFETY: a live node made by `node`.
        p = unsafe { (*p).next };
    }
    Ok(out)
}

fn deliver(out: *mut *mut Event, events: Vec<PoolEvent>) -> mstro::Result<()> {
    // SAFETY: checked non-NULL by the callers; writable (caller's contract).
    unsafe { out.write(list(events)) };
    Ok(())
}

fn out_checked(out: *mut *mut Event) -> mstro::Result<()> {
    if out.is_null() {
        return Err(Error::invarg("event_p (the result pointer) is NULL"));
    }
    // SAFETY: non-NULL, writable (caller's contract): NULL until there are events.
    unsafe { out.write(std::ptr::null_mut()) };
    Ok(())
}

entry! {
    /// `mstro_subscription_poll`.
    ///
    /// # Safety
    /// `event_p` is writable.
    unsafe fn mstro_subscription_poll(
        s: mstro_subscription,
        event_p: *mut *mut Event,
    ) {
        out_checked(event_p)?;
        deliver(event_p, mstro::subscription_poll(Subscription(raw(s)))?)
    }
}

entry! {
    /// `mstro_subscription_wait`.
    ///
    /// # Safety
    /// `event_p` is writable.
    unsafe fn mstro_subscription_wait(
        s: mstro_subscription,
        event_p: *mut *mut Event,
    ) {
        out_checked(event_p)?;
        deliver(
            event_p,
            mstro::subscription_wait(Subscription(raw(s)), None)?,
        )
    }
}

entry! {
    /// `mstro_subscription_timedwait`.
    ///
    /// # Safety
    /// `abstime` points at a `struct timespec`; `event_p` is writable.
    unsafe fn mstro_subscription_timedwait(
        s: mstro_subscription,
        abstime: *const libc::timespec,
        event_p: *mut *mut Event,
    ) {
        out_checked(event_p)?;
        if abstime.is_null() {
            return Err(Error::invarg("abstime is NULL"));
        }
        // SAFETY: non-NULL, a timespec (caller's contract).
        let t = unsafe { *abstime };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            return Err(Error::invarg(format!(
                "abstime {}.{:09} is not a valid time",
                t.tv_sec, t.tv_nsec
            )));
        }
        let end = UNIX_EPOCH + Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
        let left = end
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        deliver(
            event_p,
            mstro::subscription_wait(Subscription(raw(s)), Some(left))?,
        )
    }
}

entry! {
    /// `mstro_subscription_ack`.
    fn mstro_subscription_ack(s: mstro_subscription, event: *mut Event) {
        if event.is_null() {
            return Err(Error::invarg("the event list is NULL"));
        }
        let nodes = nodes(event)?;
        // SAFETY: live nodes; the program does not dispose them during this call.
        let events: Vec<&PoolEvent> = nodes.iter().map(|n| unsafe { &(**n).source }).collect();
        mstro::subscription_ack(Subscription(raw(s)), &events)
    }
}

entry! {
    /// `mstro_pool_event_dispose`.
    fn mstro_pool_event_dispose(e: *mut Event) {
        if e.is_null() {
            return Err(Error::invarg("the event list is NULL"));
        }
        let nodes = nodes(e)?;
        let mut live = live();
        for n in nodes {
            live.remove(&n.addr());
            // SAFETY: made by Box::into_raw in `node`, removed from the live set: freed once.
            drop(unsafe { Box::from_raw(n) });
        }
        Ok(())
    }
}

/// The event kinds' names, by bit.
static KIND_NAMES: LazyLock<Vec<(u32, CString)>> = LazyLock::new(|| {
    EventKind::ALL
        .iter()
        .map(|k| (k.bit(), c_string(k.name())))
        .collect()
});

entry! {
    /// `mstro_pool_event_description`.
    fn mstro_pool_event_description(kind: u32) -> *const c_char, c"invalid".as_ptr() => {
        KIND_NAMES
            .iter()
            .find(|(bit, _)| *bit == kind)
            .map_or(c"invalid".as_ptr(), |(_, n)| n.as_ptr())
    }
}
