//! A pool manager on loopback with a watcher subscribed to the events a test waits for.

use std::time::Duration;

use pool::bootstrap::PmInfo;
use pool::events::{EventKinds, SubscribeOptions};
use pool::selector::Selector;
use pool::{Client, JoinOptions, PmConfig, PoolManager, Subscription};

/// What [`watched_pm`] starts: the PM, its info, the watcher and its subscription.
pub type Watched = (PoolManager, PmInfo, Client, Subscription);

/// A pool manager for `workflow` (fresh secret, loopback TCP and its Unix socket) and a
/// client `watcher` subscribed to `kinds` of every CDO, waiting at most `timeout` per call.
pub fn watched_pm(workflow: &str, kinds: impl Into<EventKinds>, timeout: Duration) -> Watched {
    let secret = pool::bootstrap::new_secret().expect("secret");
    let pm = PoolManager::start(PmConfig::new(
        workflow,
        &secret,
        vec!["127.0.0.1:0".parse().expect("addr")],
    ))
    .expect("pm");
    let info = pm.info().clone();
    let watcher =
        Client::join(&info, JoinOptions::new("watcher", 0).timeout(timeout)).expect("join");
    let sub = watcher
        .subscribe(&Selector::all(), kinds, SubscribeOptions::default())
        .expect("subscribe");
    (pm, info, watcher, sub)
}

/// `c` declares `name`, and seals and offers `len` bytes of 7 without attributes: the CDO.
pub fn offer(c: &Client, name: &str, len: usize) -> pool::proto::CdoId {
    let cdo = c.declare(name).expect("declare");
    let mut data = fabric::Buffer::new(len).expect("buffer");
    data.as_mut_slice().fill(7);
    c.seal_and_offer(cdo, pool::attr::Attributes::new(), data)
        .expect("offer");
    cdo
}
