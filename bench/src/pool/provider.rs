//! The provider process of `maestro bench pool`, both ends of it: the benchmark starts it
//! with its settings, tells it what to do by lines on its input and hears it by lines on
//! its output, each wait bounded ([`ProviderProcess`]); the process itself
//! ([`provider_main`]) offers, says `ready`, and answers `events SIZE COUNT` (`prepared`),
//! `go` and `cpu` (`cpu NANOSECONDS`) until its input closes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;

use fabric::{Buffer, Endpoint, ProgressMode};
use pool::attr::Attributes;
use pool::bootstrap::PmInfo;
use pool::{Client, JoinOptions};
use pool_tools::cli::parse_sizes;

use super::{PoolBench, PoolBenchError, cpu, events, gfs, group_of, member_of, name_of};
use crate::pattern;
use crate::peer::SEED;

/// The provider process (`maestro-bench pool-provider`): it offers one CDO per size and serves
/// until its stdin closes; on drop its stdin is closed, it is given
/// [`ProviderProcess::GRACE`] to withdraw and leave (a GFS provider removes its files), and
/// killed after.
pub(super) struct ProviderProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: std::sync::mpsc::Receiver<std::io::Result<String>>,
}

impl ProviderProcess {
    /// How long a provider told to stop may take to withdraw and leave.
    const GRACE: Duration = Duration::from_secs(10);

    /// Starts the provider of `bench` for the PM of `pm`, offering through the global file
    /// system in `gfs` if given; returns once it offered its CDOs.
    ///
    /// # Errors
    /// The process could not start, or did not say it offered within two minutes.
    pub(super) fn spawn(
        pm: &PmInfo,
        bench: &PoolBench,
        gfs: Option<&std::path::Path>,
    ) -> Result<ProviderProcess, PoolBenchError> {
        let sizes: Vec<String> = bench.sizes.iter().map(ToString::to_string).collect();
        let mut child = bench
            .remote
            .command()?
            .args(["pool-provider", "--pm", &pm.encode(), "--provider"])
            .arg(&bench.provider)
            .args(["--sizes", &sizes.join(",")])
            .args(["--progress", progress_name(bench.progress)])
            .args(["--inline-max", &bench.inline_max.to_string()])
            .args(["--group", &bench.group.to_string()])
            .args(bench.remote.args())
            .args(gfs.map(|d| format!("--gfs-dir={}", d.display())))
            .args(bench.user_memory.then_some("--user-memory"))
            .args(bench.no_rings.then_some("--no-rings"))
            .arg("--buffers")
            .args(
                clap::ValueEnum::to_possible_value(&bench.buffers).map(|v| v.get_name().to_owned()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stdout = stdout.ok_or_else(|| PoolBenchError::Provider("no stdout pipe".into()))?;
        // Its lines, read on a thread of their own so that every wait has a limit; the
        // thread ends with the process's output.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut provider = ProviderProcess {
            child,
            stdin: Some(stdin.ok_or_else(|| PoolBenchError::Provider("no stdin pipe".into()))?),
            stdout: rx,
        };
        match provider.stdout.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(line)) if line.trim() == "ready" => Ok(provider),
            other => {
                let _ = provider.child.kill();
                Err(PoolBenchError::Provider(format!(
                    "it did not offer its CDOs ({})",
                    said(other)
                )))
            }
        }
    }
}

/// What the provider said instead of what was awaited, in words.
fn said(got: Result<std::io::Result<String>, std::sync::mpsc::RecvTimeoutError>) -> String {
    match got {
        Ok(Ok(line)) => format!("it said {:?}", line.trim()),
        Ok(Err(e)) => format!("its output failed: {e}"),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => "it said nothing in time".into(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            "it ended without saying it (see its error output above)".into()
        }
    }
}

impl ProviderProcess {
    /// Waits at most `limit` for the provider to say `word` (a line).
    pub(super) fn expect(&mut self, word: &str, limit: Duration) -> Result<(), PoolBenchError> {
        self.answer(word, limit).map(drop)
    }

    /// Waits at most `limit` for the provider's line that starts with the word `word`;
    /// what follows it.
    pub(super) fn answer(&mut self, word: &str, limit: Duration) -> Result<String, PoolBenchError> {
        match self.stdout.recv_timeout(limit) {
            Ok(Ok(line)) if line.split_whitespace().next() == Some(word) => {
                Ok(line.trim()[word.len()..].trim().to_owned())
            }
            other => Err(PoolBenchError::Provider(format!(
                "it did not say {word:?} within {limit:?} ({})",
                said(other)
            ))),
        }
    }

    /// Sends the provider `command` (a line).
    pub(super) fn tell(&mut self, command: &str) -> Result<(), PoolBenchError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| PoolBenchError::Provider("its input is closed".into()))?;
        writeln!(stdin, "{command}")?;
        stdin.flush()?;
        Ok(())
    }
}

impl Drop for ProviderProcess {
    fn drop(&mut self) {
        crate::peer::end_child(&mut self.child, self.stdin.take(), Self::GRACE);
    }
}

fn progress_name(p: ProgressMode) -> &'static str {
    match p {
        ProgressMode::Block => "block",
        ProgressMode::Spin => "spin",
    }
}

/// The command line of the provider process (`maestro-bench pool-provider`, hidden).
#[derive(Clone, Debug, clap::Args)]
pub struct ProviderArgs {
    /// The PM info.
    #[arg(long)]
    pub(super) pm: String,
    /// libfabric provider.
    #[arg(long)]
    pub(super) provider: String,
    /// CDO sizes in bytes.
    #[arg(long, value_parser = parse_sizes)]
    pub(super) sizes: std::vec::Vec<usize>,
    /// Progress mode of its endpoint.
    #[arg(long, default_value = "block", value_parser = pool_tools::cli::parse_progress)]
    pub(super) progress: ProgressMode,
    /// Offer the process's own memory in place (not library buffers).
    #[arg(long)]
    pub(super) user_memory: bool,
    /// Which library buffers to offer.
    #[arg(long, value_enum, default_value = "offer")]
    pub(super) buffers: Buffers,
    /// As the benchmark's `--inline-max`.
    #[arg(long, default_value_t = pool::DEFAULT_INLINE_MAX)]
    pub(super) inline_max: usize,
    /// As the benchmark's `--no-rings`.
    #[arg(long)]
    pub(super) no_rings: bool,
    /// As the benchmark's `--group`.
    #[arg(long, default_value_t = 0)]
    pub(super) group: usize,
    /// As the benchmark's `--iface`.
    #[arg(long)]
    pub(super) iface: Option<String>,
    /// Offer through the global file system in this directory.
    #[arg(long)]
    pub(super) gfs_dir: Option<std::path::PathBuf>,
}

/// The library buffers a benchmark provider offers (see [`super::PoolBench::buffers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Buffers {
    /// `Buffer::for_offer`.
    Offer,
    /// `Buffer::new`.
    Plain,
    /// `Buffer::shareable`.
    Shareable,
}

impl Buffers {
    pub(super) fn make(self, len: usize) -> fabric::Result<Buffer> {
        match self {
            Buffers::Offer => Buffer::for_offer(len),
            Buffers::Plain => Buffer::new(len),
            Buffers::Shareable => Buffer::shareable(len),
        }
    }
}

/// `maestro-bench pool-provider`: offers one CDO per size (filled with the benchmark's pattern),
/// prints `ready`, serves until stdin closes, then withdraws and leaves; exit code 1 on
/// failure.
pub fn provider_main(args: &ProviderArgs) -> std::process::ExitCode {
    pool_tools::cli::exit("pool-provider", provide(args), 1)
}

fn provide(args: &ProviderArgs) -> Result<(), PoolBenchError> {
    let pm = PmInfo::parse(&args.pm).map_err(|e| PoolBenchError::Provider(e.to_string()))?;
    let offer = crate::peer::offer_on(&args.provider, args.iface.as_deref())?;
    let endpoint = Endpoint::open_with(&offer, args.progress)?;
    let mut options = JoinOptions::new("provider", 0)
        .endpoint(endpoint)
        .inline_max(args.inline_max)
        .rings(!args.no_rings)
        .cross_memory(!fabric::Config::from_env()?.no_cross_memory)
        .timeout(Duration::from_secs(600));
    if let Some(d) = &args.gfs_dir {
        options = options.gfs(gfs::options(d, true));
    }
    let client = Client::join(&pm, options)?;
    let mut offered = Vec::new();
    let mut groups = Vec::new();
    // With --user-memory: the memory offered in place, kept until the offers are withdrawn.
    let mut mine: Vec<Vec<u8>> = Vec::new();
    for &size in &args.sizes {
        let buf = if args.user_memory {
            let mut v = vec![0u8; size];
            pattern::fill(&mut v, SEED);
            // SAFETY: `v` lives in `mine` until after the withdrawals below and is not
            // written while offered.
            let b = unsafe { Buffer::borrowed(v.as_mut_ptr(), v.len()) };
            mine.push(v);
            b
        } else {
            let mut buf = args.buffers.make(size)?;
            pattern::fill(buf.as_mut_slice(), SEED);
            buf
        };
        let cdo = client.declare(&name_of(size))?;
        client.seal_and_offer(cdo, Attributes::new(), buf)?;
        offered.push(cdo);
        if args.group > 0 {
            let group = client.declare(&group_of(size))?;
            let mut members = Vec::with_capacity(args.group);
            for i in 0..args.group {
                let mut b = args.buffers.make(size)?;
                pattern::fill(b.as_mut_slice(), SEED);
                members.push((
                    client.declare(&member_of(size, i))?,
                    Some(Attributes::new()),
                    b,
                ));
            }
            let ids: Vec<_> = members.iter().map(|(c, ..)| *c).collect();
            client.offer_group(group, members)?;
            groups.push((group, ids));
        }
    }
    println!("ready");
    std::io::stdout().flush()?;
    // Serve until the benchmark closes our stdin. `events SIZE COUNT` makes COUNT fresh
    // buffers of SIZE filled with the pattern and says `prepared`; `go [BATCH]` then offers
    // them as fast as it can (in batches of BATCH, if given and not 0); `cpu` says this process's CPU time so far (`cpu NANOSECONDS`).
    let mut prepared = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if let Some(stream) = line.strip_prefix("events ") {
            prepared = events::prepare(args, stream)?;
            println!("prepared");
            std::io::stdout().flush()?;
        } else if line.trim() == "cpu" {
            println!("cpu {}", cpu::process_cpu().as_nanos());
            std::io::stdout().flush()?;
        } else if let Some(batch) = line.trim().strip_prefix("go") {
            let batch = batch.trim();
            let batch = if batch.is_empty() {
                0
            } else {
                batch.parse().map_err(|_| {
                    PoolBenchError::Provider(format!("a bad command \"{line}\": go [BATCH]"))
                })?
            };
            offered.extend(events::offer_stream(
                &client,
                std::mem::take(&mut prepared),
                batch,
            )?);
        }
    }
    for cdo in offered {
        client.withdraw(cdo)?;
        client.dispose(cdo)?;
    }
    for (group, members) in groups {
        client.withdraw_group(group, &members)?;
        for cdo in members.into_iter().chain(Some(group)) {
            client.dispose(cdo)?;
        }
    }
    client.leave()?;
    drop(mine);
    Ok(())
}
