//! `libmaestro`: Maestro Core's C API (`include/maestro.h`) over the [`mstro`] layer.
//!
//! This crate only translates: C arguments are checked (NULL pointers, UTF-8) and turned
//! into the layer's types, the layer's [`mstro::Error`] becomes an `mstro_status` (its
//! message goes to the log and to `mstro_last_error_message`), and every entry point runs
//! behind [`std::panic::catch_unwind`], so a bug here returns `MSTRO_FAIL` instead of
//! unwinding into C. Handles are the layer's registry numbers cast to pointers: C never
//! dereferences them, and a stale one is reported, not followed.
//!
//! What only C needs lives here too: values whose pointer is kept until seal
//! (`copy_value = false`), the storage `mstro_cdo_attribute_get` hands out pointers to,
//! and the C event lists (the `events` module).
//!
//! The header is the contract: `build.rs` reads it with bindgen (the `header` module), the
//! entry points take its types, and each function it declares is checked at compile time
//! to be defined here with its prototype (the `prototypes` module).
#![allow(non_camel_case_types)]

/// Defines a C entry point, exported under its own name, its body behind a panic boundary.
/// One that returns a status runs a `mstro::Result<()>` body behind [`guard`], so an error
/// becomes its status and this thread's last error message, and a panic `MSTRO_FAIL`,
/// either logged with the entry's name; `unsafe fn` for the entries whose pointer
/// arguments the caller vouches for (their `# Safety` section says what). One that returns
/// something else (`-> T, fallback => { ... }`) runs behind [`shield`], a panic returning
/// the fallback.
macro_rules! entry {
    ($(#[$m:meta])* unsafe fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $crate::mstro_status {
            $crate::guard(stringify!($name), || $body)
        }
    };
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($a: $t),*) -> $crate::mstro_status {
            $crate::guard(stringify!($name), || $body)
        }
    };
    // An entry that returns no status: a panic returns `$fallback` instead.
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $ret:ty, $fallback:expr => $body:block) => {
        $(#[$m])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($a: $t),*) -> $ret {
            $crate::shield($fallback, || $body)
        }
    };
}

#[cfg(test)]
mod abi_check;
mod attrs;
mod events;
mod groups;

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use mstro::{Error, Status};

/// The header's types and declarations, read from `include/maestro.h` by bindgen (see
/// `build.rs`): the entry points below take and return exactly these types.
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    clippy::all,
    clippy::pedantic,
    unreachable_pub
)]
mod header {
    include!(concat!(env!("OUT_DIR"), "/header.rs"));
}

/// Every function the header declares is defined by this library with the header's
/// prototype, checked at compile time (see `build.rs`).
#[allow(unused_assignments)]
mod prototypes {
    use super::events::*;
    use super::groups::*;
    use super::*;
    include!(concat!(env!("OUT_DIR"), "/prototypes.rs"));
}

pub use header::{mstro_cdo, mstro_cdo_selector, mstro_request, mstro_status, mstro_subscription};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `e` as this thread's last error (`mstro_last_error_message`) and logs it at
/// debug level: the program gets the status and handles it (a timeout it polls for, say);
/// a line at every such call would drown what the log is for.
fn fail(func: &str, e: &Error) -> mstro_status {
    tracing::debug!("{func}: {}", e.message);
    let text =
        CString::new(format!("{func}: {}", e.message).replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = text);
    e.status as mstro_status
}

/// Runs an entry point: its error becomes a status, a panic becomes `MSTRO_FAIL`.
fn guard(func: &str, body: impl FnOnce() -> mstro::Result<()>) -> mstro_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Status::Ok as mstro_status,
        Ok(Err(e)) => fail(func, &e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!("{func}: internal error ({what})");
            fail(
                func,
                &Error::new(
                    Status::Fail,
                    format!("internal error ({what}); please report it"),
                ),
            )
        }
    }
}

/// Runs an entry point that has no status to return (a description, the clock): a panic
/// gives `fallback` instead of unwinding into C.
pub(crate) fn shield<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// A C string argument, which must be non-NULL UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char, what: &str) -> mstro::Result<&'a str> {
    if p.is_null() {
        return Err(Error::invarg(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated (caller's contract).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::invarg(format!("{what} is not UTF-8")))
}

/// An optional C string argument.
///
/// # Safety
/// As [`text`].
unsafe fn opt_text<'a>(p: *const c_char, what: &str) -> mstro::Result<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: `p` is NULL (refused) or a NUL-terminated string: this entry point's
        // contract with its C caller.
        unsafe { text(p, what) }.map(Some)
    }
}

/// Stores `value` through an out-pointer argument.
///
/// # Safety
/// `out` is NULL or valid for writes.
unsafe fn put<T>(out: *mut T, value: T, what: &str) -> mstro::Result<()> {
    if out.is_null() {
        return Err(Error::invarg(format!(
            "{what} (the result pointer) is NULL"
        )));
    }
    // SAFETY: non-NULL and writable (caller's contract).
    unsafe { out.write(value) };
    Ok(())
}

/// The C handle of the `mstro` layer's handle `raw` (a number, never dereferenced).
fn handle<T>(raw: u64) -> *mut T {
    std::ptr::without_provenance_mut(raw as usize)
}

/// The `mstro` layer's handle of the C handle `h`.
fn raw<T>(h: *const T) -> u64 {
    h.addr() as u64
}

fn cdo(h: mstro_cdo) -> mstro::Cdo {
    mstro::Cdo(raw(h))
}

/// The sentences describing the statuses, by code.
static STATUS_TEXTS: std::sync::LazyLock<Vec<CString>> = std::sync::LazyLock::new(|| {
    Status::ALL
        .iter()
        .map(|s| CString::new(s.description()).unwrap_or_default())
        .collect()
});

/// This library's version, as C reads it.
static VERSION: std::sync::LazyLock<CString> =
    std::sync::LazyLock::new(|| CString::new(mstro::version()).unwrap_or_default());

entry! {
    /// A sentence describing status `s`.
    fn mstro_status_description(s: mstro_status) -> *const c_char, c"unknown status".as_ptr() => {
        i32::try_from(s)
            .ok()
            .and_then(Status::from_code)
            .and_then(|st| STATUS_TEXTS.get(st as usize))
            .map_or(c"unknown status".as_ptr(), |t| t.as_ptr())
    }
}

entry! {
    /// Why this thread's last failing call failed ("" if none did, or if it cannot be read).
    fn mstro_last_error_message() -> *const c_char, c"".as_ptr() => {
        LAST_ERROR.with(|l| l.try_borrow().map_or(c"".as_ptr(), |t| t.as_ptr()))
    }
}

entry! {
    /// This library's version.
    fn mstro_version() -> *const c_char, c"".as_ptr() => {
        VERSION.as_ptr()
    }
}

entry! {
    /// Monotonic nanoseconds (0 if the clock cannot be read).
    fn mstro_clock() -> u64, 0 => {
        mstro::clock()
    }
}

entry! {
    /// `mstro_init`.
    ///
    /// # Safety
    /// The names are NULL or NUL-terminated strings.
    unsafe fn mstro_init(
        workflow_name: *const c_char,
        component_name: *const c_char,
        component_index: i64,
    ) {
        // SAFETY: `workflow_name` is NULL (not given) or a NUL-terminated string: this entry
        // point's contract with its C caller.
        let w = unsafe { opt_text(workflow_name, "workflow_name") }?;
        // SAFETY: `component_name` is NULL (not given) or a NUL-terminated string: this entry
        // point's contract with its C caller.
        let c = unsafe { opt_text(component_name, "component_name") }?;
        mstro::init(w, c, component_index)
    }
}

entry! {
    /// `mstro_finalize`.
    fn mstro_finalize() {
        let r = mstro::finalize();
        // Event lists stay valid until the program disposes of them.
        attrs::forget_all();
        r
    }
}

entry! {
    /// `mstro_cdo_declare`.
    ///
    /// # Safety
    /// `name` is NULL or NUL-terminated; `result` is NULL or writable.
    unsafe fn mstro_cdo_declare(
        name: *const c_char,
        attr: header::mstro_cdo_attributes,
        result: *mut mstro_cdo,
    ) {
        if result.is_null() {
            return Err(Error::invarg("result (the handle pointer) is NULL"));
        }
        if !attr.is_null() {
            return Err(Error::invarg(
                "declare takes MSTRO_ATTR_DEFAULT (NULL); set attributes with mstro_cdo_attribute_set",
            ));
        }
        // SAFETY: `name` is NULL (refused) or a NUL-terminated string: this entry point's
        // contract with its C caller.
        let name = unsafe { text(name, "name") }?;
        let h = mstro::cdo_declare(name)?;
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { put(result, handle(h.0), "result") }
    }
}

/// An entry point taking a CDO handle alone, doing `$body` with the CDO.
macro_rules! cdo_op {
    ($(#[$doc:meta])* $c:ident => $body:expr) => {
        entry! {
            $(#[$doc])*
            fn $c(h: mstro_cdo) {
                $body(cdo(h))
            }
        }
    };
}

cdo_op!(
    /// `mstro_cdo_seal`: values kept by pointer are read now, then the CDO is sealed.
    mstro_cdo_seal => |c| { attrs::read_deferred(c)?; mstro::cdo_seal(c) }
);
cdo_op!(
    /// `mstro_cdo_offer`.
    mstro_cdo_offer => mstro::cdo_offer
);
cdo_op!(
    /// `mstro_cdo_require`.
    mstro_cdo_require => mstro::cdo_require
);
cdo_op!(
    /// `mstro_cdo_demand`.
    mstro_cdo_demand => |c| { let r = mstro::cdo_demand(c); attrs::forget_values(c); r }
);
cdo_op!(
    /// `mstro_cdo_retract`.
    mstro_cdo_retract => mstro::cdo_retract
);
cdo_op!(
    /// `mstro_cdo_withdraw`.
    mstro_cdo_withdraw => mstro::cdo_withdraw
);
cdo_op!(
    /// `mstro_cdo_dispose`: also frees values the library owns.
    mstro_cdo_dispose => |c| { mstro::cdo_dispose(c)?; attrs::forget(c); Ok(()) }
);

entry! {
    /// `mstro_cdo_demand_async`: starts demanding the CDO in the background; the request's
    /// handle goes to `*request`.
    ///
    /// # Safety
    /// `request` is NULL or writable.
    unsafe fn mstro_cdo_demand_async(
        h: mstro_cdo,
        request: *mut mstro_request,
    ) {
        if request.is_null() {
            return Err(Error::invarg("request (the handle pointer) is NULL"));
        }
        let r = mstro::cdo_demand_async(cdo(h))?;
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { put(request, handle(r.0), "request") }
    }
}

/// Settles what the C side keeps of a request's CDO once the request finished (attribute
/// values read before demand are stale).
fn request_finished(r: mstro::Request) {
    if let Ok(c) = mstro::request_cdo(r) {
        attrs::forget_values(c);
    }
}

entry! {
    /// `mstro_request_test`: true once the request finished (well or not:
    /// `mstro_request_wait` says which); false while it runs or for a bad handle (logged
    /// and this thread's last error, as a failing call's).
    fn mstro_request_test(request: mstro_request) -> bool, false => {
        let r = mstro::Request(raw(request));
        let mut done = false;
        let status = guard("mstro_request_test", || {
            done = mstro::request_test(r)?;
            if done {
                request_finished(r);
            }
            Ok(())
        });
        done && status == Status::Ok as mstro_status
    }
}

entry! {
    /// `mstro_request_wait`: waits for the request and returns the demand's status.
    fn mstro_request_wait(request: mstro_request) {
        let r = mstro::Request(raw(request));
        let outcome = mstro::request_wait(r);
        request_finished(r);
        outcome
    }
}

entry! {
    /// `mstro_request_dispose`: forgets the request, cancelling it if still in flight.
    fn mstro_request_dispose(request: mstro_request) {
        mstro::request_dispose(mstro::Request(raw(request)))
    }
}

entry! {
    /// `mstro_mem_alloc`: memory for CDO data that consumers on this node map (see
    /// `maestro.h`).
    ///
    /// # Safety
    /// `ptr` is NULL or writable.
    unsafe fn mstro_mem_alloc(len: usize, ptr: *mut *mut c_void) {
        if ptr.is_null() {
            return Err(Error::invarg("NULL result pointer"));
        }
        let p = mstro::mem_alloc(len)?;
        // SAFETY: non-NULL, writable (caller's contract).
        unsafe { ptr.write(p.cast()) };
        Ok(())
    }
}

entry! {
    /// `mstro_mem_free`.
    fn mstro_mem_free(ptr: *mut c_void) {
        mstro::mem_free(ptr.cast())
    }
}

entry! {
    /// `mstro_cdo_access_ptr`.
    ///
    /// # Safety
    /// `data` and `data_len` are NULL or writable.
    unsafe fn mstro_cdo_access_ptr(
        h: mstro_cdo,
        data: *mut *mut c_void,
        data_len: *mut i64,
    ) {
        let (p, n) = mstro::cdo_access(cdo(h))?;
        if !data.is_null() {
            // SAFETY: non-NULL, writable (caller's contract).
            unsafe { data.write(p.cast_mut().cast()) };
        }
        if !data_len.is_null() {
            // SAFETY: `data_len` was checked non-NULL above and is writable:
            // `mstro_cdo_access_ptr`'s contract with its C caller.
            unsafe { data_len.write(n as i64) };
        }
        Ok(())
    }
}

entry! {
    /// `mstro_cdo_attribute_set`.
    ///
    /// # Safety
    /// `key` is NUL-terminated; `val` points at a value of the key's type (see `maestro.h`)
    /// that stays valid until seal when `copy_value` is false.
    unsafe fn mstro_cdo_attribute_set(
        h: mstro_cdo,
        key: *const c_char,
        val: *mut c_void,
        copy_value: bool,
        user_owned_value: bool,
    ) {
        // SAFETY: `key` is NULL (refused) or a NUL-terminated string: this entry point's
        // contract with its C caller.
        let key = unsafe { text(key, "key") }?;
        // SAFETY: `val` points to a value of the key's schema type (or is the raw-ptr
        // memory), as `maestro.h` requires of `mstro_cdo_attribute_set`'s caller.
        unsafe { attrs::set(cdo(h), key, val, copy_value, user_owned_value) }
    }
}

entry! {
    /// `mstro_cdo_attribute_get`.
    ///
    /// # Safety
    /// `key` is NUL-terminated; `valtype` is NULL or writable; `val_p` is writable.
    unsafe fn mstro_cdo_attribute_get(
        h: mstro_cdo,
        key: *const c_char,
        valtype: *mut header::mstro_cdo_attr_value_type,
        val_p: *mut *const c_void,
    ) {
        if val_p.is_null() {
            return Err(Error::invarg("val_p is NULL"));
        }
        // SAFETY: `key` is NULL (refused) or a NUL-terminated string: this entry point's
        // contract with its C caller.
        let key = unsafe { text(key, "key") }?;
        let (ty, p) = attrs::get(cdo(h), key)?;
        if !valtype.is_null() {
            // SAFETY: non-NULL, writable.
            unsafe { valtype.write(ty) };
        }
        // SAFETY: checked non-NULL; writable (caller's contract).
        unsafe { val_p.write(p) };
        Ok(())
    }
}

entry! {
    /// `mstro_cdo_selector_create`.
    ///
    /// # Safety
    /// `nspace` is NULL or NUL-terminated, `query` NUL-terminated, `result` writable.
    unsafe fn mstro_cdo_selector_create(
        schema: header::mstro_schema,
        nspace: *const c_char,
        query: *const c_char,
        result: *mut mstro_cdo_selector,
    ) {
        if !schema.is_null() {
            return Err(Error::invarg(
                "schema must be NULL: selectors use the schemas of MSTRO_SCHEMA_PATH/MSTRO_SCHEMA_LIST",
            ));
        }
        if result.is_null() {
            return Err(Error::invarg("result (the handle pointer) is NULL"));
        }
        // SAFETY: `nspace` is NULL (not given) or a NUL-terminated string: this entry
        // point's contract with its C caller.
        let ns = unsafe { opt_text(nspace, "nspace") }?;
        // SAFETY: `query` is NULL (refused) or a NUL-terminated string: this entry point's
        // contract with its C caller.
        let q = unsafe { text(query, "query") }?;
        let s = mstro::selector_create(ns, q)?;
        // SAFETY: checked non-NULL.
        unsafe { put(result, handle(s.0), "result") }
    }
}

entry! {
    /// `mstro_cdo_selector_dispose`.
    fn mstro_cdo_selector_dispose(s: mstro_cdo_selector) {
        mstro::selector_dispose(mstro::Selector(raw(s)))
    }
}

entry! {
    /// `mstro_subscribe`.
    ///
    /// # Safety
    /// `result` is writable.
    unsafe fn mstro_subscribe(
        sel: mstro_cdo_selector,
        kinds: u32,
        opts: u32,
        result: *mut mstro_subscription,
    ) {
        if result.is_null() {
            return Err(Error::invarg("result (the handle pointer) is NULL"));
        }
        let sel = (!sel.is_null()).then(|| mstro::Selector(raw(sel)));
        let s = mstro::subscribe(sel, kinds, mstro::SubscriptionOptions(opts))?;
        // SAFETY: checked non-NULL.
        unsafe { put(result, handle(s.0), "result") }
    }
}

entry! {
    /// `mstro_subscription_dispose`.
    fn mstro_subscription_dispose(s: mstro_subscription) {
        mstro::subscription_dispose(mstro::Subscription(raw(s)))
    }
}

entry! {
    /// `mstro_pm_start`.
    fn mstro_pm_start() {
        mstro::pm_start()
    }
}

entry! {
    /// `mstro_pm_getinfo`: a malloc'd string the caller frees.
    ///
    /// # Safety
    /// `info` is writable.
    unsafe fn mstro_pm_getinfo(info: *mut *mut c_char) {
        if info.is_null() {
            return Err(Error::invarg("info (the result pointer) is NULL"));
        }
        let text = CString::new(mstro::pm_getinfo()?)
            .map_err(|_| Error::new(Status::Fail, "the PM info holds a NUL byte"))?;
        // SAFETY: strdup of a valid C string; NULL on failure, checked.
        let copy = unsafe { libc::strdup(text.as_ptr()) };
        if copy.is_null() {
            return Err(Error::new(Status::Nomem, "copying the PM info"));
        }
        // SAFETY: checked non-NULL.
        unsafe { put(info, copy, "info") }
    }
}

entry! {
    /// `mstro_pm_terminate`.
    fn mstro_pm_terminate() {
        mstro::pm_terminate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_fail_with_a_message() {
        let s = guard("mstro_test", || panic!("boom"));
        assert_eq!(s, Status::Fail as mstro_status);
        // SAFETY: the message is a valid C string owned by this thread.
        let msg = unsafe { CStr::from_ptr(mstro_last_error_message()) };
        assert!(msg.to_str().unwrap().contains("boom"), "{msg:?}");
    }

    #[test]
    fn every_status_has_a_description() {
        for s in Status::ALL {
            // SAFETY: static C strings.
            let d = unsafe { CStr::from_ptr(mstro_status_description(s as mstro_status)) };
            assert_eq!(d.to_str().unwrap(), s.description());
        }
        // SAFETY: the library returns a static NUL-terminated string for any status.
        let d = unsafe { CStr::from_ptr(mstro_status_description(99)) };
        assert_eq!(d.to_str().unwrap(), "unknown status");
    }
}
