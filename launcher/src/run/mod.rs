//! `maestro run`: our own PMIx host on this node, in the spirit of GASNet's local spawner.
//!
//! It starts a PMIx server, registers one job with every key a PMIx client reads, spawns N
//! ranks with their PMIx environment (each in its own process group, killed if the launcher
//! dies), forwards their output line by line, serves the jobs its ranks and tools start
//! with `PMIx_Spawn` the same way (see `jobs`, `launch`), and watches them all:
//! - a rank that fails (non-zero exit, signal, exit without `PMIx_Finalize` after connecting)
//!   or calls `PMIx_Abort` makes the launcher notify the others with
//!   `PMIX_ERR_PROC_ABORTED` (affected proc and exit code attached), wait `--grace`
//!   seconds, then SIGTERM the rest and SIGKILL them `--kill-after` seconds later;
//! - SIGINT/SIGTERM/SIGHUP/SIGQUIT to the launcher are forwarded to every rank's process
//!   group, followed by SIGKILL after `--kill-after`;
//! - `--timeout` bounds the whole job (exit code 124 when it fires);
//! - when the pipe or terminal the launcher writes to goes away (`maestro run ... | head`),
//!   the ranks get SIGTERM (SIGKILL after `--kill-after`) and the launcher exits with 141,
//!   as a program killed by SIGPIPE does; output keeps being drained meanwhile, so no rank
//!   blocks on a full pipe.
//!
//! The exit code is the worst status of the ranks that ended on their own (see `outcome`).
//! Everything the PMIx server writes lives in a private temporary directory removed at
//! exit.

mod credential;
mod fabric;
pub use fabric::FabricSource;
mod host;
mod jobs;
mod launch;
mod outcome;
mod output;
mod peers;
mod pmix_log;
mod query_fix;
mod signals;
mod spawn;
mod supervise;
mod tempdir;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use pmix::{Info, JobLayout, Proc, Range, Server, ServerConfig, Status, Value, keys};

use crate::janitor::{Janitor, JanitorArgs};
use crate::rundir::{SystemServer, system_server};
use host::{HostEvent, LauncherHost};
use jobs::{JobPlan, RankId};
use outcome::{Outcome, RankEnd, StopCause};
use signals::{SignalRelay, relay};
use spawn::RankProc;
use supervise::Job;
use tempdir::TempDir;

/// Options of `maestro run` (its command line).
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunOptions {
    /// Number of ranks.
    #[arg(
        short = 'n',
        long = "np",
        visible_alias = "nprocs",
        default_value_t = 1,
        allow_negative_numbers = true,
        value_parser = pool_tools::cli::positive("ranks")
    )]
    pub nprocs: u32,
    /// Prefix every output line with the rank in brackets (`-l` as with `srun`).
    #[arg(
        short = 'l',
        long,
        help = "Prefix every output line with \"[rank] \" (-l as srun's)"
    )]
    pub label: bool,
    /// Give the ranks environment variable VAR: the value it has here, or VALUE
    /// (repeatable; as `mpirun -x`).
    #[arg(short = 'x', value_name = "VAR[=VALUE]", value_parser = parse_export)]
    pub export: Vec<(String, Option<String>)>,
    /// Accepted for `mpirun`'s command lines: ranks share the node's cores as they come.
    #[arg(long, hide = true)]
    pub oversubscribe: bool,
    /// Accepted for `mpirun`'s command lines (`maestro run` starts ranks as whoever runs
    /// it, root included).
    #[arg(long, hide = true)]
    pub allow_run_as_root: bool,
    /// Let PMIx tools (maestro query) attach.
    #[arg(long)]
    pub tool_support: bool,
    /// Also serve as this node's PMIx system server (implies --tool-support), so tools
    /// attach without knowing the pid: maestro query --system.
    #[arg(long)]
    pub system_server: bool,
    /// Most processes one `PMIx_Spawn` request of a rank may start (all of its apps
    /// together); a larger request is refused with `PMIX_ERR_BAD_PARAM`.
    #[arg(long, default_value = "256", value_parser = clap::value_parser!(u32).range(1..=65535))]
    pub max_spawn: u32,
    /// Most processes alive under this launcher at once: its ranks and every job they
    /// spawn together. A `PMIx_Spawn` that would pass it is refused with
    /// `PMIX_ERR_BAD_PARAM` (room comes back as spawned processes end).
    #[arg(long, default_value = "1024", value_parser = clap::value_parser!(u32).range(1..=65535))]
    pub max_procs: u32,
    /// Seconds the other ranks get after a rank failed or aborted before SIGTERM.
    #[arg(long, default_value = "2", value_parser = pool_tools::cli::parse_duration, allow_negative_numbers = true)]
    pub grace: Duration,
    /// Seconds between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, default_value = "1", value_parser = pool_tools::cli::parse_duration, allow_negative_numbers = true)]
    pub kill_after: Duration,
    /// Wall-clock limit of the job in seconds (exit code 124 when reached).
    #[arg(long, value_parser = pool_tools::cli::parse_timeout, allow_negative_numbers = true)]
    pub timeout: Option<Duration>,
    /// Let Open MPI 4.x ranks recognise a PMIx direct launch (see
    /// [`OPENMPI_DIRECT_LAUNCH`]); `--no-openmpi-compat` turns it off.
    #[arg(
        long = "no-openmpi-compat",
        action = clap::ArgAction::SetFalse,
        help = "Do not tell Open MPI 4.x ranks that a PMIx launcher started them"
    )]
    pub openmpi_compat: bool,
    /// Which rank of the job reads the launcher's standard input (as with `mpirun`):
    /// a rank number, or `none`. The other ranks' input is empty (`/dev/null`).
    #[arg(long, default_value = "0", value_parser = parse_stdin, value_name = "RANK|none")]
    pub stdin: StdinTo,
    /// Hold every rank in `PMIx_Init` until a PMIx tool (a debugger) raises
    /// `PMIX_DEBUGGER_RELEASE` for the job (implies --tool-support).
    #[arg(long)]
    pub stop_in_init: bool,
    /// The fabric beyond the node, which `PMIx_Fabric_register` answers with.
    #[command(flatten)]
    pub fabric_source: FabricSource,
    /// With --fabric or --discover-fabric: seconds between looks at the fabric again; a
    /// switch link that went down or up is raised to the job as `PMIX_FABRIC_UPDATED`.
    /// 0: never (`PMIx_Fabric_update` still looks).
    #[arg(long, value_name = "S", default_value = "2", value_parser = pool_tools::cli::parse_duration, allow_negative_numbers = true)]
    pub fabric_watch: Duration,
    /// The program and its arguments.
    // Any bytes, as `mpirun` and `srun` pass them: arguments are not text.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// What `maestro run --help` says after the options: the habits of `mpirun` and `srun`
/// it takes, and its exit codes.
const RUN_AFTER_HELP: &str = "\
As mpirun and srun: -np N is -n N; --oversubscribe and --allow-run-as-root are accepted (ranks share this node's cores; root may run jobs). \
Their options for several nodes (-H, --host, --hostfile, --map-by, -N, ...) are refused: maestro run starts every rank on this node; use srun --mpi=pmix or mpirun across nodes.

Exit codes:
  0        every rank ended with 0
  N        the worst status of the ranks that ended on their own (a PMIx_Abort's status, at least 1)
  128+S    a rank died by signal S, or the launcher was stopped by it (141: a closed output pipe)
  124      the job passed --timeout
  127      the program was not found (126: it cannot be run)
  2        a bad command line (nothing started)
  1        the launcher itself failed, or could not write the ranks' output";

/// Parses `-x VAR[=VALUE]`: the variable's name and the value given, if one is.
///
/// # Errors
/// An empty name, or one holding `=` or a NUL byte.
fn parse_export(s: &str) -> Result<(String, Option<String>), String> {
    let (name, value) = match s.split_once('=') {
        Some((name, value)) => (name, Some(value.to_string())),
        None => (s, None),
    };
    let is_name = |n: &str| {
        n.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !is_name(name) || value.as_deref().is_some_and(|v| v.contains('\0')) {
        return Err(format!(
            "{s:?} is not VAR or VAR=VALUE (an environment variable for the ranks: a name of letters, digits and '_', not starting with a digit)"
        ));
    }
    Ok((name.to_string(), value))
}

/// `mpirun`'s `-np N`, which a parser of single-letter options cannot take, as `-n N`:
/// `args` is the whole command line; only `maestro run`'s options are looked at (not the
/// program's own, after `--` or the program's name).
pub fn mpirun_habits(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    /// `maestro run`'s options that take a value as the next word.
    const VALUED: [&str; 14] = [
        "-n",
        "--np",
        "--nprocs",
        "-np",
        "--grace",
        "--kill-after",
        "--timeout",
        "--max-spawn",
        "--max-procs",
        "--stdin",
        "-x",
        "--fabric",
        "--ib-ca",
        "--fabric-watch",
    ];
    let mut args = args;
    if args.get(1).is_none_or(|a| a != "run") {
        return args;
    }
    let mut i = 2;
    while i < args.len() {
        let word = args[i].to_string_lossy().into_owned();
        if word == "--" || !word.starts_with('-') {
            break;
        }
        if word == "-np" {
            args[i] = "-n".into();
        }
        i += if VALUED.contains(&word.as_str()) {
            2
        } else {
            1
        };
    }
    args
}

/// Where the launcher's standard input goes (`--stdin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdinTo {
    /// To this rank of job 0.
    Rank(u32),
    /// Nowhere: every rank reads `/dev/null`.
    Nobody,
}

/// `--stdin`: a rank number, or `none`.
fn parse_stdin(s: &str) -> Result<StdinTo, String> {
    match s {
        "none" => Ok(StdinTo::Nobody),
        n => n.parse::<u32>().map(StdinTo::Rank).map_err(|_| {
            format!("{n:?} is neither a rank nor \"none\" (e.g. --stdin 0, --stdin none)")
        }),
    }
}

/// `maestro run`: runs the job and exits with its code (2 when it could not run at all).
/// `std_closed(fd)` says whether standard output (1) or error (2) was closed when the
/// process started (the binary notes it before Rust's runtime opens `/dev/null` in its
/// place): what the ranks write there would be lost, and the launcher says so.
pub fn main(opts: &RunOptions, std_closed: fn(usize) -> bool) -> std::process::ExitCode {
    match run(opts, std_closed) {
        Ok(code) => std::process::ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("maestro run: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Why `maestro run` could not run the job at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A PMIx server call failed.
    #[error("PMIx server: {0}")]
    Pmix(#[from] pmix::Error),
    /// A local resource (tmpdir, thread, signal handler) failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Bad options.
    #[error("{0}")]
    Usage(String),
    /// The OS random source failed (needed for the credential key).
    #[error("cannot draw a credential key from the OS: {0}")]
    Random(getrandom::Error),
    /// The fabric beyond the node (`--fabric`, `--discover-fabric`) could not be read or
    /// discovered.
    #[error("the fabric beyond the node: {0}")]
    Fabric(#[from] inventory::InventoryError),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    move |source| RunError::Io {
        what: what.into(),
        source,
    }
}

/// Open MPI 4.x only believes it was direct-launched over PMIx when it recognises the
/// launcher (mpirun, Slurm, IBM JSM, Flux); otherwise every rank starts as a singleton. Its
/// JSM detection is exactly "a PMIx-native launcher started us, use PMIx (`ess=pmi`) and do
/// not bind": it checks only that this variable exists. `maestro run` sets it (unless the
/// environment already has it, or `--no-openmpi-compat`), so MPI programs built with Open
/// MPI 4.x run as one job. Open MPI 5 detects PMIx by itself.
pub const OPENMPI_DIRECT_LAUNCH: (&str, &str) = ("JSM_JSRUN_PORT", "0");

/// Events the main loop waits for.
enum LoopEvent {
    RankExited(RankId, RankEnd),
    Host(HostEvent),
    Signal(i32),
    /// The launcher's stdout or stderr is gone (a closed pipe): the job ends as a
    /// program killed by SIGPIPE would.
    OutputClosed,
    /// Writing the launcher's stdout or stderr failed otherwise (a full disk, a closed
    /// descriptor): said once; the job runs on and the launcher's exit code is not 0.
    OutputFailed(output::Stream, String),
    /// Switch links of the fabric beyond the node went down or up.
    SwitchLinks(Vec<inventory::switches::watch::LinkChange>),
}

/// Runs the job and returns the exit code for the launcher (see [`main`]).
///
/// # Errors
/// [`RunError`] when the job could not be set up (PMIx server, tmpdir, threads). Failures
/// of the ranks themselves are not errors: they are the exit code.
fn run(opts: &RunOptions, std_closed: fn(usize) -> bool) -> Result<i32, RunError> {
    check_options(opts)?;
    // Signals first: one that arrives during setup is queued, and the job is then not
    // started at all.
    let (tx, rx) = channel::<LoopEvent>();
    let signals = SignalRelay::start(tx.clone())?;
    let tmp = TempDir::create()?;
    let hostname = inventory::local_hostname();
    let janitor = Janitor::start(&JanitorArgs {
        run_dir: Some(tmp.0.clone()),
        hostname: Some(hostname.clone()),
        info_file: None,
        // The ranks inherit it: the files of those killed with this launcher go too.
        gfs_dir: std::env::var_os("MSTRO_TRANSPORT_GFS_DIR")
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from),
        // The workflow ends with this launcher: its PM's kept files go too.
        kept_for_taker: false,
        // Janitor::start names this process.
        parent: None,
    });
    let pid = std::process::id();
    let nspace = format!("maestro.job.{pid}");
    let (host_tx, host_rx) = channel::<HostEvent>();
    let authority = credential::Authority::generate().map_err(RunError::Random)?;
    let mut first = JobPlan::command_line(nspace.clone(), &opts.command, opts.nprocs);
    first.set_env(&exported(opts)?);
    first.stop_in_init = opts.stop_in_init;
    let switches = (opts.fabric_source.source())
        .map(|source| fabric::Switches::load(source, &hostname).map(Arc::new))
        .transpose()?;
    if let Some(s) = &switches {
        let tx = tx.clone();
        s.tell(Box::new(move |links| {
            let _ = tx.send(LoopEvent::SwitchLinks(links));
        }));
        fabric::watch(s, opts.fabric_watch).map_err(io_err("starting the fabric watch"))?;
    }
    let host = Arc::new(LauncherHost::new(
        first, &hostname, authority, host_tx, switches,
    ));
    relay(host_rx, tx.clone(), LoopEvent::Host)?;
    let server = start_server(opts, &tmp, &hostname, &host)?;
    let (locality, links) = share_fabric(&server, &host, opts.nprocs);
    let mut job = Job {
        opts,
        server: &server,
        host: &host,
        nspace: &nspace,
        hostname,
        run_dir: tmp.0.clone(),
        locality,
        ended_jobs: BTreeSet::new(),
        janitor,
        tx,
        ranks: BTreeMap::new(),
        outcome: Outcome::default(),
        term_at: None,
        kill_at: None,
        deadline: opts.timeout.map(|t| Instant::now() + t),
        remind: opts.stop_in_init.then(|| {
            (
                Instant::now() + supervise::HOLD_REMINDER,
                supervise::HOLD_REMINDERS,
            )
        }),
        outputs: Vec::new(),
        links,
    };
    for (fd, what) in [(1, "output"), (2, "error")] {
        if std_closed(fd) && job.outcome.output_lost() {
            eprintln!(
                "maestro run: standard {what} was closed when it started (>&-): what the ranks write there is lost; maestro run will exit with a failure"
            );
        }
    }
    job.register(0)?;
    match rx.try_recv() {
        Ok(LoopEvent::Signal(sig)) => {
            eprintln!("maestro run: signal {sig} during setup; not starting the job");
            job.outcome.stop(StopCause::Signal(sig));
        }
        early => {
            // Anything else that came during setup (a tool's job control as soon as tools
            // may attach, say) is handled once the ranks run, not dropped.
            if let Ok(event) = early {
                let _ = job.tx.send(event);
            }
            job.spawn_all();
            job.supervise(&rx);
        }
    }
    job.sweep_groups();
    job.finish_outputs();
    signals.stop();
    let code = job.outcome.exit_code();
    drop(job);
    leave(server, &host, tmp, code);
    Ok(code)
}

/// The ranks' variables of `-x` (a name alone takes its value here).
///
/// # Errors
/// [`RunError::Usage`] for a name alone that is not set here.
fn exported(opts: &RunOptions) -> Result<Vec<(String, String)>, RunError> {
    opts.export
        .iter()
        .map(|(name, value)| match value {
            Some(v) => Ok((name.clone(), v.clone())),
            None => std::env::var(name).map(|v| (name.clone(), v)).map_err(|_| {
                RunError::Usage(format!(
                    "-x {name}: {name} is not set here; give -x {name}=VALUE"
                ))
            }),
        })
        .collect()
}

/// What `option` (of `mpirun` or `srun`, which `maestro run` does not take) asks for, if
/// it is one of theirs.
fn launcher_option(option: &str) -> Option<&'static str> {
    let name = option.split_once('=').map_or(option, |(n, _)| n);
    Some(match name {
        "-H" | "--host" => "the hosts to run on",
        "--hostfile" | "--machinefile" | "-hostfile" => "a file of hosts",
        "--map-by" | "--rank-by" => "how ranks map to hosts and cores",
        "--bind-to" | "--cpu-bind" => "binding ranks to cores",
        "-N" | "--nodes" | "--npernode" => "a number of nodes or ranks per node",
        "-c" | "--cpus-per-task" | "--cpus-per-rank" => "cores per rank",
        "--mca" | "-mca" | "--prtemca" => "an MCA parameter",
        _ => return None,
    })
}

/// Refuses command lines that cannot run: no ranks or too many, an unknown option taken
/// for the program, stdin for a rank that does not exist, no command.
///
/// # Errors
/// [`RunError::Usage`] saying what is wrong.
fn check_options(opts: &RunOptions) -> Result<(), RunError> {
    if opts.nprocs == 0 {
        return Err(RunError::Usage("-n must be at least 1".into()));
    }
    if opts.nprocs > u32::from(u16::MAX) {
        return Err(RunError::Usage(format!(
            "-n {} exceeds the {} ranks one node can hold",
            opts.nprocs,
            u16::MAX
        )));
    }
    // An option it does not know is taken for the program by the parser: refused, unless
    // the program came after `--` (which the parser takes away; one left in the command
    // is the separator after the unknown option: `--bogus 2 -- true`).
    if let Some(first) = opts
        .command
        .first()
        .map(|c| c.to_string_lossy())
        .filter(|c| c.starts_with('-'))
        && (opts.command.iter().skip(1).any(|a| a == "--")
            || !std::env::args_os().any(|a| a == "--"))
    {
        return Err(RunError::Usage(match launcher_option(&first) {
            Some(what) => format!(
                "{first} ({what}) is an option of mpirun or srun that maestro run does not take: maestro run starts every rank on this node; for several nodes, use srun --mpi=pmix or mpirun (maestro run --help lists its options)"
            ),
            None => format!(
                "unknown option {first} (maestro run --help lists them); a program whose name starts with '-' goes after --"
            ),
        }));
    }
    if let StdinTo::Rank(r) = opts.stdin
        && r >= opts.nprocs
    {
        return Err(RunError::Usage(format!(
            "--stdin {r}: the job has ranks 0 to {} only",
            opts.nprocs - 1
        )));
    }
    if opts.command.is_empty() {
        return Err(RunError::Usage(
            "no command given: maestro run -n N -- CMD ARGS...".into(),
        ));
    }
    Ok(())
}

/// Starts the PMIx server of the job in `tmp` (and, with `--system-server`, as this node's
/// system server, after removing the file a killed one left).
///
/// # Errors
/// [`RunError`] when the server cannot start.
fn start_server(
    opts: &RunOptions,
    tmp: &TempDir,
    hostname: &str,
    host: &Arc<LauncherHost>,
) -> Result<Server, RunError> {
    let pid = std::process::id();
    if opts.system_server {
        // One per node: a second one would remove the first one's rendezvous file at
        // its exit; a name another user took is theirs.
        let file = crate::rundir::system_server_file(&std::env::temp_dir(), hostname);
        match system_server(&std::env::temp_dir(), hostname) {
            SystemServer::Free => {}
            SystemServer::Running(p) => {
                return Err(RunError::Usage(format!(
                    "this node's system server already runs (pid {p}, {}): there is one per node; stop it first, or run without --system-server",
                    file.display()
                )));
            }
            SystemServer::Foreign(what) => {
                return Err(RunError::Usage(format!(
                    "{} is {what}, not a system server of yours: another user holds this node's system-server name; ask them (or root) to remove it, or run without --system-server",
                    file.display()
                )));
            }
        }
    }
    let server = Server::init(
        &ServerConfig {
            tmpdir: tmp.0.join("server"),
            system_tmpdir: if opts.system_server {
                std::env::temp_dir()
            } else {
                tmp.0.join("system")
            },
            nspace: host::server_nspace(pid),
            rank: 0,
            tool_support: opts.tool_support || opts.system_server || opts.stop_in_init,
            system_support: opts.system_server,
        },
        host.clone(),
    )?;
    if opts.tool_support || opts.stop_in_init {
        eprintln!(
            "maestro run: tools may attach: pid {pid}, tmpdir {}",
            tmp.0.join("server").display()
        );
    }
    if opts.stop_in_init {
        eprintln!("maestro run: {}", supervise::release_hint(pid));
    }
    Ok(server)
}

/// Collects the node's fabric through the server and gives it to the host (for the
/// ranks' NICs and the tools' queries); returns the ranks' locality string and the
/// monitor of the links of the node's NICs.
fn share_fabric(
    server: &Server,
    host: &LauncherHost,
    nprocs: u32,
) -> (String, Option<inventory::netif::LinkMonitor>) {
    let fabric = fabric::FabricView::collect(server, nprocs);
    let locality = server.own_locality_string().unwrap_or_else(|e| {
        tracing::warn!("no locality string for the ranks: {e}");
        String::new()
    });
    let links = fabric.as_ref().map(|f| {
        inventory::netif::LinkMonitor::new(
            f.inventory
                .nics
                .iter()
                .filter(|n| n.kind != inventory::NicKind::Loopback)
                .map(|n| n.name.clone()),
        )
    });
    if let Some(l) = &links {
        tracing::info!(
            "watching links: {}",
            l.watched().collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(f) = fabric {
        host.set_fabric(f);
    }
    (locality, links)
}

/// Ends the launcher's PMIx side after the job: shuts the server down (or, where libpmix's
/// teardown is unsafe, leaves it), removes the private directory, and where a thread is
/// still inside libpmix ends the process at once with the job's `code`.
fn leave(server: Server, host: &Arc<LauncherHost>, tmp: TempDir, code: i32) {
    let finished = if host.teardown_unsafe() {
        // libpmix's teardown is not safe after refusals or groups (see `teardown_unsafe`).
        tracing::info!("leaving without PMIx's teardown");
        host.job_ended();
        std::mem::forget(server);
        false
    } else {
        shut_down(server, host)
    };
    drop(tmp);
    if !finished {
        // A thread is still inside libpmix: the library's exit handlers must not run
        // under it (they crash). Leave now, with the job's code.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: _exit ends the process at once; everything the launcher owns (ranks
        // reaped, directory removed, output flushed) is settled.
        unsafe { libc::_exit(code) };
    }
}

/// How long the PMIx server's shutdown (deregistrations, `PMIx_server_finalize`) may take
/// before the launcher exits without waiting for it.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

/// Deregisters every job of the host and finalizes the PMIx server on a thread of its own, waiting at most [`SHUTDOWN_LIMIT`]: a client that left libpmix in a bad state (a refused
/// `PMIx_Init` under a rank's name, say) must not keep the launcher from exiting. The
/// job's ranks have all been reaped by now; a shutdown that overran is logged and left to
/// the process's exit; false then.
fn shut_down(server: Server, host: &Arc<LauncherHost>) -> bool {
    let (done_tx, done) = channel::<()>();
    let host = Arc::clone(host);
    let teardown = move || {
        let jobs = host.plans();
        for plan in &jobs {
            for r in 0..plan.nprocs() {
                if let Err(e) = server.deregister_client(&Proc::new(&plan.nspace, r)) {
                    tracing::debug!("deregister {} rank {r}: {e}", plan.nspace);
                }
            }
        }
        host.job_ended();
        for plan in &jobs {
            if let Err(e) = server.deregister_nspace(&plan.nspace) {
                tracing::warn!("deregister {}: {e}", plan.nspace);
            }
        }
        drop(server);
        let _ = done_tx.send(());
    };
    match std::thread::Builder::new()
        .name("pmix-shutdown".into())
        .spawn(teardown)
    {
        Ok(_) => match done.recv_timeout(SHUTDOWN_LIMIT) {
            Err(RecvTimeoutError::Timeout) => {
                eprintln!(
                    "maestro run: the PMIx server did not shut down within {SHUTDOWN_LIMIT:?} (a refused client may have left it so); exiting without it"
                );
                false
            }
            _ => true,
        },
        Err(e) => {
            eprintln!("maestro run: no thread to shut the PMIx server down ({e})");
            true
        }
    }
}
