//! A standby pool manager's watch over the active one of its workflow (`maestro pm
//! --standby-for`, see docs/developers/failover.md): it joins the active one as an
//! observer (named [`proto::STANDBY`], so the active one lists it in its status), keeps
//! the list of its apps, and says when it is gone on evidence, not on a timeout alone:
//! the observer connection ended without the BYE of a PM that stops, and none of the
//! active one's endpoints accepts a connection any more (a PM restarted meanwhile, found
//! by reading its info again, is watched instead). Then the standby takes over, expecting
//! those apps back ([`crate::PmConfig::expect`]).

use std::time::{Duration, Instant};

use crate::bootstrap::PmInfo;
use crate::client::{Ended, Observer};
use crate::proto::{self, AppId};
use crate::view::{Query, View};

/// How the watch ended.
#[derive(Debug)]
pub enum Watched {
    /// The active PM stopped on purpose (the workflow ended): nothing to take over.
    Stopped,
    /// The active PM is gone: its info (the workflow, its secret) and the apps it had.
    Gone {
        /// Its PM info as last read.
        info: PmInfo,
        /// Its apps as last seen: id and `component:index`.
        apps: Vec<(AppId, String)>,
    },
    /// Asked to stop (a signal) before either.
    Interrupted,
}

/// What a standby watches: the active PM's info file (where its apps look for it again,
/// and where the standby writes its own info when it takes over), or its info itself.
#[derive(Clone, Debug)]
pub enum Target {
    /// A PM info file.
    File(std::path::PathBuf),
    /// A PM info (its `MSTRO_POOL_MANAGER_INFO;...;` line, or the info alone).
    Info(PmInfo),
}

impl Target {
    /// The target `watched` names: a PM info (a `MSTRO_POOL_MANAGER_INFO;...;` line, or
    /// text that parses as an info) or a file's path.
    ///
    /// # Errors
    /// A `MSTRO_POOL_MANAGER_INFO;` line that is malformed (the message says what is
    /// wrong).
    pub fn parse(watched: &str) -> Result<Target, crate::bootstrap::PmInfoError> {
        let line = watched.trim().starts_with(crate::bootstrap::PM_INFO_ENV);
        match crate::bootstrap::parse_info_text(watched) {
            Ok(Some(info)) => Ok(Target::Info(info)),
            Err(e) if line => Err(e),
            _ => Ok(Target::File(watched.into())),
        }
    }

    /// The active PM's info now: the file read again (`None` while it is missing or
    /// malformed), or the info given.
    pub fn find(&self) -> Option<PmInfo> {
        match self {
            Target::File(path) => PmInfo::from_file(path).ok().flatten(),
            Target::Info(info) => Some(info.clone()),
        }
    }

    /// Where a standby that took over writes its info: the watched file.
    pub fn info_file(&self) -> Option<&std::path::Path> {
        match self {
            Target::File(path) => Some(path),
            Target::Info(_) => None,
        }
    }
}

/// How long a standby waits for the pool manager it stands by for to be there at first
/// (it may be starting too).
pub const FIRST_CONTACT: Duration = Duration::from_secs(30);

/// How often the standby asks the active PM for its apps while it watches.
const LOOK: Duration = Duration::from_millis(500);
/// How long each confirmation that the active PM is gone waits for a connection, and how
/// many are tried, 100 ms apart.
const CONFIRM: (Duration, u32) = (Duration::from_millis(300), 3);

/// Watches the active PM whose info `find` reads (its info file, say; called again to
/// confirm a loss), connecting within `wait` (it may still be starting), until it is gone
/// or stopped, or `stop` says to give up (checked twice a second).
///
/// # Errors
/// No PM info found, or no connection to the active PM, within `wait` (the message says
/// which and the last error).
pub fn watch(
    find: impl Fn() -> Option<PmInfo>,
    wait: Duration,
    mut stop: impl FnMut() -> bool,
) -> std::io::Result<Watched> {
    let (mut observer, mut info) = first_contact(&find, wait, &mut stop)?;
    let mut apps: Vec<(AppId, String)> = Vec::new();
    loop {
        if stop() {
            return Ok(Watched::Interrupted);
        }
        match observer.wait_end(LOOK) {
            Some(Ended::Stopped) => return Ok(Watched::Stopped),
            None => {
                if let Ok(View::Status(s)) = observer.query(Query::Status) {
                    apps = (s.apps.iter())
                        .map(|a| (a.id, format!("{}:{}", a.component, a.index)))
                        .collect();
                    continue;
                }
            }
            Some(Ended::Lost) => {}
        }
        // The connection ended without a BYE: gone, unless it (or a PM restarted in its
        // place) still answers.
        match confirm(&find, &info) {
            Some((again, found)) => {
                tracing::warn!(
                    "standby: the connection to the active pool manager ended, but it answers again; watching on"
                );
                (observer, info) = (again, found);
            }
            None => return Ok(Watched::Gone { info, apps }),
        }
    }
}

/// Connects to the active PM as the standby's observer, looking for its info and trying
/// until `wait` passes.
fn first_contact(
    find: &impl Fn() -> Option<PmInfo>,
    wait: Duration,
    stop: &mut impl FnMut() -> bool,
) -> std::io::Result<(Observer, PmInfo)> {
    let until = Instant::now() + wait;
    let mut last = "no PM info found".to_string();
    while Instant::now() < until && !stop() {
        if let Some(info) = find() {
            match Observer::connect(&info, proto::STANDBY, CONFIRM.0.max(LOOK)) {
                Ok(o) => return Ok((o, info)),
                Err(e) => last = e.to_string(),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "no active pool manager to stand by for within {:.1} s: {last}",
            wait.as_secs_f64()
        ),
    ))
}

/// Whether the active PM (or one restarted in its place, `find` reading its info again)
/// still accepts an observer: a few tries, [`CONFIRM`].
fn confirm(find: &impl Fn() -> Option<PmInfo>, last: &PmInfo) -> Option<(Observer, PmInfo)> {
    for attempt in 0..CONFIRM.1 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        let info = find().unwrap_or_else(|| last.clone());
        if let Ok(o) = Observer::connect(&info, proto::STANDBY, CONFIRM.0) {
            return Some((o, info));
        }
    }
    None
}
