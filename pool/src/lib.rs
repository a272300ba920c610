//! The CDO pool (issue #5 in progress).
//!
//! What exists: the wire protocol ([`proto`]: messages, versioned length-prefixed frames,
//! batching, a decoder that never panics), JOIN authentication ([`auth`]), CDO attributes
//! ([`attr`]), the pool manager's logic as a sans-IO state machine ([`Manager`], tested by
//! driving it in memory), its tokio driver ([`PoolManager`]: TCP control connections), and a
//! blocking [`Client`] that moves CDO bytes by reading the provider's registered memory over
//! the `fabric` crate, and the PM info that finds the PM ([`bootstrap`]). Not yet: the async
//! client, schemas, `maestro pm` as its own process, and the PM benchmark.

pub mod attr;
pub mod auth;
pub mod bootstrap;
mod client;
mod manager;
mod pm;
pub mod proto;
pub mod schema;
pub mod wire;

pub use client::{AsyncClient, CdoData, Client, ClientError, JoinOptions, Result};
pub use manager::{ConnId, Credential, MAX_NAME, Manager};
pub use pm::{CredentialCheck, PmConfig, PoolManager};
