//! Exports the `maestro` binary's `PMIx_Query_info_nb` (defined by the launcher crate,
//! `launcher/src/run/query_fix.rs`) to the dynamic symbol table, so libpmix's own calls
//! resolve to it; `--undefined` makes the linker take it from the launcher's library even
//! where nothing of the binary calls it.

fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--undefined=PMIx_Query_info_nb");
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=PMIx_Query_info_nb");
}
