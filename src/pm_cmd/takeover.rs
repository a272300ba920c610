//! Taking over from a pool manager that is gone (see docs/developers/failover.md):
//! standing by for one (`--standby-for`, of a whole pool or of one shard), taking over a
//! shard as its standby, and finding the PM info `--reclaim` takes over from.

use pool::PoolManager;
use pool::bootstrap::{self, PM_INFO_ENV};

use super::{PmOptions, Serving, config, print_metrics};

/// Takes over shard `shard` of the pool `pool` (its info as the standby last saw it) from
/// the manager `previous` (that shard alone) that is gone, expecting its apps back: one
/// manager, shard `shard` of the pool's count, with the workflow's secret and a grace
/// period. Its info is the pool's with this manager's endpoints for the shard.
///
/// # Errors
/// The manager's start errors.
pub(super) fn take_shard(
    opts: &PmOptions,
    previous: &bootstrap::PmInfo,
    expect: Option<Vec<(u64, String)>>,
    pool: &bootstrap::PmInfo,
    shard: usize,
) -> std::io::Result<Serving> {
    let count = pool.shards().count();
    let mut config = config(opts, Some(previous))?;
    config.workflow.clone_from(&previous.workflow);
    config.shard = pool.shards().place(shard);
    config.expect = expect;
    let pm = PoolManager::start(config)?;
    let info = pool.with_shard(shard, pm.info().endpoints.clone());
    eprintln!(
        "maestro pm: took over shard {shard} of {count} of workflow {:?}",
        previous.workflow
    );
    print_metrics(std::slice::from_ref(&pm), count, shard);
    Ok(Serving::Rank { pm, pool: info })
}

/// Stands by for the pool manager `watched` names (an info file, or the info itself) until
/// it is gone (its info and apps, to take over from), stopped on purpose, or a signal
/// came; with `shard`, for that shard of a pool of several (its manager alone is watched).
/// Also the pool's info as last seen.
///
/// # Errors
/// No active PM found within [`pool::standby::FIRST_CONTACT`] (30 s); a pool of several
/// shards without `shard`, or one without that shard.
pub(super) fn stand_by(
    watched: &str,
    shard: Option<usize>,
    signals: &mut signal_hook::iterator::Signals,
) -> std::io::Result<(pool::standby::Watched, Option<bootstrap::PmInfo>)> {
    use pool::standby::Watched;
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let target = pool::standby::Target::parse(watched)
        .map_err(|e| invalid(format!("--standby-for: {e}")))?;
    // The watched shard of the pool found, refused at once when the pool lacks it.
    let part = |pool: &bootstrap::PmInfo| -> Result<bootstrap::PmInfo, String> {
        let count = pool.shards().count();
        match shard {
            None if count > 1 => Err(format!(
                "--standby-for: the pool of workflow {:?} has {count} shards: stand by for one with --shard S (0 to {}), a standby each",
                pool.workflow,
                count - 1
            )),
            None => Ok(pool.clone()),
            Some(s) => pool.of_shard(s).ok_or_else(|| {
                format!(
                    "--shard {s}: the pool of workflow {:?} has {count} shards (0 to {})",
                    pool.workflow,
                    count - 1
                )
            }),
        }
    };
    if let Some(pool) = target.find() {
        part(&pool).map_err(invalid)?;
    }
    let seen = std::cell::RefCell::new(None);
    let find = || {
        let pool = target.find()?;
        let found = part(&pool).map_err(|e| tracing::error!("{e}")).ok();
        *seen.borrow_mut() = Some(pool);
        found
    };
    let mut stop = false;
    let stopped = || {
        stop |= signals.pending().next().is_some();
        stop
    };
    let of = shard.map_or_else(String::new, |s| format!(" (shard {s})"));
    eprintln!("maestro pm: standing by for the pool manager{of} of {watched}");
    let watched = pool::standby::watch(find, pool::standby::FIRST_CONTACT, stopped)?;
    match &watched {
        Watched::Gone { info, apps } => eprintln!(
            "maestro pm: the pool manager{of} of workflow {:?} is gone (its {} apps are expected back): taking over",
            info.workflow,
            apps.len()
        ),
        Watched::Stopped => {
            eprintln!("maestro pm: the pool manager{of} stopped: nothing to take over");
        }
        Watched::Interrupted => {}
    }
    Ok((watched, seen.into_inner()))
}

/// The PM info of the pool manager `--reclaim` takes over from: this node's record of the
/// workflow's PM (see [`launcher::rundir::takeover_file`]), the `--info-file`, or
/// `MSTRO_POOL_MANAGER_INFO`, the first of them that holds the workflow's.
///
/// # Errors
/// `NotFound` saying where it looked when none does; a malformed `MSTRO_POOL_MANAGER_INFO`.
pub(super) fn previous_info(opts: &PmOptions) -> std::io::Result<bootstrap::PmInfo> {
    let record = launcher::rundir::takeover_file(&opts.workflow).map_err(safefs::Error::into_io)?;
    let mut looked = Vec::new();
    for path in std::iter::once(&record).chain(&opts.info_file) {
        match bootstrap::PmInfo::from_file(path) {
            Ok(Some(info)) if info.workflow == opts.workflow => return Ok(info),
            Ok(Some(info)) => {
                looked.push(format!("{} (workflow {:?})", path.display(), info.workflow))
            }
            Ok(None) => looked.push(format!("{} (none)", path.display())),
            Err(e) => looked.push(format!("{} ({e})", path.display())),
        }
    }
    match bootstrap::PmInfo::from_env() {
        Ok(Some(info)) if info.workflow == opts.workflow => return Ok(info),
        Ok(_) => looked.push(format!("{PM_INFO_ENV} (not of this workflow, or unset)")),
        Err(e) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{PM_INFO_ENV}: {e}"),
            ));
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "--reclaim: no PM info of workflow {:?} to take over (looked at {}); run it on the node of the pool manager that is gone, or give that PM's line as {PM_INFO_ENV}",
            opts.workflow,
            looked.join(", ")
        ),
    ))
}
