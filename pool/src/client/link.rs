//! Watching the links of the client's fabric endpoints: a change is reported to the PM
//! as a fabric change, so new transfers go around a link that is down.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;

/// How often a client looks at its endpoint's link.
const LINK_POLL: Duration = Duration::from_millis(200);

/// Watches the interfaces the client's fabric endpoints are bound to (those sysfs knows)
/// and reports each change of their links to the PM as a fabric change: under hosts that raise
/// no fabric events (Slurm) this is how the pool hears that a link went down, and routes new
/// transfers around it.
pub(super) fn watch_endpoint_link(shared: &Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let domains = shared
        .endpoint
        .iter()
        .chain(&shared.alternates)
        .map(|e| e.info().domain.clone());
    let mut monitor = inventory::netif::LinkMonitor::new(domains);
    monitor.watched().next()?;
    let shared = shared.clone();
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(LINK_POLL);
        loop {
            tick.tick().await;
            for c in monitor.poll() {
                tracing::info!(
                    "link {} of this app's endpoint is {}",
                    c.name,
                    if c.up { "up" } else { "down" }
                );
                let change = crate::events::FabricChange::Link {
                    name: c.name,
                    addresses: c.addresses,
                    up: c.up,
                };
                if shared.with_core(|c| c.report(&change)).is_err() {
                    return;
                }
            }
        }
    }))
}
