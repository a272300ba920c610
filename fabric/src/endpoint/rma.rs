//! Reads and writes of remote regions, and posting operations with their deadlines.

use super::*;
use crate::access::{Local, NoRemoteWrites};

impl Endpoint {
    /// Posts `post` for an operation on `len` bytes, keeping `keep` alive, retrying while
    /// the provider's queues are full.
    pub(super) fn post(
        &self,
        what: &'static str,
        len: usize,
        keep: Option<Box<dyn Any + Send>>,
        post: impl Fn(*mut c_void) -> isize,
    ) -> Result<Arc<OpState>> {
        match self.post_with(true, what, len, keep, post)? {
            Posted::Op(state) => Ok(state),
            Posted::Busy(_) => Err(FabricError::Unreachable {
                what,
                waited: Duration::ZERO,
            }),
        }
    }

    /// As [`Endpoint::post`]; unless `patient`, a provider that cannot take the operation
    /// now (`FI_EAGAIN`) gives back what the operation was to keep instead of retrying.
    fn post_with(
        &self,
        patient: bool,
        what: &'static str,
        len: usize,
        keep: Option<Box<dyn Any + Send>>,
        post: impl Fn(*mut c_void) -> isize,
    ) -> Result<Posted> {
        let started = Instant::now();
        let state = OpState::new(what, len, self.timeouts.deadline(len), keep);
        let ctx = state.context();
        self.core.ops().insert(ctx as usize, Arc::clone(&state));
        loop {
            let rc = post(ctx);
            if rc == 0 {
                // A polling progress thread may be backing off: wake it for the new work.
                if self.core.mode == WaitMode::Polling
                    && let Some(t) = &self.progress
                {
                    t.thread().unpark();
                }
                return Ok(Posted::Op(state));
            }
            if rc != -(sys::FI_EAGAIN as isize) {
                self.core.ops().remove(&(ctx as usize));
                check(what, rc as i64)?;
            }
            if !patient {
                self.core.ops().remove(&(ctx as usize));
                return Ok(Posted::Busy(state.take_keep()));
            }
            // Connection-based providers answer EAGAIN while they cannot reach the peer
            // (refused or vanished); a full queue drains as our other operations finish.
            let alone = self.core.ops().len() == 1;
            if Instant::now() >= state.deadline
                || (alone && started.elapsed() >= self.timeouts.connect)
            {
                self.core.ops().remove(&(ctx as usize));
                return Err(FabricError::Unreachable {
                    what,
                    waited: started.elapsed(),
                });
            }
            // Queues full: the progress thread is draining them.
            std::thread::yield_now();
        }
    }

    /// Reads `remote` (from `peer`) into the start of `dst`. The region comes back with the
    /// completion.
    ///
    /// # Errors
    /// [`FabricError::InvalidArgument`] if `dst` is smaller than `remote` or registered with
    /// another endpoint's domain; posting errors.
    /// The [`Op`] fails if the peer is gone, the key is wrong, or the deadline passes.
    pub fn read(
        &self,
        peer: Peer,
        dst: MemoryRegion<Local>,
        remote: RemoteRegion,
    ) -> Result<Op<MemoryRegion<Local>>> {
        match self.rma(true, false, peer, dst, remote)? {
            Ok(op) => Ok(op),
            Err(_) => Err(FabricError::Unreachable {
                what: "fi_read",
                waited: Duration::ZERO,
            }),
        }
    }

    /// As [`Endpoint::read`], but never waits for the provider: `Ok(Err(dst))` gives the
    /// region back when the provider cannot take the read at once (its queue is full, or a
    /// connection to the peer is still being set up); then post it with
    /// [`Endpoint::read`], off any thread that must not block.
    ///
    /// # Errors
    /// As [`Endpoint::read`].
    pub fn try_read(
        &self,
        peer: Peer,
        dst: MemoryRegion<Local>,
        remote: RemoteRegion,
    ) -> Result<std::result::Result<Op<MemoryRegion<Local>>, MemoryRegion<Local>>> {
        self.rma(false, false, peer, dst, remote)
    }

    /// Writes the first `remote.len` bytes of `src` into `remote` at `peer`. The write asks
    /// for `FI_DELIVERY_COMPLETE`: its completion means the provider delivered the data, not
    /// merely sent it. (Measured: the `net` provider of libfabric 1.17 may report it a moment
    /// before the target's CPU sees the bytes; the pool moves data by reads, where the reader
    /// owns the completion.)
    ///
    /// # Errors
    /// As [`Endpoint::read`].
    pub fn write<A: NoRemoteWrites>(
        &self,
        peer: Peer,
        src: MemoryRegion<A>,
        remote: RemoteRegion,
    ) -> Result<Op<MemoryRegion<A>>> {
        match self.rma(true, true, peer, src, remote)? {
            Ok(op) => Ok(op),
            Err(_) => Err(FabricError::Unreachable {
                what: "fi_write",
                waited: Duration::ZERO,
            }),
        }
    }

    /// Posts an RMA read into (or, with `write`, a delivery-complete write from) the start
    /// of `local`, keeping the region until the completion; unless `patient`, gives the
    /// region back when the provider cannot take the operation at once.
    fn rma<A: Access>(
        &self,
        patient: bool,
        write: bool,
        peer: Peer,
        local: MemoryRegion<A>,
        remote: RemoteRegion,
    ) -> Result<std::result::Result<Op<MemoryRegion<A>>, MemoryRegion<A>>> {
        if !local.of_domain(&self.core.shared) {
            return Err(FabricError::InvalidArgument(
                "the local region was registered with another endpoint's domain: register it \
                 with the endpoint that reads or writes"
                    .into(),
            ));
        }
        let len = usize::try_from(remote.len).unwrap_or(usize::MAX);
        if len > local.len() {
            return Err(FabricError::InvalidArgument(format!(
                "remote region of {len} bytes does not fit the {}-byte local region",
                local.len()
            )));
        }
        let (ptr, desc) = (local.buf.as_ptr(), local.desc);
        let ep = self.core.ep;
        let what = if write { "fi_write" } else { "fi_read" };
        let posted = self.post_with(patient, what, len, Some(Box::new(local)), |ctx| {
            let iov = libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len,
            };
            let rma = sys::fi_rma_iov {
                addr: remote.addr,
                len,
                key: remote.key,
            };
            let mut desc = desc;
            let msg = sys::fi_msg_rma {
                msg_iov: (&raw const iov).cast(),
                desc: &mut desc,
                iov_count: 1,
                addr: peer.0,
                rma_iov: &rma,
                rma_iov_count: 1,
                context: ctx,
                data: 0,
            };
            // SAFETY: the message describes the local region, kept alive by the operation
            // state; libfabric copies the message itself during the call.
            unsafe {
                if write {
                    sys::fi_writemsg(ep, &msg, u64::from(sys::FI_DELIVERY_COMPLETE))
                } else {
                    sys::fi_readmsg(ep, &msg, 0)
                }
            }
        })?;
        Ok(match posted {
            Posted::Op(state) => Ok(Op::new(state, take_region, self.progress_handle())),
            Posted::Busy(keep) => Err(downcast_region(keep)?),
        })
    }
}

/// What posting did: the operation is under way, or (impatient posts) the provider could
/// not take it and the buffers come back.
pub(super) enum Posted {
    Op(Arc<OpState>),
    Busy(Option<Box<dyn Any + Send>>),
}

pub(super) fn downcast_region<A: Access>(
    keep: Option<Box<dyn Any + Send>>,
) -> Result<MemoryRegion<A>> {
    keep.and_then(|k| k.downcast::<MemoryRegion<A>>().ok())
        .map(|b| *b)
        .ok_or_else(|| FabricError::InvalidArgument("operation lost its buffer".into()))
}

pub(super) fn take_region<A: Access>(
    _: usize,
    _: u64,
    keep: Option<Box<dyn Any + Send>>,
) -> Result<MemoryRegion<A>> {
    downcast_region(keep)
}
