//! What the manager has to send: messages by connection, in order, and connections to
//! close once their messages are out (or to cut off at once). Every part of the manager
//! writes here; the driver takes them ([`Manager::poll_output`], [`Manager::take_closing`],
//! [`Manager::take_cut`]). An operation held for acknowledgements takes back the replies
//! it produced ([`Outbox::mark`], [`Outbox::take_since`]) until its subscribers
//! acknowledge.
//!
//! Events are counted as they are queued, by connection and in all
//! ([`Outbox::event_bytes`]): the manager charges them to their subscriber as it makes
//! them, so that the events one round produces are bounded before they are built (see
//! `events`), never measured after.

use std::collections::VecDeque;

#[cfg(doc)]
use super::Manager;
use super::{ConnId, HashMap};
use crate::events::PoolEvent;
use crate::proto::FromPm;

/// What an event costs the PM while queued, besides its name, attributes and texts (the
/// message and its box).
pub(super) const EVENT_COST: usize = 128;

/// The bytes event `m` makes the PM hold while queued (0 for other messages): what its
/// subscriber is charged.
pub(super) fn event_bytes(m: &FromPm) -> usize {
    match m {
        FromPm::Event { event, .. } => pool_event_bytes(event),
        _ => 0,
    }
}

/// The bytes one subscriber's copy of `event` makes the PM hold while queued.
pub(super) fn pool_event_bytes(event: &PoolEvent) -> usize {
    EVENT_COST
        + event.component.len()
        + event.cdo.as_ref().map_or(0, String::len)
        + super::policy::attribute_bytes(&event.attributes)
        + event.detail.len()
}

/// Messages to send, in order, and connections to close.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    /// Each with its [`event_bytes`], counted once, as it was queued.
    messages: VecDeque<(ConnId, FromPm, usize)>,
    closing: Vec<ConnId>,
    cut: Vec<ConnId>,
    /// Bytes of events queued for each connection (see [`event_bytes`]).
    events: HashMap<ConnId, usize>,
    /// Their sum.
    events_total: usize,
}

/// A position in the outbox (see [`Outbox::take_since`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Mark(usize);

impl Outbox {
    /// Counts `bytes` of events for `conn` in (`add`) or out.
    fn count(&mut self, conn: ConnId, bytes: usize, add: bool) {
        if bytes == 0 {
            return;
        }
        let n = self.events.entry(conn).or_default();
        if add {
            *n += bytes;
            self.events_total += bytes;
        } else {
            *n = n.saturating_sub(bytes);
            self.events_total = self.events_total.saturating_sub(bytes);
            if *n == 0 {
                self.events.remove(&conn);
            }
        }
    }

    /// Queues `msg` for `conn`.
    pub(super) fn push(&mut self, conn: ConnId, msg: FromPm) {
        let bytes = event_bytes(&msg);
        self.push_counted(conn, msg, bytes);
    }

    /// Queues event `msg` for `conn`, its [`event_bytes`] counted already (`bytes`): an
    /// event's copies for several subscribers are counted once.
    pub(super) fn push_counted(&mut self, conn: ConnId, msg: FromPm, bytes: usize) {
        self.count(conn, bytes, true);
        self.messages.push_back((conn, msg, bytes));
    }

    /// Queues messages in order.
    pub(super) fn push_all(&mut self, msgs: impl IntoIterator<Item = (ConnId, FromPm)>) {
        for (conn, msg) in msgs {
            self.push(conn, msg);
        }
    }

    /// Bytes of events queued for `conn`.
    pub(super) fn event_bytes(&self, conn: ConnId) -> usize {
        self.events.get(&conn).copied().unwrap_or(0)
    }

    /// Bytes of events queued for all connections.
    pub(super) fn events_total(&self) -> usize {
        self.events_total
    }

    /// Closes `conn` once what is queued for it is sent. The manager has forgotten it by
    /// then: the driver stops reading from it and tells the manager nothing more of it.
    pub(super) fn close(&mut self, conn: ConnId) {
        self.closing.push(conn);
    }

    /// Cuts `conn` off now: what is queued for it here is dropped, and the driver drops
    /// what it still has to write (the manager has forgotten it).
    pub(super) fn cut(&mut self, conn: ConnId) {
        self.messages.retain(|(c, ..)| *c != conn);
        if let Some(n) = self.events.remove(&conn) {
            self.events_total = self.events_total.saturating_sub(n);
        }
        self.cut.push(conn);
    }

    /// The position now, to take back what is queued after it.
    pub(super) fn mark(&self) -> Mark {
        Mark(self.messages.len())
    }

    /// Takes back the messages queued since `mark`, in order.
    pub(super) fn take_since(&mut self, mark: Mark) -> Vec<(ConnId, FromPm)> {
        let taken: Vec<(ConnId, FromPm, usize)> = self.messages.drain(mark.0..).collect();
        taken
            .into_iter()
            .map(|(conn, m, bytes)| {
                self.count(conn, bytes, false);
                (conn, m)
            })
            .collect()
    }

    /// The next message to send.
    pub(super) fn next(&mut self) -> Option<(ConnId, FromPm)> {
        let (conn, m, bytes) = self.messages.pop_front()?;
        self.count(conn, bytes, false);
        Some((conn, m))
    }

    /// The connections to close.
    pub(super) fn take_closing(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.closing)
    }

    /// The connections to cut off.
    pub(super) fn take_cut(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.cut)
    }
}
