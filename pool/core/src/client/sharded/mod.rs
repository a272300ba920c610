//! A client of a pool of several shards (see docs/developers/shards.md): one
//! [`ClientCore`] per shard the app uses, each the single-connection state machine it is
//! for a pool of one manager. The core of shard 0 joins first and gets the app's id; the
//! core of another shard is made when the app first needs that shard
//! ([`Sharded::at`]: the driver opens its connection, [`Sharded::poll_connect`]), joins
//! as a member of that id and takes calls at once (they follow its JOIN). A name's
//! operations go to the core of its home, a CDO's to the core that numbered it (the id
//! says which: [`Route`]); `calls.rs` has the app's calls with a single core's
//! signatures. A pool of one shard is one core, as before.

mod calls;
mod groups;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::{CallError, CallId, CallResult, ClientCore, Driver, Event, Transmit};
use crate::proto::{CdoId, FromPm, Join};
use crate::shards::Shards;

/// The driver types of the cores of a sharded client: the driver's own, but for who
/// waits for an answer: a call of the app's, or a part of a call the client fans out to
/// every shard ([`Sharded::subscribe`]), whose answers it merges.
pub struct Routed<T>(std::marker::PhantomData<T>);

/// Who waits for a core's answer in a sharded client.
pub enum Waiter<W> {
    /// A call of the app's: the answer is handed on as it is.
    App(W),
    /// Part of fanned-out call `fan` (at one shard): the client merges the parts' answers.
    Part(u64),
    /// The demand of a group's member at its home, another shard than the group's: its
    /// answer is counted by the id reserved for it at the group's shard (`groups.rs`).
    Member(CdoId),
}

impl<W> From<W> for Waiter<W> {
    fn from(w: W) -> Waiter<W> {
        Waiter::App(w)
    }
}

impl<T: Driver> Driver for Routed<T> {
    type Data = T::Data;
    type Waiter = Waiter<T::Waiter>;
    type Memory = T::Memory;
    type Events = T::Events;
    type Stream = T::Stream;

    fn inline(bytes: crate::proto::InlineBytes, lent: Option<T::Memory>) -> T::Data {
        T::inline(bytes, lent)
    }
}

/// Which core an operation goes to ([`Sharded::at`]).
#[derive(Clone, Copy, Debug)]
pub enum Route<'a> {
    /// The home of a name (declare, discard).
    Name(&'a str),
    /// The core that numbered a CDO (every operation on a declared CDO).
    Cdo(CdoId),
    /// A shard by its index (what a shard's manager asked: a ticket's outcome, a served
    /// piece).
    Shard(usize),
}

/// What every core of the client is set up with, the cores made later too.
#[derive(Default)]
struct Settings {
    schemas: Option<std::sync::Arc<crate::schema::Schemas>>,
    inline_max: Option<usize>,
    gfs: super::GfsUse,
}

impl Settings {
    fn apply<T: Driver>(&self, core: &mut ClientCore<T>) {
        if let Some(s) = &self.schemas {
            core.set_schemas(s.clone());
        }
        if let Some(bytes) = self.inline_max {
            core.set_inline_max(bytes);
        }
        core.set_gfs(self.gfs);
    }
}

/// The fan number of a leave's parts ([`Sharded::leave`]; subscriptions are numbered
/// from 1).
const LEAVE: u64 = 0;

/// A subscription fanned out to every shard ([`Sharded::subscribe`]).
struct Fan<W> {
    /// Who waits for the merged answer, until every part answered.
    waiter: Option<W>,
    /// Each shard's part: its number in that core until set up, then its id there.
    parts: Vec<Part>,
    /// How many parts have not answered yet.
    left: usize,
    /// Why a part failed, if one did.
    failed: Option<CallError>,
}

/// One shard's part of a fanned-out subscription.
#[derive(Clone, Copy)]
enum Part {
    /// Asked as this number of its core ([`ClientCore::subscribe`]).
    Asked(u64),
    /// Set up as this subscription of its core.
    Live(crate::events::SubId),
}

/// The client cores of one app in a sharded pool, by shard.
pub struct Sharded<T: Driver> {
    shards: Shards,
    /// The core of each shard the app uses (shard 0's from the start).
    cores: Vec<Option<ClientCore<Routed<T>>>>,
    /// What the core of another shard joins with (shard 0's JOIN; its member id filled in
    /// then), the secret it proves, how long its calls wait.
    join: Join,
    secret: Vec<u8>,
    call_timeout: Duration,
    /// Shards whose connection the driver opens next.
    connect: VecDeque<usize>,
    /// Calls fanned out to every shard, by number, until their parts answered.
    fans: HashMap<u64, Fan<T::Waiter>>,
    next_fan: u64,
    /// A leave under way: who waits for it, when it was asked, and how many shards other
    /// than 0 have not said BYE yet (shard 0 is left last).
    leaving: Option<(T::Waiter, Instant, usize)>,
    /// The shard whose core is polled first next (so that none starves the others).
    next: usize,
    /// What every core is set up with.
    settings: Settings,
    /// The members of demanded groups that live at other shards than their group, by
    /// group, until the group is taken (`groups.rs`).
    elsewhere: HashMap<CdoId, Vec<groups::Far<T::Data>>>,
}

impl<T: Driver> Sharded<T> {
    /// The cores of an app that joins the pool of `shards` with `join` (and `secret`),
    /// its calls waiting at most `call_timeout`: shard 0's core, whose connection the
    /// driver opens now ([`Sharded::poll_connect`] gives 0 first).
    pub fn connect(
        now: Instant,
        join: Join,
        secret: &[u8],
        call_timeout: Duration,
        shards: Shards,
    ) -> Sharded<T> {
        let mut first = ClientCore::connect(now, join.clone(), secret, call_timeout);
        if let Some(place) = shards.place(0) {
            first.set_shard(place);
        }
        let mut cores: Vec<Option<ClientCore<Routed<T>>>> =
            (0..shards.count()).map(|_| None).collect();
        cores[0] = Some(first);
        Sharded {
            shards,
            cores,
            join,
            secret: secret.to_vec(),
            call_timeout,
            connect: VecDeque::from([0]),
            fans: HashMap::new(),
            next_fan: 1,
            leaving: None,
            next: 0,
            settings: Settings::default(),
            elsewhere: HashMap::new(),
        }
    }

    /// Every core checks seals against `schemas` (see [`ClientCore::set_schemas`]).
    pub fn set_schemas(&mut self, schemas: std::sync::Arc<crate::schema::Schemas>) {
        self.settings.schemas = Some(schemas);
        self.configure();
    }

    /// Every core carries offers of at most `bytes` inline (see
    /// [`ClientCore::set_inline_max`]).
    pub fn set_inline_max(&mut self, bytes: usize) {
        self.settings.inline_max = Some(bytes);
        self.configure();
    }

    /// Whether an offer of `len` bytes carries them to its PM (see
    /// [`ClientCore::carries`]: every core is set up alike).
    pub fn carries(&self, len: usize) -> bool {
        self.cores
            .iter()
            .flatten()
            .next()
            .is_some_and(|c| c.carries(len))
    }

    /// Every core uses the global file system as `gfs` says (see [`ClientCore::set_gfs`]).
    pub fn set_gfs(&mut self, gfs: super::GfsUse) {
        self.settings.gfs = gfs;
        self.configure();
    }

    /// Applies the settings to every core made so far.
    fn configure(&mut self) {
        for core in self.cores.iter_mut().flatten() {
            self.settings.apply(core);
        }
    }

    /// The pool's shards.
    pub fn shards(&self) -> Shards {
        self.shards
    }

    /// How the JOIN to shard 0 ended (see [`ClientCore::joined`]): the app's id and the
    /// generation of shard 0.
    pub fn joined(&self) -> Option<&CallResult<(crate::proto::AppId, u64)>> {
        self.cores[0].as_ref().and_then(ClientCore::joined)
    }

    /// The core of `shard`, if the app uses it already.
    pub fn core(&mut self, shard: usize) -> Option<&mut ClientCore<Routed<T>>> {
        self.cores.get_mut(shard).and_then(Option::as_mut)
    }

    /// The core of the shard `route` names, made now if the app did not use that shard
    /// yet: it joins as the member shard 0 numbered, once the driver opened its
    /// connection ([`Sharded::poll_connect`]); its calls may be made at once.
    ///
    /// # Errors
    /// `Protocol` before shard 0's welcome (the app has no id yet) or for a shard the
    /// pool does not have; [`CallError::Closed`] once shard 0's core closed.
    pub fn at(&mut self, now: Instant, route: Route<'_>) -> CallResult<&mut ClientCore<Routed<T>>> {
        let shard = self.shard_of(route);
        let Some(place) = self.shards.place(shard) else {
            return Err(CallError::Protocol(format!(
                "shard {shard} of a pool of {}",
                self.shards.count()
            )));
        };
        if self.cores[shard].is_none() {
            let app = match self.joined() {
                Some(Ok((app, _))) => *app,
                Some(Err(_)) => return Err(CallError::Closed),
                None => {
                    return Err(CallError::Protocol(
                        "a call before shard 0's welcome: wait until the app is joined".into(),
                    ));
                }
            };
            let mut core = ClientCore::connect_member(
                now,
                self.join.clone(),
                &self.secret,
                self.call_timeout,
                (app, place),
            );
            self.settings.apply(&mut core);
            self.cores[shard] = Some(core);
            self.connect.push_back(shard);
        }
        self.cores[shard].as_mut().ok_or(CallError::Closed)
    }

    /// The shard `route` names.
    pub fn shard_of(&self, route: Route<'_>) -> usize {
        match route {
            Route::Name(name) => self.shards.home(name),
            Route::Cdo(cdo) => self.shards.of_cdo(cdo),
            Route::Shard(shard) => shard,
        }
    }

    /// The core `route` names, if the app uses that shard already (to ask what it knows,
    /// without making one).
    pub fn known(&self, route: Route<'_>) -> Option<&ClientCore<Routed<T>>> {
        self.cores
            .get(self.shard_of(route))
            .and_then(Option::as_ref)
    }

    /// The core `route` names, if the app uses that shard already.
    pub fn known_mut(&mut self, route: Route<'_>) -> Option<&mut ClientCore<Routed<T>>> {
        let shard = self.shard_of(route);
        self.core(shard)
    }

    /// Whether `instance` is the instance (generation) of a shard's manager this app
    /// joined: a same-process ticket of any of them names the pool this app is in.
    pub fn is_ours(&self, instance: u64) -> bool {
        self.cores
            .iter()
            .flatten()
            .any(|c| matches!(c.joined(), Some(Ok((_, g))) if *g == instance))
    }

    /// Tells every shard the app uses of a change of the fabric it saw (see
    /// [`ClientCore::report`]): every manager plans its transfers with it, shard 0 alone
    /// tells subscribers ([`crate::manager::Manager::fabric_event`]).
    ///
    /// # Errors
    /// As [`ClientCore::report`] at shard 0.
    pub fn report(&mut self, change: &crate::events::FabricChange) -> CallResult<()> {
        let mut first = Ok(());
        for (shard, core) in self.cores() {
            let r = core.report(change.clone());
            if shard == 0 {
                first = r;
            }
        }
        first
    }

    /// The connection to shard `shard` ended for good (see [`ClientCore::close`]): its
    /// core's waiting calls fail and its subscriptions' parts hear it. Shard 0's takes
    /// every core with it: the app is out of the pool (its id was shard 0's).
    pub fn close(&mut self, shard: usize) {
        if shard == 0 {
            for (_, core) in self.cores() {
                core.close();
            }
        } else if let Some(core) = self.core(shard) {
            core.close();
        }
    }

    /// Whether shard 0's core closed: the app is out of the pool.
    pub fn is_closed(&self) -> bool {
        self.cores[0].as_ref().is_none_or(ClientCore::is_closed)
    }

    /// The next shard whose connection the driver opens (then it hands that core the
    /// manager's messages: [`Sharded::handle`]).
    pub fn poll_connect(&mut self) -> Option<usize> {
        self.connect.pop_front()
    }

    /// The next message for a shard's manager, and the shard, taking the cores in turn.
    pub fn poll_transmit(&mut self) -> Option<(usize, Transmit)> {
        self.in_turn(ClientCore::poll_transmit)
    }

    /// The next thing for the driver to do, and the shard whose core asks it (answers to
    /// hand on, tickets to fetch: the driver tells that core how they went). The answers
    /// of the parts of a fanned-out call are merged into the one the app waits for;
    /// merging may give the cores more to send (shard 0's part of a leave): the driver
    /// polls [`Sharded::poll_transmit`] after the events, as after any step.
    pub fn poll_event(&mut self) -> Option<(usize, Event<T>)> {
        while let Some((shard, event)) = self.in_turn(ClientCore::poll_event) {
            if let Some(event) = self.route(shard, event) {
                return Some((shard, event));
            }
        }
        None
    }

    /// `event` of shard `shard`'s core as the driver gets it; `None` for the answer of a
    /// part of a fanned-out call (merged: [`Sharded::part_answered`]).
    fn route(&mut self, shard: usize, event: Event<Routed<T>>) -> Option<Event<T>> {
        Some(match event {
            Event::Answer { waiter, result } => match waiter {
                Waiter::App(waiter) => Event::Answer { waiter, result },
                Waiter::Part(fan) => return self.part_answered(fan, shard, result),
                Waiter::Member(reserved) => {
                    self.member_answered(reserved, &result);
                    return None;
                }
            },
            Event::Fetch(f) => Event::Fetch(f),
            Event::Serve {
                transfer,
                cdo,
                offset,
                len,
            } => Event::Serve {
                transfer,
                cdo,
                offset,
                len,
            },
            Event::Spill { cdo } => Event::Spill { cdo },
            Event::HandOver { cdo, dir } => Event::HandOver { cdo, dir },
            Event::Piece { stream, piece } => Event::Piece { stream, piece },
            Event::Subscription { events, news } => Event::Subscription { events, news },
        })
    }

    /// What `poll` gives of the first core, from the one after the last that gave.
    fn in_turn<R>(
        &mut self,
        poll: impl Fn(&mut ClientCore<Routed<T>>) -> Option<R>,
    ) -> Option<(usize, R)> {
        let k = self.cores.len();
        for i in 0..k {
            let shard = (self.next + i) % k;
            if let Some(r) = self.cores[shard].as_mut().and_then(&poll) {
                self.next = (shard + 1) % k;
                return Some((shard, r));
            }
        }
        None
    }

    /// A message of shard `shard`'s manager (one of a shard the app does not use is
    /// logged and dropped).
    pub fn handle(&mut self, now: Instant, shard: usize, msg: FromPm) {
        let Some(core) = self.core(shard) else {
            tracing::warn!("pool client: a message of shard {shard}, which it does not use");
            return;
        };
        core.handle(now, msg);
        let far = core.named_elsewhere();
        self.demand_elsewhere(now, far);
    }

    /// The earliest deadline of any core.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.cores
            .iter()
            .flatten()
            .filter_map(ClientCore::poll_timeout)
            .min()
    }

    /// Every core's calls whose deadline passed by `now` fail (see
    /// [`ClientCore::handle_timeout`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        for core in self.cores.iter_mut().flatten() {
            core.handle_timeout(now);
        }
    }

    /// Subscribes to the events of `kinds` that `selector` matches, with `options`, at
    /// every shard (each core's part goes to `events`, so the queue hears them all as they
    /// come: the events of one name in the order they happened, those of names of
    /// different homes in the order their shards told them); `waiter` hears once every
    /// part is set up, so that nothing raised after the answer is missed, with the id the
    /// app knows the subscription by, or the first part's refusal (the parts set up are
    /// ended then). Returns that id.
    ///
    /// # Errors
    /// As [`Sharded::at`] for a shard's core; [`CallError::Closed`].
    pub fn subscribe(
        &mut self,
        now: Instant,
        wanted: super::subscriptions::Wanted,
        events: T::Events,
        waiter: T::Waiter,
    ) -> CallResult<u64> {
        let fan = self.next_fan;
        let mut parts = Vec::with_capacity(self.shards.count());
        for shard in 0..self.shards.count() {
            let core = match self.at(now, Route::Shard(shard)) {
                Ok(core) => core,
                Err(e) => {
                    self.end_parts(parts.into_iter().enumerate());
                    return Err(e);
                }
            };
            match core.subscribe(now, wanted.clone(), events.clone(), Waiter::Part(fan)) {
                Ok((local, _)) => parts.push(Part::Asked(local)),
                Err(e) => {
                    self.end_parts(parts.into_iter().enumerate());
                    return Err(e);
                }
            }
        }
        self.next_fan += 1;
        let left = parts.len();
        self.fans.insert(
            fan,
            Fan {
                waiter: Some(waiter),
                parts,
                left,
                failed: None,
            },
        );
        Ok(fan)
    }

    /// Ends subscription `sub` (the id [`Sharded::subscribe`] answered, or will) at every
    /// shard without waiting for an answer: a part set up is ended now, one not answered
    /// yet when its answer comes (a subscription given up, or dropped).
    pub fn drop_subscription(&mut self, sub: u64) {
        if let Some(f) = self.fans.remove(&sub) {
            self.end_parts(f.parts.into_iter().enumerate());
        }
    }

    /// Ends the parts of a subscription, each at its shard (those asked and not set up
    /// yet are ended when their answer comes).
    fn end_parts(&mut self, parts: impl IntoIterator<Item = (usize, Part)>) {
        for (shard, part) in parts {
            if let Some(core) = self.core(shard) {
                match part {
                    Part::Asked(local) => core.forget_subscription(local),
                    Part::Live(sub) => core.drop_subscription(sub),
                }
            }
        }
    }

    /// The part at `shard` of fanned-out subscription `fan` answered `result`: once every
    /// part did, the app's answer (see [`Sharded::subscribe`]).
    fn part_answered(
        &mut self,
        fan: u64,
        shard: usize,
        result: CallResult<u64>,
    ) -> Option<Event<T>> {
        if fan == LEAVE {
            return self.left_shard(shard, result);
        }
        let f = self.fans.get_mut(&fan)?;
        match result {
            Ok(sub) => f.parts[shard] = Part::Live(sub),
            Err(e) => {
                f.failed.get_or_insert(e);
            }
        }
        f.left = f.left.saturating_sub(1);
        if f.left > 0 {
            return None;
        }
        let waiter = f.waiter.take()?;
        let Some(why) = f.failed.take() else {
            return Some(Event::Answer {
                waiter,
                result: Ok(fan),
            });
        };
        if let Some(f) = self.fans.remove(&fan) {
            self.end_parts(f.parts.into_iter().enumerate());
        }
        Some(Event::Answer {
            waiter,
            result: Err(why),
        })
    }

    /// Leaves the pool: every shard the app used other than 0 first, then shard 0, which
    /// tells the app's leave (once no consumer needs its offers anywhere: each shard
    /// answers its BYE then); `waiter` hears shard 0's BYE.
    ///
    /// # Errors
    /// [`CallError::Closed`] when shard 0's core closed; `WrongState` (refused) while a
    /// leave is under way.
    /// Returns shard 0's call when it is asked at once (the app used no other shard), to
    /// give up with [`ClientCore::abandon`].
    pub fn leave(&mut self, now: Instant, waiter: T::Waiter) -> CallResult<Option<CallId>> {
        if self.leaving.is_some() {
            return Err(CallError::Refused {
                op: crate::proto::Op::Leave,
                why: crate::proto::Refusal::WrongState {
                    op: crate::proto::Op::Leave,
                    state: "leaving".into(),
                },
            });
        }
        let mut others = 0;
        for (shard, core) in self.cores() {
            // A core closed (its manager gone for good) has nothing to leave.
            if shard > 0 && core.leave(now, Waiter::Part(LEAVE)).is_ok() {
                others += 1;
            }
        }
        if others == 0 {
            let first = self.core(0).ok_or(CallError::Closed)?;
            return first.leave(now, Waiter::App(waiter)).map(Some);
        }
        self.leaving = Some((waiter, now, others));
        Ok(None)
    }

    /// Shard `shard` answered the leave with `result` (its BYE, or why not: left all the
    /// same); once every shard other than 0 did, shard 0 is left.
    fn left_shard(&mut self, shard: usize, result: CallResult<u64>) -> Option<Event<T>> {
        if let Err(e) = result {
            tracing::debug!("pool client: leaving shard {shard}: {e}");
        }
        let (_, _, left) = self.leaving.as_mut()?;
        *left = left.saturating_sub(1);
        if *left > 0 {
            return None;
        }
        let (waiter, asked, _) = self.leaving.take()?;
        let Some(first) = self.core(0) else {
            return Some(Event::Answer {
                waiter,
                result: Err(CallError::Closed),
            });
        };
        // A core that closed drops the waiter: the app's call ends as its connection did.
        if let Err(e) = first.leave(asked, Waiter::App(waiter)) {
            tracing::debug!("pool client: leaving shard 0: {e}");
        }
        None
    }

    /// Acknowledges event `serial` of subscription `sub` (the id [`Sharded::subscribe`]
    /// answered) at the shard that raised it (the serial says which:
    /// [`Shards::of_serial`]).
    ///
    /// # Errors
    /// `Protocol` for a subscription that is none; as [`ClientCore::ack`].
    pub fn ack(&mut self, sub: u64, serial: u64) -> CallResult<()> {
        let Some((shard, part)) = self.part_of(sub, serial) else {
            return Err(CallError::Protocol(format!(
                "an acknowledgement of event {serial} of subscription {sub}, which is none here"
            )));
        };
        match self.core(shard) {
            Some(core) => core.ack(part, serial),
            None => Err(CallError::Closed),
        }
    }

    /// The app took event `serial` of subscription `sub` (the id [`Sharded::subscribe`]
    /// answered) from its queue: counted at the shard that raised it
    /// ([`ClientCore::took`]). Nothing for a subscription that is none (ended).
    pub fn took(&mut self, sub: u64, serial: u64) {
        if let Some((shard, part)) = self.part_of(sub, serial)
            && let Some(core) = self.core(shard)
        {
            core.took(part);
        }
    }

    /// The shard that raised event `serial` of subscription `sub` and the subscription's
    /// part there, while that part is live.
    fn part_of(&self, sub: u64, serial: u64) -> Option<(usize, u64)> {
        let shard = self.shards.of_serial(serial);
        match self.fans.get(&sub)?.parts.get(shard) {
            Some(&Part::Live(part)) => Some((shard, part)),
            _ => None,
        }
    }

    /// Ends subscription `sub` (the id [`Sharded::subscribe`] answered) at every shard:
    /// its events stop here now; `waiter` hears once shard 0 ended its part (its call
    /// returned, to give up with [`ClientCore::abandon`]).
    ///
    /// # Errors
    /// `Protocol` for a subscription that is none, or not answered yet; as
    /// [`ClientCore::unsubscribe`].
    pub fn unsubscribe(&mut self, now: Instant, sub: u64, waiter: T::Waiter) -> CallResult<CallId> {
        let first = self.fans.get(&sub).and_then(|f| f.parts.first().copied());
        let Some(Part::Live(first)) = first.filter(|_| self.fans[&sub].waiter.is_none()) else {
            return Err(CallError::Protocol(format!(
                "subscription {sub} is none here, or not answered yet"
            )));
        };
        if let Some(f) = self.fans.remove(&sub) {
            self.end_parts(f.parts.into_iter().enumerate().skip(1));
        }
        let core = self.core(0).ok_or(CallError::Closed)?;
        core.unsubscribe(now, first, Waiter::App(waiter))
    }

    /// The connection to shard `shard`'s manager ended at `now`: its core waits until
    /// `until` for the manager that takes over that shard ([`ClientCore::lost`]); the
    /// other shards serve on.
    pub fn lost(&mut self, now: Instant, shard: usize, until: Instant) {
        if let Some(core) = self.core(shard) {
            core.lost(now, until);
        }
    }

    /// The manager that took over shard `shard` is there: its core joins it on a new
    /// connection ([`Sharded::poll_connect`] gives the shard again), reclaiming its app id
    /// (and naming it as a member at a shard other than 0) with proof of `secret` (the
    /// workflow's, as the PM info found says), then replays what it holds there
    /// ([`ClientCore::rejoin`]).
    pub fn rejoin(&mut self, now: Instant, shard: usize, secret: &[u8]) {
        secret.clone_into(&mut self.secret);
        let mut join = self.join.clone();
        // A core that lost nothing (made while its manager was gone, say) joins on the
        // connection the driver opens for it already.
        let Some(core) =
            (self.cores.get_mut(shard).and_then(Option::as_mut)).filter(|c| c.is_lost())
        else {
            return;
        };
        if shard > 0 {
            join.member = core.reclaim().map(|r| r.app);
        }
        core.rejoin(now, join, &self.secret);
        self.connect.push_back(shard);
    }

    /// The connection to shard `shard` ended before its manager welcomed the app there
    /// (see [`ClientCore::join_again`]): its core joins the next one as a member afresh,
    /// on the connection the driver opens for it. False when the core was welcomed (it
    /// is [`Sharded::lost`]), for shard 0's own join, and for a core closed.
    pub fn join_again(&mut self, now: Instant, shard: usize) -> bool {
        let (join, secret) = (self.join.clone(), self.secret.clone());
        shard > 0
            && self
                .core(shard)
                .is_some_and(|core| core.join_again(now, join, &secret))
    }

    /// The cores the app uses, with their shards (to close them all, say).
    pub fn cores(&mut self) -> impl Iterator<Item = (usize, &mut ClientCore<Routed<T>>)> {
        self.cores
            .iter_mut()
            .enumerate()
            .filter_map(|(s, c)| c.as_mut().map(|c| (s, c)))
    }
}
