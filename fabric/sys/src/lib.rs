//! Raw bindings to the system libfabric (>= 1.17), generated at build time by bindgen from
//! `rdma/fabric.h` and the `fi_*.h` headers (found with pkg-config `libfabric`).
//!
//! Why our own bindgen crate and not `ofi-libfabric-sys`: that crate's C wrappers target
//! libfabric 2.x and do not build against Debian 12's 1.17 without an extra placeholder header and
//! implicit-declaration warnings; bindgen's `wrap_static_fns` generates the wrappers for
//! exactly the installed headers instead. The static-inline functions of the object API are
//! exported under their own names with the suffix `__extern` (`fi_domain__extern`, ...).
//!
//! A few macros bindgen cannot evaluate are defined here: [`make_version`],
//! [`FI_ADDR_UNSPEC`], [`FI_KEY_NOTAVAIL`].
//!
//! libfabric itself is not linked: the five library functions the bindings call
//! (`fi_getinfo`, `fi_freeinfo`, `fi_dupinfo`, `fi_fabric`, `fi_strerror`) are defined in
//! `lazy.c` and open libfabric.so.1 on first use, so processes that never touch the fabric
//! do not pay for loading it (on Debian about 0.2 s of library constructors);
//! [`mstro_fabric_load_error`] says why it could not be loaded.
//!
//! Everything here is `unsafe`; the `fabric` crate is the safe layer.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

unsafe extern "C" {
    /// Why libfabric.so.1 could not be loaded (`lazy.c`: the library is opened on first
    /// use), or NULL when it loaded. Loads it if no call did yet.
    pub fn mstro_fabric_load_error() -> *const std::os::raw::c_char;
}

/// The directory pkg-config named for libfabric at build time (where `libfabric.so.1` and
/// its provider plugins normally are; the runtime loader may still find another).
pub const LIBDIR: &str = env!("FABRIC_SYS_LIBDIR");

/// `FI_VERSION(major, minor)` (the function `fi_version()` is the library's own version).
pub const fn make_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// `FI_ADDR_UNSPEC`: no address (`(uint64_t)-1`).
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;

/// `FI_KEY_NOTAVAIL`: a provider-chosen key is not available yet.
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;
