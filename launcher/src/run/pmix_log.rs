//! What `PMIx_Log` does under `maestro run`: each channel a client or tool names is
//! honoured here, on the launcher's own output, with the rank in front as `--label` writes
//! it (`[rank] `; `[nspace:rank] ` for a tool), a timestamp when asked
//! (`PMIX_LOG_GENERATE_TIMESTAMP`, or the request's `PMIX_LOG_TIMESTAMP`), and the source
//! the request names (`PMIX_LOG_SOURCE`):
//! - `PMIX_LOG_STDERR`, `PMIX_LOG_STDOUT`: a line on the launcher's stderr or stdout;
//! - `PMIX_LOG_SYSLOG`, `PMIX_LOG_LOCAL_SYSLOG`: the local syslog (`LOG_ERR` unless
//!   `PMIX_LOG_SYSLOG_PRI` says), when there is one (`/dev/log`);
//! - anything else (email, global syslog, job records) is not honoured.
//!
//! With `PMIX_LOG_ONCE` only the first channel that works is used. The answer is success
//! when every channel named was honoured, `PMIX_ERR_PARTIAL_SUCCESS` when some were, and
//! `PMIX_ERR_NOT_SUPPORTED` when none was.

use std::io::Write;

use pmix::{Info, Proc, Status, Value, keys};

/// A channel a log request names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Channel {
    Stderr,
    Stdout,
    Syslog,
    Unsupported,
}

fn channel(key: &str) -> Channel {
    match key {
        k if k == keys::LOG_STDERR => Channel::Stderr,
        k if k == keys::LOG_STDOUT => Channel::Stdout,
        k if k == keys::LOG_SYSLOG || k == keys::LOG_LOCAL_SYSLOG => Channel::Syslog,
        _ => Channel::Unsupported,
    }
}

/// The line a log request writes: `[time ]<who> <message>`.
fn line(who: &str, stamp: Option<i128>, message: &Value) -> String {
    let text = match message {
        Value::String(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let text = text.trim_end_matches('\n');
    match stamp {
        Some(ns) => format!("{} {who} {text}", pool::schema::format_timestamp(ns)),
        None => format!("{who} {text}"),
    }
}

/// How a process is named in front of its log lines: `[rank]` for the job's ranks.
fn who(proc: &Proc, job: &str) -> String {
    if proc.nspace == job {
        format!("[{}]", proc.rank)
    } else {
        format!("[{proc}]")
    }
}

/// The time a request asks its lines to carry, in nanoseconds since the epoch.
fn stamp(directives: &[Info]) -> Option<i128> {
    if let Some(t) = pmix::find(directives, keys::LOG_TIMESTAMP).and_then(Value::as_u64) {
        return Some(i128::from(t) * 1_000_000_000);
    }
    matches!(
        pmix::find(directives, keys::LOG_GENERATE_TIMESTAMP),
        Some(Value::Bool(true))
    )
    .then(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0))
    })
}

/// Writes to the local syslog, if there is one.
fn syslog(priority: i32, text: &str) -> bool {
    if !std::path::Path::new("/dev/log").exists() {
        return false;
    }
    let Ok(text) = std::ffi::CString::new(text.replace('\0', " ")) else {
        return false;
    };
    // SAFETY: a valid format string and a NUL-terminated argument.
    unsafe { libc::syslog(priority, c"%s".as_ptr(), text.as_ptr()) };
    true
}

/// Carries out one `PMIx_Log` request from `proc` of job `job` and says how it went.
pub(super) fn log(proc: &Proc, job: &str, data: &[Info], directives: &[Info]) -> Status {
    let source = match pmix::find(directives, keys::LOG_SOURCE) {
        Some(Value::Proc(p)) => p.clone(),
        _ => proc.clone(),
    };
    let who = who(&source, job);
    let stamp = stamp(directives);
    let once = matches!(
        pmix::find(directives, keys::LOG_ONCE),
        Some(Value::Bool(true))
    );
    let priority = pmix::find(directives, keys::LOG_SYSLOG_PRI)
        .and_then(Value::as_u64)
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or(libc::LOG_ERR);
    let (mut asked, mut done) = (0, 0);
    for d in data {
        let ch = channel(&d.key);
        asked += 1;
        let text = line(&who, stamp, &d.value);
        let ok = match ch {
            Channel::Stderr => writeln!(std::io::stderr().lock(), "{text}").is_ok(),
            Channel::Stdout => {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
            }
            Channel::Syslog => syslog(priority, &format!("maestro run: {text}")),
            Channel::Unsupported => false,
        };
        if ok {
            done += 1;
            if once {
                return Status::SUCCESS;
            }
        }
    }
    if done == asked {
        Status::SUCCESS
    } else if done > 0 {
        Status::PARTIAL_SUCCESS
    } else {
        Status::NOT_SUPPORTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_the_rank_and_carry_the_time_when_asked() {
        let rank = Proc::new("maestro.job.7", 3);
        let tool = Proc::new("maestro.tool.0", 0);
        let msg = Value::String("hello\n".into());
        assert_eq!(line(&who(&rank, "maestro.job.7"), None, &msg), "[3] hello");
        assert_eq!(
            line(&who(&tool, "maestro.job.7"), Some(1_000_000_000), &msg),
            format!("1970-01-01T00:00:01.000Z [{tool}] hello")
        );
        assert_eq!(channel(keys::LOG_STDOUT), Channel::Stdout);
        assert_eq!(channel(keys::LOG_LOCAL_SYSLOG), Channel::Syslog);
        assert_eq!(channel("pmix.log.email"), Channel::Unsupported);
    }

    #[test]
    fn statuses_say_what_was_honoured() {
        let me = Proc::new("job", 0);
        let out = |k: &str| Info::new(k, Value::String("pmix_log unit test".into()));
        assert_eq!(
            log(&me, "job", &[out(keys::LOG_STDERR)], &[]),
            Status::SUCCESS
        );
        assert_eq!(
            log(&me, "job", &[out("pmix.log.email")], &[]),
            Status::NOT_SUPPORTED
        );
        assert_eq!(
            log(
                &me,
                "job",
                &[out(keys::LOG_STDERR), out("pmix.log.email")],
                &[]
            ),
            Status::PARTIAL_SUCCESS
        );
        let once = [Info::new(keys::LOG_ONCE, Value::Bool(true))];
        assert_eq!(
            log(
                &me,
                "job",
                &[out("pmix.log.email"), out(keys::LOG_STDERR)],
                &once
            ),
            Status::SUCCESS
        );
    }
}
