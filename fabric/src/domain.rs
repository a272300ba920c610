//! The fabric and domain an endpoint opened, kept alive by the endpoint and by every region
//! registered with it (closed after the last), and the keys of new registrations.

use fabric_sys as sys;

use crate::error::{FabricError, Result};

/// Fabric and domain: what memory registrations need to stay valid.
pub(crate) struct Shared {
    pub(crate) fabric: *mut sys::fid_fabric,
    pub(crate) domain: *mut sys::fid_domain,
    pub(crate) mr_mode: u32,
    /// Bits of the keys the application picks (`mr_key_size` bytes, at most 8).
    pub(crate) key_mask: u64,
}

impl Shared {
    /// A key for a new registration: random within the domain's key size, or 0 where the
    /// provider issues keys itself.
    pub(crate) fn fresh_key(&self) -> Result<u64> {
        if self.mr_mode & sys::FI_MR_PROV_KEY != 0 {
            return Ok(0);
        }
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| {
            FabricError::InvalidArgument(format!(
                "no randomness for a memory key ({e}); the kernel's getrandom must work"
            ))
        })?;
        Ok(u64::from_ne_bytes(bytes) & self.key_mask)
    }
}

// SAFETY: FI_THREAD_SAFE domain; the pointers are only closed in drop.
unsafe impl Send for Shared {}
// SAFETY: shared references only reach what the `Send` reason above makes safe from any
// thread (FI_THREAD_SAFE objects, state behind a mutex).
unsafe impl Sync for Shared {}

pub(crate) fn close_fid(what: &str, fid: *mut sys::fid) {
    if fid.is_null() {
        return;
    }
    // SAFETY: each fid is closed once, by its owner.
    let rc = unsafe { sys::fi_close(fid) };
    if rc != 0 {
        tracing::warn!("fi_close({what}): {rc}");
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: taking the address of the embedded fid of live objects.
        unsafe {
            if !self.domain.is_null() {
                close_fid("domain", &mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                close_fid("fabric", &mut (*self.fabric).fid);
            }
        }
    }
}
