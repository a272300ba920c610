//! The CDO pool.
//!
//! - [`proto`]: the wire protocol (messages, versioned length-prefixed frames, batching, a
//!   decoder that never panics);
//! - [`auth`]: JOIN authentication (HMAC over the PM's challenge);
//! - [`attr`] and [`schema`]: CDO attributes and the YAML schemas that type them;
//! - [`selector`] and [`events`]: subscriptions' queries over attributes and the pool events
//!   they deliver (signal-before, acknowledgements);
//! - [`archive`]: the directory format of the archiver and librarian helper apps;
//! - [`Manager`]: the pool manager's logic as a sans-IO state machine (tested by driving it in
//!   memory), including transport planning;
//! - [`PoolManager`]: its tokio driver (TCP control connections, credential checks);
//! - [`AsyncClient`] and [`Client`]: applications' side, moving CDO bytes by RMA over the
//!   `fabric` crate, by same-process hand-over or by stream;
//! - [`bootstrap`]: the PM info that finds the PM, and the host's interface addresses;
//! - [`links`]: link states of interfaces, watched for changes;
//! - [`wire`]: a bare framed connection for load generators.

pub mod archive;
pub mod attr;
pub mod auth;
pub mod bootstrap;
mod client;
pub mod events;
pub mod links;
mod manager;
mod pm;
pub mod pmix_events;
pub mod proto;
pub mod schema;
pub mod selector;
pub mod stale;
pub mod wire;

pub use client::{AsyncClient, CdoData, Client, ClientError, JoinOptions, Result, Subscription};
pub use manager::{ConnId, Credential, MAX_NAME, Manager};
pub use pm::{
    CredentialCheck, FabricReporter, JOIN_TIMEOUT, MAX_INGRESS, MAX_JOIN_FRAME, MAX_QUEUED,
    MAX_UNJOINED, PmConfig, PoolManager,
};
