//! `maestro bench pm`: control-plane throughput of one pool manager, driven by injector
//! processes (`maestro-bench pm-injector`) that pipeline batches of operations over the wire
//! protocol: producers declare, then seal and offer CDOs in one message each (`SealOffer`;
//! `--batch` per frame); with `--require`,
//! consumers then declare and require every name, the PM tickets each to them and they report
//! the transfer done at once. With `--subscribers K`, K more processes subscribe to OFFER
//! events through a selector that every CDO matches, so the PM evaluates K selectors and
//! sends K events per offer. Only the control plane is measured: offers point at no real
//! memory and no bytes move. Also reports the PM's resident memory per live CDO.

mod inject;

use inject::{Injector, collect};
pub use inject::{InjectorArgs, main};

use std::io::Write;
use std::time::{Duration, Instant};

use pool::bootstrap::{PmInfo, new_secret};
use pool::events::{EventKind, SubscribeOptions, TAKEN_REPORT};
use pool::proto::{FromPm, Op, ToPm};
use pool::schema::Schemas;
use pool::selector::Selector;
use pool::{PmConfig, PoolManager};
use pool_tools::wire::Conn;
use serde::Serialize;

/// Options of `maestro bench pm`.
#[derive(Clone, Debug, clap::Args)]
pub struct PmBench {
    /// Producer injector processes (and as many consumers with --require).
    #[arg(long, default_value_t = 2)]
    pub injectors: usize,
    /// CDOs per producer (1 or more: the memory per live CDO needs some).
    #[arg(long, default_value_t = 200_000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub cdos: usize,
    /// Operations per frame (1 to 100000).
    #[arg(long, default_value_t = 1000, value_parser = parse_batch)]
    pub batch: usize,
    /// Also measure declare + require + ticket + transfer-done.
    #[arg(long)]
    pub require: bool,
    /// Injectors talk to the PM over TCP loopback instead of its Unix socket.
    #[arg(long)]
    pub tcp: bool,
    /// Subscriber processes that receive every offer's event (through a selector).
    #[arg(long, default_value_t = 0)]
    pub subscribers: usize,
    /// Soak after the measurement: R rounds of withdraw+dispose every CDO (and, from the
    /// second round, declare+seal+offer them again), reporting the PM's memory; 0 for none.
    #[arg(long = "soak", value_name = "R", default_value_t = 0)]
    pub soak_rounds: usize,
    /// Idle applications joined before the measurement (from 8 threads of this process),
    /// kept connected through it: the PM's join time and memory per app, and its rates
    /// while it holds them.
    #[arg(long, default_value_t = 0)]
    pub apps: usize,
    /// An observer watches the pool while the producers offer, as `maestro pool ls
    /// --limit 0 --watch 1` and `maestro pool status --watch 1` would: every second (or
    /// back to back when a listing takes longer) the status and a listing of every CDO.
    #[arg(long)]
    pub observer: bool,
    /// Pool managers sharing the pool's names (1 to 1024; see docs/developers/shards.md),
    /// each on a thread of this process: the producers offer each name at its home, and
    /// each shard's CPU time per operation is reported. Producers (and --observer) only.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub shards: usize,
    /// Where the pool managers listen (each shard on a port of its own): an address of
    /// this node the injectors' nodes reach, with --launcher.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
    /// Runs the injectors on other nodes: this command, split at spaces, is put in front
    /// of each injector's command line (`scripts/cluster.sh exec 2`); repeated, the
    /// injectors take the launchers in turn. They talk TCP to --listen, which must not be
    /// loopback.
    #[arg(long, value_name = "CMD")]
    pub launcher: Vec<String>,
}

/// A batch size: 1 to 100,000 operations per frame.
fn parse_batch(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: give 1 to 100000 operations per frame")),
    }
}

/// The command line of `maestro bench pm`.
#[derive(Clone, Debug, clap::Args)]
pub struct PmBenchArgs {
    #[command(flatten)]
    bench: PmBench,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `maestro bench pm`: runs the benchmark and prints the result.
///
/// # Errors
/// As [`PmBench::run`].
pub fn main_bench(args: &PmBenchArgs) -> Result<(), PmBenchError> {
    let b = &args.bench;
    let r = b.run()?;
    if args.json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
        return Ok(());
    }
    println!(
        "{} injectors x {} CDOs, batches of {}: {:.0} declare+seal+offer/s, PM memory {:.0} B per live CDO",
        b.injectors, b.cdos, b.batch, r.offers_per_sec, r.pm_bytes_per_cdo
    );
    for (s, sh) in r.shards.iter().enumerate() {
        println!(
            "  shard {s}: {} CDOs, its manager's CPU {:.3} s, {:.2} us per declare+seal+offer",
            sh.cdos, sh.cpu_seconds, sh.cpu_us_per_op
        );
    }
    if let Some(e) = r.events_per_sec {
        println!(
            "  {e:.0} offer events/s delivered to {} subscribers",
            b.subscribers
        );
    }
    if let Some(q) = r.requires_per_sec {
        println!("  {q:.0} declare+require+ticket+done/s");
    }
    if let Some(a) = &r.apps {
        println!(
            "  {} idle apps joined in {:.2} s (one join: p50 {:.0} us, p99 {:.0} us), {:.0} B per app, connected through the measurement",
            a.apps, a.join_seconds, a.join_p50_us, a.join_p99_us, a.bytes_per_app
        );
    }
    if let Some(o) = &r.observer {
        println!(
            "  an observer meanwhile: {} listings of the pool ({} pages, {} CDOs listed), {} status queries; one listing of all {} CDOs afterwards: {} listed in {:.2} s",
            o.listings,
            o.pages,
            o.cdos_listed,
            o.statuses,
            r.cdos,
            o.idle_cdos_listed,
            o.idle_listing_seconds
        );
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
    Ok(())
}

/// What a soak saw: every operation answered, and the PM's memory across rounds.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    /// Rounds run.
    pub rounds: usize,
    /// CDOs declared, offered, withdrawn and disposed over all rounds.
    pub cdos: usize,
    /// Resident memory of the process running the PM before the first offer, bytes.
    pub rss_start: u64,
    /// Its highest value seen with every CDO of a round live, bytes.
    pub rss_peak: u64,
    /// Its value after each round's withdrawals, bytes.
    pub rss_after_withdraw: Vec<u64>,
    /// withdraw+dispose per second in the last round, all producers together.
    pub withdraws_per_sec: f64,
}

/// The result.
#[derive(Clone, Debug, Serialize)]
pub struct PmReport {
    /// Producer injector processes.
    pub injectors: usize,
    /// Subscriber processes.
    pub subscribers: usize,
    /// Live CDOs offered in total.
    pub cdos: usize,
    /// declare+seal+offer per second, all producers together.
    pub offers_per_sec: f64,
    /// declare+require+ticket+done per second, all consumers together.
    pub requires_per_sec: Option<f64>,
    /// PM resident memory per live offered CDO, bytes.
    pub pm_bytes_per_cdo: f64,
    /// Events delivered per second, all subscribers together (with subscribers).
    pub events_per_sec: Option<f64>,
    /// The soak (with `soak_rounds`).
    pub soak: Option<SoakReport>,
    /// The idle apps (with `apps`).
    pub apps: Option<AppsReport>,
    /// What the observer did (with `observer`).
    pub observer: Option<ObserverReport>,
    /// Each shard's share of the producers' offers (one shard: the PM's).
    pub shards: Vec<ShardReport>,
}

/// One shard's share of the producers' offers (`--shards`; one shard: the PM's).
#[derive(Clone, Debug, Serialize)]
pub struct ShardReport {
    /// The CDOs whose home it is.
    pub cdos: usize,
    /// The CPU time its manager's thread used for them, seconds.
    pub cpu_seconds: f64,
    /// That per declare+seal+offer, microseconds.
    pub cpu_us_per_op: f64,
}

impl ShardReport {
    /// `cdos` offered at a shard whose manager used `cpu`.
    fn of(cdos: usize, cpu: Duration) -> ShardReport {
        let cpu_seconds = cpu.as_secs_f64();
        ShardReport {
            cdos,
            cpu_seconds,
            cpu_us_per_op: cpu_seconds * 1e6 / cdos.max(1) as f64,
        }
    }
}

/// What the observer of `--observer` did while the producers offered.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ObserverReport {
    /// Full listings of the pool.
    pub listings: u64,
    /// Pages asked for.
    pub pages: u64,
    /// CDOs listed, all listings together.
    pub cdos_listed: u64,
    /// Status queries.
    pub statuses: u64,
    /// Seconds one full listing takes once the producers are done (the PM idle, every
    /// CDO live).
    pub idle_listing_seconds: f64,
    /// CDOs that full listing showed (every live one, each once).
    pub idle_cdos_listed: u64,
}

/// Watches the pool of `info` until `stop`: each second (at most) the status and every
/// CDO, page by page.
fn observe(
    info: &PmInfo,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<ObserverReport, PmBenchError> {
    use pool::view::{Ls, Query, View};
    use std::sync::atomic::Ordering;
    let mut o = pool::Observer::connect(info, "bench-observer", TIMEOUT)?;
    let mut r = ObserverReport::default();
    // One listing, page by page, until `stop` (if given) says enough.
    let list = |o: &mut pool::Observer,
                r: &mut ObserverReport,
                stop: Option<&std::sync::atomic::AtomicBool>| {
        let mut after = None;
        loop {
            let View::Cdos(page) = o.query(Query::Ls(Ls {
                selector: None,
                after,
                limit: pool::view::MAX_PAGE,
                attributes: false,
            }))?
            else {
                return Err(PmBenchError::Injector(
                    "the PM answered ls with another view".into(),
                ));
            };
            r.pages += 1;
            r.cdos_listed += page.cdos.len() as u64;
            match page.next {
                Some(n) if !stop.is_some_and(|s| s.load(Ordering::Relaxed)) => after = Some(n),
                _ => return Ok(()),
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let round = Instant::now();
        o.query(Query::Status)?;
        r.statuses += 1;
        list(&mut o, &mut r, Some(stop))?;
        r.listings += 1;
        if let Some(rest) = Duration::from_secs(1).checked_sub(round.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    let idle = Instant::now();
    let mut last = ObserverReport::default();
    list(&mut o, &mut last, None)?;
    r.idle_listing_seconds = idle.elapsed().as_secs_f64();
    r.idle_cdos_listed = last.cdos_listed;
    Ok(r)
}

/// What joining many idle applications cost.
#[derive(Clone, Debug, Serialize)]
pub struct AppsReport {
    /// Applications joined (and connected through the measurement).
    pub apps: usize,
    /// Seconds to join them all, 8 at a time.
    pub join_seconds: f64,
    /// One join (challenge, proof, welcome), median and 99th percentile, microseconds.
    pub join_p50_us: f64,
    /// As above, 99th percentile.
    pub join_p99_us: f64,
    /// Resident memory the PM's process gained per joined app, bytes (the joining
    /// connections of this process included).
    pub bytes_per_app: f64,
}

/// Joins `n` idle apps to `info`'s PM from 8 threads; their connections and what it cost.
fn join_apps(info: &PmInfo, n: usize) -> Result<(Vec<Conn>, AppsReport), PmBenchError> {
    // As the injectors: the first endpoint (the Unix socket, or loopback TCP with --tcp).
    let addr = info
        .endpoints
        .first()
        .ok_or_else(|| PmBenchError::Injector("PM info has no endpoint".into()))?;
    let rss0 = rss_bytes();
    let start = Instant::now();
    let threads = 8.min(n.max(1));
    let joined = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(
                    move || -> Result<(Vec<Conn>, Vec<Duration>), PmBenchError> {
                        let mut conns = Vec::new();
                        let mut times = Vec::new();
                        for i in (t..n).step_by(threads) {
                            let t0 = Instant::now();
                            let mut c = Conn::connect(addr, TIMEOUT)?;
                            c.join(info, "idle", i64::try_from(i).unwrap_or(i64::MAX))?;
                            times.push(t0.elapsed());
                            conns.push(c);
                        }
                        Ok((conns, times))
                    },
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| PmBenchError::Injector("a joining thread panicked".into()))?
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    let join_seconds = start.elapsed().as_secs_f64();
    let (conns, mut times): (Vec<Vec<Conn>>, Vec<Vec<Duration>>) = joined.into_iter().unzip();
    let mut times: Vec<Duration> = times.drain(..).flatten().collect();
    times.sort_unstable();
    let at = |q: f64| {
        times
            .get(((times.len() as f64 * q) as usize).min(times.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    let report = AppsReport {
        apps: n,
        join_seconds,
        join_p50_us: at(0.5),
        join_p99_us: at(0.99),
        bytes_per_app: rss_bytes().saturating_sub(rss0) as f64 / n.max(1) as f64,
    };
    Ok((conns.into_iter().flatten().collect(), report))
}

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum PmBenchError {
    /// Setup or process IO.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// An injector failed.
    #[error("injector: {0}")]
    Injector(String),
    /// Protocol errors.
    #[error(transparent)]
    Client(#[from] pool::ClientError),
}

const TIMEOUT: Duration = Duration::from_secs(120);

fn rss_bytes() -> u64 {
    pool::resident_bytes().unwrap_or(0)
}

impl PmBench {
    /// A manager's configuration: listening on `--listen` (its port 0 when shards
    /// share the address) and, unless `--tcp` or `--launcher`, on its Unix socket.
    fn config(&self, secret: &[u8]) -> PmConfig {
        let mut listen = self.listen;
        if self.shards > 1 {
            listen.set_port(0);
        }
        let mut config = PmConfig::new("bench", secret, vec![listen]);
        config.unix_socket = !self.tcp && self.launcher.is_empty();
        config
    }

    /// Refuses launchers the injectors could not reach the managers from.
    ///
    /// # Errors
    /// An empty launcher, or `--launcher` with a loopback `--listen`.
    fn check_launchers(&self) -> Result<(), PmBenchError> {
        if self.launcher.iter().any(|l| l.trim().is_empty()) {
            return Err(PmBenchError::Injector(
                "--launcher is empty: give the command that runs a program on another node (scripts/cluster.sh exec 2)".into(),
            ));
        }
        if !self.launcher.is_empty() && self.listen.ip().is_loopback() {
            return Err(PmBenchError::Injector(format!(
                "--launcher runs the injectors on other nodes, which do not reach {}: give --listen an address of this node they reach",
                self.listen
            )));
        }
        Ok(())
    }

    /// Runs the benchmark against an in-process pool manager.
    ///
    /// # Errors
    /// Setup failures or a failing injector.
    pub fn run(&self) -> Result<PmReport, PmBenchError> {
        if self.shards > 1 {
            return self.run_sharded();
        }
        self.check_launchers()?;
        let secret = new_secret()?;
        let pm = PoolManager::start(self.config(&secret))?;
        let info = pm.info().clone();
        let total = self.cdos * self.injectors;
        let mut subscribers = (0..self.subscribers)
            .map(|i| Injector::spawn(&info, "subscriber", i, self))
            .collect::<Result<Vec<_>, _>>()?;
        for s in &mut subscribers {
            s.expect("subscribed")?;
        }
        let (idle, apps) = if self.apps > 0 {
            let (conns, report) = join_apps(&info, self.apps)?;
            (conns, Some(report))
        } else {
            (Vec::new(), None)
        };
        let (rss0, cpu0) = (rss_bytes(), pm.cpu_time().unwrap_or_default());
        let (mut producers, slowest, observer, (rss1, cpu1)) =
            self.produce_observed(&info, || (rss_bytes(), pm.cpu_time().unwrap_or_default()))?;
        let offers_per_sec = total as f64 / slowest;
        let pm_bytes_per_cdo = rss1.saturating_sub(rss0) as f64 / total as f64;
        let cpu = cpu1.saturating_sub(cpu0);
        let shards = vec![ShardReport::of(total, cpu)];
        let events_per_sec = if subscribers.is_empty() {
            None
        } else {
            let t = subscribers
                .iter_mut()
                .map(Injector::seconds)
                .collect::<Result<Vec<_>, _>>()?;
            let events = total * subscribers.len();
            Some(events as f64 / t.iter().copied().fold(f64::MIN_POSITIVE, f64::max))
        };
        let requires_per_sec = if self.require {
            let mut consumers = (0..self.injectors)
                .map(|i| Injector::spawn(&info, "consumer", i, self))
                .collect::<Result<Vec<_>, _>>()?;
            let t = consumers
                .iter_mut()
                .map(Injector::seconds)
                .collect::<Result<Vec<_>, _>>()?;
            Some(total as f64 / t.iter().copied().fold(f64::MIN_POSITIVE, f64::max))
        } else {
            None
        };
        let soak = (self.soak_rounds > 0)
            .then(|| soak(&mut producers, self.soak_rounds, total, rss0))
            .transpose()?;
        drop(producers);
        drop(idle);
        pm.stop().map_err(std::io::Error::other)?;
        Ok(PmReport {
            injectors: self.injectors,
            subscribers: self.subscribers,
            cdos: total,
            offers_per_sec,
            requires_per_sec,
            pm_bytes_per_cdo,
            events_per_sec,
            soak,
            apps,
            observer,
            shards,
        })
    }

    /// Starts the producer injectors against the pool of `info` and waits for their
    /// rounds: them (their CDOs live while they run) and the slowest one's seconds.
    ///
    /// # Errors
    /// An injector that cannot start or fails.
    fn produce(&self, info: &PmInfo) -> Result<(Vec<Injector>, f64), PmBenchError> {
        let mut producers = (0..self.injectors)
            .map(|i| Injector::spawn(info, "producer", i, self))
            .collect::<Result<Vec<_>, _>>()?;
        let slowest = producers
            .iter_mut()
            .map(Injector::seconds)
            .collect::<Result<Vec<_>, _>>()?;
        let slowest = slowest.into_iter().fold(f64::MIN_POSITIVE, f64::max);
        Ok((producers, slowest))
    }

    /// The producers' offers (see [`PmBench::produce`]), watched meanwhile by an observer
    /// with `--observer`; `done` is called as the producers finish, before the observer's
    /// last listing (what the managers spent is measured there, the listing apart).
    fn produce_observed<T>(
        &self,
        info: &PmInfo,
        done: impl FnOnce() -> T,
    ) -> Result<(Vec<Injector>, f64, Option<ObserverReport>, T), PmBenchError> {
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let watching = self.observer.then(|| s.spawn(|| observe(info, &stop)));
            let ran = self.produce(info);
            let measured = done();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let observer = watching
                .map(|h| {
                    h.join()
                        .map_err(|_| PmBenchError::Injector("the observer panicked".into()))?
                })
                .transpose()?;
            ran.map(|(p, t)| (p, t, observer, measured))
        })
    }

    /// [`PmBench::run`] against `shards` pool managers of one pool, each on its own thread
    /// of this process: producers, and the observer of `--observer` (it asks every shard).
    ///
    /// # Errors
    /// Options the sharded run does not measure; as [`PmBench::run`].
    fn run_sharded(&self) -> Result<PmReport, PmBenchError> {
        if self.require || self.subscribers > 0 || self.soak_rounds > 0 || self.apps > 0 {
            return Err(PmBenchError::Injector(
                "--shards measures producers (and an observer) only: leave out --require, --subscribers, --soak and --apps".into(),
            ));
        }
        let shards = pool::shards::Shards::new(self.shards)
            .map_err(|e| PmBenchError::Injector(e.to_string()))?;
        self.check_launchers()?;
        let secret = new_secret()?;
        let pool = pool::ShardedPool::start(shards, |_| Ok(self.config(&secret)))?;
        let (pms, info) = (pool.managers(), pool.info().clone());
        let total = self.cdos * self.injectors;
        let mut homes = vec![0usize; shards.count()];
        for i in 0..self.injectors {
            for k in 0..self.cdos {
                homes[shards.home(&inject::name(i, k))] += 1;
            }
        }
        let cpu = |pms: &[PoolManager]| -> Vec<Duration> {
            pms.iter()
                .map(|p| p.cpu_time().unwrap_or_default())
                .collect()
        };
        let (rss0, cpu0) = (rss_bytes(), cpu(pms));
        let (producers, slowest, observer, (rss1, cpu1)) =
            self.produce_observed(&info, || (rss_bytes(), cpu(pms)))?;
        let pm_bytes_per_cdo = rss1.saturating_sub(rss0) as f64 / total as f64;
        drop(producers);
        pool.stop().map_err(std::io::Error::other)?;
        let shards = (homes.iter().zip(cpu0.iter().zip(&cpu1)))
            .map(|(&cdos, (before, after))| ShardReport::of(cdos, after.saturating_sub(*before)))
            .collect();
        Ok(PmReport {
            injectors: self.injectors,
            subscribers: 0,
            cdos: total,
            offers_per_sec: total as f64 / slowest,
            requires_per_sec: None,
            pm_bytes_per_cdo,
            events_per_sec: None,
            soak: None,
            apps: None,
            observer,
            shards,
        })
    }
}

/// Runs `rounds` soak rounds with `producers` whose `total` CDOs are live.
fn soak(
    producers: &mut [Injector],
    rounds: usize,
    total: usize,
    rss_start: u64,
) -> Result<SoakReport, PmBenchError> {
    let mut rss_peak = rss_bytes();
    let mut rss_after_withdraw = Vec::with_capacity(rounds);
    let mut slowest = 0.0f64;
    for round in 0..rounds {
        if round > 0 {
            for p in producers.iter_mut() {
                p.command("offer", "done")?;
            }
            rss_peak = rss_peak.max(rss_bytes());
        }
        slowest = 0.0;
        for p in producers.iter_mut() {
            slowest = slowest.max(p.command("withdraw", "withdrawn")?);
        }
        rss_after_withdraw.push(rss_bytes());
    }
    Ok(SoakReport {
        rounds,
        cdos: total * rounds,
        rss_start,
        rss_peak,
        rss_after_withdraw,
        withdraws_per_sec: total as f64 / slowest.max(f64::MIN_POSITIVE),
    })
}

/// A subscriber injector: subscribes to OFFER events of a selector every CDO matches, says
/// `subscribed`, then reports how long the `expected` events took from the first one.
fn subscribe(conn: &mut Conn, expected: usize) -> Result<(), PmBenchError> {
    let selector = Selector::parse("(has .maestro.core.cdo.name)", "", &Schemas::builtin())
        .map_err(|e| PmBenchError::Injector(e.to_string()))?;
    conn.send_batch(&[ToPm::Subscribe {
        local: 1,
        kinds: EventKind::Offer.into(),
        selector: Box::new(selector.expr().clone()),
        options: SubscribeOptions::default(),
    }])?;
    let sub = collect(conn, Op::Subscribe, 1, |m| match m {
        FromPm::Subscribed { sub, .. } => Some(sub),
        _ => None,
    })?;
    let sub = sub.first().copied().unwrap_or_default();
    println!("subscribed");
    std::io::stdout().flush()?;
    let mut start = None;
    let mut seen = 0;
    while seen < expected {
        if let FromPm::Event { .. } = conn.recv(Op::Subscribe)? {
            start.get_or_insert_with(Instant::now);
            seen += 1;
            // As a client does: the PM sends a window of events ahead of those taken.
            if seen % TAKEN_REPORT as usize == 0 {
                let count = TAKEN_REPORT;
                conn.send_batch(&[ToPm::Taken { sub, count }])?;
            }
        }
    }
    let took = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    println!("done in {took} s");
    std::io::stdout().flush()?;
    Ok(())
}
