//! What crossing into C takes: the panic boundary of every function PMIx calls into (a
//! panic must not unwind into C: since Rust 1.81 it aborts the process, taking a launcher
//! and its job down without a word; [`guard`] turns it into a log line and the caller's
//! error value), and the C string arrays PMIx reads ([`CArgv`]).

use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::Result;
use crate::value::cstring;

/// Runs `body` for the C function `what`; if it panics, logs the panic (on stderr too, as
/// the launcher's log may be the only trace) and returns `on_panic`.
///
/// Values the body owns are dropped while unwinding, so replies it captured still answer
/// (with an error): pass `on_panic` accordingly (an upcall whose reply was created before
/// the panic must report success, as its callback has been or will be called).
pub(crate) fn guard<R>(what: &'static str, on_panic: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic".into());
            tracing::error!("{what} panicked: {msg}; answered with an error");
            on_panic
        }
    }
}

/// A NULL-terminated C string array (`char **`), owned.
pub(crate) struct CArgv {
    _strings: Vec<CString>,
    ptrs: Vec<*mut c_char>,
}

// SAFETY: owned memory that PMIx only reads.
unsafe impl Send for CArgv {}

impl CArgv {
    pub(crate) fn new(items: &[&str]) -> Result<CArgv> {
        let strings = items
            .iter()
            .map(|s| cstring(s, "key"))
            .collect::<Result<Vec<_>>>()?;
        let mut ptrs: Vec<*mut c_char> =
            strings.iter().map(|s| s.as_ptr() as *mut c_char).collect();
        ptrs.push(std::ptr::null_mut());
        Ok(CArgv {
            _strings: strings,
            ptrs,
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut *mut c_char {
        self.ptrs.as_ptr() as *mut *mut c_char
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_error_value_and_drops_what_the_body_owned() {
        struct Answer<'a>(&'a std::cell::Cell<bool>);
        impl Drop for Answer<'_> {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let answered = std::cell::Cell::new(false);
        let reply = Answer(&answered);
        let rc = guard("test upcall", -1, move || {
            let _reply = reply;
            panic!("host bug")
        });
        assert_eq!(rc, -1);
        assert!(answered.get(), "the captured reply was not dropped");
        assert_eq!(guard("test upcall", -1, || 7), 7);
    }
}
