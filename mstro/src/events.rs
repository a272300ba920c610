//! Selectors and subscriptions as handles, and Maestro's event lists: a poll or wait
//! returns every event queued at that moment, oldest first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::events::{EventKinds, PoolEvent, SubscribeOptions};
use pool::selector::Selector as PoolSelector;

use crate::cells::SubCell;
use crate::instance::instance;
use crate::status::{Error, Result, Status};

/// A selector handle (`mstro_cdo_selector`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Selector(pub u64);

/// A subscription handle (`mstro_subscription`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subscription(pub u64);

/// Maestro's `mstro_subscription_opts` bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubscriptionOptions(pub u32);

impl SubscriptionOptions {
    /// `MSTRO_SUBSCRIPTION_OPTS_DEFAULT`: events after the fact, no acknowledgement.
    pub const DEFAULT: u32 = 0;
    /// `MSTRO_SUBSCRIPTION_OPTS_SIGNAL_BEFORE`: the event comes before the operation.
    pub const SIGNAL_BEFORE: u32 = 1;
    /// `MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK`: the operation waits for the ack.
    pub const REQUIRE_ACK: u32 = 2;
    /// `MSTRO_SUBSCRIPTION_OPTS_NO_LOCAL_EVENTS`: nothing this application caused.
    pub const NO_LOCAL_EVENTS: u32 = 4;
    /// `MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE` (an extension of Maestro's options): first an
    /// event for every live CDO that matches, of the kind its state stands for (see
    /// [`SubscribeOptions::replay`]), so a late subscriber misses nothing offered before.
    pub const CURRENT_STATE: u32 = 8;

    fn to_pool(self) -> Result<SubscribeOptions> {
        let all =
            Self::SIGNAL_BEFORE | Self::REQUIRE_ACK | Self::NO_LOCAL_EVENTS | Self::CURRENT_STATE;
        if self.0 & !all != 0 {
            return Err(Error::invarg(format!(
                "unknown subscription option bits {:#x}; combine MSTRO_SUBSCRIPTION_OPTS_*",
                self.0 & !all
            )));
        }
        Ok(SubscribeOptions {
            signal_before: self.0 & Self::SIGNAL_BEFORE != 0,
            require_ack: self.0 & Self::REQUIRE_ACK != 0,
            no_local: self.0 & Self::NO_LOCAL_EVENTS != 0,
            replay: self.0 & Self::CURRENT_STATE != 0,
        })
    }
}

/// Parses `query` (`mstro_cdo_selector_create`): Maestro's s-expressions over attributes,
/// keys without a leading `.` relative to `namespace`, literals typed by the schemas.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] with a message pointing at the column of the
/// problem.
pub fn selector_create(namespace: Option<&str>, query: &str) -> Result<Selector> {
    let inst = instance()?;
    let sel = PoolSelector::parse(query, namespace.unwrap_or(""), &inst.settings.schemas)
        .map_err(|e| Error::invarg(e.to_string()))?;
    Ok(Selector(inst.selectors.insert(sel)))
}

/// Frees a selector (`mstro_cdo_selector_dispose`); subscriptions made with it go on.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for a bad handle.
pub fn selector_dispose(sel: Selector) -> Result<()> {
    instance()?.selectors.remove(sel.0).map(drop)
}

/// Subscribes to events of `kinds` (a mask of [`pool::events::EventKind::bit`]s) matching `selector`
/// (`None`: every CDO) with `options` (`mstro_subscribe`).
///
/// # Errors
/// [`Status::Invarg`] for bad handles, an empty or unknown kind mask or unknown option
/// bits; joining and connection errors.
pub fn subscribe(
    selector: Option<Selector>,
    kinds: u32,
    options: SubscriptionOptions,
) -> Result<Subscription> {
    let inst = instance()?;
    let all = EventKinds::all().0;
    if kinds == 0 || kinds & !all != 0 {
        return Err(Error::invarg(format!(
            "event kind mask {kinds:#x}: combine MSTRO_POOL_EVENT_* bits (at least one, all within {all:#x})"
        )));
    }
    let options = options.to_pool()?;
    let sel = match selector {
        Some(s) => (*inst.selectors.get(s.0)?).clone(),
        None => PoolSelector::all(),
    };
    let session = inst.session()?;
    let sub = session
        .client()
        .subscribe(&sel, EventKinds(kinds), options)
        .map_err(|e| Error::from(e).context("subscribe"))?;
    Ok(Subscription(inst.subscriptions.insert(SubCell {
        sub,
        _session: session,
    })))
}

fn sub_cell(sub: Subscription) -> Result<Arc<SubCell>> {
    instance()?.subscriptions.get(sub.0)
}

fn closed(e: pool::ClientError) -> Error {
    Error::from(e).context("subscription")
}

/// Every event queued now, oldest first (`mstro_subscription_poll`); empty if none.
///
/// # Errors
/// [`Status::Invarg`] for a bad handle; [`Status::NoPm`] when the connection ended and
/// nothing is left.
pub fn subscription_poll(sub: Subscription) -> Result<Vec<PoolEvent>> {
    sub_cell(sub)?.sub.drain().map_err(closed)
}

/// Waits for events (`mstro_subscription_wait`, `_timedwait`) at most `limit` (`None`:
/// `MSTRO_TIMEOUT`), then returns every event queued, oldest first.
///
/// # Errors
/// [`Status::Timeout`] when nothing came in time; as [`subscription_poll`].
pub fn subscription_wait(sub: Subscription, limit: Option<Duration>) -> Result<Vec<PoolEvent>> {
    subscription_wait_interruptible(sub, limit, &|| false)
}

/// As [`subscription_wait`], asking `interrupted` every 50 ms whether the caller wants to
/// stop (Python's Ctrl-C): then it returns [`Status::Fail`] saying so, and no event is
/// lost (the queue keeps them for the next wait).
///
/// # Errors
/// As [`subscription_wait`]; [`Status::Fail`] when interrupted.
pub fn subscription_wait_interruptible(
    sub: Subscription,
    limit: Option<Duration>,
    interrupted: &(dyn Fn() -> bool + Sync),
) -> Result<Vec<PoolEvent>> {
    let inst = instance()?;
    let cell = inst.subscriptions.get(sub.0)?;
    let limit = limit.unwrap_or(inst.settings.timeout);
    drop(inst);
    let start = Instant::now();
    let first = loop {
        let left = limit.saturating_sub(start.elapsed());
        let slice = left.min(Duration::from_millis(50));
        match cell.sub.wait_timeout(slice).map_err(closed)? {
            Some(e) => break Some(e),
            None if left <= slice => break None,
            None if interrupted() => {
                return Err(Error::new(
                    Status::Fail,
                    "interrupted while waiting for events; the subscription goes on",
                ));
            }
            None => {}
        }
    };
    match first {
        Some(first) => {
            let mut all = vec![first];
            all.extend(cell.sub.drain().unwrap_or_default());
            Ok(all)
        }
        None => Err(Error::new(
            Status::Timeout,
            format!("no event within {:?}", start.elapsed()),
        )),
    }
}

/// Acknowledges every event of `events` that needs it (`mstro_subscription_ack`), letting
/// the operations they hold go on; others are ignored.
///
/// # Errors
/// [`Status::Invarg`] for a bad handle; [`Status::Timeout`] if the pool manager stopped
/// waiting for one of them already (the others are acknowledged); connection errors.
pub fn subscription_ack(sub: Subscription, events: &[&PoolEvent]) -> Result<()> {
    let cell = sub_cell(sub)?;
    let mut first_error = None;
    for e in events {
        if let Err(err) = cell.sub.ack(e) {
            first_error.get_or_insert(Error::from(err));
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Ends a subscription (`mstro_subscription_dispose`): operations held for its
/// acknowledgements go on.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for a bad handle.
pub fn subscription_dispose(sub: Subscription) -> Result<()> {
    instance()?.subscriptions.remove(sub.0).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maestro_option_bits_map_to_the_pools_options() {
        use SubscriptionOptions as O;
        let all = O(O::SIGNAL_BEFORE | O::REQUIRE_ACK | O::NO_LOCAL_EVENTS | O::CURRENT_STATE);
        assert_eq!(
            all.to_pool().unwrap(),
            SubscribeOptions {
                signal_before: true,
                require_ack: true,
                no_local: true,
                replay: true,
            },
            "the current state combines with signal-before: the past after the fact"
        );
        assert_eq!(
            O(O::DEFAULT).to_pool().unwrap(),
            SubscribeOptions::default()
        );
        let e = O(1 << 7 | O::REQUIRE_ACK).to_pool().unwrap_err();
        assert_eq!(e.status, Status::Invarg);
        assert!(e.message.contains("0x80"), "{e}");
    }
}
