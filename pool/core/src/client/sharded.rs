//! A client of a pool of several shards (see docs/developers/shards.md): one
//! [`ClientCore`] per shard the app uses, each the single-connection state machine it is
//! for a pool of one manager. The core of shard 0 joins first and gets the app's id; the
//! core of another shard is made when the app first needs that shard
//! ([`Sharded::at`]: the driver opens its connection, [`Sharded::poll_connect`]), joins
//! as a member of that id and takes calls at once (they follow its JOIN). A name's
//! operations go to the core of its home ([`Sharded::home`]), a CDO's to the core that
//! numbered it ([`Sharded::of_cdo`]: the id says which). A pool of one shard is one core,
//! as before.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{CallError, CallResult, ClientCore, Driver, Event, Transmit};
use crate::proto::{CdoId, FromPm, Join};
use crate::shards::Shards;

/// The client cores of one app in a sharded pool, by shard.
pub struct Sharded<T: Driver> {
    shards: Shards,
    /// The core of each shard the app uses (shard 0's from the start).
    cores: Vec<Option<ClientCore<T>>>,
    /// What the core of another shard joins with (shard 0's JOIN; its member id filled in
    /// then), the secret it proves, how long its calls wait.
    join: Join,
    secret: Vec<u8>,
    call_timeout: Duration,
    /// Shards whose connection the driver opens next.
    connect: VecDeque<usize>,
    /// The shard whose core is polled first next (so that none starves the others).
    next: usize,
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
        let mut cores: Vec<Option<ClientCore<T>>> = (0..shards.count()).map(|_| None).collect();
        cores[0] = Some(first);
        Sharded {
            shards,
            cores,
            join,
            secret: secret.to_vec(),
            call_timeout,
            connect: VecDeque::from([0]),
            next: 0,
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
    pub fn core(&mut self, shard: usize) -> Option<&mut ClientCore<T>> {
        self.cores.get_mut(shard).and_then(Option::as_mut)
    }

    /// The core of `shard`, made now if the app did not use that shard yet: it joins as
    /// the member shard 0 numbered, once the driver opened its connection
    /// ([`Sharded::poll_connect`]); its calls may be made at once.
    ///
    /// # Errors
    /// `Protocol` before shard 0's welcome (the app has no id yet) or for a shard the
    /// pool does not have; [`CallError::Closed`] once shard 0's core closed.
    pub fn at(&mut self, now: Instant, shard: usize) -> CallResult<&mut ClientCore<T>> {
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
            let core = ClientCore::connect_member(
                now,
                self.join.clone(),
                &self.secret,
                self.call_timeout,
                (app, place),
            );
            self.cores[shard] = Some(core);
            self.connect.push_back(shard);
        }
        self.cores[shard].as_mut().ok_or(CallError::Closed)
    }

    /// The core of the home of `name` (see [`Sharded::at`]).
    ///
    /// # Errors
    /// As [`Sharded::at`].
    pub fn home(&mut self, now: Instant, name: &str) -> CallResult<&mut ClientCore<T>> {
        let shard = self.shards.home(name);
        self.at(now, shard)
    }

    /// The core that numbered `cdo` (see [`Sharded::at`]).
    ///
    /// # Errors
    /// As [`Sharded::at`].
    pub fn of_cdo(&mut self, now: Instant, cdo: CdoId) -> CallResult<&mut ClientCore<T>> {
        let shard = self.shards.of_cdo(cdo);
        self.at(now, shard)
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
    /// hand on, tickets to fetch: the driver tells that core how they went).
    pub fn poll_event(&mut self) -> Option<(usize, Event<T>)> {
        self.in_turn(ClientCore::poll_event)
    }

    /// What `poll` gives of the first core, from the one after the last that gave.
    fn in_turn<R>(&mut self, poll: impl Fn(&mut ClientCore<T>) -> Option<R>) -> Option<(usize, R)> {
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
        match self.core(shard) {
            Some(core) => core.handle(now, msg),
            None => {
                tracing::warn!("pool client: a message of shard {shard}, which it does not use")
            }
        }
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
    /// (and naming it as a member at a shard other than 0), then replays what it holds
    /// there ([`ClientCore::rejoin`]).
    pub fn rejoin(&mut self, now: Instant, shard: usize) {
        let mut join = self.join.clone();
        let Some(core) = self.cores.get_mut(shard).and_then(Option::as_mut) else {
            return;
        };
        if shard > 0 {
            join.member = core.reclaim().map(|r| r.app);
        }
        core.rejoin(now, join, &self.secret);
        self.connect.push_back(shard);
    }

    /// The cores the app uses, with their shards (to close them all, say).
    pub fn cores(&mut self) -> impl Iterator<Item = (usize, &mut ClientCore<T>)> {
        self.cores
            .iter_mut()
            .enumerate()
            .filter_map(|(s, c)| c.as_mut().map(|c| (s, c)))
    }
}
