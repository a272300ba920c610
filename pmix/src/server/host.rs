//! The host side of a PMIx server: what the launcher answers when PMIx calls up.
//!
//! [`Host`] has one method per upcall of `pmix_server_module_t` that this crate wires up.
//! Every method has a default: the defaults behave like a single-node host that supports
//! nothing optional (fence hands the locally collected blob back, direct modex finds
//! nothing, credentials and queries are not supported). A launcher overrides what it offers.
//! [`PublishStore`] is a complete publish/lookup/unpublish implementation, with waiting
//! lookups, that a host can delegate to.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::client::Published;
use crate::error::Status;
use crate::query::Query;
use crate::server::iof::IofChannels;
use crate::server::node_store::NodeDirectory;
use crate::server::reply::{
    CredentialReply, InfoReply, LookupReply, ModexReply, OpReply, SpawnReply, ToolReply,
    ValidationReply,
};
use crate::sync::lock;
use crate::value::{Info, Proc, Value};

/// What a `group` upcall asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupOp {
    /// `PMIx_Group_construct`.
    Construct,
    /// `PMIx_Group_destruct`.
    Destruct,
}

/// One application of a `PMIx_Spawn` request (`pmix_app_t`): what to run and how many
/// copies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct App {
    /// The executable (`cmd`; may be empty when `argv[0]` names it).
    pub cmd: String,
    /// The arguments, `argv[0]` included (OpenPMIx's clients put the command there).
    pub argv: Vec<String>,
    /// `NAME=VALUE` entries to add to the processes' environment.
    pub env: Vec<String>,
    /// The working directory (empty: the host's choice).
    pub cwd: String,
    /// How many processes to start (PMIx says `maxprocs`; 0 or less asks for none).
    pub maxprocs: i32,
    /// Per-application directives (`PMIX_WDIR`, `PMIX_PREFIX`, ...).
    pub info: Vec<Info>,
}

/// The launcher's answers to PMIx upcalls. Methods run on PMIx's progress thread: answer
/// quickly, or keep the reply and answer from another thread. A dropped reply answers with
/// an error, so a client never waits forever.
pub trait Host: Send + Sync + 'static {
    /// A client connected (`client_connected`); `Err` refuses it (its `PMIx_Init` fails
    /// with that status).
    fn client_connected(&self, _proc: &Proc) -> Result<(), Status> {
        Ok(())
    }

    /// A client called `PMIx_Finalize` (`client_finalized`).
    fn client_finalized(&self, _proc: &Proc) {}

    /// A client called `PMIx_Abort` (`abort`). `procs` empty means its whole job.
    fn abort(&self, _proc: &Proc, _status: i32, _msg: &str, _procs: Vec<Proc>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// All local participants of a fence arrived (`fence_nb`); `data` is what they
    /// contributed. A single-node host hands it straight back (the default).
    fn fence(&self, _procs: Vec<Proc>, _info: Vec<Info>, data: Vec<u8>, reply: ModexReply) {
        reply.send(Ok(data));
    }

    /// A client asks for another process's data that is not local (`direct_modex`).
    fn direct_modex(&self, _proc: &Proc, _info: Vec<Info>, reply: ModexReply) {
        reply.send(Err(Status::NOT_FOUND));
    }

    /// `PMIx_Publish` from a client.
    fn publish(&self, _proc: &Proc, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// `PMIx_Lookup` from a client.
    fn lookup(&self, _proc: &Proc, _keys: Vec<String>, _info: Vec<Info>, reply: LookupReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// `PMIx_Unpublish` from a client.
    fn unpublish(&self, _proc: &Proc, _keys: Vec<String>, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client raised an event that must leave its server (`notify_event`). Local
    /// delivery already happened inside PMIx; a single-node host has nothing to relay.
    /// (No reply object: in PMIx 4.2 answering from inside this upcall deadlocks, so the
    /// trampoline always reports "done".)
    fn notify_event(&self, _code: Status, _source: Option<&Proc>, _info: &[Info]) {}

    /// `PMIx_Query_info` from a client or tool.
    fn query(&self, _requestor: Option<&Proc>, _queries: Vec<Query>, reply: InfoReply) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// A tool connected (`tool_connected`); assign it a name.
    fn tool_connected(&self, _info: Vec<Info>, reply: ToolReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client asks for a credential (`get_credential`).
    fn get_credential(&self, _proc: &Proc, _info: Vec<Info>, reply: CredentialReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client asks whether a credential is genuine (`validate_credential`).
    fn validate_credential(
        &self,
        _proc: &Proc,
        _cred: &[u8],
        _info: Vec<Info>,
        reply: ValidationReply,
    ) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A client or tool asks about the fabric (`PMIx_Fabric_register`, `fabric` upcall);
    /// `update` is true for `PMIx_Fabric_update`. Answer with `PMIX_FABRIC_*` infos.
    fn fabric(
        &self,
        _requestor: Option<&Proc>,
        _update: bool,
        _directives: Vec<Info>,
        reply: InfoReply,
    ) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// A client or tool asks to control processes (`PMIx_Job_control_nb`): `targets`
    /// (empty: the requestor's own job; rank `PMIX_RANK_WILDCARD`: a whole namespace) and
    /// what to do (`PMIX_JOB_CTRL_KILL`, `_TERMINATE`, `_SIGNAL`, `_PREEMPTIBLE`,
    /// `_CHECKPOINT`). The default supports none.
    fn job_control(
        &self,
        _requestor: &Proc,
        _targets: Vec<Proc>,
        _directives: Vec<Info>,
        reply: InfoReply,
    ) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// The local members of a group all asked to construct or destruct it
    /// (`PMIx_Group_construct`/`destruct`; libpmix collects them first, as for a fence).
    /// Answer a construct with what the members learn (`PMIX_GROUP_CONTEXT_ID` when
    /// `PMIX_GROUP_ASSIGN_CONTEXT_ID` asks). The default supports none.
    fn group(
        &self,
        _op: GroupOp,
        _name: &str,
        _members: Vec<Proc>,
        _directives: Vec<Info>,
        reply: InfoReply,
    ) {
        reply.send(Status::NOT_SUPPORTED, Vec::new());
    }

    /// A client or tool asks for a new job (`PMIx_Spawn`): `job_info` are job-level
    /// directives (`PMIX_NOTIFY_COMPLETION`, `PMIX_DEBUG_STOP_IN_INIT`, ...), `apps` what to
    /// run. Answer with the new job's namespace once its processes started, or a status
    /// (`PMIX_ERR_JOB_FAILED_TO_LAUNCH` when they could not). The default supports none.
    fn spawn(&self, _requestor: &Proc, _job_info: Vec<Info>, _apps: Vec<App>, reply: SpawnReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// The local processes among `procs` all called `PMIx_Connect` with this set (libpmix
    /// collects them first, as for a fence): the host connects them (on one node there is
    /// nothing to move: every namespace's data already lives in this server). The default
    /// supports none.
    fn connect(&self, _procs: Vec<Proc>, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// As [`Host::connect`], for `PMIx_Disconnect`.
    fn disconnect(&self, _procs: Vec<Proc>, _info: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }

    /// A tool asks for the output of `procs` on `channels` (`PMIx_IOF_pull`; with
    /// `PMIX_IOF_STOP` among the directives, to stop). The host then hands that output to
    /// the server's [`OutputSink`](crate::server::OutputSink), from which libpmix passes
    /// it to every tool that asked. Answered at once, not through a reply: OpenPMIx 4.2
    /// answers the tool with a malformed message (`UNPACK-PAST-END`) when the host answers
    /// through the callback. The default supports none.
    fn iof_pull(
        &self,
        _procs: Vec<Proc>,
        _directives: Vec<Info>,
        _channels: IofChannels,
    ) -> Result<(), Status> {
        Err(Status::NOT_SUPPORTED)
    }

    /// A client or tool logged something (`PMIx_Log`): `data` holds the channels
    /// (`PMIX_LOG_STDERR` and the like, each with its message), `directives` how
    /// (`PMIX_LOG_ONCE`, `PMIX_LOG_GENERATE_TIMESTAMP`, `PMIX_LOG_SOURCE`). Answer with
    /// success, `PMIX_ERR_PARTIAL_SUCCESS` when some channels were not honoured, or
    /// `PMIX_ERR_NOT_SUPPORTED` when none was. The default honours none.
    fn log(&self, _proc: &Proc, _data: Vec<Info>, _directives: Vec<Info>, reply: OpReply) {
        reply.send(Err(Status::NOT_SUPPORTED));
    }
}

/// One waiting lookup.
struct Waiter {
    keys: Vec<String>,
    deadline: Instant,
    reply: LookupReply,
}

/// A publish/lookup store for a host: `publish` stores, `lookup` answers at once or (with
/// `PMIX_WAIT`) when the keys appear or the request's `PMIX_TIMEOUT` expires, `unpublish`
/// removes a publisher's keys.
///
/// Data lives in memory for the host's own job. With a [`NodeDirectory`]
/// ([`PublishStore::with_node_directory`]), data published with `PMIX_RANGE_GLOBAL` is
/// also stored there, and lookups of keys the job does not hold read it: that is how
/// separate jobs (separate `maestro run` hosts) of one user on one node find each other.
#[derive(Default)]
pub struct PublishStore {
    inner: Mutex<StoreInner>,
    node: Option<NodeDirectory>,
}

#[derive(Default)]
struct StoreInner {
    data: BTreeMap<String, Published>,
    waiters: Vec<Waiter>,
}

/// How long a waiting lookup without its own `PMIX_TIMEOUT` may wait.
const DEFAULT_LOOKUP_WAIT: Duration = Duration::from_secs(60);

impl PublishStore {
    /// A store that also shares `PMIX_RANGE_GLOBAL` data through `node`.
    pub fn with_node_directory(node: NodeDirectory) -> PublishStore {
        PublishStore {
            inner: Mutex::default(),
            node: Some(node),
        }
    }

    /// Stores the data infos of a publish (directives such as range or timeout are
    /// skipped) and answers any lookup that now has all its keys.
    ///
    /// With `PMIX_RANGE_GLOBAL` and a node directory the data also goes there; the publish
    /// fails with `PMIX_ERR_DUPLICATE_KEY` if another job holds a key and with
    /// `PMIX_ERR_NOT_SUPPORTED` for a value type that cannot cross jobs.
    pub fn publish(&self, proc: &Proc, info: Vec<Info>, reply: OpReply) {
        let global = crate::value::find(&info, crate::keys::RANGE)
            .is_some_and(|v| *v == Value::Range(crate::event::Range::Global.raw()));
        if let Some(node) = self.node.as_ref().filter(|_| global) {
            for i in info.iter().filter(|i| !is_directive(&i.key)) {
                let entry = Published {
                    publisher: proc.clone(),
                    key: i.key.clone(),
                    value: i.value.clone(),
                };
                if let Err(e) = node.put(&entry) {
                    tracing::warn!("{proc} could not publish {:?} node-wide: {e:?}", i.key);
                    reply.send(Err(e.status()));
                    return;
                }
            }
        }
        let mut inner = lock(&self.inner);
        for i in info {
            if is_directive(&i.key) {
                continue;
            }
            if let Some(owner) = inner
                .data
                .get(&i.key)
                .map(|e| e.publisher.clone())
                .filter(|owner| owner != proc)
            {
                drop(inner);
                tracing::warn!(
                    "{proc} tried to publish {:?}, already published by {owner}",
                    i.key
                );
                reply.send(Err(Status::DUPLICATE_KEY));
                return;
            }
            inner.data.insert(
                i.key.clone(),
                Published {
                    publisher: proc.clone(),
                    key: i.key,
                    value: i.value,
                },
            );
        }
        let ready = inner.take_ready();
        drop(inner);
        reply.send(Ok(()));
        for (w, found) in ready {
            w.reply.send(Ok(found));
        }
    }

    /// What this job published under keys starting with `prefix` (not the node-wide
    /// directory's entries of other jobs), in key order.
    pub fn with_prefix(&self, prefix: &str) -> Vec<(String, Value)> {
        lock(&self.inner)
            .data
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, p)| (k.clone(), p.value.clone()))
            .collect()
    }

    /// Answers a lookup: now if every key exists or `PMIX_WAIT` is absent, otherwise when
    /// the keys are published or the request times out (answered by [`PublishStore::expire`]).
    pub fn lookup(&self, keys: Vec<String>, info: &[Info], reply: LookupReply) {
        let wait = crate::value::find(info, crate::keys::WAIT).is_some();
        let timeout = crate::value::find(info, crate::keys::TIMEOUT)
            .and_then(Value::as_u64)
            .map_or(DEFAULT_LOOKUP_WAIT, Duration::from_secs);
        let mut inner = lock(&self.inner);
        let found: Vec<Published> = keys.iter().filter_map(|k| self.find(&inner, k)).collect();
        if !wait || found.len() == keys.len() {
            drop(inner);
            reply.send(Ok(found));
            return;
        }
        inner.waiters.push(Waiter {
            keys,
            deadline: Instant::now() + timeout,
            reply,
        });
    }

    /// Removes `keys` published by `proc` (all its keys if `keys` is empty).
    pub fn unpublish(&self, proc: &Proc, keys: &[String], reply: OpReply) {
        let mut inner = lock(&self.inner);
        let gone = |k: &String, p: &Published| {
            p.publisher == *proc && (keys.is_empty() || keys.contains(k))
        };
        if let Some(node) = &self.node {
            for (k, _) in inner.data.iter().filter(|(k, p)| gone(k, p)) {
                node.remove(k, proc);
            }
        }
        inner.data.retain(|k, p| !gone(k, p));
        drop(inner);
        reply.send(Ok(()));
    }

    /// A key from this job, or else from the node directory.
    fn find(&self, inner: &StoreInner, key: &str) -> Option<Published> {
        inner
            .data
            .get(key)
            .cloned()
            .or_else(|| self.node.as_ref()?.get(key))
    }

    /// Answers waiting lookups whose keys other jobs published meanwhile, and fails those
    /// whose deadline passed with `PMIX_ERR_TIMEOUT`. A host calls this periodically
    /// (`maestro run` does every 100 ms).
    pub fn expire(&self, now: Instant) {
        let mut inner = lock(&self.inner);
        if self.node.is_some() {
            let mut i = 0;
            while i < inner.waiters.len() {
                let found: Vec<Published> = inner.waiters[i]
                    .keys
                    .iter()
                    .filter_map(|k| self.find(&inner, k))
                    .collect();
                if found.len() == inner.waiters[i].keys.len() {
                    inner.waiters.swap_remove(i).reply.send(Ok(found));
                } else {
                    i += 1;
                }
            }
        }
        let (expired, keep): (Vec<Waiter>, Vec<Waiter>) =
            inner.waiters.drain(..).partition(|w| w.deadline <= now);
        inner.waiters = keep;
        drop(inner);
        for w in expired {
            w.reply.send(Err(Status::TIMEOUT));
        }
    }

    /// Drops everything a finished job published (here and in the node directory).
    pub fn forget_nspace(&self, nspace: &str) {
        lock(&self.inner)
            .data
            .retain(|_, p| p.publisher.nspace != nspace);
        if let Some(node) = &self.node {
            node.remove_nspace(nspace);
        }
    }
}

impl StoreInner {
    /// Removes and returns the waiters whose keys are all present, with their data.
    fn take_ready(&mut self) -> Vec<(Waiter, Vec<Published>)> {
        let mut ready = Vec::new();
        let mut i = 0;
        while i < self.waiters.len() {
            if self.waiters[i]
                .keys
                .iter()
                .all(|k| self.data.contains_key(k))
            {
                let w = self.waiters.swap_remove(i);
                let found = w
                    .keys
                    .iter()
                    .filter_map(|k| self.data.get(k).cloned())
                    .collect();
                ready.push((w, found));
            } else {
                i += 1;
            }
        }
        ready
    }
}

/// Publish directives that are not data.
fn is_directive(key: &str) -> bool {
    [
        crate::keys::RANGE,
        crate::keys::PERSISTENCE,
        crate::keys::TIMEOUT,
        crate::keys::USERID,
        crate::keys::GRPID,
        crate::keys::WAIT,
    ]
    .contains(&key)
}
