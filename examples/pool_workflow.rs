//! pool_workflow: a producer/consumer workflow through the CDO pool.
//!
//! Under a PMIx host (`maestro run -n 4`, `srun --mpi=pmix -n 4`, `mpirun -np 4`): rank 0
//! serves the pool manager, the last rank consumes, the ranks between produce. Without a
//! PMIx host the same roles run as threads of one process around a local pool. Finding the
//! pool manager, PMIx credentials and the fabric are `mstro::session`'s business (the front
//! door every Rust program can use): rank 0 [`Session::serve`]s and the others
//! [`Session::join`].
//!
//! Each producer offers `--cdos` CDOs (default 100) whose sizes cycle from 0 B to
//! `--max-size` (default 64 MiB), with attributes; the consumer requires all of them (so the
//! PM can move data early), demands each, and checks every byte against the producer's
//! pattern by checksum. Producers require a 0-byte CDO `consumer-done` before they offer;
//! the consumer offers it at the end and its withdraw returns once every producer took it,
//! after which the producers withdraw. Rank 0 stops its pool manager once every other rank
//! has left (it counts their app-leave events).
//!
//! With `MSTRO_POOL_MANAGER_INFO` set (from `maestro pm`), or `MSTRO_POOL_MANAGER_INFO_FILE`
//! naming the file `maestro pm --info-file` writes, the workflow joins that pool manager
//! instead of starting one; with `--join-published SECS` it waits that long for a
//! pool manager another job published for the same workflow name through PMIx (`maestro
//! pm` run under `maestro run`, say).
//!
//! Environment: `MSTRO_WORKFLOW_NAME`, `MSTRO_POOL_MANAGER_INFO` (or `_FILE`), and the fabric settings
//! of the `fabric` crate (`MSTRO_OFI_PROVIDER`, `MSTRO_OFI_IFACE`, `MSTRO_OFI_PROGRESS`).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fabric::Buffer;
use mstro::session::{Found, Session, Settings};
use pool::Client;
use pool::attr::{AttrValue, Attributes};
use pool::events::{EventKind, EventKinds, SubscribeOptions};
use pool::pmix_events;
use pool::selector::Selector;
use pool_tools::progress::{Progress, Unit};

const TIMEOUT: Duration = Duration::from_secs(120);
/// The attribute schema of this workflow's CDOs.
const SCHEMA: &str = include_str!("pool_workflow.yaml");

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The run's shape.
#[derive(Clone, Copy)]
struct Plan {
    cdos: usize,
    max_size: usize,
    /// Join the pool manager another job published for the workflow, waiting this long.
    join_published: Option<Duration>,
}

impl Plan {
    const USAGE: &'static str = "usage: pool_workflow [--cdos N] [--max-size SIZE (e.g. 4096, 64K, 4G)] [--join-published SECS]\n  \
        under maestro run -n 4 (or srun, mpirun): rank 0 serves the pool manager, the last \
        rank consumes, the others produce; without a PMIx host, threads of one process";

    /// The plan the command line asks for; `None` for `--help`.
    fn from_args() -> Result<Option<Plan>, Error> {
        let mut plan = Plan {
            cdos: 100,
            max_size: 64 << 20,
            join_published: None,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--help" || a == "-h" {
                return Ok(None);
            }
            let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
            // A size takes units (`4G`); the other options are plain numbers.
            let n: usize = if a == "--max-size" {
                pool_tools::size::parse(v).map_err(|e| format!("{a}: {e}"))?
            } else {
                v.parse().map_err(|_| format!("{a} {v:?}: not a number"))?
            };
            match a.as_str() {
                "--cdos" => plan.cdos = n,
                "--max-size" => plan.max_size = n,
                "--join-published" => plan.join_published = Some(Duration::from_secs(n as u64)),
                _ => return Err(format!("unknown option {a}\n{}", Plan::USAGE).into()),
            }
        }
        Ok(Some(plan))
    }

    /// Size of CDO `i`: the sequence 0, 100 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB (capped at
    /// `max_size`), with the last CDO at `max_size`.
    fn size(&self, i: usize) -> usize {
        if i + 1 == self.cdos {
            return self.max_size;
        }
        [0, 100, 4096, 64 << 10, 1 << 20, 16 << 20][i % 6].min(self.max_size)
    }
}

fn name(producer: usize, i: usize) -> String {
    format!("p{producer}/field-{i}")
}

fn seed(name: &str) -> u8 {
    name.bytes()
        .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b))
}

fn pattern(i: usize, seed: u8) -> u8 {
    (i as u8).wrapping_mul(29).wrapping_add(seed) ^ ((i >> 8) as u8)
}

fn fill(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(i, seed);
    }
}

const FNV: (u64, u64) = (0xcbf2_9ce4_8422_2325, 0x0100_0000_01b3);

fn checksum(buf: &[u8]) -> u64 {
    buf.iter()
        .fold(FNV.0, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV.1))
}

/// The checksum of the pattern of `len` bytes, without building it.
fn pattern_checksum(len: usize, seed: u8) -> u64 {
    (0..len).fold(FNV.0, |h, i| {
        (h ^ u64::from(pattern(i, seed))).wrapping_mul(FNV.1)
    })
}

/// The 0-byte CDO the consumer offers when it has everything.
const DONE: &str = "consumer-done";

/// The 0-byte CDO producer `p` offers once it required `consumer-done`: the consumer
/// demands it first, so that it never offers `consumer-done` (and withdraws it) before
/// every producer wants it, however few CDOs there are (none, with `--cdos 0`).
fn ready(producer: usize) -> String {
    format!("p{producer}/ready")
}

/// A producer: offer everything, wait for `consumer-done`, withdraw.
fn produce(c: &Client, me: usize, plan: Plan) -> Result<(), Error> {
    // Intent first: `consumer-done` comes here as soon as it is offered, so the consumer's
    // withdraw of it waits for this producer; then say so.
    let done = c.declare(DONE)?;
    c.require(done)?;
    let here = c.declare(&ready(me))?;
    c.seal(here, Attributes::new())?;
    c.offer(here, Buffer::new(0)?)?;
    let mut offered = Vec::new();
    for i in 0..plan.cdos {
        let n = name(me, i);
        // Memory made for offers: consumers on this node map it instead of copying where
        // the system gives shared memory huge pages.
        let mut buf = Buffer::for_offer(plan.size(i))?;
        fill(buf.as_mut_slice(), seed(&n));
        let cdo = c.declare(&n)?;
        let mut attrs = Attributes::new();
        attrs.insert(".user.producer".into(), AttrValue::Uint(me as u64));
        attrs.insert(
            ".user.checksum".into(),
            AttrValue::Uint(checksum(buf.as_slice())),
        );
        c.seal_and_offer(cdo, attrs, buf)?;
        offered.push(cdo);
    }
    println!("producer {me}: offered {} CDOs", offered.len());
    c.demand(done)?;
    c.dispose(done)?;
    for cdo in offered.into_iter().chain([here]) {
        c.withdraw(cdo)?;
        c.dispose(cdo)?;
    }
    Ok(())
}

/// The consumer: require everything, demand and verify each, then release the producers.
fn consume(c: &Client, producers: &[usize], plan: Plan) -> Result<(), Error> {
    let start = Instant::now();
    let mut waited = Duration::ZERO;
    for &p in producers {
        let here = c.declare(&ready(p))?;
        c.demand(here)?;
        c.dispose(here)?;
    }
    let mut wanted = Vec::new();
    for &p in producers {
        for i in 0..plan.cdos {
            let n = name(p, i);
            let cdo = c.declare(&n)?;
            c.require(cdo)?;
            wanted.push((n, cdo, plan.size(i)));
        }
    }
    let (mut bytes, mut count) = (0usize, 0usize);
    let mut progress = Progress::stderr("consumer", Unit::Count("CDOs"), wanted.len() as u64);
    for (n, cdo, size) in wanted {
        let t = Instant::now();
        let (data, attrs) = c.demand(cdo)?;
        waited += t.elapsed();
        let (got, want) = (checksum(&data), pattern_checksum(size, seed(&n)));
        if data.len() != size || got != want {
            return Err(format!(
                "{n}: {} bytes with checksum {got:#x}, expected {size} bytes with {want:#x}",
                data.len()
            )
            .into());
        }
        if attrs.get(".user.checksum") != Some(&AttrValue::Uint(want)) {
            return Err(format!("{n}: attributes did not travel: {attrs:?}").into());
        }
        drop(data);
        c.dispose(cdo)?;
        bytes += size;
        count += 1;
        progress.add(1);
    }
    progress.finish();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "consumer: {count} CDOs, {bytes} bytes from {} producers, all checksums match, {secs:.2} s with checks, {:.2} s in demand",
        producers.len(),
        waited.as_secs_f64()
    );
    let done = c.declare(DONE)?;
    c.seal(done, Attributes::new())?;
    c.offer(done, Buffer::new(0)?)?;
    // Returns once every producer (each required it before offering) has it.
    c.withdraw(done)?;
    c.dispose(done)?;
    Ok(())
}

/// This process's settings as `component` #`index`: the environment's, with this
/// workflow's schema and timeout.
fn settings(
    pmix: Option<&Arc<pmix::Client>>,
    component: &str,
    index: usize,
    plan: Plan,
) -> Result<Settings, Error> {
    let workflow = std::env::var("MSTRO_WORKFLOW_NAME").unwrap_or_else(|_| "pool-workflow".into());
    let mut s = Settings::with_pmix(
        Some(&workflow),
        Some(component),
        index as i64,
        pmix.cloned(),
    )?;
    let mut schemas = (*s.schemas).clone();
    schemas.load_str(SCHEMA, "pool_workflow.yaml")?;
    s.schemas = Arc::new(schemas);
    s.timeout = TIMEOUT;
    if plan.join_published.is_some() {
        s.pm_wait = plan.join_published;
    }
    Ok(s)
}

/// Rank 0: serves the pool manager (or joins the one of `MSTRO_POOL_MANAGER_INFO`,
/// `MSTRO_POOL_MANAGER_INFO_FILE` or `--join-published`) and, when it serves, keeps it until the job's other `apps` ranks
/// left, passing PMIx events on to the pool meanwhile.
fn pool_manager_rank(settings: &Settings, apps: usize, plan: Plan) -> Result<(), Error> {
    let external = [
        pool::bootstrap::PM_INFO_ENV,
        pool::bootstrap::PM_INFO_FILE_ENV,
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if external || plan.join_published.is_some() {
        // A rank of this multi-process job that finds none fails, saying how to start one.
        let session = Session::join(settings)?;
        match session.found() {
            Found::Published => println!(
                "rank 0: joining the pool manager another job published for workflow {:?}",
                settings.workflow
            ),
            found => println!("rank 0: joining the pool manager found by {found}"),
        }
        return Ok(session.close()?);
    }
    let session = Session::serve(settings)?;
    let endpoints: Vec<String> = session
        .info()
        .endpoints
        .iter()
        .map(ToString::to_string)
        .collect();
    let admits = if session.credentials_checked() {
        "the workflow secret; credentials checked by this PMIx host"
    } else {
        "the workflow secret (this host issues no PMIx credentials)"
    };
    println!(
        "rank 0: pool manager at {} for workflow {:?}, announced through PMIx; JOIN needs {admits}",
        endpoints.join(", "),
        settings.workflow
    );
    let leaves = session.client().subscribe(
        &Selector::all(),
        EventKinds::from(EventKind::AppLeave),
        SubscribeOptions::default(),
    )?;
    let (stop, reporters) = (AtomicBool::new(false), session.reporters());
    std::thread::scope(|s| -> Result<(), Error> {
        if let (Some(pmix), false) = (&settings.pmix, reporters.is_empty()) {
            // A rank lost, a link down or up: PMIx events become pool events (at every
            // shard the pool has).
            let stop = &stop;
            s.spawn(move || {
                let report = |f| pmix_events::deliver(&reporters, pmix, f);
                if let Err(e) = pmix_events::forward(pmix, stop, report) {
                    println!("rank 0: PMIx events are not forwarded to the pool ({e})");
                }
            });
        }
        let mut left = 0;
        let waited = (|| -> Result<(), Error> {
            while left < apps {
                leaves.wait()?;
                left += 1;
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        waited
    })?;
    drop(leaves);
    Ok(session.close()?)
}

fn under_pmix(pmix: &Arc<pmix::Client>, plan: Plan) -> Result<(), Error> {
    let me = pmix.rank() as usize;
    let size = pmix.job_size()? as usize;
    if size < 3 {
        return Err("needs at least 3 ranks: one pool manager, producers, one consumer".into());
    }
    let producers: Vec<usize> = (1..size - 1).collect();
    if me == 0 {
        let settings = settings(Some(pmix), "pool-manager", 0, plan)?;
        return pool_manager_rank(&settings, size - 1, plan);
    }
    let role = if me == size - 1 {
        "consumer"
    } else {
        "producer"
    };
    let session = Session::join(&settings(Some(pmix), role, me, plan)?)?;
    if me == size - 1 {
        consume(session.client(), &producers, plan)?;
    } else {
        produce(session.client(), me, plan)?;
    }
    Ok(session.close()?)
}

fn local_pool(plan: Plan) -> Result<(), Error> {
    let session = Session::join(&settings(None, "consumer", 0, plan)?)?;
    if *session.found() != Found::LocalPool {
        return Err(format!(
            "expected a local pool, found a pool manager by {}",
            session.found()
        )
        .into());
    }
    println!("no PMIx host: running a local pool (2 producers, 1 consumer as threads)");
    std::thread::scope(|s| -> Result<(), Error> {
        let handles: Vec<_> = [1usize, 2]
            .into_iter()
            .map(|p| {
                let session = &session;
                s.spawn(move || -> Result<(), Error> {
                    let c = session.another("producer", p as i64)?;
                    produce(&c, p, plan)?;
                    Ok(c.leave()?)
                })
            })
            .collect();
        consume(session.client(), &[1, 2], plan)?;
        for h in handles {
            h.join().map_err(|_| "a producer panicked")??;
        }
        Ok(())
    })?;
    Ok(session.close()?)
}

fn main() -> ExitCode {
    mstro::init_logging();
    let plan = match Plan::from_args() {
        Ok(Some(p)) => p,
        Ok(None) => {
            println!("{}", Plan::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("pool_workflow: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match mstro::session::pmix_host() {
        Ok(Some(pmix)) => under_pmix(&pmix, plan),
        Ok(None) => local_pool(plan),
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pool_workflow: {e}");
            ExitCode::FAILURE
        }
    }
}
