//! Errors of the fabric layer.

use std::ffi::CStr;

use fabric_sys as sys;

/// A libfabric failure: the call that failed and libfabric's own text for the code.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A libfabric call returned a negative code.
    #[error("{call}: {text} (-{code}){hint}")]
    Call {
        /// The libfabric function.
        call: &'static str,
        /// The positive `FI_E*` code.
        code: i32,
        /// `fi_strerror(code)`.
        text: String,
        /// What to do about it, when we know.
        hint: &'static str,
    },
    /// An operation failed: the provider's completion error.
    #[error("{what} failed: {text} (-{code}, provider error {prov_errno}){hint}")]
    Completion {
        /// The operation (`fi_read`, ...).
        what: &'static str,
        /// The positive `FI_E*` code.
        code: i32,
        /// libfabric's text for it.
        text: String,
        /// The provider's own error number.
        prov_errno: i32,
        /// What it likely means.
        hint: &'static str,
    },
    /// An operation did not finish in time (the peer may be gone or the network stuck).
    #[error("{what} did not complete within {waited:?}; the peer may be gone or unreachable")]
    Timeout {
        /// The operation.
        what: &'static str,
        /// How long it ran.
        waited: std::time::Duration,
    },
    /// The provider would not take the operation for its whole deadline (it kept answering
    /// "try again"): the peer is not accepting connections, most likely gone.
    #[error(
        "{what} could not be posted for {waited:?}: the peer does not accept connections (gone, or its endpoint closed)"
    )]
    Unreachable {
        /// The operation.
        what: &'static str,
        /// How long it was retried.
        waited: std::time::Duration,
    },
    /// The endpoint closed while the operation was in flight.
    #[error("{0} canceled: the endpoint was closed")]
    Canceled(&'static str),
    /// An OS call failed.
    #[error("{what}: {source}; {hint}")]
    Os {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// No provider matches.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// An argument cannot be passed to libfabric (NUL byte in a name, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl From<fabric_types::AddressError> for FabricError {
    fn from(e: fabric_types::AddressError) -> Self {
        FabricError::InvalidArgument(e.to_string())
    }
}

impl From<fabric_types::RegionRangeError> for FabricError {
    fn from(e: fabric_types::RegionRangeError) -> Self {
        FabricError::InvalidArgument(e.to_string())
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, FabricError>;

/// Builds the error of a failed completion (`-code` as the CQ reported it).
pub(crate) fn completion(what: &'static str, code: i32, prov_errno: i32) -> FabricError {
    // SAFETY: fi_strerror returns a static string for any code.
    let text = unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned();
    let gone = |c: i32| {
        [
            libc::ECONNRESET,
            libc::ECONNREFUSED,
            libc::EPIPE,
            libc::ENOTCONN,
            libc::ECONNABORTED,
        ]
        .contains(&c)
    };
    let hint = match code {
        c if gone(c) || gone(prov_errno) => "; the peer closed the connection (process gone?)",
        c if c == libc::EHOSTUNREACH || c == libc::ENETUNREACH => {
            "; the peer's address is unreachable"
        }
        c if c == sys::FI_ENOKEY as i32 || c == libc::EACCES || c == libc::EINVAL => {
            "; the memory key or range is not valid at the peer (withdrawn region?)"
        }
        c if c == sys::FI_ECANCELED as i32 => "; the operation was canceled",
        _ => "",
    };
    FabricError::Completion {
        what,
        code,
        text,
        prov_errno,
        hint,
    }
}

/// Converts a libfabric return code (`0` or `-FI_E*`) into a result.
pub(crate) fn check(call: &'static str, rc: i64) -> Result<()> {
    if rc >= 0 {
        return Ok(());
    }
    let code = i32::try_from(-rc).unwrap_or(i32::MAX);
    // SAFETY: fi_strerror returns a static string for any code.
    let text = unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned();
    let hint = match code as u32 {
        sys::FI_ENODATA => {
            "; no provider matches: check FI_PROVIDER / MSTRO_OFI_PROVIDER and `fi_info`"
        }
        e if e == libc::EMFILE as u32 => "; too many open files: raise `ulimit -n`",
        e if e == libc::ENOMEM as u32 => "; cannot lock memory: raise `ulimit -l`",
        _ => "",
    };
    Err(FabricError::Call {
        call,
        code,
        text,
        hint,
    })
}

/// Why no offer was selected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// Nothing usable matches the restrictions.
    #[error(
        "no libfabric provider offers RDM endpoints with RMA{restriction}; usable offers here: {available}. \
         Check MSTRO_OFI_PROVIDER / FI_PROVIDER / MSTRO_OFI_IFACE and `fi_info -t FI_EP_RDM -c FI_RMA`"
    )]
    NoMatch {
        /// The restrictions in force, in words.
        restriction: String,
        /// What would have been usable without them.
        available: String,
    },
}
