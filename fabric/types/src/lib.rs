//! The fabric's vocabulary, free of libfabric: what travels between processes to describe
//! a transfer ([`Address`], [`RemoteRegion`]) and how provider names are understood
//! ([`ProviderClass`], [`provider_matches`]).
//!
//! The `fabric` crate re-exports all of it; the pool's sans-IO core (`pool-core`) uses it to
//! plan transfers without linking libfabric, so its tests need no system library.

mod address;
mod provider;
mod region;

pub use address::{Address, AddressError};
pub use provider::{ProviderClass, provider_matches};
pub use region::{MemoryFile, RegionRangeError, RemoteRegion, SlabPlace};
