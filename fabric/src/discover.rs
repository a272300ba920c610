//! Provider discovery: what `fi_getinfo` offers on this node, as plain data.

use std::ffi::CStr;

use fabric_sys as sys;
use serde::{Deserialize, Serialize};

use crate::error::{Result, check};

/// The endpoint type of an offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointType {
    /// `FI_EP_RDM`: reliable, unconnected (what the pool uses).
    Rdm,
    /// `FI_EP_MSG`: reliable, connected.
    Msg,
    /// `FI_EP_DGRAM`: unreliable datagrams.
    Dgram,
    /// Any other type.
    Other,
}

/// Capabilities of an offer that matter to us.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Caps {
    /// `FI_RMA`: remote reads and writes.
    pub rma: bool,
    /// `FI_MSG`: send/receive.
    pub msg: bool,
    /// `FI_TAGGED`: tagged send/receive.
    pub tagged: bool,
    /// `FI_ATOMIC`.
    pub atomic: bool,
}

/// One offer of `fi_getinfo`: a provider on a domain (an interface for IP providers, a
/// device such as `mlx5_0` for verbs, `shm` for shared memory).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProviderInfo {
    /// The provider, including layering (`tcp;ofi_rxm`, `net`, `shm`, `verbs;ofi_rxm`).
    pub provider: String,
    /// The fabric name (an IP subnet such as `127.0.0.1/32` for IP providers).
    pub fabric: String,
    /// The domain name (`eth0`, `lo`, `mlx5_0`, `shm`).
    pub domain: String,
    /// The endpoint type.
    pub endpoint: EndpointType,
    /// The capabilities.
    pub caps: Caps,
}

impl ProviderInfo {
    /// True for an IPv6 link-local fabric (`fe80::/64`), which the pool never uses.
    pub fn is_ipv6_link_local(&self) -> bool {
        self.fabric.to_ascii_lowercase().starts_with("fe80:")
    }
}

/// Everything `fi_getinfo` offers with no hints, in libfabric's order. Asked once per
/// process (the inventory, provider selection and every endpoint share the answer; the
/// environment that steers libfabric does not change once threads run).
///
/// # Errors
/// A libfabric error other than "no data" (which gives an empty list); when libfabric
/// cannot be loaded, the error says why.
pub fn discover() -> Result<Vec<ProviderInfo>> {
    static LIST: std::sync::OnceLock<Vec<ProviderInfo>> = std::sync::OnceLock::new();
    if let Some(list) = LIST.get() {
        return Ok(list.clone());
    }
    let list = discover_now()?;
    Ok(LIST.get_or_init(|| list).clone())
}

/// [`discover`], asking libfabric again.
fn discover_now() -> Result<Vec<ProviderInfo>> {
    let list = getinfo_raw(std::ptr::null())?;
    let head = list.0;
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: a valid element of the list fi_getinfo returned.
        let info = unsafe { &*cur };
        // SAFETY: attribute pointers of a returned info are valid or NULL.
        let (fabric, domain, ep) = unsafe {
            (
                info.fabric_attr.as_ref(),
                info.domain_attr.as_ref(),
                info.ep_attr.as_ref(),
            )
        };
        if let (Some(fa), Some(da)) = (fabric, domain) {
            out.push(ProviderInfo {
                provider: cstr(fa.prov_name),
                fabric: cstr(fa.name),
                domain: cstr(da.name),
                endpoint: match ep.map(|e| e.type_) {
                    Some(sys::fi_ep_type_FI_EP_RDM) => EndpointType::Rdm,
                    Some(sys::fi_ep_type_FI_EP_MSG) => EndpointType::Msg,
                    Some(sys::fi_ep_type_FI_EP_DGRAM) => EndpointType::Dgram,
                    _ => EndpointType::Other,
                },
                caps: Caps {
                    rma: info.caps & u64::from(sys::FI_RMA) != 0,
                    msg: info.caps & u64::from(sys::FI_MSG) != 0,
                    tagged: info.caps & u64::from(sys::FI_TAGGED) != 0,
                    atomic: info.caps & u64::from(sys::FI_ATOMIC) != 0,
                },
            });
        }
        cur = info.next;
    }
    Ok(out)
}

fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric strings are NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `fi_getinfo` for this library's API version with `hints` (NULL: everything). "No data"
/// gives an empty (NULL) list.
///
/// # Errors
/// Any other libfabric error.
pub(crate) fn getinfo_raw(hints: *const sys::fi_info) -> Result<InfoList> {
    let mut out: *mut sys::fi_info = std::ptr::null_mut();
    let version = sys::make_version(sys::FI_MAJOR_VERSION, sys::FI_MINOR_VERSION);
    // SAFETY: hints NULL or valid; `out` receives a list owned by the returned InfoList.
    let rc = unsafe {
        sys::fi_getinfo(
            version,
            std::ptr::null(),
            std::ptr::null(),
            0,
            hints,
            &mut out,
        )
    };
    let list = InfoList(out);
    if rc == -(sys::FI_ENODATA as i32) {
        return Ok(list);
    }
    check("fi_getinfo", rc.into())?;
    Ok(list)
}

/// Frees an `fi_info` list on drop.
pub(crate) struct InfoList(pub(crate) *mut sys::fi_info);

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a list from fi_getinfo/fi_allocinfo, freed once.
            unsafe { sys::fi_freeinfo(self.0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the real library: on every machine libfabric offers at least shm, and the IP
    /// providers on loopback.
    #[test]
    fn discovers_shm_and_loopback_offers() {
        let all = discover().expect("fi_getinfo");
        assert!(
            all.iter()
                .any(|p| p.provider == "shm" && p.endpoint == EndpointType::Rdm && p.caps.rma),
            "{all:?}"
        );
        assert!(
            all.iter()
                .any(|p| p.domain == "lo" && p.endpoint == EndpointType::Rdm),
            "{all:?}"
        );
    }
}
