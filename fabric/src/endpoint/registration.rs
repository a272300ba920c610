//! Memory registration: the fabric and domain that regions keep alive, unpredictable keys,
//! access by role, and how peers address a registered region.

use super::*;

/// Fabric and domain: what memory registrations need to stay valid.
pub(crate) struct Shared {
    pub(super) fabric: *mut sys::fid_fabric,
    pub(super) domain: *mut sys::fid_domain,
    pub(super) mr_mode: u32,
    /// Bits of the keys the application picks (`mr_key_size` bytes, at most 8).
    pub(super) key_mask: u64,
}

impl Shared {
    /// A key for a new registration: random within the domain's key size, or 0 where the
    /// provider issues keys itself.
    fn fresh_key(&self) -> Result<u64> {
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

pub(super) fn close_fid(what: &str, fid: *mut sys::fid) {
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

/// How peers address registration `mr` of `buf`, requested with `key`: the provider's key
/// under `FI_MR_PROV_KEY`, the buffer's virtual address under `FI_MR_VIRT_ADDR` (else
/// offsets from 0).
///
/// # Safety
/// `mr` is an open registration of `buf`.
pub(crate) unsafe fn remote_of(
    mr_mode: u32,
    mr: *mut sys::fid_mr,
    key: u64,
    buf: &crate::Buffer,
) -> RemoteRegion {
    let key = if mr_mode & sys::FI_MR_PROV_KEY != 0 {
        // SAFETY: guaranteed by the caller.
        unsafe { sys::fi_mr_key(mr) }
    } else {
        key
    };
    let addr = if mr_mode & sys::FI_MR_VIRT_ADDR != 0 {
        buf.as_ptr() as u64
    } else {
        0
    };
    RemoteRegion {
        addr,
        key,
        len: buf.len() as u64,
    }
}

impl Endpoint {
    /// True when peers address this endpoint's registrations by the buffers' virtual
    /// addresses (`FI_MR_VIRT_ADDR`), as shared-memory providers do: a region's
    /// [`RemoteRegion::addr`] is then where the bytes are in this process.
    pub fn virtual_addresses(&self) -> bool {
        self.shared().mr_mode & sys::FI_MR_VIRT_ADDR != 0
    }

    /// Registers `buf` for local use and the remote `access` its role needs (an offered
    /// CDO: [`Access::RemoteRead`]; a landing buffer: [`Access::Local`]). Where the
    /// application picks keys (no `FI_MR_PROV_KEY`), the key is random, so a peer cannot
    /// reach a region whose descriptor it was not given by guessing.
    ///
    /// # Errors
    /// [`FabricError::Call`]; `ulimit -l` is named when the provider cannot pin memory.
    pub fn register(&self, buf: Buffer, access: Access) -> Result<MemoryRegion> {
        let shared = &self.core.shared;
        let mut mr: *mut sys::fid_mr = std::ptr::null_mut();
        let len = buf.len().max(1);
        let mut attempts = 0;
        let key = loop {
            let key = shared.fresh_key()?;
            // SAFETY: the buffer outlives the registration (both live in the MemoryRegion,
            // which closes the registration first).
            let rc = unsafe {
                sys::fi_mr_reg(
                    shared.domain,
                    buf.as_ptr().cast(),
                    len,
                    access.flags(),
                    0,
                    key,
                    0,
                    &mut mr,
                    std::ptr::null_mut(),
                )
            };
            // A random key already in use: draw another (a handful of times at most).
            attempts += 1;
            if rc == -(sys::FI_ENOKEY as i32) && attempts < 8 {
                continue;
            }
            check("fi_mr_reg", rc.into())?;
            break key;
        };
        // SAFETY: a registration just created, of `buf` with `key`.
        let (desc, remote) = unsafe {
            (
                sys::fi_mr_desc(mr),
                remote_of(shared.mr_mode, mr, key, &buf),
            )
        };
        Ok(MemoryRegion {
            buf,
            mr,
            desc,
            remote,
            shared: Arc::clone(shared),
        })
    }
}
