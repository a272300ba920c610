//! `maestro bench pool --transport gfs`: the pool's demands served from files on a global
//! file system (both processes join with the same GFS directory, the provider offering
//! through it), against the physical limit of that file system: a plain copy of as many
//! bytes from one file to another in the same directory (`std::fs::copy`, what `cp` does),
//! timed per size in the same run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pool::GfsOptions;

use super::PoolBenchError;

/// How consumers get the provider's bytes in the benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The fabric (RMA, same-host copies and maps), as planned by the PM.
    #[default]
    Rma,
    /// Files on a global file system (`--gfs-dir`).
    Gfs,
}

/// The directory the benchmark's files go to: the one given, or a fresh one under the
/// temporary directory, removed when this is dropped.
pub(super) struct Dir {
    path: PathBuf,
    made: bool,
}

impl Dir {
    /// `given`, or a fresh directory.
    pub(super) fn new(given: Option<&Path>) -> Result<Dir, PoolBenchError> {
        if let Some(p) = given {
            return Ok(Dir {
                path: p.to_path_buf(),
                made: false,
            });
        }
        let path = std::env::temp_dir().join(format!("maestro-bench-gfs-{}", std::process::id()));
        safefs::new_private_dir(&path).map_err(|e| PoolBenchError::Usage(e.to_string()))?;
        Ok(Dir { path, made: true })
    }

    /// Where it is.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if self.made {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The options of a client using `dir`, offering through it when `offer`.
pub(super) fn options(dir: &Path, offer: bool) -> GfsOptions {
    GfsOptions {
        dir: dir.to_path_buf(),
        offer,
        group_readable: false,
    }
}

/// GB/s of copying a file of `size` bytes to another in `dir`, `iterations` times: in a
/// private directory of its own there (created exclusively: a shared directory's other
/// users cannot plant links), removed after.
pub(super) fn copy_gbps(dir: &Path, size: usize, iterations: usize) -> Result<f64, PoolBenchError> {
    let path = dir.join(format!("maestro-bench-cp-{}", std::process::id()));
    safefs::new_private_dir(&path).map_err(|e| PoolBenchError::Usage(e.to_string()))?;
    // Ours from here: removed when this goes.
    let own = Dir { path, made: true };
    let (from, to) = (own.path.join("from"), own.path.join("to"));
    let io =
        |e: std::io::Error| PoolBenchError::Usage(format!("copying in {}: {e}", dir.display()));
    std::fs::write(&from, vec![7u8; size]).map_err(io)?;
    let t = Instant::now();
    for _ in 0..iterations {
        std::fs::copy(&from, &to).map_err(io)?;
    }
    let secs = t.elapsed().as_secs_f64().max(1e-9);
    Ok((size * iterations) as f64 / secs / 1e9)
}
