//! Safe Rust over the system OpenPMIx (>= 4.2): the client ([`Client`]), the server a
//! launcher embeds ([`Server`] with a [`Host`] answering its upcalls) and the tool
//! ([`Tool`]).
//!
//! PMIx is process-global: a process is a client, a server or a tool, initialised once and
//! finalised when the object drops. Every waiting call has a timeout. Errors are typed
//! ([`Error`]); in particular a capability the host lacks is [`Error::NotSupported`], so
//! code can degrade by host: under Slurm's `srun --mpi=pmix` there is no publish/lookup, no
//! credentials and no query, and an event notification kills the job step.
//!
//! ```no_run
//! use pmix::{Client, GetOptions, Proc, Scope, Value};
//! use std::time::Duration;
//! let client = Client::init()?;
//! if client.rank() == 0 {
//!     client.put(Scope::Global, "example.key", &Value::String("hello".into()))?;
//! }
//! client.commit()?;
//! client.fence(&[], true, Duration::from_secs(30))?;
//! let v = client.get(&Proc::new(client.nspace(), 0), "example.key", GetOptions::default())?;
//! # Ok::<(), pmix::Error>(())
//! ```

mod client;
mod error;
mod event;
mod ffi;
pub mod keys;
mod query;
mod runtime;
pub mod server;

/// The raw bindings, for the items [`define_query_info_nb!`] expands to in another crate.
#[doc(hidden)]
pub use pmix_sys as __sys;
mod sync;
mod tool;
mod value;

/// The raw bindings, for the few signatures that must name them (an executable's
/// `PMIx_Query_info_nb` shim calling [`server::query_info_nb`]).
pub use client::{Client, Credential, GetOptions, Published, Scope};
pub use error::{Error, Result, Status};
pub use event::{Event, EventHandler, Range};
pub use query::Query;
pub use server::{GroupOp, Host, JobLayout, Server, ServerConfig};
pub use tool::{Tool, ToolTarget};
pub use value::{
    App, DEVTYPE_NETWORK, DEVTYPE_OPENFABRICS, DeviceDistance, Info, LINK_DOWN, LINK_STATE_UNKNOWN,
    LINK_UP, PROC_STATE_RUNNING, PROC_STATE_TERMINATED, Proc, ProcInfo, RANK_UNDEF, RANK_WILDCARD,
    Rank, Value, find, proc_state_name,
};
