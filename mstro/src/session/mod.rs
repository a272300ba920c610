//! The front door: one call that joins the right pool manager however the process was
//! launched, with the credential and fabric that launch allows ([`Session::join`]), or
//! serves a pool manager from this process ([`Session::serve`]).
//!
//! Where the pool manager is found, in order:
//! 1. `MSTRO_POOL_MANAGER_INFO` (a PM of another job: `maestro pm`, a PM tool), or the
//!    file `MSTRO_POOL_MANAGER_INFO_FILE` names (`maestro pm --info-file` on a shared file
//!    system: jobs of other allocations), waited for up to `MSTRO_POOL_MANAGER_WAIT`
//!    seconds (default 30);
//! 2. under a PMIx host (`maestro run`, `srun --mpi=pmix`, `mpirun`): the PM info rank
//!    `MSTRO_POOL_MANAGER_RANK` (default 0) of this job put under
//!    [`maestro_keys::PM_INFO`], and the PM info another job published for the
//!    workflow name (`PMIx_Lookup`, where the host supports it), polled together for up to
//!    `MSTRO_POOL_MANAGER_WAIT` seconds (default 30; the PM rank itself and one-process
//!    jobs only look once);
//! 3. otherwise, for a one-process program (or with `MSTRO_LOCAL_POOL=1`), a *local pool*:
//!    a pool manager inside this process, reachable only from it, whose threads exchange
//!    CDOs without a copy. A rank of a multi-process job fails instead, with
//!    [`Status::NoPm`] saying how to start one: its ranks need one PM to meet, and a silent
//!    pool of its own would only wait out `MSTRO_TIMEOUT` on its first demand.
//!
//! A process that found its PM outside the job (1, or the published name) as the PM rank
//! puts that PM info under the job key too, so the rest of the job finds it at once.

mod settings;
pub mod variables;

use settings::env_text;
pub use settings::{
    DEFAULT_PM_WAIT, DEFAULT_TIMEOUT, INLINE_MAX_ENV, LOCAL_POOL_ENV, NAME_OWNERS_ENV, PM_RANK_ENV,
    PM_WAIT_ENV, Settings, TIMEOUT_ENV, WAIT_SPIN_ENV, pmix_host,
};

use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::bootstrap::{self, PmInfo};
use pool::{Client, JoinOptions, PmConfig, ShardedPool};

use crate::status::{Error, Result, Status};

/// How a [`Session`] found its pool manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// `MSTRO_POOL_MANAGER_INFO`.
    Environment,
    /// The file `MSTRO_POOL_MANAGER_INFO_FILE` names.
    InfoFile(std::path::PathBuf),
    /// The job key of a rank of this PMIx job.
    JobKey {
        /// The rank.
        rank: u32,
    },
    /// The name another job published through PMIx.
    Published,
    /// This process serves it ([`Session::serve`]).
    ServedHere,
    /// A local pool: no pool manager anywhere else.
    LocalPool,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Environment => f.write_str("MSTRO_POOL_MANAGER_INFO"),
            Found::InfoFile(path) => write!(f, "the PM info file {}", path.display()),
            Found::JobKey { rank } => write!(f, "the PMIx job key of rank {rank}"),
            Found::Published => f.write_str("the name published through PMIx"),
            Found::ServedHere => f.write_str("this process serves it"),
            Found::LocalPool => f.write_str("a local pool inside this process"),
        }
    }
}

/// A joined pool: the blocking client, and the pool manager when this process runs it
/// (served, or a local pool).
pub struct Session {
    settings: Settings,
    client: Option<Client>,
    pm: Option<ShardedPool>,
    /// The PM this process runs shows JOINs' PMIx credentials to its PMIx host.
    credentials_checked: bool,
    info: PmInfo,
    found: Found,
    /// The key this process published (to unpublish when it stops serving).
    published: Option<String>,
    /// The info file a standby that took over wrote (held open and locked; removed when
    /// it stops serving).
    info_file: Option<(std::path::PathBuf, std::fs::File)>,
    pmix: Option<Arc<pmix::Client>>,
}

/// What a standby pool manager takes over ([`Session::take_over`]): the PM that is gone
/// and the apps it had, expected back.
#[derive(Debug)]
pub struct Takeover {
    /// The PM info of the one that is gone (its workflow secret is kept).
    pub previous: PmInfo,
    /// Its apps as the standby last saw them: id and `component:index`.
    pub apps: Vec<(pool::proto::AppId, String)>,
    /// Where its apps look for the PM again: the standby writes its info there.
    pub info_file: Option<std::path::PathBuf>,
}

impl Session {
    /// Joins the pool manager of the workflow, wherever it is (see the module docs), or
    /// starts a local pool when there is none and this is a one-process program (or
    /// `MSTRO_LOCAL_POOL=1`).
    ///
    /// # Errors
    /// [`Status::NoPm`] when the PM found cannot be reached or refuses this process, or a
    /// rank of a multi-process job found none within `MSTRO_POOL_MANAGER_WAIT`;
    /// [`Status::Invarg`] for a malformed `MSTRO_POOL_MANAGER_INFO` or PM info found through
    /// PMIx; [`Status::Fail`] when no fabric endpoint opens.
    pub fn join(settings: &Settings) -> Result<Session> {
        let (info, found) = match find(settings)? {
            Some(f) => f,
            None if !settings.local_pool_allowed() => return Err(no_pm(settings)),
            None => {
                // Said once, at info level: a program that meant to reach other processes
                // learns why it does not (MSTRO_LOG_LEVEL=info).
                let why = if settings.local_pool {
                    format!("{LOCAL_POOL_ENV}=1")
                } else {
                    format!("a one-process program, no {}", bootstrap::PM_INFO_ENV)
                };
                // A process told its workflow's name meant to meet others: said as a
                // warning (it would otherwise wait for their CDOs until its timeout).
                if !settings.local_pool && std::env::var_os("MSTRO_WORKFLOW_NAME").is_some() {
                    tracing::warn!(
                        "no pool manager of workflow {:?} found ({why}): this process runs a local pool of its own, and CDOs of other processes never reach it; give it the PM's line ({}) or {}",
                        settings.workflow,
                        bootstrap::PM_INFO_ENV,
                        bootstrap::PM_INFO_FILE_ENV
                    );
                } else {
                    tracing::info!(
                        "no pool manager to join ({why}): a local pool inside this process; only its threads exchange CDOs"
                    );
                }
                return Session::start(settings, PmRole::LocalPool, None);
            }
        };
        tracing::debug!("pool manager of {:?} found by {found}", info.workflow);
        let scope = scope(settings, &found, &info);
        let client = connect(settings, (&info, &found), scope, settings.credential())?;
        Ok(Session {
            settings: settings.clone(),
            client: Some(client),
            pm: None,
            credentials_checked: false,
            info,
            found,
            published: None,
            info_file: None,
            pmix: settings.pmix.clone(),
        })
    }

    /// Starts a pool manager in this process for the workflow, listening on every
    /// interface (and a private Unix socket), joins it, then announces it through PMIx
    /// where the process runs under a PMIx host (job key + publish; JOINs must then carry a
    /// valid credential if the host issues them): no other app can find the PM before
    /// this process is one of its members.
    ///
    /// # Errors
    /// [`Status::Fail`] if the PM cannot listen or the announcement fails.
    pub fn serve(settings: &Settings) -> Result<Session> {
        Session::start(settings, PmRole::Served, None)
    }

    /// Stands by for the active pool manager `target` names (`MSTRO_PM_STANDBY_FOR`), as
    /// `maestro pm --standby-for` does ([`pool::standby::watch`]), until it is gone on
    /// evidence, then takes over from it ([`Session::take_over`]).
    ///
    /// # Errors
    /// [`Status::NoPm`] if it stopped on purpose (nothing to take over) or no active PM
    /// was found within `MSTRO_POOL_MANAGER_WAIT` (30 s by default); as
    /// [`Session::take_over`].
    pub fn stand_by(settings: &Settings, target: &pool::standby::Target) -> Result<Session> {
        use pool::standby::Watched;
        let wait = settings.pm_wait.unwrap_or(pool::standby::FIRST_CONTACT);
        tracing::info!(
            "standing by for the pool manager of workflow {:?}",
            settings.workflow
        );
        let watched = pool::standby::watch(|| target.find(), wait, || false)
            .map_err(|e| Error::new(Status::NoPm, format!("standing by: {e}")))?;
        match watched {
            Watched::Gone { info, apps } => {
                tracing::warn!(
                    "the pool manager of workflow {:?} is gone ({} apps expected back): taking over",
                    info.workflow,
                    apps.len()
                );
                let takeover = Takeover {
                    previous: info,
                    apps,
                    info_file: target.info_file().map(Into::into),
                };
                Session::take_over(settings, takeover)
            }
            Watched::Stopped | Watched::Interrupted => Err(Error::new(
                Status::NoPm,
                "the pool manager this process stood by for stopped on purpose: nothing to take over",
            )),
        }
    }

    /// Starts a pool manager in this process that takes over from the one of the workflow
    /// that is gone (`MSTRO_PM_STANDBY_FOR`): with its workflow secret and a grace period
    /// of `MSTRO_PM_GRACE` in which its apps rejoin and replay what they hold; its info
    /// goes to the file where they look first, then it is announced as [`Session::serve`]
    /// announces (an announcement PMIx refuses is logged: the info file is where the
    /// apps look). This process joins it once the grace period is over.
    ///
    /// # Errors
    /// [`Status::Fail`] if the PM cannot listen or its info file cannot be written.
    pub fn take_over(settings: &Settings, takeover: Takeover) -> Result<Session> {
        Session::start(settings, PmRole::Served, Some(takeover))
    }

    fn start(settings: &Settings, role: PmRole, takeover: Option<Takeover>) -> Result<Session> {
        let secret = match &takeover {
            Some(t) => t.previous.secret.clone(),
            None => bootstrap::new_secret().map_err(|e| {
                Error::new(Status::Fail, format!("drawing the workflow secret: {e}"))
            })?,
        };
        // A PM whose job is all on this node listens on loopback (and its Unix socket)
        // only; one whose job spans nodes on every interface, so that control traffic
        // survives a link going down (transfers fall back to the next network too).
        let everywhere =
            matches!(role, PmRole::Served) && matches!(job_scope(settings), fabric::Scope::AnyNode);
        let listen = if everywhere {
            std::net::SocketAddr::from(([0, 0, 0, 0], 0))
        } else {
            std::net::SocketAddr::from(([127, 0, 0, 1], 0))
        };
        if settings.shards.count() > 1 && takeover.is_some() {
            return Err(Error::invarg(format!(
                "{} with {}: a sharded pool is taken over shard by shard, which mstro_pm_start does not offer yet; unset one of them",
                settings::SHARDS_ENV,
                settings::STANDBY_FOR_ENV
            )));
        }
        let credential = settings.credential();
        // A served PM under a host that issues credentials has them checked there: one
        // the host calls forged or issued to another user refuses a JOIN; one it cannot
        // check (another launcher's) leaves the secret to decide (the trust model,
        // `pool::pm::identity`).
        let credentials_checked = matches!(role, PmRole::Served) && credential.is_some();
        let fabric = settings
            .pool_fabric
            .clone()
            .map(inventory::switches::Source::File);
        let (distances, _) = pool::distances::for_pm(fabric.as_ref(), settings.pmix.as_deref())
            .map_err(|why| Error::invarg(format!("{}: {why}", settings::POOL_FABRIC_ENV)))?;
        let make = |_| {
            let mut config = PmConfig::new(&settings.workflow, &secret, vec![listen]);
            config.distances.clone_from(&distances);
            config.policy.owners = settings.owners.clone();
            // With a GFS directory the PM keeps producers' withdrawn GFS offers there.
            config.gfs_dir = settings.gfs.as_ref().map(|g| g.dir.clone());
            config.exclude_interfaces = settings.exclude_interfaces.clone();
            // A program of the library that ends without finalizing (or by Ctrl-C) leaves
            // no socket directory behind.
            config.remove_at_exit = true;
            if let Some(t) = &takeover {
                config.grace = Some(settings.grace);
                config.expect = Some(t.apps.clone());
            }
            if let (true, Some(pmix)) = (credentials_checked, &settings.pmix) {
                let pmix = pmix.clone();
                let limit = settings.timeout.min(Duration::from_secs(30));
                config.credentials = Some(Arc::new(move |cred: &[u8]| {
                    credential_verdict(pmix.validate_credential(cred, limit))
                }));
            }
            Ok(config)
        };
        // The pool's managers: one, or MSTRO_PM_SHARDS of them as threads of this process.
        let pm = ShardedPool::start(settings.shards, make)
            .map_err(|e| Error::new(Status::Fail, format!("starting the pool manager: {e}")))?;
        let info = pm.info().clone();
        let found = match role {
            PmRole::Served => Found::ServedHere,
            PmRole::LocalPool => Found::LocalPool,
        };
        let scope = match role {
            PmRole::LocalPool => fabric::Scope::SameNode,
            PmRole::Served => job_scope(settings),
        };
        // A standby's apps look for it in the file first: they rejoin in its grace period,
        // which this process's own join waits out.
        let info_file = match takeover.as_ref().and_then(|t| t.info_file.clone()) {
            Some(path) => {
                let held = info.write_file(&path).map_err(|e| {
                    Error::new(
                        Status::Fail,
                        format!("writing the PM info to {}: {e}", path.display()),
                    )
                })?;
                tracing::info!("took over: the PM info is in {}", path.display());
                Some((path, held))
            }
            None => None,
        };
        // Joined before anyone can find the PM: otherwise other apps may join, work and
        // leave while this process is still opening its fabric endpoint, and its own
        // subscriptions (a PM tool counting joins and leaves) would never hear of them.
        let client = connect(settings, (&info, &found), scope, credential)?;
        let mut published = None;
        if let (PmRole::Served, Some(pmix)) = (role, &settings.pmix) {
            let reach = match bootstrap::announce(pmix, &info, settings.timeout) {
                Ok(reach) => reach,
                Err(e) if info_file.is_some() => {
                    tracing::warn!("the PM that took over is not announced through PMIx: {e}");
                    bootstrap::Reach::Job
                }
                Err(e) => return Err(Error::new(Status::Fail, e.to_string())),
            };
            tracing::info!("pool manager announced to {reach}");
            match reach {
                bootstrap::Reach::OtherJobs => {
                    published = Some(bootstrap::published_key(&info.workflow));
                }
                // Said where the user looks: this job's ranks meet here, other jobs of
                // the name keep finding the other PM.
                bootstrap::Reach::JobBecauseTaken => eprintln!(
                    "maestro: workflow {:?} is already served by another job's pool manager; this job's pool manager serves this job only (set MSTRO_WORKFLOW_NAME to give it a workflow of its own, or join that pool manager instead of serving one)",
                    info.workflow
                ),
                bootstrap::Reach::Job => {}
            }
        }
        Ok(Session {
            settings: settings.clone(),
            client: Some(client),
            pm: Some(pm),
            credentials_checked,
            info,
            found,
            published,
            info_file,
            pmix: settings.pmix.clone(),
        })
    }

    /// The joined client.
    pub fn client(&self) -> &Client {
        match &self.client {
            Some(c) => c,
            None => unreachable!("the client lives as long as the session"),
        }
    }

    /// Joins the same pool manager once more, as another application `component` #`index`
    /// of this process (threads of a local pool that are apps of their own, say).
    ///
    /// # Errors
    /// As [`Session::join`].
    pub fn another(&self, component: &str, index: i64) -> Result<Client> {
        let mut settings = self.settings.clone();
        settings.component = component.to_string();
        settings.index = index;
        let scope = scope(&settings, &self.found, &self.info);
        connect(
            &settings,
            (&self.info, &self.found),
            scope,
            settings.credential(),
        )
    }

    /// The PM info of the pool manager joined as it was found (see [`Session::pm_info`]
    /// for the one joined now).
    pub fn info(&self) -> &PmInfo {
        &self.info
    }

    /// The PM info of the pool manager joined now: after a takeover (see
    /// `MSTRO_PM_RECLAIM_TIMEOUT`), the one that took over; what to hand another job.
    pub fn pm_info(&self) -> PmInfo {
        match &self.client {
            Some(c) => c.pm_info(),
            None => self.info.clone(),
        }
    }

    /// How the pool manager was found.
    pub fn found(&self) -> &Found {
        &self.found
    }

    /// The settings this process joined with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// True if the pool manager this process runs has JOINs' PMIx credentials checked by
    /// its PMIx host (it runs under one that issues them): a forged one, or one issued to
    /// another user, is refused.
    pub fn credentials_checked(&self) -> bool {
        self.credentials_checked
    }

    /// The PMIx host's client this session was made with, if the process runs under one
    /// (PMIx allows one per process: spawn jobs, query or publish through this one).
    pub fn pmix(&self) -> Option<&Arc<pmix::Client>> {
        self.pmix.as_ref()
    }

    /// True if this process runs the pool manager (served or a local pool).
    pub fn runs_pm(&self) -> bool {
        self.pm.is_some()
    }

    /// Handles that report fabric changes to the pool managers this process runs (one
    /// per shard; none when it runs none).
    pub fn reporters(&self) -> Vec<pool::FabricReporter> {
        self.pm
            .as_ref()
            .map(ShardedPool::reporters)
            .unwrap_or_default()
    }

    /// Leaves the pool (waiting for the PM's BYE, at most the operation timeout), then
    /// stops the pool manager this process runs, if any, and withdraws its publication.
    ///
    /// # Errors
    /// The leave's error (the PM is stopped anyway); then [`Status::Fail`] when the PM
    /// this process ran could not persist a CDO where it should (the message says where
    /// it is instead).
    pub fn close(mut self) -> Result<()> {
        let left = match self.client.take() {
            Some(c) => c.leave().map_err(Error::from),
            None => Ok(()),
        };
        let stopped = self.stop_pm();
        left.and(stopped.map_err(|e| Error::new(Status::Fail, e)))
    }

    /// Stops the PM this process runs, if any.
    ///
    /// # Errors
    /// As [`PoolManager::stop`].
    fn stop_pm(&mut self) -> std::result::Result<(), String> {
        if let (Some(key), Some(pmix)) = (self.published.take(), &self.pmix)
            && let Err(e) = pmix.unpublish(&[&key], Duration::from_secs(5))
        {
            tracing::debug!("unpublishing {key}: {e}");
        }
        if let Some((path, _held)) = self.info_file.take() {
            // Still ours: held open and locked until now.
            let _ = std::fs::remove_file(path);
        }
        self.pm.take().map_or(Ok(()), ShardedPool::stop)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The client's connection closes before its PM stops.
        self.client.take();
        // Logged as it happened; a drop has nobody to tell.
        let _ = self.stop_pm();
    }
}

#[derive(Clone, Copy)]
enum PmRole {
    Served,
    LocalPool,
}

/// Where the bytes may travel from this process: shm when every process of its PMIx job is
/// on this node, else any network.
fn job_scope(settings: &Settings) -> fabric::Scope {
    let all_local = settings.pmix.as_ref().is_some_and(|c| {
        let size = c.job_size().unwrap_or(0) as usize;
        c.local_peers().is_ok_and(|p| p.len() == size)
    });
    if all_local {
        fabric::Scope::SameNode
    } else {
        fabric::Scope::AnyNode
    }
}

/// As [`job_scope`] for a PM found in the job. A PM from outside the job serves apps this
/// job knows nothing of, which may be anywhere: shared memory only when the PM is on this
/// host (its Unix socket is here: a one-host workflow, as in a PM tool with its clients).
fn scope(settings: &Settings, found: &Found, info: &PmInfo) -> fabric::Scope {
    match found {
        Found::JobKey { .. } | Found::ServedHere | Found::LocalPool => job_scope(settings),
        Found::Environment | Found::InfoFile(_) | Found::Published => {
            let pm_here = info.endpoints.iter().any(|e| match e {
                bootstrap::ControlAddr::Unix(p) => p.exists(),
                bootstrap::ControlAddr::Tcp(_) => false,
            });
            if pm_here {
                fabric::Scope::SameNode
            } else {
                fabric::Scope::AnyNode
            }
        }
    }
}

/// The NIC this process's endpoint opens on (its name and aliases) and why: the PMIx host's
/// choice (`maestro.fabric.nic` under `maestro run`), else the one the inventory of this
/// machine gives this process's CPU binding; none when `MSTRO_OFI_IFACE` decides (the SPANK
/// plugin sets it) or nothing can be chosen.
fn chosen_nic(settings: &Settings) -> Option<(Vec<String>, String)> {
    if let Some(iface) = env_text("MSTRO_OFI_IFACE") {
        tracing::debug!("fabric: MSTRO_OFI_IFACE={iface} decides the NIC");
        return None;
    }
    let names = |inv: Option<&inventory::Inventory>, nic: &str| -> Vec<String> {
        let mut all = vec![nic.to_string()];
        if let Some(n) = inv.and_then(|i| i.nic(nic)) {
            all.extend(n.aliases.iter().cloned());
        }
        all
    };
    if let Some(pmix) = &settings.pmix
        && let Ok(pmix::Value::String(nic)) = pmix.get(
            pmix.proc(),
            maestro_keys::FABRIC_NIC,
            pmix::GetOptions::immediate(),
        )
    {
        let job = pmix::Proc::wildcard(pmix.nspace());
        let inv = match pmix.get(
            &job,
            maestro_keys::FABRIC_INVENTORY,
            pmix::GetOptions::immediate(),
        ) {
            Ok(pmix::Value::String(json)) => serde_json::from_str(&json).ok(),
            _ => None,
        };
        let why = format!(
            "{nic}, chosen by the PMIx host ({})",
            maestro_keys::FABRIC_NIC
        );
        return Some((names(inv.as_ref(), &nic), why));
    }
    let local_rank = settings
        .pmix
        .as_ref()
        .and_then(|c| c.local_rank().ok())
        .unwrap_or(0);
    match inventory::nic_for_this_process(u32::from(local_rank)) {
        Ok((inv, choice)) => {
            let why = format!("{}, chosen here: {}", choice.nic, choice.reasons.join("; "));
            Some((names(Some(&inv), &choice.nic), why))
        }
        Err(e) => {
            tracing::debug!("fabric: no NIC chosen ({e}); libfabric's order decides");
            None
        }
    }
}

/// The variable that names the fabric explicitly (`MSTRO_OFI_PROVIDER=tcp`,
/// `MSTRO_OFI_IFACE=ib0`, ...), if one does: then a fabric that cannot be opened is an
/// error, not a fallback.
fn explicit_fabric() -> Option<String> {
    ["MSTRO_OFI_PROVIDER", "FI_PROVIDER", "MSTRO_OFI_IFACE"]
        .into_iter()
        .find_map(|k| env_text(k).map(|v| format!("{k}={v}")))
}

/// Joins the PM of `info` as `settings` say, with `credential` (from the PMIx host, if it
/// issues them) and a fabric endpoint for `scope` on the chosen NIC.
fn connect(
    settings: &Settings,
    (info, found): (&PmInfo, &Found),
    scope: fabric::Scope,
    credential: Option<Vec<u8>>,
) -> Result<Client> {
    // The job, as the pool's views show it: the PMIx namespace.
    let job = settings
        .pmix
        .as_ref()
        .map(|p| p.nspace().to_string())
        .unwrap_or_default();
    let base = || {
        JoinOptions::new(&settings.component, settings.index)
            .job(&job)
            .timeout(settings.timeout)
            .wait_spin(settings.wait_spin)
            .inline_max(settings.inline_max)
            .rings(settings.rings)
            .schemas((*settings.schemas).clone())
    };
    let base = || match &settings.gfs {
        Some(g) => base().gfs(g.clone()),
        None => base(),
    };
    let mut opts = base();
    // A NIC the pool is kept off (MSTRO_OFI_IFACE_EXCLUDE) is no choice: libfabric's order
    // among the others decides.
    let nic = chosen_nic(settings).filter(|(names, why)| {
        let excluded = names
            .iter()
            .any(|n| settings.exclude_interfaces.contains(n));
        if excluded {
            tracing::debug!("fabric: NIC {why} is excluded by MSTRO_OFI_IFACE_EXCLUDE");
        }
        !excluded
    });
    if let Some((_, why)) = &nic {
        tracing::debug!("fabric: NIC {why}");
    }
    let names: Vec<&str> = nic
        .as_ref()
        .map(|(n, _)| n.iter().map(String::as_str).collect())
        .unwrap_or_default();
    opts = match opts.fabric_on(scope, &names) {
        Ok(o) => o,
        // A provider or interface the user named must be there: the mistake is theirs to
        // fix, not a reason to move every CDO over the control connection.
        Err(e) if explicit_fabric().is_some() => {
            return Err(Error::invarg(format!(
                "{} asks for a fabric this process cannot open ({e}); fix or unset it",
                explicit_fabric().unwrap_or_default()
            )));
        }
        Err(e) => {
            // The bytes still move, by stream over the control connection.
            tracing::warn!("no fabric endpoint ({e}); CDOs move over the control connection");
            base()
        }
    };
    if opts.endpoint.is_some() {
        opts.nic_reason = nic.map(|(_, why)| why).or_else(|| {
            env_text("MSTRO_OFI_IFACE").map(|iface| format!("{iface}, named by MSTRO_OFI_IFACE"))
        });
    }
    if let Some(c) = credential {
        opts = opts.credential(c);
    }
    if let Some(reclaim) = reclaim_options(settings, found) {
        opts = opts.reclaim(reclaim);
    }
    Client::join(info, opts).map_err(|e| {
        let e = Error::from(e);
        let status = if e.status == Status::Fail {
            Status::NoPm
        } else {
            e.status
        };
        Error::new(
            status,
            format!(
                "joining the pool manager of workflow {:?}: {}",
                info.workflow, e.message
            ),
        )
    })
}

/// How a process rides out the loss of the pool manager it found (`MSTRO_PM_RECLAIM_TIMEOUT`):
/// it looks for the one that takes over where it found the first (the info file read
/// again, the workflow's name looked up through PMIx) and at the endpoints the PM info
/// lists. `None` with reclaim off, or for a PM in this process (it goes with the process).
fn reclaim_options(settings: &Settings, found: &Found) -> Option<pool::ReclaimOptions> {
    if settings.reclaim_timeout.is_zero() {
        return None;
    }
    let find: Option<pool::Finder> = match found {
        Found::ServedHere | Found::LocalPool => return None,
        Found::Environment => None,
        Found::InfoFile(path) => {
            let path = path.clone();
            Some(Arc::new(move || PmInfo::from_file(&path).ok().flatten()))
        }
        Found::JobKey { .. } | Found::Published => settings.pmix.clone().map(|pmix| {
            let workflow = settings.workflow.clone();
            Arc::new(move || bootstrap::lookup(&pmix, &workflow, None).ok().flatten())
                as pool::Finder
        }),
    };
    Some(pool::ReclaimOptions {
        timeout: settings.reclaim_timeout,
        find,
    })
}

/// Finds the PM info (see the module docs); `None`: no pool manager anywhere.
fn find(settings: &Settings) -> Result<Option<(PmInfo, Found)>> {
    let from_env = PmInfo::from_env().map_err(|e| {
        Error::invarg(format!(
            "{}: {e}; copy the PM's `MSTRO_POOL_MANAGER_INFO;<info>;` line exactly",
            bootstrap::PM_INFO_ENV
        ))
    })?;
    let outside = match (from_env, &settings.pm_info_file) {
        (Some(info), _) => Some((info, Found::Environment)),
        (None, Some(path)) => Some((info_file(settings, path)?, Found::InfoFile(path.clone()))),
        (None, None) => None,
    };
    let Some(pmix) = &settings.pmix else {
        return Ok(outside);
    };
    if let Some((info, found)) = outside {
        share_as_pm_rank(settings, pmix, &info);
        return Ok(Some((info, found)));
    }
    let (size, me) = settings.job().unwrap_or((1, 0));
    if settings.pm_rank >= size {
        return Err(Error::invarg(format!(
            "{}={} names no rank of this job of {size} (0 to {}): name one of them, or leave it unset for rank 0",
            settings::PM_RANK_ENV,
            settings.pm_rank,
            size - 1
        )));
    }
    let root = pmix::Proc::new(pmix.nspace(), settings.pm_rank);
    let ask_root = size > 1 && me != settings.pm_rank;
    // Asked for a local pool: no reason to wait for a PM that may never come.
    let wait = settings
        .pm_wait
        .unwrap_or(if ask_root && !settings.local_pool {
            DEFAULT_PM_WAIT
        } else {
            Duration::ZERO
        });
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(10);
    let mut can_lookup = true;
    // A PM another job published, found at that instant: a rank that asks its PM rank
    // takes it only once the job key has had `JOB_KEY_GRACE` to appear (this job's own PM,
    // or the published one its PM rank passes on), so two jobs of one workflow name that
    // each serve a PM never mix.
    let mut published: Option<(PmInfo, Instant)> = None;
    loop {
        if can_lookup && published.is_none() {
            match bootstrap::lookup(pmix, &settings.workflow, None) {
                Ok(Some(info)) if !ask_root => {
                    share_as_pm_rank(settings, pmix, &info);
                    return Ok(Some((info, Found::Published)));
                }
                Ok(Some(info)) => published = Some((info, Instant::now())),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!("looking up the published PM info: {e}");
                    can_lookup = false;
                }
            }
        }
        if let Some((_, at)) = &published
            && at.elapsed() >= JOB_KEY_GRACE.min(wait)
        {
            return Ok(published.map(|(info, _)| (info, Found::Published)));
        }
        if ask_root {
            let quick = pmix::GetOptions {
                timeout: pause.max(Duration::from_millis(100)),
                immediate: false,
            };
            match pmix.get(&root, maestro_keys::PM_INFO, quick) {
                Ok(v) => {
                    let text = v.as_str().ok_or_else(|| {
                        Error::invarg(format!(
                            "rank {}'s PMIx key {} is not a string; another program uses it",
                            settings.pm_rank,
                            maestro_keys::PM_INFO
                        ))
                    })?;
                    let info = PmInfo::parse(text).map_err(|e| {
                        Error::invarg(format!(
                            "rank {}'s PM info is malformed: {e}",
                            settings.pm_rank
                        ))
                    })?;
                    return Ok(Some((
                        info,
                        Found::JobKey {
                            rank: settings.pm_rank,
                        },
                    )));
                }
                Err(e) => tracing::trace!("rank {}'s PM info: {e}", settings.pm_rank),
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(published.map(|(info, _)| (info, Found::Published)));
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// How long a rank that found a PM another job published waits for its own job's key
/// before taking the published one (see [`find`]).
const JOB_KEY_GRACE: Duration = Duration::from_secs(5);

/// The PM info in the file at `path`, waited for up to the PM wait (default
/// [`DEFAULT_PM_WAIT`]: the user named it, its PM may still be starting).
fn info_file(settings: &Settings, path: &std::path::Path) -> Result<PmInfo> {
    let wait = settings.pm_wait.unwrap_or(DEFAULT_PM_WAIT);
    let deadline = Instant::now() + wait;
    loop {
        match PmInfo::from_file(path) {
            Ok(Some(info)) => return Ok(info),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                return Err(Error::new(
                    Status::NoPm,
                    format!(
                        "{}={}: no PM info there after {:.1} s ({PM_WAIT_ENV}); start the pool manager that writes it (`maestro pm --info-file {}`, `pgen forecast --info-file`) on a file system this process sees",
                        bootstrap::PM_INFO_FILE_ENV,
                        path.display(),
                        wait.as_secs_f64(),
                        path.display()
                    ),
                ));
            }
            Err(e) => {
                return Err(Error::invarg(format!(
                    "{}: {e}",
                    bootstrap::PM_INFO_FILE_ENV
                )));
            }
        }
    }
}

/// Why a rank of a multi-process job has no pool to join, and how to give it one.
fn no_pm(settings: &Settings) -> Error {
    let (size, me) = settings.job().unwrap_or((1, 0));
    let looked = if me == settings.pm_rank {
        "looked once: this is the rank that would serve it".to_string()
    } else {
        let wait = settings.pm_wait.unwrap_or(DEFAULT_PM_WAIT);
        format!("looked for {:.1} s ({PM_WAIT_ENV})", wait.as_secs_f64())
    };
    Error::new(
        Status::NoPm,
        format!(
            "no pool manager for workflow {:?}: rank {} announced none and none is published ({looked}); rank {me} of a {size}-process job needs one to meet the others. Start one: mstro_pm_start() on rank {} ({PM_RANK_ENV} names another), or `maestro pm --workflow {} --print-info` and pass its line as {}; or set {LOCAL_POOL_ENV}=1 for a pool inside each process",
            settings.workflow,
            settings.pm_rank,
            settings.pm_rank,
            settings.workflow,
            bootstrap::PM_INFO_ENV,
        ),
    )
}

/// The PM rank shares a PM it found outside the job under the job key.
fn share_as_pm_rank(settings: &Settings, pmix: &pmix::Client, info: &PmInfo) {
    if pmix.rank() != settings.pm_rank {
        return;
    }
    let put = pmix
        .put(
            pmix::Scope::Global,
            maestro_keys::PM_INFO,
            &pmix::Value::String(info.encode()),
        )
        .and_then(|()| pmix.commit());
    if let Err(e) = put {
        tracing::debug!("sharing the PM info with the job: {e}");
    }
}

/// What `PMIx_Validate_credential`'s answer says of a JOIN's credential: valid (for the
/// uid the host names), forged (`PMIX_ERR_INVALID_CRED`), or not checkable here (any other
/// failure: another launcher's credential, a host without the call, a timeout).
fn credential_verdict(answer: pmix::Result<Vec<pmix::Info>>) -> pool::CredentialVerdict {
    match answer {
        Ok(info) => pool::CredentialVerdict::Valid {
            uid: pmix::find(&info, pmix::keys::USERID)
                .and_then(pmix::Value::as_u64)
                .and_then(|u| u32::try_from(u).ok()),
        },
        Err(pmix::Error::Pmix { status, .. }) if status == pmix::Status::INVALID_CRED => {
            pool::CredentialVerdict::Forged(status.to_string())
        }
        Err(e) => pool::CredentialVerdict::Unverifiable(e.to_string()),
    }
}
