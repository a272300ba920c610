//! `maestro query`: attach to a running `maestro run --tool-support` as a PMIx tool and show
//! its jobs (namespaces, job sizes, process tables), the node's fabric inventory and the NIC
//! of each rank (text, or JSON with `--json`).

use std::time::Duration;

use pmix::{Info, ProcInfo, Query, Tool, ToolTarget, Value, keys};

use launcher::attach::{LauncherArgs, QueryError, check_target};
use maestro_keys::{FABRIC_ASSIGNMENT, FABRIC_INVENTORY, FABRIC_TOPOLOGY, POOL_STATUS};
use serde_json::json;

/// Options of `maestro query`.
#[derive(Clone, Debug)]
pub struct QueryOptions {
    /// Where the launcher is.
    pub target: ToolTarget,
    /// Print JSON.
    pub json: bool,
    /// How long each answer may take.
    pub timeout: Duration,
}

/// The command line of `maestro query`.
#[derive(Clone, Debug, clap::Args)]
pub struct QueryArgs {
    #[command(flatten)]
    launcher: LauncherArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for each answer.
    #[arg(long, default_value = "10", value_parser = pool_tools::cli::parse_duration)]
    timeout: Duration,
}

impl QueryArgs {
    /// The options: which launcher, how to print, how long to wait.
    ///
    /// # Errors
    /// [`QueryError::Target`] when no launcher is named.
    pub fn options(self) -> Result<QueryOptions, QueryError> {
        let target = self.launcher.target().ok_or_else(|| {
            QueryError::Target(
                "name the launcher: --pid PID (of maestro run --tool-support), --uri URI or --system"
                    .into(),
            )
        })?;
        Ok(QueryOptions {
            target,
            json: self.json,
            timeout: self.timeout,
        })
    }
}

/// One job as reported.
#[derive(Debug, serde::Serialize)]
struct JobReport {
    nspace: String,
    size: Option<u64>,
    procs: Vec<ProcReport>,
}

#[derive(Debug, serde::Serialize)]
struct ProcReport {
    rank: u32,
    pid: i32,
    hostname: String,
    executable: String,
    /// In words (`running`, `terminated`, ...).
    state: &'static str,
    exit_code: i32,
}

impl From<&ProcInfo> for ProcReport {
    fn from(p: &ProcInfo) -> Self {
        ProcReport {
            rank: p.proc.rank,
            pid: p.pid,
            hostname: p.hostname.clone(),
            executable: p.executable.clone(),
            state: p.state_name(),
            exit_code: p.exit_code,
        }
    }
}

/// Runs the query and prints the report.
///
/// # Errors
/// [`QueryError::Target`] for a target a tool cannot attach to; a PMIx error when the
/// launcher cannot be reached or answers nothing.
pub fn query(opts: &QueryOptions) -> Result<(), QueryError> {
    check_target(&opts.target)?;
    let tool = Tool::connect(&opts.target, 3)?;
    // The fabric's two answers in one query, the pool's (which may take its PM's time)
    // on its own.
    let fabric = answers(&tool, &[FABRIC_INVENTORY, FABRIC_ASSIGNMENT], opts.timeout);
    let report = Report {
        tool: tool.proc().to_string(),
        jobs: jobs(&tool, opts.timeout)?,
        inventory: json_of(&fabric, FABRIC_INVENTORY),
        assignment: json_of(&fabric, FABRIC_ASSIGNMENT),
        // Asked on its own: a host without it (an older maestro, another host) answers
        // the others still.
        topology: json_of(
            &answers(&tool, &[FABRIC_TOPOLOGY], opts.timeout),
            FABRIC_TOPOLOGY,
        ),
        // The pool of the jobs' workflow, where one is published (the JSON of `maestro
        // pool status --json`, or why not).
        pool: json_of(&answers(&tool, &[POOL_STATUS], opts.timeout), POOL_STATUS)
            .unwrap_or(serde_json::Value::Null),
    };
    if opts.json {
        println!(
            "{}",
            json!({
                "tool": report.tool,
                "jobs": report.jobs,
                "fabric": {
                    "inventory": report.inventory,
                    "assignment": report.assignment,
                    "topology": report.topology,
                },
                "pool": report.pool,
            })
        );
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

/// What `maestro query` found out.
struct Report {
    /// The tool's own process name.
    tool: String,
    jobs: Vec<JobReport>,
    /// The node's fabric inventory, as the host answered it.
    inventory: Option<serde_json::Value>,
    /// The NIC of each rank.
    assignment: Option<serde_json::Value>,
    /// The fabric beyond the node (`{"topology": ...}`), when the host was given one.
    topology: Option<serde_json::Value>,
    /// The pool's status, or `{"error": ...}`.
    pool: serde_json::Value,
}

impl Report {
    /// The report as text: each job's process table, the inventory, the NIC per rank, the
    /// pool.
    fn text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for j in &self.jobs {
            let size = j.size.map_or("?".to_string(), |s| s.to_string());
            let _ = writeln!(out, "job {} ({size} ranks)", j.nspace);
            let _ = writeln!(
                out,
                "  {:>5} {:>8} {:<16} {:>5} {:>4}  executable",
                "rank", "pid", "host", "state", "exit"
            );
            for p in &j.procs {
                let _ = writeln!(
                    out,
                    "  {:>5} {:>8} {:<16} {:>5} {:>4}  {}",
                    p.rank, p.pid, p.hostname, p.state, p.exit_code, p.executable
                );
            }
        }
        let inv = self
            .inventory
            .clone()
            .and_then(|v| serde_json::from_value::<inventory::Inventory>(v).ok());
        match inv {
            Some(inv) => {
                let _ = write!(out, "\n{}", inventory::export::table(&inv, None));
            }
            None => out.push_str("\nno fabric inventory from this host\n"),
        }
        if let Some(serde_json::Value::Object(a)) = &self.assignment {
            out.push_str("\nNIC per rank:\n");
            let mut ranks: Vec<(u32, String)> = a
                .iter()
                .filter_map(|(r, c)| Some((r.parse().ok()?, c.get("nic")?.as_str()?.to_string())))
                .collect();
            ranks.sort();
            for (r, nic) in ranks {
                let _ = writeln!(out, "  rank {r}: {nic}");
            }
        }
        let topology =
            (self.topology.as_ref()).and_then(|v| inventory::switches::read(&v.to_string()).ok());
        if let Some(t) = topology {
            let _ = write!(
                out,
                "\nthe fabric beyond the node:\n{}",
                inventory::switches::describe(&t)
            );
        }
        match serde_json::from_value::<pool::view::Status>(self.pool.clone()) {
            Ok(status) => {
                let _ = write!(out, "\n{}", pool_tools::render::status(&status));
            }
            Err(_) => match self.pool.get("error").and_then(serde_json::Value::as_str) {
                Some(why) => {
                    let _ = writeln!(out, "\npool: {why}");
                }
                None => out.push_str("\npool: the host did not say\n"),
            },
        }
        out
    }
}

/// Every job the launcher runs, with its size and process table.
///
/// # Errors
/// A PMIx error when the launcher does not answer.
fn jobs(tool: &Tool, timeout: Duration) -> Result<Vec<JobReport>, QueryError> {
    let ns_answer = tool.query(&[Query::key(keys::QUERY_NAMESPACES)], timeout)?;
    let namespaces: Vec<String> = match pmix::find(&ns_answer, keys::QUERY_NAMESPACES) {
        Some(Value::String(s)) => s
            .split(',')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    };
    let mut jobs = Vec::new();
    for ns in namespaces {
        let qual = Info::new(keys::NSPACE, Value::String(ns.clone()));
        let answers = tool.query(
            &[
                Query::key(keys::JOB_SIZE).qualify(qual.clone()),
                Query::key(keys::QUERY_PROC_TABLE).qualify(qual),
            ],
            timeout,
        )?;
        let size = pmix::find(&answers, keys::JOB_SIZE).and_then(Value::as_u64);
        let procs = match pmix::find(&answers, keys::QUERY_PROC_TABLE) {
            Some(Value::ProcInfos(t)) => t.iter().map(ProcReport::from).collect(),
            _ => Vec::new(),
        };
        jobs.push(JobReport {
            nspace: ns,
            size,
            procs,
        });
    }
    Ok(jobs)
}

/// The launcher's answers to queries `keys` (none when it cannot answer: logged).
fn answers(tool: &Tool, keys: &[&str], timeout: Duration) -> Vec<Info> {
    let queries: Vec<Query> = keys.iter().map(|k| Query::key(k)).collect();
    tool.query(&queries, timeout).unwrap_or_else(|e| {
        tracing::info!("no answer to {keys:?} from the host: {e}");
        Vec::new()
    })
}

/// The answer to `key` among `answers`, a JSON text, parsed.
fn json_of(answers: &[Info], key: &str) -> Option<serde_json::Value> {
    pmix::find(answers, key)
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str(s).ok())
}
