//! The shared-memory files of libfabric's `shm` provider: names nobody can predict, and
//! the stale ones swept.
//!
//! `shm` (libfabric 1.17) names an endpoint's file after the process (`<pid>:<uid>:<n>`)
//! and opens it with `O_CREAT` but without `O_EXCL`: another local user who creates
//! those names ahead (mode 0666) has our endpoint adopt their file, read our address
//! from it and crash us by writing into it. Every `shm` endpoint of ours is therefore
//! named before it is enabled (`fi_setname`) with [`unpredictable_name`]:
//! `mstro.<pid>.<128 random bits>`, which libfabric uses for its file and its address.
//!
//! `shm` (libfabric 1.17) backs each endpoint with a 16 MiB POSIX shared-memory file named
//! `<pid>:<domain index>:<endpoint index>` in `/dev/shm`, and unlinks it when the endpoint
//! closes or the process exits by a catchable signal. A process killed with `SIGKILL`
//! (an OOM kill, a launcher's last resort, a crashed test) leaves its files behind, and
//! when the kernel later hands the same pid to a new process, that process's first `shm`
//! endpoint fails in `fi_enable` with `EBUSY` ("shm file in use"): libfabric finds the old
//! file, sees the pid it records alive (it is the new process itself) and refuses it.
//!
//! Before the first `shm` endpoint of a process opens, [`sweep_once`] removes the files
//! that cannot belong to a live endpoint: ours by name (this process has not created any
//! yet) and those whose pid no longer exists. Only files owned by our user are touched
//! (`/dev/shm` is sticky, so nothing else could be removed anyway). It also has the
//! process remove its own files when it exits through `exit` (a C program that never
//! finalizes, a Rust one that calls `std::process::exit` with endpoints open): `shm`
//! itself does not, and each file is 16 MiB of the node's memory.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Once;

/// Where POSIX shared-memory objects live on Linux.
const SHM_DIR: &str = "/dev/shm";

/// The prefix of our endpoints' names.
const NAME_PREFIX: &str = "mstro.";

/// A name for a new `shm` endpoint: `mstro.<pid>.<32 hex digits>` from the OS's random
/// source (the pid lets the stale-file sweep know its process).
///
/// # Errors
/// [`crate::FabricError::InvalidArgument`] when the OS has no randomness to give.
pub(crate) fn unpredictable_name() -> crate::Result<std::ffi::CString> {
    let mut tag = [0u8; 16];
    getrandom::fill(&mut tag).map_err(|e| {
        crate::FabricError::InvalidArgument(format!(
            "no randomness for a shm endpoint's name ({e}); the OS random source must work"
        ))
    })?;
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("{NAME_PREFIX}{}.{hex}", std::process::id());
    std::ffi::CString::new(name).map_err(|e| crate::FabricError::InvalidArgument(e.to_string()))
}

/// Runs [`sweep`] on `/dev/shm` once per process; later calls return at once.
///
/// Errors reading the directory are ignored: the sweep only prevents a later failure,
/// which then still reports itself through `fi_enable`.
pub(crate) fn sweep_once() {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| {
        // SAFETY: getuid and getpid cannot fail.
        let (uid, pid) = unsafe { (libc::getuid(), libc::getpid()) };
        sweep(Path::new(SHM_DIR), uid, pid as u32, process_exists);
        // SAFETY: registers a function with C linkage and no arguments; it runs once, at
        // exit. A failure (no room for more handlers) only leaves files to the next sweep.
        if unsafe { libc::atexit(remove_own_at_exit) } != 0 {
            tracing::debug!("no exit handler for this process's shm files");
        }
    });
}

/// Removes the `shm` provider's files of this user whose process no longer exists, and
/// returns their names (for a process that cleans up after others, such as `maestro
/// run`'s janitor). Files of live processes, and everything of other users, stay.
pub fn sweep_stale() -> Vec<String> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    // (No process has pid 0: this process's own files are as safe as any live one's.)
    sweep(Path::new(SHM_DIR), uid, 0, process_exists)
}

/// Whether `pid` exists and is not a zombie (which holds no files any more).
fn process_exists(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !matches!(
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().as_bytes().first()),
            Some(Some(b'Z' | b'X'))
        )
    })
}

/// At exit: removes the files of this process (the pid is read now: a forked child that
/// exits without exec removes none of its parent's).
extern "C" fn remove_own_at_exit() {
    // Panics must not cross into libc's exit path.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: getuid and getpid cannot fail.
        let (uid, pid) = unsafe { (libc::getuid(), libc::getpid()) };
        sweep(Path::new(SHM_DIR), uid, pid as u32, |_| true);
    });
}

/// Removes the `shm` provider's files in `dir` owned by `uid` whose pid is `own_pid` or
/// not `alive`; returns their names.
fn sweep(dir: &Path, uid: u32, own_pid: u32, alive: impl Fn(u32) -> bool) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        let ours = entry
            .metadata()
            .is_ok_and(|m| m.uid() == uid && m.is_file());
        if ours && (pid == own_pid || !alive(pid)) && std::fs::remove_file(entry.path()).is_ok() {
            removed.push(name);
        }
    }
    removed
}

/// The pid in a `shm` provider file name: ours, `mstro.<pid>.<tag>` (and the files
/// libfabric derives from it, `<name>_<n>`), or libfabric's own `<pid>:<uid>:<endpoint>`;
/// `None` for any other name.
fn owner_pid(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix(NAME_PREFIX) {
        let (pid, tag) = rest.split_once('.')?;
        return (!tag.is_empty()).then(|| pid.parse().ok()).flatten();
    }
    let mut parts = name.split(':');
    let pid = parts.next()?.parse().ok()?;
    let indexes_ok = parts
        .by_ref()
        .take(2)
        .filter(|p| p.parse::<u32>().is_ok())
        .count()
        == 2;
    (indexes_ok && parts.next().is_none()).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_provider_names_carry_a_pid() {
        assert_eq!(owner_pid("1234:0:0"), Some(1234));
        assert_eq!(owner_pid("77:1:12"), Some(77));
        assert_eq!(owner_pid("mstro.88.00ff"), Some(88));
        assert_eq!(owner_pid("mstro.88.00ff_3"), Some(88));
        for other in [
            "1234",
            "1234:0",
            "1234:0:0:0",
            "x:0:0",
            "12:a:0",
            "sem.foo",
            "mstro.88",
            "mstro.88.",
            "mstro.x.ab",
            "",
        ] {
            assert_eq!(owner_pid(other), None, "{other}");
        }
    }

    #[test]
    fn sweeps_our_pid_and_dead_pids_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["10:0:0", "10:0:1", "20:0:0", "30:0:0", "notes.txt", "40"] {
            std::fs::write(dir.path().join(name), b"x").expect("write");
        }
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        // We are pid 10; 20 is alive; 30 is dead.
        let mut removed = sweep(dir.path(), uid, 10, |p| p == 20);
        removed.sort();
        assert_eq!(removed, ["10:0:0", "10:0:1", "30:0:0"]);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
            .collect();
        left.sort();
        assert_eq!(left, ["20:0:0", "40", "notes.txt"]);
        // Files of another user are never touched.
        assert!(sweep(dir.path(), uid + 1, 20, |_| false).is_empty());
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn endpoint_names_are_ours_unpredictable_and_carry_the_pid() {
        let a = unpredictable_name().expect("name");
        let b = unpredictable_name().expect("name");
        assert_ne!(a, b);
        let a = a.into_string().expect("utf8");
        assert_eq!(owner_pid(&a), Some(std::process::id()));
        assert_eq!(
            a.len(),
            NAME_PREFIX.len() + std::process::id().to_string().len() + 33
        );
    }
}
