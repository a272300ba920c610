//! What every subcommand's command line shares: value parsers with messages that say what
//! to give, and how a failed subcommand reports.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Arg, ArgAction, Command};

/// A parser of a whole number of `what` (ranks, tasks), 1 or more: negative and zero
/// values are refused with a message saying so (clap alone would call `-1` an unknown
/// option).
pub fn positive(what: &'static str) -> impl Fn(&str) -> Result<u32, String> + Clone {
    move |s: &str| match s.trim().parse::<i64>() {
        Ok(n) if n >= 1 => u32::try_from(n).map_err(|_| format!("{n} {what} are too many")),
        Ok(n) => Err(format!("{n} {what}: 1 or more are needed")),
        Err(_) => Err(format!("{s:?} is not a number of {what}")),
    }
}

/// The longest number of seconds a command line takes (about 31 years).
const MAX_SECONDS: f64 = 1e9;

/// Parses a number of seconds from 0 up (`2`, `0.5`) into a duration.
///
/// # Errors
/// Not a number, negative, or at least 10^9 seconds (about 31 years): a message saying which.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let Ok(v) = s.trim().parse::<f64>() else {
        return Err(format!("{s:?} is not a number of seconds (e.g. 2 or 0.5)"));
    };
    if v.is_nan() || v < 0.0 {
        return Err(format!(
            "{s:?} is not a number of seconds from 0 up (e.g. 2 or 0.5)"
        ));
    }
    if v >= MAX_SECONDS {
        return Err(format!(
            "{s:?} seconds is longer than a command line takes: give less than {MAX_SECONDS:e} (about 31 years)"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Parses a time limit: as [`parse_duration`], more than 0 (a limit of 0 would end what
/// it limits before it began).
///
/// # Errors
/// As [`parse_duration`]; 0.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!(
            "{s:?}: a time limit of 0 ends what it limits at once; give more than 0 seconds (or leave the option out)"
        ));
    }
    Ok(d)
}

/// Shortest redraw interval of `--watch`: faster redraws show nothing a person can read
/// and cost the pool manager a query each.
pub const MIN_WATCH: Duration = Duration::from_millis(100);

/// Parses a redraw interval: as [`parse_duration`], at least [`MIN_WATCH`].
///
/// # Errors
/// As [`parse_duration`]; less than [`MIN_WATCH`].
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < MIN_WATCH {
        return Err(format!(
            "{s:?}: redraw at most every 0.1 s (faster shows nothing new and costs the pool manager a query each time)"
        ));
    }
    Ok(d)
}

/// Parses a number of bytes as [`parse_size`] does, 0 included (a budget of 0 turns its
/// feature off).
///
/// # Errors
/// As [`parse_size`].
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_size(s)
}

/// Longest workflow name: it names a PMIx publication (`maestro.pool.pm-info.<name>`,
/// keys of at most 511 bytes) and the pool manager's files.
pub const MAX_WORKFLOW: usize = 255;

/// Parses a workflow name: 1 to [`MAX_WORKFLOW`] bytes, no spaces or control characters.
///
/// # Errors
/// Empty, too long, or holding a space or control character: a message saying which.
pub fn parse_workflow(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the workflow name is empty: give one (e.g. --workflow forecast)".into());
    }
    if s.len() > MAX_WORKFLOW {
        return Err(format!(
            "a workflow name of {} bytes: at most {MAX_WORKFLOW}",
            s.len()
        ));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{:?}: a workflow name holds no spaces or control characters",
            shortened(s)
        ));
    }
    Ok(s.to_string())
}

/// The longest value a command-line error quotes whole.
const QUOTED_MAX: usize = 64;

/// A value no longer than 64 bytes as it is; a longer one (a 10,000-byte
/// `--workflow`) as its start and its length.
pub fn shortened(value: &str) -> String {
    if value.len() <= QUOTED_MAX {
        return value.to_string();
    }
    let mut end = QUOTED_MAX - 8;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &value[..end], value.len())
}

/// `e` with the value it quotes [`shortened`]: an error message says which value was
/// wrong, it does not echo pages of it.
pub fn shorten_value(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    if let Some(ContextValue::String(v)) = e.get(ContextKind::InvalidValue)
        && v.len() > QUOTED_MAX
    {
        let short = shortened(v);
        e.insert(ContextKind::InvalidValue, ContextValue::String(short));
    }
    e
}

/// Parses one size (`4096`, `64K`, `2G`: powers of 1024).
pub fn parse_size(s: &str) -> Result<usize, String> {
    match parse_sizes(s)?.as_slice() {
        [one] => Ok(*one),
        _ => Err(format!("{s:?}: give one size")),
    }
}

/// Parses an address to listen on: `HOST:PORT`, or `:PORT` for loopback (an endpoint
/// open to every interface is asked for by name: `0.0.0.0:PORT`).
pub fn parse_listen_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("127.0.0.1:{port}"),
        None => text.to_string(),
    };
    full.parse().map_err(|_| {
        format!(
            "{text:?} is not an address to listen on: give HOST:PORT (e.g. 127.0.0.1:9464, 0.0.0.0:9464 for every interface) or :PORT (loopback)"
        )
    })
}

/// Parses a progress mode of the fabric layer.
pub fn parse_progress(s: &str) -> Result<fabric::ProgressMode, String> {
    fabric::ProgressMode::parse(s).ok_or_else(|| format!("{s:?}: use block or spin"))
}

/// The exit of a subcommand: success, or its error printed as `maestro <what>: <error>`
/// and exit code `code` (2 for usage and setup errors, 1 for helper processes).
pub fn exit<E: std::fmt::Display>(what: &str, result: Result<(), E>, code: u8) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("maestro {what}: {e}");
            ExitCode::from(code)
        }
    }
}

/// Parses `4K,64K,1M,16M,256M` (K, M, G are powers of 1024; plain numbers are bytes).
///
/// # Errors
/// A message naming the piece that is not a size.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let v = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(crate::size::parse)
        .collect::<Result<Vec<_>, _>>()?;
    if v.is_empty() {
        return Err("no sizes given".into());
    }
    Ok(v)
}

/// The options of `cmd` (invoked as `path`, e.g. `maestro pm`) and of each of its visible
/// subcommands as Markdown tables, a section each: the configuration reference's part of a
/// program (`maestro reference`, `maestro-bench reference`).
pub fn options_reference(cmd: &Command, path: &str) -> String {
    let mut out = String::new();
    command(&mut out, cmd, path);
    out
}

/// The section of `cmd` (named `path`) and of its visible subcommands.
fn command(out: &mut String, cmd: &Command, path: &str) {
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() {
        out.push_str(&format!("\n## `{path}`\n\n"));
        if let Some(about) = cmd.get_about() {
            out.push_str(&format!("{}.\n\n", about.to_string().trim_end_matches('.')));
        }
        out.push_str("| option | default | what it does |\n|---|---|---|\n");
        for a in args {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                markdown_cell(&name(a)),
                markdown_cell(&default(a)),
                markdown_cell(&help(a))
            ));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        command(out, sub, &format!("{path} {}", sub.get_name()));
    }
}

/// How a user writes `a`: `-n, --np <NPROCS>`, `<COMMAND>...`.
fn name(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    if a.is_positional() {
        let many = matches!(a.get_num_args(), Some(r) if r.max_values() > 1);
        return format!("`{value}{}`", if many { "..." } else { "" });
    }
    let mut names = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    let takes = a.get_action().takes_values();
    format!(
        "`{}{}`",
        names.join(", "),
        if takes {
            format!(" {value}")
        } else {
            String::new()
        }
    )
}

/// What holds when `a` is not given: its default, its environment variable.
fn default(a: &Arg) -> String {
    let mut said = Vec::new();
    if a.get_action().takes_values() {
        let d: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        if !d.is_empty() {
            said.push(d.join(", "));
        }
    }
    if let Some(env) = a.get_env() {
        said.push(format!("`{}`", env.to_string_lossy()));
    }
    if said.is_empty() {
        "-".into()
    } else {
        said.join(", or ")
    }
}

/// What `a` does, with the values it takes and its aliases.
fn help(a: &Arg) -> String {
    let mut text = a.get_help().map(ToString::to_string).unwrap_or_default();
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && !matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        text.push_str(&format!(" (one of {})", values.join(", ")));
    }
    let aliases: Vec<String> = a
        .get_visible_aliases()
        .unwrap_or_default()
        .iter()
        .map(|l| format!("`--{l}`"))
        .collect();
    if !aliases.is_empty() {
        text.push_str(&format!(" (also {})", aliases.join(", ")));
    }
    text
}

/// `text` as one table cell: on one line, its bars escaped.
pub fn markdown_cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_refuse() {
        assert_eq!(
            parse_sizes("4K,64k,1M,16M,256M").expect("ok"),
            [4096, 65536, 1 << 20, 16 << 20, 256 << 20]
        );
        assert_eq!(parse_sizes("100").expect("ok"), [100]);
        assert!(parse_sizes("").is_err());
        assert!(parse_sizes("4Q").is_err());
        assert!(parse_sizes("0").is_err());
        assert!(parse_sizes("99G").is_err());
    }

    #[test]
    fn listen_addresses_parse_or_say_what_to_give() {
        assert_eq!(
            parse_listen_addr(":9464"),
            Ok("127.0.0.1:9464".parse().expect("addr"))
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:0"),
            Ok("127.0.0.1:0".parse().expect("addr"))
        );
        let e = parse_listen_addr("localhost").expect_err("no port");
        assert!(e.contains("HOST:PORT"), "{e}");
    }

    #[test]
    fn values_parse_or_say_what_to_give() {
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(
            parse_duration("-1")
                .expect_err("negative")
                .contains("seconds")
        );
        assert!(parse_duration("soon").is_err());
        assert!(
            parse_duration("1e300")
                .expect_err("too long")
                .contains("longer")
        );
        assert!(parse_duration("NaN").is_err());
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(
            parse_timeout("0")
                .expect_err("zero")
                .contains("more than 0")
        );
        assert_eq!(parse_timeout("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_interval("0").expect_err("zero").contains("0.1 s"));
        assert_eq!(parse_interval("0.1"), Ok(MIN_WATCH));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert!(
            parse_bytes("-1")
                .expect_err("negative")
                .contains("not a size")
        );
        assert!(parse_workflow("").expect_err("empty").contains("empty"));
        assert!(
            parse_workflow(&"w".repeat(5000))
                .expect_err("long")
                .contains("at most")
        );
        assert!(parse_workflow("a b").is_err());
        assert_eq!(parse_workflow("forecast-2026"), Ok("forecast-2026".into()));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert!(parse_size("1K,2K").expect_err("two").contains("one size"));
        assert_eq!(parse_progress("spin"), Ok(fabric::ProgressMode::Spin));
        assert!(
            parse_progress("fast")
                .expect_err("bad")
                .contains("block or spin")
        );
    }
}
