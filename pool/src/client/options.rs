//! How an application joins: [`JoinOptions`] (identity, fabric endpoints, credential,
//! timeouts, small-CDO and waiting policies) and their defaults.

use std::sync::Arc;
use std::time::Duration;

use fabric::Endpoint;

use super::{ClientError, Result};
use crate::schema::Schemas;

/// Most endpoints on other networks a client opens.
const MAX_ALTERNATES: usize = 4;

/// How to join: identity, data endpoint, credential, timeout.
pub struct JoinOptions {
    /// Component name (`MSTRO_COMPONENT_NAME` in Maestro).
    pub component: String,
    /// Component index (the rank, usually).
    pub index: i64,
    /// The fabric endpoint data moves over; `None`: no RMA provider, data by stream.
    pub endpoint: Option<Endpoint>,
    /// Endpoints on the app's other networks (same provider, best first): transfers fall
    /// back to them when the first cannot reach a peer or its link is down.
    pub alternates: Vec<Endpoint>,
    /// A PMIx credential to show the PM, where the PMIx host issues them.
    pub credential: Option<Vec<u8>>,
    /// The job this app runs in, as its launcher names it (the PMIx namespace), shown in
    /// the pool's views; empty: none.
    pub job: String,
    /// How long each operation waits for the PM (and a demand for its data).
    pub timeout: Duration,
    /// Present this client as a process of its own (see [`JoinOptions::isolated`]).
    pub isolated: bool,
    /// The attribute schemas `seal` checks against; `None`: [`crate::schema::from_env`].
    pub schemas: Option<Arc<Schemas>>,
    /// Copy same-host offers straight from their providers' memory, and let same-host
    /// consumers copy this app's offers from its memory ([`fabric::cma`]; on by default,
    /// `MSTRO_OFI_CMA=off` where the options come from the environment). Needs endpoints
    /// whose regions are addressed by virtual address (shared memory).
    pub cross_memory: bool,
    /// How long a blocking call ([`super::Client`]) polls for its answer before its thread sleeps
    /// (default [`DEFAULT_WAIT_SPIN`]; zero: sleep at once). Over shared-memory rings the
    /// polling thread reads the PM's answer off the ring itself meanwhile. While RMA reads
    /// of at most 256 KiB are in flight it polls longer, up to 10 ms, since their reports
    /// would have to wake it (see [`super::Client::block_on`]).
    pub wait_spin: Duration,
    /// Offers of at most this many bytes carry their bytes to the PM, which hands them to
    /// consumers with their tickets: one round trip, no provider progress, no fabric
    /// (default [`DEFAULT_INLINE_MAX`]; 0: never; `MSTRO_INLINE_MAX` where the options
    /// come from the environment).
    pub inline_max: usize,
    /// Why the endpoint's NIC was chosen (shown to the pool's observers; see
    /// `maestro pool fabric`).
    pub nic_reason: Option<String>,
    /// Interfaces the pool keeps off ([`fabric::Config::exclude`]; the `fabric*` builders
    /// take them from the fabric settings): the PM's control endpoints on their networks
    /// are not tried, since the PM relays streamed bytes over the control connection.
    pub exclude_interfaces: Vec<String>,
    /// The global file system the app offers through or reads from (`None`: neither).
    pub gfs: Option<super::GfsOptions>,
    /// On the PM's host, move the control connection to shared-memory rings when the PM
    /// grants them: no system call per frame while both sides are awake (default on;
    /// `MSTRO_POOL_RINGS=off` where the options come from the environment; the PM's
    /// [`crate::PmConfig::max_rings`] bounds them).
    pub rings: bool,
    /// Ride out the loss of the pool manager: wait for one to take over, rejoin it and
    /// replay what the app holds ([`super::ReclaimOptions`]). `None` (the default): the
    /// connection's end fails every waiting call at once.
    pub reclaim: Option<super::ReclaimOptions>,
}

/// Default of [`JoinOptions::inline_max`]: 4 KiB (see docs/benchmarks-journal.md: up to this size a
/// demand served from the ticket beats any transfer from the provider).
pub use pool_core::client::DEFAULT_INLINE_MAX;

/// Default of [`JoinOptions::wait_spin`]: 50 µs. The PM's answer to a control message
/// comes back in about 15 µs on one node, while waking a sleeping thread to hand it over
/// costs about 20 µs more (measured: a bare round trip 34-36 µs sleeping, 13 µs polling;
/// see docs/benchmarks-journal.md), so a caller that polls briefly gets its answer in half the time, and
/// one whose answer takes longer (a large transfer) sleeps after at most this much CPU.
pub const DEFAULT_WAIT_SPIN: Duration = Duration::from_micros(50);

impl JoinOptions {
    /// Joins as `component`/`index` without an endpoint or credential, with a 60 s timeout.
    pub fn new(component: &str, index: i64) -> JoinOptions {
        JoinOptions {
            component: component.to_string(),
            index,
            endpoint: None,
            alternates: Vec::new(),
            credential: None,
            job: String::new(),
            timeout: Duration::from_secs(60),
            isolated: false,
            schemas: None,
            cross_memory: true,
            wait_spin: DEFAULT_WAIT_SPIN,
            exclude_interfaces: Vec::new(),
            inline_max: DEFAULT_INLINE_MAX,
            nic_reason: None,
            gfs: None,
            reclaim: None,
            rings: true,
        }
    }

    /// Rides out the loss of the pool manager as `options` say (see
    /// [`JoinOptions::reclaim`]'s field); a zero timeout turns it off.
    pub fn reclaim(mut self, options: super::ReclaimOptions) -> JoinOptions {
        self.reclaim = (!options.timeout.is_zero()).then_some(options);
        self
    }

    /// Uses the global file system `gfs` (see [`super::GfsOptions`]).
    pub fn gfs(mut self, gfs: super::GfsOptions) -> JoinOptions {
        self.gfs = Some(gfs);
        self
    }

    /// Sets [`JoinOptions::inline_max`].
    pub fn inline_max(mut self, bytes: usize) -> JoinOptions {
        self.inline_max = bytes;
        self
    }

    /// Sets [`JoinOptions::rings`].
    pub fn rings(mut self, on: bool) -> JoinOptions {
        self.rings = on;
        self
    }

    /// Sets [`JoinOptions::wait_spin`].
    pub fn wait_spin(mut self, spin: Duration) -> JoinOptions {
        self.wait_spin = spin;
        self
    }

    /// Checks attributes against `schemas` instead of those the environment names.
    pub fn schemas(mut self, schemas: Schemas) -> JoinOptions {
        self.schemas = Some(Arc::new(schemas));
        self
    }

    /// Presents this client to the PM as a process of its own: no same-process hand-over,
    /// so what it demands is its own (writable) copy and what it offers is read by RMA or
    /// stream even from clients in this process.
    pub fn isolated(mut self) -> JoinOptions {
        self.isolated = true;
        self
    }

    /// Moves data over `endpoint`.
    pub fn endpoint(mut self, endpoint: Endpoint) -> JoinOptions {
        self.endpoint = Some(endpoint);
        self
    }

    /// Moves data over the best libfabric endpoint for `scope` (shm first when every peer
    /// shares this node), chosen as `fabric::select` ranks them under the user's settings
    /// (`MSTRO_OFI_PROVIDER`/`FI_PROVIDER`, `MSTRO_OFI_IFACE`, `MSTRO_OFI_PROGRESS`).
    ///
    /// # Errors
    /// [`ClientError::NoFabric`] for bad settings or when no provider fits;
    /// [`ClientError::Fabric`] when the endpoint does not open.
    pub fn fabric(self, scope: fabric::Scope) -> Result<JoinOptions> {
        self.fabric_on(scope, &[])
    }

    /// As [`JoinOptions::fabric`] on the NIC chosen for this process: `nic` holds its name
    /// and aliases (as the inventory knows them), whose offers rank first; empty: no
    /// preference. `MSTRO_OFI_IFACE` still overrides.
    ///
    /// # Errors
    /// As [`JoinOptions::fabric`].
    pub fn fabric_on(self, scope: fabric::Scope, nic: &[&str]) -> Result<JoinOptions> {
        let cfg = fabric::Config::from_env().map_err(|e| ClientError::NoFabric(e.to_string()))?;
        self.open_fabric(&cfg, scope, nic)
    }

    /// As [`JoinOptions::fabric`] with explicit settings instead of the environment's.
    ///
    /// # Errors
    /// As [`JoinOptions::fabric`].
    pub fn fabric_with(self, cfg: &fabric::Config, scope: fabric::Scope) -> Result<JoinOptions> {
        self.open_fabric(cfg, scope, &[])
    }

    fn open_fabric(
        self,
        cfg: &fabric::Config,
        scope: fabric::Scope,
        nic: &[&str],
    ) -> Result<JoinOptions> {
        let offers = fabric::discover()?;
        let best = fabric::select(&offers, cfg, scope, nic)
            .map_err(|e| ClientError::NoFabric(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::NoFabric("libfabric offers no usable provider".into()))?;
        let endpoint = Endpoint::open_with(&best, cfg.progress)?;
        let describe = |e: &Endpoint| {
            format!(
                "{} on {} ({})",
                e.info().provider,
                e.info().domain,
                e.address()
                    .ip()
                    .map_or_else(|| "no IP address".to_string(), |ip| ip.to_string())
            )
        };
        tracing::debug!("fabric endpoint: {}", describe(&endpoint));
        // The same provider on the other interfaces (every one, whatever MSTRO_OFI_IFACE
        // chose first), loopback left out: the networks transfers may fall back to.
        let others = fabric::Config {
            iface: None,
            ..cfg.clone()
        };
        let mut alternates = Vec::new();
        let mut seen = vec![best.domain.clone()];
        for o in fabric::select(&offers, &others, scope, &[]).unwrap_or_default() {
            if o.provider != best.provider || o.domain == "lo" || seen.contains(&o.domain) {
                continue;
            }
            seen.push(o.domain.clone());
            match Endpoint::open_with(&o, cfg.progress) {
                Ok(e) if alternates.len() < MAX_ALTERNATES => {
                    tracing::debug!("fabric endpoint (another network): {}", describe(&e));
                    alternates.push(e);
                }
                Ok(_) => break,
                Err(e) => tracing::debug!("no endpoint on {}: {e}", o.domain),
            }
        }
        let mut opts = self.endpoint(endpoint);
        opts.alternates = alternates;
        opts.exclude_interfaces.clone_from(&cfg.exclude);
        opts.cross_memory = !cfg.no_cross_memory;
        Ok(opts)
    }

    /// Copies same-host offers from their providers' memory and lets same-host consumers
    /// copy this app's (on by default; see [`JoinOptions::cross_memory`]'s field).
    pub fn cross_memory(mut self, on: bool) -> JoinOptions {
        self.cross_memory = on;
        self
    }

    /// Shows `credential` (from `PMIx_Get_credential`) to the PM.
    pub fn credential(mut self, credential: Vec<u8>) -> JoinOptions {
        self.credential = Some(credential);
        self
    }

    /// Names the job this app runs in (the PMIx namespace) for the pool's views.
    pub fn job(mut self, job: &str) -> JoinOptions {
        self.job = job.to_string();
        self
    }

    /// Waits at most `timeout` per operation.
    pub fn timeout(mut self, timeout: Duration) -> JoinOptions {
        self.timeout = timeout;
        self
    }
}
