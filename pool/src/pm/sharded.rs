//! The pool managers of one sharded pool started together (see
//! docs/developers/shards.md): `K` [`PoolManager`]s, each shard `s` of `K` and the home
//! of its share of the CDO names, sharing the workflow secret, listed in one PM info
//! (`mstro-pm-v2`). What `maestro pm --shards K` and `mstro_pm_start` with
//! `MSTRO_PM_SHARDS` run in one process; a pool of one shard is one manager, as before.

use pool_core::shards::{Place, Shards};

use super::{FabricReporter, PmConfig, PoolManager};
use crate::bootstrap::PmInfo;

/// The managers of one pool, by shard, and the PM info naming them all.
pub struct ShardedPool {
    managers: Vec<PoolManager>,
    info: PmInfo,
}

impl ShardedPool {
    /// Starts a manager per shard of `shards`, each with the configuration `config` makes
    /// for its place (its listen addresses, metrics endpoint, ...; its `shard` is set
    /// here), all with the workflow and secret of shard 0's. A manager that fails to
    /// start stops those started before it.
    ///
    /// # Errors
    /// The first error of `config` or of [`PoolManager::start`].
    pub fn start(
        shards: Shards,
        mut config: impl FnMut(Place) -> std::io::Result<PmConfig>,
    ) -> std::io::Result<ShardedPool> {
        let mut managers = Vec::with_capacity(shards.count());
        for place in (0..shards.count()).filter_map(|s| shards.place(s)) {
            let mut c = config(place)?;
            c.shard = Some(place);
            if let Some(first) = managers.first().map(PoolManager::info) {
                let first: &PmInfo = first;
                c.workflow.clone_from(&first.workflow);
                c.secret.clone_from(&first.secret);
            }
            managers.push(PoolManager::start(c)?);
        }
        let info = PmInfo {
            other_shards: managers[1..]
                .iter()
                .map(|p| p.info().endpoints.clone())
                .collect(),
            ..managers[0].info().clone()
        };
        Ok(ShardedPool { managers, info })
    }

    /// The PM info applications join with: every shard's endpoints, the secret.
    pub fn info(&self) -> &PmInfo {
        &self.info
    }

    /// The managers, by shard.
    pub fn managers(&self) -> &[PoolManager] {
        &self.managers
    }

    /// A handle per manager that reports fabric changes to it: a change the host raised
    /// goes to every shard (each plans its transfers with it; shard 0 alone tells
    /// subscribers).
    pub fn reporters(&self) -> Vec<FabricReporter> {
        self.managers.iter().map(PoolManager::reporter).collect()
    }

    /// Stops every manager, shard 0 last, and waits for them.
    ///
    /// # Errors
    /// Each manager's error of [`PoolManager::stop`], with its shard.
    pub fn stop(self) -> Result<(), String> {
        let count = self.managers.len();
        let mut errors = Vec::new();
        for (s, pm) in self.managers.into_iter().enumerate().rev() {
            if let Err(e) = pm.stop() {
                errors.push(if count > 1 {
                    format!("shard {s}: {e}")
                } else {
                    e
                });
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}
