//! Stream transfers over the control connection, for apps that share no fabric with the
//! provider: the consumer's core asks for the pieces (a window at a time) and checks
//! each; the provider's client serves the pieces the PM asks for ([`serve`]).

use crate::CallError;
use std::sync::Arc;

use fabric::Buffer;
use pool_core::client::Piece;
use tokio::sync::mpsc;

use super::{Executor, Got, Transfer};
use crate::client::data::{self, CdoData};
use crate::client::{ClientError, Result, Shared};
use crate::proto::{CdoId, TransferId};

/// See the module's documentation.
pub(super) struct Stream;

impl Executor for Stream {
    /// The length is all a stream ticket names.
    type Ticket = ();

    async fn fetch(
        shared: &Arc<Shared>,
        transfer: Transfer,
        (): (),
        len: usize,
        _: Option<Buffer>,
    ) -> Result<Got> {
        Ok((stream(shared, transfer, len).await?, None))
    }
}

/// Removes a stream's route (of a shard's transfer) when the fetch ends, however it
/// ends.
struct Route<'a>(&'a Shared, Transfer);

impl Drop for Route<'_> {
    fn drop(&mut self) {
        self.0.core().unroute(self.1);
    }
}

/// Fetches a stream transfer: the core asks for the pieces (a window of them at a time)
/// and checks each; here they land in the CDO's buffer.
async fn stream(shared: &Arc<Shared>, (shard, transfer): Transfer, size: usize) -> Result<CdoData> {
    let len = size as u64;
    let mut buf = Buffer::new(size)?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Piece>();
    let now = std::time::Instant::now();
    shared.with_core(|c| c.stream(now, (shard, transfer), len, tx))?;
    let _route = Route(shared, (shard, transfer));
    let mut got = 0u64;
    while got < len {
        // The core ends the stream with an error piece (refusal, bytes not asked for, no
        // progress in time); a closed connection drops the route.
        let (offset, bytes) = rx
            .recv()
            .await
            .ok_or(ClientError::Call(CallError::Closed))??;
        // The core accepted exactly this range of the transfer, once.
        let at = offset as usize;
        buf.as_mut_slice()[at..at + bytes.len()].copy_from_slice(&bytes);
        got += bytes.len() as u64;
    }
    Ok(CdoData::own(buf, size))
}

/// Answers the request of shard `shard`'s manager for a piece of one of this app's offers
/// (a range of it the core checked: [`pool_core::client::Event::Serve`]).
pub(crate) fn serve(
    shared: &Arc<Shared>,
    shard: usize,
    transfer: TransferId,
    cdo: CdoId,
    offset: u64,
    len: u64,
) {
    let Some(offer) = data::find(&(shared.pool(), shared.app, cdo)) else {
        tracing::warn!("pool client: asked to serve CDO {cdo}, which was withdrawn meanwhile");
        return;
    };
    // Within the offer: the core checked the range against its length.
    let (at, n) = (offset as usize, len as usize);
    let Some(bytes) = offer.as_slice().get(at..at + n) else {
        return;
    };
    let _ = shared.with_core(|c| c.served((shard, transfer), offset, bytes.to_vec()));
}
