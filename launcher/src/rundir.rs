//! Where a launcher keeps its files, as the launcher itself, its janitor and the tools
//! that attach to it find them: its private directory (`run.<pid>` in the user's private
//! directory, [`safefs::user_dir`]), its PMIx server's directory, and the node's
//! system-server rendezvous file (`pmix.sys.<host>` in the system tmpdir, where OpenPMIx
//! puts it and where any local user may plant something in its place).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Most bytes of a rendezvous file read (OpenPMIx writes a few lines).
const RENDEZVOUS_MAX: u64 = 4096;

/// The system-server rendezvous file of `hostname` in `dir`.
pub fn system_server_file(dir: &Path, hostname: &str) -> PathBuf {
    dir.join(format!("pmix.sys.{hostname}"))
}

/// The pid of the server a rendezvous file names (OpenPMIx: its third line).
fn server_pid(text: &str) -> Option<u32> {
    text.lines().nth(2).and_then(|l| l.trim().parse().ok())
}

/// Who holds a node's system-server name.
#[derive(Debug, PartialEq, Eq)]
pub enum SystemServer {
    /// Nobody: the name is free (a file a killed server of ours left was removed).
    Free,
    /// A running server of this user, with its pid.
    Running(u32),
    /// Something this user did not make (another user's server, a FIFO, a link): what
    /// is there, and whose.
    Foreign(String),
}

/// Looks at the system-server rendezvous file of `hostname` in `dir` without following
/// a link or blocking on a FIFO, and removes it when it is ours and its server is gone
/// (left there, it sends PMIx clients and tools to a server that no longer exists).
pub fn system_server(dir: &Path, hostname: &str) -> SystemServer {
    let path = system_server_file(dir, hostname);
    match safefs::read_own(&path, RENDEZVOUS_MAX) {
        Ok(text) => match server_pid(&text).filter(|&p| crate::publish::node::process_alive(p)) {
            Some(pid) => SystemServer::Running(pid),
            None => {
                tracing::info!("removing {}: its server is gone", path.display());
                let _ = std::fs::remove_file(&path);
                SystemServer::Free
            }
        },
        Err(safefs::Error::Squatted { what, .. }) => SystemServer::Foreign(what),
        Err(_) => match std::fs::symlink_metadata(&path) {
            // Ours but unreadable, or gone meanwhile.
            Ok(m) if m.uid() != safefs::euid() => SystemServer::Foreign(safefs::describe(&m)),
            _ => SystemServer::Free,
        },
    }
}

/// The private directory of the launcher with `pid` (`run.<pid>` in the user's private
/// directory).
///
/// # Errors
/// The user's private directory cannot be used (see [`safefs::user_dir`]).
pub fn run_dir(pid: u32) -> Result<PathBuf, safefs::Error> {
    Ok(safefs::user_dir()?.join(format!("{RUN_PREFIX}{pid}")))
}

/// Where a standalone pool manager of `workflow` keeps its PM info on this node while it
/// runs (`pm.<workflow in hex>.info` in the user's private directory): left behind when
/// it is killed, so that `maestro pm --reclaim` can take over its workflow with the same
/// secret; removed when it stops.
///
/// # Errors
/// As [`run_dir`].
pub fn takeover_file(workflow: &str) -> Result<PathBuf, safefs::Error> {
    Ok(safefs::user_dir()?.join(format!("pm.{}.info", hex::encode(workflow.as_bytes()))))
}

/// The prefix of launchers' private directories (`run.<pid>`).
pub const RUN_PREFIX: &str = "run.";

/// The PMIx server directory of the launcher with `pid`, where tools find its rendezvous
/// file.
///
/// # Errors
/// As [`run_dir`].
pub fn server_tmpdir(pid: u32) -> Result<PathBuf, safefs::Error> {
    Ok(run_dir(pid)?.join("server"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rendezvous_file_names_its_server_on_its_third_line() {
        assert_eq!(server_pid("uri\nversion\n1234\n"), Some(1234));
        assert_eq!(server_pid("uri\nversion\n"), None);
        assert_eq!(server_pid("uri\nversion\nx\n"), None);
    }

    #[test]
    fn a_dead_servers_file_is_removed_and_anything_else_is_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = system_server_file(dir.path(), "h");
        std::fs::write(&path, format!("uri\nv\n{}\n", u32::MAX - 1)).expect("write");
        assert_eq!(system_server(dir.path(), "h"), SystemServer::Free);
        assert!(!path.exists());
        std::fs::write(&path, format!("uri\nv\n{}\n", std::process::id())).expect("write");
        assert_eq!(
            system_server(dir.path(), "h"),
            SystemServer::Running(std::process::id())
        );
        std::fs::remove_file(&path).expect("rm");
        let c = std::ffi::CString::new(path.to_str().expect("utf8")).expect("c");
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        match system_server(dir.path(), "h") {
            SystemServer::Foreign(what) => assert!(what.starts_with("a FIFO"), "{what}"),
            other => panic!("{other:?}"),
        }
        assert!(path.exists(), "what is not ours stays");
    }
}
