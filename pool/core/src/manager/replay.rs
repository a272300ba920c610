//! What a subscription hears of before it began: the current state, one event per live
//! CDO it matches, when it asks for it ([`crate::events::SubscribeOptions::replay`]); the
//! events of a grace period so far, for a subscription a reclaiming app asks again; each
//! sent as a past event (as are the joins of the apps there already, which `subscribe`
//! sends). Past events count in the subscription's window without waiting, and their
//! bytes apart from what this round's operations may queue ([`Manager::replayed_bytes`]).

use std::sync::Arc;

use super::events::Subject;
use super::{ConnId, Manager};
use crate::attr::Attributes;
use crate::events::{EventKind, SubId};
use crate::proto::{AppId, CdoId, FromPm};

/// The event kind a CDO's state stands for in a replay of the current state.
fn state_kind(state: &super::State) -> EventKind {
    use super::State;
    match state {
        State::Declared => EventKind::Declare,
        State::Sealed => EventKind::Seal,
        State::Offered(_) | State::Withdrawing(_) => EventKind::Offer,
        State::Withdrawn => EventKind::Withdraw,
        State::Required(w) if w.demanded => EventKind::Demand,
        State::Required(_) => EventKind::Require,
    }
}

impl Manager {
    /// Bytes of a new subscription's replay queued for `conn` this round.
    pub(super) fn replayed_bytes(&self, conn: ConnId) -> usize {
        self.events.replayed.get(&conn).copied().unwrap_or(0)
    }

    /// The output was taken whole: past events queued are sent.
    pub(super) fn output_taken(&mut self) {
        self.events.replayed.clear();
    }

    /// The current state for a new subscription that asked for it
    /// ([`SubscribeOptions::replay`]): one event per live CDO it would match.
    pub(super) fn replay_state(&mut self, sub: SubId, conn: ConnId, subscriber: AppId) {
        let Some(s) = self.events.subs.get(&sub) else {
            return;
        };
        let (kinds, no_local) = (s.kinds, s.options.no_local);
        let mut ids: Vec<(CdoId, EventKind)> = self
            .cdos
            .iter()
            .filter(|(_, c)| !(no_local && c.app() == subscriber))
            .map(|(id, c)| (id, state_kind(&c.state)))
            .filter(|(_, kind)| kinds.contains(*kind))
            .collect();
        ids.sort_unstable_by_key(|(id, _)| *id);
        let mut sent = 0;
        for (cdo, kind) in ids {
            if sent == crate::events::MAX_REPLAY {
                tracing::info!("subscription {sub}: the current state was cut at {sent} CDOs");
                break;
            }
            let (Some(subject), Some(owner)) = (
                self.event_subject(cdo),
                self.cdos.get(&cdo).map(|c| c.app()),
            ) else {
                continue;
            };
            let matches = self
                .events
                .subs
                .get(&sub)
                .is_some_and(|s| s.selector.matches(&subject.attributes));
            if !matches {
                continue;
            }
            let detail = "before this subscription";
            self.send_past_event((conn, sub), kind, owner, Some(subject), detail);
            sent += 1;
        }
    }

    /// A subscription asked again by reclaiming `subscriber` in a grace period hears the
    /// events of it so far that it matches (see [`Events::grace_log`]), after the fact.
    pub(super) fn replay_grace_log(&mut self, sub: SubId, conn: ConnId, subscriber: AppId) {
        let (Some(s), Some(log)) = (self.events.subs.get(&sub), &self.events.grace_log) else {
            return;
        };
        let empty = Attributes::new();
        let heard: Vec<(EventKind, AppId, Option<Subject>, String)> = log
            .iter()
            .filter(|l| {
                let attrs = l.subject.as_ref().map_or(&empty, |s| &s.attributes);
                s.kinds.contains(l.kind)
                    && !(s.options.no_local && l.app == subscriber)
                    && (!l.kind.is_cdo_event() || s.selector.matches(attrs))
            })
            .map(|l| (l.kind, l.app, l.subject.clone(), l.detail.clone()))
            .collect();
        for (kind, app, subject, detail) in heard {
            self.send_past_event((conn, sub), kind, app, subject, &detail);
        }
    }

    /// Sends subscription `sub` (on `conn`) an event of what happened before it began.
    pub(super) fn send_past_event(
        &mut self,
        (conn, sub): (ConnId, SubId),
        kind: EventKind,
        app: AppId,
        subject: Option<Subject>,
        detail: &str,
    ) {
        let event = Arc::new(self.event(kind, app, subject, detail, false));
        // Bounded by `MAX_REPLAY`, not by what this round's operations may make, nor by
        // the window (new events wait until the app took enough of these).
        *self.events.replayed.entry(conn).or_default() += super::outbox::pool_event_bytes(&event);
        if let Some(s) = self.events.subs.get_mut(&sub) {
            s.window.sent_past();
        }
        let event = event.into();
        self.out.push(
            conn,
            FromPm::Event {
                sub,
                event,
                lease: None,
            },
        );
    }
}
