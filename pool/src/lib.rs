//! The CDO pool (issue #5 in progress).
//!
//! What exists: the wire protocol ([`proto`]: messages, versioned length-prefixed frames,
//! batching, a decoder that never panics), JOIN authentication ([`auth`]), CDO attributes
//! ([`attr`]), the pool manager's logic as a sans-IO state machine ([`Manager`], tested by
//! driving it in memory), its tokio driver ([`PoolManager`]: TCP control connections), and a
//! blocking [`Client`] that moves CDO bytes by reading the provider's registered memory over
//! the `fabric` crate. Not yet: the async client, schemas, PMIx bootstrap, `maestro pm`, the
//! producer/consumer workflow and the PM benchmark.

pub mod attr;
pub mod auth;
mod client;
mod manager;
mod pm;
pub mod proto;

pub use client::{Client, ClientError, Result};
pub use manager::{ConnId, MAX_NAME, Manager};
pub use pm::PoolManager;
