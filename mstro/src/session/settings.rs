//! What a process's Maestro settings are, from its environment and its PMIx host: the
//! workflow and component, timeouts, the inline size, name owners, the job and the
//! credential.

use std::sync::Arc;
use std::time::Duration;

use pool::schema::Schemas;

use crate::status::{Error, Result, Status};

/// `MSTRO_POOL_MANAGER_RANK`: the rank whose job key holds the PM info.
pub const PM_RANK_ENV: &str = "MSTRO_POOL_MANAGER_RANK";
/// `MSTRO_POOL_MANAGER_WAIT`: seconds to look for a pool manager through PMIx.
pub const PM_WAIT_ENV: &str = "MSTRO_POOL_MANAGER_WAIT";
/// `MSTRO_PM_RECLAIM_TIMEOUT`: seconds a process that lost its pool manager waits for one
/// to take over (a standby, or the PM restarted with `maestro pm --reclaim`), its calls
/// waiting meanwhile (default [`DEFAULT_RECLAIM_TIMEOUT`]; 0: they fail at once).
pub const RECLAIM_TIMEOUT_ENV: &str = "MSTRO_PM_RECLAIM_TIMEOUT";
/// `MSTRO_PM_STANDBY_FOR`: makes `mstro_pm_start` start a standby pool manager for the
/// active one of this PM info file (or PM info line): it takes over when that one is gone
/// and writes its own info to the file.
pub const STANDBY_FOR_ENV: &str = "MSTRO_PM_STANDBY_FOR";
/// `MSTRO_PM_GRACE`: seconds of the grace period of a standby that takes over, in which
/// the apps of the PM that is gone rejoin (default [`DEFAULT_GRACE`]).
pub const GRACE_ENV: &str = "MSTRO_PM_GRACE";
/// `MSTRO_PM_SHARDS`: how many pool managers `mstro_pm_start` starts for the pool (1 to
/// 1024, default 1), each the home of a share of the CDO names, as threads of this
/// process (see `maestro pm --shards`).
pub const SHARDS_ENV: &str = "MSTRO_PM_SHARDS";
/// `MSTRO_POOL_FABRIC`: the fabric beyond the node (a Slurm `topology.conf`, an
/// `ibnetdiscover` dump, or `maestro inventory --json` of one) for the pool manager
/// `mstro_pm_start` starts: of several offers of a name, a consumer gets the one fewest
/// hops away. Unset: the cost matrix the PMIx host serves, if it serves one.
pub const POOL_FABRIC_ENV: &str = "MSTRO_POOL_FABRIC";
/// `MSTRO_TIMEOUT`: seconds each pool operation (a demand too) waits at most.
pub const TIMEOUT_ENV: &str = "MSTRO_TIMEOUT";
/// `MSTRO_WAIT_SPIN`: seconds a pool operation polls for its answer before its thread
/// sleeps (default [`pool::DEFAULT_WAIT_SPIN`], 0.00005; 0: sleep at once).
pub const WAIT_SPIN_ENV: &str = "MSTRO_WAIT_SPIN";
/// `MSTRO_LOCAL_POOL`: `1` lets each process of a multi-process job that finds no pool
/// manager run a local pool of its own (without it such a process fails with
/// [`Status::NoPm`]; one-process programs get a local pool either way).
pub const LOCAL_POOL_ENV: &str = "MSTRO_LOCAL_POOL";
/// `MSTRO_POOL_RINGS`: `off` keeps the control connection to a pool manager on this host
/// on its Unix socket; `on` (the default) moves it to shared-memory rings when the PM
/// grants them (see [`pool::JoinOptions::rings`]).
pub const RINGS_ENV: &str = "MSTRO_POOL_RINGS";
/// Offers of at most this many bytes carry their bytes to the pool manager, which hands
/// them on with the consumers' tickets (default [`pool::DEFAULT_INLINE_MAX`]; 0: never).
pub const INLINE_MAX_ENV: &str = "MSTRO_INLINE_MAX";
/// `MSTRO_TRANSPORT_DEFAULT`: how offers reach consumers, `RDMA` (the fabric, the default)
/// or `GFS` (a file on the global file system of [`GFS_DIR_ENV`]), as in Maestro Core.
pub const TRANSPORT_ENV: &str = "MSTRO_TRANSPORT_DEFAULT";
/// `MSTRO_TRANSPORT_GFS_DIR`: the directory every process of the workflow sees, where GFS
/// offers are written and read.
pub const GFS_DIR_ENV: &str = "MSTRO_TRANSPORT_GFS_DIR";

/// Default of `MSTRO_POOL_MANAGER_WAIT`.
pub const DEFAULT_PM_WAIT: Duration = Duration::from_secs(30);
/// Default of `MSTRO_PM_RECLAIM_TIMEOUT`.
pub const DEFAULT_RECLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `MSTRO_PM_GRACE` (as `maestro pm --grace`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// Default of `MSTRO_TIMEOUT`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Who this process is and how it waits: the workflow, component and index it joins as, the
/// schemas its attributes are checked against, and the PMIx host if it runs under one.
#[derive(Clone)]
pub struct Settings {
    /// The workflow name (the PM serves one).
    pub workflow: String,
    /// The component name.
    pub component: String,
    /// The component index.
    pub index: i64,
    /// How long each pool operation waits (`MSTRO_TIMEOUT`).
    pub timeout: Duration,
    /// How long a pool operation polls for its answer before sleeping (`MSTRO_WAIT_SPIN`).
    pub wait_spin: Duration,
    /// Offers of at most this many bytes carry them to the PM (`MSTRO_INLINE_MAX`; 0:
    /// never): see [`pool::JoinOptions::inline_max`].
    pub inline_max: usize,
    /// The control connection to a PM on this host moves to shared-memory rings
    /// (`MSTRO_POOL_RINGS`, default on).
    pub rings: bool,
    /// The global file system (`MSTRO_TRANSPORT_GFS_DIR`, and whether offers go through it:
    /// `MSTRO_TRANSPORT_DEFAULT=GFS`).
    pub gfs: Option<pool::GfsOptions>,
    /// How long to look for a pool manager through PMIx (`MSTRO_POOL_MANAGER_WAIT`); unset:
    /// [`DEFAULT_PM_WAIT`] for the job's other ranks, one look for the PM rank itself and
    /// for one-process jobs (nobody in the job could start one later).
    pub pm_wait: Option<Duration>,
    /// The rank whose job key holds the PM info (`MSTRO_POOL_MANAGER_RANK`).
    pub pm_rank: u32,
    /// How long a process that lost its pool manager waits for one to take over
    /// (`MSTRO_PM_RECLAIM_TIMEOUT`; zero: its calls fail at once).
    pub reclaim_timeout: Duration,
    /// The active pool manager a process calling `mstro_pm_start` stands by for
    /// (`MSTRO_PM_STANDBY_FOR`), taking over with a grace period of [`Settings::grace`].
    pub standby_for: Option<pool::standby::Target>,
    /// The grace period of a standby that takes over (`MSTRO_PM_GRACE`).
    pub grace: Duration,
    /// The pool managers a served pool has (`MSTRO_PM_SHARDS`).
    pub shards: pool::shards::Shards,
    /// A process of a multi-process job that finds no PM runs a local pool instead of
    /// failing (`MSTRO_LOCAL_POOL=1`).
    pub local_pool: bool,
    /// The fabric beyond the node, for a PM started here (`MSTRO_POOL_FABRIC`).
    pub pool_fabric: Option<std::path::PathBuf>,
    /// A file holding the PM info, waited for up to the PM wait
    /// (`MSTRO_POOL_MANAGER_INFO_FILE`; `MSTRO_POOL_MANAGER_INFO` comes first).
    pub pm_info_file: Option<std::path::PathBuf>,
    /// The attribute schemas (`MSTRO_SCHEMA_PATH`, `MSTRO_SCHEMA_LIST`).
    pub schemas: Arc<Schemas>,
    /// The PMIx host's client, when the process runs under one.
    pub pmix: Option<Arc<pmix::Client>>,
    /// Names bound to components, for a pool manager this process serves
    /// (`MSTRO_NAME_OWNERS`: `PREFIX=COMPONENT` entries separated by spaces): an offer of
    /// such a name from another component is refused.
    pub owners: Vec<pool::policy::NameOwner>,
    /// Interfaces the pool keeps off (`MSTRO_OFI_IFACE_EXCLUDE`, see
    /// [`fabric::Config::exclude`]): a PM served here does not advertise them.
    pub exclude_interfaces: Vec<String>,
}

/// The variable that binds CDO names to components for a pool manager an app serves.
pub const NAME_OWNERS_ENV: &str = "MSTRO_NAME_OWNERS";

/// Parses `MSTRO_NAME_OWNERS`: `PREFIX=COMPONENT` entries separated by whitespace.
fn parse_owners(value: Option<&str>) -> Result<Vec<pool::policy::NameOwner>> {
    value
        .unwrap_or_default()
        .split_whitespace()
        .map(|entry| {
            entry.parse().map_err(|e| {
                Error::invarg(format!(
                    "{NAME_OWNERS_ENV}: {e}; separate several entries with spaces"
                ))
            })
        })
        .collect()
}

pub(super) fn env_text(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// `MSTRO_INLINE_MAX`: a number of bytes, at most the PM's frame can carry.
fn parse_inline_max(value: Option<&str>) -> Result<usize> {
    const MOST: usize = 1 << 20;
    match value {
        None => Ok(pool::DEFAULT_INLINE_MAX),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= MOST)
            .ok_or_else(|| {
                Error::invarg(format!(
                    "{INLINE_MAX_ENV}={v:?} is not a number of bytes from 0 (off) to {MOST}; set it to e.g. 4096 or unset it"
                ))
            }),
    }
}

/// `MSTRO_TRANSPORT_DEFAULT` and `MSTRO_TRANSPORT_GFS_DIR`: the global file system to use,
/// if any.
fn parse_transport(transport: Option<&str>, dir: Option<&str>) -> Result<Option<pool::GfsOptions>> {
    let offer = match transport.map(|t| t.trim().to_ascii_uppercase()) {
        None => false,
        Some(t) if t == "RDMA" => false,
        Some(t) if t == "GFS" => true,
        Some(t) if t == "MIO" => {
            return Err(Error::invarg(format!(
                "{TRANSPORT_ENV}=MIO: no object store transport here; give RDMA or GFS"
            )));
        }
        Some(t) => {
            return Err(Error::invarg(format!(
                "{TRANSPORT_ENV}={t:?} is no transport; give RDMA (the default) or GFS"
            )));
        }
    };
    match dir {
        Some(d) => Ok(Some(pool::GfsOptions {
            dir: d.trim().into(),
            offer,
            group_readable: false,
        })),
        None if offer => Err(Error::invarg(format!(
            "{TRANSPORT_ENV}=GFS needs {GFS_DIR_ENV}: the directory, seen by every process of the workflow, the CDOs are written to"
        ))),
        None => Ok(None),
    }
}

/// `value` of `var` as seconds (fractions allowed), `default` when unset.
fn parse_seconds(var: &str, value: Option<&str>, default: Duration) -> Result<Duration> {
    match value {
        None => Ok(default),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && (0.0..1e9).contains(&s) => Ok(Duration::from_secs_f64(s)),
            Ok(s) if s >= 1e9 => Err(Error::invarg(format!(
                "{var}={v:?} is more seconds than maestro waits (less than 1e9, about 31 years); set it to e.g. 30 or unset it"
            ))),
            Ok(_) => Err(Error::invarg(format!(
                "{var}={v:?} is not a number of seconds from 0 up; set it to e.g. 30 or unset it"
            ))),
            Err(_) => Err(Error::invarg(format!(
                "{var}={v:?} is not a number of seconds; set it to e.g. 30 or unset it"
            ))),
        },
    }
}

/// `MSTRO_PM_SHARDS`: a number of pool managers, 1 when unset.
fn parse_shards(value: Option<&str>) -> Result<pool::shards::Shards> {
    let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(pool::shards::Shards::default());
    };
    v.trim()
        .parse::<usize>()
        .ok()
        .and_then(|k| pool::shards::Shards::new(k).ok())
        .ok_or_else(|| {
            Error::invarg(format!(
                "{SHARDS_ENV}={v:?} is not a number of pool managers from 1 to 1024; set it to e.g. 4 or unset it"
            ))
        })
}

/// `MSTRO_PM_STANDBY_FOR`: a PM info file's path, or a PM info line.
fn parse_standby_for(value: Option<&str>) -> Result<Option<pool::standby::Target>> {
    let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    pool::standby::Target::parse(v).map(Some).map_err(|e| {
        Error::invarg(format!(
            "{STANDBY_FOR_ENV}: {e}; give the active pool manager's info file (the one its apps read) or its `MSTRO_POOL_MANAGER_INFO;<info>;` line exactly"
        ))
    })
}

/// A switch `var` set to `value`: `1`/`on`/`true`/`yes` or `0`/`off`/`false`/`no`
/// (unset: `default`); `on_means` says what on does, for the error.
fn parse_switch(var: &str, value: Option<&str>, default: bool, on_means: &str) -> Result<bool> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None => Ok(default),
        Some("1" | "on" | "true" | "yes") => Ok(true),
        Some("0" | "off" | "false" | "no") => Ok(false),
        Some(other) => Err(Error::invarg(format!(
            "{var}={other:?} is neither 1 or on ({on_means}) nor 0 or off; set one or unset it (default {})",
            if default { "on" } else { "off" }
        ))),
    }
}

/// `MSTRO_POOL_RINGS`, on by default.
fn parse_rings(value: Option<&str>) -> Result<bool> {
    parse_switch(
        RINGS_ENV,
        value,
        true,
        "shared-memory rings to a pool manager on this host",
    )
}

/// `MSTRO_LOCAL_POOL`, off by default.
fn parse_local_pool(value: Option<&str>) -> Result<bool> {
    parse_switch(
        LOCAL_POOL_ENV,
        value,
        false,
        "a local pool in each process that finds no pool manager",
    )
}

impl Settings {
    /// Settings from the arguments and the environment: `workflow`/`component` fall back
    /// to `MSTRO_WORKFLOW_NAME`/`MSTRO_COMPONENT_NAME`, then to "maestro" and the program's
    /// name; the PMIx client is initialized when a PMIx host started this process
    /// ([`pmix_host`]).
    ///
    /// # Errors
    /// [`Status::Invarg`] for malformed `MSTRO_*` variables or schemas; [`Status::Fail`]
    /// when a PMIx host is present but refuses this process, or this process holds a PMIx
    /// client already (use [`Settings::with_pmix`]).
    pub fn from_env(
        workflow: Option<&str>,
        component: Option<&str>,
        index: i64,
    ) -> Result<Settings> {
        Settings::with_pmix(workflow, component, index, pmix_host()?)
    }

    /// As [`Settings::from_env`] with the PMIx client the program holds already (`None`:
    /// no PMIx host).
    ///
    /// # Errors
    /// [`Status::Invarg`] for malformed `MSTRO_*` variables or schemas.
    pub fn with_pmix(
        workflow: Option<&str>,
        component: Option<&str>,
        index: i64,
        pmix: Option<Arc<pmix::Client>>,
    ) -> Result<Settings> {
        super::variables::warn_unknown_once();
        let program = std::env::args_os()
            .next()
            .and_then(|p| {
                std::path::Path::new(&p)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "maestro-app".into());
        let workflow = workflow
            .map(str::to_string)
            .or_else(|| env_text("MSTRO_WORKFLOW_NAME"))
            .unwrap_or_else(|| "maestro".into());
        let component = component
            .map(str::to_string)
            .or_else(|| env_text("MSTRO_COMPONENT_NAME"))
            .unwrap_or(program);
        for (what, v) in [("workflow", &workflow), ("component", &component)] {
            if v.is_empty() || v.len() > pool::MAX_NAME {
                return Err(Error::invarg(format!(
                    "the {what} name must have 1 to {} bytes, not {}",
                    pool::MAX_NAME,
                    v.len()
                )));
            }
        }
        let pm_rank = match env_text(PM_RANK_ENV) {
            None => 0,
            Some(v) => v.trim().parse().map_err(|_| {
                Error::invarg(format!(
                    "{PM_RANK_ENV}={v:?} is not a rank; set the rank that runs the pool manager"
                ))
            })?,
        };
        // The fabric's variables are checked here too, where a mistake is still cheap: a
        // typo must not quietly turn the fabric off later.
        let fabric = fabric::Config::from_env().map_err(|e| Error::invarg(e.to_string()))?;
        if let Some(iface) = &fabric.iface
            && !inventory::netif::interface_exists(iface)
        {
            return Err(Error::invarg(format!(
                "MSTRO_OFI_IFACE={iface:?} names no network interface or RDMA device of this machine (see maestro inventory); fix or unset it"
            )));
        }
        let timeout = parse_seconds(
            TIMEOUT_ENV,
            env_text(TIMEOUT_ENV).as_deref(),
            DEFAULT_TIMEOUT,
        )?;
        if timeout.is_zero() {
            return Err(Error::invarg(format!(
                "{TIMEOUT_ENV}=0 would make every operation time out at once; set the seconds an operation may wait (default {}) or unset it",
                DEFAULT_TIMEOUT.as_secs()
            )));
        }
        Ok(Settings {
            workflow,
            component,
            index,
            timeout,
            wait_spin: parse_seconds(
                WAIT_SPIN_ENV,
                env_text(WAIT_SPIN_ENV).as_deref(),
                pool::DEFAULT_WAIT_SPIN,
            )?,
            inline_max: parse_inline_max(env_text(INLINE_MAX_ENV).as_deref())?,
            rings: parse_rings(env_text(RINGS_ENV).as_deref())?,
            gfs: parse_transport(
                env_text(TRANSPORT_ENV).as_deref(),
                env_text(GFS_DIR_ENV).as_deref(),
            )?,
            pm_wait: match env_text(PM_WAIT_ENV) {
                Some(v) => Some(parse_seconds(PM_WAIT_ENV, Some(&v), DEFAULT_PM_WAIT)?),
                None => None,
            },
            pm_rank,
            reclaim_timeout: parse_seconds(
                RECLAIM_TIMEOUT_ENV,
                env_text(RECLAIM_TIMEOUT_ENV).as_deref(),
                DEFAULT_RECLAIM_TIMEOUT,
            )?,
            standby_for: parse_standby_for(env_text(STANDBY_FOR_ENV).as_deref())?,
            grace: parse_seconds(GRACE_ENV, env_text(GRACE_ENV).as_deref(), DEFAULT_GRACE)?,
            shards: parse_shards(env_text(SHARDS_ENV).as_deref())?,
            local_pool: parse_local_pool(env_text(LOCAL_POOL_ENV).as_deref())?,
            pm_info_file: env_text(pool::bootstrap::PM_INFO_FILE_ENV).map(Into::into),
            pool_fabric: env_text(POOL_FABRIC_ENV).map(Into::into),
            schemas: Arc::new(pool::schema::from_env()?),
            pmix,
            owners: parse_owners(env_text(NAME_OWNERS_ENV).as_deref())?,
            exclude_interfaces: fabric.exclude,
        })
    }

    /// The job's size and this process's rank under PMIx.
    pub(super) fn job(&self) -> Option<(u32, u32)> {
        let c = self.pmix.as_ref()?;
        Some((c.job_size().unwrap_or(1), c.rank()))
    }

    /// Whether a process that finds no pool manager may run a local pool: asked for
    /// (`MSTRO_LOCAL_POOL=1`), or a one-process program (no PMIx host, or a job of one).
    pub(super) fn local_pool_allowed(&self) -> bool {
        self.local_pool || self.job().is_none_or(|(size, _)| size <= 1)
    }

    /// The PMIx credential to show the PM, where the host issues them.
    pub(super) fn credential(&self) -> Option<Vec<u8>> {
        let c = self.pmix.as_ref()?;
        c.get_credential(self.timeout.min(Duration::from_secs(10)))
            .ok()
            .map(|c| c.bytes)
    }
}

/// The PMIx client of this process when a PMIx host started it (`maestro run`, `srun
/// --mpi=pmix`, `mpirun`), `None` otherwise.
///
/// # Errors
/// [`Status::Fail`] when a PMIx host is present but refuses this process, or the process
/// holds a PMIx client already.
pub fn pmix_host() -> Result<Option<Arc<pmix::Client>>> {
    match pmix::Client::init() {
        Ok(c) => Ok(Some(Arc::new(c))),
        Err(pmix::Error::Unreachable { .. }) => Ok(None),
        Err(e) => Err(Error::new(
            Status::Fail,
            format!("this process was started by a PMIx host that refused it: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_pool_switch_is_yes_no_or_a_clear_error() {
        for (v, want) in [
            (None, false),
            (Some("1"), true),
            (Some(" Yes"), true),
            (Some("0"), false),
            (Some("no"), false),
        ] {
            assert_eq!(parse_local_pool(v).unwrap(), want, "{v:?}");
        }
        let e = parse_local_pool(Some("maybe")).unwrap_err();
        assert!(e.to_string().contains("MSTRO_LOCAL_POOL=\"maybe\""), "{e}");
    }

    #[test]
    fn the_transport_is_rdma_or_gfs_with_its_directory_or_a_clear_error() {
        assert_eq!(parse_transport(None, None).unwrap(), None);
        assert_eq!(parse_transport(Some("RDMA"), None).unwrap(), None);
        let gfs = parse_transport(Some(" gfs "), Some("/scratch/wf"))
            .unwrap()
            .unwrap();
        assert!(gfs.offer && gfs.dir == std::path::Path::new("/scratch/wf"));
        let read_only = parse_transport(None, Some("/scratch/wf")).unwrap().unwrap();
        assert!(
            !read_only.offer,
            "consumers read GFS offers with the directory alone"
        );
        for (t, d, says) in [
            (Some("GFS"), None, "needs MSTRO_TRANSPORT_GFS_DIR"),
            (Some("MIO"), None, "no object store"),
            (Some("tcp"), None, "is no transport"),
        ] {
            let e = parse_transport(t, d).unwrap_err();
            assert_eq!(e.status, Status::Invarg);
            assert!(e.message.contains(says), "{e:?}");
        }
    }

    #[test]
    fn rings_are_on_or_off() {
        assert!(parse_rings(None).unwrap());
        assert!(parse_rings(Some(" ON ")).unwrap());
        assert!(!parse_rings(Some("off")).unwrap());
        let e = parse_rings(Some("maybe")).unwrap_err();
        assert!(e.to_string().contains("MSTRO_POOL_RINGS=\"maybe\""), "{e}");
    }

    #[test]
    fn inline_max_is_bytes_up_to_a_mebibyte() {
        assert_eq!(parse_inline_max(None).unwrap(), pool::DEFAULT_INLINE_MAX);
        assert_eq!(parse_inline_max(Some(" 0 ")).unwrap(), 0);
        assert_eq!(parse_inline_max(Some("1048576")).unwrap(), 1 << 20);
        for bad in ["1048577", "lots", "-1", "4k"] {
            let e = parse_inline_max(Some(bad)).unwrap_err();
            assert_eq!(e.status, Status::Invarg);
            assert!(e.message.contains(INLINE_MAX_ENV), "{e}");
            assert!(e.message.contains("e.g. 4096"), "{e}");
        }
    }

    #[test]
    fn name_owners_are_prefix_component_pairs_or_a_clear_error() {
        assert!(parse_owners(None).unwrap().is_empty());
        let owners = parse_owners(Some("pgen/field/=forecast  pgen/product/=pgen")).unwrap();
        assert_eq!(owners.len(), 2);
        let e = parse_owners(Some("pgen/field/=forecast nonsense")).unwrap_err();
        assert_eq!(e.status, Status::Invarg);
        assert!(e.message.contains(NAME_OWNERS_ENV), "{e}");
        assert!(
            e.message.contains("separate several entries with spaces"),
            "{e}"
        );
    }

    #[test]
    fn seconds_parse_or_say_which_variable_is_wrong() {
        let d = Duration::from_secs(7);
        assert_eq!(parse_seconds(PM_WAIT_ENV, None, d).unwrap(), d);
        assert_eq!(
            parse_seconds(PM_WAIT_ENV, Some(" 0.5 "), d).unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            parse_seconds(PM_WAIT_ENV, Some("0"), d).unwrap(),
            Duration::ZERO
        );
        for bad in ["soon", "-1", "NaN", "inf", "", "1e12"] {
            let e = parse_seconds(PM_WAIT_ENV, Some(bad), d).unwrap_err();
            assert_eq!(e.status, Status::Invarg);
            assert!(e.message.contains(PM_WAIT_ENV), "{e}");
        }
        // A number, too large: said as such (it was "not a number").
        let e = parse_seconds(TIMEOUT_ENV, Some("1e12"), d).unwrap_err();
        assert!(e.message.contains("more seconds than maestro waits"), "{e}");
    }
}
