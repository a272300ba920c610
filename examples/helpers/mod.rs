//! What the helper apps (`pool_archiver`, `pool_librarian`, `pool_tracer`) share: joining
//! the pool manager named by `MSTRO_POOL_MANAGER_INFO`, and stopping cleanly on SIGINT or
//! SIGTERM.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pool::bootstrap::PmInfo;
use pool::{Client, JoinOptions};

/// Errors of the helper apps, printed by `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long one pool operation may take.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// How often the helpers look at the stop flag while waiting for events.
pub const POLL: Duration = Duration::from_millis(200);

/// Joins the PM of `MSTRO_POOL_MANAGER_INFO` as `component`, moving data over the best
/// fabric endpoint, with the schemas of `MSTRO_SCHEMA_PATH`/`MSTRO_SCHEMA_LIST`.
pub fn join(component: &str) -> Result<Client, Error> {
    let info = PmInfo::from_env()?.ok_or(
        "MSTRO_POOL_MANAGER_INFO is not set: start `maestro pm` and export the line it prints",
    )?;
    let opts = JoinOptions::new(component, 0)
        .fabric(fabric::Scope::AnyNode)?
        .timeout(TIMEOUT);
    Ok(Client::join(&info, opts)?)
}

/// A flag that SIGINT or SIGTERM sets. Handlers that libraries installed (libfabric's
/// PSM stack exits on SIGTERM) are reset first, so the helper leaves the pool cleanly.
pub fn stop_flag() -> Result<Arc<AtomicBool>, Error> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // SAFETY: resetting a disposition to its default is always sound.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        signal_hook::flag::register(sig, flag.clone())?;
    }
    Ok(flag)
}

/// The selector options of the helpers that subscribe.
#[derive(clap::Args)]
pub struct Selecting {
    /// Selector over CDO attributes (see `pool::selector`); empty: every CDO.
    #[arg(long, default_value = "")]
    pub selector: String,
    /// Namespace of relative keys in the selector.
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// Stop after this many (events or CDOs); default: run until SIGINT/SIGTERM.
    #[arg(long)]
    pub count: Option<u64>,
}

impl Selecting {
    /// The selector, parsed with `client`'s schemas.
    pub fn parse(&self, client: &Client) -> Result<pool::selector::Selector, Error> {
        Ok(client.selector(&self.selector, &self.namespace)?)
    }

    /// Whether `done` items reach `--count`.
    pub fn enough(&self, done: u64) -> bool {
        self.count.is_some_and(|n| done >= n)
    }
}

/// Runs `main`, printing its error as `name: error` with exit code 1.
pub fn exit(name: &str, result: Result<(), Error>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
