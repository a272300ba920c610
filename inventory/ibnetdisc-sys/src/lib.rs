//! Raw bindings to libibnetdisc, the C library behind `ibnetdiscover` (rdma-core's
//! `libibnetdisc5`): it walks an InfiniBand fabric with subnet-management packets from
//! one of this node's adapters and returns every switch, adapter and router with their
//! ports and what each port is linked to. Generated at build time by bindgen from
//! `infiniband/ibnetdisc.h` and `infiniband/mad.h`.
//!
//! The library is not linked: [`IbNetDisc::new`] opens it ([`SONAME`]) when a fabric is
//! to be discovered, so binaries using these bindings start on machines without
//! InfiniBand. `mad_get_field` (libibmad) is found through libibnetdisc's own
//! dependencies.
//!
//! Everything here is `unsafe`; `inventory::switches::discover` is the safe layer.
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

/// The shared library [`IbNetDisc::new`] opens (rdma-core's `libibnetdisc5` package).
pub const SONAME: &str = "libibnetdisc.so.5";
