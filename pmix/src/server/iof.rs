//! Forwarding the output of processes to tools (PMIx's IOF): a tool's `PMIx_IOF_pull`
//! reaches the host as [`Host::iof_pull`](crate::server::Host::iof_pull); the host then
//! hands every chunk of output of the processes pulled to an [`OutputSink`], from which
//! libpmix passes it to each tool that asked.

use std::ffi::c_void;
use std::sync::RwLock;

use pmix_sys as sys;

use crate::error::{Error, Result, check};
use crate::value::Proc;
use crate::value::bytes_to_raw;

/// Whether the server is up for deliveries: set at `PMIx_server_init`, cleared first thing
/// in the server's drop, so that no delivery reaches a finalized library (a delivery holds
/// the read lock for its call).
pub(crate) static OPEN: RwLock<bool> = RwLock::new(false);

/// Sets [`OPEN`].
pub(crate) fn set_open(open: bool) {
    *OPEN
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = open;
}

/// An output channel of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IofChannel {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

impl IofChannel {
    fn raw(self) -> sys::pmix_iof_channel_t {
        (match self {
            IofChannel::Stdout => sys::PMIX_FWD_STDOUT_CHANNEL,
            IofChannel::Stderr => sys::PMIX_FWD_STDERR_CHANNEL,
        }) as sys::pmix_iof_channel_t
    }
}

/// The channels an IOF request names (`pmix_iof_channel_t` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IofChannels(pub sys::pmix_iof_channel_t);

impl IofChannels {
    /// No channel.
    pub const NONE: IofChannels = IofChannels(0);

    /// These channels and `channel`.
    #[must_use]
    pub fn with(self, channel: IofChannel) -> IofChannels {
        IofChannels(self.0 | channel.raw())
    }

    /// True when no channel is named.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether `channel` is among them.
    pub fn contains(self, channel: IofChannel) -> bool {
        self.0 & channel.raw() != 0
    }
}

/// Hands process output to libpmix for the tools that pulled it
/// (`PMIx_server_IOF_deliver`). Cheap to clone and `Send`: output threads each keep one.
/// Deliveries after the server was dropped fail with [`Error::Unreachable`] and are
/// otherwise harmless.
#[derive(Clone, Debug)]
pub struct OutputSink {
    _private: (),
}

impl OutputSink {
    /// The sink of the running server (see [`crate::server::Server::output_sink`]).
    pub(crate) fn new() -> OutputSink {
        OutputSink { _private: () }
    }

    /// Delivers `data`, output of `source` on `channel`.
    ///
    /// # Errors
    /// [`Error::Unreachable`] once the server is gone; [`Error::InvalidArgument`] for a
    /// namespace PMIx cannot carry; the status libpmix refuses the delivery with.
    #[doc(alias = "PMIx_server_IOF_deliver")]
    pub fn deliver(&self, source: &Proc, channel: IofChannel, data: &[u8]) -> Result<()> {
        const OP: &str = "PMIx_server_IOF_deliver";
        let open = OPEN
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !*open {
            return Err(Error::Unreachable { op: OP });
        }
        // libpmix keeps pointers to both the source and the bytes until it calls back:
        // they live in one allocation freed by `delivered`.
        let chunk = Box::into_raw(Box::new(Chunk {
            source: source.to_raw()?,
            bytes: bytes_to_raw(data),
        }));
        // SAFETY: server up (OPEN held); `chunk` stays valid until `delivered` frees it,
        // exactly once, or below when the call fails synchronously (no callback then).
        let rc = unsafe {
            sys::PMIx_server_IOF_deliver(
                &(*chunk).source,
                channel.raw(),
                &(*chunk).bytes,
                std::ptr::null(),
                0,
                Some(delivered),
                chunk.cast(),
            )
        };
        if rc != sys::PMIX_SUCCESS as i32 {
            // SAFETY: no callback will come: ours to free.
            unsafe { free_chunk(chunk) };
        }
        check(OP, rc)
    }
}

/// What one delivery lends libpmix.
struct Chunk {
    source: sys::pmix_proc_t,
    bytes: sys::pmix_byte_object_t,
}

/// Frees a delivered chunk.
///
/// # Safety
/// `chunk` came from `Box::into_raw` in [`OutputSink::deliver`] and is freed once.
unsafe fn free_chunk(chunk: *mut Chunk) {
    // SAFETY: `chunk` came from `Box::into_raw` and is freed once (this function's
    // contract); the bytes were malloc'ed by `bytes_to_raw`.
    unsafe {
        let chunk = Box::from_raw(chunk);
        libc::free(chunk.bytes.bytes.cast());
    }
}

unsafe extern "C" fn delivered(_status: i32, cbdata: *mut c_void) {
    crate::ffi::guard("PMIx callback IOF delivered", (), || {
        // SAFETY: cbdata is the chunk handed over in `deliver`.
        unsafe { free_chunk(cbdata.cast()) }
    })
}
