//! What each handle holds in the instance's registries: the state of a CDO, a group, an
//! asynchronous demand and a subscription. The operations on them live with their API
//! (`cdo`, `group`, `request`, `events`); the instance ([`crate::instance`]) owns the
//! registries. Kept apart so that the instance depends on the states, not on the
//! operations that use the instance.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pool::CdoData;
use pool::attr::Attributes;
use pool::proto::CdoId;

use crate::handles::Cdo;
use crate::session::Session;
use crate::status::Status;

/// Memory a program lends to a CDO: offered in place (producer) or filled by a demand
/// (consumer).
pub(crate) struct Lent {
    pub(crate) ptr: *mut u8,
    /// The program may be written into it (a consumer's landing buffer must be).
    pub(crate) writable: bool,
    /// Kept alive while lent (a Python buffer, say).
    pub(crate) _keep: Option<Box<dyn Any + Send>>,
}

// SAFETY: the pointer is only dereferenced under the contract of `cdo_set_user_memory`
// (the memory stays valid and the caller does not write it while offered).
unsafe impl Send for Lent {}

pub(crate) struct CdoState {
    pub(crate) id: CdoId,
    pub(crate) attrs: Attributes,
    pub(crate) lent: Option<Lent>,
    /// `scope.local-size` as the program set it (the lent memory's length).
    pub(crate) local_size: Option<u64>,
    /// Demanded bytes in library memory (None when copied into lent memory), shared with
    /// views that may outlive the handle ([`cdo_bytes`](crate::cdo_bytes)).
    pub(crate) data: Option<Arc<CdoData>>,
    /// Length of the demanded CDO.
    pub(crate) demanded: Option<u64>,
    /// An asynchronous demand of it is in flight (see `request`).
    pub(crate) in_flight: bool,
}

/// A CDO in the registry.
pub(crate) struct CdoCell {
    pub(crate) name: String,
    pub(crate) state: Mutex<CdoState>,
}

impl CdoCell {
    pub(crate) fn lock(&self) -> MutexGuard<'_, CdoState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where a group is in the life only Maestro's API gives it: members added until a local
/// seal fixes them, then required or demanded by a consumer. Whether it is offered is the
/// client core's word on the group's CDO ([`pool::Client::phase`]), not kept here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Declared,
    Sealed,
    Required,
    Demanded,
}

pub(crate) struct GroupState {
    /// The group's own CDO in the pool (named as the group).
    pub(crate) id: CdoId,
    pub(crate) phase: Phase,
    /// The producer's CDOs (added), or the consumer's (brought by the demand, the group's
    /// own: disposed with it).
    pub(crate) members: Vec<Cdo>,
    /// The size the program said to expect.
    pub(crate) expected: Option<usize>,
    /// Where `group_next` is.
    pub(crate) cursor: usize,
}

/// A group in the registry.
pub(crate) struct GroupCell {
    pub(crate) name: String,
    pub(crate) state: Mutex<GroupState>,
}

impl GroupCell {
    pub(crate) fn lock(&self) -> MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A demand running in the background on the client's runtime, for [`crate::request`].
pub(crate) type Background = pool::Task<pool::Result<(pool::CdoData, Attributes)>>;

/// Where a request is.
pub(crate) enum Progress {
    /// Running in the background.
    Running(Background),
    /// Finished, and the CDO settled: its outcome (errors as status and message).
    Settled(std::result::Result<(), (Status, String)>),
}

/// A request in the registry.
pub(crate) struct RequestCell {
    pub(crate) cdo: Cdo,
    pub(crate) state: Mutex<Progress>,
}

impl RequestCell {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Progress> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A subscription in the registry: the pool's subscription, and the session it lives in
/// (kept so the connection outlives it).
pub(crate) struct SubCell {
    pub(crate) sub: pool::Subscription,
    pub(crate) _session: Arc<Session>,
}
