//! The janitor: a small process (`maestro janitor`, hidden) that `maestro run` and
//! `maestro pm` start first and that outlives them, so that even one killed with SIGKILL
//! leaves nothing behind.
//!
//! Its parent keeps the write end of a pipe to the janitor's stdin and writes the pid of
//! every child it starts (a launcher's ranks). When the pipe closes (the parent is ending,
//! however it ended), the janitor waits (bounded) for the parent and those children to be
//! gone (they die with a launcher: parent-death signal) and then removes what they and the
//! parent could not:
//! - a launcher's private directory (`run.<pid>` in the user's private directory), and a
//!   pool manager's socket directories of dead processes (`pm-*` there);
//! - libfabric `shm` files in `/dev/shm` of processes that no longer exist (16 MiB each);
//! - `PMIX_RANGE_GLOBAL` publications of dead hosts in the node directory;
//! - the system-server rendezvous file of a launcher that served as one;
//! - a pool manager's `--info-file`, unless another running PM took it over (it holds its
//!   lock then);
//! - the GFS directories of this host's dead clients under `MSTRO_TRANSPORT_GFS_DIR` (the
//!   CDO files of ranks killed with the launcher); the kept files of a pool manager that
//!   is gone are left for the next manager of its workflow after a `maestro pm` (see
//!   [`pool::KeptOfGone`]), removed after a `maestro run`;
//! - run as root: the private directories (`/tmp/maestro-<uid>`) of users whose account is
//!   gone.
//!
//! After a clean exit the parent has removed all of it already and the janitor finds
//! nothing. The janitor is in a process group of its own and ignores SIGINT, SIGHUP and
//! SIGTERM (a Ctrl-C meant for the job must not stop the cleanup after it); it ends by
//! itself once done.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the janitor waits for the parent and its children to be gone before cleaning
/// anyway.
const RANKS_GONE: Duration = Duration::from_secs(10);

/// The options of `maestro janitor` (started by `maestro run` and `maestro pm`, not by
/// users).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct JanitorArgs {
    /// A launcher's private directory.
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// This node's name (for a system server's rendezvous file).
    #[arg(long)]
    pub hostname: Option<String>,
    /// A pool manager's info file.
    #[arg(long)]
    pub info_file: Option<PathBuf>,
    /// The global file system directory the ranks write CDOs to (`MSTRO_TRANSPORT_GFS_DIR`):
    /// the directories of this host's dead clients there are removed.
    #[arg(long)]
    pub gfs_dir: Option<PathBuf>,
    /// Leave the kept files of a pool manager that is gone in the GFS directory for the
    /// next manager of its workflow ([`pool::KeptOfGone::LeftForTaker`]); else they go.
    #[arg(long)]
    pub kept_for_taker: bool,
    /// The process that started the janitor (and feeds its stdin; [`Janitor::start`]
    /// names its own): the janitor waits for it to be gone too before cleaning up after
    /// it, since its stdin closes while that process is still ending.
    #[arg(long)]
    pub parent: Option<u32>,
}

/// The parent's end of the pipe to its janitor.
pub struct Janitor {
    feed: ChildStdin,
}

impl Janitor {
    /// Starts the janitor that will clean up what `args` names. `None`, with a warning,
    /// when it cannot start (the work goes on; if killed, the parent then leaves its files
    /// to the next sweep).
    pub fn start(args: &JanitorArgs) -> Option<Janitor> {
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("no janitor (cannot find this program: {e})");
                return None;
            }
        };
        let mut cmd = Command::new(exe);
        cmd.arg("janitor");
        if let Some(dir) = &args.run_dir {
            cmd.arg("--run-dir").arg(dir);
        }
        if let Some(host) = &args.hostname {
            cmd.args(["--hostname", host]);
        }
        if let Some(file) = &args.info_file {
            cmd.arg("--info-file").arg(file);
        }
        if let Some(dir) = &args.gfs_dir {
            cmd.arg("--gfs-dir").arg(dir);
        }
        if args.kept_for_taker {
            cmd.arg("--kept-for-taker");
        }
        cmd.args(["--parent", &std::process::id().to_string()]);
        cmd.stdin(Stdio::piped())
            // Not the launcher's output: a pipeline reading it must end with the launcher.
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        // SAFETY: the closure only ignores signals (async-signal-safe); ignored
        // dispositions survive exec.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM] {
                    crate::process::ignore(sig);
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => child.stdin.take().map(|feed| Janitor { feed }),
            Err(e) => {
                tracing::warn!("no janitor ({e})");
                None
            }
        }
    }

    /// Tells the janitor about a child it must wait for.
    pub fn child_started(&mut self, pid: i32) {
        if let Err(e) = writeln!(self.feed, "{pid}") {
            tracing::debug!("janitor gone: {e}");
        }
    }
}

/// `maestro janitor`: waits for its parent to go, then cleans up after it.
pub fn main(args: &JanitorArgs) -> std::process::ExitCode {
    let mut children: Vec<u32> = std::io::stdin()
        .lock()
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    // The pipe closes as the parent's files do, before it is gone: a sweep now would
    // still find it alive (and leave what is its).
    children.extend(args.parent);
    let deadline = Instant::now() + RANKS_GONE;
    while children
        .iter()
        .any(|&pid| crate::publish::node::process_alive(pid))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Some(dir) = args.run_dir.as_ref().filter(|d| d.exists()) {
        let _ = std::fs::remove_dir_all(dir);
    }
    if let Ok(dir) = safefs::user_dir() {
        pool::stale::sweep_dead_process_dirs(&dir, pool::PM_DIR_PREFIX);
    }
    if let Some(file) = &args.info_file {
        remove_unless_locked(file);
    }
    if let Some(dir) = &args.gfs_dir {
        let kept = if args.kept_for_taker {
            pool::KeptOfGone::LeftForTaker
        } else {
            pool::KeptOfGone::Removed
        };
        pool::sweep_gfs(dir, kept);
    }
    fabric::sweep_stale_shm_files();
    if let Ok(node) = crate::publish::NodeDirectory::default_dir()
        && node.exists()
        && let Ok(dir) = crate::publish::NodeDirectory::open(&node)
    {
        dir.sweep_stale();
    }
    if let Some(host) = &args.hostname {
        // Removes only a file of ours whose server is gone; never follows or blocks.
        crate::rundir::system_server(&std::env::temp_dir(), host);
    }
    if safefs::euid() == 0 {
        sweep_gone_users(std::path::Path::new("/tmp"));
    }
    std::process::ExitCode::SUCCESS
}

/// As root: removes the private directories (`maestro-<uid>` in `tmp`) of users who no
/// longer have an account on this node. Only a real directory (not a link) owned by the
/// uid its name gives is touched; a user's directory stays as long as the account exists
/// (it holds their node inventory cache, and their jobs may start at any time).
fn sweep_gone_users(tmp: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(uid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("maestro-"))
            .and_then(|u| u.parse::<u32>().ok())
        else {
            continue;
        };
        let owned = std::fs::symlink_metadata(e.path())
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && uid != 0);
        if owned && !has_account(uid) {
            tracing::debug!(
                "removing {}: user {uid} has no account here",
                e.path().display()
            );
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether `uid` names an account (`getpwuid_r` finds it). An error of the lookup counts
/// as an account: nothing is removed on doubt.
fn has_account(uid: u32) -> bool {
    // SAFETY: `passwd` is plain data; zeroed is a valid value for getpwuid_r to fill.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` is as long as said.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    rc != 0 || !found.is_null()
}

/// Removes a pool manager's info file unless a running PM holds its lock (a new PM that
/// took the path over after the old one died), it is not a regular file of ours, or it
/// holds no PM info (the PM refused a file the user keeps there: the janitor never
/// follows, blocks on, or removes what a PM did not write).
fn remove_unless_locked(path: &std::path::Path) {
    use std::io::Read;
    let Ok(mut f) = safefs::open_own(path, true) else {
        return;
    };
    let mut text = String::new();
    if (&mut f).take(64 << 10).read_to_string(&mut text).is_err()
        || !pool::bootstrap::holds_pm_info(&text)
    {
        return;
    }
    if safefs::try_lock(&f) {
        let _ = std::fs::remove_file(path);
    }
}
