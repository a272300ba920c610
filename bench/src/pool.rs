//! `maestro bench pool`: the data path as a user sees it. A provider process offers one CDO
//! per size through a real pool manager; this process, the consumer, `demand`s each of them
//! again and again (declare, demand, dispose; no require first) and times the demand:
//! latency percentiles one demand at a time (and, between demands, a `require` nobody can
//! serve: one bare control round trip to the PM, the floor under every operation; declares
//! and disposes do not wait for the PM), bandwidth with `--window` demands in flight
//! (as a consumer that pipelines its demands). In the same run, bare libfabric `fi_read`s of the same
//! sizes on the same provider give the ceiling ([`FabricBench`]'s raw baseline), and with
//! `--mpi` Open MPI's send/recv between two ranks what users compare with ([`super::mpi`]).
//! Over shm the consumer maps the provider's memory where that pays (huge pages for shared
//! memory, see `Buffer::for_offer`) and copies from it otherwise (`--buffers plain`:
//! always; `MSTRO_OFI_CMA=off`: RMA instead). With `--events`, the event-driven stream of
//! fresh CDOs too (`events`).

use std::time::{Duration, Instant};

use fabric::{Buffer, Endpoint, ProgressMode};
use pool::{Client, ClientError, JoinOptions, PmConfig, PoolManager};
use pool_tools::progress::{Progress, Unit};
use serde::Serialize;

mod cpu;
mod events;
mod gfs;
mod provider;

pub use gfs::Transport;
use provider::ProviderProcess;
pub use provider::{Buffers, ProviderArgs, provider_main};

use super::peer::{PeerError, Remote, SEED};
use super::{FabricBench, pattern};
use pool_tools::cli::parse_sizes;

/// Why the pool benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolBenchError {
    /// The pool (PM, join, an operation).
    #[error("pool: {0}")]
    Pool(#[from] ClientError),
    /// The fabric or the raw baseline's peer process.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// Starting or talking to the provider process.
    #[error("provider process: {0}")]
    Provider(String),
    /// The MPI comparison (`--mpi`).
    #[error(transparent)]
    Mpi(#[from] super::mpi::MpiBenchError),
    /// A malformed fabric setting in the environment.
    #[error(transparent)]
    Config(#[from] fabric::ConfigError),
    /// With `--user-memory`, a demand's bytes did not land in the memory lent for them.
    #[error("the {0}-byte CDO did not land in the memory lent for it (a copy was made)")]
    NotInPlace(usize),
    /// Options that do not go together; the text says which and what to do.
    #[error("{0}")]
    Usage(String),
    /// A demanded CDO's bytes differ from what the provider offered.
    #[error("the {size}-byte CDO arrived corrupted (checksum {got:#x}, expected {expected:#x})")]
    Corrupt {
        /// Its size.
        size: usize,
        /// What arrived.
        got: u64,
        /// What was offered.
        expected: u64,
    },
}

impl From<fabric::FabricError> for PoolBenchError {
    fn from(e: fabric::FabricError) -> Self {
        PoolBenchError::Peer(PeerError::Fabric(e))
    }
}

impl From<std::io::Error> for PoolBenchError {
    fn from(e: std::io::Error) -> Self {
        PoolBenchError::Provider(e.to_string())
    }
}

/// Options of `maestro bench pool`.
#[derive(Clone, Debug, clap::Args)]
pub struct PoolBench {
    /// libfabric provider of both applications (shm, tcp;ofi_rxm, ...).
    #[arg(long, default_value = "shm")]
    pub provider: String,
    /// CDO sizes (K, M, G = powers of 1024).
    #[arg(long, default_value = "8,4K,64K,1M,16M,256M", value_parser = parse_sizes)]
    pub sizes: std::vec::Vec<usize>,
    /// Bytes to demand per size (sets the iteration count, 20 to 20000).
    #[arg(long, default_value = "2G", value_parser = pool_tools::cli::parse_size)]
    pub volume: usize,
    /// Also measure bare libfabric; `--no-baseline` skips it.
    #[arg(
        long = "no-baseline",
        action = clap::ArgAction::SetFalse,
        help = "Skip the bare-libfabric baseline"
    )]
    pub baseline: bool,
    /// Demands in flight for the bandwidth pass (1: one at a time, as the latency pass).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub window: u16,
    /// Progress mode of both applications' endpoints: block or spin.
    #[arg(long, default_value = "block", value_parser = pool_tools::cli::parse_progress)]
    pub progress: ProgressMode,
    /// Also run Open MPI's send/recv of the same sizes between two ranks (needs `mpicc`
    /// and `mpirun`): what users compare a same-node demand with.
    #[arg(long)]
    pub mpi: bool,
    /// Both sides use the application's own memory: the provider offers it in place
    /// (as `mstro_cdo_set_user_memory`), the consumer lends its buffers to `demand_into`;
    /// no copy on either side besides the transfer.
    #[arg(long)]
    pub user_memory: bool,
    /// The provider's library buffers: `offer` (`Buffer::for_offer`: shareable where a
    /// same-host consumer's view costs less than a copy, else slots of slabs such consumers
    /// map once and copy out of), `plain` (`Buffer::new`: they copy by system call) or
    /// `shareable` (`Buffer::shareable`: they map, whatever it costs).
    #[arg(
        long,
        value_enum,
        default_value = "offer",
        conflicts_with = "user_memory"
    )]
    pub buffers: Buffers,
    /// Offers of at most this many bytes carry them to the PM, which hands them on with
    /// the tickets (`JoinOptions::inline_max`; 0: never, every CDO from the provider).
    #[arg(long, default_value_t = pool::DEFAULT_INLINE_MAX)]
    pub inline_max: usize,
    /// Both applications keep their control connections on the PM's Unix socket, not
    /// shared-memory rings (`JoinOptions::rings` off: the reference for the rings).
    #[arg(long)]
    pub no_rings: bool,
    /// Prefetch: `require` each CDO first; the latency pass times the demand once the
    /// transfer the require started has completed (a transport-completed event), the
    /// bandwidth pass requires, demands and disposes each.
    #[arg(long)]
    pub require: bool,
    /// Also drain groups: the provider offers, per size, a group of N CDOs of that size,
    /// and the consumer demands it whole (`demand_group`) five times; CDOs/s and GB/s of
    /// the median (0: none). With `--mpi`, also Open MPI receiving N messages of that size
    /// all in flight, each into a buffer of its own (at most 20,000), as the group's
    /// members are.
    #[arg(long, default_value_t = 0)]
    pub group: usize,
    /// Also the event-driven stream, per size: the consumer subscribes to OFFER events,
    /// the provider offers fresh CDOs (made and filled before the clock starts; at most
    /// `--events-max` and 1 GiB per size) as fast as it can, and the consumer demands each as it
    /// is told of it, `--window` in flight; CDOs/s and GB/s from the provider's go to the
    /// last demand.
    #[arg(long)]
    pub events: bool,
    /// With `--events`: the most fresh CDOs the stream offers per size (still at most
    /// 1 GiB of them). A longer stream than the default's fraction of a second, to profile
    /// it apart from the other passes.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub events_max: u32,
    /// With `--events`: the provider offers the stream in batches of N
    /// (`Client::offer_many`, two batches in flight) and the consumer takes what its
    /// subscription holds in batches of up to N (`Client::fetch_many`); 0: one CDO per
    /// call (`declare` and `seal_and_offer`; `declare`, `demand` and `dispose`).
    #[arg(
        long,
        default_value_t = 0,
        value_parser = clap::value_parser!(u32).range(0..=100_000),
        conflicts_with = "user_memory"
    )]
    pub events_batch: u32,
    /// With `--events`: check the bytes of every CDO the stream demands, not only of the
    /// first (slower: for tests of the data path, not for its figures).
    #[arg(long)]
    pub verify_all: bool,
    /// How the provider's bytes reach the consumer: `rma` (the fabric, as the PM plans)
    /// or `gfs` (files under `--gfs-dir`; the baseline is then a plain copy of as many
    /// bytes between files of that directory, the file system's own limit).
    #[arg(long, value_enum, default_value = "rma")]
    pub transport: Transport,
    /// With `--transport gfs`: the directory (default: a fresh one under the temporary
    /// directory, removed at the end).
    #[arg(long)]
    pub gfs_dir: Option<std::path::PathBuf>,
    /// Where the provider (and the raw baseline's owner) runs, and the interface both
    /// sides use; across nodes also `--listen`.
    #[command(flatten)]
    pub remote: Remote,
    /// Where the PM listens (default 127.0.0.1, any port): across nodes, an address of
    /// this node the provider's node reaches (`198.18.7.1:0`).
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// With `--mpi`: the hosts of the two ranks, one each (`mpirun --host`, e.g. `n1,n2`).
    #[arg(long, requires = "mpi")]
    pub mpi_hosts: Option<String>,
    /// With `--mpi-hosts`: the command mpirun starts its daemon on another host with
    /// (`plm_rsh_agent`, called as `AGENT HOST COMMAND`; e.g. `scripts/cluster.sh rsh`).
    #[arg(long, requires = "mpi_hosts")]
    pub mpi_agent: Option<String>,
}

/// The command line of `maestro bench pool`.
#[derive(Clone, Debug, clap::Args)]
pub struct PoolBenchArgs {
    #[command(flatten)]
    bench: PoolBench,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One size's result.
#[derive(Clone, Debug, Serialize)]
pub struct PoolRow {
    /// CDO size in bytes.
    pub size: usize,
    /// Demands timed.
    pub iterations: usize,
    /// Median demand time, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Median time of a `require` of a CDO nobody offers (one bare control round trip to
    /// the PM), microseconds.
    pub round_trip_p50_us: f64,
    /// Bytes demanded per second with `window` demands in flight, GB/s (1e9 B/s).
    pub gbps: f64,
    /// Demands in flight for `gbps`.
    pub window: u16,
    /// Bare `fi_read` of the same size, GB/s.
    pub raw_gbps: Option<f64>,
    /// Bare `fi_read`: mean time per read, microseconds.
    pub raw_us: Option<f64>,
    /// Open MPI send/recv of the same size between two ranks, `window` in flight, GB/s
    /// (the window's buffers reused: they stay in the cache).
    pub mpi_gbps: Option<f64>,
    /// The same into fresh buffers cycled through the volume, as the pool moves fresh
    /// CDOs, GB/s.
    pub mpi_fresh_gbps: Option<f64>,
    /// With `--group N`: members of the group demanded whole.
    pub group_members: Option<usize>,
    /// Its members per second (median of five demands of the whole group).
    pub group_cdos_per_sec: Option<f64>,
    /// Its bytes per second, GB/s.
    pub group_gbps: Option<f64>,
    /// With `--group N --mpi`: Open MPI receiving the same N messages all in flight, each
    /// into a buffer of its own (as a drained group's members are kept), GB/s.
    pub group_mpi_gbps: Option<f64>,
    /// With `--events`: fresh CDOs demanded as their offer events arrived, per second.
    pub events_cdos_per_sec: Option<f64>,
    /// With `--events --events-batch N`: N, the batches the stream was offered and
    /// taken in.
    pub events_batch: Option<u32>,
    /// Their bytes per second, GB/s.
    pub events_gbps: Option<f64>,
    /// The consumer's CPU per CDO of the stream (the benchmark's process less the PM's
    /// thread), µs; unknown where the PM thread's CPU clock cannot be read.
    pub events_consumer_cpu_us: Option<f64>,
    /// The PM's CPU per CDO of the stream (its thread), µs; unknown likewise.
    pub events_pm_cpu_us: Option<f64>,
    /// The provider's CPU per CDO of the stream (its whole process), µs.
    pub events_provider_cpu_us: Option<f64>,
    /// With `--transport gfs`: copying as many bytes between two files of the GFS
    /// directory, GB/s.
    pub cp_gbps: Option<f64>,
}

/// `maestro bench pool`: runs the benchmark and prints the result.
///
/// # Errors
/// As [`PoolBench::run`].
pub fn main(args: &PoolBenchArgs) -> Result<(), PoolBenchError> {
    let b = &args.bench;
    let rows = b.run()?;
    if args.json {
        let doc =
            serde_json::json!({ "provider": b.provider, "progress": b.progress, "rows": rows });
        println!("{doc}");
        return Ok(());
    }
    let gfs = b.transport == Transport::Gfs;
    if gfs {
        println!(
            "demand through the pool from files on the global file system, against a plain copy between files there (\"raw\": cp)"
        );
    } else {
        println!(
            "demand through the pool ({}, progress {:?}) against bare fi_read",
            b.provider, b.progress
        );
    }
    println!(
        "{:>10} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}",
        "size",
        "iters",
        "p50 us",
        "p99 us",
        "rtt us",
        "GB/s",
        "raw GB/s",
        "raw us",
        "ratio",
        "MPI GB/s",
        "MPI fresh"
    );
    println!(
        "(p50/p99: one demand at a time; rtt: p50 of a bare round trip to the PM; GB/s: {} demands in flight; MPI: its buffers reused, and fresh ones cycled through the volume)",
        b.window
    );
    for r in &rows {
        let opt = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
        };
        let raw = r.raw_gbps.or(r.cp_gbps);
        let raw_us = r.raw_us.or(r.cp_gbps.map(|g| r.size as f64 / (g * 1e3)));
        println!(
            "{:>10} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>9.3} {:>9} {:>9} {:>7} {:>9} {:>9}",
            r.size,
            r.iterations,
            r.p50_us,
            r.p99_us,
            r.round_trip_p50_us,
            r.gbps,
            opt(raw, 3),
            opt(raw_us, 1),
            opt(raw.map(|raw| r.gbps / raw), 2),
            opt(r.mpi_gbps, 3),
            opt(r.mpi_fresh_gbps, 3)
        );
        if let (Some(n), Some(rate), Some(gbps)) =
            (r.group_members, r.group_cdos_per_sec, r.group_gbps)
        {
            let mpi = r.group_mpi_gbps.map_or_else(String::new, |m| {
                format!(" (Open MPI, {n} in flight into {n} buffers: {m:.3} GB/s)")
            });
            println!(
                "{:>10}   a group of {n} demanded whole: {rate:.0} CDOs/s, {gbps:.3} GB/s{mpi}",
                ""
            );
        }
        if let (Some(rate), Some(gbps)) = (r.events_cdos_per_sec, r.events_gbps) {
            let how = match r.events_batch {
                Some(n) => format!("offered and taken in batches of up to {n}"),
                None => format!("each CDO demanded as told, {} in flight", b.window),
            };
            println!(
                "{:>10}   offer events, {how}: {rate:.0} CDOs/s, {gbps:.3} GB/s; CPU per CDO: consumer {} µs, PM {} µs, provider {} µs",
                "",
                opt(r.events_consumer_cpu_us, 2),
                opt(r.events_pm_cpu_us, 2),
                opt(r.events_provider_cpu_us, 2)
            );
        }
    }
    Ok(())
}

/// One bare round trip to the PM (a `require` of a CDO nobody offers, answered at once),
/// timed; also a barrier: the PM has handled everything this client sent before.
fn bare_round_trip(consumer: &Client) -> Result<Duration, PoolBenchError> {
    let unoffered = consumer.declare("bench-unoffered")?;
    let t = Instant::now();
    consumer.require(unoffered)?;
    let took = t.elapsed();
    consumer.retract(unoffered)?;
    consumer.dispose(unoffered)?;
    Ok(took)
}

/// Checks that `data`, a demanded CDO of `size`, holds the benchmark's pattern.
fn verify(size: usize, data: &[u8]) -> Result<(), PoolBenchError> {
    let mut expected = vec![0u8; size];
    pattern::fill(&mut expected, SEED);
    let (got, expected) = (pattern::checksum(data), pattern::checksum(&expected));
    if got == expected {
        Ok(())
    } else {
        Err(PoolBenchError::Corrupt {
            size,
            got,
            expected,
        })
    }
}

/// The CDO name of a size.
fn name_of(size: usize) -> String {
    format!("bench-{size}")
}

/// The group of a size (`--group`) and the name of its member `i`.
fn group_of(size: usize) -> String {
    format!("bench-group-{size}")
}

fn member_of(size: usize, i: usize) -> String {
    format!("{}/{i}", group_of(size))
}

impl PoolBench {
    fn iterations(&self, size: usize) -> usize {
        (self.volume / size).clamp(20, 20_000)
    }

    /// Runs the benchmark: the pool's demands, then (unless disabled) bare reads.
    ///
    /// # Errors
    /// Setup failures, a failed or refused operation, corrupted data (the first demand of
    /// every size is verified).
    pub fn run(&self) -> Result<Vec<PoolRow>, PoolBenchError> {
        self.check()?;
        let secret = pool::bootstrap::new_secret()?;
        let listen = vec![
            self.listen
                .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ];
        let pm = PoolManager::start(PmConfig::new("bench-pool", &secret, listen))?;
        let dir = match self.transport {
            Transport::Gfs => Some(gfs::Dir::new(self.gfs_dir.as_deref())?),
            Transport::Rma => None,
        };
        let dir_path = dir.as_ref().map(gfs::Dir::path);
        let mut provider = ProviderProcess::spawn(pm.info(), self, dir_path)?;
        let endpoint = Endpoint::open_with(&self.remote.offer(&self.provider)?, self.progress)?;
        let mut options = JoinOptions::new("consumer", 0)
            .endpoint(endpoint)
            .cross_memory(!fabric::Config::from_env()?.no_cross_memory)
            .rings(!self.no_rings)
            .timeout(Duration::from_secs(600));
        if let Some(d) = dir_path {
            options = options.gfs(gfs::options(d, false));
        }
        let consumer = Client::join(pm.info(), options)?;
        let mut rows = Vec::new();
        for &size in &self.sizes {
            let mut row = self.measure(&consumer, size)?;
            if self.group > 0 {
                let per_sec = self.drain_group(&consumer, size)?;
                row.group_members = Some(self.group);
                row.group_cdos_per_sec = Some(per_sec);
                row.group_gbps = Some(per_sec * size as f64 / 1e9);
            }
            if self.events {
                let (per_sec, cpu) = self.event_stream((&consumer, &pm), &mut provider, size)?;
                row.events_cdos_per_sec = Some(per_sec);
                row.events_batch = (self.events_batch > 0).then_some(self.events_batch);
                row.events_gbps = Some(per_sec * size as f64 / 1e9);
                row.events_consumer_cpu_us = cpu.consumer_us;
                row.events_pm_cpu_us = cpu.pm_us;
                row.events_provider_cpu_us = Some(cpu.provider_us);
            }
            if let Some(d) = dir_path {
                row.cp_gbps = Some(gfs::copy_gbps(d, size, row.iterations.min(200))?);
            }
            rows.push(row);
        }
        consumer.leave()?;
        drop(provider);
        if self.baseline && dir.is_none() {
            let bare = FabricBench {
                provider: self.provider.clone(),
                sizes: self.sizes.clone(),
                cold: false,
                baseline: true,
                volume: self.volume,
                progress: self.progress,
                remote: self.remote.clone(),
            };
            let mut progress = Progress::stderr("bare libfabric", Unit::Bytes, bare.bytes_read());
            let raw = bare.measure_raw(&mut progress)?;
            progress.finish();
            for (row, gbps) in rows.iter_mut().zip(raw) {
                row.raw_gbps = Some(gbps);
                row.raw_us = Some(row.size as f64 / (gbps * 1e3));
            }
        }
        if self.mpi {
            let across = self.mpi_hosts.as_deref().map(|hosts| super::mpi::Across {
                hosts,
                agent: self.mpi_agent.as_deref(),
            });
            let window = u32::from(self.window);
            let mpi = super::mpi::measure(&self.sizes, (window, self.volume), across)?;
            for (row, m) in rows.iter_mut().zip(mpi.rows) {
                row.mpi_gbps = Some(m.gbps);
                row.mpi_fresh_gbps = m.fresh_gbps;
            }
            // A drained group's reference: all its messages in flight at once.
            if self.group > 0 {
                let n = u32::try_from(self.group).unwrap_or(u32::MAX);
                for row in &mut rows {
                    let volume = row.size.saturating_mul(self.group);
                    let m = super::mpi::measure(&[row.size], (n, volume), across)?;
                    row.group_mpi_gbps = m.rows.first().map(|m| m.gbps);
                }
            }
        }
        Ok(rows)
    }

    /// Refuses options that do not go together.
    fn check(&self) -> Result<(), PoolBenchError> {
        self.remote
            .check(&self.provider)
            .map_err(PoolBenchError::Usage)?;
        if self.remote.launcher.is_some() && self.listen.is_none_or(|a| a.ip().is_loopback()) {
            return Err(PoolBenchError::Usage(
                "--launcher needs --listen on an address of this node the other node reaches (the PM listens on loopback otherwise)".into(),
            ));
        }
        Ok(())
    }

    fn measure(&self, consumer: &Client, size: usize) -> Result<PoolRow, PoolBenchError> {
        let name = name_of(size);
        let lender = self
            .user_memory
            .then(|| Lender::new(size, usize::from(self.window)));
        let lender = lender.as_ref();
        let c = consumer.as_async();
        // The first demand is checked and not timed.
        let cdo = consumer.declare(&name)?;
        let mut loan = Lender::loan(lender);
        consumer.block_on(demand(c, cdo, (loan.as_mut(), false), |d| verify(size, d)))?;
        consumer.dispose(cdo)?;
        drop(loan);
        let iterations = self.iterations(size);
        let (mut times, mut round_trips) = (
            Vec::with_capacity(iterations),
            Vec::with_capacity(iterations),
        );
        let moved = self
            .require
            .then(|| {
                consumer.subscribe(
                    &pool::selector::Selector::all(),
                    pool::events::EventKind::TransportCompleted,
                    pool::events::SubscribeOptions::default(),
                )
            })
            .transpose()?;
        for _ in 0..iterations {
            round_trips.push(bare_round_trip(consumer)?);
            let cdo = consumer.declare(&name)?;
            let mut loan = Lender::loan(lender);
            if let Some(moved) = &moved {
                consumer.block_on(require(c, cdo, loan.as_mut()))?;
                moved
                    .wait_timeout(Duration::from_secs(600))?
                    .ok_or(PoolBenchError::Provider(
                        "the required CDO never moved".into(),
                    ))?;
            }
            let t = Instant::now();
            let held =
                consumer.block_on(demand(c, cdo, (loan.as_mut(), moved.is_some()), |_| Ok(())))?;
            times.push(t.elapsed());
            drop(held);
            consumer.dispose(cdo)?;
            drop(loan);
        }
        times.sort_unstable();
        round_trips.sort_unstable();
        let at = |times: &[Duration], q: f64| {
            let i = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1;
            times[i].as_secs_f64() * 1e6
        };
        drop(moved);
        let gbps = self.bandwidth(consumer, lender, (&name, size), iterations)?;
        Ok(PoolRow {
            size,
            iterations,
            p50_us: at(&times, 0.50),
            p99_us: at(&times, 0.99),
            round_trip_p50_us: at(&round_trips, 0.50),
            gbps,
            window: self.window,
            raw_gbps: None,
            raw_us: None,
            mpi_gbps: None,
            mpi_fresh_gbps: None,
            group_members: None,
            group_cdos_per_sec: None,
            group_gbps: None,
            group_mpi_gbps: None,
            events_cdos_per_sec: None,
            events_batch: None,
            events_gbps: None,
            events_consumer_cpu_us: None,
            events_pm_cpu_us: None,
            events_provider_cpu_us: None,
            cp_gbps: None,
        })
    }

    /// Members per second of the median of five demands of the whole group of `size`
    /// (the first, checked, not counted).
    fn drain_group(&self, consumer: &Client, size: usize) -> Result<f64, PoolBenchError> {
        let mut times = Vec::new();
        for round in 0..6 {
            // The PM has handled the last round's disposes (sent unanswered): the round
            // times the group's drain only.
            bare_round_trip(consumer)?;
            let group = consumer.declare(&group_of(size))?;
            let t = Instant::now();
            let (members, _) = consumer.demand_group(group)?;
            let took = t.elapsed();
            if members.len() != self.group {
                return Err(PoolBenchError::Provider(format!(
                    "the group of {size} B has {} members, not {}",
                    members.len(),
                    self.group
                )));
            }
            if round == 0 {
                let mut expected = vec![0u8; size];
                pattern::fill(&mut expected, SEED);
                if let Some(m) = members.iter().find(|m| *m.data != expected[..]) {
                    return Err(PoolBenchError::Corrupt {
                        size,
                        got: pattern::checksum(&m.data),
                        expected: pattern::checksum(&expected),
                    });
                }
            } else {
                times.push(took);
            }
            for m in members {
                consumer.dispose(m.cdo)?;
            }
            consumer.dispose(group)?;
        }
        times.sort_unstable();
        Ok(self.group as f64 / times[times.len() / 2].as_secs_f64())
    }

    /// GB/s of `iterations` demands of `name` with `window` of them in flight.
    fn bandwidth(
        &self,
        consumer: &Client,
        lender: Option<&Lender>,
        (name, size): (&str, usize),
        iterations: usize,
    ) -> Result<f64, PoolBenchError> {
        use futures::{StreamExt, TryStreamExt};
        let c = consumer.as_async();
        let require = self.require;
        let one = |_| async move {
            let cdo = c.declare(name)?;
            let mut loan = Lender::loan(lender);
            if require {
                self::require(c, cdo, loan.as_mut()).await?;
            }
            demand(c, cdo, (loan.as_mut(), require), |_| Ok(())).await?;
            c.dispose(cdo).await?;
            drop(loan);
            Ok::<(), PoolBenchError>(())
        };
        let start = Instant::now();
        if self.window == 1 {
            // One after another, each waited for as a blocking call waits (polling first).
            for i in 0..iterations {
                consumer.block_on(one(i))?;
            }
        } else {
            consumer.block_on(
                futures::stream::iter(0..iterations)
                    .map(one)
                    .buffer_unordered(usize::from(self.window))
                    .try_collect::<Vec<()>>(),
            )?;
        }
        Ok((size * iterations) as f64 / start.elapsed().as_secs_f64() / 1e9)
    }
}

/// The consumer's own memory for `--user-memory`: one buffer per demand in flight.
struct Lender {
    size: usize,
    free: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl Lender {
    fn new(size: usize, count: usize) -> Lender {
        Lender {
            size,
            free: std::sync::Mutex::new((0..count).map(|_| vec![0u8; size]).collect()),
        }
    }

    fn free(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A buffer of `lender`'s for one CDO (`None` without `--user-memory`). As many
    /// buffers as demands in flight: a new one is never needed, but costs nothing to allow.
    fn loan(lender: Option<&Lender>) -> Option<Loan<'_>> {
        lender.map(|lender| Loan {
            mine: lender
                .free()
                .pop()
                .unwrap_or_else(|| vec![0u8; lender.size]),
            lender,
        })
    }
}

/// A buffer of a [`Lender`]'s lent for one CDO, given back when dropped (after the demand
/// that used it returned, or the CDO was disposed).
struct Loan<'a> {
    lender: &'a Lender,
    mine: Vec<u8>,
}

impl Loan<'_> {
    /// The buffer as memory the client may land the CDO in.
    fn buffer(&mut self) -> Buffer {
        // SAFETY: `mine` outlives the loan of it (the demand returned or the CDO was
        // disposed before the loan is dropped) and is touched by nobody else meanwhile.
        unsafe { Buffer::borrowed(self.mine.as_mut_ptr(), self.mine.len()) }
    }
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        self.lender.free().push(std::mem::take(&mut self.mine));
    }
}

/// Requires `cdo`, into the loan's buffer when there is one.
async fn require(
    c: &pool::AsyncClient,
    cdo: pool::proto::CdoId,
    loan: Option<&mut Loan<'_>>,
) -> Result<(), PoolBenchError> {
    match loan {
        Some(loan) => c.require_into(cdo, loan.buffer()).await?,
        None => c.require(cdo).await?,
    }
    Ok(())
}

/// Demands `cdo`: into the loan's buffer when there is one (lent by [`require`] already
/// when `required`), checking it landed there, or into the library's memory; hands the
/// bytes to `look`. Returns the library's bytes, for the caller to let go of once it
/// stopped timing the demand (releasing a view of a provider's pages is the consumer's
/// cost at dispose, not the demand's).
async fn demand(
    c: &pool::AsyncClient,
    cdo: pool::proto::CdoId,
    (loan, required): (Option<&mut Loan<'_>>, bool),
    look: impl FnOnce(&[u8]) -> Result<(), PoolBenchError>,
) -> Result<Option<pool::CdoData>, PoolBenchError> {
    let Some(loan) = loan else {
        let (data, _) = c.demand(cdo).await?;
        return look(&data).map(|()| Some(data));
    };
    let (data, _) = if required {
        c.demand(cdo).await?
    } else {
        c.demand_into(cdo, loan.buffer()).await?
    };
    if data.as_ptr() != loan.mine.as_ptr() && !data.is_empty() {
        return Err(PoolBenchError::NotInPlace(data.len()));
    }
    look(&data).map(|()| None)
}
