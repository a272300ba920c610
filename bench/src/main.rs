//! `maestro-bench`, the benchmarks (`maestro bench ARGS` runs `maestro-bench ARGS`): a
//! program of their own, so that the `maestro` binary links none of their code nor bare
//! libfabric's reference (fabric's `baseline` feature). `pm`: the pool manager's throughput
//! ([`pm`]); `pool`: the pool's data path against bare `fi_read` and MPI ([`pool`]); `copy`:
//! same-host copies out of another process's memory, by each way there is ([`copy`]);
//! `fabric` (here): RMA read bandwidth between two processes on this node, through our
//! `fabric` layer and, in the same run, through bare libfabric ([`fabric::baseline`]), with
//! the ratio. One read in flight, as a minimal C program reads. Hot reads re-read the start
//! of the owner's region; `--cold` walks a 256 MiB region so every read touches memory not
//! in cache. The hidden subcommands are the other processes of a run (a fabric peer, a
//! load generator, a provider), started by the benchmark as this same program.

mod copy;
mod mpi;
mod pattern;
mod peer;
mod pm;
mod pool;

use std::time::{Duration, Instant};

use fabric::baseline::RawEndpoint;
use fabric::{Buffer, Endpoint, MemoryRegion, ProgressMode};
use pool_tools::progress::{Progress, Unit};
use serde::Serialize;

use peer::{OwnerProcess, PeerError, Remote, Serving};

/// Benchmarks.
#[derive(clap::Parser, Debug)]
#[command(name = "maestro bench", bin_name = "maestro bench", version)]
struct Cli {
    #[command(subcommand)]
    command: BenchCmd,
}

/// The benchmarks (`maestro bench ...`), and the other processes of their runs.
#[derive(clap::Subcommand, Debug)]
enum BenchCmd {
    /// Pool manager throughput: injector processes pipelining declare/seal/offer (and
    /// require) batches; PM memory per live CDO.
    Pm(pm::PmBenchArgs),
    /// RMA read bandwidth between two processes: our layer against bare libfabric.
    Fabric(FabricArgs),
    /// The pool's data path: demand latency and bandwidth of CDOs another process
    /// offered, through a real pool manager, against bare fi_read.
    Pool(pool::PoolBenchArgs),
    /// Same-host copies out of another process's memory: `process_vm_readv` one range
    /// per call and several per call, against a view of its memory file.
    Copy(copy::CopyArgs),
    /// One side of a two-process fabric run (used by `bench fabric` and the tests).
    #[command(hide = true)]
    FabricPeer(peer::PeerArgs),
    /// One load generator of `bench pm` (used by the benchmark).
    #[command(hide = true)]
    PmInjector(pm::InjectorArgs),
    /// The provider process of `bench pool` (used by the benchmark).
    #[command(hide = true)]
    PoolProvider(pool::ProviderArgs),
    /// Prints the benchmarks' part of the configuration reference (`maestro reference`).
    #[command(hide = true)]
    Reference,
}

/// Runs a benchmark and prints its result (text, or JSON with `--json`), or one of the
/// other processes of a run.
fn main() -> std::process::ExitCode {
    mstro::init_logging();
    let command = match <Cli as clap::Parser>::try_parse() {
        Ok(cli) => cli.command,
        Err(e) => pool_tools::cli::shorten_value(e).exit(),
    };
    match command {
        BenchCmd::Pm(args) => pool_tools::cli::exit("bench pm", pm::main_bench(&args), 2),
        BenchCmd::Fabric(args) => pool_tools::cli::exit("bench fabric", fabric_main(&args), 2),
        BenchCmd::Pool(args) => pool_tools::cli::exit("bench pool", pool::main(&args), 2),
        BenchCmd::Copy(args) => pool_tools::cli::exit("bench copy", copy::main(&args), 2),
        BenchCmd::FabricPeer(args) => peer::main(args),
        BenchCmd::PmInjector(args) => pm::main(&args),
        BenchCmd::PoolProvider(args) => pool::provider_main(&args),
        BenchCmd::Reference => {
            let cli = <Cli as clap::CommandFactory>::command();
            print!(
                "{}",
                pool_tools::cli::options_reference(&cli, "maestro bench")
            );
            std::process::ExitCode::SUCCESS
        }
    }
}

/// The command line of `maestro bench fabric`.
#[derive(Clone, Debug, clap::Args)]
pub struct FabricArgs {
    #[command(flatten)]
    bench: FabricBench,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn fabric_main(args: &FabricArgs) -> Result<(), PeerError> {
    let b = &args.bench;
    let rows = b.run()?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "provider": b.provider, "cold": b.cold, "progress": b.progress, "rows": rows })
        );
    } else {
        print!("{}", table(b, &rows));
    }
    Ok(())
}

/// Options of `maestro bench fabric`.
#[derive(Clone, Debug, clap::Args)]
pub struct FabricBench {
    /// libfabric provider (tcp;ofi_rxm, net, shm, udp;ofi_rxd, ...).
    #[arg(long, default_value = "tcp;ofi_rxm")]
    pub provider: String,
    /// Read sizes (K, M, G = powers of 1024).
    #[arg(long, default_value = "4K,64K,1M,16M,256M", value_parser = pool_tools::cli::parse_sizes)]
    pub sizes: std::vec::Vec<usize>,
    /// Walk a 256 MiB region (cold data) instead of re-reading the same bytes.
    #[arg(long)]
    pub cold: bool,
    /// Also measure bare libfabric; `--no-baseline` skips it.
    #[arg(
        long = "no-baseline",
        action = clap::ArgAction::SetFalse,
        help = "Skip the bare-libfabric baseline"
    )]
    pub baseline: bool,
    /// Bytes to move per size and side (the iteration count follows, 5 to 20000).
    #[arg(long, default_value = "2G", value_parser = pool_tools::cli::parse_size)]
    pub volume: usize,
    /// Progress mode of our layer, on both sides: block (sleep when idle) or spin.
    #[arg(long, default_value = "block", value_parser = pool_tools::cli::parse_progress)]
    pub progress: ProgressMode,
    /// Where the owner runs and the interface both sides use.
    #[command(flatten)]
    pub remote: Remote,
}

/// One line of the result.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Read size in bytes.
    pub size: usize,
    /// Reads timed.
    pub iterations: usize,
    /// Our layer, GB/s (1e9 bytes per second).
    pub ours_gbps: f64,
    /// Bare libfabric, GB/s.
    pub raw_gbps: Option<f64>,
}

impl Row {
    /// ours / raw.
    pub fn ratio(&self) -> Option<f64> {
        self.raw_gbps.map(|r| self.ours_gbps / r)
    }
}

const COLD_REGION: usize = 256 << 20;

impl FabricBench {
    fn region_len(&self) -> usize {
        let max = self.sizes.iter().copied().max().unwrap_or(0);
        if self.cold { max.max(COLD_REGION) } else { max }
    }

    fn iterations(&self, size: usize) -> usize {
        (self.volume / size).clamp(5, 20_000)
    }

    fn offset(&self, i: usize, size: usize) -> u64 {
        if self.cold {
            let slots = (self.region_len() / size).max(1);
            ((i % slots) * size) as u64
        } else {
            0
        }
    }

    /// Runs the benchmark.
    ///
    /// # Errors
    /// Setup failures, a failed read, or corrupted data (the first read of every size is
    /// verified).
    pub fn run(&self) -> Result<Vec<Row>, PeerError> {
        self.remote
            .check(&self.provider)
            .map_err(PeerError::Usage)?;
        let sides = if self.baseline { 2 } else { 1 };
        let mut progress = Progress::stderr("bench fabric", Unit::Bytes, sides * self.bytes_read());
        let ours = self.measure_ours(&mut progress)?;
        let raw = if self.baseline {
            Some(self.measure_raw(&mut progress)?)
        } else {
            None
        };
        progress.finish();
        Ok(self
            .sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| Row {
                size,
                iterations: self.iterations(size),
                ours_gbps: ours[i],
                raw_gbps: raw.as_ref().map(|r| r[i]),
            })
            .collect())
    }

    fn expected(size: usize) -> u64 {
        let mut v = vec![0u8; size];
        pattern::fill(&mut v, peer::SEED);
        pattern::checksum(&v)
    }

    fn verify(size: usize, got: &[u8]) -> Result<(), PeerError> {
        let (got, expected) = (pattern::checksum(got), Self::expected(size));
        if got != expected {
            return Err(PeerError::Corrupt {
                len: size,
                got,
                expected,
            });
        }
        Ok(())
    }

    /// Bytes one side reads over all sizes (the verified first read included).
    pub(crate) fn bytes_read(&self) -> u64 {
        self.sizes
            .iter()
            .map(|&size| ((self.iterations(size) + 1) * size) as u64)
            .sum()
    }

    fn measure_ours(&self, progress: &mut Progress) -> Result<Vec<f64>, PeerError> {
        let owner = OwnerProcess::spawn(
            &self.provider,
            (self.region_len(), false),
            Serving::Ours(self.progress),
            &self.remote,
        )?;
        let ep = Endpoint::open_with(&self.remote.offer(&self.provider)?, self.progress)?;
        let peer = ep.insert_peer(&owner.info.address)?;
        let mut out = Vec::new();
        for &size in &self.sizes {
            let mut dst: MemoryRegion = ep.register(Buffer::new(size)?)?;
            let limit = Duration::from_secs(600);
            dst = ep
                .read(peer, dst, owner.info.region.slice(0, size as u64)?)?
                .wait(limit)?;
            Self::verify(size, dst.as_slice())?;
            progress.add(size as u64);
            let iters = self.iterations(size);
            let start = Instant::now();
            for i in 0..iters {
                let remote = owner.info.region.slice(self.offset(i, size), size as u64)?;
                dst = ep.read(peer, dst, remote)?.wait(limit)?;
                progress.add(size as u64);
            }
            out.push(gbps(size * iters, start.elapsed()));
        }
        Ok(out)
    }

    /// Bare libfabric's GB/s per size, `progress` told of every read.
    pub(crate) fn measure_raw(&self, progress: &mut Progress) -> Result<Vec<f64>, PeerError> {
        let owner = OwnerProcess::spawn(
            &self.provider,
            (self.region_len(), false),
            Serving::Raw,
            &self.remote,
        )?;
        let mut ep = RawEndpoint::open(&self.remote.offer(&self.provider)?)?;
        let peer = ep.insert(&owner.info.address)?;
        let mut out = Vec::new();
        for &size in &self.sizes {
            let (idx, _) = ep.register(Buffer::new(size)?)?;
            ep.read_spin(peer, idx, owner.info.region.slice(0, size as u64)?)?;
            Self::verify(size, ep.bytes(idx))?;
            progress.add(size as u64);
            let iters = self.iterations(size);
            let start = Instant::now();
            for i in 0..iters {
                let remote = owner.info.region.slice(self.offset(i, size), size as u64)?;
                ep.read_spin(peer, idx, remote)?;
                progress.add(size as u64);
            }
            out.push(gbps(size * iters, start.elapsed()));
        }
        Ok(out)
    }
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-9) / 1e9
}

/// Human size (4K, 1M, ...).
pub fn human(size: usize) -> String {
    match size {
        s if s >= 1 << 30 && s % (1 << 30) == 0 => format!("{}G", s >> 30),
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}M", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{}K", s >> 10),
        s => s.to_string(),
    }
}

/// The result as a Markdown table.
pub fn table(b: &FabricBench, rows: &[Row]) -> String {
    let mut s = format!(
        "provider {}, {} reads, 1 in flight, our progress mode {:?}\n\n| size | ours GB/s | raw GB/s | ours/raw |\n|---|---|---|---|\n",
        b.provider,
        if b.cold { "cold" } else { "hot" },
        b.progress
    );
    for r in rows {
        let raw = r.raw_gbps.map_or("-".to_string(), |v| format!("{v:.2}"));
        let ratio = r.ratio().map_or("-".to_string(), |v| format!("{v:.2}"));
        s.push_str(&format!(
            "| {} | {:.2} | {raw} | {ratio} |\n",
            human(r.size),
            r.ours_gbps
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_powers_of_1024() {
        assert_eq!(human(256 << 20), "256M");
        assert_eq!(human(1000), "1000");
    }
}
