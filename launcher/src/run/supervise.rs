//! Watching the running jobs: rank exits and failures (notify the others, grace, SIGTERM,
//! SIGKILL), signals, spawn and control requests, the time limit, link changes of the
//! node's NICs, and the end. The rules are the same for every job: a failure anywhere
//! stops them all, and the launcher ends when every rank of every job has ended.

use super::*;

/// The running jobs and their supervision state.
pub(super) struct Job<'a> {
    pub(super) opts: &'a RunOptions,
    pub(super) server: &'a Server,
    pub(super) host: &'a Arc<LauncherHost>,
    /// Job 0's namespace (the others are named after it, see `jobs::nspace`).
    pub(super) nspace: &'a str,
    pub(super) hostname: String,
    /// The launcher's private directory (the ranks' `TMPDIR` is in it).
    pub(super) run_dir: std::path::PathBuf,
    /// The locality string every rank gets (they all inherit the launcher's binding).
    pub(super) locality: String,
    /// Jobs whose every rank has ended (their end was announced).
    pub(super) ended_jobs: BTreeSet<u32>,
    /// Cleans up after the launcher, however it ends (see `janitor`).
    pub(super) janitor: Option<Janitor>,
    pub(super) tx: Sender<LoopEvent>,
    pub(super) ranks: BTreeMap<RankId, RankProc>,
    pub(super) outcome: Outcome,
    pub(super) term_at: Option<Instant>,
    pub(super) kill_at: Option<Instant>,
    pub(super) deadline: Option<Instant>,
    /// With `--stop-in-init`: when to say again how to release the ranks, and how many
    /// times more (see [`HOLD_REMINDERS`]).
    pub(super) remind: Option<(Instant, u8)>,
    /// Each rank's output threads: disconnected once they drained its pipes.
    pub(super) outputs: Vec<(RankId, Receiver<()>)>,
    /// Watches the node's links; changes become `PMIX_FABRIC_UPDATED` events.
    pub(super) links: Option<inventory::netif::LinkMonitor>,
}

impl Job<'_> {
    pub(super) fn alive(&self) -> impl Iterator<Item = (&RankId, &RankProc)> {
        self.ranks.iter().filter(|(_, r)| !r.ended)
    }

    pub(super) fn supervise(&mut self, rx: &Receiver<LoopEvent>) {
        while self.alive().next().is_some() {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(LoopEvent::RankExited(rank, end)) => self.rank_exited(rank, end),
                Ok(LoopEvent::Host(HostEvent::Abort { rank, status, msg })) => {
                    eprintln!("maestro run: rank {rank} called PMIx_Abort({status}): {msg}");
                    self.notify_failure(rank, status, &format!("rank {rank} aborted: {msg}"));
                    self.stop(StopCause::Abort { rank, status }, self.opts.grace);
                }
                Ok(LoopEvent::Signal(sig)) => {
                    tracing::info!("received signal {sig}; forwarding to the ranks");
                    self.outcome.stop(StopCause::Signal(sig));
                    self.signal_all(sig);
                    self.kill_at
                        .get_or_insert(Instant::now() + self.opts.kill_after);
                }
                Ok(LoopEvent::Host(HostEvent::Control {
                    ranks,
                    signal,
                    ends_job,
                    by,
                })) => self.control(&ranks, signal, ends_job, &by),
                Ok(LoopEvent::Host(HostEvent::Spawn {
                    requestor,
                    job_info,
                    apps,
                    reply,
                })) => self.spawn_request(&requestor, &job_info, &apps, reply),
                Ok(LoopEvent::OutputClosed) => {
                    // As a pipeline's writer killed by SIGPIPE: status 141.
                    if self.outcome.stop(StopCause::Signal(libc::SIGPIPE)) {
                        self.signal_all(libc::SIGTERM);
                        self.kill_at
                            .get_or_insert(Instant::now() + self.opts.kill_after);
                    }
                }
                Ok(LoopEvent::SwitchLinks(links)) => self.switch_links_changed(&links),
                Ok(LoopEvent::OutputFailed(stream, why)) => {
                    if self.outcome.output_lost() {
                        eprintln!(
                            "maestro run: the ranks' standard {} cannot be written ({why}): what they write there is lost; the job runs on and maestro run will exit with a failure",
                            match stream {
                                super::output::Stream::Stdout => "output",
                                super::output::Stream::Stderr => "error",
                            }
                        );
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.tick(Instant::now());
        }
    }

    pub(super) fn rank_exited(&mut self, rank: RankId, end: RankEnd) {
        let signalled = match self.ranks.get_mut(&rank) {
            Some(r) => {
                r.ended = true;
                r.signalled
            }
            None => false,
        };
        self.host.update(rank, |s| s.exit_code = Some(end.code()));
        self.outcome.rank_ended(rank, end, signalled);
        self.job_may_have_ended(rank.job);
        if signalled {
            return;
        }
        let st = self.host.rank_state(rank);
        let failed_code = match end {
            RankEnd::Exited(0) if st.connected && !st.finalized => Some(1),
            RankEnd::Exited(0) => None,
            other => Some(other.code()),
        };
        if let Some(code) = failed_code {
            let why = match end {
                RankEnd::Exited(0) => {
                    "exited without calling PMIx_Finalize (mstro_finalize, for a program of the Maestro API)".to_string()
                }
                RankEnd::Exited(c) => format!("exited with status {c}"),
                RankEnd::Signaled(s) => format!("was killed by signal {s}"),
            };
            let pid = self.ranks.get(&rank).map_or(0, |r| r.pid);
            eprintln!("maestro run: rank {rank} (pid {pid}) {why}");
            self.notify_failure(rank, code, &format!("rank {rank} {why}"));
            if matches!(end, RankEnd::Exited(0)) {
                self.outcome.rank_ended(rank, RankEnd::Exited(1), false);
            }
            self.stop(StopCause::RankFailed { rank, code }, self.opts.grace);
        }
    }

    /// Tells the other ranks of its job that `rank` failed (`PMIX_ERR_PROC_ABORTED`).
    pub(super) fn notify_failure(&self, rank: RankId, code: i32, msg: &str) {
        if self.alive().all(|(&r, _)| r == rank || r.job != rank.job) {
            return;
        }
        let proc = self.host.proc_of(rank);
        let info = [
            Info::new(keys::EVENT_AFFECTED_PROC, Value::Proc(proc.clone())),
            Info::new(keys::EXIT_CODE, Value::Int(code)),
            Info::new(keys::EVENT_TEXT_MESSAGE, Value::String(msg.to_string())),
        ];
        if let Err(e) =
            self.server
                .notify_event(Status::PROC_ABORTED, &proc, Range::Namespace, &info)
        {
            tracing::warn!("notifying the job of rank {rank}'s failure: {e}");
        }
        // The other members of its groups hear of it as a group member's failure.
        for group in self.host.groups_of(rank) {
            let info = [
                Info::new(keys::GROUP_ID, Value::String(group.clone())),
                Info::new(keys::EVENT_AFFECTED_PROC, Value::Proc(proc.clone())),
            ];
            if let Err(e) = self.server.notify_event(
                Status::GROUP_MEMBER_FAILED,
                &proc,
                Range::Namespace,
                &info,
            ) {
                tracing::warn!("notifying group {group} of rank {rank}'s failure: {e}");
            }
        }
    }

    /// Records the first stop cause and schedules SIGTERM after `grace`.
    pub(super) fn stop(&mut self, cause: StopCause, grace: Duration) {
        if self.outcome.stop(cause) {
            self.term_at = Some(Instant::now() + grace);
        }
    }

    /// Raises `PMIX_FABRIC_UPDATED` to the job for every link that went down or up.
    pub(super) fn watch_links(&mut self) {
        let changes = self
            .links
            .as_mut()
            .map(inventory::netif::LinkMonitor::poll)
            .unwrap_or_default();
        if changes.is_empty() {
            return;
        }
        let source = Proc::new(super::host::server_nspace(std::process::id()), 0);
        for c in changes {
            let state = if c.up { "up" } else { "down" };
            eprintln!("maestro run: link {} {state}", c.name);
            self.host.link_changed(&c.name, c.up);
            let info = pool::pmix_events::link_info(&c.name, &c.addresses, c.up);
            if let Err(e) =
                self.server
                    .notify_event(Status::FABRIC_UPDATED, &source, Range::Namespace, &info)
            {
                tracing::warn!("notifying the job that link {} is {state}: {e}", c.name);
            }
        }
    }

    /// Raises `PMIX_FABRIC_UPDATED` to the job for every switch link of the fabric beyond
    /// the node that went down or up.
    fn switch_links_changed(&self, links: &[inventory::switches::watch::LinkChange]) {
        let source = Proc::new(super::host::server_nspace(std::process::id()), 0);
        for l in links {
            eprintln!("maestro run: {l}");
            let info = pool::pmix_events::switch_link_info(&l.link, l.up);
            if let Err(e) =
                self.server
                    .notify_event(Status::FABRIC_UPDATED, &source, Range::Namespace, &info)
            {
                tracing::warn!("notifying the job of {l}: {e}");
            }
        }
    }

    pub(super) fn tick(&mut self, now: Instant) {
        self.host.expire();
        self.watch_links();
        self.remind_of_release(now);
        if let Some(d) = self.deadline
            && now >= d
        {
            self.deadline = None;
            eprintln!("maestro run: time limit reached; stopping the job");
            if self.outcome.stop(StopCause::TimeLimit) {
                self.term_at = Some(now);
            }
        }
        if let Some(t) = self.term_at
            && now >= t
        {
            self.term_at = None;
            let left = self.ranks.values().filter(|r| !r.ended).count();
            if let (Some(why), true) = (self.outcome.cause_words(), left > 0) {
                eprintln!(
                    "maestro run: stopping the {left} rank(s) still running because {why} (SIGTERM now, SIGKILL {:.0} s later)",
                    self.opts.kill_after.as_secs_f64()
                );
            }
            self.signal_all(libc::SIGTERM);
            self.kill_at.get_or_insert(now + self.opts.kill_after);
        }
        if let Some(k) = self.kill_at
            && now >= k
        {
            self.kill_at = None;
            self.signal_all(libc::SIGKILL);
        }
    }

    /// With `--stop-in-init`, while no rank has ended: says again how the ranks held in
    /// `PMIx_Init` are released, every [`HOLD_REMINDER`], at most [`HOLD_REMINDERS`] times.
    fn remind_of_release(&mut self, now: Instant) {
        let Some((at, left)) = self.remind.filter(|(at, _)| now >= *at) else {
            return;
        };
        if left == 0 || self.ranks.values().any(|r| r.ended) {
            self.remind = None;
            return;
        }
        eprintln!("maestro run: {}", release_hint(std::process::id()));
        self.remind = Some((at + HOLD_REMINDER, left - 1));
    }

    /// Sends `sig` to the process group of every live rank.
    pub(super) fn signal_all(&mut self, sig: i32) {
        for r in self.ranks.values_mut().filter(|r| !r.ended) {
            r.signalled = true;
            crate::process::signal_group(r.pid, sig);
        }
    }

    /// `PMIx_Job_control_nb` from a rank or tool: signal `ranks`; a kill or terminate of
    /// the whole of job 0 ends the launcher (exit code 128 + signal), SIGKILL following a
    /// SIGTERM after `--kill-after` as for the launcher's own signals. Ranks killed or
    /// terminated this way do not count as failures.
    fn control(&mut self, ranks: &[RankId], signal: i32, ends_job: bool, by: &str) {
        let names: Vec<String> = ranks.iter().map(RankId::to_string).collect();
        eprintln!(
            "maestro run: {by} asked for signal {signal} to ranks [{}]",
            names.join(", ")
        );
        let job0 = self.host.plan(0).map_or(0, |p| p.nprocs());
        let whole = (0..job0).all(|rank| ranks.contains(&RankId { job: 0, rank }));
        if ends_job && whole {
            self.outcome.stop(StopCause::Signal(signal));
            self.kill_at
                .get_or_insert(Instant::now() + self.opts.kill_after);
        }
        for rank in ranks {
            if let Some(r) = self.ranks.get_mut(rank).filter(|r| !r.ended) {
                r.signalled |= ends_job;
                crate::process::signal_group(r.pid, signal);
            }
        }
    }

    /// Kills what is left in the ranks' process groups (background children of ranks).
    pub(super) fn sweep_groups(&self) {
        for r in self.ranks.values() {
            crate::process::signal_group(r.pid, libc::SIGKILL);
        }
    }

    /// Waits (bounded) for the output threads to drain the ranks' pipes.
    pub(super) fn finish_outputs(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for (_, done) in self.outputs.drain(..) {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(RecvTimeoutError::Timeout) = done.recv_timeout(left) {
                tracing::warn!("a rank's output is still open (a process escaped its group?)");
            }
        }
    }
}

/// How often `maestro run --stop-in-init` says again how to release the held ranks.
pub(super) const HOLD_REMINDER: Duration = Duration::from_secs(60);

/// How many times it says it again (a released job that runs long is not reminded on).
pub(super) const HOLD_REMINDERS: u8 = 3;

/// How a launcher's ranks held in `PMIx_Init` are released.
pub(super) fn release_hint(pid: u32) -> String {
    format!(
        "the ranks wait in PMIx_Init for a debugger (--stop-in-init): a PMIx tool attached to pid {pid} releases them by raising PMIX_DEBUGGER_RELEASE to job maestro.job.{pid} (custom range: the job's processes)"
    )
}
