//! Raw bindings to Slurm's SPANK interface (`slurm/spank.h`), generated at build time from
//! the installed header, so the structs, item numbers and `SLURM_VERSION_NUMBER` are those of
//! the Slurm the plugin will be loaded by. The `spank_*` functions are resolved when Slurm
//! loads the plugin. The safe layer is the `maestro-spank` plugin.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs
)]
#![allow(clippy::all, unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
