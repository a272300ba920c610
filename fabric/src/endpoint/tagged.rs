//! Small tagged messages between endpoints (send, receive).

use super::rma::downcast_region;
use super::*;
use crate::access::Local;

impl Endpoint {
    /// Sends a small tagged message (copied).
    ///
    /// # Errors
    /// Allocation, registration or posting errors.
    pub fn send(&self, peer: Peer, tag: u64, data: &[u8]) -> Result<Op<()>> {
        let region = self.register::<Local>(Buffer::from_slice(data)?)?;
        let (ptr, desc, len) = (region.buf.as_ptr(), region.desc, data.len());
        let ep = self.core.ep;
        let state = self.post("fi_tsend", len, Some(Box::new(region)), |ctx| {
            // SAFETY: the message buffer is kept alive by the operation state.
            unsafe { sys::fi_tsend(ep, ptr.cast(), len, desc, peer.0, tag, ctx) }
        })?;
        Ok(Op::new(state, |_, _, _| Ok(()), self.progress_handle()))
    }

    /// Receives one tagged message of at most `max_len` bytes matching `tag` from anyone.
    /// The deadline is the endpoint's for `max_len` bytes; wait longer by posting again.
    ///
    /// # Errors
    /// Allocation, registration or posting errors; the [`Op`] fails on truncation.
    pub fn recv(&self, tag: u64, max_len: usize) -> Result<Op<Vec<u8>>> {
        let region = self.register::<Local>(Buffer::new(max_len)?)?;
        let (ptr, desc) = (region.buf.as_ptr(), region.desc);
        let ep = self.core.ep;
        let state = self.post("fi_trecv", max_len, Some(Box::new(region)), |ctx| {
            // SAFETY: the receive buffer is kept alive by the operation state.
            unsafe {
                sys::fi_trecv(
                    ep,
                    ptr.cast(),
                    max_len,
                    desc,
                    sys::FI_ADDR_UNSPEC,
                    tag,
                    0,
                    ctx,
                )
            }
        })?;
        Ok(Op::new(
            state,
            |n, _, keep| {
                let region = downcast_region::<Local>(keep)?;
                Ok(region.as_slice()[..n.min(region.len())].to_vec())
            },
            self.progress_handle(),
        ))
    }
}
