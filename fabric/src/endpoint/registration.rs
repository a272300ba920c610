//! Memory registration: the fabric and domain that regions keep alive, unpredictable keys,
//! access by role, and how peers address a registered region.

use super::*;

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
        // SAFETY: `mr` is an open registration (this function's contract).
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

    /// Registers `buf` for local use and the remote access mode `A` its role needs (an
    /// offered CDO: [`RemoteRead`](crate::access::RemoteRead); a landing buffer:
    /// [`Local`](crate::access::Local)). Where the application picks keys (no
    /// `FI_MR_PROV_KEY`), the key is random, so a peer cannot reach a region whose
    /// descriptor it was not given by guessing. An empty buffer is not registered with the
    /// provider (its descriptor has length 0).
    ///
    /// # Errors
    /// [`FabricError::Call`]; `ulimit -l` is named when the provider cannot pin memory.
    pub fn register<A: Access>(&self, buf: Buffer) -> Result<MemoryRegion<A>> {
        let shared = &self.core.shared;
        if buf.is_empty() {
            let nothing = (std::ptr::null_mut(), std::ptr::null_mut());
            let remote = RemoteRegion {
                addr: 0,
                key: 0,
                len: 0,
            };
            return Ok(MemoryRegion::new(buf, nothing, remote, Arc::clone(shared)));
        }
        let mut mr: *mut sys::fid_mr = std::ptr::null_mut();
        let len = buf.len();
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
                    crate::access::flags::<A>(),
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
        Ok(MemoryRegion::new(
            buf,
            (mr, desc),
            remote,
            Arc::clone(shared),
        ))
    }
}
