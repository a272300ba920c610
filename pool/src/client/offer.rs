//! An offer's way out, shared by [`AsyncClient::offer`](super::AsyncClient::offer) and its
//! kin and by [`AsyncClient::offer_many`](super::AsyncClient::offer_many): the bytes are
//! made readable the way their transport wants (written whole to the global file system,
//! or registered with the app's fabric endpoints unless the offer carries them), kept where
//! same-process consumers find them ([`Ready::make`]), then handed to the core, which
//! sends the offer ([`Ready::offer`]). A refused offer lets go of all that
//! ([`forget`]).

use std::sync::Arc;
use std::time::Instant;

use fabric::Buffer;
use pool_core::client::{CallError, CallId};

use super::gfs::Gfs;
use super::shared::{Core, Shared, Waiter};
use super::{Result, data, transport};
use crate::attr::Attributes;
use crate::proto::{CdoId, GfsFile};

/// An offer's bytes, readable by consumers and kept, ready for the core.
pub(super) struct Ready {
    cdo: CdoId,
    kept: Arc<data::Offered>,
    region: fabric::RemoteRegion,
    alternates: Vec<fabric::RemoteRegion>,
    registered: bool,
    file: Option<fabric::MemoryFile>,
    gfs: Option<GfsFile>,
}

impl Ready {
    /// Makes `data` readable for the offer of `cdo`: written whole to `gfs`'s directory
    /// when given (on a thread that may block; nothing is registered with the fabric then),
    /// else registered with the app's endpoints, unless the offer `carried` its bytes to
    /// the PM (consumers then get them with their tickets, or copy them on this host).
    ///
    /// # Errors
    /// The file's write, the registration.
    pub(super) async fn make(
        shared: &Arc<Shared>,
        cdo: CdoId,
        data: Buffer,
        (gfs, carried): (Option<Arc<Gfs>>, bool),
    ) -> Result<Ready> {
        let file = data.memory_file();
        let (readable, gfs) = match gfs {
            Some(g) => {
                let (data, file) = transport::gfs::write(g, cdo, data).await?;
                (data::Offered::plain(data), Some(file))
            }
            None => (transport::rma::readable(shared, data, carried)?, None),
        };
        let data::Readable {
            offered,
            region,
            alternates,
            registered,
        } = readable;
        // Kept where same-process consumers find it; the core reads the bytes once (to
        // carry a small CDO's, to checksum) and lets go before the answer is awaited.
        let kept = data::keep((shared.pool(), shared.app, cdo), offered);
        Ok(Ready {
            cdo,
            kept,
            region,
            alternates,
            registered,
            file,
            gfs,
        })
    }

    /// Has the core send the offer (sealing it with `seal` first, if given) and file
    /// `waiter` for its answer.
    ///
    /// # Errors
    /// As [`pool_core::client::ClientCore::offer`]: attributes the schemas refuse, a
    /// closed connection.
    pub(super) fn offer(
        self,
        c: &mut Core,
        now: Instant,
        seal: Option<Attributes>,
        waiter: Waiter,
    ) -> std::result::Result<CallId, CallError> {
        let offer = pool_core::client::Offer {
            cdo: self.cdo,
            bytes: self.kept.as_slice(),
            region: self.region,
            registered: self.registered,
            alternates: self.alternates,
            file: self.file,
            seal,
            gfs: self.gfs,
        };
        c.offer(now, offer, waiter)
    }
}

/// Lets go of what [`Ready::make`] did for the offer of `cdo`, which was refused (or never
/// sent): the kept bytes, and the file written for it.
pub(super) fn forget(shared: &Shared, cdo: CdoId) {
    data::take_back(&(shared.pool(), shared.app, cdo));
    if let Some(g) = &shared.gfs {
        g.remove(cdo);
    }
}
