//! PMIx events that become pool events.
//!
//! Where the PMIx host raises events (`maestro run`; Open MPI within a node; never Slurm,
//! whose step dies on any notification, though registering a handler there is harmless),
//! the process that runs the pool manager registers for [`WATCHED`] and hands each event to
//! the PM ([`forward`]), which tells subscribers of `EventKind::Fabric` and acts on it.
//!
//! Link changes travel as `PMIX_FABRIC_UPDATED` with three keys of ours ([`link_info`]
//! builds them, `maestro run`'s link monitor raises them): the interface name, whether it
//! is up, and its addresses, so the PM can keep new transfers off endpoints bound there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pmix::{Info, Status, Value};

use crate::Subnet;
use crate::events::FabricChange;

/// The event codes the pool manager listens to.
pub const WATCHED: [Status; 6] = [
    Status::PROC_ABORTED,
    Status::PROC_ABORTED_BY_SIG,
    Status::PROC_TERM_WO_SYNC,
    Status::NODE_DOWN,
    Status::LOST_CONNECTION,
    Status::FABRIC_UPDATED,
];

/// The information of a `PMIX_FABRIC_UPDATED` event for a link that went up or down.
pub fn link_info(name: &str, addresses: &[Subnet], up: bool) -> Vec<Info> {
    let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    vec![
        Info::new(maestro_keys::LINK_NAME, Value::String(name.to_string())),
        Info::new(maestro_keys::LINK_UP, Value::Bool(up)),
        Info::new(maestro_keys::LINK_ADDRESSES, Value::String(list.join(","))),
        Info::new(
            pmix::keys::EVENT_TEXT_MESSAGE,
            Value::String(format!("link {name} {}", if up { "up" } else { "down" })),
        ),
    ]
}

/// The information of a `PMIX_FABRIC_UPDATED` event for a switch link of the fabric
/// beyond the node that went down or up.
pub fn switch_link_info(link: &str, up: bool) -> Vec<Info> {
    let state = if up { "up" } else { "down" };
    vec![
        Info::new(maestro_keys::SWITCH_LINK, Value::String(link.to_string())),
        Info::new(maestro_keys::LINK_UP, Value::Bool(up)),
        Info::new(
            pmix::keys::EVENT_TEXT_MESSAGE,
            Value::String(format!("switch link {link} {state}")),
        ),
    ]
}

/// What a PMIx event means for the pool.
#[derive(Clone, Debug, PartialEq)]
pub enum Forwarded {
    /// A change the pool manager takes as it is reported.
    Change(FabricChange),
    /// A switch link of the fabric beyond the node went down or up: the process running
    /// the pool manager asks its host for the hops now (`PMIx_Fabric_update`).
    SwitchLink {
        /// The link, by its ends and ports.
        link: String,
        /// Up now.
        up: bool,
    },
}

/// What a PMIx event means for the pool: a switch link's change, a link change (with our
/// keys) or a description of anything else (status, affected process, message).
pub fn forwarded(event: &pmix::Event) -> Forwarded {
    let find = |k: &str| pmix::find(&event.info, k);
    if let (Some(Value::String(link)), Some(Value::Bool(up))) =
        (find(maestro_keys::SWITCH_LINK), find(maestro_keys::LINK_UP))
    {
        return Forwarded::SwitchLink {
            link: link.clone(),
            up: *up,
        };
    }
    Forwarded::Change(change_of(event))
}

/// What a PMIx event means for the pool as a reported change: a link change (with our
/// keys) or a description of anything else (status, affected process, message).
pub fn change_of(event: &pmix::Event) -> FabricChange {
    let find = |k: &str| pmix::find(&event.info, k);
    if let (Some(Value::String(name)), Some(Value::Bool(up))) =
        (find(maestro_keys::LINK_NAME), find(maestro_keys::LINK_UP))
    {
        let addresses = match find(maestro_keys::LINK_ADDRESSES) {
            Some(Value::String(list)) => list.split(',').filter_map(|a| a.parse().ok()).collect(),
            _ => Vec::new(),
        };
        return FabricChange::Link {
            name: name.clone(),
            addresses,
            up: *up,
        };
    }
    let mut text = format!("PMIx event {}", event.status);
    if let Some(p) = event.affected_proc() {
        text.push_str(&format!(" for process {p}"));
    }
    if let Some(Value::String(m)) = find(pmix::keys::EVENT_TEXT_MESSAGE) {
        text.push_str(&format!(": {m}"));
    }
    FabricChange::Other(text)
}

/// Hands `event` to the pool managers of `reporters` (the shards of one pool): a change as
/// it is; a switch link's change with the hops the PMIx host serves now
/// (`PMIx_Fabric_update` through `client`; without a cost matrix there, as a described
/// change). False when a manager has stopped.
pub fn deliver(
    reporters: &[crate::FabricReporter],
    client: &pmix::Client,
    event: Forwarded,
) -> bool {
    let (link, up) = match event {
        Forwarded::Change(c) => return reporters.iter().all(|r| r.report(c.clone())),
        Forwarded::SwitchLink { link, up } => (link, up),
    };
    match crate::distances::from_host(client, true) {
        Ok(Some(d)) => reporters
            .iter()
            .all(|r| r.topology(d.clone(), vec![(link.clone(), up)])),
        why => {
            let why = match why {
                Err(e) => e,
                _ => "the host serves no cost matrix".into(),
            };
            tracing::warn!("switch link {link}: the hops now are not known ({why})");
            let state = if up { "up" } else { "down" };
            let c = FabricChange::Other(format!("switch link {link} {state}"));
            reporters.iter().all(|r| r.report(c.clone()))
        }
    }
}

/// Registers for [`WATCHED`] and hands what every event means to `deliver` until `stop`
/// is set or `deliver` returns false. Run it on a thread that may borrow `client` (e.g. in
/// `std::thread::scope`). The PM's own process delivers with
/// `|c| pm.reporter().report(c)`; an application of another job with
/// `|c| pool_client.report(c).is_ok()`.
///
/// A host that supports no events (Slurm's PMIx plugin refuses the registration with
/// `PMIX_ERR_SERVER_FAILED_REQUEST`) is not an error: it is said at info level and nothing
/// is forwarded.
///
/// # Errors
/// The PMIx error if the handler cannot be registered for another reason.
pub fn forward(
    client: &pmix::Client,
    stop: &AtomicBool,
    mut deliver: impl FnMut(Forwarded) -> bool,
) -> Result<(), pmix::Error> {
    let handler = match client.register_events(&WATCHED) {
        Ok(h) => h,
        Err(
            pmix::Error::NotSupported { .. }
            | pmix::Error::Pmix {
                status: pmix::Status::SERVER_FAILED_REQUEST,
                ..
            },
        ) => {
            tracing::info!(
                "this PMIx host delivers no events: processes lost and links down do not become pool events"
            );
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    while !stop.load(Ordering::Relaxed) {
        if let Some(event) = handler.recv_timeout(Duration::from_millis(100)) {
            let change = forwarded(&event);
            tracing::info!("PMIx event for the pool: {change:?}");
            if !deliver(change) {
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(status: Status, info: Vec<Info>) -> pmix::Event {
        pmix::Event {
            status,
            source: None,
            info,
        }
    }

    #[test]
    fn link_events_round_trip() {
        let addrs = [
            "10.1.0.1/24".parse().expect("subnet"),
            "fd00::1/64".parse().expect("subnet"),
        ];
        let e = event(Status::FABRIC_UPDATED, link_info("veth1", &addrs, false));
        assert_eq!(
            change_of(&e),
            FabricChange::Link {
                name: "veth1".into(),
                addresses: addrs.to_vec(),
                up: false
            }
        );
    }

    #[test]
    fn other_events_are_described() {
        let p = pmix::Proc::new("job", 3);
        let e = event(
            Status::PROC_ABORTED,
            vec![
                Info::new(pmix::keys::EVENT_AFFECTED_PROC, Value::Proc(p)),
                Info::new(
                    pmix::keys::EVENT_TEXT_MESSAGE,
                    Value::String("rank 3 exited with 7".into()),
                ),
            ],
        );
        let FabricChange::Other(text) = change_of(&e) else {
            panic!("not a link");
        };
        assert!(
            text.contains("job:3") && text.contains("rank 3 exited with 7"),
            "{text}"
        );
    }
}
