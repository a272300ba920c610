//! A manager's place among the shards of its pool (see docs/developers/shards.md): shard
//! 0 numbers the apps and tells their joins and leaves; every other shard takes only apps
//! of shard 0, each by the app id shard 0 gave it ([`Join::member`](crate::proto::Join)),
//! and raises no app events. A pool of one manager is shard 0 of 1: as before.

use super::Manager;
use crate::proto::{self, AppId, Reclaim, Refusal};
use crate::shards::Place;

impl Manager {
    /// This manager is shard `place` of its pool from now on (before any app joins; the
    /// default: the only one); it enforces its share of the pool's per-app quotas
    /// ([`Policy::share`](super::Policy::share)) and numbers its events from
    /// [`Place::first_serial`].
    pub fn set_shard(&mut self, place: Place) {
        self.shard = place;
        self.policy = self.pool_policy.share(place.of());
        self.events.heard(place.first_serial() - 1);
    }

    /// Which shard of its pool this manager is.
    pub fn shard(&self) -> Place {
        self.shard
    }

    /// Whether this manager is the home of the CDOs named `name` (the only one, in a pool
    /// of one manager).
    pub fn is_home(&self, name: &str) -> bool {
        self.shard.of().home(name) == self.shard.index()
    }

    /// The app id a JOIN gets here, given what it reclaims and the member id it claims:
    /// at shard 0 as [`Manager::reclaimed_id`] decides (no member id); at another shard
    /// the member id, once (a reclaim in a grace period names the same app).
    ///
    /// # Errors
    /// [`Refusal::Shard`] for a member id at shard 0, none at another shard, one no app
    /// can have or one joined here already; what [`Manager::reclaimed_id`] refuses.
    pub(super) fn joined_id(
        &self,
        reclaim: Option<Reclaim>,
        member: Option<AppId>,
    ) -> Result<Option<AppId>, Refusal> {
        let (index, count) = (self.shard.index(), self.shard.of().count());
        let Some(app) = member else {
            if index > 0 {
                return Err(Refusal::Shard(format!(
                    "this pool manager is shard {index} of {count}: join shard 0 first, then here as the app it numbered (Join::member)"
                )));
            }
            return self.reclaimed_id(reclaim);
        };
        if index == 0 {
            return Err(Refusal::Shard(format!(
                "this pool manager is shard 0 of {count}, which numbers the apps: join it without a member id"
            )));
        }
        if app == 0 || app > proto::MAX_APP {
            return Err(Refusal::Shard(format!("app id {app} is no app's")));
        }
        if self.apps.contains_key(&app) {
            return Err(Refusal::Shard(format!("app {app} is joined here already")));
        }
        // A member new here holds nothing here to reclaim, and shard 0 numbered it (it is
        // no new app of the pool): it joins in a grace period too, its events logged for
        // the subscriptions asked again later in it.
        if reclaim.is_none() {
            return Ok(Some(app));
        }
        match self.reclaimed_id(reclaim)? {
            Some(reclaimed) if reclaimed != app => Err(Refusal::Shard(format!(
                "a JOIN as member {app} reclaims app {reclaimed}"
            ))),
            _ => Ok(Some(app)),
        }
    }
}
