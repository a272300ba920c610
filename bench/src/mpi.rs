//! What users compare a same-node `demand` with: Open MPI moving the same sizes between two
//! ranks (`maestro bench pool --mpi`). The ping program (`mpi/pingpong.c`, built into this
//! binary) is compiled with `mpicc` in a temporary directory and run under `mpirun -np 2`:
//! rank 1 sends each message to rank 0, which answers once it has them all, one at a time
//! or a window at a time as the demands are.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The ping program's source.
const SOURCE: &str = include_str!("mpi/pingpong.c");

/// How long the MPI run may take (compiling included) before it is killed.
const LIMIT: Duration = Duration::from_secs(900);

/// Why the MPI side of the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum MpiBenchError {
    /// An Open MPI command is missing.
    #[error(
        "`{0}` is not on PATH: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) or leave out --mpi"
    )]
    Missing(&'static str),
    /// `mpicc` or `mpirun` failed.
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        /// The step.
        what: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// The run did not finish in time (it was killed).
    #[error("the MPI ping program did not finish within {0:?} and was killed")]
    Timeout(Duration),
    /// A line of output that is not `size iterations GB/s [GB/s fresh]`.
    #[error(
        "the MPI ping program printed {0:?}, not what it prints (`hosts H0 H1`, then `size iterations GB/s GB/s-fresh`)"
    )]
    Output(String),
    /// Both ranks ran on one host when asked to run on two.
    #[error(
        "mpirun placed both ranks on {0}, not one on each of --mpi-hosts: check the host names and that the launch agent reaches the other host"
    )]
    OneHost(String),
    /// Files or processes.
    #[error("MPI ping program: {0}")]
    Io(#[from] std::io::Error),
}

/// What the ping program measured, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct MpiRun {
    /// The hosts of rank 0 and rank 1.
    pub hosts: [String; 2],
    /// One row per size.
    pub rows: Vec<MpiRow>,
}

/// Open MPI's bandwidth for one size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MpiRow {
    /// Message size in bytes.
    pub size: usize,
    /// Messages timed.
    pub iterations: usize,
    /// Bytes received per second, GB/s (1e9 B/s), the window's buffers reused.
    pub gbps: f64,
    /// The same into fresh buffers (the next bytes of a region as large as the volume),
    /// as the pool moves fresh CDOs.
    pub fresh_gbps: Option<f64>,
}

/// Where the two ranks run when not both on this host.
#[derive(Clone, Copy, Debug)]
pub struct Across<'a> {
    /// `mpirun --host`: one rank on each (`n1,n2`).
    pub hosts: &'a str,
    /// The command mpirun starts its daemons on other hosts with (`plm_rsh_agent`); ssh
    /// when `None`.
    pub agent: Option<&'a str>,
}

/// Compiles and runs the ping program for `sizes`, `window` messages in flight (each into
/// a buffer of its own), about `volume` bytes per size (20 to 20,000 messages, as the
/// demands); both ranks on this
/// host, or one on each host of `across` (the program is built in `TMPDIR`, which every
/// host must see at the same path).
///
/// # Errors
/// [`MpiBenchError`]: Open MPI missing, compiling or running failed or took too long,
/// output that does not parse; [`MpiBenchError::OneHost`] when `across` was asked for
/// and both ranks ran on one host.
pub fn measure(
    sizes: &[usize],
    (window, volume): (u32, usize),
    across: Option<Across<'_>>,
) -> Result<MpiRun, MpiBenchError> {
    let dir = tempfile::Builder::new().prefix("maestro-mpi-").tempdir()?;
    let src = dir.path().join("pingpong.c");
    let exe = dir.path().join("pingpong");
    std::fs::write(&src, SOURCE)?;
    let deadline = Instant::now() + LIMIT;
    let mut cc = Command::new("mpicc");
    cc.arg("-O2").arg("-o").arg(&exe).arg(&src);
    run("mpicc", &mut cc, deadline)?;
    let mut mpirun = Command::new("mpirun");
    mpirun.args(["-np", "2", "--bind-to", "none"]);
    if let Some(a) = across {
        mpirun.args(["--host", a.hosts, "--map-by", "node"]);
        if let Some(agent) = a.agent {
            mpirun.args(["--mca", "plm_rsh_agent", agent]);
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        mpirun.arg("--allow-run-as-root");
    }
    mpirun
        .arg(&exe)
        .arg(window.to_string())
        .arg(volume.to_string())
        .args(sizes.iter().map(ToString::to_string));
    let measured = parse(&run("mpirun", &mut mpirun, deadline)?)?;
    if across.is_some() && measured.hosts[0] == measured.hosts[1] {
        return Err(MpiBenchError::OneHost(measured.hosts[0].clone()));
    }
    Ok(measured)
}

/// Runs `cmd` in its own process group, killed (the whole group) at `deadline`; its stdout.
fn run(what: &'static str, cmd: &mut Command, deadline: Instant) -> Result<String, MpiBenchError> {
    use std::os::unix::process::CommandExt;
    let mut child = match cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(MpiBenchError::Missing(what));
        }
        Err(e) => return Err(e.into()),
    };
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            launcher::process::signal_group(child.id() as i32, libc::SIGKILL);
            let _ = child.wait();
            return Err(MpiBenchError::Timeout(LIMIT));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if !status.success() {
        return Err(MpiBenchError::Failed {
            what,
            status,
            stderr: stderr.trim().to_string(),
        });
    }
    Ok(stdout)
}

/// The ping program's lines: `size iterations GB/s [GB/s-fresh]`.
fn parse(stdout: &str) -> Result<MpiRun, MpiBenchError> {
    let mut lines = stdout.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or_default();
    let hosts = match first.split_whitespace().collect::<Vec<_>>()[..] {
        ["hosts", h0, h1] => [h0.to_string(), h1.to_string()],
        _ => return Err(MpiBenchError::Output(first.to_string())),
    };
    let rows = lines
        .map(|line| {
            let bad = || MpiBenchError::Output(line.to_string());
            let mut f = line.split_whitespace();
            let mut next = || f.next().ok_or_else(bad);
            let size = next()?.parse().map_err(|_| bad())?;
            let iterations = next()?.parse().map_err(|_| bad())?;
            let gbps = next()?.parse().map_err(|_| bad())?;
            let fresh_gbps = f.next().map(str::parse).transpose().map_err(|_| bad())?;
            Ok(MpiRow {
                size,
                iterations,
                gbps,
                fresh_gbps,
            })
        })
        .collect::<Result<_, MpiBenchError>>()?;
    Ok(MpiRun { hosts, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_parse_and_bad_ones_are_named() {
        let run =
            parse("hosts n1 n2\n8 20000 0.0007\n\n1048576 1024 2.7440 1.5\n").expect("parses");
        assert_eq!(run.hosts, ["n1", "n2"]);
        assert_eq!(
            run.rows,
            [
                MpiRow {
                    size: 8,
                    iterations: 20000,
                    gbps: 0.0007,
                    fresh_gbps: None
                },
                MpiRow {
                    size: 1 << 20,
                    iterations: 1024,
                    gbps: 2.744,
                    fresh_gbps: Some(1.5)
                }
            ]
        );
        for bad in ["8 20000", "eight 1 1.0", "8 1 fast", "8 1 1.0 slow"] {
            let err = parse(&format!("hosts a b\n{bad}")).expect_err("malformed");
            assert!(err.to_string().contains(bad), "{err}");
        }
        for bad in ["8 20000 0.1", "hosts n1", ""] {
            let err = parse(bad).expect_err("no hosts line");
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
