//! The CDO pool's sans-IO core, in the manner of `quinn-proto`: everything the pool
//! decides, with no sockets, threads, clock or system library. Drivers (the `pool` crate's
//! tokio pool manager and clients) feed it bytes, connections and the time, and carry out
//! what it returns.
//!
//! - [`proto`]: the wire protocol (messages, versioned length-prefixed frames, batching, a
//!   decoder that never panics);
//! - [`auth`]: JOIN authentication (HMAC over the PM's challenge);
//! - [`attr`] and [`schema`]: CDO attributes and the YAML schemas that type them;
//! - [`selector`] and [`events`]: subscriptions' queries over attributes and the pool events
//!   they deliver (signal-before, acknowledgements);
//! - [`client`]: an application's side of the protocol as a state machine
//!   ([`client::ClientCore`]), driven by the `pool` crate's clients;
//! - [`view`]: what read-only observers may ask the PM and what it answers;
//! - [`Manager`]: the pool manager's logic as a state machine, including transport planning
//!   (which endpoints can reach which, over which [`Subnet`]s). Time comes in through
//!   [`Manager::handle_timeout`]; [`Manager::poll_timeout`] says when it next needs it.
//!
//! `cargo test -p pool-core` needs no libfabric, PMIx or network: the manager is tested by
//! driving it in memory (`tests/manager.rs`).

pub mod attr;
pub mod auth;
pub mod client;
pub mod events;
pub mod ids;
pub mod layout;
mod manager;
pub mod proto;
pub mod schema;
pub mod selector;
pub mod shards;
#[cfg(feature = "sim")]
pub mod sim;
pub mod view;

pub use manager::{
    Adopted, Clock, ConnId, DistancesError, GROUP_SLICE, HostDistances, Identity, KeptCheck,
    KeptFile, MAX_DISTANCE_HOSTS, MIN_GRACE, Manager, REAP_SLICE, admission, policy,
};
pub use proto::MAX_NAME;

/// Hash maps of the PM and the client core (and of their drivers): a fast hasher with a
/// per-process random seed (keys include names chosen by applications, so the seed
/// matters).
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// An IP network with the address it was seen on (`10.1.0.1/24`): the network of an
/// endpoint or of a link. [`ipnet::IpNet::contains`] tells whether an address is on it.
pub type Subnet = ipnet::IpNet;
