//! Starting the ranks: each with its PMIx environment, in its own process group, killed if
//! the launcher dies, its output forwarded line by line and its exit reaped by a thread.

use super::*;

/// One spawned rank.
pub(super) struct RankProc {
    pub(super) pid: i32,
    pub(super) ended: bool,
    pub(super) signalled: bool,
}

impl Job<'_> {
    pub(super) fn spawn_all(&mut self) {
        for r in 0..self.opts.nprocs {
            if let Err(msg) = self.spawn(r) {
                eprintln!("maestro run: rank {r}: {msg}");
                self.outcome.rank_ended(r, RankEnd::Exited(127), false);
                self.stop(StopCause::RankFailed { rank: r, code: 127 }, Duration::ZERO);
                break;
            }
        }
    }

    pub(super) fn spawn(&mut self, rank: u32) -> Result<(), String> {
        let proc = Proc::new(self.nspace, rank);
        let env = self.server.setup_fork(&proc).map_err(|e| e.to_string())?;
        let (uid, gid) = self.host.ids();
        self.server
            .register_client(&proc, uid, gid)
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.opts.command[0]);
        if self.opts.openmpi_compat && std::env::var_os(OPENMPI_DIRECT_LAUNCH.0).is_none() {
            cmd.env(OPENMPI_DIRECT_LAUNCH.0, OPENMPI_DIRECT_LAUNCH.1);
        }
        // The ranks' temporary files (a pool manager's Unix socket, say) go with the job,
        // even when a rank is killed.
        cmd.env("TMPDIR", run_dir(std::process::id()).join("ranks"));
        cmd.args(&self.opts.command[1..])
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        // The rank dies with the launcher. A launcher that died between fork and prctl
        // sends no signal: then the parent is no longer us, and the rank does not start.
        let launcher = std::process::id() as libc::pid_t;
        // SAFETY: prctl and getppid are async-signal-safe; prctl only sets this child's
        // parent-death signal.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != launcher {
                    return Err(std::io::Error::other("the launcher is gone"));
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", self.opts.command[0]))?;
        let pid = child.id() as i32;
        self.host.update(rank, |s| s.pid = pid);
        self.ranks.insert(
            rank,
            RankProc {
                pid,
                ended: false,
                signalled: false,
            },
        );
        for (src, stream) in [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
                output::Stream::Stdout,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
                output::Stream::Stderr,
            ),
        ] {
            if let Some(src) = src {
                let (done_tx, done_rx) = channel();
                let label = self.opts.label;
                let tx = self.tx.clone();
                output::forward(
                    DoneOnDrop {
                        inner: src,
                        _done: done_tx,
                    },
                    (stream, rank, label),
                    move || {
                        let _ = tx.send(LoopEvent::OutputClosed);
                    },
                )
                .map_err(|e| format!("output thread: {e}"))?;
                self.outputs.push(done_rx);
            }
        }
        self.reap_in_thread(rank, child)
    }

    pub(super) fn reap_in_thread(&self, rank: u32, mut child: Child) -> Result<(), String> {
        let tx = self.tx.clone();
        std::thread::Builder::new()
            .name(format!("reap{rank}"))
            .spawn(move || {
                let end = match child.wait() {
                    Ok(st) => RankEnd::from_status(st),
                    Err(_) => RankEnd::Exited(1),
                };
                let _ = tx.send(LoopEvent::RankExited(rank, end));
            })
            .map(|_| ())
            .map_err(|e| format!("reaper thread: {e}"))
    }
}

/// A reader that signals (by dropping its sender) when the forwarding thread is done.
pub(super) struct DoneOnDrop<R> {
    pub(super) inner: R,
    pub(super) _done: Sender<()>,
}

impl<R: std::io::Read> std::io::Read for DoneOnDrop<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}
