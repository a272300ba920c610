//! C strings as libpmix lays them out: fixed arrays (keys, namespaces), borrowed
//! NUL-terminated strings, and arguments that must not hold a NUL.

use std::ffi::{CStr, CString, c_char};

use crate::error::{Error, Result};

/// Copies `s` into a fixed C char array, NUL-terminated.
pub(crate) fn copy_cstr(dst: &mut [c_char], s: &str, what: &str) -> Result<()> {
    if s.as_bytes().contains(&0) {
        return Err(Error::InvalidArgument(format!(
            "{what} {s:?} contains a NUL byte"
        )));
    }
    if s.len() >= dst.len() {
        return Err(Error::InvalidArgument(format!(
            "{what} {s:?} is {} bytes; PMIx allows at most {}",
            s.len(),
            dst.len() - 1
        )));
    }
    for (d, b) in dst.iter_mut().zip(s.bytes()) {
        *d = b as c_char;
    }
    dst[s.len()] = 0;
    Ok(())
}

/// Reads a fixed C char array up to its first NUL (or its end).
pub(crate) fn fixed_str(src: &[c_char]) -> String {
    let bytes: Vec<u8> = src
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copies a C string (NULL gives an empty string).
///
/// # Safety
/// `p` must be NULL or a valid NUL-terminated string.
pub(crate) unsafe fn cstr_lossy(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is not NULL here and is a valid NUL-terminated string (this function's
    // contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A `CString` for an argument, with a typed error for interior NULs.
pub(crate) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument(format!("{what} {s:?} contains a NUL byte")))
}
