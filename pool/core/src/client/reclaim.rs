//! What an app that lost its pool manager does until the next one of the workflow has
//! taken over (see docs/developers/failover.md): it keeps what it holds and its waiting
//! calls ([`ClientCore::lost`]), joins the next manager naming who it was
//! ([`ClientCore::rejoin`], [`ClientCore::reclaim`]) and, welcomed back under its old app
//! id, replays the operations that rebuild what it holds ([`ClientCore::replay`]), built
//! from the core's own state: the pool's real state lives in its apps.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::handshake::Handshake;
use super::{CallError, ClientCore, Driver, Event, Phase};
use crate::proto::{Join, Op, Reclaim, ToPm, TransferId};

/// What a core keeps to ride out the loss of its manager.
#[derive(Debug, Default)]
pub(super) struct Reclaiming {
    /// The instance of the manager this app joined (its welcome's `pool`; 0 before one).
    pub(super) generation: u64,
    /// The connection to the manager was lost and the app waits for the next manager of
    /// the workflow until this instant ([`ClientCore::lost`]): calls wait, nothing is
    /// sent until the replay.
    pub(super) lost: Option<Instant>,
    /// Tickets of a manager that is gone, dropped while being carried out (their ends
    /// are ignored).
    pub(super) dropped: HashSet<TransferId>,
    /// The PM said BYE unasked (it stops, the workflow ends): the connection's end is no
    /// loss to reclaim from.
    pub(super) ended: bool,
    /// The names of discards waiting for their answer, by number (what a replay sends
    /// again).
    pub(super) discarding: HashMap<u64, Box<str>>,
}

impl<T: Driver> ClientCore<T> {
    /// What this app's JOIN names to the next manager when its own is gone: its app id
    /// and its manager's generation. `None` before the welcome of a first manager.
    pub fn reclaim(&self) -> Option<Reclaim> {
        (self.app != 0 && self.joined.is_some()).then_some(Reclaim {
            app: self.app,
            generation: self.reclaiming.generation,
            last_serial: self.subs.last_serial(),
        })
    }

    /// The connection to the pool manager ended at `now` and the app waits until `until`
    /// for the next manager of its workflow ([`ClientCore::rejoin`]): its CDOs,
    /// subscriptions and waiting calls stay (each call's deadline stands); what was
    /// queued for the old manager is dropped, as is what calls send meanwhile (the replay
    /// rebuilds it); leases are forgotten (the next manager granted none); tickets being
    /// carried out are dropped (their demands are replayed: the bytes come again under
    /// the next manager) and stream fetches fail; a leave under way is asked of the next
    /// manager (it answers once no consumer needs this app's offers). At `until` the core
    /// closes ([`ClientCore::close`]). A core that never joined, that left, whose manager
    /// stopped (its BYE unasked) or that is closed, closes now.
    /// Called again while lost (a rejoin's connection ended too), it keeps the earlier
    /// `until`.
    pub fn lost(&mut self, now: Instant, until: Instant) {
        let welcomed = matches!(self.joined, Some(Ok(_))) || self.reclaiming.lost.is_some();
        let leaving = self.waiters.contains_key(&(Op::Leave, 0));
        if self.closed || self.reclaiming.ended || (self.left && !leaving) || !welcomed {
            return self.close();
        }
        if self.handshake.take().is_some() {
            self.joined = Some(Err(CallError::Closed));
        }
        let until = self
            .reclaiming
            .lost
            .map_or(until, |earlier| earlier.min(until));
        self.reclaiming.lost = Some(until.max(now));
        self.transmit.clear();
        self.leases.clear();
        self.reclaiming
            .dropped
            .extend(self.fetching.drain().map(|(t, _)| t));
        self.end_streams(|_| true, &CallError::Closed);
    }

    /// The connection of a core its manager had not welcomed yet ended (a member core
    /// that first met a shard while its manager was being taken over, say): it joins
    /// again as it first asked, `join` with proof of `secret`, on the next connection,
    /// its calls still waiting for the welcome (a member core's JOIN names its member id
    /// again). False, and nothing done, for a core that was welcomed (it is
    /// [`ClientCore::lost`] instead), lost or closed.
    pub fn join_again(&mut self, now: Instant, mut join: Join, secret: &[u8]) -> bool {
        if self.joined.is_some() || self.closed || self.reclaiming.lost.is_some() {
            return false;
        }
        if self.shard.index() > 0 {
            join.member = Some(self.app);
        }
        self.transmit.clear();
        self.handshake = Some(Handshake::Challenge {
            join: Box::new(join),
            secret: secret.to_vec(),
            deadline: now.checked_add(self.call_timeout).unwrap_or(now),
        });
        true
    }

    /// Whether the core waits for the next manager ([`ClientCore::lost`]).
    pub fn is_lost(&self) -> bool {
        self.reclaiming.lost.is_some()
    }

    /// Starts the JOIN handshake with the next manager on a new connection of a lost core:
    /// `join` (its `reclaim` filled in here) goes out once that manager's challenge comes,
    /// with the proof made from it and `secret`. Welcomed under its old app id, the core
    /// queues its replay ([`ClientCore::replay`]) and carries on; refused or timed out,
    /// it stays lost ([`ClientCore::joined`] says why) for the driver to try the next
    /// endpoint, or to [`close`](ClientCore::close) when there is none.
    pub fn rejoin(&mut self, now: Instant, mut join: Join, secret: &[u8]) {
        if self.reclaiming.lost.is_none() {
            tracing::warn!("pool client: rejoin of a core that did not lose its manager");
            return;
        }
        join.reclaim = self.reclaim();
        self.joined = None;
        self.transmit.clear();
        self.handshake = Some(Handshake::Challenge {
            join: Box::new(join),
            secret: secret.to_vec(),
            deadline: now.checked_add(self.call_timeout).unwrap_or(now),
        });
    }

    /// The next manager welcomed this lost core as `app`: under its old id, the replay
    /// is queued and calls go on; under another, the welcome is a protocol error (its CDO
    /// ids would name others' CDOs) and the core stays lost.
    pub(super) fn rejoined(
        &mut self,
        now: Instant,
        (app, pool): (crate::proto::AppId, u64),
        keep: Option<std::sync::Arc<str>>,
    ) {
        if app != self.app {
            self.joined = Some(Err(CallError::Protocol(format!(
                "the pool manager that took over welcomed this app as app {app}, not as app {} it reclaimed",
                self.app
            ))));
            return;
        }
        self.reclaiming.lost = None;
        self.reclaiming.generation = pool;
        self.keep_dir = keep;
        self.joined = Some(Ok((app, pool)));
        let replay = self.replay();
        self.hand_over_again();
        self.subs.ask_again(now);
        for m in self.cdos.values_mut() {
            m.here_unknown |= m.here();
        }
        let unsubscribing: Vec<_> = (self.waiters.keys())
            .filter(|(op, _)| *op == Op::Unsubscribe)
            .copied()
            .collect();
        for key in unsubscribing {
            while self.resolve(key, Ok(key.1)) {}
        }
        for msg in replay {
            self.queue(msg);
        }
    }

    /// The operations that rebuild what this app holds with a manager in its grace
    /// period, in two parts around [`ToPm::Replayed`]: first what the manager that is gone
    /// confirmed (its subscribers heard of it: the new one announces none of it), then
    /// what it did not answer, announced as any operation is. Its subscriptions, asked
    /// again (each keeps its queue and gets its new id from the new manager's answer;
    /// without the replay of the pool's state, which it heard already); then CDO by CDO
    /// in id order: its declare; the seal it asked for, or its seal and offer (where
    /// consumers read it, as the offer said) while offered, and the withdraw it waits
    /// for (one handing its file over to a manager that keeps files goes out once the
    /// file is linked into the next manager's directory); the require or demand that waits for its bytes (a CDO whose bytes are here is
    /// only declared: the next manager is not told of their demand either); the groups
    /// demanded and not yet named; last the calls still waiting that no state stands for
    /// (a dispose, a retract, a discard, the leave; an unsubscribe still waiting is
    /// answered at the welcome: the next manager never had it). The new manager answers
    /// the calls still waiting.
    pub fn replay(&self) -> Vec<ToPm> {
        let mut confirmed = self.subs.replay();
        let mut after = Vec::new();
        let mut ids: Vec<_> = self.cdos.keys().copied().collect();
        ids.sort_unstable();
        confirmed.reserve(ids.len());
        for cdo in ids {
            let m = &self.cdos[&cdo];
            let declare = ToPm::Declare {
                cdo,
                name: m.name.to_string(),
            };
            if m.known { &mut confirmed } else { &mut after }.push(declare);
            if let Some(attributes) = &m.sealed {
                let seal = ToPm::Seal {
                    cdo,
                    attributes: attributes.clone(),
                };
                if m.phase == Phase::Declared {
                    &mut after
                } else {
                    &mut confirmed
                }
                .push(seal);
            }
            if let Some(o) = &m.offered {
                let offer = ToPm::Offer {
                    cdo,
                    region: o.region,
                    extras: o.extras.clone(),
                };
                if m.phase == Phase::Offered {
                    &mut confirmed
                } else {
                    &mut after
                }
                .push(offer);
                // A file handed over is handed over again ([`ClientCore::rejoined`]).
                if o.withdrawing() && !(o.handing_over() && self.keep_dir.is_some()) {
                    after.push(ToPm::Withdraw { cdo, keep: None });
                }
            }
            let wanted = match m.wanted {
                Some(Op::Require) => ToPm::Require { cdo },
                Some(Op::Demand) => ToPm::Demand { cdo },
                _ => continue,
            };
            if m.wanted_known {
                &mut confirmed
            } else {
                &mut after
            }
            .push(wanted);
        }
        let mut groups: Vec<_> = self.groups_wanted.iter().map(|(&g, &w)| (g, w)).collect();
        groups.sort_unstable();
        after.extend(
            groups
                .into_iter()
                .map(|(group, (first, capacity))| ToPm::DemandGroup {
                    group,
                    first,
                    capacity,
                }),
        );
        let mut waiting: Vec<_> = self.waiters.keys().copied().collect();
        waiting.sort_unstable_by_key(|&(op, id)| (op as u8, id));
        for (op, id) in waiting {
            match op {
                Op::Dispose => after.push(ToPm::Dispose {
                    cdo: id,
                    answer: true,
                }),
                Op::Retract => after.push(ToPm::Retract { cdo: id }),
                Op::Discard => {
                    if let Some(name) = self.reclaiming.discarding.get(&id) {
                        after.push(ToPm::Discard {
                            local: id,
                            name: name.to_string(),
                        });
                    }
                }
                _ => {}
            }
        }
        if self.waiters.contains_key(&(Op::Leave, 0)) {
            after.push(ToPm::Leave);
        }
        confirmed.push(ToPm::Replayed);
        confirmed.append(&mut after);
        confirmed
    }

    /// Ends the stream fetches `which` picks: each route hears `why`.
    pub(super) fn end_streams(
        &mut self,
        which: impl Fn(&super::streams::Stream<T::Stream>) -> bool,
        why: &CallError,
    ) {
        for route in self.streams.take(which) {
            self.events.push_back(Event::Piece {
                stream: route,
                piece: Err(why.clone()),
            });
        }
    }
}
