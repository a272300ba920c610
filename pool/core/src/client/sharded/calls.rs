//! The app's calls on a sharded client, with the signatures of [`ClientCore`]'s: each
//! goes to the core of the shard it concerns (a name's home, the shard that numbered a
//! CDO, the shard whose manager issued a transfer), made when first needed
//! ([`Sharded::at`]). A driver (or a test) calls these as it would call a single core's.

use std::sync::Arc;
use std::time::Instant;

use super::{Route, Sharded, Waiter};
use crate::attr::Attributes;
use crate::client::{
    CallError, CallId, CallKey, CallResult, Demand, Driver, Fetched, LeaseCopy, Offer, Phase,
    Taken, Transport,
};
use crate::proto::{self, CdoId, TransferId};

impl<T: Driver> Sharded<T> {
    /// Declares `name` at its home (see [`ClientCore::declare`](crate::client::ClientCore::declare); `now`, for a core made
    /// for it).
    ///
    /// # Errors
    /// As [`ClientCore::declare`](crate::client::ClientCore::declare) and [`Sharded::at`].
    pub fn declare(&mut self, now: Instant, name: &str) -> CallResult<CdoId> {
        self.at(now, Route::Name(name))?.declare(name)
    }

    /// The name of `cdo` (see [`ClientCore::name`](crate::client::ClientCore::name)).
    pub fn name(&self, cdo: CdoId) -> Option<&Arc<str>> {
        self.known(Route::Cdo(cdo))?.name(cdo)
    }

    /// How far `cdo` went (see [`ClientCore::phase`](crate::client::ClientCore::phase)).
    pub fn phase(&self, cdo: CdoId) -> Option<Phase> {
        self.known(Route::Cdo(cdo))?.phase(cdo)
    }

    /// Seals `cdo` (see [`ClientCore::seal`](crate::client::ClientCore::seal)).
    ///
    /// # Errors
    /// As [`ClientCore::seal`](crate::client::ClientCore::seal).
    pub fn seal(
        &mut self,
        now: Instant,
        cdo: CdoId,
        attributes: Attributes,
        waiter: T::Waiter,
    ) -> CallResult<CallId> {
        self.at(now, Route::Cdo(cdo))?
            .seal(now, cdo, attributes, Waiter::App(waiter))
    }

    /// Offers (see [`ClientCore::offer`](crate::client::ClientCore::offer)).
    ///
    /// # Errors
    /// As [`ClientCore::offer`](crate::client::ClientCore::offer).
    pub fn offer(
        &mut self,
        now: Instant,
        offer: Offer<'_>,
        waiter: T::Waiter,
    ) -> CallResult<CallId> {
        self.at(now, Route::Cdo(offer.cdo))?
            .offer(now, offer, Waiter::App(waiter))
    }

    /// How an offer of `cdo` travels (see [`ClientCore::transport`](crate::client::ClientCore::transport)).
    ///
    /// # Errors
    /// As [`ClientCore::transport`](crate::client::ClientCore::transport); `UnknownCdo` (refused) for a CDO no core numbered.
    pub fn transport(&self, cdo: CdoId, seal: Option<&Attributes>) -> CallResult<Transport> {
        self.known(Route::Cdo(cdo))
            .ok_or(unknown(proto::Op::Offer))?
            .transport(cdo, seal)
    }

    /// Requires `cdo` (see [`ClientCore::require`](crate::client::ClientCore::require)).
    ///
    /// # Errors
    /// As [`ClientCore::require`](crate::client::ClientCore::require).
    pub fn require(&mut self, now: Instant, cdo: CdoId, waiter: T::Waiter) -> CallResult<CallId> {
        self.at(now, Route::Cdo(cdo))?
            .require(now, cdo, Waiter::App(waiter))
    }

    /// Demands `cdo` (see [`ClientCore::demand`](crate::client::ClientCore::demand)).
    ///
    /// # Errors
    /// As [`ClientCore::demand`](crate::client::ClientCore::demand).
    pub fn demand(
        &mut self,
        now: Instant,
        cdo: CdoId,
        waiter: T::Waiter,
    ) -> CallResult<Demand<T::Data>> {
        self.at(now, Route::Cdo(cdo))?
            .demand(now, cdo, Waiter::App(waiter))
    }

    /// The oldest lease of `name`, taken for a fetch that keeps no CDO (see
    /// [`ClientCore::take_leased`](crate::client::ClientCore::take_leased)); `None` also
    /// when the name's shard is not connected yet (it granted no lease then).
    ///
    /// # Errors
    /// As [`ClientCore::take_leased`](crate::client::ClientCore::take_leased).
    pub fn take_leased(&mut self, now: Instant, name: &str) -> CallResult<Option<Taken<T::Data>>> {
        match self.known_mut(Route::Name(name)) {
            Some(core) => core.take_leased(now, name),
            None => Ok(None),
        }
    }

    /// The bytes of `copy`, copied, told to the shard that granted the lease (see
    /// [`ClientCore::took_copy`](crate::client::ClientCore::took_copy)).
    ///
    /// # Errors
    /// As [`ClientCore::took_copy`](crate::client::ClientCore::took_copy).
    pub fn took_copy(
        &mut self,
        now: Instant,
        copy: LeaseCopy,
        got: (T::Data, Option<proto::Direct>),
    ) -> CallResult<Option<(T::Data, Attributes)>> {
        self.at(now, Route::Shard(copy.shard))?
            .took_copy(now, copy, got)
    }

    /// Gives back the lease of `copy`, whose copy failed; dropped for a shard no longer
    /// connected.
    pub fn give_back(&mut self, copy: LeaseCopy) {
        if let Some(core) = self.known_mut(Route::Shard(copy.shard)) {
            core.give_back(copy);
        }
    }

    /// The driver had handled everything shard `shard`'s manager had written by `at` (see
    /// [`ClientCore::drained`](crate::client::ClientCore::drained)); nothing for a shard
    /// not connected.
    pub fn drained(&mut self, shard: usize, at: Instant) {
        if let Some(core) = self.core(shard) {
            core.drained(at);
        }
    }

    /// The bytes and attributes of demanded `cdo` (see [`ClientCore::take_arrived`](crate::client::ClientCore::take_arrived)).
    ///
    /// # Errors
    /// As [`ClientCore::take_arrived`](crate::client::ClientCore::take_arrived); `UnknownCdo` (refused) for a CDO no core numbered.
    pub fn take_arrived(&mut self, cdo: CdoId) -> CallResult<(T::Data, Attributes)> {
        self.known_mut(Route::Cdo(cdo))
            .ok_or(unknown(proto::Op::Demand))?
            .take_arrived(cdo)
    }

    /// Lends `memory` for `cdo`'s bytes (see [`ClientCore::lend`](crate::client::ClientCore::lend)); dropped for a CDO no
    /// core numbered.
    pub fn lend(&mut self, cdo: CdoId, memory: T::Memory) {
        if let Some(core) = self.known_mut(Route::Cdo(cdo)) {
            core.lend(cdo, memory);
        }
    }

    /// The memory lent for `cdo`, back (see [`ClientCore::unlend`](crate::client::ClientCore::unlend)).
    pub fn unlend(&mut self, cdo: CdoId) -> Option<T::Memory> {
        self.known_mut(Route::Cdo(cdo))?.unlend(cdo)
    }

    /// Cancels a require or demand of `cdo` (see [`ClientCore::retract`](crate::client::ClientCore::retract)).
    ///
    /// # Errors
    /// As [`ClientCore::retract`](crate::client::ClientCore::retract).
    pub fn retract(&mut self, now: Instant, cdo: CdoId, waiter: T::Waiter) -> CallResult<CallId> {
        self.at(now, Route::Cdo(cdo))?
            .retract(now, cdo, Waiter::App(waiter))
    }

    /// Withdraws `cdo` (see [`ClientCore::withdraw`](crate::client::ClientCore::withdraw)).
    ///
    /// # Errors
    /// As [`ClientCore::withdraw`](crate::client::ClientCore::withdraw).
    pub fn withdraw(&mut self, now: Instant, cdo: CdoId, waiter: T::Waiter) -> CallResult<CallId> {
        self.at(now, Route::Cdo(cdo))?
            .withdraw(now, cdo, Waiter::App(waiter))
    }

    /// Disposes `cdo` (see [`ClientCore::dispose`](crate::client::ClientCore::dispose)).
    ///
    /// # Errors
    /// As [`ClientCore::dispose`](crate::client::ClientCore::dispose).
    pub fn dispose(
        &mut self,
        now: Instant,
        cdo: CdoId,
        waiter: T::Waiter,
    ) -> CallResult<Option<CallId>> {
        self.at(now, Route::Cdo(cdo))?
            .dispose(now, cdo, Waiter::App(waiter))
    }

    /// Ends the CDOs the pool keeps under `name`, at its home (see
    /// [`ClientCore::discard`](crate::client::ClientCore::discard)).
    ///
    /// # Errors
    /// As [`ClientCore::discard`](crate::client::ClientCore::discard).
    pub fn discard(
        &mut self,
        now: Instant,
        name: &str,
        waiter: T::Waiter,
    ) -> CallResult<(u64, CallId)> {
        self.at(now, Route::Name(name))?
            .discard(now, name, Waiter::App(waiter))
    }

    /// Sets the deadline of call `call` filed under `key`, whose id is a CDO's (see
    /// [`ClientCore::set_deadline`](crate::client::ClientCore::set_deadline)).
    pub fn set_deadline(&mut self, key: CallKey, call: CallId, deadline: Option<Instant>) {
        if let Some(core) = self.known_mut(Route::Cdo(key.1)) {
            core.set_deadline(key, call, deadline);
        }
    }

    /// Gives up call `call` filed under `key`, whose id is a CDO's (see
    /// [`ClientCore::abandon`](crate::client::ClientCore::abandon)).
    pub fn abandon(&mut self, key: CallKey, call: CallId) {
        if let Some(core) = self.known_mut(Route::Cdo(key.1)) {
            core.abandon(key, call);
        }
    }

    /// The outcome of transfer `transfer` of shard `shard`'s manager (see
    /// [`ClientCore::fetched`](crate::client::ClientCore::fetched); transfer ids are each manager's own).
    pub fn fetched(&mut self, shard: usize, transfer: TransferId, outcome: Fetched<T::Data>) {
        if let Some(core) = self.core(shard) {
            core.fetched(transfer, outcome);
        }
    }

    /// Fetches stream transfer `transfer` of shard `shard`'s manager (see
    /// [`ClientCore::stream`](crate::client::ClientCore::stream)).
    ///
    /// # Errors
    /// As [`ClientCore::stream`](crate::client::ClientCore::stream); [`CallError::Closed`] for a shard the app does not use.
    pub fn stream(
        &mut self,
        now: Instant,
        (shard, transfer): (usize, TransferId),
        len: u64,
        route: T::Stream,
    ) -> CallResult<()> {
        self.at(now, Route::Shard(shard))?
            .stream(now, transfer, len, route)
    }

    /// A stream's route is gone (see [`ClientCore::unroute`](crate::client::ClientCore::unroute)).
    pub fn unroute(&mut self, (shard, transfer): (usize, TransferId)) {
        if let Some(core) = self.core(shard) {
            core.unroute(transfer);
        }
    }

    /// Serves a piece of stream transfer `transfer` of shard `shard`'s manager (see
    /// [`ClientCore::served`](crate::client::ClientCore::served)).
    ///
    /// # Errors
    /// As [`ClientCore::served`](crate::client::ClientCore::served); [`CallError::Closed`] for a shard the app does not use.
    pub fn served(
        &mut self,
        (shard, transfer): (usize, TransferId),
        offset: u64,
        data: Vec<u8>,
    ) -> CallResult<()> {
        self.core(shard)
            .ok_or(CallError::Closed)?
            .served(transfer, offset, data)
    }

    /// Offered `cdo` written to the global file system, or why not (see
    /// [`ClientCore::spilled`](crate::client::ClientCore::spilled)).
    pub fn spilled(&mut self, cdo: CdoId, file: Result<proto::GfsFile, String>) {
        if let Some(core) = self.known_mut(Route::Cdo(cdo)) {
            core.spilled(cdo, file);
        }
    }

    /// Offered `cdo`'s file linked into the PM's directory, or why not (see
    /// [`ClientCore::handed_over`](crate::client::ClientCore::handed_over)).
    pub fn handed_over(&mut self, cdo: CdoId, linked: Result<Option<Box<str>>, String>) {
        if let Some(core) = self.known_mut(Route::Cdo(cdo)) {
            core.handed_over(cdo, linked);
        }
    }
}

/// `op` refused: the CDO is none of this app's.
fn unknown(op: proto::Op) -> CallError {
    CallError::Refused {
        op,
        why: proto::Refusal::UnknownCdo,
    }
}
