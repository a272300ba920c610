//! A manager that takes over from one that is gone (restarted, or a standby): its grace
//! period, in which only apps that held state with the old manager join, each with its old
//! app id ([`crate::proto::Join::reclaim`]), so that the CDO ids it numbered stay valid and
//! it can replay what it holds (see docs/developers/failover.md). New apps are refused
//! ([`Refusal::Grace`]) until the period ends, and the replayed operations raise no
//! events until the app's [`ToPm::Replayed`](crate::proto::ToPm::Replayed) (the
//! subscribers heard of them from the old manager; `Manager::emit`).

use std::time::Instant;

use super::Manager;
use crate::events::EventKind;
use crate::proto::{self, AppId, Reclaim, Refusal};

/// What a manager that takes over knows of the apps expected back ([`Manager::expecting`])
/// and of those that came.
#[derive(Debug, Default)]
pub(super) struct Takeover {
    /// When the grace period began.
    since: Option<Instant>,
    /// `None`: not known (a PM restarted by hand).
    expected: Option<std::collections::BTreeMap<AppId, String>>,
    back: Vec<AppId>,
}

/// The shortest grace period of a manager that knows which apps to expect back
/// ([`Manager::expecting`]).
pub const MIN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

impl Manager {
    /// This manager takes over a workflow's pool from one that is gone: until `until`,
    /// only apps reclaiming their old app id join ([`Manager::in_grace`]).
    pub fn reclaiming(&mut self, until: Instant) {
        tracing::info!("grace period: only apps reclaiming what they held join until it ends");
        self.grace = Some(until);
        self.takeover.since = Some(self.events.now());
        self.events.log_grace(true);
        // Transfers (and leases and subscriptions) are numbered from a start of this
        // instance's own, far from the old manager's: a transfer of the old one still
        // ending in an app is never taken for one of the new.
        self.next_id = self.next_id.max(1 + (self.instance >> 16));
    }

    /// Reclaiming `app` replayed what the manager that is gone confirmed: its operations
    /// raise events from now on.
    pub(super) fn replayed(&mut self, app: AppId) {
        if let Some(a) = self.apps.get_mut(&app)
            && std::mem::take(&mut a.replaying)
        {
            self.came_back(app);
        }
    }

    /// The manager stops (its workflow ends): every app and observer hears BYE, so that
    /// the end of its connection is no loss to reclaim from or take over after (see
    /// [`ClientCore::lost`](crate::client::ClientCore::lost)). The driver writes them
    /// before it closes the connections.
    pub fn closing(&mut self) {
        let apps = self.apps.values().map(|a| a.conn);
        let conns: Vec<_> = apps.chain(self.stats.observers.keys().copied()).collect();
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

    /// The apps the manager that is gone had (their ids and labels, as a standby saw them
    /// last): the grace period ends as soon as every one of them replayed what it holds
    /// (after [`MIN_GRACE`]: at once when there were none), and the failover event names
    /// those that did not come back.
    pub fn expecting(&mut self, apps: impl IntoIterator<Item = (AppId, String)>) {
        self.takeover.expected = Some(apps.into_iter().collect());
    }

    /// The grace period ends at its deadline, or once every app expected is back.
    pub(super) fn end_grace(&mut self, now: Instant) {
        if self.grace_deadline().is_some_and(|at| at <= now) {
            self.finish_grace();
        }
    }

    /// When [`Manager::poll_timeout`] is due for the grace period: its end, or the end of
    /// its shortest length while every app expected is back already.
    pub(super) fn grace_deadline(&self) -> Option<Instant> {
        let until = self.grace?;
        let t = &self.takeover;
        let early = (t.since)
            .filter(|_| (t.expected.as_ref()).is_some_and(|e| e.keys().all(|a| t.back.contains(a))))
            .map(|at| at + MIN_GRACE);
        Some(early.map_or(until, |e| e.min(until)))
    }

    /// Reclaiming `app` came back and replayed what it holds: the grace period ends when
    /// every app expected did.
    fn came_back(&mut self, app: AppId) {
        self.takeover.back.push(app);
        if self.all_back() {
            self.finish_grace();
        }
    }

    /// Whether the grace period is due to end now: every app expected back replayed what
    /// it holds, at least [`MIN_GRACE`] into the period (an app that joined the old
    /// manager just before it died may be missing from the standby's last look: it gets
    /// that long to come back too), or its end came.
    fn all_back(&self) -> bool {
        self.grace_deadline()
            .is_some_and(|at| self.events.now() >= at)
    }

    /// The grace period is over: new apps join, a reclaiming app still replaying is late
    /// (what it sends from now on raises events), and subscribers hear who came back.
    fn finish_grace(&mut self) {
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
        let takeover = std::mem::take(&mut self.takeover);
        let missing: Vec<&str> = (takeover.expected.iter().flatten())
            .filter(|(id, _)| !takeover.back.contains(id))
            .map(|(_, label)| label.as_str())
            .collect();
        let detail = if missing.is_empty() {
            format!(
                "pool manager {:x} took over: {} apps reclaimed what they held",
                self.instance,
                takeover.back.len()
            )
        } else {
            format!(
                "pool manager {:x} took over: {} apps reclaimed what they held; not back (what they offered is gone): {}",
                self.instance,
                takeover.back.len(),
                missing.join(", ")
            )
        };
        tracing::info!("grace period over: {detail}; new apps join again");
        self.notify(EventKind::PmFailover, 0, None, || detail);
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
