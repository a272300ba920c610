//! `maestro query`: attach to a running `maestro run --tool-support` as a PMIx tool and show
//! its jobs (namespaces, job sizes, process tables), the node's fabric inventory and the NIC
//! of each rank (text, or JSON with `--json`).

use std::time::Duration;

use pmix::{Info, ProcInfo, Query, Tool, ToolTarget, Value, keys};

use crate::attach::{LauncherArgs, QueryError, check_target};
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
    #[arg(long, default_value = "10", value_parser = crate::cli::parse_duration)]
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
    let ns_answer = tool.query(&[Query::key(keys::QUERY_NAMESPACES)], opts.timeout)?;
    let namespaces: Vec<String> = match pmix::find(&ns_answer, keys::QUERY_NAMESPACES) {
        Some(Value::String(s)) => s
            .split(',')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    };
    let fabric = tool
        .query(
            &[
                Query::key(maestro_keys::FABRIC_INVENTORY),
                Query::key(maestro_keys::FABRIC_ASSIGNMENT),
            ],
            opts.timeout,
        )
        .unwrap_or_else(|e| {
            tracing::info!("no fabric information from the host: {e}");
            Vec::new()
        });
    let json_of = |key: &str| -> Option<serde_json::Value> {
        pmix::find(&fabric, key)
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str(s).ok())
    };
    let inventory_json = json_of(maestro_keys::FABRIC_INVENTORY);
    let assignment = json_of(maestro_keys::FABRIC_ASSIGNMENT);
    let mut jobs = Vec::new();
    for ns in namespaces {
        let qual = Info::new(keys::NSPACE, Value::String(ns.clone()));
        let answers = tool.query(
            &[
                Query::key(keys::JOB_SIZE).qualify(qual.clone()),
                Query::key(keys::QUERY_PROC_TABLE).qualify(qual),
            ],
            opts.timeout,
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
    // The pool of the jobs' workflow, where one is published (the JSON of `maestro pool
    // status --json`, or why not).
    let pool: serde_json::Value = tool
        .query(&[Query::key(maestro_keys::POOL_STATUS)], opts.timeout)
        .ok()
        .and_then(|a| {
            pmix::find(&a, maestro_keys::POOL_STATUS)
                .and_then(Value::as_str)
                .and_then(|s| serde_json::from_str(s).ok())
        })
        .unwrap_or(serde_json::Value::Null);
    if opts.json {
        println!(
            "{}",
            json!({
                "tool": tool.proc().to_string(),
                "jobs": jobs,
                "fabric": { "inventory": inventory_json, "assignment": assignment },
                "pool": pool,
            })
        );
    } else {
        for j in &jobs {
            let size = j.size.map_or("?".to_string(), |s| s.to_string());
            println!("job {} ({size} ranks)", j.nspace);
            println!(
                "  {:>5} {:>8} {:<16} {:>5} {:>4}  executable",
                "rank", "pid", "host", "state", "exit"
            );
            for p in &j.procs {
                println!(
                    "  {:>5} {:>8} {:<16} {:>5} {:>4}  {}",
                    p.rank, p.pid, p.hostname, p.state, p.exit_code, p.executable
                );
            }
        }
        let inv =
            inventory_json.and_then(|v| serde_json::from_value::<inventory::Inventory>(v).ok());
        match inv {
            Some(inv) => print!("\n{}", inventory::export::table(&inv, None)),
            None => println!("\nno fabric inventory from this host"),
        }
        if let Some(serde_json::Value::Object(a)) = assignment {
            println!("\nNIC per rank:");
            let mut ranks: Vec<(u32, String)> = a
                .iter()
                .filter_map(|(r, c)| Some((r.parse().ok()?, c.get("nic")?.as_str()?.to_string())))
                .collect();
            ranks.sort();
            for (r, nic) in ranks {
                println!("  rank {r}: {nic}");
            }
        }
        match serde_json::from_value::<pool::view::Status>(pool.clone()) {
            Ok(status) => print!("\n{}", crate::pool_cmd::render::status(&status)),
            Err(_) => match pool.get("error").and_then(serde_json::Value::as_str) {
                Some(why) => println!("\npool: {why}"),
                None => println!("\npool: the host did not say"),
            },
        }
    }
    Ok(())
}
