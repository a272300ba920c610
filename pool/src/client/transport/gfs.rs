//! A file on the global file system: the consumer reads the file a ticket names (checked
//! by size and checksum, under its own GFS directory only). The provider's side: the file
//! written whole at the offer when the core chose this transport ([`write`]), or at the
//! PM's request for consumers that share no network with it ([`spill`]), and linked into
//! the PM's directory at withdraw for a PM that keeps files ([`hand_over`]).

use std::sync::Arc;

use fabric::Buffer;

use super::{Executor, Got};
use crate::client::data;
use crate::client::gfs::Gfs as Dir;
use crate::client::{ClientError, Result, Shared};
use crate::proto::{CdoId, GfsFile, TransferId};

/// See the module's documentation.
pub(super) struct Gfs;

impl Executor for Gfs {
    type Ticket = GfsFile;

    async fn fetch(
        shared: &Arc<Shared>,
        _: TransferId,
        file: GfsFile,
        len: usize,
        lent: Option<Buffer>,
    ) -> Result<Got> {
        let Some(g) = shared.gfs.clone() else {
            return Err(ClientError::Gfs(format!(
                "the provider wrote this CDO to the global file system ({}) and this app has no GFS directory: set MSTRO_TRANSPORT_GFS_DIR (the same directory as the provider's)",
                file.path
            )));
        };
        let data = tokio::task::spawn_blocking(move || g.read(&file, len, lent))
            .await
            .map_err(|e| ClientError::Gfs(format!("reading the file failed: {e}")))??;
        Ok((data, None))
    }
}

/// Writes `data`, CDO `cdo`'s, whole to its file in `g` on a thread that may block,
/// before the offer names the file: the data back, and the file with the bytes' checksum.
///
/// # Errors
/// [`ClientError::Gfs`] and IO errors of writing it.
pub(crate) async fn write(g: Arc<Dir>, cdo: CdoId, data: Buffer) -> Result<(Buffer, GfsFile)> {
    let (data, file) = tokio::task::spawn_blocking(move || {
        let file = g.write(cdo, data.as_slice());
        (data, file)
    })
    .await
    .map_err(|e| ClientError::Gfs(format!("writing the file failed: {e}")))?;
    Ok((data, file?))
}

/// Writes offered `cdo` to a file under this app's GFS directory (on a thread that may
/// block) and tells the PM where, or why not (see [`pool_core::client::Event::Spill`]).
pub(crate) fn spill(shared: &Arc<Shared>, cdo: CdoId) {
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

/// Links the file of offered `cdo` into the PM's directory of kept files `dir`, on a thread
/// that may block, and tells the core how that went ([`pool_core::client::Event::HandOver`]:
/// the withdraw waiting for it goes out).
pub(crate) fn hand_over(shared: &Arc<Shared>, cdo: CdoId, dir: Arc<str>) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let linked = match shared.gfs.clone() {
            Some(g) => tokio::task::spawn_blocking(move || g.hand_over(cdo, &dir))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
            None => Err("this app has no GFS directory".to_string()),
        };
        let _ = shared.with_core(|c| {
            c.handed_over(cdo, linked.map(|p| p.map(String::into_boxed_str)));
            Ok(())
        });
    });
}
