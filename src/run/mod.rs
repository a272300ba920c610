//! `maestro run`: our own PMIx host on this node, in the spirit of GASNet's local spawner.
//!
//! It starts a PMIx server, registers one job with every key a PMIx client reads, spawns N
//! ranks with their PMIx environment (each in its own process group, killed if the launcher
//! dies), forwards their output line by line, and watches them:
//! - a rank that fails (non-zero exit, signal, exit without `PMIx_Finalize` after connecting)
//!   or calls `PMIx_Abort` makes the launcher notify the others with
//!   `PMIX_ERR_PROC_ABORTED` (affected proc and exit code attached), wait `--grace`
//!   seconds, then SIGTERM the rest and SIGKILL them `--kill-after` seconds later;
//! - SIGINT/SIGTERM/SIGHUP/SIGQUIT to the launcher are forwarded to every rank's process
//!   group, followed by SIGKILL after `--kill-after`;
//! - `--timeout` bounds the whole job (exit code 124 when it fires).
//!
//! The exit code is the worst status of the ranks that ended on their own (see `outcome`).
//! Everything the PMIx server writes lives in a private temporary directory removed at
//! exit.

mod credential;
mod fabric;
mod host;
mod outcome;
mod output;
mod query_fix;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use pmix::{Info, JobLayout, Proc, Range, Server, ServerConfig, Status, Value, keys};

use host::{HostEvent, LauncherHost};
use outcome::{Outcome, RankEnd, StopCause};

/// Options of `maestro run` (its command line).
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", default_value_t = 1)]
    pub nprocs: u32,
    /// Prefix every output line with the rank in brackets.
    #[arg(long, help = "Prefix every output line with \"[rank] \"")]
    pub label: bool,
    /// Let PMIx tools (maestro query) attach.
    #[arg(long)]
    pub tool_support: bool,
    /// Also serve as this node's PMIx system server (implies --tool-support), so tools
    /// attach without knowing the pid: maestro query --system.
    #[arg(long)]
    pub system_server: bool,
    /// Seconds the other ranks get after a rank failed or aborted before SIGTERM.
    #[arg(long, default_value = "2", value_parser = crate::cli::parse_duration)]
    pub grace: Duration,
    /// Seconds between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, default_value = "1", value_parser = crate::cli::parse_duration)]
    pub kill_after: Duration,
    /// Wall-clock limit of the job in seconds (exit code 124 when reached).
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub timeout: Option<Duration>,
    /// Let Open MPI 4.x ranks recognise a PMIx direct launch (see
    /// [`OPENMPI_DIRECT_LAUNCH`]); `--no-openmpi-compat` turns it off.
    #[arg(
        long = "no-openmpi-compat",
        action = clap::ArgAction::SetFalse,
        help = "Do not tell Open MPI 4.x ranks that a PMIx launcher started them"
    )]
    pub openmpi_compat: bool,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

/// `maestro run`: runs the job and exits with its code (2 when it could not run at all).
pub fn main(opts: &RunOptions) -> std::process::ExitCode {
    match run(opts) {
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
    RankExited(u32, RankEnd),
    Host(HostEvent),
    Signal(i32),
}

/// A private directory removed (recursively) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn create() -> Result<TempDir, RunError> {
        let dir = run_dir(std::process::id());
        // Directories of killed launchers of this user (their stale rendezvous files make
        // tools refuse to pick a server), and one of a crashed launcher with our pid.
        if let Some(base) = dir.parent() {
            pool::stale::sweep_dead_process_dirs(base, "maestro-run.");
        }
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["server", "system", "ranks"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(io_err(format!("creating {}", dir.join(sub).display())))?;
        }
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!("removing {}: {e}", self.0.display());
        }
    }
}

/// One spawned rank.
struct RankProc {
    pid: i32,
    ended: bool,
    signalled: bool,
}

/// Runs the job and returns the exit code for the launcher.
///
/// # Errors
/// [`RunError`] when the job could not be set up (PMIx server, tmpdir, threads). Failures
/// of the ranks themselves are not errors: they are the exit code.
pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
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
    let Some(program) = opts.command.first() else {
        return Err(RunError::Usage(
            "no command given: maestro run -n N -- CMD ARGS...".into(),
        ));
    };
    // Signals first: one that arrives during setup is queued, and the job is then not
    // started at all.
    let (tx, rx) = channel::<LoopEvent>();
    let signals = SignalRelay::start(tx.clone())?;
    let tmp = TempDir::create()?;
    let pid = std::process::id();
    let nspace = format!("maestro.job.{pid}");
    let hostname = inventory::local_hostname();
    let (host_tx, host_rx) = channel::<HostEvent>();
    let authority = credential::Authority::generate().map_err(RunError::Random)?;
    let host = Arc::new(LauncherHost::new(
        &nspace,
        &hostname,
        program,
        opts.nprocs,
        authority,
        host_tx,
    ));
    relay(host_rx, tx.clone(), LoopEvent::Host)?;
    if opts.system_server {
        remove_dead_system_server_file(&std::env::temp_dir(), &hostname);
    }
    let server = Server::init(
        &ServerConfig {
            tmpdir: tmp.0.join("server"),
            system_tmpdir: if opts.system_server {
                std::env::temp_dir()
            } else {
                tmp.0.join("system")
            },
            nspace: format!("maestro.host.{pid}"),
            rank: 0,
            tool_support: opts.tool_support || opts.system_server,
            system_support: opts.system_server,
        },
        host.clone(),
    )?;
    if opts.tool_support {
        eprintln!(
            "maestro run: tools may attach: pid {pid}, tmpdir {}",
            server_tmpdir(pid).display()
        );
    }
    let fabric = fabric::FabricView::collect(&server, opts.nprocs);
    let app_info = server.setup_application(&nspace, &[])?;
    let locality = server.own_locality_string().unwrap_or_else(|e| {
        tracing::warn!("no locality string for the ranks: {e}");
        String::new()
    });
    let layout = JobLayout {
        nspace: nspace.clone(),
        jobid: nspace.clone(),
        hostname,
        nprocs: opts.nprocs,
        locality: vec![locality; opts.nprocs as usize],
        extra_job_info: app_info
            .into_iter()
            .filter(|i| !matches!(i.value, Value::Other(_)))
            .chain(fabric.iter().flat_map(fabric::FabricView::job_info))
            .collect(),
        extra_proc_info: fabric
            .as_ref()
            .map(fabric::FabricView::proc_info)
            .unwrap_or_default(),
    };
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
    server.register_nspace(&nspace, opts.nprocs, &layout.to_infos()?)?;
    server.setup_local_support(&nspace, &[])?;

    let mut job = Job {
        opts,
        server: &server,
        host: &host,
        nspace: &nspace,
        tx,
        ranks: BTreeMap::new(),
        outcome: Outcome::default(),
        term_at: None,
        kill_at: None,
        deadline: opts.timeout.map(|t| Instant::now() + t),
        outputs: Vec::new(),
        links,
    };
    match rx.try_recv() {
        Ok(LoopEvent::Signal(sig)) => {
            eprintln!("maestro run: signal {sig} during setup; not starting the job");
            job.outcome.stop(StopCause::Signal(sig));
        }
        _ => {
            job.spawn_all();
            job.supervise(&rx);
        }
    }
    job.sweep_groups();
    job.finish_outputs();
    signals.stop();
    for r in 0..opts.nprocs {
        if let Err(e) = server.deregister_client(&Proc::new(&nspace, r)) {
            tracing::debug!("deregister rank {r}: {e}");
        }
    }
    host.job_ended();
    if let Err(e) = server.deregister_nspace(&nspace) {
        tracing::warn!("deregister {nspace}: {e}");
    }
    let code = job.outcome.exit_code();
    drop(job);
    drop(server);
    drop(tmp);
    Ok(code)
}

/// Moves events from one channel into the main loop's, wrapped.
fn relay<T: Send + 'static>(
    rx: Receiver<T>,
    tx: Sender<LoopEvent>,
    wrap: fn(T) -> LoopEvent,
) -> Result<(), RunError> {
    std::thread::Builder::new()
        .name("host-events".into())
        .spawn(move || {
            for ev in rx {
                if tx.send(wrap(ev)).is_err() {
                    break;
                }
            }
        })
        .map_err(io_err("starting the host event thread"))?;
    Ok(())
}

/// The running job and its supervision state.
struct Job<'a> {
    opts: &'a RunOptions,
    server: &'a Server,
    host: &'a Arc<LauncherHost>,
    nspace: &'a str,
    tx: Sender<LoopEvent>,
    ranks: BTreeMap<u32, RankProc>,
    outcome: Outcome,
    term_at: Option<Instant>,
    kill_at: Option<Instant>,
    deadline: Option<Instant>,
    outputs: Vec<Receiver<()>>,
    /// Watches the node's links; changes become `PMIX_FABRIC_UPDATED` events.
    links: Option<inventory::netif::LinkMonitor>,
}

impl Job<'_> {
    fn spawn_all(&mut self) {
        for r in 0..self.opts.nprocs {
            if let Err(msg) = self.spawn(r) {
                eprintln!("maestro run: rank {r}: {msg}");
                self.outcome.rank_ended(r, RankEnd::Exited(127), false);
                self.stop(StopCause::RankFailed { rank: r, code: 127 }, Duration::ZERO);
                break;
            }
        }
    }

    fn spawn(&mut self, rank: u32) -> Result<(), String> {
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
                output::forward(
                    DoneOnDrop {
                        inner: src,
                        _done: done_tx,
                    },
                    stream,
                    rank,
                    label,
                )
                .map_err(|e| format!("output thread: {e}"))?;
                self.outputs.push(done_rx);
            }
        }
        self.reap_in_thread(rank, child)
    }

    fn reap_in_thread(&self, rank: u32, mut child: Child) -> Result<(), String> {
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

    fn alive(&self) -> impl Iterator<Item = (&u32, &RankProc)> {
        self.ranks.iter().filter(|(_, r)| !r.ended)
    }

    fn supervise(&mut self, rx: &Receiver<LoopEvent>) {
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
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.tick(Instant::now());
        }
    }

    fn rank_exited(&mut self, rank: u32, end: RankEnd) {
        let signalled = match self.ranks.get_mut(&rank) {
            Some(r) => {
                r.ended = true;
                r.signalled
            }
            None => false,
        };
        self.host.update(rank, |s| s.exit_code = Some(end.code()));
        self.outcome.rank_ended(rank, end, signalled);
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
                RankEnd::Exited(0) => "exited without calling PMIx_Finalize".to_string(),
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

    /// Tells the other ranks that `rank` failed (`PMIX_ERR_PROC_ABORTED`).
    fn notify_failure(&self, rank: u32, code: i32, msg: &str) {
        if self.alive().all(|(&r, _)| r == rank) {
            return;
        }
        let proc = Proc::new(self.nspace, rank);
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
    }

    /// Records the first stop cause and schedules SIGTERM after `grace`.
    fn stop(&mut self, cause: StopCause, grace: Duration) {
        if self.outcome.stop(cause) {
            self.term_at = Some(Instant::now() + grace);
        }
    }

    /// Raises `PMIX_FABRIC_UPDATED` to the job for every link that went down or up.
    fn watch_links(&mut self) {
        let changes = self
            .links
            .as_mut()
            .map(inventory::netif::LinkMonitor::poll)
            .unwrap_or_default();
        if changes.is_empty() {
            return;
        }
        let source = Proc::new(format!("maestro.host.{}", std::process::id()), 0);
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

    fn tick(&mut self, now: Instant) {
        self.host.expire();
        self.watch_links();
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

    /// Sends `sig` to the process group of every live rank.
    fn signal_all(&mut self, sig: i32) {
        for r in self.ranks.values_mut().filter(|r| !r.ended) {
            r.signalled = true;
            // SAFETY: kill(2) on a process group we created; errors (ESRCH) are harmless.
            unsafe { libc::kill(-r.pid, sig) };
        }
    }

    /// Kills what is left in the ranks' process groups (background children of ranks).
    fn sweep_groups(&self) {
        for r in self.ranks.values() {
            // SAFETY: as in signal_all.
            unsafe { libc::kill(-r.pid, libc::SIGKILL) };
        }
    }

    /// Waits (bounded) for the output threads to drain the ranks' pipes.
    fn finish_outputs(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for done in self.outputs.drain(..) {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(RecvTimeoutError::Timeout) = done.recv_timeout(left) {
                tracing::warn!("a rank's output is still open (a process escaped its group?)");
            }
        }
    }
}

/// A reader that signals (by dropping its sender) when the forwarding thread is done.
struct DoneOnDrop<R> {
    inner: R,
    _done: Sender<()>,
}

impl<R: std::io::Read> std::io::Read for DoneOnDrop<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}

/// Forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT into the main loop.
struct SignalRelay {
    handle: signal_hook::iterator::Handle,
}

impl SignalRelay {
    fn start(tx: Sender<LoopEvent>) -> Result<SignalRelay, RunError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];
        // Libraries may install handlers from their constructors (Debian's libfabric pulls
        // in libinfinipath, whose handler exits with status 1 on SIGTERM). signal-hook
        // chains to whatever was installed before it, so reset these signals first: the
        // launcher alone decides what they do.
        for sig in FORWARDED {
            // SAFETY: resetting a signal disposition to its default is always sound.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        let mut signals = signal_hook::iterator::Signals::new(FORWARDED)
            .map_err(io_err("installing signal handlers"))?;
        let handle = signals.handle();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if tx.send(LoopEvent::Signal(sig)).is_err() {
                        break;
                    }
                }
            })
            .map_err(io_err("starting the signal thread"))?;
        Ok(SignalRelay { handle })
    }

    fn stop(self) {
        self.handle.close();
    }
}

/// The private directory of the launcher with `pid` (`$TMPDIR/maestro-run.<pid>`).
/// Removes the system-server rendezvous file (`pmix.sys.<host>` in the system tmpdir) of a
/// launcher that was killed: OpenPMIx names its server's pid on the third line. Left
/// there, it sends PMIx clients and tools to a server that is gone.
fn remove_dead_system_server_file(dir: &std::path::Path, hostname: &str) {
    let path = dir.join(format!("pmix.sys.{hostname}"));
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let pid = text
        .lines()
        .nth(2)
        .and_then(|l| l.trim().parse::<u32>().ok());
    if let Some(pid) = pid.filter(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
        tracing::info!("removing {}: its server {pid} is gone", path.display());
        let _ = std::fs::remove_file(&path);
    }
}

fn run_dir(pid: u32) -> PathBuf {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join(format!("maestro-run.{pid}"))
}

/// The PMIx server directory of the launcher with `pid`, where tools find its rendezvous
/// file.
pub fn server_tmpdir(pid: u32) -> PathBuf {
    run_dir(pid).join("server")
}
