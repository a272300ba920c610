//! A pool manager's Unix socket directory removed when its process ends without stopping
//! it: a C program that returns from `main` without `mstro_finalize` (through `exit`), or
//! one stopped by Ctrl-C, SIGTERM or SIGHUP left at their default action. Without this the
//! directory (`pm-<pid>-<tag>` in the user's private directory) stays until the next pool
//! manager of the user sweeps the dead processes' ones.
//!
//! Opt-in ([`super::PmConfig::remove_at_exit`]): a program that handles those signals
//! itself (`maestro pm`, whose janitor cleans up after it) must not have a handler of the
//! library's end it. A signal whose action is not the default when the first directory is
//! watched keeps its action: the program (Python's `KeyboardInterrupt`, say) decides, and
//! an exit through `exit` still removes the directory.
//!
//! The handler does only what is safe in a signal handler: `getpid`, `unlink`, `rmdir` of
//! paths prepared beforehand, then `raise` with the default action back. The paths live in
//! a fixed table of atomic pointers; an entry a stopped pool manager gives up is never
//! freed (a handler may be reading it), a few hundred bytes per pool manager started.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Directories watched at once; more pool managers in one process go unwatched (their
/// directories then wait for the next sweep).
const SLOTS: usize = 16;

/// What one watched directory needs removing, prepared before any signal.
struct Entry {
    /// The process that created it: a forked child exiting removes nothing of its parent's.
    pid: libc::pid_t,
    /// The sockets in it (the PM's, and its rings' when it grants them).
    sockets: Vec<CString>,
    dir: CString,
}

static WATCHED: [AtomicPtr<Entry>; SLOTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS];

/// The signals whose default action ends the process, and which users send to end it.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// A watched directory; [`unwatch`] gives it up.
#[derive(Debug)]
pub(super) struct Watch(usize);

/// Has `dir` (holding the sockets `sockets`) removed if this process ends without
/// [`unwatch`]. `None` when the table is full or a path holds a NUL byte.
pub(super) fn watch(dir: &Path, sockets: &[std::path::PathBuf]) -> Option<Watch> {
    let entry = Box::new(Entry {
        // SAFETY: getpid cannot fail.
        pid: unsafe { libc::getpid() },
        sockets: sockets
            .iter()
            .map(|s| CString::new(s.as_os_str().as_bytes()).ok())
            .collect::<Option<_>>()?,
        dir: CString::new(dir.as_os_str().as_bytes()).ok()?,
    });
    install();
    let entry = Box::into_raw(entry);
    for (i, slot) in WATCHED.iter().enumerate() {
        if slot
            .compare_exchange(ptr::null_mut(), entry, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Some(Watch(i));
        }
    }
    // SAFETY: `entry` came from `Box::into_raw` above and was published nowhere.
    drop(unsafe { Box::from_raw(entry) });
    tracing::debug!(
        "more than {SLOTS} pool managers in this process: {} is removed at stop only",
        dir.display()
    );
    None
}

/// Gives up the watch of a directory the pool manager removes itself.
pub(super) fn unwatch(watch: Watch) {
    // The entry is leaked, not freed: a signal handler may be reading it right now.
    let _ = WATCHED[watch.0].swap(ptr::null_mut(), Ordering::AcqRel);
}

/// Registers the exit handler and the signal handlers, once per process.
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: registers a function with C linkage and no arguments, run once at exit.
        if unsafe { libc::atexit(remove_at_exit) } != 0 {
            tracing::debug!("no exit handler for the pool manager's socket directory");
        }
        for sig in SIGNALS {
            // SAFETY: plain sigaction calls on zeroed, then filled, structures.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, ptr::null(), &mut old) != 0
                    || old.sa_sigaction != libc::SIG_DFL
                {
                    continue;
                }
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                // The default action is back on entry: the raise below ends the process.
                new.sa_flags = libc::SA_RESETHAND;
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(sig, &new, ptr::null_mut());
            }
        }
    });
}

/// Removes every watched directory of this process (async-signal-safe).
fn remove_watched() {
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    for slot in &WATCHED {
        let entry = slot.load(Ordering::Acquire);
        // SAFETY: a published entry is never freed (see `unwatch`).
        if let Some(e) = unsafe { entry.as_ref() }
            && e.pid == pid
        {
            // SAFETY: NUL-terminated paths; unlink and rmdir are async-signal-safe.
            unsafe {
                for socket in &e.sockets {
                    libc::unlink(socket.as_ptr());
                }
                libc::rmdir(e.dir.as_ptr());
            }
        }
    }
}

extern "C" fn remove_at_exit() {
    remove_watched();
}

extern "C" fn on_signal(sig: libc::c_int) {
    remove_watched();
    // SAFETY: raise is async-signal-safe; SA_RESETHAND put the default action back.
    unsafe { libc::raise(sig) };
}
