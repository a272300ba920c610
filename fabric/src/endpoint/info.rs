//! `fi_getinfo` for an offer, the list it returns, opening a bound endpoint, and the
//! endpoint's own address.

use super::*;
use crate::discover::{InfoList, getinfo_raw};

/// The memory-registration modes this layer supports: local descriptors, virtual
/// addresses, app-allocated memory, provider keys. (`FI_MR_ENDPOINT` is not supported:
/// providers needing it are not selected.)
pub(super) const SUPPORTED_MR_MODE: u32 =
    sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY;

/// Opens an endpoint on `info`, binds it to `av` and `cq` (transmit and receive) and
/// enables it. Shared by [`Endpoint`] and the benchmark's bare baseline.
///
/// # Safety
/// `domain`, `av` and `cq` must be open objects of one domain; `info` a valid info for it.
pub(crate) unsafe fn open_bound_ep(
    domain: *mut sys::fid_domain,
    info: *mut sys::fi_info,
    av: *mut sys::fid_av,
    cq: *mut sys::fid_cq,
    ep: &mut *mut sys::fid_ep,
) -> Result<()> {
    // SAFETY: `info` is a valid info (this function's contract), and an info libfabric
    // returned has its fabric attributes.
    let provider = unsafe { (*(*info).fabric_attr).prov_name };
    // SAFETY: prov_name is NULL or a NUL-terminated string owned by `info`.
    let shm =
        !provider.is_null() && unsafe { std::ffi::CStr::from_ptr(provider) }.to_bytes() == b"shm";
    if shm {
        crate::shm_files::sweep_once();
    }
    // SAFETY: `domain` is open and `info` valid for it (this function's contract); `ep` is
    // written by libfabric.
    unsafe {
        check(
            "fi_endpoint",
            sys::fi_endpoint(domain, info, ep, std::ptr::null_mut()).into(),
        )?;
    }
    if shm {
        // `shm` names its file in /dev/shm after the pid and opens it without O_EXCL: a
        // name nobody can predict keeps another user's planted file out of our endpoint.
        let name = crate::shm_files::unpredictable_name()?;
        let mut bytes = name.into_bytes_with_nul();
        // SAFETY: `*ep` was just opened and is not enabled; the name is a NUL-terminated
        // string that libfabric copies.
        let rc =
            unsafe { sys::fi_setname(&mut (**ep).fid, bytes.as_mut_ptr().cast(), bytes.len()) };
        check("fi_setname", rc.into())?;
    }
    // SAFETY: `*ep` was just opened; `av` and `cq` are open objects of its domain (this
    // function's contract).
    unsafe {
        check(
            "fi_ep_bind(av)",
            sys::fi_ep_bind(*ep, &mut (*av).fid, 0).into(),
        )?;
        let flags = u64::from(sys::FI_TRANSMIT | sys::FI_RECV);
        check(
            "fi_ep_bind(cq)",
            sys::fi_ep_bind(*ep, &mut (*cq).fid, flags).into(),
        )?;
        check("fi_enable", sys::fi_enable(*ep).into())
    }
}

/// A C string of libfabric as text ("" for NULL).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(super) unsafe fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is not NULL here and points to a NUL-terminated string (this function's
    // contract).
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

pub(super) fn strdup(s: &str, what: &str) -> Result<*mut std::ffi::c_char> {
    let c = CString::new(s)
        .map_err(|_| FabricError::InvalidArgument(format!("{what} {s:?} has a NUL byte")))?;
    // SAFETY: libfabric frees these strings with free() in fi_freeinfo.
    Ok(unsafe { libc::strdup(c.as_ptr()) })
}

impl Endpoint {
    /// `fi_getinfo` restricted to the offer's provider, fabric and domain, with our
    /// capabilities, modes and thread safety.
    pub(crate) fn getinfo(offer: &ProviderInfo) -> Result<InfoList> {
        // SAFETY: fi_allocinfo returns a zeroed info with all attribute structs allocated.
        let hints = InfoList(unsafe { sys::fi_allocinfo() });
        if hints.0.is_null() {
            return Err(FabricError::InvalidArgument(
                "fi_allocinfo failed (out of memory)".into(),
            ));
        }
        // SAFETY: filling the freshly allocated hints; strings are malloc'ed (freed by
        // fi_freeinfo).
        unsafe {
            let h = &mut *hints.0;
            h.caps = u64::from(
                sys::FI_RMA
                    | sys::FI_TAGGED
                    | sys::FI_READ
                    | sys::FI_WRITE
                    | sys::FI_REMOTE_READ
                    | sys::FI_REMOTE_WRITE
                    | sys::FI_SEND
                    | sys::FI_RECV,
            );
            h.mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*h.ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            (*h.domain_attr).mr_mode = SUPPORTED_MR_MODE as i32;
            (*h.domain_attr).threading = sys::fi_threading_FI_THREAD_SAFE;
            (*h.domain_attr).name = strdup(&offer.domain, "domain")?;
            (*h.fabric_attr).prov_name = strdup(&offer.provider, "provider")?;
            (*h.fabric_attr).name = strdup(&offer.fabric, "fabric")?;
        }
        let list = getinfo_raw(hints.0)?;
        // Layered providers (`tcp;ofi_rxm`) ignore the domain and fabric names in the
        // hints and list every interface: take the offer's own entry (its source address
        // binds the endpoint to the chosen NIC).
        let mut at = list.0;
        while !at.is_null() {
            // SAFETY: a node of the list fi_getinfo returned, with its attribute structs.
            let i = unsafe { &*at };
            // SAFETY: the node's domain and fabric attribute structs come with it from
            // fi_getinfo; their names are NULL or NUL-terminated strings.
            let (domain, fabric) =
                unsafe { (cstr((*i.domain_attr).name), cstr((*i.fabric_attr).name)) };
            if domain == offer.domain && fabric == offer.fabric {
                // SAFETY: duplicating one valid node; the copy is freed by its InfoList.
                let one = InfoList(unsafe { sys::fi_dupinfo(at) });
                if one.0.is_null() {
                    return Err(FabricError::InvalidArgument(
                        "fi_dupinfo failed (out of memory)".into(),
                    ));
                }
                return Ok(one);
            }
            at = i.next;
        }
        Err(FabricError::InvalidArgument(format!(
            "{} on {} ({}) offers no RDM endpoint with RMA and tagged messages",
            offer.provider, offer.domain, offer.fabric
        )))
    }

    pub(crate) fn name(ep: *mut sys::fid_ep) -> Result<Address> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buffer and length describe `buf`.
        let mut rc = unsafe { sys::fi_getname(&mut (*ep).fid, buf.as_mut_ptr().cast(), &mut len) };
        if rc == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: buffer and length describe `buf`, resized to what the provider asked for.
            rc = unsafe { sys::fi_getname(&mut (*ep).fid, buf.as_mut_ptr().cast(), &mut len) };
        }
        check("fi_getname", rc.into())?;
        buf.truncate(len);
        Ok(Address(buf))
    }
}
