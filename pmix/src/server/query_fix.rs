//! A guard against a crash in OpenPMIx 4.2 servers: a tool's attribute-support query
//! (`PMIX_QUERY_ATTRIBUTE_SUPPORT`, e.g. `pattrs --pid <server> --host all`) reaches
//! `pmix_attrs_query_support`, which answers the server's callback with its own caddy in
//! place of the callback's data (`cd` for `cd->cbdata`), and the server dies of SIGSEGV
//! in the reply path, taking the job with it. (Fixed in later OpenPMIx releases.)
//!
//! The library forwards every query a tool sends to `PMIx_Query_info_nb`, called through
//! its PLT, so an executable that defines that symbol sees them first. [`query_info_nb`]
//! is what such a definition calls: in a process running a [`super::Server`] on an
//! affected OpenPMIx, attribute-support queries are refused with `PMIX_ERR_NOT_SUPPORTED`
//! (the tool reports a clean error); everything else goes to the library's function.

use std::ffi::{CStr, c_void};
use std::sync::OnceLock;

use pmix_sys as sys;

/// The library's `PMIx_Query_info_nb`.
type QueryFn = unsafe extern "C" fn(
    *mut sys::pmix_query_t,
    usize,
    sys::pmix_info_cbfunc_t,
    *mut c_void,
) -> sys::pmix_status_t;

/// The next definition of `PMIx_Query_info_nb` after the caller's (the library's).
fn library_query() -> Option<QueryFn> {
    static NEXT: OnceLock<Option<QueryFn>> = OnceLock::new();
    *NEXT.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the definition after
        // this object's, which has the C signature above.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"PMIx_Query_info_nb".as_ptr()) };
        // SAFETY: non-null: the library's function, of this type.
        (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, QueryFn>(f) })
    })
}

/// True where OpenPMIx has the bug (the 4.x series this was measured on).
fn affected() -> bool {
    static AFFECTED: OnceLock<bool> = OnceLock::new();
    *AFFECTED.get_or_init(|| {
        // SAFETY: returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(sys::PMIx_Get_version()) };
        v.to_string_lossy().contains("PMIx 4.")
    })
}

/// True if one of `queries` asks which attributes are supported.
///
/// # Safety
/// `queries` is NULL or points to `n` valid queries.
unsafe fn asks_attribute_support(queries: *const sys::pmix_query_t, n: usize) -> bool {
    if queries.is_null() {
        return false;
    }
    let wanted =
        CStr::from_bytes_with_nul(sys::PMIX_QUERY_ATTRIBUTE_SUPPORT).unwrap_or(c"pmix.qry.attrs");
    (0..n).any(|i| {
        // SAFETY: `n` valid queries; keys is NULL or a NULL-terminated array.
        unsafe {
            let keys = (*queries.add(i)).keys;
            !keys.is_null() && !(*keys).is_null() && CStr::from_ptr(*keys) == wanted
        }
    })
}

/// Defines, in the executable that invokes it, `PMIx_Query_info_nb` with the guard
/// described in the module docs ([`query_info_nb`]): OpenPMIx's server code calls it for
/// every query a tool sends. The executable exports it to the dynamic symbol table (link
/// argument `-Wl,--export-dynamic-symbol=PMIx_Query_info_nb`) so libpmix's own calls
/// resolve to it. A macro, so that the executable needs neither `pmix-sys` nor an
/// `extern "C"` of its own.
#[macro_export]
macro_rules! define_query_info_nb {
    () => {
        /// `PMIx_Query_info_nb` with the guard of [`pmix::server::query_info_nb`].
        ///
        /// # Safety
        /// The arguments of `PMIx_Query_info_nb`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn PMIx_Query_info_nb(
            queries: *mut $crate::__sys::pmix_query_t,
            nqueries: usize,
            cbfunc: $crate::__sys::pmix_info_cbfunc_t,
            cbdata: *mut ::std::ffi::c_void,
        ) -> $crate::__sys::pmix_status_t {
            // SAFETY: forwards libpmix's own arguments unchanged: `queries` holds
            // `nqueries` queries, `cbfunc`/`cbdata` are its.
            unsafe { $crate::server::query_info_nb(queries, nqueries, cbfunc, cbdata) }
        }
    };
}

/// `PMIx_Query_info_nb` with the guard described in the module docs. For the function
/// [`define_query_info_nb!`](crate::define_query_info_nb) defines to call.
///
/// # Safety
/// The arguments of `PMIx_Query_info_nb`.
pub unsafe fn query_info_nb(
    queries: *mut sys::pmix_query_t,
    nqueries: usize,
    cbfunc: sys::pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> sys::pmix_status_t {
    crate::ffi::guard("PMIx_Query_info_nb", sys::PMIX_ERROR, || {
        let refuse = crate::runtime::role() == Some("server") && affected() && {
            // SAFETY: `queries` holds `nqueries` queries, as `PMIx_Query_info_nb`'s caller
            // (libpmix's API) guarantees.
            unsafe { asks_attribute_support(queries, nqueries) }
        };
        if refuse {
            tracing::info!(
                "refused a tool's attribute-support query: OpenPMIx 4 servers crash answering it"
            );
            return sys::PMIX_ERR_NOT_SUPPORTED;
        }
        match library_query() {
            // SAFETY: the library's function with the caller's arguments.
            Some(f) => unsafe { f(queries, nqueries, cbfunc, cbdata) },
            None => sys::PMIX_ERR_NOT_SUPPORTED,
        }
    })
}
