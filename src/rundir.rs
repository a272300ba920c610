//! Where a launcher keeps its files, as the launcher itself, its janitor and the tools
//! that attach to it find them: its private directory (`$TMPDIR/maestro-run.<pid>`), its
//! PMIx server's directory, and the node's system-server rendezvous file.

use std::path::PathBuf;

/// Removes the system-server rendezvous file (`pmix.sys.<host>` in the system tmpdir) of a
/// launcher that was killed: OpenPMIx names its server's pid on the third line. Left
/// there, it sends PMIx clients and tools to a server that is gone.
pub fn remove_dead_system_server_file(dir: &std::path::Path, hostname: &str) {
    let path = dir.join(format!("pmix.sys.{hostname}"));
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let pid = text
        .lines()
        .nth(2)
        .and_then(|l| l.trim().parse::<u32>().ok());
    if let Some(pid) = pid.filter(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
        tracing::info!("removing {}: its server {pid} is gone", path.display());
        let _ = std::fs::remove_file(&path);
    }
}

/// The private directory of the launcher with `pid` (`$TMPDIR/maestro-run.<pid>`).
pub fn run_dir(pid: u32) -> PathBuf {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join(format!("maestro-run.{pid}"))
}

/// The PMIx server directory of the launcher with `pid`, where tools find its rendezvous
/// file.
pub fn server_tmpdir(pid: u32) -> PathBuf {
    run_dir(pid).join("server")
}
