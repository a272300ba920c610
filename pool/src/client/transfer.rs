//! Carrying out the PM's tickets: RMA reads (posted at once where that cannot block),
//! copies or views straight from a same-host provider's memory, bytes that came with the
//! ticket, the stream relay (as consumer, and serving pieces as provider), and reporting
//! how each ended.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric::{Buffer, Peer};
use tokio::sync::mpsc;

use super::data::{self, CdoData};
use super::{ClientError, Result, Shared};
use crate::proto::{self, CdoId, Direct, HostMemory, Op, ProcessMemory, Source, TransferId};
use pool_core::client::{Driver, Fetch, Piece};

/// Starts carrying out a ticket: small copies from a same-host provider's memory are done
/// at the first poll, without a task; the others go on as a task of their own.
pub(super) fn start(shared: &Arc<Shared>, fetch: Fetch<Buffer>) {
    let mut work = Box::pin(carry_out(shared.clone(), fetch));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if work.as_mut().poll(&mut cx).is_pending() {
        tokio::spawn(work);
    }
}

/// Carries out a ticket and hands the outcome to the core, which keeps the bytes (or
/// completes the demand the ticket was issued for) and reports to the PM.
async fn carry_out(shared: Arc<Shared>, fetch: Fetch<Buffer>) {
    let Fetch {
        transfer,
        source,
        lent,
        ..
    } = fetch;
    let kind = source.kind();
    let got = get(&shared, transfer, source, lent).await.map_err(|e| {
        tracing::debug!("pool client: transfer {transfer} ({kind}): {e}");
        e.to_string()
    });
    // Fails only when the connection is gone, which the client hears of anyway.
    let _ = shared.with_core(|c| {
        c.fetched(transfer, got);
        Ok(())
    });
}

/// Gets a ticket's bytes, into `lent` (memory the application lent for this CDO) where it
/// fits and the transport allows; says whether they were taken straight from the
/// provider's memory, and how.
async fn get(
    shared: &Arc<Shared>,
    transfer: TransferId,
    source: Source,
    lent: Option<Buffer>,
) -> Result<(CdoData, Option<Direct>)> {
    let len = usize::try_from(source.len()).map_err(|_| {
        ClientError::Protocol(format!("a {}-byte CDO does not fit here", source.len()))
    })?;
    let mut lent = lent.filter(|b| b.len() >= len && len > 0);
    if let Source::Rma {
        region,
        via,
        memory: Some(m),
        ..
    } = &source
        && len > 0
        && shared.cross_memory.load(Ordering::Relaxed)
    {
        let (owner, m, via, addr) = (shared.clone(), **m, *via, region.addr);
        // Small copies, and views of huge pages of any size, take microseconds: not worth
        // a hop to another thread (a view of 4 KiB pages costs as much as a copy).
        let inline =
            len <= INLINE_COPY || (mappable(&m, lent.as_ref()) && fabric::cma::huge_shared_pages());
        let take = move || take_from_process(&owner, (via, m, addr, len), lent);
        let taken = if inline {
            take()
        } else {
            tokio::task::spawn_blocking(take)
                .await
                .map_err(|e| ClientError::Protocol(format!("copying the offer failed: {e}")))?
        }?;
        match taken {
            Taken::Here(data, how) => return Ok((data, Some(how))),
            Taken::NotHere(unused) => lent = unused,
        }
    }
    fetch(shared, transfer, source, len, lent)
        .await
        .map(|d| (d, None))
}

/// Gets a ticket's bytes over the fabric (into `lent` if given) or the control connection.
async fn fetch(
    shared: &Arc<Shared>,
    transfer: TransferId,
    source: Source,
    len: usize,
    lent: Option<Buffer>,
) -> Result<CdoData> {
    match source {
        Source::SameProcess { pool, app, cdo, .. } => {
            data::find(&(pool, app, cdo)).ok_or_else(|| {
                ClientError::Protocol(format!("the same-process offer of CDO {cdo} is gone"))
            })
        }
        s if s.is_empty() => Ok(CdoData::own(Buffer::new(0)?, 0)),
        // The core carries these out itself; the same, should one come here.
        Source::Inline { bytes } => Ok(<super::Io as Driver>::inline(bytes, lent)),
        Source::Rma {
            endpoint,
            region,
            via,
            ..
        } => {
            let is_lent = lent.is_some();
            // A known peer, a registered landing buffer to hand and a provider that takes
            // the read at once: posted here, without a hop to another thread.
            let inline = match lent {
                Some(_) => None,
                None => post_inline(shared, via, &endpoint, region, len)?,
            };
            let op = match inline {
                Some(op) => op,
                None => post_blocking(shared, (via, endpoint), region, len, lent).await?,
            };
            let region = tokio::time::timeout(shared.timeout, op)
                .await
                .map_err(|_| ClientError::Timeout(Op::Demand))??;
            Ok(if is_lent {
                CdoData::own(region.into_buffer(), len)
            } else {
                CdoData::landed(region, len, shared.landing.clone())
            })
        }
        Source::Stream { len } => stream(shared, transfer, len).await,
        Source::Gfs { file, .. } => {
            let Some(g) = shared.gfs.clone() else {
                return Err(ClientError::Gfs(format!(
                    "the provider wrote this CDO to the global file system ({}) and this app has no GFS directory: set MSTRO_TRANSPORT_GFS_DIR (the same directory as the provider's)",
                    file.path
                )));
            };
            tokio::task::spawn_blocking(move || g.read(&file, len, lent))
                .await
                .map_err(|e| ClientError::Gfs(format!("reading the file failed: {e}")))?
        }
    }
}

/// Posts the read of `region` from `endpoint` if that cannot block: the peer is in the
/// address vector, a landing buffer is kept, the provider takes the read now. `None`
/// otherwise (nothing posted).
///
/// # Errors
/// The endpoint `via` does not exist or speaks another provider; posting failed.
fn post_inline(
    shared: &Shared,
    via: u8,
    endpoint: &proto::FabricEndpoint,
    region: fabric::RemoteRegion,
    len: usize,
) -> Result<Option<fabric::Op<fabric::MemoryRegion>>> {
    let ep = reading_endpoint(shared, via, endpoint)?;
    let known = shared
        .peers()
        .get(&(via, endpoint.address.clone()))
        .copied();
    let (Some(peer), Some(dst)) = (known, shared.landing.take_kept(ep, len)) else {
        return Ok(None);
    };
    match ep.try_read(peer, dst, region)? {
        Ok(op) => Ok(Some(op)),
        Err(dst) => {
            shared.landing.give(dst);
            Ok(None)
        }
    }
}

/// This client's endpoint `via`, checked to speak the provider's `endpoint`'s provider.
fn reading_endpoint<'a>(
    shared: &'a Shared,
    via: u8,
    endpoint: &proto::FabricEndpoint,
) -> Result<&'a fabric::Endpoint> {
    let ep = endpoint_via(shared, via)?;
    if endpoint.provider != ep.info().provider {
        return Err(ClientError::Protocol(format!(
            "the provider offers over {}, this app over {}",
            endpoint.provider,
            ep.info().provider
        )));
    }
    Ok(ep)
}

/// Posts the read of `region` into `lent` (registered for it) or a landing buffer, on a
/// thread that may block: mapping and registering memory and setting up a connection to a
/// peer that does not answer (retried for up to a second) take time, and the runtime's
/// thread must go on hearing from the PM.
///
/// # Errors
/// As [`post_inline`], plus registration failures.
async fn post_blocking(
    shared: &Arc<Shared>,
    (via, endpoint): (u8, Arc<proto::FabricEndpoint>),
    region: fabric::RemoteRegion,
    len: usize,
    lent: Option<Buffer>,
) -> Result<fabric::Op<fabric::MemoryRegion>> {
    let owner = shared.clone();
    let post = move || -> Result<fabric::Op<fabric::MemoryRegion>> {
        let ep = reading_endpoint(&owner, via, &endpoint)?;
        let peer = peer(&owner, (via, ep), &endpoint.address)?;
        let dst = match lent {
            Some(b) => ep.register(b)?,
            None => owner.landing.take(ep, len)?,
        };
        Ok(ep.read(peer, dst, region)?)
    };
    tokio::task::spawn_blocking(post)
        .await
        .map_err(|e| ClientError::Protocol(format!("posting the read failed: {e}")))?
}

/// Copies up to this many bytes from a provider's memory on the runtime's thread.
pub(super) const INLINE_COPY: usize = 2 << 20;

/// Whether a same-host ticket will be mapped rather than copied: its offer is in a memory
/// file (the provider chose that where mapping pays, see [`Buffer::for_offer`]) and the
/// application lent no memory for it.
pub(super) fn mappable(m: &HostMemory, lent: Option<&Buffer>) -> bool {
    m.file.is_some() && lent.is_none()
}

/// This client's endpoint `via` of a ticket: 0 the first, `i` alternate `i - 1`.
pub(super) fn endpoint_via(shared: &Shared, via: u8) -> Result<&fabric::Endpoint> {
    match via {
        0 => shared.endpoint.as_ref(),
        i => shared.alternates.get(usize::from(i) - 1),
    }
    .ok_or_else(|| {
        ClientError::Protocol(format!(
            "an RMA ticket for endpoint {via}, which this client does not have"
        ))
    })
}

/// Takes a CDO straight from the provider's memory: maps its memory file
/// ([`fabric::cma::map`], no copy) where [`mappable`], else copies the bytes
/// ([`fabric::cma::read`]) into `lent` (if given) or a landing buffer of endpoint `via`.
/// [`Taken::NotHere`] when neither can be done here (the kernel refuses, or the process id
/// does not name the provider): the caller reads by RMA, into `lent` still.
///
/// # Errors
/// A landing buffer that cannot be had.
fn take_from_process(
    shared: &Arc<Shared>,
    (via, m, addr, len): CopySource,
    lent: Option<Buffer>,
) -> Result<Taken> {
    let pid = m.process.pid;
    if !genuine(shared, m.process) {
        return Ok(Taken::NotHere(lent));
    }
    let failed = |e: &fabric::cma::CmaError, instead: &str| {
        refused(shared, e);
        tracing::debug!("pool client: taking from process {pid} failed ({e}); {instead}");
    };
    if let Some(file) = m.file.filter(|_| mappable(&m, lent.as_ref())) {
        match fabric::cma::map(pid, file, len) {
            Ok(view) => return Ok(Taken::Here(CdoData::mapped(view), Direct::Mapped)),
            Err(e) => failed(&e, "copying"),
        }
    }
    let copy = |dst: &mut [u8]| match fabric::cma::read(pid, addr, &mut dst[..len]) {
        Ok(()) => true,
        Err(e) => {
            failed(&e, "reading by RMA");
            false
        }
    };
    match lent {
        Some(mut b) => Ok(if copy(b.as_mut_slice()) {
            Taken::Here(CdoData::own(b, len), Direct::Copied)
        } else {
            Taken::NotHere(Some(b))
        }),
        None => {
            let mut dst = shared.landing.take(endpoint_via(shared, via)?, len)?;
            if copy(dst.as_mut_slice()) {
                let data = CdoData::landed(dst, len, shared.landing.clone());
                Ok(Taken::Here(data, Direct::Copied))
            } else {
                shared.landing.give(dst);
                Ok(Taken::NotHere(None))
            }
        }
    }
}

/// What [`take_from_process`] did.
enum Taken {
    /// The bytes, and how they were taken.
    Here(CdoData, Direct),
    /// Nothing: the memory lent for them, unused.
    NotHere(Option<Buffer>),
}

/// Whether the process `m` names holds its token (checked once per announcement), and the
/// client still copies from other processes' memory.
pub(super) fn genuine(shared: &Shared, m: ProcessMemory) -> bool {
    let mut verified = shared
        .verified
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ok = *verified.entry(m).or_insert_with(|| {
        match fabric::cma::holds(m.pid, m.token_addr, m.token) {
            Ok(true) => true,
            Ok(false) => {
                tracing::debug!(
                    "pool client: process {} is not the provider that announced it; reading by RMA",
                    m.pid
                );
                false
            }
            Err(e) => {
                refused(shared, &e);
                tracing::debug!("pool client: not copying from process {}: {e}", m.pid);
                false
            }
        }
    });
    ok && shared.cross_memory.load(Ordering::Relaxed)
}

/// Stops copying from other processes' memory for good when the kernel refuses it (said
/// once).
pub(super) fn refused(shared: &Shared, e: &fabric::cma::CmaError) {
    if matches!(e, fabric::cma::CmaError::Denied { .. })
        && shared.cross_memory.swap(false, Ordering::Relaxed)
    {
        tracing::info!("pool client: {e}");
    }
}

/// `address` in the address vector of this client's endpoint `via` (inserted once).
fn peer(
    shared: &Shared,
    (via, ep): (u8, &fabric::Endpoint),
    address: &fabric::Address,
) -> Result<Peer> {
    let mut peers = shared.peers();
    let key = (via, address.clone());
    if let Some(p) = peers.get(&key) {
        return Ok(*p);
    }
    let p = ep.insert_peer(address)?;
    peers.insert(key, p);
    Ok(p)
}

/// Removes a stream's route when the fetch ends, however it ends.
struct Route<'a>(&'a Shared, TransferId);

impl Drop for Route<'_> {
    fn drop(&mut self) {
        self.0.core().unroute(self.1);
    }
}

/// Fetches a stream transfer: the core asks for the pieces (a window of them at a time)
/// and checks each; here they land in the CDO's buffer.
async fn stream(shared: &Arc<Shared>, transfer: TransferId, len: u64) -> Result<CdoData> {
    let size = usize::try_from(len)
        .map_err(|_| ClientError::Protocol(format!("a {len}-byte CDO does not fit here")))?;
    let mut buf = Buffer::new(size)?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Piece>();
    shared.with_core(|c| c.stream(std::time::Instant::now(), transfer, len, tx))?;
    let _route = Route(shared, transfer);
    let mut got = 0u64;
    while got < len {
        // The core ends the stream with an error piece (refusal, bytes not asked for, no
        // progress in time); a closed connection drops the route.
        let (offset, bytes) = rx.recv().await.ok_or(ClientError::Closed)??;
        // The core accepted exactly this range of the transfer, once.
        let at = offset as usize;
        buf.as_mut_slice()[at..at + bytes.len()].copy_from_slice(&bytes);
        got += bytes.len() as u64;
    }
    Ok(CdoData::own(buf, size))
}

/// Answers the PM's request for a piece of one of this app's offers (a range of it the
/// core checked: [`pool_core::client::Event::Serve`]).
pub(super) fn serve(shared: &Arc<Shared>, transfer: TransferId, cdo: CdoId, offset: u64, len: u64) {
    let Some(offer) = data::find(&(shared.pool, shared.app, cdo)) else {
        tracing::warn!("pool client: asked to serve CDO {cdo}, which was withdrawn meanwhile");
        return;
    };
    // Within the offer: the core checked the range against its length.
    let (at, n) = (offset as usize, len as usize);
    let Some(bytes) = offer.as_slice().get(at..at + n) else {
        return;
    };
    let _ = shared.with_core(|c| c.served(transfer, offset, bytes.to_vec()));
}

/// Writes offered `cdo` to a file under this app's GFS directory (on a thread that may
/// block) and tells the PM where, or why not (see [`pool_core::client::Event::Spill`]).
pub(super) fn spill(shared: &Arc<Shared>, cdo: CdoId) {
    let offer = data::find(&(shared.pool, shared.app, cdo));
    let gfs = shared.gfs.clone();
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let written = match (offer, gfs) {
            (Some(offer), Some(g)) => {
                tokio::task::spawn_blocking(move || g.write(cdo, offer.as_slice()))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            }
            _ => Err("not offered here with a GFS directory".to_string()),
        };
        let _ = shared.with_core(|c| {
            c.spilled(cdo, written);
            Ok(())
        });
    });
}

/// Where a same-host copy comes from: the consumer endpoint a fallback would read with,
/// the provider's process (and the offer's memory file), the address and the length.
type CopySource = (u8, HostMemory, u64, usize);
