//! Joining the pool manager: the JOIN message (proof of the workflow secret, the app's
//! endpoints and networks, its process memory for same-host copies), the welcome, and the
//! tokens that name this process.

use crate::CallError;
use std::sync::{Arc, Mutex};

use fabric::Endpoint;

use super::link::watch_endpoint_link;
use super::{
    AsyncClient, ClientError, JoinOptions, LANDING_POOL_BYTES, Result, Shared, driver, outbox,
};
use crate::bootstrap::PmInfo;
use crate::proto::{self, AppId, FabricEndpoint, FromPm, ToPm};

/// An app's endpoints as JOIN carries them: the first, the alternates, and the network of
/// each (same order); where same-host consumers may copy its offers from its memory; their
/// NICs.
#[derive(Default)]
pub(crate) struct Endpoints {
    pub(crate) first: Option<FabricEndpoint>,
    pub(crate) alternates: Vec<FabricEndpoint>,
    pub(crate) networks: Vec<Option<crate::Subnet>>,
    pub(crate) memory: Option<proto::ProcessMemory>,
    pub(crate) nics: proto::Nics,
    /// The GFS directory, where the app has one.
    pub(crate) gfs: Option<String>,
}

/// The JOIN message: identity (component, index, job), host, process token (a fresh one
/// when `isolated`), endpoints (the first, and those on other networks), role; its proof
/// is left empty for the protocol's core to make from the PM's challenge
/// ([`pool_core::client::ClientCore::connect`]).
pub(crate) fn join_message(
    info: &PmInfo,
    (component, index, job): (&str, i64, &str),
    endpoints: Endpoints,
    credential: Option<Vec<u8>>,
    isolated: bool,
    role: proto::Role,
) -> proto::Join {
    let Endpoints {
        first: endpoint,
        alternates,
        networks,
        memory,
        nics,
        gfs,
    } = endpoints;
    proto::Join {
        workflow: info.workflow.clone(),
        component: component.into(),
        index,
        host: inventory::local_hostname(),
        process: process_token(isolated),
        job: job.into(),
        endpoint,
        alternates,
        networks,
        memory,
        credential,
        nics,
        gfs,
        role,
        proof: Vec::new(),
        reclaim: None,
        member: None,
    }
}

/// The JOIN of an app without fabric endpoints or credential (a load generator, a protocol
/// test) answering the PM's challenge `nonce` with the workflow secret of `info`.
pub fn bare_join(info: &PmInfo, component: &str, index: i64, nonce: &[u8; 32]) -> ToPm {
    let mut join = join_message(
        info,
        (component, index, ""),
        Endpoints::default(),
        None,
        false,
        proto::Role::App,
    );
    join.proof = crate::auth::prove(&info.secret, nonce, &info.workflow, component, index);
    ToPm::Join(Box::new(join))
}

/// The answer to a JOIN: app id and PM instance.
///
/// # Errors
/// [`CallError::Refused`](crate::CallError::Refused) with the PM's reason; [`CallError::Protocol`](crate::CallError::Protocol) for any other
/// message.
pub fn welcome(msg: FromPm) -> Result<(AppId, u64)> {
    match msg {
        FromPm::Welcome { app, pool, .. } => Ok((app, pool)),
        FromPm::Refused { op, why, .. } => Err(ClientError::Call(CallError::Refused { op, why })),
        other => Err(ClientError::Call(CallError::Protocol(format!(
            "{other:?} instead of a welcome"
        )))),
    }
}

/// A random token naming this process (stable for its lifetime), or with `fresh` a new one
/// for an isolated client.
fn process_token(fresh: bool) -> u64 {
    if fresh {
        random_token()
    } else {
        *static_token()
    }
}

/// Random bytes, or (without randomness) the pid, which still separates processes of one
/// host.
fn random_token() -> u64 {
    let mut b = [0u8; 8];
    match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => u64::from(std::process::id()),
    }
}

/// The process's token, at an address that stays valid for the process's lifetime.
fn static_token() -> &'static u64 {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    TOKEN.get_or_init(random_token)
}

/// Where same-host consumers may copy this process's offers from its memory: its pid and
/// the process token, which a reader checks before trusting the pid.
fn process_memory() -> proto::ProcessMemory {
    let token = static_token();
    proto::ProcessMemory {
        pid: std::process::id(),
        token: *token,
        token_addr: std::ptr::from_ref(token) as u64,
    }
}

/// How a client joining with `opts` reaches its managers.
fn route(opts: &JoinOptions) -> driver::Route {
    driver::Route {
        exclude: opts.exclude_interfaces.clone(),
        rings: opts.rings,
    }
}

/// How a peer reaches `e`: its provider and address.
fn fabric_endpoint(e: &Endpoint) -> FabricEndpoint {
    FabricEndpoint {
        provider: e.info().provider.clone(),
        address: e.address().clone(),
    }
}

/// The network (address and prefix) of the interface `e` is bound to, when this host knows
/// it.
fn network_of(e: &Endpoint) -> Option<crate::Subnet> {
    inventory::netif::network_with(e.address().ip()?)
}

impl AsyncClient {
    /// Connects to the PM named by `info` (trying its endpoints in order), answers the
    /// challenge with a proof of the workflow secret and joins.
    ///
    /// Must run inside a tokio runtime (the driver tasks are spawned on it).
    ///
    /// # Errors
    /// [`ClientError::Unreachable`] when no endpoint accepts a connection (with
    /// [`JoinOptions::reclaim`], none within its timeout either, looking where it says);
    /// [`CallError::Refused`](crate::CallError::Refused) with `BadProof`, `WrongWorkflow` or `NotTheUser`,
    /// or `Grace` when the PM's grace period after a takeover outlasts the join timeout;
    /// timeouts and connection errors.
    pub async fn join(info: &PmInfo, opts: JoinOptions) -> Result<AsyncClient> {
        let schemas = match opts.schemas.clone() {
            Some(s) => s,
            None => Arc::new(crate::schema::from_env()?),
        };
        // A GFS directory that cannot work is said before joining.
        let gfs = opts
            .gfs
            .as_ref()
            .map(|o| super::gfs::Gfs::new(o).map(Arc::new))
            .transpose()?;
        let endpoint = opts.endpoint.as_ref().map(fabric_endpoint);
        let alternates = opts.alternates.iter().map(fabric_endpoint).collect();
        let networks = opts
            .endpoint
            .iter()
            .chain(&opts.alternates)
            .map(network_of)
            .collect();
        // Offers are readable from this process's memory where their regions are
        // addressed by virtual address on every endpoint.
        let cross_memory = opts.cross_memory
            && opts
                .endpoint
                .iter()
                .chain(&opts.alternates)
                .all(Endpoint::virtual_addresses)
            && opts.endpoint.is_some();
        let memory = cross_memory.then(process_memory);
        let nics = proto::Nics {
            names: opts
                .endpoint
                .iter()
                .chain(&opts.alternates)
                .map(|e| e.info().domain.clone())
                .collect(),
            reason: opts.nic_reason.clone(),
        };
        let endpoints = Endpoints {
            first: endpoint,
            alternates,
            networks,
            memory,
            nics,
            gfs: gfs
                .as_ref()
                .and_then(|g| g.root().to_str())
                .map(String::from),
        };
        let join = join_message(
            info,
            (&opts.component, opts.index, &opts.job),
            endpoints,
            opts.credential.clone(),
            opts.isolated,
            proto::Role::App,
        );
        let (connected, (mut core, app, pool), info) = first_join(info, &join, &opts).await?;
        let route = route(&opts);
        let rejoin = opts
            .reclaim
            .map(|options| super::reclaim::Rejoin { options, join });
        core.set_schemas(schemas.clone());
        core.set_inline_max(opts.inline_max);
        core.set_gfs(pool_core::client::GfsUse {
            dir: gfs.is_some(),
            by_default: gfs.as_ref().is_some_and(|g| g.offers()),
        });
        // Shard 0's connection is open; another shard's is opened when first needed.
        let shards = info.shards().count();
        let outs = std::iter::once(outbox::Outbox::new(connected.writer))
            .chain((1..shards).map(|_| outbox::Outbox::pending()))
            .collect();
        let shared = Arc::new(Shared {
            app,
            pool: pool.into(),
            rejoin,
            info: Mutex::new(info),
            core: Mutex::new(core),
            deadlines: super::shared::Deadlines::new(),
            crew: super::transport::crew::Crew::new(tokio::runtime::Handle::current()),
            outs,
            tasks: Mutex::default(),
            runtime: tokio::runtime::Handle::current(),
            endpoint: opts.endpoint.map(|e| reads_within(e, opts.timeout)),
            alternates: opts
                .alternates
                .into_iter()
                .map(|e| reads_within(e, opts.timeout))
                .collect(),
            peers: Mutex::default(),
            timeout: opts.timeout,
            route,
            schemas,
            landing: Arc::new(fabric::RegionPool::with_limit(LANDING_POOL_BYTES)),
            cross_memory: std::sync::atomic::AtomicBool::new(cross_memory),
            verified: Mutex::default(),
            views: fabric::cma::Views::new(super::VIEWS_BYTES),
            gfs,
            inlets: Mutex::default(),
            drains: super::drains::Drains::new(shards),
            watches: Mutex::default(),
            short_reads: Default::default(),
        });
        shared.keep(&super::reclaim::spawn(
            shared.clone(),
            0,
            Some(connected.reader),
        ));
        shared.keep(&tokio::spawn(shared.clone().timer()));
        shared.keep(&tokio::spawn(super::transport::host::sweep_views(
            shared.clone(),
        )));
        if let Some(watch) = watch_endpoint_link(&shared) {
            shared.keep(&watch);
        }
        Ok(AsyncClient { shared })
    }
}

/// `ep`, its reads failing past the client's `timeout` and the time their bytes take at
/// the slowest rate still alive ([`fabric::Timeouts`]): a read has no other clock.
fn reads_within(mut ep: fabric::Endpoint, timeout: std::time::Duration) -> fabric::Endpoint {
    ep.set_timeouts(fabric::Timeouts {
        base: timeout,
        ..fabric::Timeouts::default()
    });
    ep
}

/// Connects to the PM of `info` and joins with `join`: a PM in its grace period (it took
/// over from one that is gone) is asked again until the period ends, and, when the client
/// rides out the loss of its PM, a PM that is not there or that dies during the handshake
/// is looked for again (the one that takes over) until its reclaim timeout; each within
/// `opts.timeout` of the first try.
/// The connection, the joined core with the app's id and the PM's instance, and the PM
/// info joined.
///
/// # Errors
/// As [`AsyncClient::join`].
async fn first_join(
    info: &PmInfo,
    join: &proto::Join,
    opts: &JoinOptions,
) -> Result<(driver::Connected, (super::Core, AppId, u64), PmInfo)> {
    let started = std::time::Instant::now();
    let mut info = info.clone();
    let mut pause = std::time::Duration::from_millis(20);
    loop {
        let tried = async {
            let mut c = driver::connect(&info.endpoints, opts.timeout, &route(opts)).await?;
            let joined = driver::handshake(&mut c, join.clone(), &info, opts.timeout).await?;
            Ok((c, joined))
        };
        let e = match tried.await {
            Ok((c, joined)) => return Ok((c, joined, info)),
            Err(e) => e,
        };
        let again = match &e {
            ClientError::Call(CallError::Refused {
                why: proto::Refusal::Grace,
                ..
            }) => started.elapsed() < opts.timeout,
            // Nobody there, or the PM died during the handshake.
            ClientError::Unreachable(_)
            | ClientError::Io(_)
            | ClientError::Call(CallError::Closed) => opts
                .reclaim
                .as_ref()
                .is_some_and(|r| started.elapsed() < r.timeout.min(opts.timeout)),
            _ => false,
        };
        if !again {
            return Err(e);
        }
        tracing::debug!("pool client: joining: {e}; trying again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(250));
        let find = opts.reclaim.as_ref().and_then(|r| r.find.as_ref());
        if let Some(again) = super::reclaim::found(find).await {
            info = again;
        }
    }
}
