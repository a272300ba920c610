//! Exports the `maestro` binary's `PMIx_Query_info_nb` (src/run/query_fix.rs) to the
//! dynamic symbol table, so libpmix's own calls resolve to it.

fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=PMIx_Query_info_nb");
}
