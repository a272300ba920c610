//! Getting a CDO's bytes: require, demand (blocking, bounded, interruptible, or in the
//! background for a request), settling what arrived, and the views of the bytes.

use pool::CallError;
use std::sync::Arc;
use std::time::Duration;

use fabric::Buffer;
use pool::attr::Attributes;
use pool::layout::{self, Layout};
use pool::proto::CdoId;
use pool::{Bounded, CdoData};

use super::attributes::{Attr, cdo_attribute_get};
use super::{RAW_PTR, cell, file, with_cdo};
use crate::cells::{Background, CdoState};
use crate::handles::Cdo;
use crate::instance::instance;
use crate::status::{Error, Result, Status};

/// A handle for a member a group's demand brought: `name`, declared as `id`, demanded,
/// holding `data` and `attrs`.
pub(crate) fn adopt_demanded(
    name: &str,
    id: CdoId,
    data: CdoData,
    attrs: Attributes,
) -> Result<Cdo> {
    let inst = instance()?;
    let state = CdoState {
        attrs,
        demanded: Some(data.len() as u64),
        data: Some(Arc::new(data)),
        ..CdoState::declared(id)
    };
    Ok(file(&inst, name, state))
}

/// Declares the intent to demand the CDO (`mstro_cdo_require`): the pool manager may move
/// it here as soon as it is offered, straight into the memory the program lent
/// ([`cdo_set_user_memory`](crate::cdo_set_user_memory)) when it moves by RMA or from a
/// same-node provider.
///
/// # Errors
/// [`Status::Invstate`] unless declared; connection errors.
pub fn cdo_require(cdo: Cdo) -> Result<()> {
    with_cdo(cdo, "require", |client, _, st| {
        match landing(st) {
            Some(dst) => client.require_into(st.id, dst)?,
            None => client.require(st.id)?,
        }
        Ok(())
    })
}

/// Waits until the CDO is here (`mstro_cdo_demand`), at most `MSTRO_TIMEOUT`.
///
/// # Errors
/// As [`cdo_demand_within`].
pub fn cdo_demand(cdo: Cdo) -> Result<()> {
    cdo_demand_within(cdo, None)
}

/// Waits until the CDO is here, at most `limit` (or `MSTRO_TIMEOUT`): its bytes land in the
/// memory lent with [`cdo_set_user_memory`](crate::cdo_set_user_memory) (one copy; it must be large enough) or stay in
/// library memory ([`cdo_access`]); the attributes become those it was sealed with.
///
/// # Errors
/// [`Status::Timeout`] if nobody offers it in time (the demand stands: demand again or
/// retract); [`Status::Noent`] if its providers vanished; [`Status::Invarg`] if the lent
/// memory is too small; [`Status::Invstate`] if demanded already; connection errors.
pub fn cdo_demand_within(cdo: Cdo, limit: Option<Duration>) -> Result<()> {
    demand(cdo, limit, None)
}

/// As [`cdo_demand`], asking `interrupted` every 50 ms whether the caller wants to stop
/// (Python's Ctrl-C): then the demand is retracted at the pool manager and the call
/// returns [`Status::Fail`] saying so; the CDO is declared as before and may be demanded
/// again. When its transfer is already under way, the demand completes first (the CDO is
/// then demanded, as after a successful call) and the call still says it was interrupted.
///
/// # Errors
/// As [`cdo_demand_within`]; [`Status::Fail`] when interrupted.
pub fn cdo_demand_interruptible(cdo: Cdo, interrupted: &(dyn Fn() -> bool + Sync)) -> Result<()> {
    demand(cdo, None, Some(interrupted))
}

fn demand(
    cdo: Cdo,
    limit: Option<Duration>,
    interrupted: Option<&(dyn Fn() -> bool + Sync)>,
) -> Result<()> {
    with_cdo(cdo, "demand", |client, name, st| {
        demandable(st)?;
        let id = st.id;
        let into = landing(st);
        // In a local pool only this process's threads can offer: a demand that waits says
        // so after a second, once.
        let session = instance().ok().and_then(|i| {
            i.session()
                .ok()
                .map(|s| (s.found().clone(), s.settings().timeout))
        });
        let local = session
            .as_ref()
            .is_some_and(|(f, _)| matches!(f, crate::session::Found::LocalPool));
        // What was waited for, when nobody offered it in time.
        let nobody = |within: Duration| {
            Error::new(
                Status::Timeout,
                format!("nobody offered {name:?} within {within:?}; the demand stands"),
            )
        };
        let notice = || {
            tracing::warn!(
                "demand of {name:?} waits in a local pool: only threads of this process can offer it (set MSTRO_POOL_MANAGER_INFO or run under a PMIx launcher to reach other processes)"
            );
        };
        let bounds = pool::Bounds {
            limit,
            interrupted,
            notice: local.then_some((Duration::from_secs(1), &notice as &(dyn Fn() + Sync))),
        };
        let waited = client.demand_bounded(id, into, bounds);
        let (got, late) = match waited {
            Bounded::Done(r) => (r, false),
            Bounded::LateInterrupt(r) => (r, true),
            Bounded::Interrupted => {
                return Err(Error::new(
                    Status::Fail,
                    format!(
                        "interrupted: the demand of {name:?} was retracted; demand again to wait for it"
                    ),
                ));
            }
            Bounded::TimedOut => return Err(nobody(limit.unwrap_or_default())),
        };
        // The call's own timeout (MSTRO_TIMEOUT) said as what it is: no offer came.
        let got = got.map_err(|e| match e {
            pool::ClientError::Call(CallError::Timeout(pool::proto::Op::Demand)) => {
                nobody(session.as_ref().map_or(Duration::ZERO, |(_, t)| *t))
            }
            e => Error::from(e),
        });
        settle(st, got?)?;
        if late {
            return Err(Error::new(
                Status::Fail,
                format!("interrupted, but {name:?} had arrived already: it is demanded"),
            ));
        }
        Ok(())
    })
}

/// Refuses a demand of a CDO demanded already or with an asynchronous demand in flight.
fn demandable(st: &CdoState) -> Result<()> {
    if st.demanded.is_some() {
        return Err(Error::new(Status::Invstate, "demanded already"));
    }
    if st.in_flight {
        return Err(Error::new(
            Status::Invstate,
            "an asynchronous demand of it is in flight: wait for its request (or dispose it) first",
        ));
    }
    Ok(())
}

/// Writable lent memory, as the buffer a demand's transfer lands in (no copy after).
fn landing(st: &CdoState) -> Option<Buffer> {
    st.lent.as_ref().filter(|l| l.writable).map(|l| {
        let room = usize::try_from(st.local_size.unwrap_or(0)).unwrap_or(usize::MAX);
        // SAFETY: the lent memory has `room` bytes and the caller does not touch it
        // between a require or demand and the demand's end (contract of
        // `cdo_set_user_memory`) nor frees it before the CDO is disposed.
        unsafe { Buffer::borrowed(l.ptr, room) }
    })
}

/// Starts an asynchronous demand of `cdo` (see [`crate::request`]).
///
/// # Errors
/// As [`cdo_demand`]'s refusals: demanded already, a demand in flight, a bad handle.
pub(crate) fn begin_demand(cdo: Cdo) -> Result<Background> {
    with_cdo(cdo, "demand_async", |client, _, st| {
        demandable(st)?;
        let work = client.as_async().demand_detached(st.id, landing(st));
        st.in_flight = true;
        Ok(client.spawn(work))
    })
}

/// Ends an asynchronous demand of `cdo`: its outcome settles the CDO as a demand would;
/// `None` (cancelled) retracts it at the pool manager (a transfer already under way lands
/// and waits for the next demand).
///
/// # Errors
/// The demand's own error; [`settle`]'s.
pub(crate) fn end_demand(
    cdo: Cdo,
    outcome: Option<pool::Result<(pool::CdoData, Attributes)>>,
) -> Result<()> {
    with_cdo(cdo, "demand_async", |client, _, st| {
        st.in_flight = false;
        match outcome {
            Some(got) => settle(st, got?),
            None => {
                if let Err(e) = client.retract(st.id) {
                    tracing::debug!("retracting a cancelled asynchronous demand: {e}");
                }
                Ok(())
            }
        }
    })
}

/// Makes a finished demand's bytes and attributes the CDO's: into the memory it lent, or
/// kept in library memory. A consumer that declared the CDO with a layout
/// (`.maestro.core.cdo.layout.*`) other than the producer's gets the array in its own
/// order (and its layout in the attributes).
///
/// # Errors
/// [`Status::Invarg`] when the lent memory is read-only or too small, the declared layout
/// is malformed, or the two layouts are not the same array (element size, dimensions;
/// the message names both): the bytes are then kept in library memory as they came.
fn settle(st: &mut CdoState, (data, attrs): (pool::CdoData, Attributes)) -> Result<()> {
    let len = data.len();
    st.demanded = Some(len as u64);
    let wanted = Layout::from_attributes(&st.attrs);
    let given = Layout::from_attributes(&attrs);
    st.attrs = attrs;
    let (wanted, given) = match (wanted, given) {
        (Ok(Some(w)), Ok(Some(g))) if w != g => (w, g),
        // The producer's bytes are an array and this CDO's layout says only part of what
        // it wants: which order, of what, cannot be told.
        (Err(e), Ok(Some(g))) => {
            st.data = Some(Arc::new(data));
            return Err(Error::invarg(format!(
                "the producer's bytes are a {g}, and the layout this CDO was declared with is incomplete: {e}; the bytes are kept as they came"
            )));
        }
        _ => return land(st, data),
    };
    // The consumer declared the array in another layout: its own order, written straight
    // into its lent memory where it lent some (the bytes came elsewhere then).
    let lent = st.lent.as_ref().filter(|l| {
        l.writable
            && st.local_size.unwrap_or(0) >= len as u64
            && data.as_ptr() != l.ptr.cast_const()
    });
    let transformed = match lent {
        Some(l) => {
            // SAFETY: the lent memory has at least `len` bytes, is writable, is not where
            // the bytes are, and the caller does not touch it during the demand (contract
            // of `cdo_set_user_memory`).
            let out = unsafe { std::slice::from_raw_parts_mut(l.ptr, len) };
            layout::transform(&data, &given, &wanted, out)
                .map(|()| None)
                .map_err(|e| e.to_string())
        }
        None => Buffer::new(len)
            .map_err(|e| format!("no memory for the array in its new layout: {e}"))
            .and_then(|mut b| {
                layout::transform(&data, &given, &wanted, b.as_mut_slice())
                    .map(|()| Some(b))
                    .map_err(|e| e.to_string())
            }),
    };
    match transformed {
        Ok(out) => {
            wanted.to_attributes(&mut st.attrs);
            out.map_or(Ok(()), |b| land(st, CdoData::from_buffer(b)))
        }
        Err(e) => {
            st.data = Some(Arc::new(data));
            Err(Error::invarg(format!(
                "{e}; the bytes are kept as they came, in the producer's layout"
            )))
        }
    }
}

/// Puts arrived bytes where the consumer gets them: into the memory it lent, or kept in
/// library memory.
///
/// # Errors
/// As [`settle`]'s.
fn land(st: &mut CdoState, data: CdoData) -> Result<()> {
    let len = data.len();
    match &st.lent {
        Some(lent) if len > 0 => {
            let room = st.local_size.unwrap_or(0);
            if !lent.writable {
                st.data = Some(Arc::new(data));
                return Err(Error::invarg(
                    "the buffer lent is read-only: lend a writable one (bytearray, a NumPy array) for a demand; the bytes are kept in library memory",
                ));
            }
            if (len as u64) > room {
                st.data = Some(Arc::new(data));
                return Err(Error::invarg(format!(
                    "{len} bytes arrived but the lent buffer has {room}; the bytes are kept in library memory (mstro_cdo_access_ptr)"
                )));
            }
            if data.as_ptr() != lent.ptr.cast_const() {
                // SAFETY: the lent memory has `room >= len` bytes and the caller does
                // not touch it during the demand (contract of `cdo_set_user_memory`).
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), lent.ptr, len) };
            }
        }
        _ => st.data = Some(Arc::new(data)),
    }
    Ok(())
}

/// The demanded bytes (`mstro_cdo_access_ptr`): pointer and length, valid until dispose.
/// Memory the program lent is returned as is. The bytes of a same-process provider are
/// its own memory (no copy): read them, do not write them.
///
/// # Errors
/// [`Status::Invarg`] for a bad handle; [`Status::Invstate`] before demand (producers:
/// their lent memory is returned).
pub fn cdo_access(cdo: Cdo) -> Result<(*const u8, usize)> {
    match cdo_attribute_get(cdo, RAW_PTR) {
        Ok(Attr::RawPtr(p, n)) => Ok((p, n)),
        Ok(Attr::Value(_)) => unreachable!("raw-ptr is always a pointer"),
        Err(e) if e.status == Status::Noent => Err(Error::new(
            Status::Invstate,
            format!(
                "{}; demand it first",
                e.message.replace("has no attribute", "has no data yet:")
            ),
        )),
        Err(e) => Err(e),
    }
}

/// The CDO's bytes as [`cdo_access`] gives them, kept alive for as long as the returned
/// [`Bytes`] lives, even past dispose (for views a language runtime hands out, whose life
/// it does not control). Lent memory is the program's to keep alive.
///
/// # Errors
/// As [`cdo_access`].
pub fn cdo_bytes(cdo: Cdo) -> Result<Bytes> {
    let inst = instance()?;
    let c = cell(&inst, cdo)?;
    let kept = c.lock().data.clone();
    drop(c);
    let (ptr, len) = cdo_access(cdo)?;
    Ok(Bytes {
        ptr,
        len,
        _kept: kept,
    })
}

/// Bytes of a CDO that stay valid while this lives (see [`cdo_bytes`]).
pub struct Bytes {
    ptr: *const u8,
    len: usize,
    _kept: Option<Arc<CdoData>>,
}

// SAFETY: the bytes are library memory shared read-only through the Arc (or the program's
// lent memory, whose life and access are the program's to manage).
unsafe impl Send for Bytes {}

// SAFETY: only reads go through `&Bytes`, of library memory shared read-only through the
// Arc or of the program's lent memory, which the program does not write while viewed.
unsafe impl Sync for Bytes {}

impl Bytes {
    /// The first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
