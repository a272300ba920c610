//! The jobs of one `maestro run`: job 0 from the command line and every job a client or
//! tool starts with `PMIx_Spawn` (1, 2, ... in the order asked). Each job is a namespace of
//! its own (`maestro.job.<pid>` for job 0, `maestro.job.<pid>.<n>` after it) whose ranks
//! count from 0.
//!
//! This module is pure: it turns a command line or a spawn request into a [`JobPlan`]
//! (what each rank runs, where, with which environment), checking the request; starting
//! and registering the processes is `launch`'s.

use std::ffi::OsString;
use std::path::PathBuf;

use pmix::server::{App, IofChannel, IofChannels};
use pmix::{Info, Proc, Value, keys};

/// One process of the launcher: its job and its rank in that job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RankId {
    /// The job: 0 for the command line's, then 1, 2, ... per spawn.
    pub job: u32,
    /// The rank within the job.
    pub rank: u32,
}

impl RankId {
    /// Rank `rank` of job 0.
    #[cfg(test)]
    pub fn first(rank: u32) -> RankId {
        RankId { job: 0, rank }
    }
}

impl std::fmt::Display for RankId {
    /// `3` for job 0's rank 3 (what users of one job know), `3 of job 1` after it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.job {
            0 => write!(f, "{}", self.rank),
            j => write!(f, "{} of job {j}", self.rank),
        }
    }
}

/// The namespace of `job` in a launcher whose job 0 is `base`.
pub fn nspace(base: &str, job: u32) -> String {
    match job {
        0 => base.to_string(),
        j => format!("{base}.{j}"),
    }
}

/// What one rank runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPlan {
    /// The program (looked up in `PATH` when it has no `/`): bytes, as a path is.
    pub program: OsString,
    /// Its arguments after the program name: any bytes, as `execve` takes them.
    pub args: Vec<OsString>,
    /// Variables added to the launcher's environment.
    pub env: Vec<(String, String)>,
    /// The working directory; the launcher's own when `None`.
    pub cwd: Option<PathBuf>,
    /// The application of the job the rank belongs to (`PMIX_APPNUM`).
    pub appnum: u32,
}

/// Everything needed to start one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlan {
    /// The job's namespace.
    pub nspace: String,
    /// Its ranks, by rank.
    pub ranks: Vec<RankPlan>,
    /// Who spawned it (`PMIX_PARENT_ID`); `None` for job 0.
    pub parent: Option<Proc>,
    /// Whom to tell when it ends (`PMIX_NOTIFY_COMPLETION` in the spawn request).
    pub notify: Option<Proc>,
    /// Hold its ranks in `PMIx_Init` until a tool releases them.
    pub stop_in_init: bool,
    /// The output channels the requestor asked to be sent (`PMIX_FWD_STDOUT`,
    /// `PMIX_FWD_STDERR` in the spawn request).
    pub forward: IofChannels,
}

/// Why a spawn request cannot be served; the message is logged and the requestor gets
/// `PMIX_ERR_BAD_PARAM`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// No application in the request.
    #[error("the request names no application")]
    NoApps,
    /// An application without a command.
    #[error("application {0} names no command (cmd and argv are empty)")]
    NoCommand(usize),
    /// An application asks for no process, or a negative number.
    #[error("application {app} asks for {maxprocs} processes; 1 or more are needed")]
    NoProcs {
        /// The application's index.
        app: usize,
        /// What it asked.
        maxprocs: i32,
    },
    /// More processes than one request may start, or the node can still take.
    #[error(
        "the request asks for {asked} processes; this launcher may start {room} more now (at most --max-spawn per request, --max-procs alive at once: maestro run options)"
    )]
    TooMany {
        /// Processes asked.
        asked: u64,
        /// Processes that still fit.
        room: u32,
    },
    /// An environment entry without `=`.
    #[error("application {app}: environment entry {entry:?} is not NAME=VALUE")]
    BadEnv {
        /// The application's index.
        app: usize,
        /// The entry.
        entry: String,
    },
}

impl JobPlan {
    /// Job 0: `nprocs` copies of `command` (program first).
    pub fn command_line(nspace: String, command: &[OsString], nprocs: u32) -> JobPlan {
        let rank = RankPlan {
            program: command.first().cloned().unwrap_or_default(),
            args: command.iter().skip(1).cloned().collect(),
            env: Vec::new(),
            cwd: None,
            appnum: 0,
        };
        JobPlan {
            nspace,
            ranks: vec![rank; nprocs as usize],
            parent: None,
            notify: None,
            stop_in_init: false,
            forward: IofChannels::NONE,
        }
    }

    /// Gives every rank the variables `env` (`maestro run -x`).
    pub fn set_env(&mut self, env: &[(String, String)]) {
        for rank in &mut self.ranks {
            rank.env.extend(env.iter().cloned());
        }
    }

    /// A job for `PMIx_Spawn` by `requestor`: the apps in order, each `maxprocs` times,
    /// ranks numbered across apps; `PMIX_WDIR` (per app, else per job) or the app's `cwd`
    /// as working directory; `PMIX_NOTIFY_COMPLETION` and `PMIX_DEBUG_STOP_IN_INIT` from
    /// the job directives. `room` is how many more processes the launcher takes.
    ///
    /// # Errors
    /// [`PlanError`] for a request that names nothing to run, asks for no or too many
    /// processes, or carries a malformed environment entry.
    pub fn spawn(
        nspace: String,
        requestor: &Proc,
        job_info: &[Info],
        apps: &[App],
        room: u32,
    ) -> Result<JobPlan, PlanError> {
        if apps.is_empty() {
            return Err(PlanError::NoApps);
        }
        let flag =
            |infos: &[Info], k: &str| matches!(pmix::find(infos, k), Some(Value::Bool(true)));
        let wdir = |infos: &[Info]| match pmix::find(infos, keys::WDIR) {
            Some(Value::String(d)) if !d.is_empty() => Some(PathBuf::from(d)),
            _ => None,
        };
        let mut asked: u64 = 0;
        let mut ranks = Vec::new();
        for (i, app) in apps.iter().enumerate() {
            let mut argv = app.argv.iter().map(OsString::from);
            let program = match (app.cmd.is_empty(), app.argv.first()) {
                (false, _) => {
                    // argv[0] is the program's own name when given; the rest are arguments.
                    argv.next();
                    OsString::from(&app.cmd)
                }
                (true, Some(first)) if !first.is_empty() => argv.next().unwrap_or_default(),
                _ => return Err(PlanError::NoCommand(i)),
            };
            let n =
                u32::try_from(app.maxprocs)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(PlanError::NoProcs {
                        app: i,
                        maxprocs: app.maxprocs,
                    })?;
            asked += u64::from(n);
            let env = app
                .env
                .iter()
                .map(|e| match e.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                    _ => Err(PlanError::BadEnv {
                        app: i,
                        entry: e.clone(),
                    }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let cwd = wdir(&app.info)
                .or_else(|| (!app.cwd.is_empty()).then(|| PathBuf::from(&app.cwd)))
                .or_else(|| wdir(job_info));
            let rank = RankPlan {
                program,
                args: argv.collect(),
                env,
                cwd,
                appnum: i as u32,
            };
            if asked <= u64::from(room) {
                ranks.extend(std::iter::repeat_n(rank, n as usize));
            }
        }
        if asked > u64::from(room) {
            return Err(PlanError::TooMany { asked, room });
        }
        let forward = [
            (keys::FWD_STDOUT, IofChannel::Stdout),
            (keys::FWD_STDERR, IofChannel::Stderr),
        ]
        .into_iter()
        .filter(|(k, _)| flag(job_info, k))
        .fold(IofChannels::NONE, |channels, (_, c)| channels.with(c));
        Ok(JobPlan {
            nspace,
            ranks,
            parent: Some(requestor.clone()),
            notify: flag(job_info, keys::NOTIFY_COMPLETION).then(|| requestor.clone()),
            stop_in_init: flag(job_info, keys::DEBUG_STOP_IN_INIT),
            forward,
        })
    }

    /// The job's size.
    pub fn nprocs(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// The command line of rank `rank` (program first), for logs and process tables
    /// (bytes that are not UTF-8 shown as U+FFFD).
    pub fn command_of(&self, rank: u32) -> String {
        self.ranks
            .get(rank as usize)
            .map(|r| {
                std::iter::once(&r.program)
                    .chain(&r.args)
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    }

    /// Each rank's application number, by rank.
    pub fn appnums(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.appnum).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(cmd: &str, argv: &[&str], n: i32) -> App {
        App {
            cmd: cmd.into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            maxprocs: n,
            ..App::default()
        }
    }

    fn parent() -> Proc {
        Proc::new("maestro.job.1", 0)
    }

    #[test]
    fn apps_become_consecutive_ranks_with_their_app_numbers() {
        let apps = [app("/bin/a", &["a", "-x"], 2), app("", &["b", "y"], 1)];
        let plan = JobPlan::spawn("ns.1".into(), &parent(), &[], &apps, 10).unwrap();
        assert_eq!(plan.nprocs(), 3);
        assert_eq!(plan.appnums(), [0, 0, 1]);
        assert_eq!(plan.ranks[0].program, "/bin/a");
        assert_eq!(plan.ranks[0].args, ["-x"]);
        assert_eq!(plan.ranks[2].program, "b");
        assert_eq!(plan.ranks[2].args, ["y"]);
        assert_eq!(plan.command_of(1), "/bin/a -x");
        assert_eq!(plan.parent, Some(parent()));
        assert_eq!(plan.notify, None);
    }

    #[test]
    fn directives_and_working_directories() {
        let mut a = app("p", &[], 1);
        a.env = vec!["A=1".into(), "B=x=y".into()];
        a.cwd = "/from/cwd".into();
        let mut b = app("p", &[], 1);
        b.info = vec![Info::new(keys::WDIR, Value::String("/from/app".into()))];
        let c = app("p", &[], 1);
        let job = [
            Info::new(keys::NOTIFY_COMPLETION, Value::Bool(true)),
            Info::new(keys::DEBUG_STOP_IN_INIT, Value::Bool(true)),
            Info::new(keys::WDIR, Value::String("/from/job".into())),
            Info::new(keys::FWD_STDERR, Value::Bool(true)),
        ];
        let plan = JobPlan::spawn("ns.2".into(), &parent(), &job, &[a, b, c], 10).unwrap();
        assert_eq!(
            plan.ranks[0].env,
            [("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        let cwds: Vec<_> = plan.ranks.iter().map(|r| r.cwd.clone().unwrap()).collect();
        assert_eq!(
            cwds,
            [
                PathBuf::from("/from/cwd"),
                PathBuf::from("/from/app"),
                PathBuf::from("/from/job")
            ]
        );
        assert_eq!(plan.notify, Some(parent()));
        assert!(plan.stop_in_init);
        assert_eq!(plan.forward, IofChannels::NONE.with(IofChannel::Stderr));
    }

    #[test]
    fn malformed_requests_are_refused_with_the_reason() {
        let p = parent();
        let spawn = |apps: &[App], room| JobPlan::spawn("n".into(), &p, &[], apps, room);
        assert_eq!(spawn(&[], 9), Err(PlanError::NoApps));
        assert_eq!(spawn(&[app("", &[], 1)], 9), Err(PlanError::NoCommand(0)));
        assert_eq!(
            spawn(&[app("x", &[], 1), app("x", &[], -3)], 9),
            Err(PlanError::NoProcs {
                app: 1,
                maxprocs: -3
            })
        );
        assert_eq!(
            spawn(&[app("x", &[], i32::MAX), app("x", &[], i32::MAX)], 9),
            Err(PlanError::TooMany {
                asked: 2 * i32::MAX as u64,
                room: 9
            })
        );
        let mut bad = app("x", &[], 1);
        bad.env = vec!["NOEQUALS".into()];
        assert!(matches!(
            spawn(&[bad], 9),
            Err(PlanError::BadEnv { app: 0, .. })
        ));
    }

    #[test]
    fn names_and_display() {
        assert_eq!(nspace("maestro.job.7", 0), "maestro.job.7");
        assert_eq!(nspace("maestro.job.7", 2), "maestro.job.7.2");
        assert_eq!(RankId::first(3).to_string(), "3");
        assert_eq!(RankId { job: 1, rank: 0 }.to_string(), "0 of job 1");
        let plan = JobPlan::command_line("n".into(), &["prog".into(), "a".into()], 2);
        assert_eq!(plan.nprocs(), 2);
        assert_eq!(plan.command_of(0), "prog a");
    }
}
