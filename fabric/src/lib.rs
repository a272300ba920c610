//! libfabric for the Maestro pool.
//!
//! Today: provider discovery ([`discover`]): what `fi_getinfo` offers on this node (provider,
//! fabric, domain, endpoint type, capabilities), used by the `inventory` crate to attach
//! providers to NICs. Issue #4 adds endpoints, memory registration and RMA on top of the
//! same bindings (`fabric-sys`, our own bindgen crate; see its docs for why).

mod discover;
mod error;

pub use discover::{Caps, EndpointType, ProviderClass, ProviderInfo, discover};
pub use error::{FabricError, Result};
