//! The one place the launcher (and the programs built on it) signals processes and sets
//! signal dispositions: thin wrappers over the system calls, each safe to call anywhere.

/// Sends `sig` to process group `pgid` (a rank's, which the launcher created); a group
/// already gone (`ESRCH`) is no error: the one place the launcher signals processes.
pub fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory effects; a negative pid names the group.
    unsafe { libc::kill(-pgid, sig) };
}

/// Puts `sig` back to its default action (a library's constructor may have installed a
/// handler of its own: what the signal does is the program's decision).
pub fn default_action(sig: i32) {
    // SAFETY: resetting a signal disposition to its default is always sound.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Ignores `sig` from now on (an ignored disposition survives `exec`): async-signal-safe,
/// for a child between `fork` and `exec`.
pub fn ignore(sig: i32) {
    // SAFETY: setting a disposition to SIG_IGN is always sound and async-signal-safe.
    unsafe { libc::signal(sig, libc::SIG_IGN) };
}
