//! Shared helpers of the integration tests: paths of the built binaries, running a command
//! in its own process group under a hard timeout (and killing whatever it leaves behind), and
//! a single-node Slurm started by `scripts/slurm-local.sh` and stopped by PID.
#![allow(dead_code)] // each test binary uses a different subset

pub mod apps;
pub mod capi;
pub mod ibsim;
pub mod pool;
pub mod pty;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `maestro` binary under test.
pub fn maestro() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_maestro"))
}

/// The benchmarks' program beside it (`maestro bench` runs it), built with the workspace
/// (`cargo build --workspace`, as scripts/test.sh runs).
pub fn maestro_bench() -> PathBuf {
    let p = maestro().with_file_name("maestro-bench");
    assert!(
        p.is_file(),
        "{} not built (cargo build --workspace)",
        p.display()
    );
    p
}

/// A built example (`cargo build --workspace --all-targets`, as scripts/test.sh runs,
/// builds them next to the binary).
pub fn example(name: &str) -> PathBuf {
    let p = maestro()
        .parent()
        .expect("binary has a directory")
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "example {name} not built at {} (cargo build --workspace --examples)",
        p.display()
    );
    p
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What a finished command produced.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Lines of stdout containing `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<&str> {
        self.stdout.lines().filter(|l| l.contains(needle)).collect()
    }

    /// Checks a `pool_workflow` run with 2 producers of `cdos` CDOs each: both offered, the
    /// consumer verified every checksum.
    pub fn assert_workflow(&self, cdos: usize) {
        self.assert_workflow_of(2, cdos);
    }

    /// As [`Output::assert_workflow`] with `producers` producers.
    pub fn assert_workflow_of(&self, producers: usize, cdos: usize) {
        assert_eq!(self.code(), Some(0), "{self:?}");
        let offered = self.lines_with(&format!(": offered {cdos} CDOs")).len();
        assert_eq!(offered, producers, "{}", self.stdout);
        let verified = format!("consumer: {} CDOs", producers * cdos);
        assert!(
            self.stdout.contains(&verified) && self.stdout.contains("all checksums match"),
            "{}",
            self.stdout
        );
    }

    /// Checks what every launcher must give `pmix_hello` with `n` ranks: success, each
    /// rank's identity, and rank 0's value read by everyone after the fence.
    pub fn assert_hello(&self, n: u32) {
        assert_eq!(self.code(), Some(0), "{self:?}");
        for r in 0..n {
            let who = format!("rank {r} of {n} on ");
            let got = format!("rank {r}: got \"hello from rank 0 of {n}\" from rank 0");
            assert!(self.stdout.contains(&who), "no {who:?} in\n{}", self.stdout);
            assert!(self.stdout.contains(&got), "no {got:?} in\n{}", self.stdout);
        }
    }
}

/// Reads `stream` up to the first line containing `needle` and returns that line (panics
/// at end of stream with what was read); the rest is drained in the background, so the
/// child never blocks on a full pipe.
pub fn await_line(stream: impl Read + Send + 'static, needle: &str) -> String {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(stream).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        if line.contains(needle) {
            std::thread::spawn(move || lines.for_each(drop));
            return line;
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    panic!("stream ended before a line with {needle:?}:\n{seen}");
}

/// Lines of `stream` as they come, through a channel (read in the background, so the
/// child never blocks on a full pipe).
pub fn lines(stream: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line containing every one of `needles`, within `limit` (panics with the lines
/// seen otherwise).
pub fn expect_line(
    rx: &std::sync::mpsc::Receiver<String>,
    needles: &[&str],
    limit: Duration,
) -> String {
    let end = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) if needles.iter().all(|n| l.contains(n)) => return l,
            Ok(l) => seen.push(l),
            Err(_) => break,
        }
    }
    panic!(
        "no line with {needles:?} within {limit:?}; saw:\n{}",
        seen.join("\n")
    );
}

/// Starts `maestro pm --workflow WORKFLOW` and returns it with its PM info (the value for
/// `MSTRO_POOL_MANAGER_INFO`).
pub fn start_pm(workflow: &str, extra: &[&str]) -> (Group, String) {
    start_pm_with_env(workflow, extra, &[])
}

/// As [`start_pm`], with variables added to the PM's environment.
pub fn start_pm_with_env(workflow: &str, extra: &[&str], env: &[(&str, &str)]) -> (Group, String) {
    let mut cmd = Command::new(maestro());
    cmd.args(["pm", "--print-info", "--workflow", workflow])
        .args(extra)
        .envs(env.iter().copied());
    spawn_pm(&mut cmd)
}

/// Starts `cmd`, a pool manager that prints its info (`maestro pm --print-info`, alone or
/// as a job's ranks), in a group of its own; the group and the PM info of its
/// `MSTRO_POOL_MANAGER_INFO;<info>;` line.
pub fn spawn_pm(cmd: &mut Command) -> (Group, String) {
    let mut pm = Group::spawn(cmd);
    let line = await_line(
        pm.child.stdout.take().expect("stdout"),
        "MSTRO_POOL_MANAGER_INFO;",
    );
    let info = line
        .trim()
        .strip_prefix("MSTRO_POOL_MANAGER_INFO;")
        .and_then(|l| l.strip_suffix(';'))
        .unwrap_or_else(|| panic!("PM said {line:?}"))
        .to_string();
    (pm, info)
}

/// A child in its own process group; the whole group is SIGKILLed on drop.
pub struct Group {
    pub child: std::process::Child,
    pgid: i32,
}

impl Group {
    /// Starts `cmd` in a new process group with piped output and no input.
    pub fn spawn(cmd: &mut Command) -> Group {
        Group::spawn_with_stdin(cmd, Stdio::null())
    }

    /// As [`Group::spawn`] with the given stdin (`Stdio::piped()` keeps `child.stdin` open
    /// for programs that stop when their input closes).
    pub fn spawn_with_stdin(cmd: &mut Command, stdin: Stdio) -> Group {
        cmd.process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let pgid = child.id() as i32;
        Group { child, pgid }
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// Waits up to `limit`; on timeout kills the group and panics with what it printed.
    pub fn wait(mut self, limit: Duration) -> Output {
        let start = Instant::now();
        // Streams a test took for itself read as empty.
        let out = self.child.stdout.take();
        let err = self.child.stderr.take();
        let t_out = std::thread::spawn(move || read_all(out));
        let t_err = std::thread::spawn(move || read_all(err));
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break st;
            }
            if start.elapsed() > limit {
                self.kill_group();
                let _ = self.child.wait();
                panic!(
                    "timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    t_out.join().unwrap_or_default(),
                    t_err.join().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = start.elapsed();
        // Whatever the command left in its group goes now, so output pipes close.
        self.kill_group();
        Output {
            status,
            stdout: t_out.join().unwrap_or_default(),
            stderr: t_err.join().unwrap_or_default(),
            elapsed,
        }
    }

    /// Sends SIGTERM to the leader (as a user would) and waits for the whole run to end.
    pub fn terminate(self, limit: Duration) -> Output {
        // SAFETY: signalling the process this helper started.
        unsafe { libc::kill(self.pgid, libc::SIGTERM) };
        self.wait(limit)
    }

    fn kill_group(&self) {
        // SAFETY: kill(2) on the group this helper created.
        unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
    }
}

impl Drop for Group {
    /// A leader still running gets SIGTERM and up to 3 s to clean up after itself
    /// (`maestro run` removes its private directory), then the whole group is SIGKILLed.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: signalling the process this helper started.
            unsafe { libc::kill(self.pgid, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(3);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill_group();
        let _ = self.child.try_wait();
    }
}

fn read_all(src: Option<impl Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = src {
        let _ = r.read_to_string(&mut s);
    }
    s
}

/// Runs a command to completion under a hard limit.
pub fn run(cmd: &mut Command, limit: Duration) -> Output {
    Group::spawn(cmd).wait(limit)
}

/// `maestro run ARGS...` with a 60 s limit.
pub fn maestro_run(args: &[&str]) -> Output {
    run(
        Command::new(maestro()).arg("run").args(args),
        Duration::from_secs(60),
    )
}

/// Writes a Slurm `topology.conf` of leaf switches `leaf1`, `leaf2`, ... with the hosts of
/// `leaves` (host lists, `n[1-4]`), under one switch `spine`, into `dir`; its path.
pub fn topology_conf(dir: &Path, leaves: &[&str]) -> PathBuf {
    let mut text = String::new();
    for (i, hosts) in leaves.iter().enumerate() {
        text += &format!("SwitchName=leaf{} Nodes={hosts}\n", i + 1);
    }
    text += &format!("SwitchName=spine Switches=leaf[1-{}]\n", leaves.len());
    let path = dir.join("topology.conf");
    std::fs::write(&path, text).expect("write topology.conf");
    path
}

/// Compiles `tests/c/<src>` with `compiler` (`cc`, `mpicc`; plus the pkg-config flags of
/// `pkg`, if any) into `dir`, named after the source; `-shared` for a `.so` name. The result
/// is readable and runnable by every user (tests run it as a second user too).
pub fn build_c(compiler: &str, src: &str, pkg: Option<&str>, dir: &Path) -> PathBuf {
    let stem = Path::new(src).file_stem().expect("file name");
    let shared = src.ends_with(".so.c");
    let exe = dir.join(if shared {
        PathBuf::from(stem)
    } else {
        PathBuf::from(stem).with_extension("")
    });
    let mut cmd = Command::new(compiler);
    if shared {
        cmd.args(["-shared", "-fPIC"]);
    }
    cmd.arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(repo().join("tests/c").join(src));
    if let Some(pkg) = pkg {
        let flags = Command::new("pkg-config")
            .args(["--cflags", "--libs", pkg])
            .output()
            .expect("pkg-config");
        let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
        cmd.args(flags.split_whitespace());
    }
    let out = run(&mut cmd, Duration::from_secs(120));
    assert_eq!(out.code(), Some(0), "building {src}: {out:?}");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    exe
}

/// The private directory of the `maestro run` launcher with `pid` (`run.<pid>` in the
/// user's private directory).
pub fn maestro_run_dir(pid: i32) -> PathBuf {
    safefs::user_dir()
        .expect("the user's private directory")
        .join(format!("run.{pid}"))
}

/// `maestro run --tool-support ARGS...` (`-n N -- CMD` and the like) started, and the URI
/// at which its PMIx server takes tools.
pub fn tool_support_launcher(args: &[&str]) -> (Group, String) {
    let job = Group::spawn(
        Command::new(maestro())
            .args(["run", "--tool-support"])
            .args(args),
    );
    let uri = maestro_run_tool_uri(job.pid());
    (job, uri)
}

/// Where the launcher with `pid` keeps its PMIx server's files (tools' rendezvous).
pub fn maestro_run_server_dir(pid: i32) -> PathBuf {
    maestro_run_dir(pid).join("server")
}

/// The tool URI of the `maestro run` launcher with `pid` (the first line of its PMIx
/// server's rendezvous file `pmix.<host>.tool.<pid>`), waiting up to 20 s for the file.
pub fn maestro_run_tool_uri(pid: i32) -> String {
    let dir = maestro_run_server_dir(pid);
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(&dir).ok().and_then(|d| {
            d.filter_map(Result::ok).find_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name.starts_with("pmix.") && name.contains(".tool."))
                    .then(|| std::fs::read_to_string(e.path()).ok())
                    .flatten()
                    .and_then(|t| t.lines().next().map(str::to_string))
            })
        });
        if let Some(uri) = found {
            return uri;
        }
        assert!(
            Instant::now() < end,
            "no rendezvous file in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Resident memory of process `pid` in KiB (`VmRSS`).
pub fn rss_kib(pid: i32) -> u64 {
    status_kib("VmRSS", pid)
}

/// The figure `field` of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`: the peak).
pub fn status_kib(field: &str, pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} of process {pid}"))
}

/// The first TCP control endpoint of a PM info.
pub fn tcp_addr(info: &::pool::bootstrap::PmInfo) -> std::net::SocketAddr {
    info.endpoints
        .iter()
        .find_map(|e| match e {
            ::pool::bootstrap::ControlAddr::Tcp(a) => Some(*a),
            ::pool::bootstrap::ControlAddr::Unix(_) => None,
        })
        .expect("a TCP endpoint")
}

/// Pids of the live children of `pid` running `comm` (the ranks of a launcher, say, not
/// its janitor or a child still between fork and exec).
pub fn children_named(pid: i32, comm: &str) -> Vec<i32> {
    children_of(pid)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .collect()
}

/// Pids of the live children of `pid` (from /proc).
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // Fields after the command (which may contain spaces) start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        if fields.get(1).and_then(|f| f.parse::<i32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// Waits within `limit`, woken by inotify (files created, renamed into place or removed
/// in `dir` and its directories), until `done` holds; `what` names it if it never does.
pub fn wait_for(dir: &Path, limit: Duration, what: &str, done: impl Fn() -> bool) {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: a new inotify descriptor, closed at the end.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    assert!(fd >= 0, "inotify: {}", std::io::Error::last_os_error());
    let watch = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path");
        let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_DELETE;
        // SAFETY: a NUL-terminated path and the descriptor above.
        unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) }
    };
    watch(dir);
    let deadline = Instant::now() + limit;
    loop {
        // Directories made before their watch was added are watched now too.
        for e in std::fs::read_dir(dir).expect("dir").flatten() {
            watch(&e.path());
        }
        if done() {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "not within {limit:?}: {what}");
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut events = [0u8; 4096];
        // SAFETY: one pollfd, then a read into a buffer of its length, both of `fd`.
        unsafe {
            if libc::poll(
                &mut p,
                1,
                i32::try_from(left.as_millis()).unwrap_or(i32::MAX),
            ) == 1
            {
                libc::read(fd, events.as_mut_ptr().cast(), events.len());
            }
        }
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
}

/// Waits, within `limit`, for process `pid` to end (woken by a pidfd, not by polling);
/// true if it did (or was gone already).
pub fn wait_gone(pid: i32, limit: Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return true;
    }
    let mut p = libc::pollfd {
        fd: fd as i32,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one pollfd of a descriptor opened above, closed right after.
    let ready = unsafe {
        let n = libc::poll(&mut p, 1, ms);
        libc::close(fd as i32);
        n
    };
    ready == 1 || !alive(pid)
}

pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, r)| !r.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// An exclusive lock on a file, held until drop (serialises tests that share a resource
/// across nextest's test processes).
pub struct FileLock(std::fs::File);

impl FileLock {
    pub fn acquire(path: &Path) -> FileLock {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .expect("open lock file");
        // SAFETY: flock on an fd we own; blocks until the lock is free.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock {}", path.display());
        FileLock(f)
    }
}

/// The maestro SPANK plugin, built (a no-op when current): both test Slurms load it (as
/// required); it changes nothing unless a job asks with `--maestro-*`.
pub fn spank_plugin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            // In the profile of the tests (`--release` puts it beside the release binaries).
            let profile = (!cfg!(debug_assertions)).then_some("--release");
            let out = run(
                Command::new("cargo")
                    .args(["build", "-p", "maestro-spank"])
                    .args(profile),
                Duration::from_secs(600),
            );
            assert_eq!(
                out.code(),
                Some(0),
                "building the SPANK plugin: {}",
                out.stderr
            );
            let so = maestro()
                .parent()
                .expect("target dir")
                .join("libmaestro_spank.so");
            assert!(so.exists(), "{} not built", so.display());
            so
        })
        .clone()
}

/// The lock every test holds while a single-node Slurm of its runs (its ports are fixed).
pub const SLURM_LOCK: &str = "/tmp/maestro-tests-slurm.lock";

/// A single-node Slurm (munge + slurmctld + slurmd) in a private directory, stopped and
/// removed on drop. Only one runs at a time on a machine (fixed ports): the guard holds a
/// lock for its lifetime.
pub struct Slurm {
    dir: PathBuf,
    _lock: FileLock,
}

impl Slurm {
    pub fn start() -> Slurm {
        let lock = FileLock::acquire(Path::new(SLURM_LOCK));
        let dir = std::env::temp_dir().join(format!("maestro-slurm.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = run(
            Command::new(repo().join("scripts/slurm-local.sh"))
                .arg("start")
                .env("SLURM_LOCAL_DIR", &dir)
                .env("SLURM_LOCAL_SPANK", spank_plugin()),
            Duration::from_secs(120),
        );
        let slurm = Slurm { dir, _lock: lock };
        assert_eq!(
            out.code(),
            Some(0),
            "slurm-local.sh start failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        slurm
    }

    /// `srun` with this cluster's configuration.
    pub fn srun(&self) -> Command {
        self.command("srun")
    }

    /// `program` with this cluster's configuration (`sbatch`, `squeue`, a job script).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir.join("etc/slurm.conf"));
        c
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/slurm-local.sh"))
            .arg("stop")
            .env("SLURM_LOCAL_DIR", &self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A 3-node Slurm cluster in network namespaces with two networks (`scripts/cluster.sh`),
/// stopped and removed on drop. One at a time per machine (fixed bridge and namespace
/// names): the guard holds a lock. Its directory, and every file a job uses, is outside
/// `/tmp`, which each node has its own of.
pub struct Cluster {
    dir: PathBuf,
    nodes: u32,
    /// `CLUSTER_NETS` and, for three networks, which nodes have eth1 and eth2.
    nets: [(&'static str, String); 3],
    /// The `topology.conf` of Slurm's `topology/tree`, if any (`CLUSTER_TOPOLOGY`).
    topology: Option<PathBuf>,
    _lock: FileLock,
}

impl Cluster {
    /// Starts the 3-node cluster (after removing one a killed test left behind).
    pub fn start() -> Cluster {
        Cluster::start_nodes(3)
    }

    /// Starts a cluster of `nodes` nodes (4 CPUs each) with two networks on every node.
    pub fn start_nodes(nodes: u32) -> Cluster {
        Cluster::start_with(nodes, ["2", "", ""])
    }

    /// Starts a cluster of `nodes` nodes with three networks: eth0 (the management
    /// network) on every node, eth1 on the nodes of `eth1` and eth2 on those of `eth2`
    /// (`1-5`, `1,5-8`).
    pub fn start_split(nodes: u32, eth1: &str, eth2: &str) -> Cluster {
        Cluster::start_with(nodes, ["3", eth1, eth2])
    }

    /// Starts a cluster of `nodes` nodes (two networks) whose Slurm places jobs by the
    /// switches of `topology` (a `topology.conf`: `topology/tree`).
    pub fn start_with_topology(nodes: u32, topology: &Path) -> Cluster {
        Cluster::start_configured(nodes, ["2", "", ""], Some(topology))
    }

    fn start_with(nodes: u32, nets: [&str; 3]) -> Cluster {
        Cluster::start_configured(nodes, nets, None)
    }

    fn start_configured(
        nodes: u32,
        [nets, eth1, eth2]: [&str; 3],
        topology: Option<&Path>,
    ) -> Cluster {
        let lock = FileLock::acquire(Path::new("/tmp/maestro-tests-cluster.lock"));
        let dir = repo().join("target").join("cluster");
        let cluster = Cluster {
            dir,
            nodes,
            nets: [
                ("CLUSTER_NETS", nets.to_string()),
                ("CLUSTER_ETH1_NODES", eth1.to_string()),
                ("CLUSTER_ETH2_NODES", eth2.to_string()),
            ],
            topology: topology.map(Path::to_path_buf),
            _lock: lock,
        };
        let stop = cluster.script(&["stop"]);
        let out = cluster.script(&["start"]);
        assert_eq!(
            out.code(),
            Some(0),
            "cluster.sh start: {out:?}\n(after cluster.sh stop: {stop:?})"
        );
        cluster
    }

    /// Runs `scripts/cluster.sh ARGS` for this cluster.
    pub fn script(&self, args: &[&str]) -> Output {
        run(
            Command::new(repo().join("scripts/cluster.sh"))
                .args(args)
                .env("CLUSTER_DIR", &self.dir)
                .env("CLUSTER_NODES", self.nodes.to_string())
                .envs(self.nets.iter().map(|(k, v)| (*k, v)))
                .envs(self.topology.iter().map(|t| ("CLUSTER_TOPOLOGY", t)))
                .env("CLUSTER_SPANK", spank_plugin()),
            Duration::from_secs(120),
        )
    }

    /// `srun` with this cluster's configuration.
    pub fn srun(&self) -> Command {
        self.command("srun")
    }

    /// `program` with this cluster's configuration (`sbatch`, `squeue`, a job script).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir.join("etc/slurm.conf"));
        c
    }

    /// `srun -N 1 -n TASKS -w NODE` with this cluster's configuration.
    pub fn srun_on(&self, node: &str, tasks: u32) -> Command {
        let mut c = self.srun();
        c.args(["-N", "1", "-n", &tasks.to_string(), "-w", node]);
        c
    }

    /// Open MPI's `mpirun`, started on n1, placing ranks round robin on `hosts` (`n1,n2`)
    /// and starting its daemon on the other nodes with `cluster.sh rsh` as launch agent.
    pub fn mpirun(&self, hosts: &str) -> Command {
        let script = repo().join("scripts/cluster.sh");
        let mut c = Command::new(&script);
        c.args([
            "exec",
            "1",
            "mpirun",
            "--allow-run-as-root",
            "--host",
            hosts,
        ])
        .args(["--map-by", "node", "--mca", "plm_rsh_agent"])
        .arg(format!("{} rsh", script.display()))
        .env("CLUSTER_DIR", &self.dir)
        .env("CLUSTER_NODES", self.nodes.to_string());
        c
    }

    /// A scratch directory every node sees.
    pub fn scratch(&self, name: &str) -> PathBuf {
        let d = self.dir.join("work").join(name);
        std::fs::create_dir_all(&d).expect("scratch dir");
        d
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/cluster.sh"))
            .arg("stop")
            .env("CLUSTER_DIR", &self.dir)
            .env("CLUSTER_NODES", self.nodes.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Options to join as `component`, a process of its own, with a `tcp;ofi_rxm` endpoint on
/// loopback (the fabric every test machine has), waiting up to a minute per operation.
pub fn tcp_lo_options(component: &str) -> ::pool::JoinOptions {
    let tcp_lo = fabric::Config {
        provider: Some("tcp;ofi_rxm".into()),
        iface: Some("lo".into()),
        ..fabric::Config::default()
    };
    ::pool::JoinOptions::new(component, 0)
        .fabric_with(&tcp_lo, fabric::Scope::AnyNode)
        .expect("tcp on lo")
        .isolated()
        .timeout(Duration::from_secs(60))
}

/// Joins the PM of `info` (its text) as [`tcp_lo_options`] say.
pub fn join_tcp_lo(info: &str, component: &str) -> ::pool::Client {
    let info = ::pool::bootstrap::PmInfo::parse(info).expect("PM info");
    ::pool::Client::join(&info, tcp_lo_options(component)).expect("join")
}

/// Stops `pm` (a `maestro pm --gfs-dir DIR` of `workflow`) as a user would and checks what
/// the workflow left in `dir`: only its persisted CDOs' directory, holding `names` (file
/// names, sorted). Returns that directory.
pub fn assert_only_persisted(pm: Group, dir: &Path, workflow: &str, names: &[&str]) -> PathBuf {
    let stopped = pm.terminate(Duration::from_secs(30));
    assert_eq!(stopped.code(), Some(0), "{stopped:?}");
    let persisted = dir.join(format!("maestro-persist-{workflow}"));
    let left: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(
        left,
        std::slice::from_ref(&persisted),
        "only the persisted CDOs' directory"
    );
    let mut kept: Vec<String> = std::fs::read_dir(&persisted)
        .expect("persisted")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, names);
    persisted
}
