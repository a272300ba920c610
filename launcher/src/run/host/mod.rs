//! What `maestro run` answers when PMIx calls up: publish/lookup (a [`PublishStore`]),
//! credentials (HMAC, see `credential`), queries (namespaces, process table, job size,
//! psets, spawn support), tool connections, abort/finalize bookkeeping, and the requests
//! the launcher's main loop carries out (spawn, job control), for every job of the
//! launcher (see `jobs`).
//!
//! The host serves only its own user: a tool is refused when it claims another user id or
//! when the kernel shows another user holding a connection to the server's port (see
//! `peers`; OpenPMIx believes the uid a TCP peer claims), and publish, lookup, credentials
//! and queries are answered only to the job's ranks and the tools that were accepted.

mod queries;
mod upcalls;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use pmix::server::{App, IofChannel, IofChannels, SpawnReply};
use pmix::{Info, Proc};

use crate::publish::{NodeDirectory, PublishStore};
use crate::run::credential::Authority;
use crate::run::fabric::{FabricView, Switches};
use crate::run::jobs::{JobPlan, RankId};

/// The PMIx server's own namespace in the launcher with `pid` (its rank 0 is the
/// launcher; libpmix relays tools' queries under this name).
pub fn server_nspace(pid: u32) -> String {
    format!("maestro.host.{pid}")
}

/// What the host reports to the launcher's main loop.
pub enum HostEvent {
    /// A rank called `PMIx_Abort`.
    Abort {
        /// The rank.
        rank: RankId,
        /// Its status.
        status: i32,
        /// Its message.
        msg: String,
    },
    /// A rank or tool asked to signal ranks (`PMIx_Job_control_nb`).
    Control {
        /// The ranks.
        ranks: Vec<RankId>,
        /// The signal.
        signal: i32,
        /// The job ends with it (kill, terminate): the exit code says so.
        ends_job: bool,
        /// Who asked, for the log.
        by: String,
    },
    /// A rank or tool asked for a new job (`PMIx_Spawn`).
    Spawn {
        /// Who asked.
        requestor: Proc,
        /// The job-level directives.
        job_info: Vec<Info>,
        /// What to run.
        apps: Vec<App>,
        /// The answer, once the job started or could not.
        reply: SpawnReply,
    },
}

/// Per-rank state that queries and credentials read.
#[derive(Clone, Debug, Default)]
pub struct RankState {
    /// OS process id (0 before spawn).
    pub pid: i32,
    /// Exit code once ended.
    pub exit_code: Option<i32>,
    /// Connected to PMIx.
    pub connected: bool,
    /// Called `PMIx_Finalize`.
    pub finalized: bool,
}

/// A publish store that shares `PMIX_RANGE_GLOBAL` data with the user's other jobs on
/// this node; memory-only (with a warning) if the node directory cannot be used.
fn node_store() -> PublishStore {
    let node = NodeDirectory::default_dir()
        .map_err(safefs::Error::into_io)
        .and_then(|d| NodeDirectory::open(&d));
    match node {
        Ok(node) => PublishStore::with_node_directory(node),
        Err(e) => {
            eprintln!("maestro run: publish/lookup stays within this job: {e}");
            PublishStore::default()
        }
    }
}

/// A constructed group: its members and the context id it was given, if asked.
type Group = (Vec<Proc>, Option<usize>);

/// A job as the host knows it: its plan and its ranks' states.
struct JobRecord {
    plan: Arc<JobPlan>,
    ranks: Vec<RankState>,
}

/// The launcher's [`pmix::Host`].
pub struct LauncherHost {
    /// Job 0's namespace.
    nspace: String,
    hostname: String,
    uid: u32,
    gid: u32,
    /// Every job, by job number.
    jobs: Mutex<Vec<JobRecord>>,
    store: PublishStore,
    authority: Authority,
    tools: AtomicU32,
    /// The namespaces of the tools accepted (the only ones besides the job's ranks that
    /// get answers).
    accepted_tools: Mutex<BTreeSet<String>>,
    /// The groups constructed and not destructed, by name.
    groups: Mutex<BTreeMap<String, Group>>,
    /// The next group context id (unique for the launcher's lifetime).
    next_context: std::sync::atomic::AtomicUsize,
    /// Something after which libpmix's own teardown is not safe happened (see
    /// `teardown_unsafe`).
    unsafe_teardown: std::sync::atomic::AtomicBool,
    /// The PMIx server's TCP ports (found at the first connection), to see who is
    /// connected.
    server_ports: std::sync::OnceLock<Vec<u16>>,
    events: Mutex<Sender<HostEvent>>,
    fabric: std::sync::OnceLock<FabricView>,
    /// The fabric beyond the node, when the job was given one.
    switches: Option<Arc<Switches>>,
    /// Link states the link monitor saw change since launch, by interface.
    links: Mutex<BTreeMap<String, bool>>,
    /// The output tools pulled (`PMIx_IOF_pull`): which processes, which channels.
    pulls: Mutex<Vec<(Vec<Proc>, IofChannels)>>,
}

impl LauncherHost {
    /// A host whose job 0 is `first`.
    pub fn new(
        first: JobPlan,
        hostname: &str,
        authority: Authority,
        events: Sender<HostEvent>,
        switches: Option<Arc<Switches>>,
    ) -> LauncherHost {
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        LauncherHost {
            nspace: first.nspace.clone(),
            hostname: hostname.to_string(),
            uid,
            gid,
            jobs: Mutex::new(vec![JobRecord {
                ranks: vec![RankState::default(); first.ranks.len()],
                plan: Arc::new(first),
            }]),
            store: node_store(),
            authority,
            tools: AtomicU32::new(0),
            accepted_tools: Mutex::new(BTreeSet::new()),
            server_ports: std::sync::OnceLock::new(),
            unsafe_teardown: std::sync::atomic::AtomicBool::new(false),
            groups: Mutex::new(BTreeMap::new()),
            next_context: std::sync::atomic::AtomicUsize::new(1),
            events: Mutex::new(events),
            fabric: std::sync::OnceLock::new(),
            switches,
            links: Mutex::new(BTreeMap::new()),
            pulls: Mutex::new(Vec::new()),
        }
    }

    /// Forwards the output of `procs` on `channels` to the tools libpmix registered for it
    /// (a spawn with `PMIX_FWD_STDOUT`, say).
    pub fn forward_output(&self, procs: Proc, channels: IofChannels) {
        self.pulls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((vec![procs], channels));
    }

    /// Whether a tool pulled `proc`'s output on `channel`.
    pub fn pulled(&self, proc: &Proc, channel: IofChannel) -> bool {
        self.pulls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|(procs, channels)| {
                channels.contains(channel)
                    && procs.iter().any(|p| {
                        p.nspace == proc.nspace
                            && (p.rank == proc.rank || p.rank == pmix::RANK_WILDCARD)
                    })
            })
    }

    /// The fabric view, once installed.
    pub fn fabric(&self) -> Option<&FabricView> {
        self.fabric.get()
    }

    /// Records that `name`'s link went up or down, so fabric queries answer with it.
    pub fn link_changed(&self, name: &str, up: bool) {
        self.links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_string(), up);
    }

    /// Installs the fabric view once it is collected (after the server started).
    pub fn set_fabric(&self, view: FabricView) {
        if self.fabric.set(view).is_err() {
            tracing::warn!("fabric view set twice; keeping the first");
        }
    }

    /// Adds a job (before its ranks start) and returns its number.
    pub fn add_job(&self, plan: JobPlan) -> u32 {
        let mut jobs = self.lock_jobs();
        jobs.push(JobRecord {
            ranks: vec![RankState::default(); plan.ranks.len()],
            plan: Arc::new(plan),
        });
        (jobs.len() - 1) as u32
    }

    /// The plan of job `job` (the host keeps every job's plan: queries read it, the
    /// launcher starts ranks from it).
    pub fn plan(&self, job: u32) -> Option<Arc<JobPlan>> {
        self.lock_jobs()
            .get(job as usize)
            .map(|j| Arc::clone(&j.plan))
    }

    /// Every job's plan, by job number.
    pub fn plans(&self) -> Vec<Arc<JobPlan>> {
        self.lock_jobs()
            .iter()
            .map(|j| Arc::clone(&j.plan))
            .collect()
    }

    /// The number of jobs so far (the next spawn's number).
    pub fn job_count(&self) -> u32 {
        self.lock_jobs().len() as u32
    }

    /// The PMIx name of a rank.
    pub fn proc_of(&self, id: RankId) -> Proc {
        Proc::new(crate::run::jobs::nspace(&self.nspace, id.job), id.rank)
    }

    /// The groups `rank` belongs to (to tell their other members when it fails).
    pub fn groups_of(&self, rank: RankId) -> Vec<String> {
        let me = self.proc_of(rank);
        let wild = Proc::wildcard(&me.nspace);
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, (members, _))| members.contains(&me) || members.contains(&wild))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether libpmix's own teardown (deregistrations, `PMIx_server_finalize`) is unsafe
    /// now, so that the launcher skips it and leaves with `_exit`: after a tool or client
    /// was turned away (OpenPMIx 4.2 cannot refuse either cleanly: a refused tool is left
    /// pending, a refused client goes down an error path that leaves the server's locks in
    /// a bad state), and after a group was constructed (its finalize then waits forever for
    /// a libevent lock while stopping its progress thread, measured on 4.2.2).
    pub fn teardown_unsafe(&self) -> bool {
        self.unsafe_teardown.load(Ordering::Relaxed)
    }

    /// The uid and gid ranks run as (and are registered with).
    pub fn ids(&self) -> (u32, u32) {
        (self.uid, self.gid)
    }

    /// Updates one rank's state.
    pub fn update(&self, id: RankId, f: impl FnOnce(&mut RankState)) {
        if let Some(s) = self
            .lock_jobs()
            .get_mut(id.job as usize)
            .and_then(|j| j.ranks.get_mut(id.rank as usize))
        {
            f(s);
        }
    }

    /// A copy of one rank's state.
    pub fn rank_state(&self, id: RankId) -> RankState {
        self.lock_jobs()
            .get(id.job as usize)
            .and_then(|j| j.ranks.get(id.rank as usize))
            .cloned()
            .unwrap_or_default()
    }

    /// Forgets what the jobs published, here and node-wide (called when they all ended).
    pub fn job_ended(&self) {
        for job in self.lock_jobs().iter() {
            self.store.forget_nspace(&job.plan.nspace);
        }
    }

    /// Answers waiting lookups that other jobs satisfied and fails those that waited too
    /// long (called from the main loop's tick).
    pub fn expire(&self) {
        self.store.expire(std::time::Instant::now());
    }

    fn lock_jobs(&self) -> std::sync::MutexGuard<'_, Vec<JobRecord>> {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The job number of `nspace`, if it is one of the launcher's jobs.
    fn job_of(&self, nspace: &str) -> Option<u32> {
        self.lock_jobs()
            .iter()
            .position(|j| j.plan.nspace == nspace)
            .map(|j| j as u32)
    }

    /// The launcher's rank `proc` names, if any (a wildcard rank is none).
    fn ours(&self, proc: &Proc) -> Option<RankId> {
        self.job_of(&proc.nspace).map(|job| RankId {
            job,
            rank: proc.rank,
        })
    }

    /// Whether `proc` may be answered: a rank of the job or an accepted tool (the server
    /// itself asks with no requester).
    fn trusted(&self, proc: &Proc) -> bool {
        self.ours(proc).is_some()
            || proc.nspace == server_nspace(std::process::id())
            || self
                .accepted_tools
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(&proc.nspace)
    }

    /// Cuts off every connection another user holds to the server (see `peers`); why, if
    /// there were any (the connection being made may be one of them: it is refused).
    ///
    /// # Errors
    /// Why the connections cannot be checked (no `/proc`): a tool is then refused, a
    /// client (whose uid libpmix checked against its registration) is not.
    fn cut_off_intruders(&self) -> Result<Option<String>, String> {
        if self.server_ports.get().is_none() {
            // Found at the first connection: the server listens by then, and nothing else
            // of the launcher does.
            match crate::run::peers::own_listening_ports() {
                Ok(ports) if !ports.is_empty() => {
                    let _ = self.server_ports.set(ports);
                }
                Ok(_) => return Err("the server listens on no TCP port it can check".into()),
                Err(e) => return Err(format!("the server's ports cannot be found ({e})")),
            }
        }
        let Some(ports) = self.server_ports.get() else {
            return Err("the server's ports are not known, so its peers cannot be checked".into());
        };
        let mut found = Vec::new();
        for &port in ports {
            match pool::peers::intruders(port, self.uid) {
                Ok(more) => found.extend(more),
                Err(e) => {
                    return Err(format!(
                        "its peers cannot be checked (the kernel's TCP socket table: {e})"
                    ));
                }
            }
        }
        if found.is_empty() {
            return Ok(None);
        }
        let cut = crate::run::peers::cut_off(&found);
        let uids: BTreeSet<u32> = found.iter().map(|i| i.uid).collect();
        Ok(Some(format!(
            "uid {uids:?} connected to the server's ports {ports:?} ({cut} connection(s) cut off); this launcher serves uid {} only",
            self.uid
        )))
    }

    fn send(&self, ev: HostEvent) {
        let tx = self
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tx.send(ev).is_err() {
            tracing::warn!("launcher main loop is gone; event dropped");
        }
    }
}
