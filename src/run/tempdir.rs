//! The launcher's private directory (`$TMPDIR/maestro-run.<pid>`: the PMIx server's, the
//! system server's and the ranks' files), removed at exit, and the sweeping of what killed
//! launchers left behind.

use std::path::PathBuf;

use super::{RunError, io_err};
use crate::rundir::run_dir;

/// A private directory removed (recursively) on drop.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn create() -> Result<TempDir, RunError> {
        let dir = run_dir(std::process::id());
        // Directories of killed launchers of this user (their stale rendezvous files make
        // tools refuse to pick a server), and one of a crashed launcher with our pid.
        if let Some(base) = dir.parent() {
            pool::stale::sweep_dead_process_dirs(base, "maestro-run.");
        }
        let _ = std::fs::remove_dir_all(&dir);
        // Private (0700): the PMIx server's rendezvous files and the ranks' files are the
        // user's business only.
        let private = |path: &std::path::Path| {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(path)
                .map_err(io_err(format!("creating {}", path.display())))
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
