//! `maestro pool`: a live, read-only view of a running pool: `status` (the PM, its apps, CDO
//! counts), `ls [SELECTOR]` (CDOs, paged), `transfers` (in flight and recent) and
//! `fabric` (the traffic report per NIC and provider). Text tables, or the documented JSON
//! (`--json`, schema in `docs/pool-view.schema.json`); `--watch SECONDS` redraws.
//!
//! The PM is found, in this order, from `--info`, `--info-file` (as `maestro pm
//! --info-file` writes it), a running `maestro run --tool-support` (`--pid`, `--uri`: its
//! PMIx host asks the PM and answers `PMIx_Query_info`), the PM info a job of this user
//! published on this node (`--workflow`, or the only one published), and
//! `MSTRO_POOL_MANAGER_INFO`.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pmix::keys::maestro as maestro_keys;
use pmix::{Info, Tool, Value};
use pool::bootstrap::{self, PmInfo};
use pool::schema::Schemas;
use pool::selector::Selector;
use pool::view::{self, CdoPage, Fabric, Ls, Query, Status, Transfers, View};

use crate::query::LauncherArgs;

/// Which view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// The PM, its apps, CDO counts by state.
    Status,
    /// CDOs (matching SELECTOR).
    Ls,
    /// Transfers in flight and recent.
    Transfers,
    /// Bytes and transfers per NIC and provider, links, each app's NIC.
    Fabric,
    /// The JSON Schema of every view's `--json` (no PM needed).
    Schema,
}

/// The command line of `maestro pool`.
#[derive(Clone, Debug, clap::Args)]
pub struct PoolArgs {
    /// What to show.
    #[arg(value_enum)]
    which: Which,
    /// `ls` only: a selector over attributes, as subscriptions take them
    /// (`(= .maestro.core.cdo.name "field-3")`; relative keys with --namespace).
    selector: Option<String>,
    /// The PM info (`mstro-pm-v1:...`, as `maestro pm` prints it).
    #[arg(long, conflicts_with_all = ["info_file", "workflow"])]
    info: Option<String>,
    /// A file holding the PM info (`maestro pm --info-file`).
    #[arg(long, conflicts_with = "workflow")]
    info_file: Option<PathBuf>,
    /// The workflow whose PM info a job of this user published on this node (or, with
    /// --pid/--uri, which of the launcher's pools).
    #[arg(long)]
    workflow: Option<String>,
    #[command(flatten)]
    launcher: LauncherArgs,
    /// Print the documented JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Redraw every SECONDS until interrupted.
    #[arg(long, value_parser = crate::cli::parse_duration)]
    watch: Option<Duration>,
    /// `ls`: most CDOs listed (0: all, page by page).
    #[arg(long, default_value = "1000")]
    limit: usize,
    /// `ls`: show each CDO's attributes.
    #[arg(long)]
    attributes: bool,
    /// `ls`: the namespace of relative keys in SELECTOR (e.g. `.user.`).
    #[arg(long, default_value = "")]
    namespace: String,
    /// Seconds to wait for each answer.
    #[arg(long, default_value = "10", value_parser = crate::cli::parse_duration)]
    timeout: Duration,
}

/// Why `maestro pool` showed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PoolCmdError {
    /// No PM could be found (what was tried, and what to give).
    #[error("{0}")]
    NotFound(String),
    /// The PM info given is malformed.
    #[error("{what}: {error}")]
    Info {
        /// Where it came from.
        what: String,
        /// What is wrong.
        error: bootstrap::PmInfoError,
    },
    /// The selector does not parse.
    #[error("selector: {0}")]
    Selector(String),
    /// The PM refused or could not be reached.
    #[error(transparent)]
    Client(#[from] pool::ClientError),
    /// The launcher could not be asked.
    #[error(transparent)]
    Query(#[from] crate::query::QueryError),
    /// The launcher's answer is not a view.
    #[error("the launcher's answer to {key} is not a pool view: {why}")]
    Answer {
        /// The query key.
        key: &'static str,
        /// What was wrong.
        why: String,
    },
    /// Output failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
}

/// Where the views come from.
enum Source {
    /// An observer connection to the PM.
    Pm(Box<pool::Observer>),
    /// A `maestro run` launcher's PMIx host, asked with `PMIx_Query_info`.
    Launcher {
        tool: Tool,
        workflow: Option<String>,
        timeout: Duration,
    },
}

/// Runs `maestro pool`.
///
/// # Errors
/// [`PoolCmdError`]: no PM found, a bad PM info or selector, the PM or launcher
/// unreachable or refusing, output closed.
pub fn run(args: &PoolArgs) -> Result<(), PoolCmdError> {
    if args.selector.is_some() && args.which != Which::Ls {
        return Err(PoolCmdError::Selector(
            "only `maestro pool ls` takes a selector".into(),
        ));
    }
    let selector = args
        .selector
        .as_deref()
        .map(|text| {
            let schemas = Schemas::from_env().map_err(|e| PoolCmdError::Selector(e.to_string()))?;
            Selector::parse(text, &args.namespace, &schemas)
                .map(|s| (text.to_string(), Box::new(s.expr().clone())))
                .map_err(|e| PoolCmdError::Selector(format!("{text:?}: {e}")))
        })
        .transpose()?;
    let mut out = std::io::stdout().lock();
    if args.which == Which::Schema {
        out.write_all(json(&schema()).as_bytes())?;
        return Ok(());
    }
    let mut source = open(args)?;
    loop {
        let text = show(&mut source, args, selector.as_ref())?;
        if args.watch.is_some() {
            // Home and clear, as `watch` and `top` redraw.
            write!(out, "\x1b[H\x1b[2J{}\n\n", stamp())?;
        }
        out.write_all(text.as_bytes())?;
        out.flush()?;
        match args.watch {
            Some(every) => std::thread::sleep(every),
            None => return Ok(()),
        }
    }
}

/// Finds the PM (see the module docs) and connects.
fn open(args: &PoolArgs) -> Result<Source, PoolCmdError> {
    let parse = |what: String, text: &str| {
        PmInfo::parse(text).map_err(|error| PoolCmdError::Info { what, error })
    };
    let info = if let Some(text) = &args.info {
        parse("--info".into(), text)?
    } else if let Some(path) = &args.info_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            PoolCmdError::NotFound(format!(
                "--info-file {}: {e}; give the file `maestro pm --info-file` writes",
                path.display()
            ))
        })?;
        parse(format!("--info-file {}", path.display()), &text)?
    } else if let Some(target) = args.launcher.target() {
        crate::query::check_target(&target)?;
        let tool = Tool::connect(&target, 3).map_err(crate::query::QueryError::from)?;
        return Ok(Source::Launcher {
            tool,
            workflow: args.workflow.clone(),
            timeout: args.timeout,
        });
    } else if let Some(info) = published(args.workflow.as_deref())? {
        info
    } else {
        match PmInfo::from_env() {
            Ok(Some(info)) => info,
            Ok(None) => {
                return Err(PoolCmdError::NotFound(
                    "no pool manager found: give --info, --info-file, --pid of a maestro run --tool-support, or --workflow of a job of yours on this node (none is published here), or set MSTRO_POOL_MANAGER_INFO".into(),
                ));
            }
            Err(error) => {
                return Err(PoolCmdError::Info {
                    what: bootstrap::PM_INFO_ENV.into(),
                    error,
                });
            }
        }
    };
    let observer = pool::Observer::connect(&info, "maestro-pool", args.timeout)?;
    Ok(Source::Pm(Box::new(observer)))
}

/// The PM info of `workflow` (or of the only workflow) that a job of this user published
/// on this node.
fn published(workflow: Option<&str>) -> Result<Option<PmInfo>, PoolCmdError> {
    let prefix = format!("{}.", maestro_keys::PM_INFO);
    let Ok(dir) = pmix::server::NodeDirectory::open(&pmix::server::NodeDirectory::default_dir())
    else {
        return Ok(None);
    };
    let found = dir.with_prefix(&prefix);
    let names: Vec<&str> = found
        .iter()
        .map(|(k, _)| k.trim_start_matches(&prefix))
        .collect();
    let chosen = match workflow {
        Some(w) => found.iter().find(|(k, _)| k[prefix.len()..] == *w).ok_or_else(|| {
            PoolCmdError::NotFound(format!(
                "no job of yours on this node published a pool manager of workflow {w:?} (published: {})",
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ))
        })?,
        None => match found.as_slice() {
            [] => return Ok(None),
            [one] => one,
            _ => {
                return Err(PoolCmdError::NotFound(format!(
                    "several workflows publish a pool manager on this node ({}); choose one with --workflow",
                    names.join(", ")
                )));
            }
        },
    };
    let (key, value) = chosen;
    PmInfo::parse(value.as_str().unwrap_or_default())
        .map(Some)
        .map_err(|error| PoolCmdError::Info {
            what: key.clone(),
            error,
        })
}

/// Asks for the view and renders it.
fn show(
    source: &mut Source,
    args: &PoolArgs,
    selector: Option<&Selected>,
) -> Result<String, PoolCmdError> {
    Ok(match args.which {
        Which::Status => {
            let s: Status = source.get(maestro_keys::POOL_STATUS, Query::Status, &[])?;
            if args.json {
                json(&s)
            } else {
                render::status(&s)
            }
        }
        Which::Transfers => {
            let t: Transfers = source.get(maestro_keys::POOL_TRANSFERS, Query::Transfers, &[])?;
            if args.json {
                json(&t)
            } else {
                render::transfers(&t)
            }
        }
        Which::Fabric => {
            let f: Fabric = source.get(maestro_keys::POOL_FABRIC, Query::Fabric, &[])?;
            if args.json {
                json(&f)
            } else {
                render::fabric(&f)
            }
        }
        Which::Schema => json(&schema()),
        Which::Ls => {
            let page = list(source, args, selector)?;
            if args.json {
                json(&page)
            } else {
                render::cdos(&page, args.attributes)
            }
        }
    })
}

/// A selector as given and as parsed.
type Selected = (String, Box<pool::selector::Expr>);

/// Pages through the CDOs, at most `--limit`.
fn list(
    source: &mut Source,
    args: &PoolArgs,
    selector: Option<&Selected>,
) -> Result<CdoPage, PoolCmdError> {
    let most = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    let mut all = CdoPage::default();
    let mut after = None;
    loop {
        let ls = Ls {
            selector: selector.map(|(_, e)| e.clone()),
            after,
            limit: u32::try_from(most - all.cdos.len()).unwrap_or(u32::MAX),
            attributes: args.attributes,
        };
        let mut qualifiers = Vec::new();
        if let Some((text, _)) = selector {
            qualifiers.push(Info::new(
                maestro_keys::POOL_SELECTOR,
                Value::String(text.clone()),
            ));
        }
        if let Some(a) = after {
            qualifiers.push(Info::new(maestro_keys::POOL_AFTER, Value::Uint64(a)));
        }
        let page: CdoPage = source.get(maestro_keys::POOL_CDOS, Query::Ls(ls), &qualifiers)?;
        all.total = page.total;
        all.cdos.extend(page.cdos);
        if all.cdos.len() >= most {
            all.cdos.truncate(most);
            all.next = page.next.or(all.cdos.last().map(|c| c.id));
            return Ok(all);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok(all),
        }
    }
}

impl Source {
    /// One view: from the PM itself, or from the launcher's answer to `key`.
    fn get<T: serde::de::DeserializeOwned + FromView>(
        &mut self,
        key: &'static str,
        query: Query,
        qualifiers: &[Info],
    ) -> Result<T, PoolCmdError> {
        match self {
            Source::Pm(o) => {
                let view = o.query(query)?;
                T::from_view(view).ok_or(PoolCmdError::Answer {
                    key,
                    why: "another view came back".into(),
                })
            }
            Source::Launcher {
                tool,
                workflow,
                timeout,
            } => {
                let mut q = pmix::Query::key(key);
                for i in qualifiers.iter().cloned() {
                    q = q.qualify(i);
                }
                if let Some(w) = workflow {
                    q = q.qualify(Info::new(
                        maestro_keys::POOL_WORKFLOW,
                        Value::String(w.clone()),
                    ));
                }
                let answers = tool
                    .query(&[q], *timeout)
                    .map_err(crate::query::QueryError::from)?;
                let text = pmix::find(&answers, key).and_then(Value::as_str).ok_or(
                    PoolCmdError::Answer {
                        key,
                        why: "no answer (is a pool manager running in this launcher's jobs?)"
                            .into(),
                    },
                )?;
                serde_json::from_str(text).map_err(|e| PoolCmdError::Answer {
                    key,
                    why: launcher_error(text).unwrap_or_else(|| e.to_string()),
                })
            }
        }
    }
}

/// The launcher's answer when it could not ask the PM: `{"error": "..."}`.
fn launcher_error(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("error")?.as_str().map(String::from)
}

/// A view's payload out of a [`View`].
trait FromView: Sized {
    fn from_view(view: View) -> Option<Self>;
}

macro_rules! from_view {
    ($($t:ty => $variant:ident),*) => {
        $(impl FromView for $t {
            fn from_view(view: View) -> Option<Self> {
                match view {
                    View::$variant(v) => Some(v),
                    _ => None,
                }
            }
        })*
    };
}

from_view!(Status => Status, CdoPage => Cdos, Transfers => Transfers, Fabric => Fabric);

/// The JSON Schemas (draft 2020-12) of the views, one per view under `views`: what
/// `docs/pool-view.schema.json` holds.
pub fn schema() -> serde_json::Value {
    serde_json::json!({
        "title": "maestro pool --json",
        "description": "The views of a running pool as `maestro pool VIEW --json` prints them and `PMIx_Query_info` returns them (maestro.pool.status, maestro.pool.cdos, maestro.pool.transfers, maestro.pool.fabric). Fields are added, never renamed or removed, within one protocol version.",
        "views": {
            "status": schemars::schema_for!(Status),
            "ls": schemars::schema_for!(CdoPage),
            "transfers": schemars::schema_for!(Transfers),
            "fabric": schemars::schema_for!(Fabric),
        }
    })
}

/// The JSON of a view (plain data: serialising cannot fail).
fn json<T: serde::Serialize>(view: &T) -> String {
    serde_json::to_string_pretty(view).unwrap_or_default() + "\n"
}

/// Now, for the watch header.
fn stamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "maestro pool, {:02}:{:02}:{:02} UTC",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

/// Text renderings of the views.
pub mod render {
    use super::view::{AppView, CdoPage, Fabric, Status, TransferView, Transfers};

    /// Columns aligned: the first row holds the headers; numbers (cells that start with a
    /// digit) align right.
    fn table(rows: &[Vec<String>]) -> String {
        let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
            .map(|i| {
                rows.iter()
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(c, &w)| {
                    if c.starts_with(|ch: char| ch.is_ascii_digit()) {
                        format!("{c:>w$}")
                    } else {
                        format!("{c:<w$}")
                    }
                })
                .collect();
            out.push_str("  ");
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }

    /// `1.5 KiB`.
    pub fn bytes(n: u64) -> String {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = n as f64;
        let mut u = 0;
        while v >= 1024.0 && u + 1 < UNITS.len() {
            v /= 1024.0;
            u += 1;
        }
        if u == 0 {
            format!("{n} B")
        } else {
            format!("{v:.1} {}", UNITS[u])
        }
    }

    /// `2.5 s`, `3 min`, `1.2 h`.
    pub fn seconds(s: f64) -> String {
        if s < 120.0 {
            format!("{s:.1} s")
        } else if s < 7200.0 {
            format!("{:.0} min", s / 60.0)
        } else {
            format!("{:.1} h", s / 3600.0)
        }
    }

    /// `850 us`, `26.5 ms`, `3.2 s`.
    pub fn micros(us: u64) -> String {
        if us < 10_000 {
            format!("{us} us")
        } else if us < 10_000_000 {
            format!("{:.1} ms", us as f64 / 1e3)
        } else {
            seconds(us as f64 / 1e6)
        }
    }

    fn opt(s: Option<&str>) -> String {
        s.unwrap_or("-").to_string()
    }

    fn counts<'a>(items: impl Iterator<Item = (&'a String, &'a u64)>) -> String {
        let parts: Vec<String> = items.map(|(k, v)| format!("{k} {v}")).collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }

    fn app_row(a: &AppView, now_ns: i128) -> Vec<String> {
        let since = ((now_ns - a.joined_unix_ns).max(0) as f64) / 1e9;
        vec![
            a.id.to_string(),
            format!("{}:{}", a.component, a.index),
            a.host.clone(),
            a.pid.map_or("-".into(), |p| p.to_string()),
            opt(a.provider.as_deref()),
            opt(a.nic.as_deref()),
            opt(a.address.as_deref()),
            format!("{} ago", seconds(since)),
            a.cdos.to_string(),
            a.offered.to_string(),
            a.demanded.to_string(),
            bytes(a.bytes_sent),
            bytes(a.bytes_received),
        ]
    }

    /// `maestro pool status`.
    pub fn status(s: &Status) -> String {
        let total: u64 = s.operations.values().sum();
        let mut out = format!(
            "pool manager of workflow {:?} (protocol {}), up {}, {total} operations ({:.0}/s), {} resident, {} inline\n",
            s.workflow,
            s.protocol,
            seconds(s.uptime_ms as f64 / 1e3),
            s.operations_per_second,
            s.memory_bytes.map_or("?".into(), bytes),
            bytes(s.inline_bytes),
        );
        out += &format!(
            "apps {}, observers {}, subscriptions {}, transfers in flight {}\n",
            s.app_count, s.observer_count, s.subscriptions, s.transfers_in_flight
        );
        out += &format!("CDOs: {}\n", counts(s.cdos.iter()));
        out += &format!("operations: {}\n", counts(s.operations.iter()));
        if s.apps.is_empty() {
            return out + "no apps joined\n";
        }
        let now_ns = super::now_ns();
        let mut rows = vec![
            [
                "app",
                "component",
                "host",
                "pid",
                "provider",
                "nic",
                "address",
                "joined",
                "cdos",
                "offered",
                "demanded",
                "sent",
                "received",
            ]
            .map(String::from)
            .to_vec(),
        ];
        rows.extend(s.apps.iter().map(|a| app_row(a, now_ns)));
        out + "\n" + &table(&rows)
    }

    /// `maestro pool ls`.
    pub fn cdos(page: &CdoPage, attributes: bool) -> String {
        let mut rows = vec![
            [
                "id",
                "name",
                "size",
                "state",
                "app",
                "providers",
                "waiting",
                "age",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for c in &page.cdos {
            rows.push(vec![
                format!("{:#x}", c.id),
                c.name.clone(),
                c.size.map_or("-".into(), bytes),
                c.state.clone(),
                c.app.clone(),
                if c.providers.is_empty() {
                    "-".into()
                } else {
                    c.providers.join(",")
                },
                c.waiting.to_string(),
                seconds(c.age_s as f64),
            ]);
        }
        let mut out = table(&rows);
        if attributes {
            for c in page.cdos.iter().filter(|c| !c.attributes.is_empty()) {
                out += &format!("\n  {}:\n", c.name);
                for (k, v) in &c.attributes {
                    out += &format!("    {k} = {v:?}\n");
                }
            }
        }
        out += &format!(
            "\n{} listed of {} live CDOs{}\n",
            page.cdos.len(),
            page.total,
            page.next.map_or(String::new(), |n| format!(
                " (more after id {n:#x}: --limit 0 lists all)"
            ))
        );
        out
    }

    fn transfer_rows(list: &[TransferView]) -> String {
        let mut rows = vec![
            [
                "id",
                "name",
                "from",
                "to",
                "transport",
                "provider",
                "nic",
                "bytes",
                "time",
                "rate",
                "outcome",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for t in list {
            let secs = t.elapsed_us as f64 / 1e6;
            let rate = if secs > 0.0 {
                format!("{}/s", bytes((t.bytes as f64 / secs) as u64))
            } else {
                "-".into()
            };
            let outcome = match (t.ok, &t.error) {
                (None, _) => "in flight".to_string(),
                (Some(true), _) => "done".to_string(),
                (Some(false), e) => format!("failed: {}", e.as_deref().unwrap_or("?")),
            };
            rows.push(vec![
                t.id.to_string(),
                t.name.clone(),
                t.from.clone(),
                t.to.clone(),
                t.transport.name().to_string(),
                opt(t.provider.as_deref()),
                opt(t.nic.as_deref()),
                bytes(t.bytes),
                micros(t.elapsed_us),
                rate,
                outcome,
            ]);
        }
        table(&rows)
    }

    /// `maestro pool transfers`.
    pub fn transfers(t: &Transfers) -> String {
        let mut out = format!(
            "transfers: {} in flight, {} completed, {} failed since the start\n",
            t.in_flight_total, t.completed, t.failed
        );
        if !t.in_flight.is_empty() {
            out += "\nin flight:\n";
            out += &transfer_rows(&t.in_flight);
        }
        if !t.recent.is_empty() {
            out += &format!("\nrecent (last {}):\n", t.recent.len());
            out += &transfer_rows(&t.recent);
        }
        out
    }

    /// `maestro pool fabric`.
    pub fn fabric(f: &Fabric) -> String {
        let mut out = String::from("traffic per NIC and provider:\n");
        if f.nics.is_empty() {
            out += "  nothing moved yet\n";
        } else {
            let mut rows = vec![
                [
                    "host",
                    "nic",
                    "provider",
                    "out",
                    "in",
                    "transfers out",
                    "transfers in",
                    "failures",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for n in &f.nics {
                rows.push(vec![
                    n.host.clone(),
                    n.nic.clone(),
                    if n.provider.is_empty() {
                        "-".into()
                    } else {
                        n.provider.clone()
                    },
                    bytes(n.bytes_out),
                    bytes(n.bytes_in),
                    n.transfers_out.to_string(),
                    n.transfers_in.to_string(),
                    n.failures.to_string(),
                ]);
            }
            out += &table(&rows);
        }
        let by: Vec<String> = f
            .transports
            .iter()
            .map(|(k, t)| {
                format!(
                    "{k} {} in {} ({} failed)",
                    bytes(t.bytes),
                    t.transfers,
                    t.failures
                )
            })
            .collect();
        out += &format!(
            "\nby transport: {}\n",
            if by.is_empty() {
                "none".into()
            } else {
                by.join("; ")
            }
        );
        out += &format!(
            "links down: {}\n",
            if f.links_down.is_empty() {
                "none".into()
            } else {
                f.links_down.join(", ")
            }
        );
        if !f.apps.is_empty() {
            out += "\nNIC of each app:\n";
            let mut rows = vec![
                [
                    "app",
                    "component",
                    "host",
                    "nics",
                    "provider",
                    "address",
                    "why",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for a in &f.apps {
                rows.push(vec![
                    a.app.to_string(),
                    a.label.clone(),
                    a.host.clone(),
                    if a.nics.is_empty() {
                        "-".into()
                    } else {
                        a.nics.join(",")
                    },
                    opt(a.provider.as_deref()),
                    opt(a.address.as_deref()),
                    opt(a.reason.as_deref()),
                ]);
            }
            out += &table(&rows);
        }
        if !f.events.is_empty() {
            out += "\nfabric events:\n";
            for e in &f.events {
                out += &format!("  {}\n", e.detail);
            }
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn sizes_and_times_read_as_people_write_them() {
            assert_eq!(bytes(1000), "1000 B");
            assert_eq!(bytes(1536), "1.5 KiB");
            assert_eq!(bytes(16 << 20), "16.0 MiB");
            assert_eq!(seconds(2.25), "2.2 s");
            assert_eq!(seconds(600.0), "10 min");
            assert_eq!(micros(850), "850 us");
            assert_eq!(micros(26_468), "26.5 ms");
        }

        #[test]
        fn tables_align_numbers_right_and_text_left() {
            let rows = vec![
                vec!["name".to_string(), "bytes".to_string()],
                vec!["a".to_string(), "7".to_string()],
                vec!["longer".to_string(), "1000".to_string()],
            ];
            assert_eq!(
                table(&rows),
                "  name    bytes\n  a           7\n  longer   1000\n"
            );
        }
    }
}

/// Now in ns since the Unix epoch.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// Answers for the launcher's PMIx host (`maestro run`): the JSON of one view of the pool
/// of `workflow` (or the only one `pm_infos` holds), or `{"error": ...}` saying why not.
pub fn launcher_answer(
    pm_infos: &[(String, String)],
    key: &str,
    qualifiers: &[Info],
    timeout: Duration,
) -> String {
    match launcher_view(pm_infos, key, qualifiers, timeout) {
        Ok(json) => json,
        Err(e) => serde_json::json!({ "error": e }).to_string(),
    }
}

fn launcher_view(
    pm_infos: &[(String, String)],
    key: &str,
    qualifiers: &[Info],
    timeout: Duration,
) -> Result<String, String> {
    let wanted = pmix::find(qualifiers, maestro_keys::POOL_WORKFLOW).and_then(Value::as_str);
    let info = match (wanted, pm_infos) {
        (Some(w), _) => pm_infos.iter().find(|(name, _)| name == w).ok_or_else(|| {
            format!("no pool manager of workflow {w:?} is published in this launcher")
        })?,
        (None, [one]) => one,
        (None, []) => return Err("no pool manager is published in this launcher's jobs".into()),
        (None, _) => {
            let names: Vec<&str> = pm_infos.iter().map(|(n, _)| n.as_str()).collect();
            return Err(format!(
                "several pools ({}); qualify the query with {}",
                names.join(", "),
                maestro_keys::POOL_WORKFLOW
            ));
        }
    };
    let info = PmInfo::parse(&info.1).map_err(|e| format!("the published PM info: {e}"))?;
    let query = match key {
        maestro_keys::POOL_STATUS => Query::Status,
        maestro_keys::POOL_TRANSFERS => Query::Transfers,
        maestro_keys::POOL_FABRIC => Query::Fabric,
        maestro_keys::POOL_CDOS => {
            let selector =
                match pmix::find(qualifiers, maestro_keys::POOL_SELECTOR).and_then(Value::as_str) {
                    Some(text) => {
                        let schemas = Schemas::from_env().map_err(|e| e.to_string())?;
                        let s = Selector::parse(text, "", &schemas)
                            .map_err(|e| format!("{}: {e}", maestro_keys::POOL_SELECTOR))?;
                        Some(Box::new(s.expr().clone()))
                    }
                    None => None,
                };
            Query::Ls(Ls {
                selector,
                after: pmix::find(qualifiers, maestro_keys::POOL_AFTER).and_then(Value::as_u64),
                limit: view::MAX_PAGE,
                attributes: true,
            })
        }
        other => return Err(format!("{other} is no pool view")),
    };
    let mut observer =
        pool::Observer::connect(&info, "maestro-run", timeout).map_err(|e| e.to_string())?;
    let view = observer.query(query).map_err(|e| e.to_string())?;
    let json = match view {
        View::Status(v) => serde_json::to_string(&v),
        View::Cdos(v) => serde_json::to_string(&v),
        View::Transfers(v) => serde_json::to_string(&v),
        View::Fabric(v) => serde_json::to_string(&v),
    };
    json.map_err(|e| e.to_string())
}
