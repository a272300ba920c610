//! Maestro Core's semantics over the CDO pool, for the C API (`capi/`, `libmaestro`), the
//! Python module (`maestro_core`) and Rust programs that want Maestro's model.
//!
//! - One instance per process: [`init`] ... [`finalize`]. The pool is joined on first use
//!   (so a process can [`pm_start`] right after [`init`] and serve the workflow itself):
//!   through `MSTRO_POOL_MANAGER_INFO`, through PMIx (the job key of the pool manager's
//!   rank, or the name another job published), or as a local pool inside the process
//!   (see [`session`]).
//! - CDOs are [`Cdo`] handles: attributes are staged on the handle
//!   ([`cdo_attribute_set`]) and checked against the schemas at [`cdo_seal`]; a producer
//!   may lend its own memory ([`cdo_set_user_memory`], Maestro's
//!   `.maestro.core.cdo.raw-ptr` + `scope.local-size`), which is offered without a copy and
//!   served until [`cdo_withdraw`] returns; a consumer gets the bytes in library memory
//!   ([`cdo_access`]) or in the buffer it lent before [`cdo_demand`].
//! - Memory the library allocates for CDO data ([`mem_alloc`], [`mem_free`]): lent like
//!   any memory, it is offered from a memory file where that pays, so consumers on the
//!   node map it instead of copying.
//! - Pool events: [`Selector`] handles ([`selector_create`]), [`Subscription`] handles
//!   ([`subscribe`]) whose [`subscription_poll`] and [`subscription_wait`] return every
//!   queued event as one list, acknowledged with [`subscription_ack`].
//! - Every failure is an [`Error`]: a Maestro [`Status`] and a message saying what was
//!   wrong and what to do. Handles are numbers checked against a registry: NULL, the wrong
//!   kind and use after dispose are [`Status::Invarg`], never a crash.
//!
//! Every function may be called from any thread. Blocking calls (demand, withdraw, waits)
//! must not run on a thread of a tokio runtime (each client has its own).
//!
//! For a Rust program that wants a joined [`pool::Client`] without Maestro's handles,
//! [`session::Session::join`] is the front door.

mod cdo;
mod cells;
mod events;
mod group;
mod handles;
mod instance;
mod memory;
mod request;
pub mod session;
mod status;

pub use cdo::{
    Attr, Bytes, RAW_PTR, cdo_access, cdo_attribute_get, cdo_attribute_set, cdo_attribute_type,
    cdo_attributes, cdo_bytes, cdo_declare, cdo_demand, cdo_demand_interruptible,
    cdo_demand_within, cdo_dispose, cdo_name, cdo_offer, cdo_require, cdo_retract, cdo_seal,
    cdo_set_user_memory, cdo_withdraw,
};
pub use events::{
    Selector, Subscription, SubscriptionOptions, selector_create, selector_dispose, subscribe,
    subscription_ack, subscription_dispose, subscription_poll, subscription_wait,
    subscription_wait_interruptible,
};
pub use group::{
    group_add, group_declare, group_demand, group_dispose, group_members, group_next, group_offer,
    group_require, group_retract, group_seal, group_size_get, group_size_set, group_withdraw,
};
pub use handles::{Cdo, Group, Request};
pub use instance::{finalize, init, is_initialized, pm_getinfo, pm_start, pm_terminate};
pub use memory::{mem_alloc, mem_free};
/// What the skins (the C API, the Python module) need of the pool's types, so that they
/// reach the pool through this layer only: attribute values and the built-in keys, the
/// schemas' value types, and the variable that carries a PM's contact info.
pub use pool::attr::{self, AttrValue};
pub use pool::bootstrap::PM_INFO_ENV;
pub use pool::events::{EventKind, PoolEvent};
pub use pool::layout;
pub use pool::schema::AttrType;
pub use request::{
    cdo_demand_async, request_cdo, request_dispose, request_test, request_wait,
    request_wait_interruptible,
};
pub use status::{Error, Result, Status};

/// This library's version, as `mstro_version` reports it.
pub fn version() -> &'static str {
    concat!("maestro-rs ", env!("CARGO_PKG_VERSION"))
}

/// Nanoseconds on a monotonic clock (Maestro's `mstro_clock`): for timing, not dates. The
/// origin is the first call in the process.
pub fn clock() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Sends `tracing` output to stderr, filtered by `RUST_LOG` or `MSTRO_LOG_LEVEL` (`error`,
/// `warn` (the default), `info`, `debug`, `trace`). Does nothing if the program already
/// installed a subscriber; [`init`] calls it.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let asked = match (std::env::var("RUST_LOG"), std::env::var("MSTRO_LOG_LEVEL")) {
        (Ok(f), _) if !f.trim().is_empty() => {
            EnvFilter::try_new(&f).map_err(|e| format!("RUST_LOG={f:?} is not a filter ({e})"))
        }
        (_, Ok(l)) if !l.trim().is_empty() => log_level(&l)
            .map(EnvFilter::new)
            .ok_or_else(|| {
                format!(
                    "MSTRO_LOG_LEVEL={l:?} is not a level (error, warn, info, debug, trace or off; or 0-4)"
                )
            }),
        _ => Ok(EnvFilter::new("warn")),
    };
    let filter = asked.unwrap_or_else(|why| {
        // No logger yet: said on stderr, once, and the default applies.
        eprintln!("maestro: {why}; logging warnings and errors only");
        EnvFilter::new("warn")
    });
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// The tracing level a `MSTRO_LOG_LEVEL` value names (Maestro Core's names and numbers
/// too: `err`, `warning`, `noise`, 0-4), if it names one.
fn log_level(value: &str) -> Option<&'static str> {
    Some(match value.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => "off",
        "error" | "err" | "0" => "error",
        "warn" | "warning" | "1" => "warn",
        "info" | "2" => "info",
        "debug" | "3" => "debug",
        "trace" | "noise" | "4" => "trace",
        _ => return None,
    })
}

#[cfg(test)]
mod log_tests {
    #[test]
    fn levels_take_maestro_core_names_and_numbers() {
        assert_eq!(super::log_level("WARNING"), Some("warn"));
        assert_eq!(super::log_level(" 3 "), Some("debug"));
        assert_eq!(super::log_level("noise"), Some("trace"));
        assert_eq!(super::log_level("bogus"), None);
    }
}
