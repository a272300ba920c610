//! What `maestro run` answers when libpmix calls up ([`Host`] for [`LauncherHost`]):
//! connections, abort, publish/lookup, queries, tools, fabric, job control, groups,
//! spawn, connect, IOF, logging and credentials.

use std::sync::atomic::Ordering;

use pmix::server::{
    App, CredentialReply, GroupOp, InfoReply, IofChannels, LookupReply, OpReply, SpawnReply,
    ToolReply, ValidationReply,
};
use pmix::{Host, Info, Proc, Query, Status, Value, keys};

use super::{HostEvent, LauncherHost, queries};
use crate::run::credential::{CREDENTIAL_TYPE, Claims, CredentialError, unix_now};
use crate::run::jobs::RankId;

/// Answers a query with every answer the host has, as success: OpenPMIx 4.2's client
/// passes no results on with PARTIAL_SUCCESS (a tool asking for two keys, one unknown, saw
/// none).
fn reply_answers(reply: InfoReply, answers: Vec<Info>, asked: usize) {
    let status = if answers.is_empty() {
        Status::NOT_FOUND
    } else {
        if answers.len() < asked {
            tracing::debug!("query: {} of {asked} keys answered", answers.len());
        }
        Status::SUCCESS
    };
    reply.send(status, answers);
}

impl Host for LauncherHost {
    fn client_connected(&self, proc: &Proc) -> Result<(), Status> {
        if let Ok(Some(why)) = self.cut_off_intruders() {
            self.unsafe_teardown.store(true, Ordering::Relaxed);
            tracing::warn!("{proc} refused: {why}");
            return Err(Status::NO_PERMISSIONS);
        }
        if let Some(r) = self.ours(proc) {
            self.update(r, |s| s.connected = true);
        }
        tracing::debug!("{proc} connected");
        Ok(())
    }

    fn client_finalized(&self, proc: &Proc) {
        if let Some(r) = self.ours(proc) {
            self.update(r, |s| s.finalized = true);
        }
        tracing::debug!("{proc} finalized");
    }

    fn abort(&self, proc: &Proc, status: i32, msg: &str, _procs: Vec<Proc>, reply: OpReply) {
        reply.send(Ok(()));
        if let Some(rank) = self.ours(proc) {
            self.send(HostEvent::Abort {
                rank,
                status,
                msg: msg.to_string(),
            });
        }
    }

    fn publish(&self, proc: &Proc, info: Vec<Info>, reply: OpReply) {
        if !self.trusted(proc) {
            tracing::warn!("publish from {proc} refused: not of this job or its user's tools");
            return reply.send(Err(Status::NO_PERMISSIONS));
        }
        self.store.publish(proc, info, reply);
    }

    fn lookup(&self, proc: &Proc, keys: Vec<String>, info: Vec<Info>, reply: LookupReply) {
        if !self.trusted(proc) {
            tracing::warn!("lookup from {proc} refused: not of this job or its user's tools");
            return reply.send(Err(Status::NO_PERMISSIONS));
        }
        self.store.lookup(keys, &info, reply);
    }

    fn unpublish(&self, proc: &Proc, keys: Vec<String>, _info: Vec<Info>, reply: OpReply) {
        if !self.trusted(proc) {
            return reply.send(Err(Status::NO_PERMISSIONS));
        }
        self.store.unpublish(proc, &keys, reply);
    }

    fn query(&self, requestor: Option<&Proc>, queries: Vec<Query>, reply: InfoReply) {
        if let Some(p) = requestor.filter(|p| !self.trusted(p)) {
            tracing::warn!("query from {p} refused: not of this job or its user's tools");
            return reply.send(Status::NO_PERMISSIONS, Vec::new());
        }
        let mut answers = Vec::new();
        let mut asked = 0;
        let mut pool_views = Vec::new();
        for q in &queries {
            for k in &q.keys {
                asked += 1;
                if queries::is_pool_view(k) {
                    pool_views.push((k.clone(), q.qualifiers.clone()));
                } else if let Some(v) = self.answer(k, &q.qualifiers) {
                    answers.push(Info::new(k.clone(), v));
                }
            }
        }
        if pool_views.is_empty() {
            return reply_answers(reply, answers, asked);
        }
        // The pool's views come from its PM, over the network: off libpmix's thread.
        let pms = self.published_pms();
        let asking = std::thread::Builder::new()
            .name("pool-view".into())
            .spawn(move || {
                for (key, qualifiers) in pool_views {
                    let json = crate::pool_views::launcher_answer(
                        &pms,
                        &key,
                        &qualifiers,
                        queries::POOL_VIEW_TIMEOUT,
                    );
                    answers.push(Info::new(key, Value::String(json)));
                }
                reply_answers(reply, answers, asked);
            });
        if let Err(e) = asking {
            tracing::warn!("query: no thread to ask the pool manager: {e}");
        }
    }

    fn tool_connected(&self, info: Vec<Info>, reply: ToolReply) {
        let claimed = pmix::find(&info, keys::USERID).and_then(Value::as_u64);
        let checked = self.cut_off_intruders().unwrap_or_else(Some);
        let refusal = match claimed {
            Some(uid) if uid != u64::from(self.uid) => Some(checked.unwrap_or_else(|| {
                format!(
                    "it runs as uid {uid}; this launcher serves uid {} only",
                    self.uid
                )
            })),
            _ => checked,
        };
        if let Some(why) = refusal {
            self.unsafe_teardown.store(true, Ordering::Relaxed);
            tracing::warn!("tool connection refused: {why}");
            return reply.abandon();
        }
        let n = self.tools.fetch_add(1, Ordering::Relaxed);
        let nspace = match pmix::find(&info, keys::TOOL_NSPACE) {
            Some(Value::String(ns)) => ns.clone(),
            _ => format!("maestro.tool.{n}"),
        };
        let rank = pmix::find(&info, keys::TOOL_RANK)
            .and_then(Value::as_u64)
            .map_or(0, |r| r as u32);
        tracing::info!("tool connected as {nspace}:{rank}");
        self.accepted_tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(nspace.clone());
        reply.send(Ok(Proc::new(nspace, rank)));
    }

    fn fabric(
        &self,
        requestor: Option<&Proc>,
        update: bool,
        _directives: Vec<Info>,
        reply: InfoReply,
    ) {
        tracing::debug!("fabric information for {requestor:?} (update: {update})");
        let devices = self.fabric.get().map(|f| {
            let links = self
                .links
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            inventory::to_pmix_devices(&crate::run::fabric::with_link_states(&f.inventory, &links))
        });
        match (devices, self.switches.clone()) {
            (None, None) => reply.send(Status::NOT_FOUND, Vec::new()),
            (devices, None) => reply.send(Status::SUCCESS, devices.unwrap_or_default()),
            // An update reads or discovers the fabric again, which may take seconds: on a
            // thread of its own, not libpmix's.
            (devices, Some(switches)) if update => switches.update(move |infos| {
                let mut all = devices.unwrap_or_default();
                all.extend(infos);
                reply.send(Status::SUCCESS, all);
            }),
            (devices, Some(switches)) => {
                let mut infos = devices.unwrap_or_default();
                infos.extend(switches.infos());
                reply.send(Status::SUCCESS, infos);
            }
        }
    }

    fn job_control(
        &self,
        requestor: &Proc,
        targets: Vec<Proc>,
        directives: Vec<Info>,
        reply: InfoReply,
    ) {
        if !self.trusted(requestor) {
            return reply.send(Status::NO_PERMISSIONS, Vec::new());
        }
        let flag = |k: &str| matches!(pmix::find(&directives, k), Some(Value::Bool(true)));
        let (signal, ends_job) = if flag(keys::JOB_CTRL_KILL) {
            (libc::SIGKILL, true)
        } else if flag(keys::JOB_CTRL_TERMINATE) {
            (libc::SIGTERM, true)
        } else if let Some(sig) = pmix::find(&directives, keys::JOB_CTRL_SIGNAL)
            .and_then(Value::as_u64)
            .and_then(|s| i32::try_from(s).ok())
        {
            (sig, false)
        } else if flag(keys::JOB_CTRL_PREEMPTIBLE)
            || pmix::find(&directives, keys::JOB_CTRL_CHECKPOINT).is_some()
        {
            // Nothing here preempts or checkpoints: the registration is recorded (logged)
            // and accepted, as PRRTE does.
            tracing::info!("{requestor} registered for preemption or checkpoint: {directives:?}");
            return reply.send(Status::SUCCESS, Vec::new());
        } else {
            return reply.send(Status::NOT_SUPPORTED, Vec::new());
        };
        // No targets: the requestor's own job (a tool has none).
        let targets = if targets.is_empty() {
            vec![Proc::wildcard(requestor.nspace.clone())]
        } else {
            targets
        };
        let mut ranks = Vec::new();
        for t in &targets {
            let Some(job) = self.job_of(&t.nspace) else {
                return reply.send(Status::NOT_FOUND, Vec::new());
            };
            let size = self.lock_jobs()[job as usize].plan.nprocs();
            if t.rank == pmix::RANK_WILDCARD {
                ranks.extend((0..size).map(|rank| RankId { job, rank }));
            } else if t.rank < size {
                ranks.push(RankId { job, rank: t.rank });
            } else {
                return reply.send(Status::NOT_FOUND, Vec::new());
            }
        }
        ranks.sort_unstable();
        ranks.dedup();
        self.send(HostEvent::Control {
            ranks,
            signal,
            ends_job,
            by: requestor.to_string(),
        });
        reply.send(Status::SUCCESS, Vec::new());
    }

    fn group(
        &self,
        op: GroupOp,
        name: &str,
        members: Vec<Proc>,
        directives: Vec<Info>,
        reply: InfoReply,
    ) {
        if let Some(p) = members.iter().find(|p| !self.trusted(p)) {
            tracing::warn!("group {name:?} refused: {p} is not of this job");
            return reply.send(Status::NO_PERMISSIONS, Vec::new());
        }
        let mut groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match op {
            GroupOp::Construct => {
                if groups.contains_key(name) {
                    return reply.send(Status::EXISTS, Vec::new());
                }
                let want_id = matches!(
                    pmix::find(&directives, keys::GROUP_ASSIGN_CONTEXT_ID),
                    Some(Value::Bool(true))
                );
                let id = want_id.then(|| self.next_context.fetch_add(1, Ordering::Relaxed));
                tracing::info!("group {name:?} constructed: {members:?}, context id {id:?}");
                self.unsafe_teardown.store(true, Ordering::Relaxed);
                groups.insert(name.to_string(), (members, id));
                let answer = id
                    .map(|id| vec![Info::new(keys::GROUP_CONTEXT_ID, Value::Size(id))])
                    .unwrap_or_default();
                reply.send(Status::SUCCESS, answer);
            }
            GroupOp::Destruct => {
                // A group assembled by invitation (PMIx_Group_invite/join) never passed
                // through the host: its members built it among themselves, and all of them
                // (libpmix collected them) now take it down.
                if groups.remove(name).is_none() {
                    tracing::debug!("group {name:?} destructed (assembled by invitation)");
                }
                self.unsafe_teardown.store(true, Ordering::Relaxed);
                reply.send(Status::SUCCESS, Vec::new());
            }
        }
    }

    fn spawn(&self, requestor: &Proc, job_info: Vec<Info>, apps: Vec<App>, reply: SpawnReply) {
        if !self.trusted(requestor) {
            tracing::warn!("spawn from {requestor} refused: not of this job or its user's tools");
            return reply.send(Err(Status::NO_PERMISSIONS));
        }
        // The main loop starts the job and answers (a dropped request answers an error).
        self.send(HostEvent::Spawn {
            requestor: requestor.clone(),
            job_info,
            apps,
            reply,
        });
    }

    fn connect(&self, procs: Vec<Proc>, _info: Vec<Info>, reply: OpReply) {
        // Every namespace of the launcher lives in this one server, so connected processes
        // already see each other's job and modex data: nothing to move, only to check.
        match procs.iter().find(|p| !self.trusted(p)) {
            Some(p) => {
                tracing::warn!("connect refused: {p} is not a process of this launcher");
                reply.send(Err(Status::NOT_FOUND));
            }
            None => {
                tracing::debug!("connected {procs:?}");
                reply.send(Ok(()));
            }
        }
    }

    fn disconnect(&self, procs: Vec<Proc>, info: Vec<Info>, reply: OpReply) {
        self.connect(procs, info, reply);
    }

    fn iof_pull(
        &self,
        procs: Vec<Proc>,
        directives: Vec<Info>,
        channels: IofChannels,
    ) -> Result<(), Status> {
        // (libpmix let only accepted tools this far.)
        if let Some(p) = procs.iter().find(|p| self.job_of(&p.nspace).is_none()) {
            tracing::warn!("output pull refused: {p} is not a process of this launcher");
            return Err(Status::NOT_FOUND);
        }
        let mut pulls = self
            .pulls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if matches!(
            pmix::find(&directives, keys::IOF_STOP),
            Some(Value::Bool(true))
        ) {
            pulls.retain(|(p, _)| *p != procs);
        } else {
            tracing::info!("a tool pulls the output of {procs:?}");
            pulls.push((procs, channels));
        }
        Ok(())
    }

    fn log(&self, proc: &Proc, data: Vec<Info>, directives: Vec<Info>, reply: OpReply) {
        if !self.trusted(proc) {
            return reply.send(Err(Status::NO_PERMISSIONS));
        }
        let status = crate::run::pmix_log::log(proc, &self.nspace, &data, &directives);
        reply.send(if status.is_success() {
            Ok(())
        } else {
            Err(status)
        });
    }

    fn get_credential(&self, proc: &Proc, _info: Vec<Info>, reply: CredentialReply) {
        if !self.trusted(proc) {
            tracing::warn!("credential for {proc} refused: not of this job or its user's tools");
            return reply.send(Err(Status::NO_PERMISSIONS));
        }
        let cred = self.authority.issue(&Claims {
            nspace: proc.nspace.clone(),
            rank: proc.rank,
            uid: self.uid,
            gid: self.gid,
            issued: unix_now(),
        });
        reply.send(Ok((
            cred,
            vec![Info::new(
                keys::CRED_TYPE,
                Value::String(CREDENTIAL_TYPE.into()),
            )],
        )));
    }

    fn validate_credential(
        &self,
        proc: &Proc,
        cred: &[u8],
        _info: Vec<Info>,
        reply: ValidationReply,
    ) {
        match self.authority.validate(cred, unix_now()) {
            Ok(c) => reply.send(Ok(vec![
                Info::new(keys::USERID, Value::Uint32(c.uid)),
                Info::new(keys::GRPID, Value::Uint32(c.gid)),
                Info::new(keys::CRED_TYPE, Value::String(CREDENTIAL_TYPE.into())),
                Info::new(keys::PROCID, Value::Proc(Proc::new(c.nspace, c.rank))),
            ])),
            // Another launcher's: not ours to judge (the asker decides what that means).
            Err(CredentialError::Foreign) => {
                tracing::debug!("credential from {proc} not checked: issued elsewhere");
                reply.send(Err(Status::NOT_SUPPORTED));
            }
            Err(e) => {
                tracing::warn!("credential from {proc} refused: {e}");
                reply.send(Err(Status::INVALID_CRED));
            }
        }
    }
}
