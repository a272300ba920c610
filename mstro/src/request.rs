//! Asynchronous demand (Maestro's `mstro_cdo_demand_async` and `mstro_request_*`): a demand
//! that runs in the background while the program works, as many in flight from one thread
//! as it likes.
//!
//! A [`Request`] is a handle for one CDO's demand in flight. [`request_test`] says whether
//! it finished and, if it did, settles the CDO as [`crate::cdo_demand`] would (its bytes
//! and the offer's attributes become the CDO's); [`request_wait`] waits for it (at most
//! `MSTRO_TIMEOUT`, as a demand does); [`request_dispose`] forgets it, cancelling one still
//! in flight (the demand is retracted at the pool manager; a transfer already under way
//! lands and is kept for the next demand of the CDO). While its request is in flight the
//! CDO cannot be demanded again or disposed. A finished request answers `test` and `wait`
//! again with its first outcome, until disposed. `finalize` cancels what is left.

use std::sync::Mutex;

use crate::cdo::{begin_demand, end_demand};
use crate::cells::{Progress, RequestCell};
use crate::handles::{Cdo, Request};
use crate::instance::instance;
use crate::status::{Error, Result, Status};

impl RequestCell {
    /// Cancels a request still running (instance end, dispose).
    pub(crate) fn cancel(&self) -> Option<Cdo> {
        match &*self.lock() {
            Progress::Running(task) => {
                task.abort();
                Some(self.cdo)
            }
            Progress::Settled(_) => None,
        }
    }
}

/// Starts demanding `cdo` in the background (`mstro_cdo_demand_async`).
///
/// # Errors
/// [`Status::Invstate`] if demanded already or a demand of it is in flight;
/// [`Status::Invarg`] for a bad handle; [`Status::Uninit`].
pub fn cdo_demand_async(cdo: Cdo) -> Result<Request> {
    let inst = instance()?;
    let task = begin_demand(cdo)?;
    let cell = RequestCell {
        cdo,
        state: Mutex::new(Progress::Running(task)),
    };
    Ok(Request(inst.requests.insert(cell)))
}

/// Whether the request finished (`mstro_request_test`), well or not ([`request_wait`]
/// then says which); if it did, the CDO is settled as after a demand. Never waits.
///
/// # Errors
/// [`Status::Invarg`] for a bad or disposed handle; [`Status::Uninit`].
pub fn request_test(request: Request) -> Result<bool> {
    Ok(finish(request, Wait::No)?.is_some())
}

/// Waits until the request finished (`mstro_request_wait`), at most `MSTRO_TIMEOUT`, and
/// settles the CDO as after a demand.
///
/// # Errors
/// The demand's own error (as [`crate::cdo_demand`]'s: [`Status::Timeout`] if nobody
/// offered the CDO in time, ...); [`Status::Invarg`] for a bad or disposed handle.
pub fn request_wait(request: Request) -> Result<()> {
    finish(request, Wait::Yes(None))?.unwrap_or(Ok(()))
}

/// As [`request_wait`], asking `interrupted` every 50 ms whether the caller wants to stop
/// waiting (Python's Ctrl-C): then the call returns [`Status::Fail`] saying so and the
/// request stays in flight (wait again, or dispose it to cancel it).
///
/// # Errors
/// As [`request_wait`]; [`Status::Fail`] when interrupted.
pub fn request_wait_interruptible(
    request: Request,
    interrupted: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    finish(request, Wait::Yes(Some(interrupted)))?.unwrap_or_else(|| {
        Err(Error::new(
            Status::Fail,
            "interrupted: the request is still in flight; wait for it again or dispose it",
        ))
    })
}

/// Whether [`finish`] waits, and who may interrupt it.
enum Wait<'a> {
    No,
    Yes(Option<&'a (dyn Fn() -> bool + Sync)>),
}

/// The CDO a request demands.
///
/// # Errors
/// [`Status::Invarg`] for a bad or disposed handle; [`Status::Uninit`].
pub fn request_cdo(request: Request) -> Result<Cdo> {
    Ok(instance()?.requests.get(request.0)?.cdo)
}

/// Forgets the request (`mstro_request_dispose`); one still in flight is cancelled and its
/// demand retracted at the pool manager (the CDO may be demanded again).
///
/// # Errors
/// [`Status::Invarg`] for a bad or disposed handle; the retraction's error.
pub fn request_dispose(request: Request) -> Result<()> {
    let inst = instance()?;
    let cell = inst.requests.remove(request.0)?;
    match cell.cancel() {
        Some(cdo) => end_demand(cdo, None),
        None => Ok(()),
    }
}

/// Settles a finished request (waiting for it as `wait` says); its outcome, `None` while
/// it runs (or the wait was interrupted).
fn finish(request: Request, wait: Wait<'_>) -> Result<Option<Result<()>>> {
    let inst = instance()?;
    let cell = inst.requests.get(request.0)?;
    let mut progress = cell.lock();
    if let Progress::Running(task) = &mut *progress {
        let interrupted = match wait {
            Wait::No if !task.is_finished() => return Ok(None),
            Wait::No => None,
            Wait::Yes(interrupted) => interrupted,
        };
        let session = inst.session()?;
        let bounds = pool::Bounds {
            interrupted,
            ..pool::Bounds::default()
        };
        let joined = match session.client().join_task(task, bounds) {
            pool::Bounded::Done(joined) | pool::Bounded::LateInterrupt(joined) => joined,
            pool::Bounded::Interrupted | pool::Bounded::TimedOut => return Ok(None),
        };
        let outcome = match joined {
            Ok(got) => Some(got),
            Err(e) => {
                tracing::warn!("asynchronous demand ended abnormally: {e}");
                None
            }
        };
        let settled = match outcome {
            Some(got) => end_demand(cell.cdo, Some(got)),
            None => end_demand(cell.cdo, None).and(Err(Error::new(
                Status::Fail,
                "the asynchronous demand was cancelled",
            ))),
        };
        *progress = Progress::Settled(settled.map_err(|e| (e.status, e.message)));
    }
    Ok(Some(match &*progress {
        Progress::Settled(Err((status, message))) => Err(Error::new(*status, message.clone())),
        // Settled (a running one was settled above).
        _ => Ok(()),
    }))
}
