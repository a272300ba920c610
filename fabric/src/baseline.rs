//! The benchmark's reference: libfabric with no layer on top, as the C `rma_bw` probe uses
//! it. Setup reuses the endpoint's `fi_getinfo` hints (so both run on the same provider,
//! domain and modes); the data path is bare: post `fi_read`, spin on `fi_cq_read`, no
//! progress thread, no completion objects, no deadlines. The serving side spins on
//! `fi_cq_read` until told to stop. Used only to measure what [`crate::Endpoint`] costs.

use std::sync::atomic::{AtomicBool, Ordering};

use fabric_sys as sys;

use crate::discover::ProviderInfo;
use crate::endpoint::{Endpoint, open_bound_ep, remote_of};
use crate::error::{FabricError, Result, check, completion};
use crate::mr::Buffer;
use fabric_types::{Address, RemoteRegion};

/// Bare fids, closed in reverse order on drop.
pub struct RawEndpoint {
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    ep: *mut sys::fid_ep,
    mrs: Vec<(*mut sys::fid_mr, Buffer)>,
    mr_mode: u32,
    address: Address,
}

impl RawEndpoint {
    /// Opens fabric, domain, CQ (no wait object), AV and endpoint on `offer`.
    ///
    /// # Errors
    /// The first libfabric call that fails.
    pub fn open(offer: &ProviderInfo) -> Result<RawEndpoint> {
        let info = Endpoint::getinfo(offer)?;
        let mut r = RawEndpoint {
            fabric: std::ptr::null_mut(),
            domain: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            av: std::ptr::null_mut(),
            ep: std::ptr::null_mut(),
            mrs: Vec::new(),
            mr_mode: 0,
            address: Address(Vec::new()),
        };
        // SAFETY: the usual open sequence on a valid info; `r` closes what was opened.
        unsafe {
            let fi = &*info.0;
            r.mr_mode = (*fi.domain_attr).mr_mode as u32;
            check(
                "fi_fabric",
                sys::fi_fabric(fi.fabric_attr, &mut r.fabric, std::ptr::null_mut()).into(),
            )?;
            check(
                "fi_domain",
                sys::fi_domain(r.fabric, info.0, &mut r.domain, std::ptr::null_mut()).into(),
            )?;
            let mut cq_attr = sys::fi_cq_attr {
                format: sys::fi_cq_format_FI_CQ_FORMAT_CONTEXT,
                wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
                ..Default::default()
            };
            check(
                "fi_cq_open",
                sys::fi_cq_open(r.domain, &mut cq_attr, &mut r.cq, std::ptr::null_mut()).into(),
            )?;
            let mut av_attr = sys::fi_av_attr {
                type_: sys::fi_av_type_FI_AV_TABLE,
                ..Default::default()
            };
            check(
                "fi_av_open",
                sys::fi_av_open(r.domain, &mut av_attr, &mut r.av, std::ptr::null_mut()).into(),
            )?;
            open_bound_ep(r.domain, info.0, r.av, r.cq, &mut r.ep)?;
        }
        r.address = Endpoint::name(r.ep)?;
        Ok(r)
    }

    /// This endpoint's address.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Registers `buf` (kept until drop) and returns its index and remote descriptor.
    ///
    /// # Errors
    /// `fi_mr_reg` failures.
    pub fn register(&mut self, buf: Buffer) -> Result<(usize, RemoteRegion)> {
        let key = self.mrs.len() as u64 + 1;
        let mut mr: *mut sys::fid_mr = std::ptr::null_mut();
        // The baseline only reads: remote peers may read, never write.
        let access = u64::from(sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ);
        // SAFETY: the buffer lives as long as the registration (both in `mrs`).
        let remote = unsafe {
            let rc = sys::fi_mr_reg(
                self.domain,
                buf.as_ptr().cast(),
                buf.len().max(1),
                access,
                0,
                key,
                0,
                &mut mr,
                std::ptr::null_mut(),
            );
            check("fi_mr_reg", rc.into())?;
            remote_of(self.mr_mode, mr, key, &buf)
        };
        self.mrs.push((mr, buf));
        Ok((self.mrs.len() - 1, remote))
    }

    /// The bytes of registered buffer `index`.
    pub fn bytes(&self, index: usize) -> &[u8] {
        self.mrs[index].1.as_slice()
    }

    /// Inserts a peer.
    ///
    /// # Errors
    /// `fi_av_insert` failures.
    pub fn insert(&self, addr: &Address) -> Result<u64> {
        let mut fi_addr = sys::FI_ADDR_UNSPEC;
        // SAFETY: one address read during the call.
        let rc = unsafe {
            sys::fi_av_insert(
                self.av,
                addr.0.as_ptr().cast(),
                1,
                &mut fi_addr,
                0,
                std::ptr::null_mut(),
            )
        };
        if rc != 1 {
            return Err(FabricError::InvalidArgument(format!("fi_av_insert: {rc}")));
        }
        Ok(fi_addr)
    }

    /// Reads `remote` into the start of registered buffer `index`, spinning until done.
    ///
    /// # Errors
    /// Posting or completion errors.
    pub fn read_spin(&mut self, peer: u64, index: usize, remote: RemoteRegion) -> Result<()> {
        let (mr, buf) = &self.mrs[index];
        let mut ctx = sys::fi_context2::default();
        // SAFETY: buffer registered and alive; ctx outlives the spin below.
        unsafe {
            let desc = sys::fi_mr_desc(*mr);
            loop {
                let rc = sys::fi_read(
                    self.ep,
                    buf.as_ptr().cast(),
                    remote.len as usize,
                    desc,
                    peer,
                    remote.addr,
                    remote.key,
                    (&raw mut ctx).cast(),
                );
                if rc == 0 {
                    break;
                }
                if rc != -(sys::FI_EAGAIN as isize) {
                    return check("fi_read", rc as i64);
                }
                self.poll_once()?;
            }
            while !self.poll_once()? {}
        }
        Ok(())
    }

    /// Reads the CQ once; true if a completion came.
    fn poll_once(&self) -> Result<bool> {
        let mut e = sys::fi_cq_entry::default();
        // SAFETY: one entry of the CQ's format.
        let n = unsafe { sys::fi_cq_read(self.cq, (&raw mut e).cast(), 1) };
        if n > 0 {
            return Ok(true);
        }
        if n == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: one error entry.
            unsafe { sys::fi_cq_readerr(self.cq, &mut err, 0) };
            return Err(completion("fi_read", err.err, err.prov_errno));
        }
        if n != -(sys::FI_EAGAIN as isize) {
            check("fi_cq_read", n as i64)?;
        }
        Ok(false)
    }

    /// Drives progress (spinning) until `stop` is set.
    pub fn serve_spin(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.poll_once() {
                tracing::warn!("{e}");
            }
        }
    }
}

impl Drop for RawEndpoint {
    fn drop(&mut self) {
        // SAFETY: closing what open() created, in reverse order.
        unsafe {
            for (mr, _) in self.mrs.drain(..) {
                sys::fi_close(&mut (*mr).fid);
            }
            for fid in [
                (!self.ep.is_null()).then(|| &raw mut (*self.ep).fid),
                (!self.av.is_null()).then(|| &raw mut (*self.av).fid),
                (!self.cq.is_null()).then(|| &raw mut (*self.cq).fid),
                (!self.domain.is_null()).then(|| &raw mut (*self.domain).fid),
                (!self.fabric.is_null()).then(|| &raw mut (*self.fabric).fid),
            ]
            .into_iter()
            .flatten()
            {
                sys::fi_close(fid);
            }
        }
    }
}

// SAFETY: the benchmark moves the endpoint to a serving thread; libfabric objects are
// FI_THREAD_SAFE.
unsafe impl Send for RawEndpoint {}
// SAFETY: shared references only reach what the `Send` reason above makes safe from any
// thread (FI_THREAD_SAFE objects, state behind a mutex).
unsafe impl Sync for RawEndpoint {}
