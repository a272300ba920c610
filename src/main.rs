//! The `maestro` command: `run` (our PMIx host), `inventory` (the node's fabric and the NIC
//! to use), `query` (a PMIx tool attached to a running `maestro run`).
//!
//! Exit codes: `maestro run` exits with the job's code (see the `run` module); usage and
//! setup errors exit with 2.

mod bench;
mod inventory_cmd;
mod pm_cmd;
mod query;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Data orchestration for HPC workflows, woven into PMIx.
#[derive(Parser, Debug)]
#[command(name = "maestro", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Launch N ranks of a program on this node under our own PMIx host.
    Run {
        /// Number of ranks.
        #[arg(short = 'n', long = "np", default_value_t = 1)]
        nprocs: u32,
        /// Prefix every output line with "[rank] ".
        #[arg(long)]
        label: bool,
        /// Let PMIx tools (maestro query) attach.
        #[arg(long)]
        tool_support: bool,
        /// Also serve as this node's PMIx system server (implies --tool-support), so tools
        /// attach without knowing the pid: maestro query --system.
        #[arg(long)]
        system_server: bool,
        /// Seconds the other ranks get after a rank failed or aborted before SIGTERM.
        #[arg(long, default_value_t = 2.0, value_parser = parse_secs)]
        grace: f64,
        /// Seconds between SIGTERM and SIGKILL when stopping ranks.
        #[arg(long, default_value_t = 1.0, value_parser = parse_secs)]
        kill_after: f64,
        /// Wall-clock limit of the job in seconds (exit code 124 when reached).
        #[arg(long, value_parser = parse_secs)]
        timeout: Option<f64>,
        /// Do not tell Open MPI 4.x ranks that a PMIx launcher started them.
        #[arg(long)]
        no_openmpi_compat: bool,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Show this node's NICs, their locality and providers, and the NIC to use.
    Inventory {
        /// Print JSON (schema maestro.inventory/1, plus the choice).
        #[arg(long, conflicts_with = "slurm")]
        json: bool,
        /// Read an hwloc XML topology (lstopo --of xml) instead of this machine.
        #[arg(long)]
        topology: Option<PathBuf>,
        /// Choose the NIC for these CPUs (list syntax 0-3,8; default: this process's binding).
        #[arg(long)]
        cpuset: Option<String>,
        /// The local rank, which spreads processes over equally good NICs.
        #[arg(long, default_value_t = 0)]
        local_rank: u32,
        /// Only consider NICs offering this libfabric provider (tcp, verbs, ...).
        #[arg(long)]
        provider: Option<String>,
        /// Print slurm.conf / gres.conf / topology.conf lines for this node.
        #[arg(long)]
        slurm: bool,
        /// Print where N tasks of this node go under srun --maestro-bind=near-nic: each
        /// task's NIC and the CPUs near it (for schedulers and hand-written --cpu-bind maps).
        #[arg(long, value_name = "N")]
        placement: Option<u32>,
    },
    /// Run a pool manager as its own process; prints MSTRO_POOL_MANAGER_INFO;INFO;
    Pm {
        /// The workflow served (default: MSTRO_WORKFLOW_NAME, else "workflow").
        #[arg(long)]
        workflow: Option<String>,
        /// Address to listen on (repeatable); the default 0.0.0.0:0 listens on every
        /// interface and advertises each one that is up, loopback last.
        #[arg(long, default_value = "0.0.0.0:0")]
        listen: Vec<std::net::SocketAddr>,
        /// Also write the PM info to this file (mode 0600; removed at exit).
        #[arg(long)]
        info_file: Option<PathBuf>,
        /// Serve over TCP only (no Unix socket for processes on this host): for processes
        /// that share the file system but should reach the PM over the network.
        #[arg(long)]
        no_unix_socket: bool,
        /// Seconds a new connection has to join before it is closed.
        #[arg(long, default_value = "10", value_parser = parse_secs)]
        join_timeout: f64,
        /// Most bytes of messages read from applications and not yet handled (e.g. 64M);
        /// readers wait for room instead of queuing more.
        #[arg(long, default_value = "64M", value_parser = parse_one_size)]
        max_ingress: usize,
        /// Most bytes of answers queued for one application that does not read them; past
        /// it the application is disconnected (e.g. 256M).
        #[arg(long, default_value = "256M", value_parser = parse_one_size)]
        max_queued: usize,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// One side of a two-process fabric run (used by `bench fabric` and the tests).
    #[command(hide = true)]
    FabricPeer {
        /// `owner` (serve a region) or `reader` (read an owner's region in a loop).
        #[arg(value_parser = ["owner", "reader"])]
        role: String,
        /// The provider (owner).
        #[arg(long, default_value = "tcp;ofi_rxm")]
        provider: String,
        /// Region size in bytes (owner).
        #[arg(long, default_value_t = 1 << 20)]
        size: usize,
        /// Serve with bare libfabric instead of our layer (owner).
        #[arg(long)]
        raw: bool,
        /// Progress mode of our layer (owner).
        #[arg(long, default_value = "block", value_parser = parse_progress)]
        progress: fabric::ProgressMode,
        /// The owner's announcement, a JSON line (reader).
        #[arg(long)]
        owner: Option<String>,
        /// Reads to do; 0 = until an error (reader).
        #[arg(long, default_value_t = 1)]
        count: u64,
    },
    /// One load generator of `bench pm` (used by the benchmark).
    #[command(hide = true)]
    PmInjector {
        /// The PM info.
        #[arg(long)]
        pm: String,
        /// producer, consumer or subscriber.
        #[arg(long, value_parser = ["producer", "consumer", "subscriber"])]
        role: String,
        /// Injector index.
        #[arg(long)]
        index: usize,
        /// CDOs.
        #[arg(long)]
        cdos: usize,
        /// Operations per frame.
        #[arg(long)]
        batch: usize,
    },
    /// Attach to a running `maestro run --tool-support` and show its jobs.
    Query {
        /// Process id of the `maestro run` to attach to.
        #[arg(long, conflicts_with_all = ["uri", "system"], required_unless_present_any = ["uri", "system"])]
        pid: Option<i32>,
        /// Its PMIx tmpdir (default: where maestro run puts it for that pid).
        #[arg(long, requires = "pid")]
        tmpdir: Option<PathBuf>,
        /// A PMIx server URI instead of a pid.
        #[arg(long, conflicts_with = "system")]
        uri: Option<String>,
        /// Attach to this node's system server (a `maestro run --system-server`).
        #[arg(long)]
        system: bool,
        /// The system server's tmpdir (default: $TMPDIR or /tmp).
        #[arg(long, requires = "system")]
        system_tmpdir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Seconds to wait for each answer.
        #[arg(long, default_value_t = 10.0, value_parser = parse_secs)]
        timeout: f64,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Pool manager throughput: injector processes pipelining declare/seal/offer (and
    /// require) batches; PM memory per live CDO.
    Pm {
        /// Producer injector processes (and as many consumers with --require).
        #[arg(long, default_value_t = 2)]
        injectors: usize,
        /// CDOs per producer.
        #[arg(long, default_value_t = 200_000)]
        cdos: usize,
        /// Operations per frame.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        batch: u32,
        /// Also measure declare + require + ticket + transfer-done.
        #[arg(long)]
        require: bool,
        /// Injectors talk to the PM over TCP loopback instead of its Unix socket.
        #[arg(long)]
        tcp: bool,
        /// Subscriber processes that receive every offer's event (through a selector).
        #[arg(long, default_value_t = 0)]
        subscribers: usize,
        /// Soak after the measurement: R rounds of withdraw+dispose every CDO (and, from
        /// the second round, declare+seal+offer them again), reporting the PM's memory.
        #[arg(long, default_value_t = 0)]
        soak: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// RMA read bandwidth between two processes: our layer against bare libfabric.
    Fabric {
        /// libfabric provider (tcp;ofi_rxm, net, shm, udp;ofi_rxd, ...).
        #[arg(long, default_value = "tcp;ofi_rxm")]
        provider: String,
        /// Read sizes (K, M, G = powers of 1024).
        #[arg(long, default_value = "4K,64K,1M,16M,256M", value_parser = bench::parse_sizes)]
        sizes: std::vec::Vec<usize>,
        /// Walk a 256 MiB region (cold data) instead of re-reading the same bytes.
        #[arg(long)]
        cold: bool,
        /// Skip the bare-libfabric baseline.
        #[arg(long)]
        no_baseline: bool,
        /// Bytes to move per size (sets the iteration count).
        #[arg(long, default_value = "2G", value_parser = parse_one_size)]
        volume: usize,
        /// Progress mode of our layer: block (sleep when idle) or spin.
        #[arg(long, default_value = "block", value_parser = parse_progress)]
        progress: fabric::ProgressMode,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_progress(s: &str) -> Result<fabric::ProgressMode, String> {
    fabric::ProgressMode::parse(s).ok_or_else(|| format!("{s:?}: use block or spin"))
}

fn parse_one_size(s: &str) -> Result<usize, String> {
    match bench::parse_sizes(s)?.as_slice() {
        [one] => Ok(*one),
        _ => Err(format!("{s:?}: give one size")),
    }
}

/// Parses a non-negative number of seconds.
fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..1e9).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds (e.g. 2 or 0.5)")),
    }
}

fn main() -> ExitCode {
    // Before any thread exists: the environment `maestro run`'s PMIx server needs.
    if let Err(e) = pmix::server::prepare_environment() {
        eprintln!("maestro: {e}");
        return ExitCode::from(2);
    }
    mstro::init_logging();
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run {
            nprocs,
            label,
            tool_support,
            system_server,
            grace,
            kill_after,
            timeout,
            no_openmpi_compat,
            command,
        } => {
            let opts = run::RunOptions {
                nprocs,
                label,
                tool_support,
                system_server,
                grace: Duration::from_secs_f64(grace),
                kill_after: Duration::from_secs_f64(kill_after),
                timeout: timeout.map(Duration::from_secs_f64),
                openmpi_compat: !no_openmpi_compat,
                command,
            };
            match run::run(&opts) {
                Ok(code) => ExitCode::from(code as u8),
                Err(e) => {
                    eprintln!("maestro run: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Inventory {
            json,
            topology,
            cpuset,
            local_rank,
            provider,
            slurm,
            placement,
        } => {
            let opts = inventory_cmd::InventoryOptions {
                topology,
                cpuset,
                local_rank,
                provider,
                json,
                slurm,
                placement,
            };
            match inventory_cmd::run(&opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("maestro inventory: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Bench(BenchCmd::Fabric {
            provider,
            sizes,
            cold,
            no_baseline,
            volume,
            progress,
            json,
        }) => {
            let b = bench::FabricBench {
                provider,
                sizes,
                cold,
                baseline: !no_baseline,
                volume,
                progress,
            };
            match b.run() {
                Ok(rows) if json => {
                    println!(
                        "{}",
                        serde_json::json!({ "provider": b.provider, "cold": b.cold, "progress": b.progress, "rows": rows })
                    );
                    ExitCode::SUCCESS
                }
                Ok(rows) => {
                    print!("{}", bench::table(&b, &rows));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("maestro bench fabric: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Pm {
            workflow,
            listen,
            info_file,
            no_unix_socket,
            join_timeout,
            max_ingress,
            max_queued,
        } => {
            let workflow = workflow
                .or_else(|| std::env::var("MSTRO_WORKFLOW_NAME").ok())
                .unwrap_or_else(|| "workflow".into());
            match pm_cmd::run(&pm_cmd::PmOptions {
                workflow,
                listen,
                info_file,
                unix_socket: !no_unix_socket,
                join_timeout: std::time::Duration::from_secs_f64(join_timeout),
                max_ingress,
                max_queued,
            }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("maestro pm: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Bench(BenchCmd::Pm {
            injectors,
            cdos,
            batch,
            require,
            tcp,
            subscribers,
            soak,
            json,
        }) => {
            let b = bench::pm::PmBench {
                injectors,
                cdos,
                batch: batch as usize,
                require,
                tcp,
                subscribers,
                soak_rounds: soak,
            };
            match b.run() {
                Ok(r) if json => {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(r) => {
                    println!(
                        "{} injectors x {cdos} CDOs, batches of {batch}: {:.0} declare+seal+offer/s, PM memory {:.0} B per live CDO",
                        injectors, r.offers_per_sec, r.pm_bytes_per_cdo
                    );
                    if let Some(e) = r.events_per_sec {
                        println!("  {e:.0} offer events/s delivered to {subscribers} subscribers");
                    }
                    if let Some(q) = r.requires_per_sec {
                        println!("  {q:.0} declare+require+ticket+done/s");
                    }
                    if let Some(s) = &r.soak {
                        let mib = |b: u64| b as f64 / f64::from(1 << 20);
                        let after: Vec<String> = s
                            .rss_after_withdraw
                            .iter()
                            .map(|&b| format!("{:.0}", mib(b)))
                            .collect();
                        println!(
                            "  soak: {} rounds, {} CDOs, every operation answered; {:.0} withdraw+dispose/s; PM RSS {:.0} MiB at start, {:.0} MiB peak, after each round's withdrawals: {} MiB",
                            s.rounds,
                            s.cdos,
                            s.withdraws_per_sec,
                            mib(s.rss_start),
                            mib(s.rss_peak),
                            after.join(", ")
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("maestro bench pm: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::PmInjector {
            pm,
            role,
            index,
            cdos,
            batch,
        } => {
            let result = pool::bootstrap::PmInfo::parse(&pm)
                .map_err(|e| bench::pm::PmBenchError::Injector(e.to_string()))
                .and_then(|info| bench::pm::inject(&info, &role, index, cdos, batch.max(1)));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("maestro pm-injector: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::FabricPeer {
            role,
            provider,
            size,
            raw,
            progress,
            owner,
            count,
        } => {
            let serving = if raw {
                bench::peer::Serving::Raw
            } else {
                bench::peer::Serving::Ours(progress)
            };
            let result = match (role.as_str(), owner) {
                ("owner", _) => bench::peer::serve_owner(&provider, size, serving),
                (_, Some(line)) => match serde_json::from_str::<bench::peer::OwnerInfo>(&line) {
                    Ok(info) => bench::peer::run_reader(&info, count),
                    Err(e) => Err(bench::peer::PeerError::Protocol {
                        line,
                        reason: e.to_string(),
                    }),
                },
                (_, None) => Err(bench::peer::PeerError::Protocol {
                    line: String::new(),
                    reason: "reader needs --owner JSON".into(),
                }),
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("maestro fabric-peer {role}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Query {
            pid,
            tmpdir,
            uri,
            system,
            system_tmpdir,
            json,
            timeout,
        } => {
            let target = match (pid, uri) {
                (_, Some(u)) => pmix::ToolTarget::Uri(u),
                (Some(p), None) => query::QueryOptions::for_pid(p, tmpdir),
                (None, None) if system => pmix::ToolTarget::System {
                    tmpdir: system_tmpdir,
                },
                (None, None) => unreachable!("clap requires --pid, --uri or --system"),
            };
            let opts = query::QueryOptions {
                target,
                json,
                timeout: Duration::from_secs_f64(timeout),
            };
            match query::query(&opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("maestro query: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
