//! The launcher's private directory (`run.<pid>` in the user's private directory: the PMIx
//! server's, the system server's and the ranks' files), removed at exit, and the sweeping
//! of what killed launchers left behind.

use std::path::PathBuf;

use super::RunError;
use crate::rundir::{RUN_PREFIX, run_dir};

/// A private directory removed (recursively) on drop.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn create() -> Result<TempDir, RunError> {
        // Inside the user's private directory (0700, checked): nothing another user
        // plants can be in the way.
        let dir = run_dir(std::process::id()).map_err(|e| RunError::Io {
            what: "the user's private directory".into(),
            source: e.into_io(),
        })?;
        // Directories of killed launchers of this user (their stale rendezvous files make
        // tools refuse to pick a server), and one of a crashed launcher with our pid.
        if let Some(base) = dir.parent() {
            pool::stale::sweep_dead_process_dirs(base, RUN_PREFIX);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let private = |path: &std::path::Path| {
            safefs::new_private_dir(path).map_err(|e| RunError::Io {
                what: format!("creating {}", path.display()),
                source: e.into_io(),
            })
        };
        private(&dir)?;
        let made = TempDir(dir);
        for sub in ["server", "system", "ranks"] {
            private(&made.0.join(sub))?;
        }
        Ok(made)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A file the PMIx library removes while the tree is walked makes one pass fail
        // with NotFound: walk again; a tree that is gone already is what was wanted.
        let result = std::fs::remove_dir_all(&self.0).or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => std::fs::remove_dir_all(&self.0),
            _ => Err(e),
        });
        match result {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!("removing {}: {e}", self.0.display());
            }
            _ => {}
        }
    }
}
