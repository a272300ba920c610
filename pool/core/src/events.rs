//! Pool events: what subscribers are told about the pool, as in Maestro Core's
//! `mstro_subscribe`.
//!
//! A subscription names the [`EventKind`]s it wants (an [`EventKinds`] mask), a
//! [`crate::selector::Selector`] over CDO attributes and [`SubscribeOptions`]:
//! - `signal_before`: the event is delivered before the operation takes effect;
//! - `require_ack`: the operation waits until the subscriber acknowledged the event (with
//!   `signal_before`, the operation is carried out only then; without, its completion is
//!   withheld from the application until then). The pool manager waits at most
//!   [`ACK_TIMEOUT`] (or its configured timeout): then the operation proceeds and the
//!   subscriber is told its ack came too late. A subscriber that leaves or dies releases
//!   every operation waiting for it at once.
//! - `no_local`: no events caused by the subscriber's own application.
//!
//! The selector filters CDO events (declare through dispose, transport); application and
//! fabric events pass by kind alone. Only application operations on CDOs can be held for
//! acknowledgements; the other events are reported after the fact. Events of one
//! subscription arrive in order, numbered by a pool-wide `serial`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::attr::Attributes;
use crate::ids::AppId;

/// How long the pool manager waits for acknowledgements by default.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// A CDO was declared.
    Declare,
    /// A CDO was sealed (its attributes are final).
    Seal,
    /// A CDO was offered.
    Offer,
    /// A consumer required a CDO.
    Require,
    /// A consumer demanded a CDO.
    Demand,
    /// A provider withdrew an offer.
    Withdraw,
    /// A consumer retracted a require.
    Retract,
    /// A CDO was disposed.
    Dispose,
    /// An application joined.
    AppJoin,
    /// An application left, or its connection was lost (the detail says which).
    AppLeave,
    /// The pool manager ticketed a transfer (the detail names the transport).
    TransportStarted,
    /// A transfer completed or failed (the detail says which).
    TransportCompleted,
    /// The fabric changed (a link went down or up, a node or process was lost).
    Fabric,
    /// Another pool manager took over from one that is gone, its grace period over (the
    /// detail says which apps reclaimed what they held and which did not come back).
    PmFailover,
}

impl EventKind {
    /// Its place in [`EventKind::ALL`] (and its mask bit's).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Every kind, in mask-bit order.
    pub const ALL: [EventKind; 14] = [
        EventKind::Declare,
        EventKind::Seal,
        EventKind::Offer,
        EventKind::Require,
        EventKind::Demand,
        EventKind::Withdraw,
        EventKind::Retract,
        EventKind::Dispose,
        EventKind::AppJoin,
        EventKind::AppLeave,
        EventKind::TransportStarted,
        EventKind::TransportCompleted,
        EventKind::Fabric,
        EventKind::PmFailover,
    ];

    /// This kind's bit in an [`EventKinds`] mask.
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// The lower-case name (as in command lines and JSON).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Declare => "declare",
            EventKind::Seal => "seal",
            EventKind::Offer => "offer",
            EventKind::Require => "require",
            EventKind::Demand => "demand",
            EventKind::Withdraw => "withdraw",
            EventKind::Retract => "retract",
            EventKind::Dispose => "dispose",
            EventKind::AppJoin => "app-join",
            EventKind::AppLeave => "app-leave",
            EventKind::TransportStarted => "transport-started",
            EventKind::TransportCompleted => "transport-completed",
            EventKind::Fabric => "fabric",
            EventKind::PmFailover => "pm-failover",
        }
    }

    /// Whether events of this kind concern a CDO (and so go through selectors).
    pub fn is_cdo_event(self) -> bool {
        !matches!(
            self,
            EventKind::AppJoin | EventKind::AppLeave | EventKind::Fabric | EventKind::PmFailover
        )
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EventKind {
    type Err = String;

    /// Parses a [`EventKind::name`].
    fn from_str(s: &str) -> Result<EventKind, String> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown event kind {s:?}; use one of {}", names.join(", "))
            })
    }
}

/// A set of [`EventKind`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventKinds(pub u32);

impl EventKinds {
    /// Every kind.
    pub fn all() -> EventKinds {
        EventKind::ALL.into_iter().collect()
    }

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: EventKind) -> bool {
        self.0 & kind.bit() != 0
    }
}

impl FromIterator<EventKind> for EventKinds {
    fn from_iter<I: IntoIterator<Item = EventKind>>(iter: I) -> EventKinds {
        EventKinds(iter.into_iter().fold(0, |m, k| m | k.bit()))
    }
}

impl From<EventKind> for EventKinds {
    fn from(k: EventKind) -> EventKinds {
        EventKinds(k.bit())
    }
}

impl std::ops::BitOr<EventKind> for EventKinds {
    type Output = EventKinds;
    fn bitor(self, k: EventKind) -> EventKinds {
        EventKinds(self.0 | k.bit())
    }
}

impl std::ops::BitOr for EventKind {
    type Output = EventKinds;
    fn bitor(self, k: EventKind) -> EventKinds {
        EventKinds(self.bit() | k.bit())
    }
}

/// How a subscription is delivered (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscribeOptions {
    /// Deliver before the operation takes effect.
    pub signal_before: bool,
    /// The operation waits for this subscriber's acknowledgement.
    pub require_ack: bool,
    /// Leave out events caused by the subscriber's own application.
    pub no_local: bool,
    /// Hear of the current state first: for every live CDO that matches (at most
    /// [`MAX_REPLAY`], in id order), one event of the kind its state stands for
    /// (declared: `Declare`, sealed: `Seal`, offered: `Offer`, required: `Require`,
    /// demanded: `Demand`, withdrawn: `Withdraw`), with the detail "before this
    /// subscription", if the subscription takes that kind. With `signal_before` too, the
    /// past events come as they were (after the fact, needing no acknowledgement), then
    /// each new operation's before it takes effect.
    pub replay: bool,
}

/// Events the pool manager sends a subscription ahead of what its app took from the
/// subscription's queue: the rest wait at the PM, charged to the app, until the app's
/// client reports it took more ([`crate::proto::ToPm::Taken`], every
/// [`TAKEN_REPORT`] events). A consumer slower than its producers thus holds a window of
/// events, not the whole backlog: measured, a 4 KiB event-driven stream whose consumer let
/// 32,000-65,000 events pile up ran at half the rate of one that kept up, every event
/// and its lease cold in the caches by the time it was taken.
pub const EVENT_WINDOW: u32 = 1024;

/// How many events an app's client takes from a subscription's queue before it reports
/// them ([`crate::proto::ToPm::Taken`], with its next message): a quarter of the window,
/// so the PM has sent the next events by the time the app wants them.
pub const TAKEN_REPORT: u32 = EVENT_WINDOW / 4;

/// Most events a [`SubscribeOptions::replay`] sends (the CDOs with the lowest ids).
pub const MAX_REPLAY: usize = 100_000;

/// A subscription's id, assigned by the pool manager.
pub type SubId = u64;

/// One event as a subscriber receives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolEvent {
    /// What happened.
    pub kind: EventKind,
    /// Pool-wide sequence number (acknowledge with it).
    pub serial: u64,
    /// When, in nanoseconds since the Unix epoch (the pool manager's clock).
    pub time: i128,
    /// Delivered before the operation takes effect.
    pub before: bool,
    /// The operation waits for this event's acknowledgement.
    pub needs_ack: bool,
    /// The application that caused it (0: the pool manager or the fabric).
    pub app: AppId,
    /// That application's component name and index (empty for fabric events).
    pub component: String,
    /// The component index.
    pub index: i64,
    /// The CDO's name, for CDO events.
    pub cdo: Option<String>,
    /// The CDO's attributes as the selector saw them (with the built-in name and size);
    /// plain values in JSON ([`crate::attr::plain`]).
    #[serde(with = "crate::attr::plain")]
    pub attributes: Attributes,
    /// More about it: the reason an app left, the transport, the fabric change.
    pub detail: String,
}

/// A fabric change the pool manager hears of from outside: PMIx events of its own host
/// (`crate::pmix_events`), or reported by an application (`AsyncClient::report`) whose
/// host raised them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FabricChange {
    /// A link went down or up.
    Link {
        /// The interface name.
        name: String,
        /// Its addresses with their prefixes (the networks endpoints may be on).
        addresses: Vec<crate::Subnet>,
        /// Up (true) or down.
        up: bool,
    },
    /// Anything else (a lost node or process, a fabric update), described.
    Other(String),
}
