//! How a CDO's bytes move between a provider and a consumer: one executor per way a
//! ticket can name ([`Source`]'s variants), each in its own file with the provider's side
//! of it. Which way a transfer goes is decided once, by the pool manager's plan
//! (`pool_core::manager::plan`), from what the offer made available (the client core's
//! [`pool_core::client::ClientCore::transport`] and [`pool_core::client::ClientCore::offer`]);
//! here [`get`] only matches the ticket's variant to its executor.
//!
//! - [`same_process`]: a consumer in the provider's process takes the offered buffer itself.
//! - [`inline`]: the bytes came with the ticket (carried out by the core).
//! - [`rma`]: an RMA read over the fabric, after a copy or a view straight from a
//!   same-host provider's memory ([`host`]) where the ticket names it; batched for a burst
//!   of tickets ([`burst`]); large copies in pieces shared by two threads ([`crew`]). The
//!   provider registers its offers with its endpoints.
//! - [`stream`]: pieces over the control connection, served by the provider's client.
//! - [`gfs`]: a file on the global file system, written by the provider at its offer or
//!   at the PM's request, handed over to a PM that keeps files at withdraw.
//!
//! Adding a transport: see "Adding a transport" in docs/architecture.md.

pub(super) mod burst;
pub(crate) mod crew;
pub(super) mod gfs;
pub(crate) mod host;
pub(super) mod inline;
pub(super) mod rma;
mod same_process;
pub(super) mod stream;

use crate::CallError;
use std::sync::Arc;

use fabric::Buffer;
use pool_core::client::Fetch;

use super::data::CdoData;
use super::{ClientError, Result, Shared};
use crate::proto::{Direct, Source, TransferId};

/// A transfer as a client knows it: the shard whose manager issued its ticket, and its
/// id there (each manager numbers its own).
pub(super) type Transfer = (usize, TransferId);

/// How a fetch is made, which decides who copies a same-host provider's memory for it
/// (see [`crew`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum Pace {
    /// A ticket carried out as it comes: the crew takes copies of [`crew::OFFLOAD_MIN`]
    /// bytes and more (a smaller one costs more in hops than the second thread saves).
    Alone,
    /// One of a batch whose copies are all started before any is waited for
    /// ([`AsyncClient::fetch_many`](crate::client::AsyncClient::fetch_many)): the crew
    /// takes them from [`crew::HANDOFF_MIN`] bytes, so that two threads copy the batch.
    Batch,
}

impl Pace {
    /// The least copy the crew makes at this pace.
    fn offload(self) -> usize {
        match self {
            Pace::Alone => crew::OFFLOAD_MIN,
            Pace::Batch => crew::HANDOFF_MIN,
        }
    }
}

/// A ticket's bytes here, and whether (and how) they were taken straight from the
/// provider's memory.
pub(super) type Got = (CdoData, Option<Direct>);

/// The consumer's side of one transport: gets the bytes of a ticket that names it.
pub(super) trait Executor {
    /// What the ticket names: its [`Source`] variant's fields.
    type Ticket;

    /// Gets the `len` bytes `ticket` names for transfer `transfer` (the shard whose
    /// manager issued it and its id there), into `lent` (memory the application lent for
    /// this CDO, at least `len` bytes) where the transport lands bytes where it is told.
    ///
    /// # Errors
    /// The transport's failure: the core reports it to the PM, which tickets another
    /// provider or fails the demand.
    fn fetch(
        shared: &Arc<Shared>,
        transfer: Transfer,
        ticket: Self::Ticket,
        len: usize,
        lent: Option<Buffer>,
    ) -> impl Future<Output = Result<Got>> + Send;
}

/// Starts carrying out a ticket: an RMA read that can be posted at once is reported by
/// the thread that reads its completion ([`rma::read_then`]); small copies from a
/// same-host provider's memory are done at the first poll, without a task; the others go
/// on as a task of their own.
pub(super) fn start(shared: &Arc<Shared>, fetch: Fetch<Buffer>) {
    let Some(fetch) = rma::read_then(shared, fetch) else {
        return;
    };
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
        shard,
        ..
    } = fetch;
    let kind = source.kind();
    let got = get(&shared, (shard, transfer), source, (lent, Pace::Alone))
        .await
        .map_err(|e| {
            tracing::debug!("pool client: transfer {transfer} of shard {shard} ({kind}): {e}");
            e.to_string()
        });
    // Fails only when the connection is gone, which the client hears of anyway.
    let _ = shared.with_core(|c| {
        c.fetched(shard, transfer, got);
        Ok(())
    });
}

/// The bytes of `source` when this thread can have them at once: a copy or a view of a
/// same-host provider's memory that [`host::take`] makes on the caller's thread. `None`
/// otherwise ([`get`] them then: a copy the crew makes, a read by RMA, a failure to
/// report). A batch's copies of small leases go this way one after the other, where
/// [`get`]'s futures, started together, cost each an allocation for nothing.
pub(super) fn get_now(shared: &Arc<Shared>, source: &Source, pace: Pace) -> Option<Got> {
    let Source::Rma {
        region,
        via,
        memory: Some(m),
        ..
    } = source
    else {
        return None;
    };
    let len = usize::try_from(source.len()).ok()?;
    // (`taker` says nobody where this client no longer copies from other processes.)
    if !matches!(
        host::taker(shared, m, len, (None, pace)),
        host::Taker::Caller
    ) {
        return None;
    }
    match host::take_from_process(shared, (*via, **m, region.addr, len), None) {
        Ok(host::Taken::Here(data, how)) => Some((data, Some(how))),
        _ => None,
    }
}

/// Gets a ticket's bytes with the executor of its transport, into `lent` (memory the
/// application lent for this CDO) where it fits and the transport allows, at `pace`.
pub(super) async fn get(
    shared: &Arc<Shared>,
    transfer: Transfer,
    source: Source,
    (lent, pace): (Option<Buffer>, Pace),
) -> Result<Got> {
    let len = usize::try_from(source.len()).map_err(|_| {
        ClientError::Call(CallError::Protocol(format!(
            "a {}-byte CDO does not fit here",
            source.len()
        )))
    })?;
    let lent = lent.filter(|b| b.len() >= len && len > 0);
    match source {
        Source::SameProcess { pool, app, cdo, .. } => {
            same_process::SameProcess::fetch(shared, transfer, (pool, app, cdo), len, lent).await
        }
        s if s.is_empty() => Ok((CdoData::own(Buffer::new(0)?, 0), None)),
        Source::Inline { bytes } => inline::Inline::fetch(shared, transfer, bytes, len, lent).await,
        Source::Rma {
            endpoint,
            region,
            via,
            memory,
        } => {
            let ticket = rma::Ticket {
                endpoint,
                region,
                via,
                memory,
                pace,
            };
            rma::Rma::fetch(shared, transfer, ticket, len, lent).await
        }
        Source::Stream { .. } => stream::Stream::fetch(shared, transfer, (), len, lent).await,
        Source::Gfs { file, .. } => gfs::Gfs::fetch(shared, transfer, file, len, lent).await,
    }
}
