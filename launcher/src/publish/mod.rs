//! Publish/lookup for `maestro run`'s PMIx host (`PMIx_Publish`, `PMIx_Lookup`,
//! `PMIx_Unpublish` of its ranks and tools): [`PublishStore`] keeps the job's data in
//! memory and answers waiting lookups; [`node::NodeDirectory`] shares data published with
//! `PMIX_RANGE_GLOBAL` with the user's other jobs on the node (and with `maestro pool`,
//! which finds the pool managers they published there).

pub mod node;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pmix::server::{LookupReply, OpReply};
use pmix::{Info, Proc, Published, Status, Value};

pub use node::NodeDirectory;

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
    fn inner(&self) -> MutexGuard<'_, StoreInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

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
    /// With `PMIX_RANGE_GLOBAL` the data also goes to the node directory; the publish
    /// fails with `PMIX_ERR_DUPLICATE_KEY` if another job holds a key and with
    /// `PMIX_ERR_NOT_SUPPORTED` for a value type that cannot cross jobs, or when there is
    /// no node directory (the publisher learns that other jobs will not see it, rather
    /// than believing they do).
    pub fn publish(&self, proc: &Proc, info: Vec<Info>, reply: OpReply) {
        let global = pmix::find(&info, pmix::keys::RANGE)
            .is_some_and(|v| *v == Value::Range(pmix::Range::Global.raw()));
        if global && self.node.is_none() {
            reply.send(Err(Status::NOT_SUPPORTED));
            return;
        }
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
        let mut inner = self.inner();
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
        self.inner()
            .data
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, p)| (k.clone(), p.value.clone()))
            .collect()
    }

    /// Answers a lookup: now if every key exists or `PMIX_WAIT` is absent, otherwise when
    /// the keys are published or the request times out (answered by [`PublishStore::expire`]).
    pub fn lookup(&self, keys: Vec<String>, info: &[Info], reply: LookupReply) {
        let wait = pmix::find(info, pmix::keys::WAIT).is_some();
        let timeout = pmix::find(info, pmix::keys::TIMEOUT)
            .and_then(Value::as_u64)
            .map_or(DEFAULT_LOOKUP_WAIT, Duration::from_secs);
        let mut inner = self.inner();
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
        let mut inner = self.inner();
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
        let mut inner = self.inner();
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
        self.inner()
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
        pmix::keys::RANGE,
        pmix::keys::PERSISTENCE,
        pmix::keys::TIMEOUT,
        pmix::keys::USERID,
        pmix::keys::GRPID,
        pmix::keys::WAIT,
    ]
    .contains(&key)
}
