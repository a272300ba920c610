//! libfabric for the Maestro pool: the consumer of a CDO reads it straight out of the
//! provider's registered memory.
//!
//! - [`discover`] lists what `fi_getinfo` offers; [`select`] ranks the offers by capability
//!   and class under the user's overrides (`MSTRO_OFI_PROVIDER`/`FI_PROVIDER`,
//!   `MSTRO_OFI_IFACE`) and the inventory's NIC.
//! - [`Endpoint`] is one RDM endpoint (fabric, domain, AV, CQ) with a progress thread;
//!   it registers memory ([`MemoryRegion`], described to peers by [`RemoteRegion`]), reads
//!   and writes remote regions, and sends/receives small tagged messages. Every operation is
//!   an [`Op`]: wait for it with a deadline or `.await` it; every operation also has its own
//!   deadline ([`Timeouts`]), so a vanished peer is an error, not a hang.
//! - [`Buffer`]s are pre-faulted; [`RegionPool`] keeps registered ones for reuse.
//! - [`cma`] copies straight out of another process of this host (`process_vm_readv`),
//!   for readers that need no work from the process they read.
//!
//! Bindings come from `fabric-sys`, our own bindgen crate (see its docs for why); the
//! vocabulary that travels between processes (addresses, remote regions, provider classes)
//! comes from `fabric-types`, which needs no libfabric.
//!
//! Feature `baseline` adds the module `baseline`, bare libfabric as the benchmarks' reference
//! (not for applications).

pub mod access;
#[cfg(feature = "baseline")]
pub mod baseline;
pub mod cma;
mod discover;
mod domain;
mod endpoint;
mod error;
mod mr;
mod op;
mod pages;
mod select;
mod shm_files;
mod slab;

pub use discover::{Caps, EndpointType, ProviderInfo, discover};
pub use endpoint::{Endpoint, Peer, Timeouts};
pub use error::{FabricError, Result};
pub use fabric_types::{
    Address, AddressError, MemoryFile, ProviderClass, RegionRangeError, RemoteRegion, SlabPlace,
    provider_matches,
};
pub use mr::{Buffer, MemoryRegion, RegionPool};
pub use op::{Op, spin_budget};
pub use select::{Config, ConfigError, ProgressMode, Scope, SelectError, select};
pub use shm_files::sweep_stale as sweep_stale_shm_files;

/// Where libfabric was installed when this was built (pkg-config's `libdir`): what a cache
/// of libfabric's answers fingerprints, without loading it.
pub const LIBFABRIC_DIR: &str = fabric_sys::LIBDIR;

/// What may cross threads, checked at compile time: endpoints, regions and buffers are
/// shared between the application's threads and the progress thread (libfabric objects
/// opened `FI_THREAD_SAFE`); an operation may be waited for on another thread.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<Endpoint>();
    send_sync::<MemoryRegion>();
    send_sync::<Buffer>();
    send_sync::<RegionPool>();
    send_sync::<Peer>();
    send_sync::<RemoteRegion>();
    send::<Op<Buffer>>();
    send::<Op<()>>();
};
