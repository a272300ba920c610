//! Private per-process directories (`<prefix><pid>...`: a launcher's `maestro-run.<pid>`, a
//! pool manager's `maestro-pm-<pid>-<tag>`) whose process was killed before it could
//! remove them. Left behind, they hold stale sockets and rendezvous files that mislead
//! later tools ("PMIx has found multiple possible servers"); whoever starts next sweeps
//! them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Removes the directories in `base` named `<prefix><pid>` (anything may follow the pid's
/// digits) that belong to this user and whose process is gone. Errors are ignored: a
/// directory that cannot be read or removed is simply left.
pub fn sweep_dead_process_dirs(base: &Path, prefix: &str) {
    for dir in dead_process_dirs(base, prefix) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The directories in `base` named `<prefix><pid>` that belong to this user and whose
/// process is gone (what [`sweep_dead_process_dirs`] removes).
pub fn dead_process_dirs(base: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let uid = safefs::euid();
    let mut dead = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(prefix).and_then(|rest| {
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            rest[..digits].parse::<u32>().ok()
        }) else {
            continue;
        };
        let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && !process_alive(pid) {
            tracing::debug!("{name}: its process {pid} is gone");
            dead.push(e.path());
        }
    }
    dead
}

/// Whether process `pid` is alive: it exists and is not a zombie (a zombie, waiting for
/// its parent or init to reap it, holds no files and answers nothing).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_of_dead_processes_are_swept() {
        let base = tempfile::tempdir().expect("tempdir");
        let dead = u32::MAX - 1;
        let live = std::process::id();
        let names = [
            format!("maestro-pm-{dead}-abc"),
            format!("maestro-pm-{live}-def"),
            "maestro-pm-x-1".to_string(),
            format!("maestro-run.{dead}"),
            format!("maestro-run.{live}"),
            "other".to_string(),
        ];
        for d in &names {
            std::fs::create_dir(base.path().join(d)).expect("mkdir");
        }
        sweep_dead_process_dirs(base.path(), "maestro-pm-");
        sweep_dead_process_dirs(base.path(), "maestro-run.");
        let mut left: Vec<String> = std::fs::read_dir(base.path())
            .expect("read")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        let mut want = vec![
            names[1].clone(),
            names[2].clone(),
            names[4].clone(),
            names[5].clone(),
        ];
        left.sort();
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn a_zombie_is_no_live_process() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Waits for its exit without reaping it: a zombie now, whose /proc entry stays.
        // SAFETY: waitid on this test's own child, writing into the zeroed siginfo.
        let waited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        assert_eq!(waited, 0, "{}", std::io::Error::last_os_error());
        assert!(!process_alive(pid));
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "a zombie"
        );
        child.wait().expect("reap");
        assert!(process_alive(std::process::id()));
    }
}
