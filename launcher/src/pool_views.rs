//! The pool's views as `maestro run`'s PMIx host answers `PMIx_Query_info` for them
//! (`maestro.pool.status`, `.cdos`, `.transfers`, `.fabric`): it asks the PM its jobs
//! published, as an observer.

use std::time::Duration;

use pmix::{Info, Value};
use pool::bootstrap::PmInfo;
use pool::view::{self, Ls, Query, View};

/// Answers for the launcher's PMIx host (`maestro run`): the JSON of one view of the pool
/// of `workflow` (or the only one `pm_infos` holds), or `{"error": ...}` saying why not.
pub fn launcher_answer(
    pm_infos: &[(String, String)],
    key: &str,
    qualifiers: &[Info],
    timeout: Duration,
) -> String {
    match launcher_view(pm_infos, key, qualifiers, timeout) {
        Ok(json) => json,
        Err(e) => serde_json::json!({ "error": e }).to_string(),
    }
}

fn launcher_view(
    pm_infos: &[(String, String)],
    key: &str,
    qualifiers: &[Info],
    timeout: Duration,
) -> Result<String, String> {
    let wanted = pmix::find(qualifiers, maestro_keys::POOL_WORKFLOW).and_then(Value::as_str);
    let info = match (wanted, pm_infos) {
        (Some(w), _) => pm_infos.iter().find(|(name, _)| name == w).ok_or_else(|| {
            format!("no pool manager of workflow {w:?} is published in this launcher")
        })?,
        (None, [one]) => one,
        (None, []) => return Err("no pool manager is published in this launcher's jobs".into()),
        (None, _) => {
            let names: Vec<&str> = pm_infos.iter().map(|(n, _)| n.as_str()).collect();
            return Err(format!(
                "several pools ({}); qualify the query with {}",
                names.join(", "),
                maestro_keys::POOL_WORKFLOW
            ));
        }
    };
    let info = PmInfo::parse(&info.1).map_err(|e| format!("the published PM info: {e}"))?;
    let query = match key {
        maestro_keys::POOL_STATUS => Query::Status,
        maestro_keys::POOL_TRANSFERS => Query::Transfers,
        maestro_keys::POOL_FABRIC => Query::Fabric,
        maestro_keys::POOL_CDOS => {
            let selector =
                match pmix::find(qualifiers, maestro_keys::POOL_SELECTOR).and_then(Value::as_str) {
                    Some(text) => Some(
                        pool_tools::selector::parse(text, "")
                            .map_err(|e| format!("{}: {e}", maestro_keys::POOL_SELECTOR))?,
                    ),
                    None => None,
                };
            Query::Ls(Ls {
                selector,
                after: pmix::find(qualifiers, maestro_keys::POOL_AFTER).and_then(Value::as_u64),
                limit: view::MAX_PAGE,
                attributes: true,
            })
        }
        other => return Err(format!("{other} is no pool view")),
    };
    let mut observer =
        pool::Observer::connect(&info, "maestro-run", timeout).map_err(|e| e.to_string())?;
    let view = observer.query(query).map_err(|e| e.to_string())?;
    let json = match view {
        View::Status(v) => serde_json::to_string(&v),
        View::Cdos(v) => serde_json::to_string(&v),
        View::Transfers(v) => serde_json::to_string(&v),
        View::Fabric(v) => serde_json::to_string(&v),
    };
    json.map_err(|e| e.to_string())
}
