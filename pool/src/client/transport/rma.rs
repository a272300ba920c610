//! RMA over the fabric: the consumer reads the provider's registered offer with its
//! endpoint the ticket names (`via`), into a landing buffer or memory the application
//! lent; before that, a same-host provider's memory named in the ticket is copied or
//! mapped straight ([`super::host`]). The provider's side: its offers registered with
//! every endpoint it has, remotely readable only ([`readable`]).

use crate::CallError;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric::access::RemoteRead;
use fabric::{Buffer, MemoryRegion, Peer, RemoteRegion};

use super::host::{self, Taken};
use super::{Executor, Got, Pace, Transfer};
use crate::client::data::{self, CdoData};
use crate::client::{ClientError, Result, Shared};
use crate::proto::{self, HostMemory, Source};
use pool_core::client::Fetch;

/// What an RMA ticket names (see [`proto::Source::Rma`]).
pub(super) struct Ticket {
    /// The provider's endpoint.
    pub(super) endpoint: Arc<proto::FabricEndpoint>,
    /// Where its bytes are.
    pub(super) region: RemoteRegion,
    /// This client's endpoint to read with: 0 the first, `i` alternate `i - 1`.
    pub(super) via: u8,
    /// The provider's memory on this host, when it shares the host.
    pub(super) memory: Option<Box<HostMemory>>,
    /// How the fetch is made: which copies of that memory the copy crew makes.
    pub(super) pace: Pace,
}

/// See the module's documentation.
pub(super) struct Rma;

impl Executor for Rma {
    type Ticket = Ticket;

    async fn fetch(
        shared: &Arc<Shared>,
        _: Transfer,
        ticket: Ticket,
        len: usize,
        mut lent: Option<Buffer>,
    ) -> Result<Got> {
        let Ticket {
            endpoint,
            region,
            via,
            memory,
            pace,
        } = ticket;
        let copy_only = memory.as_ref().is_some_and(|m| m.copy_only);
        if let Some(m) = memory
            && shared.cross_memory.load(Ordering::Relaxed)
        {
            match host::take(shared, (via, *m, region.addr, len), (lent, pace)).await? {
                Taken::Here(data, how) => return Ok((data, Some(how))),
                Taken::NotHere(unused) => lent = unused,
            }
        }
        // Not registered with the fabric: nothing to read by RMA. The PM, told, plans no
        // more copies for this app and sends the bytes another way.
        if copy_only {
            return Err(ClientError::Call(CallError::Protocol(
                "the offer is not registered with the fabric and this process cannot copy it out of the provider's memory".into(),
            )));
        }
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
        // The endpoint fails the read past its deadline (the client's timeout and the
        // time the bytes take at the slowest rate still alive: `join`).
        let region = op.await?;
        let data = if is_lent {
            CdoData::own(region.into_buffer(), len)
        } else {
            CdoData::landed(region, len, shared.landing.clone())
        };
        Ok((data, None))
    }
}

/// The largest read a waiting thread polls through (see [`read_then`]): 256 KiB, about
/// 100 µs across this project's two namespaced nodes. Waking the thread for a read's
/// report costs about 25 µs, a third of a 64 KiB demand there; a longer read loses a
/// smaller share to it, and a thread polling through it takes the CPU the transfer's own
/// threads need (1 MiB demands across the two nodes, p50: 331-563 µs polling, 414-668 µs
/// not; docs/benchmarks-journal.md, "An RMA read reported by the thread that completes
/// it").
pub(crate) const SHORT_READ: usize = 256 << 10;

/// Carries out an RMA ticket for another host's offer (or one this client may not copy)
/// without a task: the read is posted here and the thread that reads its completion (the
/// endpoint's progress thread) hands the bytes to the core ([`fabric::Op::then`]): one
/// hand-over, to the thread waiting for them, where a task of the client's runtime made
/// two. A thread waiting for a read of at most [`SHORT_READ`] polls until it is reported
/// (`Shared::short_reads`, see `Client::block_on`), so the report wakes nobody. The ticket
/// back, untouched, when that cannot be done without blocking (a peer not yet in the
/// address vector, no landing region kept, memory lent, the provider busy) or is not a
/// read (a copy to try first, an offer not registered with the fabric): the task's way
/// ([`Rma`]) then. `None` once taken.
pub(super) fn read_then(shared: &Arc<Shared>, fetch: Fetch<Buffer>) -> Option<Fetch<Buffer>> {
    let Source::Rma {
        endpoint,
        region,
        via,
        memory,
    } = &fetch.source
    else {
        return Some(fetch);
    };
    // A same-host provider's memory to copy first, or an offer only copies can reach.
    let host_first = memory
        .as_ref()
        .is_some_and(|m| m.copy_only || shared.cross_memory.load(Ordering::Relaxed));
    let len = usize::try_from(fetch.source.len()).unwrap_or(0);
    if host_first || fetch.lent.is_some() || len == 0 {
        return Some(fetch);
    }
    let Ok(Some(op)) = post_inline(shared, *via, endpoint, *region, len) else {
        return Some(fetch);
    };
    let (owner, shard, transfer) = (Arc::downgrade(shared), fetch.shard, fetch.transfer);
    // Counted before `then`, which reports an operation already over at once.
    let short = len <= SHORT_READ;
    if short {
        shared.short_reads.fetch_add(1, Ordering::AcqRel);
    }
    op.then(move |read| {
        // The client is gone: so is whoever wanted the bytes.
        let Some(shared) = owner.upgrade() else {
            return;
        };
        // Uncounted after the report (a waiting thread polls until then), or when it
        // panicked.
        let _counted = short.then(|| ShortRead(&shared.short_reads));
        let got = match read {
            Ok(region) => Ok((CdoData::landed(region, len, shared.landing.clone()), None)),
            Err(e) => {
                tracing::debug!("pool client: transfer {transfer} of shard {shard} (rma): {e}");
                Err(ClientError::from(e).to_string())
            }
        };
        // The report may start tasks (the next ticket's, say): the client's runtime's.
        let _in_runtime = shared.runtime.enter();
        // Fails only when the connection is gone, which the client hears of anyway.
        let _ = shared.with_core(|c| {
            c.fetched(shard, transfer, got);
            Ok(())
        });
    });
    None
}

/// A short read counted in `Shared::short_reads` until dropped.
struct ShortRead<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for ShortRead<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Makes `data` readable by consumers over the fabric: registered, remotely readable
/// only, with the app's first endpoint and each alternate (the offer's region and the
/// alternates' regions); or kept as plain memory, not registered, without an endpoint or
/// when the offer carries its bytes to the PM (`carried`): consumers get them with their
/// tickets, copy them on this host or have them served by stream.
///
/// # Errors
/// Registration failures.
pub(crate) fn readable(shared: &Shared, data: Buffer, carried: bool) -> Result<data::Readable> {
    let Some(ep) = shared.endpoint.as_ref().filter(|_| !carried) else {
        return Ok(data::Offered::plain(data));
    };
    let r: MemoryRegion<RemoteRead> = ep.register(data)?;
    let remote = r.remote();
    let mut extras = Vec::new();
    for alt in &shared.alternates {
        // SAFETY: `r`'s memory stays mapped and unwritten while offered; the extra
        // registrations are dropped before `r` (`data::Registration`).
        let view = unsafe { Buffer::borrowed(r.as_slice().as_ptr().cast_mut(), r.len()) };
        extras.push(alt.register::<RemoteRead>(view)?);
    }
    let regions = extras.iter().map(MemoryRegion::remote).collect();
    Ok(data::Readable {
        offered: data::Offered::Registered(data::Registration::new(r, extras)),
        region: remote,
        alternates: regions,
        registered: true,
    })
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
    region: RemoteRegion,
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
        return Err(ClientError::Call(CallError::Protocol(format!(
            "the provider offers over {}, this app over {}",
            endpoint.provider,
            ep.info().provider
        ))));
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
    tokio::task::spawn_blocking(post).await.map_err(|e| {
        ClientError::Call(CallError::Protocol(format!("posting the read failed: {e}")))
    })?
}

/// This client's endpoint `via` of a ticket: 0 the first, `i` alternate `i - 1`.
pub(super) fn endpoint_via(shared: &Shared, via: u8) -> Result<&fabric::Endpoint> {
    match via {
        0 => shared.endpoint.as_ref(),
        i => shared.alternates.get(usize::from(i) - 1),
    }
    .ok_or_else(|| {
        ClientError::Call(CallError::Protocol(format!(
            "an RMA ticket for endpoint {via}, which this client does not have"
        )))
    })
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
