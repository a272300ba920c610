//! Bytes that came with their ticket (small CDOs, up to the offer's inline limit): the
//! client core carries such tickets out itself ([`pool_core::client::Driver::inline`]),
//! copying them into memory the application lent when it fits.

use std::sync::Arc;

use fabric::Buffer;

use super::{Executor, Got, Transfer};
use crate::client::data::CdoData;
use crate::client::{Result, Shared};
use crate::proto::InlineBytes;

/// See the module's documentation.
pub(super) struct Inline;

/// The data of a CDO whose `bytes` came with its ticket: in `lent` when the application
/// lent memory that fits them, else as they came.
pub(crate) fn land(bytes: InlineBytes, lent: Option<Buffer>) -> CdoData {
    let len = bytes.len();
    match lent.filter(|dst| dst.len() >= len && len > 0) {
        Some(mut dst) => {
            dst.as_mut_slice()[..len].copy_from_slice(&bytes.0);
            CdoData::own(dst, len)
        }
        None => CdoData::inline(bytes.0),
    }
}

impl Executor for Inline {
    type Ticket = InlineBytes;

    /// The core carries these out itself; the same, should one come here.
    async fn fetch(
        _: &Arc<Shared>,
        _: Transfer,
        bytes: InlineBytes,
        _: usize,
        lent: Option<Buffer>,
    ) -> Result<Got> {
        Ok((land(bytes, lent), None))
    }
}
