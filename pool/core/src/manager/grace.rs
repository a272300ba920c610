//! A manager that takes over from one that is gone (restarted, or a standby): its grace
//! period, in which only apps that held state with the old manager join, each with its old
//! app id ([`crate::proto::Join::reclaim`]), so that the CDO ids it numbered stay valid and
//! it can replay what it holds (see docs/developers/failover.md). New apps are refused
//! ([`Refusal::Grace`]) until the period ends, and the replayed operations raise no
//! events until the app's [`ToPm::Replayed`](crate::proto::ToPm::Replayed) (the
//! subscribers heard of them from the old manager; `Manager::emit`).

use std::time::Instant;

use super::Manager;
use crate::proto::{self, AppId, Reclaim, Refusal};

impl Manager {
    /// This manager takes over a workflow's pool from one that is gone: until `until`,
    /// only apps reclaiming their old app id join ([`Manager::in_grace`]).
    pub fn reclaiming(&mut self, until: Instant) {
        tracing::info!("grace period: only apps reclaiming what they held join until it ends");
        self.grace = Some(until);
        self.events.log_grace(true);
        // Transfers (and leases and subscriptions) are numbered from a start of this
        // instance's own, far from the old manager's: a transfer of the old one still
        // ending in an app is never taken for one of the new.
        self.next_id = self.next_id.max(1 + (self.instance >> 16));
    }

    /// Reclaiming `app` replayed what the manager that is gone confirmed: its operations
    /// raise events from now on.
    pub(super) fn replayed(&mut self, app: AppId) {
        if let Some(a) = self.apps.get_mut(&app) {
            a.replaying = false;
        }
    }

    /// The manager stops (its workflow ends): every app hears BYE, so that the end of
    /// its connection is no loss its client waits to reclaim from (see
    /// [`ClientCore::lost`](crate::client::ClientCore::lost)). The driver writes them
    /// before it closes the connections.
    pub fn closing(&mut self) {
        let conns: Vec<_> = self.apps.values().map(|a| a.conn).collect();
        for conn in conns {
            self.out.push(conn, crate::proto::FromPm::Bye);
        }
    }

    /// This manager's instance, its generation (the `pool` of its welcomes).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// Whether the grace period of [`Manager::reclaiming`] runs.
    pub fn in_grace(&self) -> bool {
        self.grace.is_some()
    }

    /// The grace period ends at its deadline.
    pub(super) fn end_grace(&mut self, now: Instant) {
        if self.grace.is_some_and(|until| until <= now) {
            self.grace = None;
            self.events.log_grace(false);
            for (app, a) in &mut self.apps {
                if std::mem::take(&mut a.replaying) {
                    tracing::warn!(
                        "app {app} ({}) did not finish its replay within the grace period: what it replays from now on is announced to subscribers",
                        a.label
                    );
                }
            }
            tracing::info!(
                "grace period over: {} apps reclaimed what they held; new apps join again",
                self.apps.len()
            );
        }
    }

    /// The app id a JOIN gets, given what it reclaims: the next one for a new app outside
    /// the grace period (`None`), its old one for a reclaim within it.
    ///
    /// # Errors
    /// [`Refusal::Grace`] for a new app within the grace period; [`Refusal::NotReclaimed`]
    /// for a reclaim outside it, of an id no app can have, or of one another connection
    /// reclaimed already.
    pub(super) fn reclaimed_id(&self, reclaim: Option<Reclaim>) -> Result<Option<AppId>, Refusal> {
        match (reclaim, self.grace) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(Refusal::Grace),
            (Some(_), None) => Err(Refusal::NotReclaimed(
                "this pool manager is in no grace period: join as a new app".into(),
            )),
            (Some(r), Some(_)) if r.app == 0 || r.app > proto::MAX_APP => Err(
                Refusal::NotReclaimed(format!("app id {} is no app's", r.app)),
            ),
            (Some(r), Some(_)) if self.apps.contains_key(&r.app) => Err(Refusal::NotReclaimed(
                format!("app {} was reclaimed by another connection already", r.app),
            )),
            (Some(r), Some(_)) => Ok(Some(r.app)),
        }
    }
}
