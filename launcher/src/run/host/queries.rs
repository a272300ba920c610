//! The host's answers to `PMIx_Query_info`: namespaces, process tables, job sizes and
//! status, psets, spawn and debug support, groups, the server's URI and the fabric, for
//! every job of the launcher (a `PMIX_NSPACE` qualifier selects one).

use pmix::{Info, PROC_STATE_RUNNING, PROC_STATE_TERMINATED, Proc, ProcInfo, Status, Value, keys};

use super::{JobRecord, LauncherHost, server_nspace};

/// The pool views a tool may ask for (answered with the JSON of `maestro pool --json`).
const POOL_VIEWS: [&str; 4] = [
    maestro_keys::POOL_STATUS,
    maestro_keys::POOL_CDOS,
    maestro_keys::POOL_TRANSFERS,
    maestro_keys::POOL_FABRIC,
];

/// Longest wait for the PM's answer to one pool view.
pub(super) const POOL_VIEW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `key` asks for a view of the pool (answered off libpmix's thread).
pub(super) fn is_pool_view(key: &str) -> bool {
    POOL_VIEWS.contains(&key)
}

impl LauncherHost {
    /// The PM info each workflow of the jobs published: (workflow, info).
    pub(super) fn published_pms(&self) -> Vec<(String, String)> {
        let prefix = format!("{}.", maestro_keys::PM_INFO);
        self.store
            .with_prefix(&prefix)
            .into_iter()
            .filter_map(|(k, v)| Some((k[prefix.len()..].to_string(), v.as_str()?.to_string())))
            .collect()
    }

    /// The process table of the jobs `nspace` selects (all when `None`).
    fn proc_table(&self, nspace: Option<&str>) -> Vec<ProcInfo> {
        let jobs = self.lock_jobs();
        jobs.iter()
            .filter(|j| nspace.is_none_or(|ns| j.plan.nspace == ns))
            .flat_map(|j| {
                j.ranks
                    .iter()
                    .zip(&j.plan.ranks)
                    .enumerate()
                    .map(|(r, (s, p))| ProcInfo {
                        proc: Proc::new(&j.plan.nspace, r as u32),
                        hostname: self.hostname.clone(),
                        executable: p.program.to_string_lossy().into_owned(),
                        pid: s.pid,
                        exit_code: s.exit_code.unwrap_or(0),
                        state: if s.exit_code.is_some() {
                            PROC_STATE_TERMINATED
                        } else {
                            PROC_STATE_RUNNING
                        },
                    })
            })
            .collect()
    }

    /// Every query key [`LauncherHost::answer`] knows, for `PMIX_QUERY_SUPPORTED_KEYS`.
    const QUERY_KEYS: [&'static str; 20] = [
        keys::QUERY_NUM_GROUPS,
        keys::QUERY_NAMESPACES,
        keys::QUERY_NAMESPACE_INFO,
        keys::QUERY_PROC_TABLE,
        keys::QUERY_LOCAL_PROC_TABLE,
        keys::JOB_SIZE,
        keys::QUERY_NUM_PSETS,
        keys::QUERY_PSET_NAMES,
        keys::QUERY_SPAWN_SUPPORT,
        keys::QUERY_DEBUG_SUPPORT,
        keys::QUERY_JOB_STATUS,
        keys::QUERY_SUPPORTED_KEYS,
        keys::SERVER_URI,
        maestro_keys::FABRIC_INVENTORY,
        maestro_keys::FABRIC_ASSIGNMENT,
        maestro_keys::FABRIC_TOPOLOGY,
        maestro_keys::POOL_STATUS,
        maestro_keys::POOL_CDOS,
        maestro_keys::POOL_TRANSFERS,
        maestro_keys::POOL_FABRIC,
    ];

    /// Answers one query key, or `None` when this host does not know it. A
    /// `PMIX_NSPACE` qualifier selects one job (none: job 0 for per-job keys, every job
    /// for tables); an unknown namespace gets no answer.
    pub(super) fn answer(&self, key: &str, qualifiers: &[Info]) -> Option<Value> {
        let asked = match pmix::find(qualifiers, keys::NSPACE) {
            Some(Value::String(ns)) => Some(ns.as_str()),
            _ => None,
        };
        self.job_answer(key, asked)
            .unwrap_or_else(|| self.host_answer(key))
    }

    /// The answer to `key` if it is about the jobs (`asked`: the namespace a qualifier
    /// names): their namespaces, process tables, sizes, command lines, status; `None` for
    /// a key that is not (`Some(None)`: a job key with no answer).
    fn job_answer(&self, key: &str, asked: Option<&str>) -> Option<Option<Value>> {
        let jobs = self.lock_jobs();
        let selected = || match asked {
            Some(ns) => jobs.iter().find(|j| j.plan.nspace == ns),
            None => jobs.first(),
        };
        Some(match key {
            k if k == keys::QUERY_NAMESPACES => Some(Value::String(
                jobs.iter()
                    .map(|j| j.plan.nspace.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            )),
            k if k == keys::QUERY_PROC_TABLE || k == keys::QUERY_LOCAL_PROC_TABLE => {
                if asked.is_some() && selected().is_none() {
                    return Some(None);
                }
                drop(jobs);
                Some(Value::ProcInfos(self.proc_table(asked)))
            }
            k if k == keys::JOB_SIZE => selected().map(|j| Value::Uint32(j.plan.nprocs())),
            k if k == keys::QUERY_NAMESPACE_INFO => {
                let info = |j: &JobRecord| {
                    Info::new(
                        keys::QUERY_NAMESPACE_INFO,
                        Value::Infos(vec![
                            Info::new(keys::NSPACE, Value::String(j.plan.nspace.clone())),
                            Info::new(keys::CMD_LINE, Value::String(j.plan.command_of(0))),
                        ]),
                    )
                };
                match asked {
                    Some(_) => selected().map(|j| Value::Infos(vec![info(j)])),
                    None => Some(Value::Infos(jobs.iter().map(info).collect())),
                }
            }
            k if k == keys::QUERY_JOB_STATUS => selected().map(|j| {
                let running = j.ranks.iter().any(|r| r.exit_code.is_none());
                Value::Status(if running {
                    Status::SUCCESS
                } else {
                    Status::JOB_TERMINATED
                })
            }),
            _ => return None,
        })
    }

    /// The answer to `key` about the host itself: what it supports, its groups, its URI,
    /// the node's fabric.
    fn host_answer(&self, key: &str) -> Option<Value> {
        match key {
            k if k == keys::QUERY_NUM_PSETS => Some(Value::Size(0)),
            k if k == keys::QUERY_PSET_NAMES => Some(Value::String(String::new())),
            // What PMIx_Spawn honours here.
            k if k == keys::QUERY_SPAWN_SUPPORT => Some(Value::String(
                [
                    keys::WDIR,
                    keys::NOTIFY_COMPLETION,
                    keys::DEBUG_STOP_IN_INIT,
                ]
                .join(","),
            )),
            // What a debugger may ask of this host: ranks held in init (--stop-in-init).
            k if k == keys::QUERY_DEBUG_SUPPORT => {
                Some(Value::String(keys::DEBUG_STOP_IN_INIT.into()))
            }
            k if k == keys::QUERY_NUM_GROUPS => Some(Value::Size(
                self.groups
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .len(),
            )),
            k if k == keys::QUERY_SUPPORTED_KEYS => Some(Value::String(Self::QUERY_KEYS.join(","))),
            k if k == keys::SERVER_URI => self.server_ports.get().and_then(|ports| {
                let port = ports.first()?;
                Some(Value::String(format!(
                    "{}.0;tcp4://127.0.0.1:{port}",
                    server_nspace(std::process::id())
                )))
            }),
            k if k == maestro_keys::FABRIC_INVENTORY => {
                self.fabric.get().map(|f| Value::String(f.inventory_json()))
            }
            k if k == maestro_keys::FABRIC_ASSIGNMENT => self
                .fabric
                .get()
                .map(|f| Value::String(f.assignment_json())),
            k if k == maestro_keys::FABRIC_TOPOLOGY => self
                .switches
                .as_ref()
                .and_then(|s| s.json())
                .map(Value::String),
            _ => None,
        }
    }
}
