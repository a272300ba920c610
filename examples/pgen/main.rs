//! pgen: product generation as ECMWF runs it, a workflow of separate jobs sharing one pool.
//!
//! - `pgen forecast` (a job of several ranks): rank 0 serves the pool manager and keeps it
//!   until the workflow is done; the other ranks compute the forecast step by step and
//!   offer each step's fields (`--params` x `--levels` of them, `--min-size` to
//!   `--max-size` bytes each) with their step, parameter and level as attributes
//!   (`pgen.yaml`). Once the archiver holds every field they withdraw and leave: the
//!   forecast is over while late steps may still be consumed. With `--without-archiver`
//!   (and Maestro's GFS settings) they withdraw at once and the pool keeps the fields'
//!   files for the late steps instead.
//! - `pgen archiver` (a job of its own): is told of every field before it is offered
//!   (signal-before, require-ack), takes a copy, writes it to `--dir`, and offers the copy
//!   itself (`source = "archive"`), so the data outlives the forecast.
//! - `pgen manager` (a job of its own): watches the fields' OFFER events by selector and,
//!   when a step is complete, starts a product-generation job for it: with `PMIx_Spawn`
//!   (`--launch spawn`, under `maestro run`) or `sbatch` (`--launch sbatch`, its own
//!   allocation); with `--hold-last` the last step's job starts only once every forecast
//!   rank has left, so its fields come from the archive.
//! - `pgen product --step S` (started by the manager): demands the step's fields wherever
//!   they are, checks every byte, writes `--out/step-S.txt` and offers a product CDO.
//! - `pgen verify`: checks every archived field and every product file against the
//!   forecast's pattern (the test's and the user's proof that the run was right).
//!
//! The pool manager is found as every Maestro program finds it: `MSTRO_POOL_MANAGER_INFO`,
//! or the workflow name the forecast published through PMIx (`maestro run` jobs of the
//! user on the node, looked for `MSTRO_POOL_MANAGER_WAIT` seconds, default 60 here), or the
//! file the forecast's rank 0 writes with `--info-file` (`MSTRO_POOL_MANAGER_INFO_FILE`,
//! jobs of other allocations). The job scripts: `examples/pgen/run.sh` (`maestro run`) and
//! `examples/pgen/slurm.sh` (`sbatch`); docs/guide/pgen.md walks
//! through a run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use fabric::Buffer;
use mstro::session::{Found, Session, Settings};
use pool::Client;
use pool::attr::{AttrValue, Attributes};
use pool::events::{EventKind, PoolEvent, SubscribeOptions};
use pool::selector::Selector;

mod field;
use field::{Field, Shape, checksum, field_of};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The attribute schema of the workflow's CDOs.
const SCHEMA: &str = include_str!("pgen.yaml");
/// How long one pool operation (a demand of a field not computed yet, say) may wait.
const TIMEOUT: Duration = Duration::from_secs(600);
/// How long a job looks for the forecast's pool manager by default.
const PM_WAIT: Duration = Duration::from_secs(60);
/// The 0-byte CDO the archiver offers once it holds every field.
const ARCHIVED: &str = "pgen/archive-complete";
/// The 0-byte CDO the manager offers once every product is made.
const DONE: &str = "pgen/done";
/// How often waits look at their subscriptions.
const POLL: Duration = Duration::from_millis(50);

#[derive(Parser)]
#[command(
    name = "pgen",
    about = "Product generation across jobs sharing one Maestro pool"
)]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// The forecast job: rank 0 serves the pool manager, the others offer fields.
    Forecast {
        #[command(flatten)]
        shape: Shape,
        /// Milliseconds each step takes to compute.
        #[arg(long, default_value_t = 200)]
        step_ms: u64,
        /// Also write the PM info to this file (0600) for jobs of other allocations.
        #[arg(long)]
        info_file: Option<PathBuf>,
        /// No archiver: the ranks withdraw their fields once offered and leave, and the
        /// fields outlive them in the pool's own files (needs MSTRO_TRANSPORT_DEFAULT=GFS
        /// and MSTRO_TRANSPORT_GFS_DIR for every job: the pool manager keeps them).
        #[arg(long)]
        without_archiver: bool,
    },
    /// Keeps a copy of every field, on disk and offered in the pool.
    Archiver {
        #[command(flatten)]
        shape: Shape,
        /// Where the copies go.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Starts a product-generation job for each step once its fields are offered.
    Manager {
        #[command(flatten)]
        shape: Shape,
        /// How product-generation jobs start.
        #[arg(long, value_enum, default_value_t = Launch::Spawn)]
        launch: Launch,
        /// Where the products go (passed to each product job).
        #[arg(long)]
        out: PathBuf,
        /// Forecast ranks that offer fields (the job's size less rank 0): the last step's
        /// job waits until all of them left.
        #[arg(long)]
        producers: u32,
        /// Start the last step's job only once the forecast has left.
        #[arg(long)]
        hold_last: bool,
        /// No archiver runs (see `pgen forecast --without-archiver`): the last step's
        /// fields come from the pool's files.
        #[arg(long)]
        without_archiver: bool,
        /// Extra `sbatch` arguments for each product job (repeatable).
        #[arg(long = "sbatch-arg", allow_hyphen_values = true)]
        sbatch_args: Vec<String>,
        /// The product job's program, given `--step S --out DIR` and the shape (the C one,
        /// `pgen_product`, say); default: this program's `product`.
        #[arg(long)]
        product_cmd: Option<PathBuf>,
    },
    /// One step's product generation.
    Product {
        #[command(flatten)]
        shape: Shape,
        /// The step.
        #[arg(long)]
        step: u32,
        /// Where the product goes.
        #[arg(long)]
        out: PathBuf,
    },
    /// Checks an archive directory and the products against the forecast's pattern.
    Verify {
        #[command(flatten)]
        shape: Shape,
        /// The archiver's directory (without: the products only).
        #[arg(long)]
        archive: Option<PathBuf>,
        /// The products' directory.
        #[arg(long)]
        out: PathBuf,
    },
}

impl Role {
    /// The fields every role agrees on.
    fn shape(&self) -> &Shape {
        match self {
            Role::Forecast { shape, .. }
            | Role::Archiver { shape, .. }
            | Role::Manager { shape, .. }
            | Role::Product { shape, .. }
            | Role::Verify { shape, .. } => shape,
        }
    }
}

/// How the manager starts product-generation jobs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Launch {
    /// `PMIx_Spawn` through the manager's PMIx host (`maestro run`).
    Spawn,
    /// `sbatch`, each job in an allocation of its own.
    Sbatch,
}

fn product_name(step: u32) -> String {
    format!("pgen/product/s{step}")
}

/// This process's settings as `component`: the environment's, with the workflow's schema,
/// a long timeout, and a minute to find the forecast's pool manager.
fn settings(
    pmix: Option<&Arc<pmix::Client>>,
    component: &str,
    index: i64,
) -> Result<Settings, Error> {
    let workflow = std::env::var("MSTRO_WORKFLOW_NAME").unwrap_or_else(|_| "pgen".into());
    let mut s = Settings::with_pmix(Some(&workflow), Some(component), index, pmix.cloned())?;
    // The workflow's schema, unless the environment loaded it already (MSTRO_SCHEMA_LIST,
    // for the C product jobs).
    if s.schemas.spec(".user.pgen.kind").is_none() {
        let mut schemas = (*s.schemas).clone();
        schemas.load_str(SCHEMA, "pgen.yaml")?;
        s.schemas = Arc::new(schemas);
    }
    s.timeout = TIMEOUT;
    s.pm_wait.get_or_insert(PM_WAIT);
    Ok(s)
}

/// Joins the workflow's pool manager as `component`, insisting that there is one.
fn join(component: &str) -> Result<Session, Error> {
    let pmix = mstro::session::pmix_host()?;
    let session = Session::join(&settings(pmix.as_ref(), component, 0)?)?;
    if *session.found() == Found::LocalPool {
        return Err(format!(
            "no pool manager of workflow {:?}: start `pgen forecast` first, or give its info (MSTRO_POOL_MANAGER_INFO)",
            session.info().workflow
        )
        .into());
    }
    Ok(session)
}

/// Declares and requires `name` (so it is ticketed to this app once offered).
fn expect(c: &Client, name: &str) -> Result<pool::proto::CdoId, Error> {
    let cdo = c.declare(name)?;
    c.require(cdo)?;
    Ok(cdo)
}

/// Offers a 0-byte marker and returns once everybody who required it took it.
fn signal(c: &Client, name: &str) -> Result<(), Error> {
    let cdo = c.declare(name)?;
    c.seal_and_offer(cdo, Attributes::new(), Buffer::new(0)?)?;
    c.withdraw(cdo)?;
    c.dispose(cdo)?;
    Ok(())
}

fn forecast(
    shape: Shape,
    step_ms: u64,
    info_file: Option<&Path>,
    without_archiver: bool,
) -> Result<(), Error> {
    let pmix = mstro::session::pmix_host()?
        .ok_or("pgen forecast runs under a PMIx host: maestro run -n N, srun --mpi=pmix, mpirun")?;
    let (rank, size) = (pmix.rank(), pmix.job_size()?);
    if size < 2 {
        return Err("pgen forecast needs 2 ranks or more: rank 0 serves the pool manager".into());
    }
    // A pool manager of its own (`maestro pm`, with a standby), named by the environment:
    // rank 0 only checks that it is there.
    let external = [
        pool::bootstrap::PM_INFO_ENV,
        pool::bootstrap::PM_INFO_FILE_ENV,
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if rank == 0 && external {
        let session = Session::join(&settings(Some(&pmix), "forecast", 0)?)?;
        println!("forecast rank 0: the pool manager is a job of its own");
        return Ok(session.close()?);
    }
    if rank == 0 {
        return serve(&settings(Some(&pmix), "pool-manager", 0)?, info_file);
    }
    let settings = settings(Some(&pmix), "forecast", i64::from(rank))?;
    if without_archiver && !settings.gfs.as_ref().is_some_and(|g| g.offer) {
        return Err("pgen forecast --without-archiver: the fields must outlive the forecast in the pool's files: set MSTRO_TRANSPORT_DEFAULT=GFS and MSTRO_TRANSPORT_GFS_DIR for every job".into());
    }
    let session = Session::join(&settings)?;
    let c = session.client();
    let archived = (!without_archiver)
        .then(|| expect(c, ARCHIVED))
        .transpose()?;
    let mut offered = Vec::new();
    let (mine, producers) = (rank - 1, size - 1);
    for step in 0..shape.steps {
        std::thread::sleep(Duration::from_millis(step_ms));
        for (i, f) in shape.fields(step).enumerate() {
            if i as u32 % producers != mine {
                continue;
            }
            let data = f.compute(&shape)?;
            let cdo = c.declare(&f.name())?;
            c.seal_and_offer(
                cdo,
                f.attributes("forecast", checksum(data.as_slice())),
                data,
            )?;
            offered.push(cdo);
        }
    }
    println!(
        "forecast rank {rank}: offered {} fields of {} steps",
        offered.len(),
        shape.steps
    );
    // The archive holds a copy of everything (or, without an archiver, the pool keeps the
    // fields' files once withdrawn): the forecast can go.
    if let Some(archived) = archived {
        c.demand(archived)?;
        c.dispose(archived)?;
    }
    for cdo in offered {
        c.withdraw(cdo)?;
        c.dispose(cdo)?;
    }
    println!("forecast rank {rank}: withdrew its fields and leaves");
    Ok(session.close()?)
}

/// Rank 0 of the forecast: serves the pool manager until the manager says the workflow is
/// done and every other app has left.
fn serve(settings: &Settings, info_file: Option<&Path>) -> Result<(), Error> {
    let session = Session::serve(settings)?;
    let info = session.info().clone();
    // Held (locked) while the PM serves: a second forecast given the path fails.
    let _held = info_file.map(|path| info.write_file(path)).transpose()?;
    println!(
        "forecast rank 0: pool manager of workflow {:?} serves ({})",
        info.workflow,
        info.endpoints
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let c = session.client();
    let done = expect(c, DONE)?;
    c.demand(done)?;
    c.dispose(done)?;
    // Everyone else leaves first (the archiver and the forecast's ranks after DONE).
    let mut watch = pool::Observer::connect(&info, "pgen-rank-0", TIMEOUT)?;
    let end = Instant::now() + TIMEOUT;
    loop {
        match watch.query(pool::view::Query::Status)? {
            pool::view::View::Status(s) if s.app_count <= 1 => break,
            _ if Instant::now() > end => {
                return Err("apps still joined 10 minutes after the workflow ended".into());
            }
            _ => std::thread::sleep(POLL),
        }
    }
    drop(watch);
    if let Some(path) = info_file {
        let _ = std::fs::remove_file(path);
    }
    println!("forecast rank 0: the workflow is done; the pool manager stops");
    Ok(session.close()?)
}

fn archiver(shape: Shape, dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir)?;
    let session = join("archiver")?;
    let c = session.client();
    let done = expect(c, DONE)?;
    let selector = c.selector(
        r#"(and (kind = "field") (source = "forecast"))"#,
        ".user.pgen.",
    )?;
    let options = SubscribeOptions {
        signal_before: true,
        require_ack: true,
        no_local: true,
        replay: true,
    };
    let sub = c.subscribe(&selector, EventKind::Offer, options)?;
    let total = shape.all().count();
    let mut copies = Vec::with_capacity(total);
    while copies.len() < total {
        let event = sub.wait()?;
        let Some(f) = event.cdo.as_deref().and_then(|n| field_of(&shape, n)) else {
            sub.ack(&event)?;
            continue;
        };
        // Required before the offer takes effect: the data is ours to fetch even if the
        // forecast withdraws at once.
        let cdo = expect(c, &f.name())?;
        sub.ack(&event)?;
        let (data, _) = c.demand(cdo)?;
        f.check(&shape, &data)?;
        let path = dir.join(f.name().replace('/', "_"));
        std::fs::write(&path, &*data)?;
        let mut copy = Buffer::for_offer(data.len())?;
        copy.as_mut_slice().copy_from_slice(&data);
        drop(data);
        c.dispose(cdo)?;
        let kept = c.declare(&f.name())?;
        let sum = checksum(copy.as_slice());
        c.seal_and_offer(kept, f.attributes("archive", sum), copy)?;
        copies.push(kept);
    }
    c.unsubscribe(sub)?;
    println!(
        "archiver: {} fields written to {} and offered",
        copies.len(),
        dir.display()
    );
    let archived = c.declare(ARCHIVED)?;
    c.seal_and_offer(archived, Attributes::new(), Buffer::new(0)?)?;
    c.demand(done)?;
    c.dispose(done)?;
    for cdo in copies.into_iter().chain([archived]) {
        c.withdraw(cdo)?;
        c.dispose(cdo)?;
    }
    Ok(session.close()?)
}

/// The manager's view of the run: fields offered per step, steps started, products made.
struct Progress {
    offered: Vec<usize>,
    started: Vec<bool>,
    products: usize,
    forecast_left: u32,
}

/// How the manager starts product jobs: the launcher, the products' directory, extra
/// `sbatch` arguments, the program.
type Starter<'a> = (Launch, &'a Path, &'a [String], Option<&'a Path>);

fn manager(
    shape: Shape,
    starter: Starter<'_>,
    (producers, hold_last, without_archiver): (u32, bool, bool),
) -> Result<(), Error> {
    let out = starter.1;
    std::fs::create_dir_all(out)?;
    let session = join("manager")?;
    let c = session.client();
    let opts = SubscribeOptions {
        replay: true,
        ..SubscribeOptions::default()
    };
    let fields = c.subscribe(
        &c.selector(
            r#"(and (kind = "field") (source = "forecast"))"#,
            ".user.pgen.",
        )?,
        EventKind::Offer,
        opts,
    )?;
    let products = c.subscribe(
        &c.selector(r#"(kind = "product")"#, ".user.pgen.")?,
        EventKind::Offer,
        opts,
    )?;
    let leaves = c.subscribe(
        &Selector::all(),
        EventKind::AppLeave,
        SubscribeOptions::default(),
    )?;
    let mut p = Progress {
        offered: vec![0; shape.steps as usize],
        started: vec![false; shape.steps as usize],
        products: 0,
        forecast_left: 0,
    };
    let last = shape.steps.saturating_sub(1);
    let start = Instant::now();
    while p.products < shape.steps as usize {
        if start.elapsed() > TIMEOUT {
            return Err(format!(
                "{} of {} products after {TIMEOUT:?}",
                p.products, shape.steps
            )
            .into());
        }
        let mut quiet = true;
        while let Some(e) = fields.wait_timeout(Duration::ZERO)? {
            quiet = false;
            if let Some(step) = step_of(&e) {
                p.offered[step as usize] += 1;
            }
        }
        while let Some(e) = leaves.wait_timeout(Duration::ZERO)? {
            quiet = false;
            if e.component == "forecast" {
                p.forecast_left += 1;
            }
        }
        while let Some(e) = products.wait_timeout(Duration::ZERO)? {
            quiet = false;
            p.products += 1;
            println!(
                "manager: {} is made",
                e.cdo.as_deref().unwrap_or("a product")
            );
        }
        for step in 0..shape.steps {
            let complete = p.offered[step as usize] >= shape.per_step();
            let held = hold_last && step == last && p.forecast_left < producers;
            if complete && !held && !p.started[step as usize] {
                p.started[step as usize] = true;
                start_product(&session, shape, step, starter)?;
                println!(
                    "manager: step {step} complete; its product job started{}",
                    match (hold_last && step == last, without_archiver) {
                        (true, false) => " (after the forecast left: from the archive)",
                        (true, true) => " (after the forecast left: from the pool's files)",
                        _ => "",
                    }
                );
            }
        }
        if quiet {
            std::thread::sleep(POLL);
        }
    }
    println!("manager: all {} products made", shape.steps);
    println!(
        "manager: how the data moved: {}",
        transports(&session.pm_info())?
    );
    if !without_archiver {
        let archived = c.declare(ARCHIVED)?;
        c.demand(archived)?;
        c.dispose(archived)?;
    }
    // Returns once rank 0 and the archiver (both required it) have it.
    signal(c, DONE)?;
    Ok(session.close()?)
}

/// The pool's transfers so far by transport (what `maestro pool fabric` shows), as one
/// line: `rma 18 transfers 96.0 MiB, stream 6 transfers 30.1 MiB`.
fn transports(info: &pool::bootstrap::PmInfo) -> Result<String, Error> {
    let mut watch = pool::Observer::connect(info, "pgen-manager-view", TIMEOUT)?;
    let pool::view::View::Fabric(f) = watch.query(pool::view::Query::Fabric)? else {
        return Err("the pool manager answered the fabric view with another".into());
    };
    let each: Vec<String> = f
        .transports
        .iter()
        .map(|(t, n)| {
            format!(
                "{t} {} transfers {:.1} MiB{}",
                n.transfers,
                n.bytes as f64 / f64::from(1 << 20),
                if n.failures > 0 {
                    format!(" ({} failed)", n.failures)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    Ok(if each.is_empty() {
        "no transfers".into()
    } else {
        each.join(", ")
    })
}

fn step_of(e: &PoolEvent) -> Option<u32> {
    match e.attributes.get(".user.pgen.step") {
        Some(AttrValue::Int(s)) => u32::try_from(*s).ok(),
        _ => None,
    }
}

/// Starts the product-generation job of `step`, passing it where to find the pool manager.
fn start_product(
    session: &Session,
    shape: Shape,
    step: u32,
    (launch, out, sbatch_args, program): Starter<'_>,
) -> Result<(), Error> {
    let utf8 = |p: &Path, what: &str| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("{what} {} is not UTF-8", p.display()))
    };
    let out = utf8(out, "--out")?;
    let mut argv = match program {
        Some(p) => vec![utf8(p, "--product-cmd")?],
        None => vec![
            utf8(&std::env::current_exe()?, "this program's path")?,
            "product".into(),
        ],
    };
    let exe = argv[0].clone();
    argv.extend(["--step".into(), step.to_string(), "--out".into(), out]);
    argv.extend(shape.args());
    // Where the product job finds the pool manager: the info file where this job found
    // it (read again, it names the manager that took over from one that died), else its
    // info.
    let (key, value) = match session.found() {
        Found::InfoFile(path) => (
            pool::bootstrap::PM_INFO_FILE_ENV,
            utf8(path, "the info file")?,
        ),
        _ => (pool::bootstrap::PM_INFO_ENV, session.pm_info().encode()),
    };
    let info = format!("{key}={value}");
    let workflow = format!("MSTRO_WORKFLOW_NAME={}", session.info().workflow);
    match launch {
        Launch::Spawn => {
            let pmix = session
                .pmix()
                .ok_or("--launch spawn needs a PMIx host that spawns (maestro run)")?;
            let app = pmix::App {
                cmd: exe,
                argv,
                env: vec![info, workflow],
                maxprocs: 1,
                ..Default::default()
            };
            let nspace = pmix.spawn(&[app], &[], Duration::from_secs(60))?;
            println!("manager: step {step}: job {nspace} spawned");
        }
        Launch::Sbatch => {
            let script = format!(
                "#!/bin/sh\nexec srun --mpi=pmix -n 1 {}\n",
                shell_words(&argv)
            );
            let mut cmd = std::process::Command::new("sbatch");
            // A job of its own: nothing of the manager's job (its CPU binding, node list,
            // task counts in SLURM_*) may leak into the new allocation; the cluster's
            // configuration (SLURM_CONF) stays.
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("SLURM_") && key != "SLURM_CONF" {
                    cmd.env_remove(key);
                }
            }
            cmd.args([
                "--parsable",
                "--job-name",
                &format!("pgen-s{step}"),
                "--ntasks",
                "1",
            ])
            .args(sbatch_args)
            // The secret travels in the job's environment, not on a command line.
            .env(key, &value)
            .env("MSTRO_WORKFLOW_NAME", &session.info().workflow)
            .arg(format!("--export=ALL,{key}"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().map_err(|e| format!("sbatch: {e}"))?;
            if let Some(mut stdin) = child.stdin.take() {
                std::io::Write::write_all(&mut stdin, script.as_bytes())?;
            }
            let done = child.wait_with_output()?;
            if !done.status.success() {
                return Err(format!(
                    "sbatch for step {step}: {}",
                    String::from_utf8_lossy(&done.stderr)
                )
                .into());
            }
            println!(
                "manager: step {step}: batch job {} submitted",
                String::from_utf8_lossy(&done.stdout).trim()
            );
        }
    }
    Ok(())
}

/// `args` quoted for `sh`.
fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn product(shape: Shape, step: u32, out: &Path) -> Result<(), Error> {
    if step >= shape.steps {
        return Err(format!(
            "--step {step}: the forecast has steps 0 to {}",
            shape.steps - 1
        )
        .into());
    }
    let session = join("pgen")?;
    let c = session.client();
    let wanted: Vec<(Field, _)> = shape
        .fields(step)
        .map(|f| Ok::<_, Error>((f.clone(), expect(c, &f.name())?)))
        .collect::<Result<_, _>>()?;
    let mut text = format!("product of step {step}\n");
    let mut sources = std::collections::BTreeMap::<String, usize>::new();
    for (f, cdo) in wanted {
        let (data, attrs) = c.demand(cdo)?;
        f.check(&shape, &data)?;
        if attrs.get(".user.pgen.checksum") != Some(&AttrValue::Uint(checksum(&data))) {
            return Err(format!(
                "{}: its checksum attribute does not match its bytes",
                f.name()
            )
            .into());
        }
        if let Some(AttrValue::Str(s)) = attrs.get(".user.pgen.source") {
            *sources.entry(s.clone()).or_default() += 1;
        }
        let _ = writeln!(text, "{}", f.product_line(&data));
        drop(data);
        c.dispose(cdo)?;
    }
    let path = out.join(format!("step-{step}.txt"));
    let partial = out.join(format!(".step-{step}.txt.partial"));
    std::fs::write(&partial, &text)?;
    std::fs::rename(&partial, &path)?;
    let from: Vec<String> = sources
        .iter()
        .map(|(s, n)| format!("{n} from {s}"))
        .collect();
    println!(
        "pgen step {step}: {} fields checked ({}); product {}",
        shape.per_step(),
        from.join(", "),
        path.display()
    );
    let made = c.declare(&product_name(step))?;
    let attrs = Attributes::from([
        (".user.pgen.kind".into(), AttrValue::Str("product".into())),
        (".user.pgen.step".into(), AttrValue::Int(i64::from(step))),
    ]);
    let mut bytes = Buffer::new(text.len())?;
    bytes.as_mut_slice().copy_from_slice(text.as_bytes());
    c.seal_and_offer(made, attrs, bytes)?;
    c.withdraw(made)?;
    c.dispose(made)?;
    Ok(session.close()?)
}

fn verify(shape: Shape, archive: Option<&Path>, out: &Path) -> Result<(), Error> {
    let mut bytes = 0;
    for step in 0..shape.steps {
        let mut want = format!("product of step {step}\n");
        for f in shape.fields(step) {
            let data = match archive {
                Some(archive) => {
                    let path = archive.join(f.name().replace('/', "_"));
                    let data =
                        std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                    f.check(&shape, &data)?;
                    bytes += data.len();
                    data
                }
                None => f.compute(&shape)?.as_slice().to_vec(),
            };
            let _ = writeln!(want, "{}", f.product_line(&data));
        }
        let path = out.join(format!("step-{step}.txt"));
        let got = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if got != want {
            return Err(format!(
                "{}: not the product of the forecast's fields:\n{got}\nexpected:\n{want}",
                path.display()
            )
            .into());
        }
    }
    match archive {
        Some(_) => println!(
            "verified: {} archived fields ({bytes} bytes) and {} products",
            shape.all().count(),
            shape.steps
        ),
        None => println!("verified: {} products (no archive)", shape.steps),
    }
    Ok(())
}

fn main() -> ExitCode {
    // Output into a pipe that closes (`run.sh | head`) ends the program quietly, as a C
    // program's, instead of a panic at the next print.
    // SAFETY: restoring a signal's default disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    mstro::init_logging();
    let cli = Cli::parse();
    if let Err(e) = cli.role.shape().check() {
        Cli::command()
            .error(clap::error::ErrorKind::ValueValidation, e)
            .exit();
    }
    let result = match &cli.role {
        Role::Forecast {
            shape,
            step_ms,
            info_file,
            without_archiver,
        } => forecast(*shape, *step_ms, info_file.as_deref(), *without_archiver),
        Role::Archiver { shape, dir } => archiver(*shape, dir),
        Role::Manager {
            shape,
            launch,
            out,
            producers,
            hold_last,
            without_archiver,
            sbatch_args,
            product_cmd,
        } => manager(
            *shape,
            (*launch, out, sbatch_args, product_cmd.as_deref()),
            (*producers, *hold_last, *without_archiver),
        ),
        Role::Product { shape, step, out } => product(*shape, *step, out),
        Role::Verify {
            shape,
            archive,
            out,
        } => verify(*shape, archive.as_deref(), out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pgen: {e}");
            ExitCode::FAILURE
        }
    }
}
