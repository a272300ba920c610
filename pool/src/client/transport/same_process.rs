//! The same-process hand-over: a consumer in the provider's process takes the offered
//! buffer itself from the process's table of offers ([`super::super::data`]), no copy.

use crate::CallError;
use std::sync::Arc;

use fabric::Buffer;

use super::{Executor, Got};
use crate::client::data;
use crate::client::{ClientError, Result, Shared};
use crate::proto::{AppId, CdoId, TransferId};

/// See the module's documentation.
pub(super) struct SameProcess;

impl Executor for SameProcess {
    /// The offer's PM instance, providing app and CDO.
    type Ticket = (u64, AppId, CdoId);

    async fn fetch(
        _: &Arc<Shared>,
        _: TransferId,
        (pool, app, cdo): Self::Ticket,
        _: usize,
        _: Option<Buffer>,
    ) -> Result<Got> {
        let data = data::find(&(pool, app, cdo)).ok_or_else(|| {
            ClientError::Call(CallError::Protocol(format!(
                "the same-process offer of CDO {cdo} is gone"
            )))
        })?;
        Ok((data, None))
    }
}
