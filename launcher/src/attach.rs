//! Attaching to a running launcher (`maestro run --tool-support`, or a node's system
//! server) as a PMIx tool, shared by `maestro query` and `maestro pool`: which launcher the
//! command line names, the checks made before connecting, and the errors.

use std::path::PathBuf;

use pmix::ToolTarget;

/// Which running launcher a tool attaches to: `--pid` (with `--tmpdir`), `--uri` or
/// `--system` (shared by `maestro query` and `maestro pool`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LauncherArgs {
    /// Process id of the `maestro run` to attach to.
    #[arg(long, conflicts_with_all = ["uri", "system"])]
    pid: Option<i32>,
    /// Its PMIx tmpdir (default: where maestro run puts it for that pid).
    #[arg(long, requires = "pid")]
    tmpdir: Option<PathBuf>,
    /// A PMIx server URI instead of a pid.
    #[arg(long, conflicts_with = "system")]
    uri: Option<String>,
    /// Attach to this node's system server (a `maestro run --system-server`).
    #[arg(long)]
    system: bool,
    /// The system server's tmpdir (default: $TMPDIR or /tmp).
    #[arg(long, requires = "system")]
    system_tmpdir: Option<PathBuf>,
}

impl LauncherArgs {
    /// The launcher named (by URI, pid or the system server), if one is.
    pub fn target(&self) -> Option<ToolTarget> {
        match (self.pid, &self.uri) {
            (_, Some(u)) => Some(ToolTarget::Uri(u.clone())),
            (Some(pid), None) => {
                // Its tmpdir defaults to where `maestro run` puts it.
                let tmpdir = self.tmpdir.clone().or_else(|| {
                    u32::try_from(pid)
                        .ok()
                        .and_then(|p| crate::rundir::server_tmpdir(p).ok())
                        .filter(|d| d.is_dir())
                });
                Some(ToolTarget::Pid { pid, tmpdir })
            }
            (None, None) if self.system => Some(ToolTarget::System {
                tmpdir: self.system_tmpdir.clone(),
            }),
            (None, None) => None,
        }
    }
}

/// Why `maestro query` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The target is not something a tool can attach to (said why, and what to do).
    #[error("{0}")]
    Target(String),
    /// PMIx failed.
    #[error(transparent)]
    Pmix(#[from] pmix::Error),
}

/// Checks the target before connecting, so that a mistake is named rather than reported
/// as an unreachable server.
///
/// # Errors
/// [`QueryError::Target`] for a pid that is no process or serves no tools, or a URI that
/// is not one.
pub fn check_target(target: &ToolTarget) -> Result<(), QueryError> {
    match target {
        ToolTarget::Pid { pid, tmpdir } => {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(QueryError::Target(format!(
                    "no process {pid} on this machine"
                )));
            }
            let rendezvous = tmpdir.as_ref().is_some_and(|dir| {
                std::fs::read_dir(dir).is_ok_and(|entries| {
                    entries.filter_map(Result::ok).any(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.starts_with("pmix.") && name.contains(".tool.")
                    })
                })
            });
            if !rendezvous {
                return Err(QueryError::Target(format!(
                    "process {pid} lets no PMIx tools attach: start the job with maestro run --tool-support (or give its PMIx tmpdir with --tmpdir)"
                )));
            }
            Ok(())
        }
        ToolTarget::Uri(uri) => {
            let well_formed = uri
                .split_once(";tcp")
                .is_some_and(|(name, addr)| name.contains('.') && addr.contains("://"));
            if well_formed {
                Ok(())
            } else {
                Err(QueryError::Target(format!(
                    "--uri {uri:?} is not a PMIx server URI (NSPACE.RANK;tcp4://HOST:PORT, the first line of the launcher's rendezvous file)"
                )))
            }
        }
        ToolTarget::System { tmpdir } => {
            use crate::rundir::{SystemServer, system_server, system_server_file};
            let dir = tmpdir.clone().unwrap_or_else(std::env::temp_dir);
            let host = inventory::local_hostname();
            let file = system_server_file(&dir, &host);
            match system_server(&dir, &host) {
                SystemServer::Running(_) => Ok(()),
                SystemServer::Free => Err(QueryError::Target(format!(
                    "no system server runs on this node (no {}): start one with maestro run --system-server",
                    file.display()
                ))),
                SystemServer::Foreign(what) => Err(QueryError::Target(format!(
                    "{} is {what}: this node's system server is not yours (another user's, or planted); attach to your launcher with --pid instead",
                    file.display()
                ))),
            }
        }
    }
}
