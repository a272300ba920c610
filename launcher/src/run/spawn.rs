//! Starting the ranks of a job (job 0 or a spawned one): each with its PMIx environment and
//! its plan's program, arguments, variables and directory, in its own process group, killed
//! if the launcher dies, its output forwarded line by line and its exit reaped by a thread.

use super::*;

/// One spawned rank.
pub(super) struct RankProc {
    pub(super) pid: i32,
    pub(super) ended: bool,
    pub(super) signalled: bool,
}

/// Why a rank could not start, and the exit code that says so (as a shell's).
#[derive(Debug)]
pub(super) struct StartError {
    why: String,
    /// 127: no such program; 126: it cannot be run; 1: the launcher failed.
    code: i32,
}

impl StartError {
    fn launcher(why: impl ToString) -> StartError {
        StartError {
            why: why.to_string(),
            code: 1,
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl Job<'_> {
    /// Starts every rank of job 0; the first that cannot start fails the job (with the
    /// shell's codes: 127 for a program not found, 126 for one that cannot run).
    pub(super) fn spawn_all(&mut self) {
        for rank in 0..self.host.plan(0).map_or(0, |p| p.nprocs()) {
            let id = RankId { job: 0, rank };
            if let Err(e) = self.spawn(id) {
                eprintln!("maestro run: rank {id}: {e}");
                self.outcome.rank_ended(id, RankEnd::Exited(e.code), false);
                self.stop(
                    StopCause::RankFailed {
                        rank: id,
                        code: e.code,
                    },
                    Duration::ZERO,
                );
                break;
            }
        }
    }

    /// Starts one rank of a registered job: its PMIx environment, its own process group,
    /// killed if the launcher dies, output forwarded and exit reaped by threads.
    ///
    /// # Errors
    /// Why it could not start (PMIx setup, no such program, no thread), for the log.
    pub(super) fn spawn(&mut self, id: RankId) -> Result<(), StartError> {
        let plan = self
            .host
            .plan(id.job)
            .ok_or_else(|| StartError::launcher(format!("no job {}", id.job)))?;
        let what = plan.ranks.get(id.rank as usize).ok_or_else(|| {
            StartError::launcher(format!("job {} has no rank {}", id.job, id.rank))
        })?;
        let proc = Proc::new(&plan.nspace, id.rank);
        let env = self
            .server
            .setup_fork(&proc)
            .map_err(StartError::launcher)?;
        let (uid, gid) = self.host.ids();
        self.server
            .register_client(&proc, uid, gid)
            .map_err(StartError::launcher)?;
        let mut cmd = self.command(id, what, env);
        let mut child = cmd.spawn().map_err(|e| StartError {
            code: match (e.kind(), e.raw_os_error()) {
                (std::io::ErrorKind::PermissionDenied, _) => 126,
                (_, Some(libc::ENOEXEC)) => 126,
                _ => 127,
            },
            why: match &what.cwd {
                Some(dir) => format!("cannot start {:?} in {}: {e}", what.program, dir.display()),
                None => format!("cannot start {:?}: {e}", what.program),
            },
        })?;
        if let Some(input) = child.stdin.take() {
            forward_stdin(input).map_err(|e| StartError::launcher(format!("stdin thread: {e}")))?;
        }
        let pid = child.id() as i32;
        if let Some(j) = &mut self.janitor {
            j.child_started(pid);
        }
        let label = match (self.opts.label, id.job) {
            (false, _) => String::new(),
            (true, 0) => format!("[{}] ", id.rank),
            (true, _) => format!("[{proc}] "),
        };
        self.host.update(id, |s| s.pid = pid);
        self.ranks.insert(
            id,
            RankProc {
                pid,
                ended: false,
                signalled: false,
            },
        );
        self.forward_outputs(id, &proc, &mut child, &label)
            .map_err(StartError::launcher)?;
        self.reap_in_thread(id, child).map_err(StartError::launcher)
    }

    /// The command of rank `id`, which runs `what` with PMIx's environment `env`: in its
    /// own process group, in the job's temporary directory, with stdin where asked, its
    /// output piped, killed if the launcher dies.
    fn command(
        &self,
        id: RankId,
        what: &super::jobs::RankPlan,
        env: Vec<(String, String)>,
    ) -> Command {
        let mut cmd = Command::new(&what.program);
        if self.opts.openmpi_compat && std::env::var_os(OPENMPI_DIRECT_LAUNCH.0).is_none() {
            cmd.env(OPENMPI_DIRECT_LAUNCH.0, OPENMPI_DIRECT_LAUNCH.1);
        }
        // The ranks' temporary files (a pool manager's Unix socket, say) go with the job,
        // even when a rank is killed.
        cmd.env("TMPDIR", self.run_dir.join("ranks"));
        if let Some(dir) = &what.cwd {
            cmd.current_dir(dir);
        }
        // The request's variables, then PMIx's (which must win: they name the server).
        let reads_stdin =
            id.job == 0 && self.opts.stdin == StdinTo::Rank(id.rank) && stdin_is_ours();
        cmd.args(&what.args)
            .envs(what.env.iter().map(|(k, v)| (k, v)))
            .envs(env)
            .stdin(if reads_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
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
        cmd
    }

    /// Forwards rank `id`'s stdout and stderr (lines labelled with `label`) to the
    /// launcher's and, where tools pulled them, to the tools.
    ///
    /// # Errors
    /// When an output thread cannot start.
    fn forward_outputs(
        &mut self,
        id: RankId,
        proc: &Proc,
        child: &mut Child,
        label: &str,
    ) -> Result<(), String> {
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
                let tx = self.tx.clone();
                let (host, sink, source) = (
                    Arc::clone(self.host),
                    self.server.output_sink(),
                    proc.clone(),
                );
                let channel = stream.channel();
                output::forward(
                    DoneOnDrop {
                        inner: src,
                        _done: done_tx,
                    },
                    (
                        stream,
                        format!("r{}.{}", id.job, id.rank),
                        label.to_string(),
                    ),
                    move |line| {
                        if host.pulled(&source, channel)
                            && let Err(e) = sink.deliver(&source, channel, line)
                        {
                            tracing::debug!("output of {source} to tools: {e}");
                        }
                    },
                    move |e: std::io::Error| {
                        let _ = tx.send(if e.kind() == std::io::ErrorKind::BrokenPipe {
                            LoopEvent::OutputClosed
                        } else {
                            LoopEvent::OutputFailed(stream, e.to_string())
                        });
                    },
                )
                .map_err(|e| format!("output thread: {e}"))?;
                self.outputs.push((id, done_rx));
            }
        }
        Ok(())
    }

    pub(super) fn reap_in_thread(&self, id: RankId, mut child: Child) -> Result<(), String> {
        let tx = self.tx.clone();
        std::thread::Builder::new()
            .name(format!("reap{}.{}", id.job, id.rank))
            .spawn(move || {
                let end = match child.wait() {
                    Ok(st) => RankEnd::from_status(st),
                    Err(_) => RankEnd::Exited(1),
                };
                let _ = tx.send(LoopEvent::RankExited(id, end));
            })
            .map(|_| ())
            .map_err(|e| format!("reaper thread: {e}"))
    }
}

/// Whether the launcher may read its standard input: not when it is a terminal of which
/// the launcher is not the foreground (`maestro run ... &`): a read would stop it
/// (SIGTTIN), and with it the job. The rank then reads nothing, as with `--stdin none`.
fn stdin_is_ours() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only query the process and its descriptor 0.
    unsafe { libc::isatty(0) == 0 || libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Copies the launcher's standard input to a rank's until either end closes (the rank
/// sees end of file when the input ends; the thread ends when the rank closed its side).
/// The thread is detached: if the input never ends it stays blocked in a read until the
/// launcher exits.
fn forward_stdin(mut to: std::process::ChildStdin) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to);
        })
        .map(|_| ())
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
