//! The app's subscriptions as its client knows them: asked for (by the app's handle) until
//! the PM confirms, then live (by the PM's id) until unsubscribed, ended by the PM or the
//! connection's end; their events routed to their queues.

use std::collections::VecDeque;
use std::time::Instant;

use super::{CallId, CallResult, ClientCore, Driver, Event, News};
use crate::HashMap;
use crate::events::{EventKinds, PoolEvent, SubId, SubscribeOptions, TAKEN_REPORT};
use crate::proto::{Op, ToPm};
use crate::selector::Expr;

/// What a subscription asked for: its kinds, selector and options (what a reclaim replays).
pub(super) type Wanted = (EventKinds, Expr, SubscribeOptions);

pub(super) struct Subscriptions<T: Driver> {
    /// Subscriptions asked for, by the app's handle, until `Subscribed`: what they asked
    /// and their queue.
    asked: HashMap<u64, (Wanted, T::Events)>,
    /// Live subscriptions: the app's handle, what it asked and the queue.
    live: HashMap<SubId, (u64, Wanted, T::Events)>,
    /// Subscriptions the PM ended for the acknowledgement it gave up waiting for (its
    /// serial), until the app lets go of them.
    late: HashMap<SubId, u64>,
    /// Live subscriptions asked again of the manager that took over, by handle: the id
    /// the app knows them by ...
    renaming: HashMap<u64, SubId>,
    /// ... and, once the new manager answered, their id there, by the id the app knows.
    renamed: HashMap<SubId, SubId>,
    /// The largest event serial heard (what a reclaim names: see [`crate::proto::Reclaim`]).
    last_serial: u64,
    /// What each subscription (by handle) heard last, to know an event the manager that
    /// took over announces again (see [`Heard`]).
    heard: HashMap<u64, Heard>,
    /// Events the app took from each live subscription's queue and the PM was not told of
    /// yet (see [`crate::events::EVENT_WINDOW`]).
    taken: HashMap<SubId, u32>,
}

/// How many of its latest events a subscription remembers (see [`Heard`]).
const REMEMBERED: usize = 1024;

/// How long after a takeover an event the subscription heard before it is taken for an
/// echo (the replays of the grace period come within it).
const ECHO_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// A subscription's latest events (an identity each: kind, app, CDO, detail),
/// and after a takeover those it heard from the manager that is gone: an operation that
/// manager announced but did not answer is announced again by the one that takes over
/// (its app cannot know it was announced); its echo is dropped here, and acknowledged
/// when it needs it (the app acknowledged the first: a signal-before subscriber would
/// otherwise hold the operation up to the ack timeout, and lose the subscription).
#[derive(Default)]
struct Heard {
    recent: VecDeque<u64>,
    echoes: Option<(std::collections::HashSet<u64>, Instant)>,
}

impl Heard {
    /// Whether `event`, come at `now`, echoes one heard before a takeover; else it is
    /// remembered.
    fn echo(&mut self, now: Instant, event: &PoolEvent) -> bool {
        let id = identity(event);
        if let Some((echoes, until)) = &mut self.echoes {
            if now > *until {
                self.echoes = None;
            } else if echoes.remove(&id) {
                return true;
            }
        }
        if self.recent.len() == REMEMBERED {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
        false
    }
}

/// An event's identity across managers: what happened to what, by whom, as told (not its
/// serial or time, nor whether it comes before or after the fact: a signal-before
/// subscriber asked again late in a grace period hears what happened meanwhile after
/// the fact).
fn identity(e: &PoolEvent) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (e.kind, e.app, &e.cdo, &e.detail).hash(&mut h);
    h.finish()
}

impl<T: Driver> Default for Subscriptions<T> {
    fn default() -> Self {
        Subscriptions {
            asked: HashMap::default(),
            live: HashMap::default(),
            late: HashMap::default(),
            renaming: HashMap::default(),
            renamed: HashMap::default(),
            last_serial: 0,
            heard: HashMap::default(),
            taken: HashMap::default(),
        }
    }
}

impl<T: Driver> Subscriptions<T> {
    /// An event of `sub` come at `now`, for its queue; `Some(serial)` to acknowledge
    /// for the app: the echo of an event it heard before a takeover (see [`Heard`]),
    /// dropped.
    pub(super) fn event(
        &mut self,
        now: Instant,
        sub: SubId,
        event: PoolEvent,
        out: &mut VecDeque<Event<T>>,
    ) -> Option<u64> {
        self.last_serial = self.last_serial.max(event.serial);
        let Some((local, _, q)) = self.live.get(&sub) else {
            tracing::debug!("event {} of unknown subscription {sub}", event.serial);
            return None;
        };
        if self.heard.entry(*local).or_default().echo(now, &event) {
            tracing::debug!(
                "subscription {sub}: event {} echoes one heard before the takeover",
                event.serial
            );
            return event.needs_ack.then_some(event.serial);
        }
        out.push_back(Event::Subscription {
            events: q.clone(),
            news: News::Event(event),
        });
        None
    }

    /// The PM ends a subscription that misses an acknowledgement deadline.
    pub(super) fn ack_too_late(&mut self, sub: SubId, serial: u64, out: &mut VecDeque<Event<T>>) {
        tracing::warn!(
            "subscription {sub}: event {serial} was not acknowledged in time; the pool manager ended the subscription"
        );
        let Some((local, _, q)) = self.live.remove(&sub) else {
            return;
        };
        self.heard.remove(&local);
        self.late.insert(sub, serial);
        let why =
            format!("event {serial} was not acknowledged within the pool manager's ack timeout");
        for news in [News::Late(serial), News::Ended(why)] {
            out.push_back(Event::Subscription {
                events: q.clone(),
                news,
            });
        }
    }

    /// What a reclaim replays of the subscriptions: every one asked for or live, as
    /// asked again (by its handle, in the order they were made), without the replay of
    /// the pool's state (it heard that when it was first made).
    pub(super) fn replay(&self) -> Vec<ToPm> {
        let asked = self
            .asked
            .iter()
            .map(|(&local, (wanted, _))| (local, wanted));
        let live = self
            .live
            .values()
            .map(|(local, wanted, _)| (*local, wanted));
        let mut all: Vec<_> = asked.chain(live).collect();
        all.sort_unstable_by_key(|&(local, _)| local);
        all.into_iter()
            .map(|(local, (kinds, selector, options))| ToPm::Subscribe {
                local,
                kinds: *kinds,
                selector: Box::new(selector.clone()),
                options: SubscribeOptions {
                    replay: false,
                    ..*options
                },
            })
            .collect()
    }

    /// The subscriptions were asked again of a manager that took over: each live one
    /// awaits its new id, its queue kept ([`ClientCore::subscribed`] files it under that
    /// id, the app still knowing it by the first).
    pub(super) fn ask_again(&mut self, now: Instant) {
        for h in self.heard.values_mut() {
            let echoes = h.recent.drain(..).collect();
            h.echoes = Some((echoes, now + ECHO_WINDOW));
        }
        for (sub, (local, wanted, events)) in self.live.drain() {
            let known = (self.renamed.iter())
                .find(|&(_, &now)| now == sub)
                .map_or(sub, |(&first, _)| first);
            self.renaming.insert(local, known);
            self.asked.insert(local, (wanted, events));
        }
        self.late.clear();
        // The new manager's windows start empty.
        self.taken.clear();
    }

    /// Forgets subscription `sub` (as the app knows it): its events stop here. Its id
    /// with the current manager.
    pub(super) fn forget(&mut self, sub: SubId) -> SubId {
        let now = self.renamed.remove(&sub).unwrap_or(sub);
        if let Some((local, _, _)) = self.live.remove(&now) {
            self.heard.remove(&local);
        }
        self.taken.remove(&now);
        self.late.remove(&now);
        // Asked again of a manager that took over and not answered yet: ended when it
        // answers.
        let asked = &mut self.asked;
        self.renaming.retain(|local, known| {
            let keep = *known != sub;
            if !keep {
                asked.remove(local);
            }
            keep
        });
        now
    }

    /// The largest event serial heard.
    pub(super) fn last_serial(&self) -> u64 {
        self.last_serial
    }

    /// The id subscription `sub` (as the app knows it) has with the current manager.
    pub(super) fn current(&self, sub: SubId) -> SubId {
        self.renamed.get(&sub).copied().unwrap_or(sub)
    }

    /// The connection ended: every live subscription's queue hears it.
    pub(super) fn close(&mut self, out: &mut VecDeque<Event<T>>) {
        self.asked.clear();
        self.late.clear();
        self.renaming.clear();
        self.renamed.clear();
        self.heard.clear();
        self.taken.clear();
        for (_, (_, _, events)) in self.live.drain() {
            out.push_back(Event::Subscription {
                events,
                news: News::Closed,
            });
        }
    }
}

impl<T: Driver> ClientCore<T> {
    /// Subscribes to the events of `kinds` that `selector` matches, with `options`, and
    /// files `waiter` for the answer (the subscription's id) until `now` plus the call
    /// timeout; its events will go to `events`. Returns the subscription's handle (to give
    /// it up: [`ClientCore::forget_subscription`]) and the call.
    ///
    /// # Errors
    /// [`super::CallError::Closed`].
    pub fn subscribe(
        &mut self,
        now: Instant,
        (kinds, selector, options): Wanted,
        events: T::Events,
        waiter: T::Waiter,
    ) -> CallResult<(u64, CallId)> {
        let local = self.next_local;
        let msg = ToPm::Subscribe {
            local,
            kinds,
            selector: Box::new(selector.clone()),
            options,
        };
        let call = self.request(now, (Op::Subscribe, local), msg, waiter)?;
        self.next_local += 1;
        self.subs
            .asked
            .insert(local, ((kinds, selector, options), events));
        Ok((local, call))
    }

    /// The PM set up the subscription the app asked for as `local`. If nobody waits for
    /// it any more ([`ClientCore::forget_subscription`]), it is ended at once: nobody would
    /// read or acknowledge its events.
    pub(super) fn subscribed(&mut self, local: u64, sub: SubId) {
        match self.subs.asked.remove(&local) {
            Some((wanted, q)) => {
                self.subs.live.insert(sub, (local, wanted, q));
                match self.subs.renaming.remove(&local) {
                    // Asked again of a manager that took over: the app knows it as before.
                    Some(known) => {
                        if known != sub {
                            self.subs.renamed.insert(known, sub);
                        }
                    }
                    None => {
                        self.resolve((Op::Subscribe, local), Ok(sub));
                    }
                }
            }
            None => self.queue(ToPm::Unsubscribe { sub }),
        }
    }

    /// The call that asked for subscription `local` ended without handing it out (an
    /// error, a timeout, a dropped future): one the PM set up already is ended now, one
    /// it sets up later when its answer comes.
    pub fn forget_subscription(&mut self, local: u64) {
        if self.subs.asked.remove(&local).is_some() {
            self.subs.renaming.remove(&local);
            return;
        }
        let set_up = self
            .subs
            .live
            .iter()
            .find(|(_, (l, _, _))| *l == local)
            .map(|(&sub, _)| sub);
        if let Some(sub) = set_up {
            self.drop_subscription(sub);
        }
    }

    /// Ends subscription `sub` (its events stop here now) and files `waiter` for the PM's
    /// answer.
    ///
    /// # Errors
    /// [`super::CallError::Closed`].
    pub fn unsubscribe(
        &mut self,
        now: Instant,
        sub: SubId,
        waiter: T::Waiter,
    ) -> CallResult<CallId> {
        let sub = self.subs.forget(sub);
        self.request(
            now,
            (Op::Unsubscribe, sub),
            ToPm::Unsubscribe { sub },
            waiter,
        )
    }

    /// Ends subscription `sub` without waiting for the PM (its events stop here now).
    pub fn drop_subscription(&mut self, sub: SubId) {
        let sub = self.subs.forget(sub);
        if !self.closed {
            self.queue(ToPm::Unsubscribe { sub });
        }
    }

    /// The app took an event of subscription `sub` from its queue: every
    /// [`TAKEN_REPORT`] of them, the PM is told with the next message (it then sends as
    /// many more, see [`crate::events::EVENT_WINDOW`]). Nothing for a subscription that
    /// is not live (ended: its events stopped).
    pub fn took(&mut self, sub: SubId) {
        let sub = self.subs.current(sub);
        if !self.subs.live.contains_key(&sub) {
            return;
        }
        let count = self.subs.taken.entry(sub).or_default();
        *count += 1;
        if *count >= TAKEN_REPORT {
            let count = std::mem::take(count);
            self.defer(ToPm::Taken { sub, count });
        }
    }

    /// Acknowledges event `serial` of subscription `sub`, letting the operation it holds
    /// go on. Nothing is sent for a subscription the PM ended: it went on already.
    ///
    /// # Errors
    /// [`super::CallError::AckTooLate`] for the event whose acknowledgement the PM gave up
    /// waiting for; [`super::CallError::Closed`].
    pub fn ack(&mut self, sub: SubId, serial: u64) -> CallResult<()> {
        let sub = self.subs.current(sub);
        match self.subs.late.get(&sub) {
            Some(&late) if late == serial => Err(super::CallError::AckTooLate(serial)),
            Some(_) => self.open(),
            None => self.tell(ToPm::Ack { sub, serial }),
        }
    }
}
