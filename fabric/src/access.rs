//! What peers may do to a registered region, in its type ([`crate::MemoryRegion`]`<A>`):
//! each role gets the least it needs (an offered CDO is remotely readable and nothing else;
//! a landing buffer for reads is not remotely accessible at all), and the bytes of a region
//! are handed out as slices only where no peer can write them.

use fabric_sys as sys;

mod sealed {
    /// Only this crate's access modes exist.
    pub trait Sealed {
        /// The libfabric access flags of the mode.
        fn flags() -> u64;
    }
}

/// An access mode of registered memory: [`Local`], [`RemoteRead`] or [`RemoteWrite`].
pub trait Access: sealed::Sealed + Send + Sync + 'static {}

/// A mode in which no peer can write the region: its bytes may be read (and written) as
/// slices by this process.
pub trait NoRemoteWrites: Access {}

/// Local use only: the destination of this process's reads, the source of its writes,
/// send and receive buffers. Peers holding the descriptor cannot touch it.
#[derive(Debug)]
pub enum Local {}

/// Peers may read it (`fi_read`); a peer's `fi_write` fails with an access error.
#[derive(Debug)]
pub enum RemoteRead {}

/// Peers may write into it (`fi_write`), and read it. Only for a region that is the target
/// of a peer's write; its bytes are reached only after deregistering it
/// ([`crate::MemoryRegion::into_buffer`]), when no peer can write any more.
#[derive(Debug)]
pub enum RemoteWrite {}

/// What every mode lets this process do with the region itself.
fn local() -> u64 {
    u64::from(sys::FI_READ | sys::FI_WRITE | sys::FI_SEND | sys::FI_RECV)
}

impl sealed::Sealed for Local {
    fn flags() -> u64 {
        local()
    }
}

impl sealed::Sealed for RemoteRead {
    fn flags() -> u64 {
        local() | u64::from(sys::FI_REMOTE_READ)
    }
}

impl sealed::Sealed for RemoteWrite {
    fn flags() -> u64 {
        local() | u64::from(sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE)
    }
}

impl Access for Local {}
impl Access for RemoteRead {}
impl Access for RemoteWrite {}
impl NoRemoteWrites for Local {}
impl NoRemoteWrites for RemoteRead {}

/// The libfabric flags of mode `A`.
pub(crate) fn flags<A: Access>() -> u64 {
    <A as sealed::Sealed>::flags()
}
