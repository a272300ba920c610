//! The CDO pool: the drivers around the sans-IO core ([`pool_core`], re-exported here).
//!
//! - from the core: [`proto`] (wire protocol), [`auth`] (JOIN proofs), [`attr`] and
//!   [`schema`] (attributes and their types), [`selector`] and [`events`] (subscriptions),
//!   [`Manager`] (the pool manager's state machine);
//! - [`PoolManager`]: the manager's tokio driver (TCP and Unix control connections,
//!   admission, credential checks, bounded ingress, timers from [`Manager::poll_timeout`],
//!   deferred work from [`Manager::work`]);
//! - [`AsyncClient`] and [`Client`]: applications' side, moving CDO bytes by RMA over the
//!   `fabric` crate, by same-process hand-over or by stream;
//! - [`Observer`]: a read-only look at a running pool ([`view`]: status, CDOs, transfers,
//!   traffic per NIC);
//! - [`bootstrap`]: the PM info that finds the PM (published through PMIx or the
//!   environment);
//! - [`pmix_events`]: PMIx events that become pool events;
//! - [`stale`]: sweeping the runtime directories of dead processes;
//! - [`liveness`]: how a silent peer of a control connection is found dead (TCP keepalive).

pub use pool_core::client::CallError;
pub use pool_core::{Clock, ConnId, Identity, MAX_NAME, Manager, Subnet};
pub use pool_core::{admission, attr, auth, events, layout, policy, proto, selector, shards, view};

pub mod bootstrap;
mod client;
pub mod distances;
pub mod liveness;
pub mod peers;
mod pm;
pub mod pmix_events;
mod ring;
pub mod schema;
pub mod stale;

/// The README's Rust example, compiled and run as a doc test (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}

pub use client::{
    AsyncClient, BATCH_STEP, Bounded, Bounds, CdoData, CdoPhase, Client, ClientError,
    DEFAULT_INLINE_MAX, DEFAULT_WAIT_SPIN, Ended, Finder, GROUP_IDS, GfsOptions, GroupMember,
    INTERRUPT_POLL, JoinOptions, KEPT_FOR_TAKER, KeptOfGone, NewOffer, Observer, ReclaimOptions,
    Result, Subscription, Task, bare_join, sweep_gfs, welcome,
};
pub use pm::{
    CredentialCheck, CredentialVerdict, FabricReporter, JOIN_TIMEOUT, MAX_INGRESS, MAX_JOIN_FRAME,
    MAX_QUEUED, MAX_RINGS, MAX_UNJOINED, MAX_UNJOINED_PER_PEER, PM_DIR_PREFIX, PmConfig,
    PoolManager, ShardedPool, default_max_bytes, resident_bytes, standby,
};

/// Sleeps until `deadline` on the current tokio runtime; forever when there is none (cancel
/// safe: it holds nothing).
pub(crate) async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// What may cross threads, checked at compile time: clients are shared by the
/// application's threads (operations take `&self`), subscriptions and received data move
/// to the threads that handle them, and a pool manager may be stopped from any thread.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Client>();
    send_sync::<AsyncClient>();
    send_sync::<Subscription>();
    send_sync::<CdoData>();
    send_sync::<PoolManager>();
    send_sync::<Manager>();
};
