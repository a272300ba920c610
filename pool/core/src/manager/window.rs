//! A subscription's window of events: the PM sends a subscription at most
//! [`EVENT_WINDOW`] events ahead of what its app reported taken
//! ([`crate::proto::ToPm::Taken`]); the rest wait, in order, charged to the subscriber's
//! app, until it takes more. A consumer that falls behind thus holds a window of events,
//! not all of them: its queue stays small (and in its caches), and the PM's bound on what
//! an app holds bounds the rest.
//!
//! [`Window`] is the bookkeeping alone; the manager's side ([`Manager::send_event`],
//! [`Manager::taken`]) sends what it lets go and charges the app for what it keeps.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{ConnId, Manager};
use crate::events::{EVENT_WINDOW, PoolEvent, SubId};
use crate::proto::{AppId, CdoId, FromPm};

/// An event for a subscription: what it costs its app while kept, and the offer whose
/// lease goes ahead of it, if one does.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub(super) event: Arc<PoolEvent>,
    pub(super) bytes: usize,
    pub(super) lease: Option<CdoId>,
}

/// One subscription's window.
#[derive(Debug, Default)]
pub(super) struct Window {
    /// Events sent and not yet reported taken by the app.
    in_flight: u32,
    /// Events past the window, in order, until the app takes some.
    waiting: VecDeque<Outgoing>,
    /// What `waiting` is charged to the app (see `policy`).
    waiting_bytes: usize,
}

impl Window {
    /// `o` to send now (counted in the window), or `None`: kept, behind any kept before
    /// it, until the app takes enough ([`Window::taken`]).
    pub(super) fn admit(&mut self, o: Outgoing) -> Option<Outgoing> {
        if self.in_flight >= EVENT_WINDOW || !self.waiting.is_empty() {
            self.waiting_bytes += o.bytes;
            self.waiting.push_back(o);
            return None;
        }
        self.in_flight += 1;
        Some(o)
    }

    /// An event sent past the window's order (a replay's past event): counted in it, so
    /// that new events wait until the app took the replay.
    pub(super) fn sent_past(&mut self) {
        self.in_flight = self.in_flight.saturating_add(1);
    }

    /// The app took `count` events: those that go now (counted in the window), in order,
    /// and the bytes they no longer cost.
    pub(super) fn taken(&mut self, count: u32) -> (Vec<Outgoing>, usize) {
        self.in_flight = self.in_flight.saturating_sub(count);
        let room = EVENT_WINDOW.saturating_sub(self.in_flight) as usize;
        let go: Vec<Outgoing> = self.waiting.drain(..room.min(self.waiting.len())).collect();
        let freed: usize = go.iter().map(|o| o.bytes).sum();
        self.waiting_bytes -= freed;
        self.in_flight += go.len() as u32;
        (go, freed)
    }

    /// What the events kept cost the app.
    pub(super) fn waiting_bytes(&self) -> usize {
        self.waiting_bytes
    }
}

impl Manager {
    /// Sends `o` to subscription `sub`, its lease ahead of it, if the subscription's
    /// window lets it go; else keeps it there, charged to the subscriber's app.
    pub(super) fn send_event(&mut self, sub: SubId, o: Outgoing) {
        let Some(s) = self.events.sub_mut(sub) else {
            return;
        };
        let (conn, app, bytes) = (s.conn, s.app, o.bytes);
        match s.window.admit(o) {
            Some(o) => self.deliver((sub, conn, app), o),
            None => self.account(app, bytes, false),
        }
    }

    /// `Taken`: the app took `count` events of its subscription `sub`: as many more go,
    /// from those waiting. A report for a subscription that is not the app's, or is no
    /// more (ended meanwhile), is ignored.
    pub(super) fn taken(&mut self, app: AppId, sub: SubId, count: u32) {
        let Some(s) = self.events.sub_mut(sub).filter(|s| s.app == app) else {
            return;
        };
        let conn = s.conn;
        let (go, freed) = s.window.taken(count);
        self.account(app, freed, true);
        for o in go {
            self.deliver((sub, conn, app), o);
        }
    }

    /// Sends `o` to subscription `sub` of `app` on `conn` (counted in its window
    /// already), with its lease.
    fn deliver(&mut self, (sub, conn, app): (SubId, ConnId, AppId), o: Outgoing) {
        let lease = o
            .lease
            .and_then(|offer| self.grant_lease(offer, app))
            .map(Box::new);
        let event = o.event.into();
        let msg = FromPm::Event { sub, event, lease };
        self.out.push_counted(conn, msg, o.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(serial: u64) -> Outgoing {
        Outgoing {
            event: Arc::new(PoolEvent {
                kind: crate::events::EventKind::Offer,
                serial,
                time: 0,
                before: false,
                needs_ack: false,
                app: 1,
                component: String::new(),
                index: 0,
                cdo: None,
                attributes: crate::attr::Attributes::new(),
                detail: String::new(),
            }),
            bytes: 100,
            lease: None,
        }
    }

    fn serials(go: &[Outgoing]) -> Vec<u64> {
        go.iter().map(|o| o.event.serial).collect()
    }

    #[test]
    fn a_window_lets_go_what_the_app_took_room_for_in_order_and_counts_what_it_keeps() {
        let mut w = Window::default();
        let n = u64::from(EVENT_WINDOW);
        for s in 0..n {
            assert!(w.admit(event(s)).is_some(), "within the window");
        }
        for s in n..n + 10 {
            assert!(w.admit(event(s)).is_none(), "kept past it");
        }
        assert_eq!(w.waiting_bytes(), 1000);
        let (go, freed) = w.taken(4);
        assert_eq!((serials(&go), freed), ((n..n + 4).collect(), 400));
        // Full again: a new event waits behind those kept.
        assert!(w.admit(event(n + 10)).is_none());
        let (go, freed) = w.taken(EVENT_WINDOW);
        assert_eq!((serials(&go), freed), ((n + 4..n + 11).collect(), 700));
        assert_eq!(w.waiting_bytes(), 0);
        // A replay's past events fill the window too; a report larger than what was
        // sent lets nothing go twice.
        w.sent_past();
        assert_eq!(w.taken(u32::MAX).0.len(), 0);
        assert!(w.admit(event(n + 11)).is_some());
    }
}
