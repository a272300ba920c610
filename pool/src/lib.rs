//! The CDO pool (issue #5 in progress).
//!
//! What exists: the wire protocol ([`proto`]: messages, versioned length-prefixed frames,
//! batching, a decoder that never panics), JOIN authentication ([`auth`]), CDO attributes
//! ([`attr`]), and the pool manager's logic as a sans-IO state machine ([`Manager`]), tested
//! by driving it in memory. What does not exist yet: the tokio drivers of the pool manager and
//! the client, the client API, schemas, PMIx bootstrap and the data path over the `fabric`
//! crate.

pub mod attr;
pub mod auth;
mod manager;
pub mod proto;

pub use manager::{ConnId, MAX_NAME, Manager};
