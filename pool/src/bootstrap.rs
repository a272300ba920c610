//! Finding the pool manager: its *PM info*, a versioned text that carries the workflow name,
//! the PM's control endpoints and the workflow secret.
//!
//! - Inside one PMIx job it travels with `PMIx_Put` under [`maestro_keys::PM_INFO`]
//!   ([`announce`]) and a collecting fence, after which every rank reads it ([`read_announced`]).
//! - Across jobs, [`announce`] also publishes it (`PMIx_Publish`, global range) under
//!   [`published_key`] of the workflow, and another job's processes find it with
//!   [`lookup`]. Hosts differ: `maestro run` shares published data between the jobs of
//!   one user on a node; Open MPI's `mpirun` within its DVM; Slurm has no publish at all.
//! - Otherwise it comes from `MSTRO_POOL_MANAGER_INFO` (the PM prints it as
//!   `MSTRO_POOL_MANAGER_INFO;<info>;`, as Maestro Core does) or a file.
//!
//! Format: `mstro-pm-v1:<workflow as hex>:<addr>[,<addr>...]:<secret as hex>`; a pool of
//! several shards (docs/developers/shards.md) lists each shard's addresses, shard 0's
//! first: `mstro-pm-v2:<workflow as hex>:<addrs>/<addrs>[/...]:<secret as hex>`. The secret
//! admits whoever holds the info: keep it to the job (PMIx data stays within the job's
//! user) and files holding it private.

use std::net::SocketAddr;

/// The environment variable with the PM info, outside one PMIx job.
pub const PM_INFO_ENV: &str = "MSTRO_POOL_MANAGER_INFO";
/// The environment variable naming a file that holds the PM info (`maestro pm
/// --info-file` writes one): how jobs of other allocations find the PM on a shared file
/// system without the secret on a command line or in a job's log.
pub const PM_INFO_FILE_ENV: &str = "MSTRO_POOL_MANAGER_INFO_FILE";
const PREFIX: &str = "mstro-pm-v1";
/// The prefix of the PM info of a pool of several shards.
const PREFIX_SHARDS: &str = "mstro-pm-v2";

/// The key under which [`announce`] publishes a workflow's PM info for other jobs.
pub fn published_key(workflow: &str) -> String {
    format!("{}.{workflow}", maestro_keys::PM_INFO)
}

/// Why the PM info could not be announced or found through PMIx.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A PMIx call failed (see the PMIx error for what to do).
    #[error("PM info through PMIx: {0}")]
    Pmix(#[from] pmix::Error),
    /// The value found is not a valid PM info.
    #[error("PM info found through PMIx is malformed: {0}")]
    Info(#[from] PmInfoError),
    /// The value found is not a string.
    #[error(
        "the PMIx key {0:?} does not hold a string; another program uses it: rename the workflow (MSTRO_WORKFLOW_NAME)"
    )]
    NotAString(String),
    /// The job's ranks cannot be the pool's shards (a rank beyond them).
    #[error("{0}")]
    Shards(String),
    /// This rank's pool manager did not start.
    #[error("starting this rank's pool manager: {0}")]
    Start(std::io::Error),
}

/// How far [`announce`] reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The processes of this job (after their collecting fence): the host cannot publish.
    Job,
    /// The processes of this job only: another job already published a pool manager for
    /// this workflow name (its users keep finding that one).
    JobBecauseTaken,
    /// This job and other jobs that [`lookup`] the workflow.
    OtherJobs,
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reach::Job => "this job (the PMIx host cannot publish to other jobs)",
            Reach::JobBecauseTaken => {
                "this job only (another job already published a pool manager for this workflow name)"
            }
            Reach::OtherJobs => "this job and other jobs",
        })
    }
}

/// Puts `info` for this job (`PMIx_Put` global scope + `Commit`: the job's ranks read it
/// with [`read_announced`] after a collecting fence) and publishes it for other jobs where
/// the host supports `PMIx_Publish`.
///
/// # Errors
/// [`BootstrapError::Pmix`] if the put or commit fails, or the publish fails for another
/// reason than lack of support or a name another job holds (see [`Reach`]).
pub fn announce(
    client: &pmix::Client,
    info: &PmInfo,
    timeout: std::time::Duration,
) -> Result<Reach, BootstrapError> {
    let text = pmix::Value::String(info.encode());
    client.put(pmix::Scope::Global, maestro_keys::PM_INFO, &text)?;
    client.commit()?;
    let data = [pmix::Info::new(published_key(&info.workflow), text)];
    match client.publish(&data, pmix::Range::Global, timeout) {
        Ok(()) => Ok(Reach::OtherJobs),
        Err(pmix::Error::NotSupported { .. }) => Ok(Reach::Job),
        Err(pmix::Error::Pmix { status, .. }) if status == pmix::Status::DUPLICATE_KEY => {
            Ok(Reach::JobBecauseTaken)
        }
        Err(e) => Err(e.into()),
    }
}

/// Starts this rank's manager of a pool whose shards are the ranks of this job (rank `r`
/// is shard `r` of `shards`: `srun -n K maestro pm --shards K`, one rank per node where
/// the allocation has them): rank 0 starts its manager with a fresh secret and puts its
/// PM info ([`maestro_keys::PM_SHARD`]); after a collecting fence every other rank starts
/// its manager with that workflow and secret (`start` makes the manager of a place with
/// the secret given) and puts its own; after a second fence rank 0 makes the pool's PM
/// info listing every shard. Every rank must call it (the fences wait for all, at most
/// `timeout` each). Returns this rank's manager, and the pool's PM info at rank 0.
///
/// # Errors
/// [`BootstrapError::Shards`] for a rank the pool has no shard for;
/// [`BootstrapError::Start`] when this rank's manager does not start;
/// [`BootstrapError::Pmix`] for a failed put, fence or get (a rank that died before the
/// fence); [`BootstrapError::Info`] for a malformed info of another rank.
pub fn start_shards_of_job(
    client: &pmix::Client,
    shards: pool_core::shards::Shards,
    start: impl FnOnce(pool_core::shards::Place, Option<&PmInfo>) -> std::io::Result<crate::PoolManager>,
    timeout: std::time::Duration,
) -> Result<(crate::PoolManager, Option<PmInfo>), BootstrapError> {
    let rank = client.rank();
    let place = shards.place(rank as usize).ok_or_else(|| {
        BootstrapError::Shards(format!(
            "rank {rank} of a job whose ranks are the {} shards of a pool: run as many ranks as --shards",
            shards.count()
        ))
    })?;
    let put = |pm: &crate::PoolManager| -> Result<(), BootstrapError> {
        let text = pmix::Value::String(pm.info().encode());
        client.put(pmix::Scope::Global, maestro_keys::PM_SHARD, &text)?;
        Ok(client.commit()?)
    };
    let of_rank = |r: u32| -> Result<PmInfo, BootstrapError> {
        let proc = pmix::Proc::new(client.nspace(), r);
        let opts = pmix::GetOptions {
            timeout,
            ..pmix::GetOptions::default()
        };
        let value = client.get(&proc, maestro_keys::PM_SHARD, opts)?;
        let text = value
            .as_str()
            .ok_or_else(|| BootstrapError::NotAString(maestro_keys::PM_SHARD.into()))?;
        Ok(PmInfo::parse(text)?)
    };
    let pm = if rank == 0 {
        let pm = start(place, None).map_err(BootstrapError::Start)?;
        put(&pm)?;
        client.fence(&[], true, timeout)?;
        pm
    } else {
        client.fence(&[], true, timeout)?;
        let first = of_rank(0)?;
        let pm = start(place, Some(&first)).map_err(BootstrapError::Start)?;
        put(&pm)?;
        pm
    };
    client.fence(&[], true, timeout)?;
    if rank != 0 {
        return Ok((pm, None));
    }
    let others = (1..shards.count() as u32)
        .map(|r| of_rank(r).map(|i| i.endpoints))
        .collect::<Result<Vec<_>, _>>()?;
    let info = PmInfo {
        other_shards: others,
        ..pm.info().clone()
    };
    Ok((pm, Some(info)))
}

/// Reads the PM info that `root` [`announce`]d; call it after a collecting fence.
///
/// # Errors
/// [`BootstrapError`] if the key is missing or malformed.
pub fn read_announced(client: &pmix::Client, root: &pmix::Proc) -> Result<PmInfo, BootstrapError> {
    let value = client.get(root, maestro_keys::PM_INFO, pmix::GetOptions::default())?;
    let text = value
        .as_str()
        .ok_or_else(|| BootstrapError::NotAString(maestro_keys::PM_INFO.into()))?;
    Ok(PmInfo::parse(text)?)
}

/// Looks for the PM info of `workflow` that another job published. With `wait`, waits up
/// to that long for it to appear; without, answers at once. `Ok(None)`: nobody published
/// it (within `wait`), or the host has no publish/lookup (Slurm).
///
/// # Errors
/// [`BootstrapError`] for other PMIx failures or a malformed value.
pub fn lookup(
    client: &pmix::Client,
    workflow: &str,
    wait: Option<std::time::Duration>,
) -> Result<Option<PmInfo>, BootstrapError> {
    let key = published_key(workflow);
    match client.lookup(&[&key], wait) {
        Ok(found) => {
            let Some(p) = found.into_iter().find(|p| p.key == key) else {
                return Ok(None);
            };
            let text = p.value.as_str().ok_or(BootstrapError::NotAString(key))?;
            Ok(Some(PmInfo::parse(text)?))
        }
        Err(
            pmix::Error::NotFound { .. }
            | pmix::Error::NotSupported { .. }
            | pmix::Error::Timeout { .. },
        ) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One control endpoint of the pool manager.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ControlAddr {
    /// A TCP address (any host that can route to it).
    Tcp(SocketAddr),
    /// A Unix socket (processes on the PM's host; in the PM info it comes first, and
    /// elsewhere connecting to it fails at once and the next endpoint is tried).
    Unix(std::path::PathBuf),
}

impl std::fmt::Display for ControlAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlAddr::Tcp(a) => write!(f, "{a}"),
            ControlAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl From<SocketAddr> for ControlAddr {
    fn from(a: SocketAddr) -> ControlAddr {
        ControlAddr::Tcp(a)
    }
}

impl ControlAddr {
    /// The form inside the PM info: `ip:port`, or `unix=<path as hex>` (paths may hold
    /// the info's separators).
    fn encode(&self) -> String {
        use std::os::unix::ffi::OsStrExt;
        match self {
            ControlAddr::Tcp(a) => a.to_string(),
            ControlAddr::Unix(p) => format!("unix={}", hex::encode(p.as_os_str().as_bytes())),
        }
    }

    fn decode(s: &str) -> Result<ControlAddr, PmInfoError> {
        use std::os::unix::ffi::OsStrExt;
        match s.strip_prefix("unix=") {
            Some(h) => {
                let bytes = unhex(h, "unix socket path")?;
                Ok(ControlAddr::Unix(
                    std::ffi::OsStr::from_bytes(&bytes).into(),
                ))
            }
            None => s
                .parse()
                .map(ControlAddr::Tcp)
                .map_err(|_| PmInfoError::Endpoint(s.to_string())),
        }
    }
}

/// Where the pool manager is and how to prove membership. Its `Debug` form leaves the
/// secret out (it is `<n bytes>`), so logging an info never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct PmInfo {
    /// The workflow name.
    pub workflow: String,
    /// The PM's control endpoints, tried in order (of shard 0, in a pool of several).
    pub endpoints: Vec<ControlAddr>,
    /// In a pool of several shards, the control endpoints of shards 1, 2, ... (see
    /// [`PmInfo::shards`]); empty for a pool of one manager.
    pub other_shards: Vec<Vec<ControlAddr>>,
    /// The workflow secret.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for PmInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmInfo")
            .field("workflow", &self.workflow)
            .field("endpoints", &self.endpoints)
            .field("other_shards", &self.other_shards)
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .finish()
    }
}

/// Why a PM info string was refused. No message repeats the secret field (or anything
/// that could be it): a mistyped info in a log must not leak the workflow's secret.

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PmInfoError {
    /// Not `mstro-pm-v1:...` with four fields: what it starts with (up to its first `:`,
    /// at most 16 characters; only a count when that is all hex digits, which could be a
    /// secret), how many `:`-separated fields and characters it has.
    #[error(
        "PM info starting with {head:?} ({fields} fields, {chars} characters) is not of the form mstro-pm-v1:<workflow>:<addrs>:<secret>; copy it whole from the pool manager's output"
    )]
    Format {
        /// The start of the text, up to its first `:` (at most 16 characters).
        head: String,
        /// How many `:`-separated fields it has (4 or more expected).
        fields: usize,
        /// Its length in characters.
        chars: usize,
    },
    /// A field is not valid hex or UTF-8.
    #[error("PM info field {field} is not valid hex{utf8}")]
    Hex {
        /// The field.
        field: &'static str,
        /// Whether UTF-8 was expected too.
        utf8: &'static str,
    },
    /// An endpoint is not `ip:port` or `unix=<hex path>`.
    #[error("PM info endpoint {0:?} is not ip:port or unix=<path as hex>")]
    Endpoint(String),
    /// No endpoint, or an empty secret.
    #[error("PM info has no {0}")]
    Missing(&'static str),
    /// The shards of a `mstro-pm-v2` info are not 2 to
    /// [`MAX_SHARDS`](pool_core::shards::MAX_SHARDS) lists of endpoints (how many it has),
    /// or a `mstro-pm-v1` info lists several.
    #[error(
        "PM info lists {0} shards: mstro-pm-v1 has one, mstro-pm-v2 2 to 1024 (each `/`-separated, with an endpoint or more); copy it whole from the pool manager's output"
    )]
    Shards(usize),
}

fn unhex(s: &str, field: &'static str) -> Result<Vec<u8>, PmInfoError> {
    hex::decode(s).map_err(|_| PmInfoError::Hex { field, utf8: "" })
}

impl PmInfo {
    /// The text form: `mstro-pm-v1` for a pool of one manager, `mstro-pm-v2` listing the
    /// shards of one of several.
    pub fn encode(&self) -> String {
        let addrs = |shard: &[ControlAddr]| -> String {
            let each: Vec<String> = shard.iter().map(ControlAddr::encode).collect();
            each.join(",")
        };
        let shards: Vec<String> = std::iter::once(&self.endpoints)
            .chain(&self.other_shards)
            .map(|s| addrs(s))
            .collect();
        let prefix = if self.other_shards.is_empty() {
            PREFIX
        } else {
            PREFIX_SHARDS
        };
        format!(
            "{prefix}:{}:{}:{}",
            hex::encode(self.workflow.as_bytes()),
            shards.join("/"),
            hex::encode(&self.secret)
        )
    }

    /// The shards of the pool: one, or as many as the info lists.
    pub fn shards(&self) -> pool_core::shards::Shards {
        pool_core::shards::Shards::new(1 + self.other_shards.len()).unwrap_or_default()
    }

    /// The control endpoints of shard `shard` (shard 0: [`PmInfo::endpoints`]); `None` for
    /// a shard the pool does not have.
    pub fn shard(&self, shard: usize) -> Option<&[ControlAddr]> {
        match shard {
            0 => Some(&self.endpoints),
            s => self.other_shards.get(s - 1).map(Vec::as_slice),
        }
    }

    /// Shard `shard` alone, as the info of a pool of one manager (its endpoints, the
    /// workflow and the secret): what a standby of that shard watches. `None` for a shard
    /// the pool does not have.
    pub fn of_shard(&self, shard: usize) -> Option<PmInfo> {
        Some(PmInfo {
            workflow: self.workflow.clone(),
            endpoints: self.shard(shard)?.to_vec(),
            other_shards: Vec::new(),
            secret: self.secret.clone(),
        })
    }

    /// This info with shard `shard`'s endpoints replaced by `endpoints` (the manager that
    /// took the shard over); `None` for a shard the pool does not have.
    pub fn with_shard(&self, shard: usize, endpoints: Vec<ControlAddr>) -> Option<PmInfo> {
        let mut info = self.clone();
        match shard {
            0 => info.endpoints = endpoints,
            s => *info.other_shards.get_mut(s - 1)? = endpoints,
        }
        Some(info)
    }

    /// Parses the text form (surrounding whitespace and the `MSTRO_POOL_MANAGER_INFO;…;`
    /// wrapper the PM prints are accepted).
    ///
    /// # Errors
    /// [`PmInfoError`] naming the field that is wrong.
    pub fn parse(s: &str) -> Result<PmInfo, PmInfoError> {
        let s = s.trim();
        let s = s
            .strip_prefix(&format!("{PM_INFO_ENV};"))
            .map(|r| r.trim_end_matches(';'))
            .unwrap_or(s);
        let parts: Vec<&str> = s.split(':').collect();
        // IPv6 endpoints contain ':' too: the last field is the secret, the second the name.
        let sharded = parts[0] == PREFIX_SHARDS;
        if parts.len() < 4 || !(parts[0] == PREFIX || sharded) {
            // A head of hex digits may be (part of) a secret: not repeated.
            let head = parts[0];
            let head = if head.chars().all(|c| c.is_ascii_hexdigit()) {
                format!("<{} hex digits>", head.len())
            } else {
                head.chars().take(16).collect()
            };
            return Err(PmInfoError::Format {
                head,
                fields: parts.len(),
                chars: s.chars().count(),
            });
        }
        let workflow =
            String::from_utf8(unhex(parts[1], "workflow")?).map_err(|_| PmInfoError::Hex {
                field: "workflow",
                utf8: " UTF-8",
            })?;
        let secret = unhex(parts[parts.len() - 1], "secret")?;
        let addrs = parts[2..parts.len() - 1].join(":");
        let groups: Vec<&str> = addrs.split('/').collect();
        let count = groups.len();
        let fits = if sharded {
            (2..=usize::from(pool_core::shards::MAX_SHARDS)).contains(&count)
        } else {
            count == 1
        };
        if !fits {
            return Err(PmInfoError::Shards(count));
        }
        let mut shards = groups.into_iter().map(|group| {
            let endpoints = group
                .split(',')
                .filter(|a| !a.is_empty())
                .map(ControlAddr::decode)
                .collect::<Result<Vec<_>, _>>()?;
            if endpoints.is_empty() {
                return Err(PmInfoError::Missing("endpoint"));
            }
            Ok(endpoints)
        });
        let endpoints = shards
            .next()
            .unwrap_or(Err(PmInfoError::Missing("endpoint")))?;
        let other_shards = shards.collect::<Result<Vec<_>, _>>()?;
        if secret.is_empty() {
            return Err(PmInfoError::Missing("secret"));
        }
        Ok(PmInfo {
            workflow,
            endpoints,
            other_shards,
            secret,
        })
    }

    /// Reads `MSTRO_POOL_MANAGER_INFO`; `None` when unset or empty.
    ///
    /// # Errors
    /// [`PmInfoError`] for a malformed value.
    pub fn from_env() -> Result<Option<PmInfo>, PmInfoError> {
        match std::env::var(PM_INFO_ENV) {
            Ok(v) if !v.trim().is_empty() => PmInfo::parse(&v).map(Some),
            _ => Ok(None),
        }
    }
}

/// Why a PM info file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PmInfoFileError {
    /// Not a regular file of this user (another user's, a link, a FIFO), or unreadable:
    /// an info file decides whom a process sends its data to, so only the user's own is
    /// believed.
    #[error("PM info file: {0}")]
    Unreadable(#[from] safefs::Error),
    /// It holds no valid PM info.
    #[error("PM info file {path}: {error}")]
    Malformed {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        error: PmInfoError,
    },
}

impl PmInfo {
    /// Writes this info to `path`, readable only by its owner (created exclusively with
    /// mode 0600; an existing file is taken over only if it is a regular file of this
    /// user that is empty or holds a PM info, made 0600 before it is truncated and
    /// written; never through a link, never into another user's file or a FIFO, never
    /// over anything else a user keeps there), and keeps it locked while the returned
    /// file is open: a second PM given the same path fails instead of overwriting the
    /// first one's info. A file a killed PM left behind is not locked and is taken over.
    /// [`PmInfo::from_file`] reads it.
    ///
    /// # Errors
    /// What is at `path` when it is not ours ([`safefs::Error::Squatted`], naming it);
    /// `AlreadyExists` for a file that holds something else (nothing of it is changed);
    /// the OS errors; `WouldBlock` when another running PM holds the file.
    pub fn write_file(&self, path: &std::path::Path) -> std::io::Result<std::fs::File> {
        use std::io::Write;
        match safefs::read_own(path, PM_INFO_FILE_MAX) {
            Ok(text) if !holds_pm_info_or_nothing(&text) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!(
                        "the file exists and holds something else than a pool manager's info ({} bytes); it is left as it is: give a path of a new file",
                        text.len()
                    ),
                ));
            }
            Err(safefs::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::InvalidData =>
            {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "the file exists and holds something else than a pool manager's info (not text); it is left as it is: give a path of a new file",
                ));
            }
            _ => {}
        }
        let mut f = safefs::create_or_open_own(path, 0o600)?;
        if !safefs::try_lock(&f) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "another running pool manager writes its info there; give this one another path",
            ));
        }
        f.set_len(0)?;
        writeln!(f, "{}", self.encode())?;
        Ok(f)
    }

    /// Puts `endpoints` for shard `shard` into the pool's info file at `path` (the info
    /// there, or `seen` when the file is gone or holds another pool's): what the standby
    /// of one shard does when it took its shard over while the other shards' managers may
    /// run on (one of them holds the file: [`PmInfo::write_file`] would refuse). The new
    /// info goes to a new file renamed over the old one, whose lock the caller holds
    /// with the returned file, as a manager holds its info file; standbys of several
    /// shards taking over at once update it one at a time (each under the lock of the
    /// file's directory, waited for up to 10 s), so none loses another's endpoints.
    /// Returns the info written.
    ///
    /// # Errors
    /// A shard `seen` does not have (`InvalidInput`); the directory's lock not had within
    /// 10 s (`TimedOut`); what is at the new file's path when it is not ours; the OS
    /// errors.
    pub fn put_shard_in_file(
        path: &std::path::Path,
        shard: usize,
        endpoints: Vec<ControlAddr>,
        seen: &PmInfo,
    ) -> std::io::Result<(PmInfo, std::fs::File)> {
        use std::io::Write;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        let dir_lock = std::fs::File::open(dir)?;
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !safefs::try_lock(&dir_lock) {
            if std::time::Instant::now() >= until {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} stayed locked for 10 s (another standby updating the pool's info?)",
                        dir.display()
                    ),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let now = match PmInfo::from_file(path) {
            Ok(Some(i)) if i.workflow == seen.workflow && i.shards() == seen.shards() => i,
            _ => seen.clone(),
        };
        let info = now.with_shard(shard, endpoints).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the pool has {} shards, not shard {shard}",
                    seen.shards().count()
                ),
            )
        })?;
        let name = path
            .file_name()
            .map_or_else(|| "pm-info".into(), |n| n.to_string_lossy().into_owned());
        let new = dir.join(format!(".{name}.{}.new", std::process::id()));
        let mut f = safefs::create_or_open_own(&new, 0o600).map_err(safefs::Error::into_io)?;
        // Held from now on, as a manager holds its info file: a janitor leaves it.
        safefs::try_lock(&f);
        f.set_len(0)?;
        writeln!(f, "{}", info.encode())?;
        std::fs::rename(&new, path)?;
        Ok((info, f))
    }

    /// Reads the PM info in the file at `path` (as `maestro pm --info-file` writes it, or
    /// the `MSTRO_POOL_MANAGER_INFO;<info>;` line); `None` while the file does not exist
    /// or is still empty (its PM has not written it yet).
    ///
    /// # Errors
    /// [`PmInfoFileError::Unreadable`] for anything but a regular file of this user in a
    /// directory no other user controls (see [`safefs::read_own_in_safe_dir`]);
    /// [`PmInfoFileError::Malformed`] for text that is not a PM info.
    pub fn from_file(path: &std::path::Path) -> Result<Option<PmInfo>, PmInfoFileError> {
        let text = match safefs::read_own_in_safe_dir(path, PM_INFO_FILE_MAX) {
            Ok(t) => t,
            Err(safefs::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        parse_info_text(&text).map_err(|error| PmInfoFileError::Malformed {
            path: path.to_path_buf(),
            error,
        })
    }
}

/// Most bytes of a PM info file read.
const PM_INFO_FILE_MAX: u64 = 64 << 10;

/// The PM info in the text of an info file (the info, or the `MSTRO_POOL_MANAGER_INFO;
/// <info>;` line, as a user copies it); `None` for empty text.
///
/// # Errors
/// Text that is no PM info.
pub fn parse_info_text(text: &str) -> Result<Option<PmInfo>, PmInfoError> {
    let line = text.trim();
    let line = line
        .strip_prefix(PM_INFO_ENV)
        .and_then(|l| l.strip_prefix(';'))
        .and_then(|l| l.strip_suffix(';'))
        .unwrap_or(line);
    if line.is_empty() {
        return Ok(None);
    }
    PmInfo::parse(line).map(Some)
}

/// Whether `text` (of a file found at a PM info file's path) is empty or a PM info: what
/// a pool manager may take over.
pub fn holds_pm_info_or_nothing(text: &str) -> bool {
    parse_info_text(text).is_ok()
}

/// Whether `text` is a PM info (a pool manager wrote it): what a janitor may remove.
pub fn holds_pm_info(text: &str) -> bool {
    matches!(parse_info_text(text), Ok(Some(_)))
}

/// A fresh 256-bit workflow secret from the OS.
///
/// # Errors
/// When the OS random source fails.
pub fn new_secret() -> std::io::Result<Vec<u8>> {
    let mut s = vec![0u8; 32];
    getrandom::fill(&mut s).map_err(|e| std::io::Error::other(format!("OS random source: {e}")))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_info_file_is_read_in_either_form_and_only_if_ours() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wf.info");
        assert!(PmInfo::from_file(&path).expect("absent").is_none());
        std::fs::write(&path, "").expect("write");
        assert!(PmInfo::from_file(&path).expect("empty").is_none());
        let info = PmInfo {
            workflow: "wf".into(),
            endpoints: vec![ControlAddr::Tcp("127.0.0.1:7".parse().expect("addr"))],
            other_shards: Vec::new(),
            secret: vec![7; 32],
        };
        for text in [
            format!("{}\n", info.encode()),
            format!("MSTRO_POOL_MANAGER_INFO;{};\n", info.encode()),
        ] {
            std::fs::write(&path, text).expect("write");
            assert_eq!(PmInfo::from_file(&path).expect("read"), Some(info.clone()));
        }
        std::fs::write(&path, "not an info").expect("write");
        assert!(matches!(
            PmInfo::from_file(&path),
            Err(PmInfoFileError::Malformed { .. })
        ));
        // A link is not believed, whatever it points to.
        let link = dir.path().join("link.info");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(matches!(
            PmInfo::from_file(&link),
            Err(PmInfoFileError::Unreadable(_))
        ));
        // Nor a file whose directory is reached through a link, nor one in a directory
        // others may write in without the sticky bit.
        let linked_dir = dir.path().join("dirlink");
        std::os::unix::fs::symlink(dir.path(), &linked_dir).expect("symlink");
        std::fs::write(&path, info.encode()).expect("write");
        let through = PmInfo::from_file(&linked_dir.join("wf.info"));
        assert!(
            matches!(&through, Err(PmInfoFileError::Unreadable(e)) if e.to_string().contains("symbolic link")),
            "{through:?}"
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        assert!(matches!(
            PmInfo::from_file(&path),
            Err(PmInfoFileError::Unreadable(_))
        ));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod");
        assert_eq!(PmInfo::from_file(&path).expect("sticky"), Some(info));
    }

    #[test]
    fn round_trips_including_ipv6_and_odd_names() {
        let info = PmInfo {
            workflow: "climate:run;7 ü".into(),
            endpoints: vec![
                ControlAddr::Unix("/tmp/odd:dir,name/pm.sock".into()),
                ControlAddr::Tcp("127.0.0.1:4000".parse().expect("v4")),
                ControlAddr::Tcp("[::1]:4001".parse().expect("v6")),
            ],
            other_shards: Vec::new(),
            secret: vec![1, 2, 255],
        };
        let text = info.encode();
        assert!(text.starts_with("mstro-pm-v1:"), "one manager: {text}");
        assert_eq!(PmInfo::parse(&text), Ok(info.clone()));
        assert_eq!(
            PmInfo::parse(&format!("  {PM_INFO_ENV};{text};\n")),
            Ok(info.clone())
        );
        // A pool of three shards: one line listing each shard's endpoints.
        let sharded = PmInfo {
            other_shards: vec![
                vec![ControlAddr::Tcp("[::1]:4002".parse().expect("v6"))],
                vec![
                    ControlAddr::Unix("/tmp/a/b".into()),
                    ControlAddr::Tcp("10.0.0.3:4003".parse().expect("v4")),
                ],
            ],
            ..info
        };
        let text = sharded.encode();
        assert!(text.starts_with("mstro-pm-v2:"), "{text}");
        let parsed = PmInfo::parse(&text).expect("v2");
        assert_eq!(parsed, sharded);
        assert_eq!(parsed.shards().count(), 3);
        assert_eq!(parsed.shard(2).map(<[_]>::len), Some(2));
        assert_eq!(parsed.shard(3), None);
    }

    #[test]
    fn shards_that_are_none_are_refused_saying_how_many() {
        let v1 = "mstro-pm-v1:6162:127.0.0.1:1/127.0.0.1:2:0a0b";
        assert_eq!(PmInfo::parse(v1), Err(PmInfoError::Shards(2)));
        let one = "mstro-pm-v2:6162:127.0.0.1:1:0a0b";
        assert_eq!(PmInfo::parse(one), Err(PmInfoError::Shards(1)));
        let empty = "mstro-pm-v2:6162:127.0.0.1:1//127.0.0.1:3:0a0b";
        assert_eq!(PmInfo::parse(empty), Err(PmInfoError::Missing("endpoint")));
        let many = vec!["127.0.0.1:1"; 1025].join("/");
        let e = PmInfo::parse(&format!("mstro-pm-v2:6162:{many}:0a0b")).expect_err("too many");
        assert_eq!(e, PmInfoError::Shards(1025));
        assert!(e.to_string().contains("2 to 1024"), "{e}");
    }

    #[test]
    fn malformed_info_is_a_typed_error() {
        assert!(matches!(PmInfo::parse(""), Err(PmInfoError::Format { .. })));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v3:00:1.2.3.4:5:00"),
            Err(PmInfoError::Format { .. })
        ));
        // A mangled info never repeats its secret in the error (nor in Debug).
        let secret = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
        for mangled in [
            format!("mstro-pm-v1:61{secret}"),
            format!("MSTRO_POOL_MANAGER_INFO={secret}"),
            format!("{secret}:x:y"),
        ] {
            let e = PmInfo::parse(&mangled).expect_err("mangled").to_string();
            assert!(!e.contains(&secret[..8]), "{e}");
        }
        let info = PmInfo::parse(&format!("mstro-pm-v1:61:127.0.0.1:1:{secret}")).expect("ok");
        assert!(!format!("{info:?}").contains(&secret[..8]));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:zz:127.0.0.1:1:00"),
            Err(PmInfoError::Hex {
                field: "workflow",
                ..
            })
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:ff:127.0.0.1:1:00"),
            Err(PmInfoError::Hex { utf8: " UTF-8", .. })
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:nohost:00"),
            Err(PmInfoError::Endpoint(_))
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:unix=2f7:00"),
            Err(PmInfoError::Hex {
                field: "unix socket path",
                ..
            })
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61::00"),
            Err(PmInfoError::Missing("endpoint"))
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:127.0.0.1:1:"),
            Err(PmInfoError::Missing("secret"))
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:127.0.0.1:1:0"),
            Err(PmInfoError::Hex {
                field: "secret",
                ..
            })
        ));
    }
}
