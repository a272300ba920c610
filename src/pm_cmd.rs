//! `maestro pm`: a pool manager as its own process. It gives its PM info as
//! `MSTRO_POOL_MANAGER_INFO;<info>;` (as Maestro Core does) and serves until SIGINT or
//! SIGTERM. The info holds the workflow secret, so it goes only where the user says:
//! `--info-file` (created exclusively with mode 0600, or a file of the user's own that is
//! empty or holds a PM info, made 0600; never through a link, never another user's file
//! or a FIFO, never a file holding anything else), standard output when
//! that is a terminal, or standard output whatever it is with `--print-info` (a regular
//! file is then made private first). A pipe or a job's log gets nothing by default.
//! Started under a PMIx host (`maestro run -n 1 maestro pm`), it also publishes the info
//! for other jobs of the workflow (`pool::bootstrap::announce`; they join with
//! `pool::bootstrap::lookup`); started alone, it publishes it in the node's directory of
//! publications, where `maestro pool --workflow` and the jobs of `maestro run` on the node
//! look names up. Either way a name another running PM holds is refused.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::atomic::{AtomicBool, Ordering};

use pool::bootstrap::{self, PM_INFO_ENV, new_secret};
use pool::pmix_events;
use pool::{PmConfig, PoolManager, ShardedPool};

mod takeover;
use takeover::{previous_info, stand_by, take_shard};

/// How long publishing the PM info through PMIx may take.
const ANNOUNCE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Options of `maestro pm` (its command line).
#[derive(Clone, Debug, clap::Args)]
pub struct PmOptions {
    /// The workflow served.
    #[arg(long, env = "MSTRO_WORKFLOW_NAME", default_value = "workflow", value_parser = pool_tools::cli::parse_workflow)]
    pub workflow: String,
    /// Address to listen on (repeatable; port 0 picks one). Without it the PM listens
    /// where its workflow needs it: the addresses of the NIC chosen for this process
    /// (MSTRO_OFI_IFACE, or the inventory's choice) and loopback, besides its Unix socket.
    /// 0.0.0.0:0 listens on every interface and advertises each one that is up.
    #[arg(long)]
    pub listen: Vec<SocketAddr>,
    /// Write the PM info to this file (mode 0600; removed at exit). A file of another
    /// user, a link, a FIFO or a file holding anything but a PM info at that path is
    /// refused and left as it is.
    #[arg(long)]
    pub info_file: Option<PathBuf>,
    /// Print the PM info (it holds the workflow secret) on standard output even when that
    /// is not a terminal (a pipe, a job's log); without it, only a terminal gets it.
    #[arg(long)]
    pub print_info: bool,
    /// Also serve on a Unix socket for processes on this host (see
    /// `PmConfig::unix_socket`); `--no-unix-socket` serves over TCP only, for processes
    /// that share the file system but should reach the PM over the network.
    #[arg(
        long = "no-unix-socket",
        action = clap::ArgAction::SetFalse,
        help = "Serve over TCP only (no Unix socket for processes on this host): for \
                processes that share the file system but should reach the PM over the network"
    )]
    pub unix_socket: bool,
    /// Seconds a new connection has to join before it is closed.
    #[arg(long, default_value = "10", value_parser = pool_tools::cli::parse_timeout, allow_negative_numbers = true)]
    pub join_timeout: std::time::Duration,
    /// Most bytes of messages read from applications and not yet handled (e.g. 64M);
    /// readers wait for room instead of queuing more.
    #[arg(long, default_value = "64M", value_parser = pool_tools::cli::parse_size, allow_negative_numbers = true)]
    pub max_ingress: usize,
    /// Most bytes of answers queued for one application that does not read them; past
    /// it the application is disconnected (e.g. 256M).
    #[arg(long, default_value = "256M", value_parser = pool_tools::cli::parse_size, allow_negative_numbers = true)]
    pub max_queued: usize,
    /// Most TCP connections waiting to join; a newcomer past it evicts the oldest waiting
    /// connection of the address with the most waiting.
    #[arg(long, default_value = "1024")]
    pub max_unjoined: usize,
    /// Most TCP connections waiting to join from one address.
    #[arg(long, default_value = "256")]
    pub max_unjoined_per_peer: usize,
    /// Most bytes one application may make the PM hold (its CDOs' names and attributes,
    /// 320 bytes per CDO, its subscriptions), e.g. 256M.
    #[arg(long, default_value = "256M", value_parser = pool_tools::cli::parse_size, allow_negative_numbers = true)]
    pub max_app_bytes: usize,
    /// Most bytes the PM holds for all applications together (their CDOs, subscriptions
    /// and the events waiting for them, and the kept CDOs), e.g. 4G; default: a quarter
    /// of this node's memory.
    #[arg(long, value_parser = pool_tools::cli::parse_size, allow_negative_numbers = true)]
    pub max_bytes: Option<usize>,
    /// Most applications joined at once from one peer (an address over TCP, a process on
    /// the Unix socket).
    #[arg(long, default_value = "1024")]
    pub max_apps_per_peer: usize,
    /// Most bytes of events the PM builds for one connection and holds unsent; past it
    /// the connection is cut off, its app gone (e.g. 4M).
    #[arg(long, default_value = "4M", value_parser = pool_tools::cli::parse_size, allow_negative_numbers = true)]
    pub max_event_bytes: usize,
    /// Most bytes of small CDOs' data the PM holds for all apps together (offers of at most
    /// MSTRO_INLINE_MAX bytes carry them; past this budget offers keep their bytes), e.g.
    /// 64M; 0 turns carrying off.
    #[arg(long, default_value = "64M", value_parser = pool_tools::cli::parse_bytes, allow_negative_numbers = true)]
    pub max_inline_bytes: usize,
    /// The global file system directory every process of the workflow sees: the PM keeps
    /// there the files of GFS offers (MSTRO_TRANSPORT_DEFAULT=GFS) their producers withdraw,
    /// and offers them until their .maestro.core.cdo.lifetime or the workflow ends (files
    /// of CDOs with .maestro.core.cdo.persist move to DIR/maestro-persist-WORKFLOW then).
    /// Without it a producer's withdraw ends its CDO.
    #[arg(long, env = "MSTRO_TRANSPORT_GFS_DIR", value_name = "DIR")]
    pub gfs_dir: Option<PathBuf>,
    /// Offer again, from the start, the CDOs an earlier workflow persisted in DIR
    /// (GFS_DIR/maestro-persist-WORKFLOW, each file with its NAME.maestro.json): they move
    /// into this PM's directory and are kept as the workflow's own (repeatable; needs
    /// --gfs-dir).
    #[arg(long, value_name = "DIR", requires = "gfs_dir")]
    pub adopt: Vec<PathBuf>,
    /// Take over the workflow of a pool manager that is gone (killed, crashed): its
    /// workflow secret from the PM info it left (this node's record of the workflow's
    /// PM, the --info-file, or MSTRO_POOL_MANAGER_INFO), its TCP addresses unless --listen
    /// names others, and a grace period (--grace) in which only its apps join, each taking
    /// back what it held; new apps join after it.
    #[arg(long)]
    pub reclaim: bool,
    /// Stand by for the pool manager of INFO (its --info-file, or its PM info itself),
    /// on another node: watch it as an observer and, when it dies (its connection ends
    /// without the BYE of a PM that stops, and it accepts no connection any more), take
    /// over its workflow with a grace period (--grace) in which its apps rejoin this one
    /// and reclaim what they held. The PM info then goes to --info-file, or to INFO's
    /// file, where the apps look for it again. Exits when the watched PM stops on purpose.
    /// A pool of several shards has a standby per shard (--shard).
    #[arg(long, value_name = "INFO", conflicts_with = "reclaim")]
    pub standby_for: Option<String>,
    /// With --standby-for a pool of several shards: the shard S this standby watches and
    /// takes over (0 to K-1; the other shards serve on). It puts the endpoints of its
    /// manager into the pool's info file in place of the lost one's.
    #[arg(long, value_name = "S", requires = "standby_for")]
    pub shard: Option<usize>,
    /// Seconds of the grace period of --reclaim and --standby-for: the apps of the pool
    /// manager that is gone rejoin and offer again what they hold; new apps wait until it
    /// ends (a standby ends it once every app it saw is back).
    #[arg(long, default_value = "5", value_parser = pool_tools::cli::parse_timeout)]
    pub grace: std::time::Duration,
    /// Most bytes the PM holds for the CDOs it keeps (their names, attributes and file
    /// paths, 320 bytes per CDO), e.g. 256M; past it a withdraw ends its CDO.
    #[arg(long, default_value = "256M", value_parser = pool_tools::cli::parse_size, allow_negative_numbers = true)]
    pub max_kept_bytes: usize,
    /// Most bytes of one CDO's attributes, e.g. 1M.
    #[arg(long, default_value = "1M", value_parser = pool_tools::cli::parse_size, allow_negative_numbers = true)]
    pub max_attributes: usize,
    /// Seconds an operation waits for subscribers' acknowledgements; a subscriber that
    /// misses it loses its subscription.
    #[arg(long, default_value = "10", value_parser = pool_tools::cli::parse_timeout, allow_negative_numbers = true)]
    pub ack_timeout: std::time::Duration,
    /// Most subscriptions one application may hold.
    #[arg(long, default_value = "1024")]
    pub max_subscriptions: usize,
    /// Seconds a transfer may keep an offer its provider withdraws busy before it is
    /// abandoned (transfers from offers nobody withdraws have no deadline).
    #[arg(long, default_value = "120", value_parser = pool_tools::cli::parse_timeout, allow_negative_numbers = true)]
    pub transfer_timeout: std::time::Duration,
    /// Seconds the PM waits for a provider it asked to write an offer to the GFS directory
    /// (for consumers it shares no network with); past it they get the bytes through the
    /// PM's stream.
    #[arg(long, default_value = "30", value_parser = pool_tools::cli::parse_timeout, allow_negative_numbers = true)]
    pub spill_timeout: std::time::Duration,
    /// Seconds the holder of a lease its offer's withdraw revoked has to use it or give it
    /// back; past it the lease no longer holds the withdraw (a lease in use is a transfer:
    /// --transfer-timeout).
    #[arg(long, default_value = "1", value_parser = pool_tools::cli::parse_timeout, allow_negative_numbers = true)]
    pub lease_grace: std::time::Duration,
    /// Most leases one application holds: an offer's ticket sent with its event to a
    /// subscriber, so that its demand needs no round trip to the PM; 0 turns leases off.
    #[arg(long, default_value = "8192")]
    pub max_leases: usize,
    /// Binds CDO names to a component, PREFIX=COMPONENT (repeatable): offers of such
    /// names from other components are refused.
    #[arg(long = "owner", value_name = "PREFIX=COMPONENT")]
    pub owners: Vec<pool::policy::NameOwner>,
    /// A component whose applications may report any fabric change (repeatable); others
    /// report only their own links.
    #[arg(long = "reporter", value_name = "COMPONENT")]
    pub reporters: Vec<String>,
    /// Serve the PM's counters in the OpenMetrics/Prometheus text format at
    /// http://ADDR/metrics (HOST:PORT; :PORT for loopback; 0.0.0.0:PORT for every
    /// interface). Unauthenticated: it shows counts, host and NIC names (no CDO names, no
    /// secret); keep it on loopback or a management network. Rendered at most once a
    /// second however many scrape; at most 64 scrapers connected at once.
    #[arg(long, value_name = "ADDR", value_parser = pool_tools::cli::parse_listen_addr)]
    pub metrics: Option<SocketAddr>,
    /// Pool managers sharing the pool's CDO names (1 to 1024), each the home of its share
    /// of them: one pool with the semantics of one manager and K cores' throughput; the
    /// PM info lists them all. As a job of K ranks (`srun -n K`, `maestro run -n K`) each
    /// rank is one shard, on its node; otherwise they run as threads of this process,
    /// shard s listening on each --listen port + s (port 0: one it picks) and serving
    /// metrics on the --metrics port + s.
    #[arg(long, default_value = "1", value_parser = parse_shards)]
    pub shards: pool::shards::Shards,
    /// The fabric beyond the node: of several offers of a name, a consumer gets the one
    /// fewest hops away. Without it, under a PMIx host that serves a cost matrix
    /// (`maestro run --fabric`), that one.
    #[command(flatten)]
    pub fabric_source: launcher::run::FabricSource,
    /// With --fabric or --discover-fabric: seconds between looks at the fabric again (the
    /// file read, the fabric discovered); a switch link that goes down or up is a fabric
    /// event of the pool and changes which offers a consumer gets. 0: never.
    #[arg(long, value_name = "S", default_value = "2", value_parser = pool_tools::cli::parse_duration, allow_negative_numbers = true)]
    pub fabric_watch: std::time::Duration,
    /// The hops between hosts, from `fabric_source` or the PMIx host (set by [`run`]).
    #[arg(skip)]
    pub distances: Option<pool_core::HostDistances>,
    /// The fabric as `fabric_source` gave it at start (set by [`run`]), watched from there.
    #[arg(skip)]
    pub topology: Option<inventory::switches::Topology>,
}

/// Parses `--shards`.
fn parse_shards(s: &str) -> Result<pool::shards::Shards, String> {
    let k: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of pool managers (1 to 1024)"))?;
    pool::shards::Shards::new(k).map_err(|e| e.to_string())
}

/// `addr` with its port moved up by `by`, unless it picks one (port 0).
fn port_plus(addr: SocketAddr, by: usize) -> std::io::Result<SocketAddr> {
    if addr.port() == 0 {
        return Ok(addr);
    }
    let port = u16::try_from(usize::from(addr.port()) + by).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{addr}: shard {by}'s port would pass 65535"),
        )
    })?;
    Ok(SocketAddr::new(addr.ip(), port))
}

/// Where a PM listens when not told: the addresses of the NIC chosen for this process
/// (`MSTRO_OFI_IFACE`, else the inventory's choice for local rank 0 unless `exclude`
/// names it) and loopback. Without such a NIC (excluded, none found) it listens on each
/// address of every other interface that is up, one socket per address: never on the
/// wildcard, which would take in the excluded interfaces too.
fn default_listen(exclude: &[String]) -> Vec<SocketAddr> {
    let nic: Vec<String> = match std::env::var("MSTRO_OFI_IFACE") {
        Ok(iface) if !iface.trim().is_empty() => vec![iface.trim().to_string()],
        _ => match inventory::nic_for_this_process(0) {
            Ok((_, choice)) if exclude.contains(&choice.nic) => {
                tracing::info!(
                    "maestro pm: the NIC chosen, {}, is excluded (MSTRO_OFI_IFACE_EXCLUDE); listening on the other interfaces' addresses",
                    choice.nic
                );
                Vec::new()
            }
            Ok((inv, choice)) => {
                let mut names = vec![choice.nic.clone()];
                if let Some(n) = inv.nic(&choice.nic) {
                    names.extend(n.aliases.iter().cloned());
                }
                names
            }
            Err(e) => {
                tracing::info!(
                    "maestro pm: no NIC chosen ({e}); listening on every interface's addresses"
                );
                Vec::new()
            }
        },
    };
    let names: Vec<String> = if nic.is_empty() {
        let mut up: Vec<String> = inventory::netif::all_addresses()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.up && !exclude.contains(&a.interface))
            .map(|a| a.interface)
            .collect();
        up.dedup();
        up
    } else {
        nic
    };
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut listen: Vec<SocketAddr> = inventory::netif::addresses_of(&names)
        .into_iter()
        .filter(|ip| !ip.is_loopback())
        .map(|ip| SocketAddr::new(ip, 0))
        .collect();
    listen.dedup();
    listen.push(SocketAddr::from(([127, 0, 0, 1], 0)));
    listen
}

/// Where standard output may carry the secret: a terminal always; anything with
/// `--print-info`, a regular file others can read being made private (0600) first, if
/// this user owns it.
///
/// # Errors
/// Why not (not a terminal and not asked; a file of another user's, or a mode that
/// cannot be changed).
fn private_stdout(asked: bool) -> Result<(), String> {
    use std::io::IsTerminal;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let out = std::io::stdout();
    if out.is_terminal() {
        return Ok(());
    }
    if !asked {
        return Err("standard output is not a terminal (a pipe or a log others may read); give --print-info to print it there anyway".into());
    }
    let file = out
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .map_err(|e| format!("standard output cannot be examined ({e})"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("standard output cannot be examined ({e})"))?;
    if !meta.file_type().is_file() || meta.mode() & 0o077 == 0 {
        return Ok(());
    }
    if meta.uid() != safefs::euid() {
        return Err(format!(
            "standard output is a file of uid {} that others may read",
            meta.uid()
        ));
    }
    file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o600))
        .map_err(|e| format!("standard output is a file others may read and stays so ({e})"))?;
    eprintln!(
        "maestro pm: standard output is a file: made it private (0600), it holds the workflow secret"
    );
    Ok(())
}

/// Runs the pool manager until SIGINT/SIGTERM.
///
/// # Errors
/// Binding, randomness, file or signal-handler errors.
pub fn run(opts: &PmOptions) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    // As in `maestro run`: libraries may have installed handlers; ours decide.
    for sig in [SIGINT, SIGTERM] {
        launcher::process::default_action(sig);
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let client = pmix_client();
    let (distances, topology) = distances(opts, client.as_ref())?;
    let with_distances = PmOptions {
        distances,
        topology,
        ..opts.clone()
    };
    let opts = &with_distances;
    // In a job whose ranks are the shards, rank 0 alone tells the pool's info.
    let tells = client.as_ref().is_none_or(|c| c.rank() == 0) || opts.shards.count() == 1;
    // Even a PM killed with SIGKILL leaves no info file, socket directory or kept files
    // behind.
    let _janitor = launcher::janitor::Janitor::start(&launcher::janitor::JanitorArgs {
        info_file: info_file(opts).filter(|_| tells),
        gfs_dir: opts.gfs_dir.clone(),
        // Its kept CDOs outlive it: the next PM of the workflow adopts them.
        kept_for_taker: true,
        ..Default::default()
    });
    // A standby of one shard of a pool of several: the pool's info it last saw, and the shard.
    let (previous, expect, shard_of) = match &opts.standby_for {
        Some(watched) => match stand_by(watched, opts.shard, &mut signals)? {
            (pool::standby::Watched::Gone { info, apps }, pool) => {
                let shard_of = pool.filter(|p| p.shards().count() > 1).zip(opts.shard);
                (Some(info), Some(apps), shard_of)
            }
            (pool::standby::Watched::Stopped | pool::standby::Watched::Interrupted, _) => {
                return Ok(());
            }
        },
        None if opts.reclaim => (Some(previous_info(opts)?), None, None),
        None => (None, None, None),
    };
    let serving = match (&shard_of, &previous) {
        (Some((pool, shard)), Some(previous)) => take_shard(opts, previous, expect, pool, *shard)?,
        _ => start(opts, previous.as_ref(), expect, client.as_ref())?,
    };
    let Some(info) = serving.info().cloned() else {
        // A rank of a job of shards other than 0: rank 0 tells the pool's PM info.
        let sig = serve(opts, &serving, client.as_ref(), &mut signals);
        tracing::info!("{sig}: stopping this shard's pool manager");
        drop(client);
        return serving
            .stop()
            .map_err(|e| std::io::Error::other(format!("the pool manager stopped, but {e}")));
    };
    // Left behind if this PM is killed: `maestro pm --reclaim` takes over from it (a
    // pool of one manager).
    let takeover =
        launcher::rundir::takeover_file(&info.workflow).map_err(safefs::Error::into_io)?;
    let _record = match info.write_file(&takeover) {
        _ if shard_of.is_some() => None,
        Ok(held) => Some(held),
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::WouldBlock {
                format!(
                    "another pool manager of workflow {:?} runs on this node",
                    info.workflow
                )
            } else {
                e.to_string()
            };
            eprintln!(
                "maestro pm: {}: {why}; `maestro pm --reclaim` cannot take over from this one",
                takeover.display()
            );
            None
        }
    };
    if previous.is_some() {
        eprintln!(
            "maestro pm: taking over workflow {:?}: its apps reclaim what they held for at most {:.1} s (--grace)",
            info.workflow,
            opts.grace.as_secs_f64()
        );
    }
    let info_file = info_file(opts);
    let in_file = |e: std::io::Error, path: &std::path::Path| {
        std::io::Error::new(e.kind(), format!("--info-file {}: {e}", path.display()))
    };
    let (info, _held) = match (&info_file, &shard_of) {
        // The other shards' managers may run on, one of them holding the file.
        (Some(path), Some((_, shard))) => {
            let endpoints = info.shard(*shard).unwrap_or_default().to_vec();
            let (info, held) = bootstrap::PmInfo::put_shard_in_file(path, *shard, endpoints, &info)
                .map_err(|e| in_file(e, path))?;
            (info, Some(held))
        }
        (Some(path), None) => {
            let held = info.write_file(path).map_err(|e| in_file(e, path))?;
            (info, Some(held))
        }
        (None, _) => (info, None),
    };
    if let Some(c) = &client {
        match announce(c, &info) {
            // Shard 0's manager may still hold the name: the info file tells the apps.
            Err(e) if shard_of.is_some() => eprintln!("maestro pm: {e}"),
            r => r?,
        }
    }
    // Without a PMIx host, this node's jobs and tools still find it by the workflow's name.
    let _on_node = match &client {
        Some(_) => None,
        None => match NodePublication::publish(&info) {
            Err(e) if shard_of.is_some() => {
                eprintln!("maestro pm: {e}");
                None
            }
            r => Some(r?),
        },
    };
    match private_stdout(opts.print_info) {
        Ok(()) => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{PM_INFO_ENV};{};", info.encode())?;
            out.flush()?;
        }
        // The file has it: nothing to say.
        Err(_) if info_file.is_some() => {}
        Err(why) => eprintln!(
            "maestro pm: the PM info (it holds the workflow secret) is not printed: {why}; or use --info-file"
        ),
    }
    let sig = serve(opts, &serving, client.as_ref(), &mut signals);
    tracing::info!("{sig}: stopping the pool manager");
    if let Some(client) = &client
        && let Err(e) = client.unpublish(
            &[&bootstrap::published_key(&info.workflow)],
            ANNOUNCE_TIMEOUT,
        )
    {
        tracing::debug!("unpublishing the PM info: {e}");
    }
    let ended = serving.stop();
    drop(client);
    // Stopped, not gone: nothing to take over.
    let _ = std::fs::remove_file(&takeover);
    if let Some(path) = &info_file {
        // Still ours: `_held` has kept it open and locked.
        let _ = std::fs::remove_file(path);
    }
    ended.map_err(|e| std::io::Error::other(format!("the pool manager stopped, but {e}")))
}

/// The pool managers this process runs: every shard of the pool (threads of this
/// process; one manager for a pool of one shard), or the shard of its rank in a job
/// whose ranks are the pool's shards.
enum Serving {
    Pool(ShardedPool),
    Rank {
        pm: PoolManager,
        /// The pool's PM info, at rank 0.
        pool: Option<bootstrap::PmInfo>,
    },
}

impl Serving {
    /// The managers, by shard.
    fn managers(&self) -> &[PoolManager] {
        match self {
            Serving::Pool(p) => p.managers(),
            Serving::Rank { pm, .. } => std::slice::from_ref(pm),
        }
    }

    /// The pool's PM info, where this process tells it (not at a rank other than 0 of a
    /// job of shards).
    fn info(&self) -> Option<&bootstrap::PmInfo> {
        match self {
            Serving::Pool(p) => Some(p.info()),
            Serving::Rank { pool, .. } => pool.as_ref(),
        }
    }

    /// Stops the managers.
    fn stop(self) -> Result<(), String> {
        match self {
            Serving::Pool(p) => p.stop(),
            Serving::Rank { pm, .. } => pm.stop(),
        }
    }
}

/// Starts what `opts` asks: with `--shards K` in a job of `K` ranks (`client` tells), this
/// rank's shard; otherwise every shard (one manager without `--shards`) in this process.
///
/// # Errors
/// `--shards` with a takeover, or in a job of another number of ranks than shards; the
/// managers' start errors; the PMIx exchange of a job of shards.
fn start(
    opts: &PmOptions,
    previous: Option<&bootstrap::PmInfo>,
    expect: Option<Vec<(u64, String)>>,
    client: Option<&pmix::Client>,
) -> std::io::Result<Serving> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let count = opts.shards.count();
    if count > 1 && previous.is_some() {
        return Err(invalid("--shards with --reclaim or --standby-for: a sharded pool is taken over shard by shard: start a standby of each shard with --standby-for INFO --shard S".into()));
    }
    let ranks = client.and_then(|c| c.job_size().ok()).unwrap_or(1) as usize;
    if let Some(client) = client.filter(|_| count > 1 && ranks > 1) {
        if ranks != count {
            return Err(invalid(format!(
                "--shards {count} in a job of {ranks} ranks: run {count} ranks (a shard each) or one (every shard in it)"
            )));
        }
        let (pm, pool) = bootstrap::start_shards_of_job(
            client,
            opts.shards,
            |place, first| {
                let mut config = config(opts, None)?;
                config.shard = Some(place);
                if let Some(first) = first {
                    config.workflow.clone_from(&first.workflow);
                    config.secret.clone_from(&first.secret);
                }
                PoolManager::start(config)
            },
            ANNOUNCE_TIMEOUT,
        )
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        eprintln!(
            "maestro pm: shard {} of {count} of workflow {:?} (rank {})",
            client.rank(),
            pm.info().workflow,
            client.rank()
        );
        print_metrics(std::slice::from_ref(&pm), count, client.rank() as usize);
        return Ok(Serving::Rank { pm, pool });
    }
    let mut expect = expect;
    let pool = ShardedPool::start(opts.shards, |place| {
        let mut config = config(opts, previous)?;
        config.expect = expect.take();
        let s = place.index();
        if s > 0 {
            config.listen = (config.listen.iter())
                .map(|a| port_plus(*a, s))
                .collect::<std::io::Result<_>>()?;
            config.metrics = config.metrics.map(|a| port_plus(a, s)).transpose()?;
        }
        Ok(config)
    })?;
    print_metrics(pool.managers(), count, 0);
    Ok(Serving::Pool(pool))
}

/// Says where the managers (shards from `first` of a pool of `count`) serve metrics.
fn print_metrics(managers: &[PoolManager], count: usize, first: usize) {
    for (s, m) in managers.iter().enumerate() {
        match m.metrics_addr() {
            Some(addr) if count > 1 => {
                eprintln!(
                    "maestro pm: metrics of shard {} at http://{addr}/metrics",
                    first + s
                );
            }
            Some(addr) => eprintln!("maestro pm: metrics at http://{addr}/metrics"),
            None => {}
        }
    }
}

/// Serves until a signal: PMIx events (processes lost, links down or up) go to every
/// manager meanwhile. The signal, in words.
fn serve(
    opts: &PmOptions,
    serving: &Serving,
    client: Option<&pmix::Client>,
    signals: &mut signal_hook::iterator::Signals,
) -> String {
    let stop = AtomicBool::new(false);
    let reporters: Vec<_> = serving
        .managers()
        .iter()
        .map(PoolManager::reporter)
        .collect();
    let sig = std::thread::scope(|s| {
        s.spawn(|| watch_fabric(opts, &reporters, &stop));
        if let Some(client) = client {
            s.spawn(|| {
                if let Err(e) = pmix_events::forward(client, &stop, |f| {
                    pmix_events::deliver(&reporters, client, f)
                }) {
                    eprintln!("maestro pm: PMIx events are not forwarded ({e})");
                }
            });
        }
        let sig = signals.forever().next();
        stop.store(true, Ordering::Relaxed);
        sig
    });
    match sig {
        Some(sig) => format!("signal {sig}"),
        None => "the signal handler ended".into(),
    }
}

/// The pool manager's configuration from the command line, with a fresh workflow secret.
///
/// # Errors
/// No randomness for the secret; a malformed fabric setting (`MSTRO_OFI_*`).
fn config(opts: &PmOptions, previous: Option<&bootstrap::PmInfo>) -> std::io::Result<PmConfig> {
    let secret = match previous {
        Some(info) => info.secret.clone(),
        None => new_secret()?,
    };
    let fabric = fabric::Config::from_env()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let listen = match previous {
        _ if !opts.listen.is_empty() => opts.listen.clone(),
        // Where the apps that found it by its line look for it again (on its node).
        Some(info) if opts.reclaim => (info.endpoints.iter())
            .filter_map(|e| match e {
                bootstrap::ControlAddr::Tcp(a) => Some(*a),
                bootstrap::ControlAddr::Unix(_) => None,
            })
            .collect(),
        _ => default_listen(&fabric.exclude),
    };
    let mut config = PmConfig::new(&opts.workflow, &secret, listen);
    config.grace = previous.map(|_| opts.grace);
    config.exclude_interfaces = fabric.exclude;
    config.unix_socket = opts.unix_socket;
    config.join_timeout = opts.join_timeout;
    config.max_ingress = opts.max_ingress;
    config.max_queued = opts.max_queued;
    config.ack_timeout = opts.ack_timeout;
    config.max_unjoined = opts.max_unjoined;
    config.max_unjoined_per_peer = opts.max_unjoined_per_peer;
    config.policy = pool::policy::Policy {
        max_app_bytes: opts.max_app_bytes,
        max_bytes: opts.max_bytes.unwrap_or_else(pool::default_max_bytes),
        max_apps_per_peer: opts.max_apps_per_peer,
        max_event_bytes: opts.max_event_bytes,
        max_inline_bytes: opts.max_inline_bytes,
        max_attribute_bytes: opts.max_attributes,
        max_subscriptions: opts.max_subscriptions,
        transfer_timeout: opts.transfer_timeout,
        spill_timeout: opts.spill_timeout,
        lease_grace: opts.lease_grace,
        max_leases: opts.max_leases,
        owners: opts.owners.clone(),
        reporters: opts.reporters.clone(),
        max_kept_bytes: opts.max_kept_bytes,
    };
    config.metrics = opts.metrics;
    config.gfs_dir = opts.gfs_dir.clone();
    config.adopt = opts.adopt.clone();
    config.distances.clone_from(&opts.distances);
    Ok(config)
}

/// Where the PM info goes: `--info-file`, or a standby's watched info file (where the apps
/// look for the PM again).
fn info_file(opts: &PmOptions) -> Option<PathBuf> {
    opts.info_file.clone().or_else(|| {
        let target = pool::standby::Target::parse(opts.standby_for.as_ref()?).ok()?;
        target.info_file().map(PathBuf::from)
    })
}

/// A standalone PM's entry in the node's directory of publications (what `maestro run`
/// hosts publish through): `maestro pool --workflow` and the jobs of `maestro run` on this
/// node find it by the workflow's name; removed when dropped (or, after a SIGKILL, as
/// stale: its process is gone).
struct NodePublication {
    dir: launcher::publish::NodeDirectory,
    key: String,
    me: pmix::Proc,
}

impl NodePublication {
    /// Publishes `info` under its workflow's name.
    ///
    /// # Errors
    /// Another running PM published the name (`AlreadyExists`, saying what to do); the
    /// directory cannot be used.
    fn publish(info: &pool::bootstrap::PmInfo) -> std::io::Result<NodePublication> {
        let dir = launcher::publish::NodeDirectory::open(
            &launcher::publish::NodeDirectory::default_dir().map_err(safefs::Error::into_io)?,
        )?;
        let me = pmix::Proc::new(format!("maestro.pm.{}", std::process::id()), 0);
        let key = bootstrap::published_key(&info.workflow);
        let published = pmix::Published {
            publisher: me.clone(),
            key: key.clone(),
            value: pmix::Value::String(info.encode()),
        };
        match dir.put(&published) {
            Ok(()) => {
                eprintln!(
                    "maestro pm: workflow {:?} announced to this node's jobs and tools",
                    info.workflow
                );
                Ok(NodePublication { dir, key, me })
            }
            Err(launcher::publish::node::PutError::Duplicate(by)) => Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "workflow {:?} already has a pool manager published on this node (by {}:{}); give this one another --workflow (MSTRO_WORKFLOW_NAME), or stop that one",
                    info.workflow, by.nspace, by.rank
                ),
            )),
            Err(e) => Err(std::io::Error::other(format!(
                "publishing workflow {:?} on this node: {e:?}",
                info.workflow
            ))),
        }
    }
}

impl Drop for NodePublication {
    fn drop(&mut self) {
        self.dir.remove(&self.key, &self.me);
    }
}

/// Announces the PM through `client`, so that other jobs find it by the workflow name.
///
/// # Errors
/// The workflow's name is published by another running pool manager already: this one
/// would be found by nobody looking for it by name.
fn announce(client: &pmix::Client, info: &pool::bootstrap::PmInfo) -> std::io::Result<()> {
    match bootstrap::announce(client, info, ANNOUNCE_TIMEOUT) {
        Ok(bootstrap::Reach::JobBecauseTaken) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "workflow {:?} already has a pool manager published through PMIx; give this one another --workflow (MSTRO_WORKFLOW_NAME), or stop that one",
                info.workflow
            ),
        )),
        Ok(reach) => {
            eprintln!(
                "maestro pm: workflow {:?} announced through PMIx to {reach}",
                info.workflow
            );
            Ok(())
        }
        Err(e) => {
            eprintln!("maestro pm: {e}; use MSTRO_POOL_MANAGER_INFO instead");
            Ok(())
        }
    }
}

/// The hops between the pool's hosts (and the topology, to watch): see
/// [`pool::distances::for_pm`].
///
/// # Errors
/// A fabric given that cannot be read or discovered, or has too many hosts.
fn distances(
    opts: &PmOptions,
    client: Option<&pmix::Client>,
) -> std::io::Result<(
    Option<pool_core::HostDistances>,
    Option<inventory::switches::Topology>,
)> {
    pool::distances::for_pm(opts.fabric_source.source().as_ref(), client).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the fabric beyond the node: {e}"),
        )
    })
}

/// Looks at the fabric of `opts` every `--fabric-watch` until `stop`: each change (switch
/// links down or up, hosts cut off) goes to every manager with the hops now.
fn watch_fabric(opts: &PmOptions, reporters: &[pool::FabricReporter], stop: &AtomicBool) {
    let (Some(source), Some(first)) = (opts.fabric_source.source(), opts.topology.clone()) else {
        return;
    };
    if opts.fabric_watch.is_zero() {
        return;
    }
    let mut watch = inventory::switches::watch::Watch::new(source, first);
    let step = std::time::Duration::from_millis(100).min(opts.fabric_watch);
    let mut waited = std::time::Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(step);
        waited += step;
        if waited < opts.fabric_watch {
            continue;
        }
        waited = std::time::Duration::ZERO;
        let changed = match watch.poll() {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("the fabric beyond the node: looking again failed: {e}");
                continue;
            }
        };
        let distances = match pool::distances::of_topology_with(&changed.topology, &changed.cut_off)
        {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("the fabric beyond the node changed, its hops not used: {e}");
                continue;
            }
        };
        let links: Vec<(String, bool)> = changed
            .links
            .iter()
            .map(|l| (l.link.clone(), l.up))
            .collect();
        for l in &changed.links {
            eprintln!("maestro pm: {l}");
        }
        if !reporters
            .iter()
            .all(|r| r.topology(distances.clone(), links.clone()))
        {
            return;
        }
    }
}

/// This process's PMIx client, when it runs under a PMIx host.
fn pmix_client() -> Option<pmix::Client> {
    match pmix::Client::init() {
        Ok(client) => Some(client),
        Err(pmix::Error::Unreachable { .. }) => None,
        Err(e) => {
            eprintln!("maestro pm: no PMIx ({e}); use MSTRO_POOL_MANAGER_INFO");
            None
        }
    }
}
