//! Offers the PM has written to the global file system when consumer and provider share
//! no network (Maestro's GFS transport chosen by the pool, not the app): where the plan
//! would have the PM relay the bytes over both control connections, and both apps
//! announced the same GFS directory at JOIN, the provider is asked to write the offer
//! there ([`FromPm::Spill`]); its answer ([`ToPm::Spilled`](crate::proto::ToPm::Spilled))
//! names the file, which every consumer is ticketed from from then on (the consumers
//! wait meanwhile). A provider that cannot write it says why, and its consumers get the
//! stream; so do they when it has not answered by [`Policy::spill_timeout`]
//! (`crate::policy::Policy`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::kept::under;
use super::{ConnId, HashMap, HashSet, Manager, State, later};
use crate::proto::{AppId, CdoId, FromPm, GfsFile, Op, Refusal};

/// Offers whose providers were asked to write them (until when they may answer), those
/// written (their memory is still offered: consumers outside the directory read that),
/// and those that could not be.
#[derive(Debug, Default)]
pub(super) struct Spills {
    asked: HashMap<CdoId, Instant>,
    deadlines: BTreeSet<(Instant, CdoId)>,
    written: HashSet<CdoId>,
    failed: HashSet<CdoId>,
}

impl Manager {
    /// Whether `consumer` should wait for `provider` to write offer `from` to the global
    /// file system rather than be sent the stream: both announced the same GFS directory,
    /// the offer has no file yet, and its provider has not said it cannot write one.
    pub(super) fn spillable(&self, consumer: AppId, provider: AppId, from: CdoId) -> bool {
        self.share_gfs(consumer, provider)
            && !self.spills.failed.contains(&from)
            && self
                .cdos
                .get(&from)
                .is_some_and(|c| c.extras.gfs().is_none())
    }

    /// Whether `consumer` is to read offer `from` of `provider` from its file, if it has
    /// one: always for a file its producer chose to write (its only copy), only from the
    /// same directory for one the PM had written.
    pub(super) fn reads_file(&self, consumer: AppId, provider: AppId, from: CdoId) -> bool {
        !self.spills.written.contains(&from) || self.share_gfs(consumer, provider)
    }

    /// Whether apps `a` and `b` announced the same GFS directory.
    fn share_gfs(&self, a: AppId, b: AppId) -> bool {
        let dir = |x: AppId| self.apps.get(&x).and_then(|x| x.gfs.as_deref());
        dir(a).is_some() && dir(a) == dir(b)
    }

    /// Asks the provider of offer `from` to write it to its GFS directory (once), by the
    /// spill deadline.
    pub(super) fn spill(&mut self, from: CdoId) {
        if self.spills.asked.contains_key(&from) {
            return;
        }
        let until = later(self.events.now(), self.policy.spill_timeout);
        self.spills.asked.insert(from, until);
        self.spills.deadlines.insert((until, from));
        if let Some(conn) = self.app_conn(from) {
            tracing::debug!(
                "asking the provider of CDO {from} to write it to the global file system"
            );
            self.out.push(conn, FromPm::Spill { cdo: from });
        }
    }

    /// The provider's answer: the file of `cdo` (with its checksum), or why there is none. Its name's waiting
    /// consumers are ticketed (from the file, or by stream).
    pub(super) fn spilled(
        &mut self,
        conn: ConnId,
        app: AppId,
        cdo: CdoId,
        file: Result<GfsFile, String>,
    ) {
        let dir = self.apps.get(&app).and_then(|a| a.gfs.clone());
        let mine = self.cdos.get(&cdo).filter(|c| c.app() == app);
        if mine.is_none() || !self.spills.asked.contains_key(&cdo) {
            return self.refuse(conn, Op::Spilled, Some(cdo), Refusal::UnknownCdo);
        }
        self.unask(cdo);
        let Some(c) = self.cdos.get(&cdo) else {
            return;
        };
        let name = Arc::clone(&c.name);
        let offered = matches!(c.state, State::Offered(_) | State::Withdrawing(_));
        match (file, dir) {
            (Ok(file), Some(dir)) if offered && under(&file.path, &dir).is_some() => {
                if let Some(mut c) = self.cdos.get_mut(&cdo) {
                    c.extras = std::mem::take(&mut c.extras).with_gfs(file);
                }
                self.spills.written.insert(cdo);
            }
            (Ok(file), _) => {
                tracing::warn!(
                    "CDO {cdo}: {} is not a file of its provider's GFS directory; its consumers get the stream",
                    file.path
                );
                self.spills.failed.insert(cdo);
            }
            (Err(why), _) => {
                tracing::warn!(
                    "CDO {cdo} could not be written to the global file system ({why}); its consumers get the stream"
                );
                self.spills.failed.insert(cdo);
            }
        }
        self.ticket_waiting(&name);
    }

    /// Tickets the consumers waiting for `name`.
    /// Tickets the consumers waiting for `name` that an offer can serve now.
    pub(super) fn ticket_waiting(&mut self, name: &str) {
        for w in self.cdos.waiting(name).to_vec() {
            self.ticket(w);
        }
    }

    /// No answer is awaited for `cdo` any more.
    fn unask(&mut self, cdo: CdoId) {
        if let Some(until) = self.spills.asked.remove(&cdo) {
            self.spills.deadlines.remove(&(until, cdo));
        }
    }

    /// When the next provider asked to write an offer runs out of time.
    pub(super) fn next_spill_deadline(&self) -> Option<Instant> {
        self.spills.deadlines.first().map(|(at, _)| *at)
    }

    /// Providers that did not answer by `now`: their offers' consumers get the stream
    /// (the provider's late answer is refused).
    pub(super) fn expire_spills(&mut self, now: Instant) {
        while let Some(&(at, cdo)) = self.spills.deadlines.first().filter(|(at, _)| *at <= now) {
            self.spills.deadlines.remove(&(at, cdo));
            self.spills.asked.remove(&cdo);
            self.spills.failed.insert(cdo);
            let Some(name) = self.cdos.get(&cdo).map(|c| Arc::clone(&c.name)) else {
                continue;
            };
            tracing::warn!(
                "the provider of CDO {cdo} did not write it to the global file system within {:?}; its consumers get the stream",
                self.policy.spill_timeout
            );
            self.ticket_waiting(&name);
        }
    }

    /// `cdo` is gone: nothing to remember of it.
    pub(super) fn forget_spill(&mut self, cdo: CdoId) {
        self.unask(cdo);
        self.spills.written.remove(&cdo);
        self.spills.failed.remove(&cdo);
    }
}
