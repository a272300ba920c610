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
    /// An argument cannot be passed to libfabric (NUL byte in a name, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, FabricError>;

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
