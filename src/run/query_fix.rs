//! This executable's definition of `PMIx_Query_info_nb`, which OpenPMIx's server code
//! calls (through its PLT) for every query a tool sends: it lets
//! [`pmix::server::query_info_nb`] refuse the attribute-support queries that crash
//! OpenPMIx 4 servers (`pattrs --pid <maestro run> --host all`) and passes the rest on.
//! Exported from the binary by the link argument in `build.rs`.

use std::ffi::c_void;

use pmix_sys as sys;

/// See the module docs.
///
/// # Safety
/// The arguments of `PMIx_Query_info_nb`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn PMIx_Query_info_nb(
    queries: *mut sys::pmix_query_t,
    nqueries: usize,
    cbfunc: sys::pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> sys::pmix_status_t {
    // SAFETY: forwards libpmix's own arguments unchanged: `queries` holds `nqueries`
    // queries, `cbfunc`/`cbdata` are its.
    unsafe { pmix::server::query_info_nb(queries, nqueries, cbfunc, cbdata) }
}
