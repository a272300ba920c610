//! pool_workflow: a producer/consumer workflow through the CDO pool.
//!
//! Under a PMIx host (`maestro run -n 4`, `srun --mpi=pmix -n 4`, `mpirun -np 4`): rank 0
//! starts the pool manager and publishes its PM info with `PMIx_Put` + a collecting fence;
//! the last rank consumes; the ranks between produce. Without a PMIx host the same roles run
//! as threads of one process around an in-process pool manager (a local pool).
//!
//! Each producer offers `--cdos` CDOs (default 100) whose sizes cycle from 0 B to
//! `--max-size` (default 64 MiB), with attributes; the consumer requires all of them (so the
//! PM can move data early), demands each, and checks every byte against the producer's
//! pattern by checksum. A 0-byte CDO `consumer-done` tells the producers they may withdraw.
//!
//! With `MSTRO_POOL_MANAGER_INFO` set (from `maestro pm`), the workflow joins that pool
//! manager instead of starting one; with `--join-published SECS` it waits that long for a
//! pool manager that another job published for the same workflow name through PMIx
//! (`maestro pm` run under `maestro run`, say).
//!
//! Where the PMIx host issues credentials (`maestro run`), every JOIN carries one and the
//! pool manager requires it valid, on top of the workflow secret. The PM listens on every
//! interface and advertises each. Between processes the bytes move by RMA over the chosen
//! libfabric provider (shm when all ranks share a node); the local pool's threads get the
//! producers' buffers without a copy.
//!
//! Environment: `MSTRO_WORKFLOW_NAME`, `MSTRO_POOL_MANAGER_INFO`, and the fabric settings of the `fabric` crate
//! (`MSTRO_OFI_PROVIDER`, `MSTRO_OFI_IFACE`, `MSTRO_OFI_PROGRESS`).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fabric::{Buffer, Scope};
use pool::attr::{AttrValue, Attributes};
use pool::bootstrap::{self, PM_INFO_KEY, PmInfo, new_secret};
use pool::pmix_events;
use pool::schema::Schemas;
use pool::{Client, JoinOptions, PmConfig, PoolManager};

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
    fn from_args() -> Result<Plan, Error> {
        let mut plan = Plan {
            cdos: 100,
            max_size: 64 << 20,
            join_published: None,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
            let n: usize = v.parse().map_err(|_| format!("{a} {v:?}: not a number"))?;
            match a.as_str() {
                "--cdos" => plan.cdos = n,
                "--max-size" => plan.max_size = n,
                "--join-published" => plan.join_published = Some(Duration::from_secs(n as u64)),
                _ => {
                    return Err(format!(
                        "unknown option {a} (use --cdos N, --max-size BYTES, --join-published SECS)"
                    )
                    .into());
                }
            }
        }
        Ok(plan)
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

/// How this process joins: where data may travel, and the PMIx credential if the host
/// issues them.
struct Joining<'a> {
    info: &'a PmInfo,
    scope: Scope,
    credential: Option<Vec<u8>>,
}

impl Joining<'_> {
    fn join(&self, component: &str, index: i64) -> Result<Client, Error> {
        // The schemas the environment names, plus this workflow's own.
        let mut schemas = Schemas::from_env()?;
        schemas.load_str(SCHEMA, "pool_workflow.yaml")?;
        let mut opts = JoinOptions::new(component, index)
            .fabric(self.scope)?
            .timeout(TIMEOUT)
            .schemas(schemas);
        if let Some(c) = &self.credential {
            opts = opts.credential(c.clone());
        }
        Ok(Client::join(self.info, opts)?)
    }
}

/// A producer: offer everything, wait for `consumer-done`, withdraw.
fn produce(
    how: &Joining,
    me: usize,
    plan: Plan,
    sync: &dyn Fn() -> Result<(), Error>,
) -> Result<(), Error> {
    let c = how.join("producer", me as i64)?;
    let mut offered = Vec::new();
    for i in 0..plan.cdos {
        let n = name(me, i);
        let mut buf = Buffer::new(plan.size(i))?;
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
    let done = c.declare("consumer-done")?;
    c.demand(done)?;
    c.dispose(done)?;
    for cdo in offered {
        c.withdraw(cdo)?;
        c.dispose(cdo)?;
    }
    sync()?;
    c.leave()?;
    Ok(())
}

/// The consumer: require everything, demand and verify each, then release the producers.
fn consume(
    how: &Joining,
    producers: &[usize],
    plan: Plan,
    sync: &dyn Fn() -> Result<(), Error>,
) -> Result<(), Error> {
    let c = how.join("consumer", 0)?;
    let start = Instant::now();
    let mut waited = Duration::ZERO;
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
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "consumer: {count} CDOs, {bytes} bytes from {} producers, all checksums match, {secs:.2} s with checks, {:.2} s in demand",
        producers.len(),
        waited.as_secs_f64()
    );
    let done = c.declare("consumer-done")?;
    c.seal(done, Attributes::new())?;
    c.offer(done, Buffer::new(0)?)?;
    sync()?;
    c.withdraw(done)?;
    c.dispose(done)?;
    c.leave()?;
    Ok(())
}

fn workflow_name() -> String {
    std::env::var("MSTRO_WORKFLOW_NAME").unwrap_or_else(|_| "pool-workflow".into())
}

/// Starts a PM on every interface; with `pmix`, JOINs must carry a credential it validates.
fn start_pm(pmix: Option<Arc<pmix::Client>>) -> Result<(PoolManager, PmInfo), Error> {
    let secret = new_secret()?;
    let mut config = PmConfig::new(&workflow_name(), &secret, vec!["0.0.0.0:0".parse()?]);
    if let Some(client) = pmix {
        config.require_credentials = true;
        config.credentials = Some(Arc::new(move |cred: &[u8]| {
            client
                .validate_credential(cred, TIMEOUT)
                .map(drop)
                .map_err(|e| e.to_string())
        }));
    }
    let pm = PoolManager::start(config)?;
    let info = pm.info().clone();
    Ok((pm, info))
}

fn under_pmix(client: pmix::Client, plan: Plan) -> Result<(), Error> {
    let client = Arc::new(client);
    let me = client.rank() as usize;
    let size = client.job_size()? as usize;
    if size < 3 {
        return Err("needs at least 3 ranks: one pool manager, producers, one consumer".into());
    }
    let all_local = client
        .local_peers()
        .map(|p| p.len() == size)
        .unwrap_or(false);
    let scope = if all_local {
        Scope::SameNode
    } else {
        Scope::AnyNode
    };
    let fence = || -> Result<(), Error> { Ok(client.fence(&[], false, TIMEOUT)?) };
    let external = PmInfo::from_env()?;
    // Where the host issues credentials, the PM (of this job) requires them.
    let credential = client.get_credential(TIMEOUT).ok().map(|c| c.bytes);
    let workflow = workflow_name();
    let pm = if me == 0 && external.is_none() {
        if let Some(wait) = plan.join_published {
            // Another job serves this workflow (`maestro pm` under a PMIx host, say).
            let info = bootstrap::lookup(&client, &workflow, Some(wait))?.ok_or_else(|| {
                format!(
                    "no pool manager published for workflow {workflow:?} within {wait:?}; start one (maestro run -n 1 maestro pm --workflow {workflow}) or drop --join-published"
                )
            })?;
            println!(
                "rank 0: joining the pool manager another job published for workflow {workflow:?}"
            );
            client.put(
                pmix::Scope::Global,
                PM_INFO_KEY,
                &pmix::Value::String(info.encode()),
            )?;
            client.commit()?;
            None
        } else {
            let check = credential.as_ref().map(|_| client.clone());
            let (pm, info) = start_pm(check)?;
            let reach = bootstrap::announce(&client, &info, TIMEOUT)?;
            let endpoints: Vec<String> = info.endpoints.iter().map(ToString::to_string).collect();
            let admits = if credential.is_some() {
                "the workflow secret and a valid PMIx credential"
            } else {
                "the workflow secret (this host issues no PMIx credentials)"
            };
            println!(
                "rank 0: pool manager at {} for workflow {workflow:?}, announced to {reach}; JOIN needs {admits}",
                endpoints.join(", "),
            );
            Some(pm)
        }
    } else {
        None
    };
    client.fence(&[], true, TIMEOUT)?;
    let info = match external {
        Some(info) => info,
        None => bootstrap::read_announced(&client, &pmix::Proc::new(client.nspace(), 0))?,
    };
    let producers: Vec<usize> = (1..size - 1).collect();
    let how = Joining {
        info: &info,
        scope,
        credential,
    };
    if me == size - 1 {
        consume(&how, &producers, plan, &fence)?;
    } else if me > 0 {
        produce(&how, me, plan, &fence)?;
    } else if let Some(pm) = &pm {
        // While the others work, PMIx events (a rank lost, a link down or up) become pool
        // events.
        let (stop, reporter) = (AtomicBool::new(false), pm.reporter());
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Err(e) = pmix_events::forward(&client, &stop, |c| reporter.report(c)) {
                    println!("rank 0: PMIx events are not forwarded to the pool ({e})");
                }
            });
            let done = fence();
            stop.store(true, Ordering::Relaxed);
            done
        })?;
    } else {
        fence()?;
    }
    // Everyone has left before the pool manager stops.
    fence()?;
    if let Some(pm) = pm {
        pm.stop();
    }
    Ok(())
}

fn local_pool(plan: Plan) -> Result<(), Error> {
    println!("no PMIx host: running a local pool (2 producers, 1 consumer as threads)");
    let (pm, info) = start_pm(None)?;
    let how = Joining {
        info: &info,
        scope: Scope::SameNode,
        credential: None,
    };
    let barrier = std::sync::Barrier::new(3);
    let sync = || -> Result<(), Error> {
        barrier.wait();
        Ok(())
    };
    std::thread::scope(|s| -> Result<(), Error> {
        let handles: Vec<_> = [1usize, 2]
            .into_iter()
            .map(|p| {
                let (how, sync) = (&how, &sync);
                s.spawn(move || produce(how, p, plan, sync))
            })
            .collect();
        consume(&how, &[1, 2], plan, &sync)?;
        for h in handles {
            h.join().map_err(|_| "a producer panicked")??;
        }
        Ok(())
    })?;
    pm.stop();
    Ok(())
}

fn main() -> ExitCode {
    let plan = match Plan::from_args() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pool_workflow: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match pmix::Client::init() {
        Ok(client) => under_pmix(client, plan),
        Err(pmix::Error::Unreachable { .. }) => local_pool(plan),
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
