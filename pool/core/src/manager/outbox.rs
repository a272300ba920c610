//! What the manager has to send: messages by connection, in order, and connections to
//! close once their messages are out. Every part of the manager writes here; the driver
//! takes them ([`Manager::poll_output`], [`Manager::take_closing`]). An operation held for
//! acknowledgements takes back the replies it produced ([`Outbox::mark`],
//! [`Outbox::take_since`]) until its subscribers acknowledge.

use std::collections::VecDeque;

use super::ConnId;
#[cfg(doc)]
use super::Manager;
use crate::proto::FromPm;

/// Messages to send, in order, and connections to close.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    messages: VecDeque<(ConnId, FromPm)>,
    closing: Vec<ConnId>,
}

/// A position in the outbox (see [`Outbox::take_since`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Mark(usize);

impl Outbox {
    /// Queues `msg` for `conn`.
    pub(super) fn send(&mut self, conn: ConnId, msg: FromPm) {
        self.messages.push_back((conn, msg));
    }

    /// Queues messages in order.
    pub(super) fn send_all(&mut self, msgs: impl IntoIterator<Item = (ConnId, FromPm)>) {
        self.messages.extend(msgs);
    }

    /// Closes `conn` once what is queued for it is sent. The manager has forgotten it by
    /// then: the driver stops reading from it and tells the manager nothing more of it.
    pub(super) fn close(&mut self, conn: ConnId) {
        self.closing.push(conn);
    }

    /// The position now, to take back what is queued after it.
    pub(super) fn mark(&self) -> Mark {
        Mark(self.messages.len())
    }

    /// Takes back the messages queued since `mark`, in order.
    pub(super) fn take_since(&mut self, mark: Mark) -> Vec<(ConnId, FromPm)> {
        self.messages.drain(mark.0..).collect()
    }

    /// The next message to send.
    pub(super) fn next(&mut self) -> Option<(ConnId, FromPm)> {
        self.messages.pop_front()
    }

    /// The connections to close.
    pub(super) fn take_closing(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.closing)
    }
}
