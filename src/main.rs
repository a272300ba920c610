//! The `maestro` command: `run` (our PMIx host), `pm` (a pool manager process),
//! `inventory` (the node's fabric and the NIC to use), `query` (a PMIx tool attached to a
//! running `maestro run`), `pool` (a read-only view of a running pool) and `bench`. Each subcommand lives in its own module with its
//! own command line (`*Args`/`*Options`) and entry function.
//!
//! Exit codes: `maestro run` exits with the job's code (see the `run` module); usage and
//! setup errors exit with 2.

mod inventory_cmd;
mod pm_cmd;
mod pool_cmd;
mod query;
mod reference;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};
use launcher::{janitor, run};
use pool_tools::cli;

/// Whether standard output and standard error were closed when the process started
/// (`maestro run ... >&-`): Rust's runtime opens `/dev/null` in their place before `main`,
/// so what is written there would be lost without a word.
static CLOSED_AT_START: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// Notes which of descriptors 1 and 2 are closed, before Rust's runtime opens
/// `/dev/null` in their place (constructors run before it).
extern "C" fn note_closed_std_fds() {
    for (fd, closed) in [1, 2].into_iter().zip(&CLOSED_AT_START) {
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            closed.store(true, Ordering::Relaxed);
        }
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STD_FDS: extern "C" fn() = note_closed_std_fds;

/// Whether standard output (`fd` 1) or error (2) was closed when this process started.
pub fn closed_at_start(fd: usize) -> bool {
    CLOSED_AT_START
        .get(fd.wrapping_sub(1))
        .is_some_and(|c| c.load(Ordering::Relaxed))
}

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
    Run(run::RunOptions),
    /// Show this node's NICs, their locality and providers, and the NIC to use.
    Inventory(inventory_cmd::InventoryOptions),
    /// Run a pool manager as its own process; prints MSTRO_POOL_MANAGER_INFO;INFO;
    Pm(Box<pm_cmd::PmOptions>),
    /// Benchmarks: runs `maestro-bench` (installed beside `maestro`) with the arguments.
    #[command(disable_help_flag = true)]
    Bench {
        /// What `maestro-bench` takes (`maestro bench --help` lists it).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Attach to a running `maestro run --tool-support` and show its jobs.
    Query(query::QueryArgs),
    /// Look at a running pool: status, ls (with a selector), transfers, fabric (read-only).
    Pool(pool_cmd::PoolArgs),
    /// Cleans up after `maestro run` or `maestro pm` once it is gone (started by them).
    #[command(hide = true)]
    Janitor(janitor::JanitorArgs),
    /// Prints the configuration reference (docs/configuration.md) from the code's own
    /// tables.
    #[command(hide = true)]
    Reference,
}

fn main() -> ExitCode {
    // Before any thread exists: the environment `maestro run`'s PMIx server needs.
    if let Err(e) = pmix::server::prepare_environment() {
        eprintln!("maestro: {e}");
        return ExitCode::from(2);
    }
    mstro::init_logging();
    let command = match Cli::try_parse_from(run::mpirun_habits(std::env::args_os().collect())) {
        Ok(cli) => cli.command,
        Err(e) => cli::shorten_value(e).exit(),
    };
    if matches!(command, Cmd::Inventory(_) | Cmd::Query(_) | Cmd::Pool(_)) {
        // Printing commands end quietly when their reader goes (`maestro inventory |
        // head -1`), as other Unix tools do: status 141, no panic.
        launcher::process::default_action(libc::SIGPIPE);
    }
    match command {
        Cmd::Run(opts) => run::main(&opts, closed_at_start),
        Cmd::Inventory(opts) => cli::exit("inventory", inventory_cmd::run(&opts), 2),
        Cmd::Pm(opts) => cli::exit("pm", pm_cmd::run(&opts), 2),
        Cmd::Bench { args } => bench(&args),
        Cmd::Query(args) => cli::exit("query", args.options().and_then(|o| query::query(&o)), 2),
        Cmd::Pool(args) => cli::exit("pool", pool_cmd::run(&args), 2),
        Cmd::Janitor(args) => janitor::main(&args),
        Cmd::Reference => reference::main(&<Cli as clap::CommandFactory>::command()),
    }
}

/// The benchmarks' program, beside this one (`cargo build -p maestro-bench`, or installed
/// with it).
fn bench_program() -> std::io::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let bench = exe.with_file_name("maestro-bench");
    if bench.is_file() {
        return Ok(bench);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "{} is missing: the benchmarks are a program of their own; build it with `cargo build --release -p maestro-bench` (or install with scripts/install.sh)",
            bench.display()
        ),
    ))
}

/// `maestro bench ARGS`: becomes `maestro-bench ARGS` (its exit code, signals and output
/// are the benchmark's own).
fn bench(args: &[std::ffi::OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let failed = match bench_program() {
        Ok(program) => std::process::Command::new(program).args(args).exec(),
        Err(e) => e,
    };
    eprintln!("maestro bench: {failed}");
    ExitCode::from(2)
}
