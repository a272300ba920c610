//! Memory the library allocates for a program's CDO data (`mstro_mem_alloc`): a program
//! that fills such memory and lends it as a CDO's raw-ptr has it offered from a memory file
//! ([`fabric::Buffer::for_offer`]): its own where mapping pays, so consumers on its node
//! map the very pages instead of copying them, else a slab that they map once and copy
//! each CDO out of without a system call. Allocations are kept by address until freed.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use fabric::Buffer;

use crate::status::{Error, Result};

/// Allocations by start address.
static ALLOCATIONS: LazyLock<Mutex<HashMap<usize, Buffer>>> = LazyLock::new(Mutex::default);

fn allocations() -> std::sync::MutexGuard<'static, HashMap<usize, Buffer>> {
    ALLOCATIONS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Allocates `len` bytes (zeroed, page-aligned) for CDO data: lend them as a CDO's raw-ptr
/// ([`crate::cdo_set_user_memory`]) and consumers on this node map them where the system
/// makes that pay. Free with [`mem_free`].
///
/// # Errors
/// [`crate::Status::Invarg`] for 0 bytes; [`crate::Status::Nomem`] when the memory cannot
/// be had.
pub fn mem_alloc(len: usize) -> Result<*mut u8> {
    if len == 0 {
        return Err(Error::invarg("0 bytes asked for: allocate at least one"));
    }
    let mut buf = Buffer::for_offer(len)
        .map_err(|e| Error::new(crate::Status::Nomem, format!("allocating {len} bytes: {e}")))?;
    let ptr = buf.as_mut_slice().as_mut_ptr();
    allocations().insert(ptr as usize, buf);
    Ok(ptr)
}

/// Frees memory [`mem_alloc`] returned. Views consumers mapped keep their bytes; a CDO
/// that still lends the memory must have been withdrawn (or disposed) first, as for any
/// memory a program frees.
///
/// # Errors
/// [`crate::Status::Invarg`] for a pointer [`mem_alloc`] did not return (or freed already).
pub fn mem_free(ptr: *mut u8) -> Result<()> {
    match allocations().remove(&(ptr as usize)) {
        Some(_) => Ok(()),
        None => Err(Error::invarg(format!(
            "{ptr:p} was not allocated by mstro_mem_alloc (or was freed already)"
        ))),
    }
}

/// The lent memory `[ptr, ptr+len)` as a buffer to offer: naming its memory file when it is
/// an allocation of [`mem_alloc`] (from its start, within its length).
///
/// # Safety
/// As [`Buffer::borrowed`].
pub(crate) unsafe fn lend(ptr: *mut u8, len: usize) -> Buffer {
    let allocations = allocations();
    match allocations.get(&(ptr as usize)) {
        // SAFETY: an allocation of `mem_alloc` of at least `len` bytes: it lives until
        // `mem_free`, which the program calls only once the CDO is withdrawn, and the caller
        // does not write it while offered (this function's contract).
        Some(owner) if len <= owner.len() => unsafe { owner.lend(len) },
        // SAFETY: memory this library did not allocate: the caller guarantees what
        // `Buffer::borrowed` requires (this function's own safety contract, passed on).
        _ => unsafe { Buffer::borrowed(ptr, len) },
    }
}

/// The offer lending `ptr` was withdrawn: if it is an allocation of [`mem_alloc`], the
/// program's later writes to it must not reach the consumers' views.
///
/// # Errors
/// [`crate::Status::Nomem`] if the pages cannot be made private.
pub(crate) fn withdrawn(ptr: *mut u8) -> Result<()> {
    match allocations().get_mut(&(ptr as usize)) {
        Some(buf) => buf
            .keep_private()
            .map_err(|e| Error::new(crate::Status::Nomem, e.to_string())),
        None => Ok(()),
    }
}
