//! Registering a job with the PMIx server and serving `PMIx_Spawn`: a spawned job gets a
//! namespace of its own with every key job 0 gets (size, ranks, local peers, app numbers,
//! node and fabric keys) plus `PMIX_PARENT_ID` and `PMIX_SPAWNED`; its ranks start like
//! job 0's; the requestor gets the namespace once they all started, and, if it asked with
//! `PMIX_NOTIFY_COMPLETION`, a `PMIX_EVENT_JOB_END` event when they all ended.

use super::*;
use pmix::server::{App, SpawnReply};

use crate::run::jobs::{self, RankId};

/// How long the end of a job waits for its ranks' output to be drained (a background
/// child of a rank may hold the pipe open for good).
const OUTPUT_DRAIN: Duration = Duration::from_secs(1);

impl Job<'_> {
    /// Registers job `job` (already added to the host) with the PMIx server.
    ///
    /// # Errors
    /// The PMIx server's, when it refuses the namespace.
    pub(super) fn register(&self, job: u32) -> Result<(), pmix::Error> {
        let plan = self
            .host
            .plan(job)
            .ok_or_else(|| pmix::Error::InvalidArgument(format!("no job {job}")))?;
        let n = plan.nprocs();
        let app_info = self.server.setup_application(&plan.nspace, &[])?;
        let fabric = self.host.fabric();
        let mut extra_job_info: Vec<Info> = app_info
            .into_iter()
            .filter(|i| !matches!(i.value, Value::Other(_)))
            .chain(fabric.iter().flat_map(|f| f.job_info()))
            .collect();
        if plan.stop_in_init {
            extra_job_info.push(Info::new(keys::DEBUG_STOP_IN_INIT, Value::Bool(true)));
        }
        if let Some(parent) = &plan.parent {
            extra_job_info.push(Info::new(keys::PARENT_ID, Value::Proc(parent.clone())));
            extra_job_info.push(Info::new(keys::SPAWNED, Value::Bool(true)));
        }
        let layout = JobLayout {
            nspace: plan.nspace.clone(),
            jobid: plan.nspace.clone(),
            hostname: self.hostname.clone(),
            nprocs: n,
            locality: vec![self.locality.clone(); n as usize],
            appnums: plan.appnums(),
            extra_job_info,
            extra_proc_info: fabric.map(|f| f.proc_info(n)).unwrap_or_default(),
        };
        self.server
            .register_nspace(&plan.nspace, n, &layout.to_infos()?)?;
        self.server.setup_local_support(&plan.nspace, &[])
    }

    /// Serves a `PMIx_Spawn`: plans, registers and starts the job, then answers with its
    /// namespace. A malformed request is answered `PMIX_ERR_BAD_PARAM`; a job that cannot
    /// be registered or whose ranks cannot all start (the started ones are killed, and do
    /// not count as failures), or a request that comes while the launcher is stopping,
    /// `PMIX_ERR_JOB_FAILED_TO_LAUNCH`. Each reason is written on the launcher's stderr.
    pub(super) fn spawn_request(
        &mut self,
        requestor: &Proc,
        job_info: &[Info],
        apps: &[App],
        reply: SpawnReply,
    ) {
        let failed = Status::JOB_FAILED_TO_LAUNCH;
        if self.outcome.stopping() {
            eprintln!("maestro run: spawn from {requestor} refused: the jobs are being stopped");
            return reply.send(Err(failed));
        }
        let job = self.host.job_count();
        // Ranks ever started are numbered in 16 bits; processes alive are capped.
        let alive = self.alive().count() as u32;
        let room = u32::from(u16::MAX)
            .saturating_sub(self.ranks.len() as u32)
            .min(self.opts.max_procs.saturating_sub(alive))
            .min(self.opts.max_spawn);
        let nspace = jobs::nspace(self.nspace, job);
        let plan = match JobPlan::spawn(nspace.clone(), requestor, job_info, apps, room) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("maestro run: spawn from {requestor} refused: {e}");
                return reply.send(Err(Status::BAD_PARAM));
            }
        };
        let (n, command, forward) = (plan.nprocs(), plan.command_of(0), plan.forward);
        self.host.add_job(plan);
        if let Err(e) = self.register(job) {
            eprintln!("maestro run: spawn from {requestor}: cannot register {nspace}: {e}");
            self.ended_jobs.insert(job);
            return reply.send(Err(failed));
        }
        // A requestor that asked for the job's output (a tool, as `prun` does) gets it
        // through libpmix's IOF, as if it had pulled it; from the first line on (libpmix holds
        // what comes before the requestor's registration).
        if !forward.is_empty() {
            self.host
                .forward_output(Proc::wildcard(nspace.clone()), forward);
        }
        for rank in 0..n {
            let id = RankId { job, rank };
            if let Err(msg) = self.spawn(id) {
                eprintln!("maestro run: spawn from {requestor}: rank {id}: {msg}");
                self.abandon_job(job);
                return reply.send(Err(failed));
            }
        }
        tracing::info!("{requestor} spawned {nspace}: {n} rank(s) of {command}");
        reply.send(Ok(nspace));
    }

    /// Kills the ranks of a job that could not start completely; they are not failures.
    fn abandon_job(&mut self, job: u32) {
        for (_, r) in self
            .ranks
            .iter_mut()
            .filter(|(id, r)| id.job == job && !r.ended)
        {
            r.signalled = true;
            crate::process::signal_group(r.pid, libc::SIGKILL);
        }
        // Its end is not announced: the requestor was told it failed to launch.
        self.ended_jobs.insert(job);
    }

    /// Announces the end of `job` once every rank of it ended: a `PMIX_EVENT_JOB_END`
    /// event (affected proc: the job's wildcard; `PMIX_JOB_TERM_STATUS` and
    /// `PMIX_EXIT_CODE`: its worst exit code) to the process that asked for it.
    pub(super) fn job_may_have_ended(&mut self, job: u32) {
        let Some(plan) = self.host.plan(job) else {
            return;
        };
        let mut worst = 0;
        for rank in 0..plan.nprocs() {
            match self.ranks.get(&RankId { job, rank }) {
                Some(r) if r.ended => {
                    worst = worst.max(
                        self.host
                            .rank_state(RankId { job, rank })
                            .exit_code
                            .unwrap_or(0),
                    )
                }
                _ => return,
            }
        }
        if !self.ended_jobs.insert(job) {
            return;
        }
        // Its output first (as PRRTE does): a tool that hears of the end has all of it.
        let deadline = Instant::now() + OUTPUT_DRAIN;
        for (_, done) in self.outputs.iter().filter(|(id, _)| id.job == job) {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(RecvTimeoutError::Timeout) = done.recv_timeout(left) {
                tracing::debug!("a rank of job {job} left its output open (a child of it?)");
            }
        }
        tracing::info!("job {} ended (worst exit code {worst})", plan.nspace);
        let Some(to) = &plan.notify else { return };
        let source = Proc::new(host::server_nspace(std::process::id()), 0);
        let info = [
            Info::new(
                keys::EVENT_AFFECTED_PROC,
                Value::Proc(Proc::wildcard(plan.nspace.clone())),
            ),
            Info::new(
                keys::JOB_TERM_STATUS,
                Value::Status(if worst == 0 {
                    Status::SUCCESS
                } else {
                    Status::JOB_TERMINATED
                }),
            ),
            Info::new(keys::EXIT_CODE, Value::Int(worst)),
            Info::new(keys::EVENT_CUSTOM_RANGE, Value::Proc(to.clone())),
            Info::new(keys::EVENT_NON_DEFAULT, Value::Bool(true)),
        ];
        if let Err(e) = self
            .server
            .notify_event(Status::JOB_END, &source, Range::Custom, &info)
        {
            tracing::warn!("telling {to} that {} ended: {e}", plan.nspace);
        }
    }
}
