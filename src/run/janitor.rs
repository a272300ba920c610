//! The launcher's janitor: a small process (`maestro run-janitor`, hidden) that `maestro
//! run` starts first and that outlives it, so that even a launcher killed with SIGKILL
//! leaves nothing behind.
//!
//! The launcher keeps the write end of a pipe to the janitor's stdin and writes the pid of
//! every rank it starts. When the pipe closes (the launcher exited, however it ended), the
//! janitor waits (bounded) for those ranks to be gone (they die with the launcher:
//! parent-death signal) and then removes what they and the launcher could not:
//! - the launcher's private directory (`$TMPDIR/maestro-run.<pid>`);
//! - libfabric `shm` files in `/dev/shm` of processes that no longer exist (16 MiB each);
//! - the launcher's `PMIX_RANGE_GLOBAL` publications in the node directory;
//! - the system-server rendezvous file of a launcher that served as one.
//!
//! After a clean exit the launcher has removed all of it already and the janitor finds
//! nothing. The janitor is in a process group of its own and ignores SIGINT, SIGHUP and
//! SIGTERM (a Ctrl-C meant for the job must not stop the cleanup after it); it ends by
//! itself once done.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the janitor waits for the ranks to be gone before cleaning anyway.
const RANKS_GONE: Duration = Duration::from_secs(10);

/// The options of `maestro run-janitor` (started by `maestro run`, not by users).
#[derive(Clone, Debug, clap::Args)]
pub struct JanitorArgs {
    /// The launcher's private directory.
    #[arg(long)]
    run_dir: PathBuf,
    /// This node's name (for the system-server rendezvous file).
    #[arg(long)]
    hostname: String,
}

/// The launcher's end of the pipe to its janitor.
pub(super) struct Janitor {
    feed: ChildStdin,
}

impl Janitor {
    /// Starts the janitor for a launcher whose private directory is `run_dir`. `None`,
    /// with a warning, when it cannot start (the job runs; a killed launcher then leaves
    /// its files to the next one's sweep).
    pub(super) fn start(run_dir: &std::path::Path, hostname: &str) -> Option<Janitor> {
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("no janitor (cannot find this program: {e})");
                return None;
            }
        };
        let mut cmd = Command::new(exe);
        cmd.arg("run-janitor")
            .arg("--run-dir")
            .arg(run_dir)
            .args(["--hostname", hostname])
            .stdin(Stdio::piped())
            // Not the launcher's output: a pipeline reading it must end with the launcher.
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        // SAFETY: signal(2) is async-signal-safe; ignored dispositions survive exec.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM] {
                    libc::signal(sig, libc::SIG_IGN);
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

    /// Tells the janitor about a rank it must wait for.
    pub(super) fn rank_started(&mut self, pid: i32) {
        if let Err(e) = writeln!(self.feed, "{pid}") {
            tracing::debug!("janitor gone: {e}");
        }
    }
}

/// `maestro run-janitor`: waits for the launcher to go, then cleans up after it.
pub fn main(args: &JanitorArgs) -> std::process::ExitCode {
    let ranks: Vec<u32> = std::io::stdin()
        .lock()
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let deadline = Instant::now() + RANKS_GONE;
    while ranks.iter().any(|&pid| pmix::server::process_alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if args.run_dir.exists() {
        let _ = std::fs::remove_dir_all(&args.run_dir);
    }
    fabric::sweep_stale_shm_files();
    let node = pmix::server::NodeDirectory::default_dir();
    if node.exists()
        && let Ok(dir) = pmix::server::NodeDirectory::open(&node)
    {
        dir.sweep_stale();
    }
    super::tempdir::remove_dead_system_server_file(&std::env::temp_dir(), &args.hostname);
    std::process::ExitCode::SUCCESS
}
