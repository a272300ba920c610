//! The same-process hand-over: a consumer in the provider's process takes the offered
//! buffer itself from the process's table of offers ([`super::super::data`]), no copy.

use crate::CallError;
use std::sync::Arc;

use fabric::Buffer;

use super::{Executor, Got, Transfer};
use crate::client::data;
use crate::client::{ClientError, Result, Shared};
use crate::proto::{AppId, CdoId};

/// See the module's documentation.
pub(super) struct SameProcess;

impl Executor for SameProcess {
    /// The offer's PM instance, providing app and CDO.
    type Ticket = (u64, AppId, CdoId);

    async fn fetch(
        shared: &Arc<Shared>,
        _: Transfer,
        (pool, app, cdo): Self::Ticket,
        _: usize,
        _: Option<Buffer>,
    ) -> Result<Got> {
        // Offers are filed under the pool's shard 0 instance, whichever shard's manager
        // issued the ticket.
        let pool = if shared.core().is_ours(pool) {
            shared.pool()
        } else {
            pool
        };
        let data = data::find(&(pool, app, cdo)).ok_or_else(|| {
            ClientError::Call(CallError::Protocol(format!(
                "the same-process offer of CDO {cdo} is gone"
            )))
        })?;
        Ok((data, None))
    }
}
