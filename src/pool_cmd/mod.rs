//! `maestro pool`: a live, read-only view of a running pool: `status` (the PM, its apps, CDO
//! counts), `ls [SELECTOR]` (CDOs, paged), `transfers` (in flight and recent) and
//! `fabric` (the traffic report per NIC and provider). Text tables, or the documented JSON
//! (`--json`, schema in `docs/pool-view.schema.json`); `--watch SECONDS` redraws. One
//! command changes the pool: `discard NAME` ends the CDOs the pool keeps under NAME (it
//! joins as an app of the workflow, `maestro-pool`, for that one call).
//!
//! The PM is found, in this order, from `--info`, `--info-file` (as `maestro pm
//! --info-file` writes it), a running `maestro run --tool-support` (`--pid`, `--uri`: its
//! PMIx host asks the PM and answers `PMIx_Query_info`), the PM info a job of this user
//! published on this node for `--workflow`, `MSTRO_POOL_MANAGER_INFO`, and the only PM
//! info published on this node.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pmix::{Info, Tool, Value};
use pool::bootstrap::{self, PmInfo};
use pool::selector::Expr;
use pool::view::{CdoPage, Fabric, Ls, Query, Status, Transfers, View};

use launcher::attach::LauncherArgs;

use pool_tools::render;

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
    /// End the CDOs the pool keeps under NAME (their producers handed them over at
    /// withdraw): no longer demandable, their files removed.
    Discard,
}

/// The command line of `maestro pool`.
#[derive(Clone, Debug, clap::Args)]
pub struct PoolArgs {
    /// What to show.
    #[arg(value_enum)]
    which: Which,
    /// `ls`: a selector over attributes, as subscriptions take them
    /// (`(= .maestro.core.cdo.name "field-3")`; relative keys with --namespace).
    /// `discard`: the CDOs' name.
    #[arg(value_name = "SELECTOR|NAME")]
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
    /// Redraw every SECONDS (at least 0.1) until interrupted.
    #[arg(long, value_parser = pool_tools::cli::parse_interval, allow_negative_numbers = true)]
    watch: Option<Duration>,
    /// `ls`: most CDOs listed (0: all, page by page).
    #[arg(long, default_value = "1000", value_parser = parse_limit, allow_negative_numbers = true)]
    limit: usize,
    /// `ls`: show each CDO's attributes.
    #[arg(long)]
    attributes: bool,
    /// `ls`: the namespace of relative keys in SELECTOR (e.g. `.user.`).
    #[arg(long, default_value = "")]
    namespace: String,
    /// Seconds to wait for each answer.
    #[arg(long, default_value = "10", value_parser = pool_tools::cli::parse_timeout, allow_negative_numbers = true)]
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
    Query(#[from] launcher::attach::QueryError),
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
    if args.which == Which::Discard {
        return discard(args);
    }
    if args.selector.is_some() && args.which != Which::Ls {
        return Err(PoolCmdError::Selector(
            "only `maestro pool ls` takes a selector".into(),
        ));
    }
    let mut unknown = Vec::new();
    let selector = args
        .selector
        .as_deref()
        .map(|text| {
            let (expr, keys) = pool_tools::selector::parse_checked(text, &args.namespace)
                .map_err(|e| PoolCmdError::Selector(format!("{text:?}: {e}")))?;
            unknown = keys;
            Ok::<_, PoolCmdError>((text.to_string(), expr))
        })
        .transpose()?;
    let mut out = std::io::stdout().lock();
    if args.which == Which::Schema {
        out.write_all(json(&schema()).as_bytes())?;
        return Ok(());
    }
    let mut source = open(args)?;
    let terminal = std::io::IsTerminal::is_terminal(&out);
    loop {
        let (mut text, nothing) = show(&mut source, args, selector.as_ref())?;
        // Said once, and only when nothing matched: the pool's apps may load schemas this
        // process does not (their CDOs then match, and nothing is wrong).
        if nothing {
            for key in std::mem::take(&mut unknown) {
                eprintln!(
                    "maestro pool: nothing matched, and no schema known here declares {key}: check its spelling, or give its schema with MSTRO_SCHEMA_PATH and MSTRO_SCHEMA_LIST"
                );
            }
        }
        match (args.watch, terminal) {
            // Home and clear, as `watch` and `top` redraw; the view cut to the terminal
            // (asked each time: it may have been resized).
            (Some(_), true) => {
                write!(out, "\x1b[H\x1b[2J{}\n\n", stamp())?;
                if let Some((rows, cols)) = terminal_size() {
                    text = render::fit(&text, rows, cols, 2);
                }
            }
            // Into a pipe or a file: one view after the other, no escapes (a --json watch
            // is a stream of JSON documents).
            (Some(_), false) if !args.json => writeln!(out, "{}\n", stamp())?,
            _ => {}
        }
        out.write_all(text.as_bytes())?;
        out.flush()?;
        match args.watch {
            Some(every) => std::thread::sleep(every),
            None => return Ok(()),
        }
    }
}

/// Parses `--limit`: a count of CDOs, 0 for all.
///
/// # Errors
/// Anything but a whole number from 0 (`-1`, say): what to give instead.
fn parse_limit(s: &str) -> Result<usize, String> {
    s.parse().map_err(|_| {
        format!("{s:?} is not a number of CDOs: give 0 to list all of them, or how many at most")
    })
}

/// `maestro pool discard NAME`: joins the PM as an app (`maestro-pool`) and has it end
/// the CDOs it keeps under NAME; says how many.
fn discard(args: &PoolArgs) -> Result<(), PoolCmdError> {
    let Some(name) = args.selector.as_deref() else {
        return Err(PoolCmdError::Selector(
            "`maestro pool discard` takes the name of the kept CDOs to end".into(),
        ));
    };
    let info = match locate(args)? {
        Located::Pm(info) => info,
        Located::Launcher(_) => {
            return Err(PoolCmdError::NotFound(
                "`maestro pool discard` joins the pool: give the PM info (--info, --info-file, --workflow or MSTRO_POOL_MANAGER_INFO), not a launcher".into(),
            ));
        }
    };
    let opts = pool::JoinOptions::new("maestro-pool", i64::from(std::process::id()))
        .isolated()
        .timeout(args.timeout);
    let client = pool::Client::join(&info, opts)?;
    let count = client.discard(name)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let v = serde_json::json!({ "name": name, "discarded": count });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out, "{name}: {count} kept CDO(s) discarded")?;
    }
    Ok(())
}

/// Where the views come from, once found: the PM's info, or a launcher to ask.
enum Located {
    Pm(PmInfo),
    Launcher(Tool),
}

/// Finds the PM (see the module docs) and connects.
fn open(args: &PoolArgs) -> Result<Source, PoolCmdError> {
    match locate(args)? {
        Located::Pm(info) => {
            let observer = pool::Observer::connect(&info, "maestro-pool", args.timeout)?;
            Ok(Source::Pm(Box::new(observer)))
        }
        Located::Launcher(tool) => Ok(Source::Launcher {
            tool,
            workflow: args.workflow.clone(),
            timeout: args.timeout,
        }),
    }
}

/// Finds the PM (see the module docs).
fn locate(args: &PoolArgs) -> Result<Located, PoolCmdError> {
    let parse = |what: String, text: &str| {
        PmInfo::parse(text).map_err(|error| PoolCmdError::Info { what, error })
    };
    let info = if let Some(text) = &args.info {
        parse("--info".into(), text)?
    } else if let Some(path) = &args.info_file {
        // Only the user's own file is believed: it decides where this process connects.
        PmInfo::from_file(path)
            .map_err(|e| PoolCmdError::NotFound(format!("--info-file: {e}")))?
            .ok_or_else(|| {
                PoolCmdError::NotFound(format!(
                    "--info-file {}: no PM info there (yet); give the file `maestro pm --info-file` writes",
                    path.display()
                ))
            })?
    } else if let Some(target) = args.launcher.target() {
        launcher::attach::check_target(&target)?;
        let tool = Tool::connect(&target, 3).map_err(launcher::attach::QueryError::from)?;
        return Ok(Located::Launcher(tool));
    } else {
        // A workflow named is looked for first; then the environment's PM, which the user
        // set on purpose, before the only one published on this node.
        let named = match args.workflow.as_deref() {
            Some(w) => published(Some(w))?,
            None => None,
        };
        let from_env = || {
            PmInfo::from_env().map_err(|error| PoolCmdError::Info {
                what: bootstrap::PM_INFO_ENV.into(),
                error,
            })
        };
        match named {
            Some(info) => info,
            None => match from_env()? {
                Some(info) => info,
                None if args.workflow.is_some() => {
                    return Err(PoolCmdError::NotFound(format!(
                        "no pool manager of workflow {:?} is published on this node, and MSTRO_POOL_MANAGER_INFO is not set: give --info, --info-file or --pid, or run this where the workflow runs",
                        args.workflow.as_deref().unwrap_or_default()
                    )));
                }
                None => published(None)?.ok_or_else(|| {
                    PoolCmdError::NotFound(
                        "no pool manager found: give --info, --info-file, --pid of a maestro run --tool-support, or --workflow of a job of yours on this node (none is published here), or set MSTRO_POOL_MANAGER_INFO".into(),
                    )
                })?,
            },
        }
    };
    Ok(Located::Pm(info))
}

/// The PM info of `workflow` (or of the only workflow) that a job of this user published
/// on this node.
fn published(workflow: Option<&str>) -> Result<Option<PmInfo>, PoolCmdError> {
    let prefix = format!("{}.", maestro_keys::PM_INFO);
    let dir = launcher::publish::NodeDirectory::default_dir()
        .map_err(safefs::Error::into_io)
        .and_then(|d| launcher::publish::NodeDirectory::open(&d));
    let dir = match dir {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(PoolCmdError::NotFound(format!(
                "the node's publications cannot be read: {e}"
            )));
        }
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
/// The view `args` asks for, rendered; and whether it is a listing that matched nothing.
fn show(
    source: &mut Source,
    args: &PoolArgs,
    selector: Option<&Selected>,
) -> Result<(String, bool), PoolCmdError> {
    if args.which == Which::Ls {
        let page = list(source, args, selector)?;
        let nothing = page.cdos.is_empty();
        let text = if args.json {
            json(&page)
        } else {
            render::cdos(&page, args.attributes)
        };
        return Ok((text, nothing));
    }
    let text = match args.which {
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
        Which::Discard => unreachable!("run() discards before showing anything"),
        Which::Ls => unreachable!("listed above"),
    };
    Ok((text, false))
}

/// A selector as given and as parsed.
type Selected = (String, Box<Expr>);

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
                    .map_err(launcher::attach::QueryError::from)?;
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

/// The rows and columns of the terminal standard output is, if it is one.
fn terminal_size() -> Option<(usize, usize)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ only writes the struct passed; a descriptor that is no terminal
    // makes it fail.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_row > 0 && size.ws_col > 0)
        .then(|| (usize::from(size.ws_row), usize::from(size.ws_col)))
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
