//! This executable's definition of `PMIx_Query_info_nb`, which OpenPMIx's server code
//! calls (through its PLT) for every query a tool sends: it lets
//! [`pmix::server::query_info_nb`] refuse the attribute-support queries that crash
//! OpenPMIx 4 servers (`pattrs --pid <maestro run> --host all`) and passes the rest on.
//! Exported from the binary by the link argument in `build.rs`.

pmix::define_query_info_nb!();
