//! A file on the global file system: the consumer reads the file a ticket names (checked
//! by size and checksum, under its own GFS directory only). The provider's side: the file
//! written whole at the offer when the core chose this transport ([`write`]), or at the
//! PM's request for consumers that share no network with it ([`spill`]), and linked into
//! the PM's directory at withdraw for a PM that keeps files ([`hand_over`]).

use std::sync::Arc;

use fabric::Buffer;

use super::{Executor, Got, Transfer};
use crate::client::data;
use crate::client::gfs::Gfs as Dir;
use crate::client::{ClientError, Result, Shared};
use crate::proto::{CdoId, GfsFile};

/// See the module's documentation.
pub(super) struct Gfs;

impl Executor for Gfs {
    type Ticket = GfsFile;

    async fn fetch(
        shared: &Arc<Shared>,
        _: Transfer,
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
    let offer = data::find(&(shared.pool(), shared.app, cdo));
    let missing = "not offered here with a GFS directory";
    off_thread(
        shared,
        cdo,
        missing,
        move |g| match offer {
            Some(offer) => g.write(cdo, offer.as_slice()).map_err(|e| e.to_string()),
            None => Err(missing.to_string()),
        },
        |c, cdo, written| c.spilled(cdo, written),
    );
}

/// Links the file of offered `cdo` into the PM's directory of kept files `dir`, on a thread
/// that may block, and tells the core how that went ([`pool_core::client::Event::HandOver`]:
/// the withdraw waiting for it goes out).
pub(crate) fn hand_over(shared: &Arc<Shared>, cdo: CdoId, dir: Arc<str>) {
    off_thread(
        shared,
        cdo,
        "this app has no GFS directory",
        move |g| {
            let linked = g.hand_over(cdo, &dir).map_err(|e| e.to_string())?;
            Ok(linked.map(String::into_boxed_str))
        },
        |c, cdo, linked| c.handed_over(cdo, linked),
    );
}

/// Runs `work` on this app's GFS directory on a thread that may block (`missing` when the
/// app has none), then `tell` the core what came of it, its error as text: a step of the
/// core the PM's request or a withdraw waits for.
fn off_thread<R: Send + 'static>(
    shared: &Arc<Shared>,
    cdo: CdoId,
    missing: &'static str,
    work: impl FnOnce(&Dir) -> std::result::Result<R, String> + Send + 'static,
    tell: impl FnOnce(&mut crate::client::Core, CdoId, std::result::Result<R, String>) + Send + 'static,
) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let outcome = match shared.gfs.clone() {
            Some(g) => tokio::task::spawn_blocking(move || work(&g))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r),
            None => Err(missing.to_string()),
        };
        let _ = shared.with_core(|c| {
            tell(c, cdo, outcome);
            Ok(())
        });
    });
}
