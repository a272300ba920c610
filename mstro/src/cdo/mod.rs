//! CDO handles: a name, attributes staged before seal, the producer's lent memory or the
//! consumer's landing buffer, and after a demand the bytes and the attributes the CDO was
//! sealed with. Operations go to the pool manager through the instance's session.

mod attributes;
mod demand;

use attributes::sealed_attributes;
pub use attributes::{
    Attr, cdo_attribute_get, cdo_attribute_set, cdo_attribute_type, cdo_attributes,
    cdo_set_user_memory,
};
pub use demand::{
    Bytes, cdo_access, cdo_bytes, cdo_demand, cdo_demand_interruptible, cdo_demand_within,
    cdo_require,
};
pub(crate) use demand::{adopt_demanded, begin_demand, end_demand};

use std::sync::{Arc, Mutex};

use fabric::Buffer;
use pool::CdoPhase;
use pool::attr::{self, Attributes};
use pool::proto::CdoId;

use crate::cells::{CdoCell, CdoState};
use crate::handles::Cdo;
use crate::instance::{Instance, instance};
use crate::status::{Error, Result, Status};

/// `.maestro.core.cdo.raw-ptr`: the CDO's data pointer (set with
/// [`cdo_set_user_memory`]; read with [`cdo_attribute_get`] as [`Attr::RawPtr`]).
pub const RAW_PTR: &str = ".maestro.core.cdo.raw-ptr";

fn cell(inst: &Instance, cdo: Cdo) -> Result<Arc<CdoCell>> {
    inst.cdos.get(cdo.0)
}

/// Declares a CDO named `name` (`mstro_cdo_declare`) and returns its handle.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for an empty or over-long name; joining errors
/// on first use ([`Status::NoPm`], ...).
pub fn cdo_declare(name: &str) -> Result<Cdo> {
    let inst = instance()?;
    if name.is_empty() || name.len() > pool::MAX_NAME {
        return Err(Error::invarg(format!(
            "a CDO name has 1 to {} bytes, not {}",
            pool::MAX_NAME,
            name.len()
        )));
    }
    let session = inst.session()?;
    let id = session
        .client()
        .declare(name)
        .map_err(|e| Error::from(e).context(format!("declaring CDO {name:?}")))?;
    Ok(file(&inst, name, CdoState::declared(id)))
}

impl CdoState {
    /// A CDO just declared as `id`.
    fn declared(id: CdoId) -> CdoState {
        CdoState {
            id,
            attrs: Attributes::new(),
            lent: None,
            local_size: None,
            data: None,
            demanded: None,
            in_flight: false,
        }
    }
}

/// Files a CDO in the instance's registry; its new handle.
fn file(inst: &Instance, name: &str, state: CdoState) -> Cdo {
    let cell = CdoCell {
        name: name.to_string(),
        state: Mutex::new(state),
    };
    Cdo(inst.cdos.insert(cell))
}

/// The CDO's name.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for a bad handle.
pub fn cdo_name(cdo: Cdo) -> Result<String> {
    Ok(cell(&*instance()?, cdo)?.name.clone())
}

/// Runs a pool operation on the CDO with its state locked.
/// How far the CDO went as a producer's, as the pool manager confirmed it: the client's
/// protocol core keeps the one record of it (declared, sealed, offered).
pub(crate) fn phase(client: &pool::Client, st: &CdoState) -> CdoPhase {
    client.phase(st.id).unwrap_or(CdoPhase::Declared)
}

fn with_cdo<T>(
    cdo: Cdo,
    op: &str,
    f: impl FnOnce(&pool::Client, &str, &mut CdoState) -> Result<T>,
) -> Result<T> {
    let inst = instance()?;
    let c = cell(&inst, cdo)?;
    let session = inst.session()?;
    let mut st = c.lock();
    f(session.client(), &c.name, &mut st)
        .map_err(|e| e.context(format!("{op} of CDO {:?}", c.name)))
}

/// Seals the CDO (`mstro_cdo_seal`): its attributes are checked against the schemas
/// (defaults filled in) and frozen.
///
/// # Errors
/// [`Status::Invarg`] for attributes the schemas refuse; [`Status::Invstate`] unless
/// declared and not sealed; connection errors.
pub fn cdo_seal(cdo: Cdo) -> Result<()> {
    with_cdo(cdo, "seal", |client, _, st| {
        if phase(client, st) != CdoPhase::Declared {
            return Err(Error::new(Status::Invstate, "sealed already"));
        }
        client.seal(st.id, sealed_attributes(st)?)?;
        Ok(())
    })
}

/// Offers the sealed CDO (`mstro_cdo_offer`): its bytes are the memory lent with
/// [`cdo_set_user_memory`] (registered with the fabric in place, no copy), or none (a
/// 0-byte CDO, a synchronisation point).
///
/// # Errors
/// [`Status::Invstate`] unless sealed; [`Status::Invarg`] for lent memory without a size;
/// registration and connection errors.
pub fn cdo_offer(cdo: Cdo) -> Result<()> {
    with_cdo(cdo, "offer", |client, _, st| {
        if phase(client, st) == CdoPhase::Declared {
            return Err(Error::new(
                Status::Invstate,
                "the CDO is not sealed: call seal before offer",
            ));
        }
        client.offer(st.id, offered_bytes(st)?)?;
        Ok(())
    })
}

/// What an offer of the CDO makes readable: the memory lent to it (in place), or nothing.
fn offered_bytes(st: &CdoState) -> Result<Buffer> {
    Ok(match &st.lent {
        Some(lent) => {
            let len = st.local_size.ok_or_else(|| {
                Error::invarg(format!(
                    "raw-ptr is set but {} is not: set the buffer's size",
                    attr::LOCAL_SIZE
                ))
            })?;
            let len = usize::try_from(len)
                .map_err(|_| Error::invarg(format!("{len} bytes do not fit in memory")))?;
            // SAFETY: the caller of `cdo_set_user_memory` keeps `len` bytes at `ptr`
            // valid and unwritten until withdraw returns.
            unsafe { crate::memory::lend(lent.ptr, len) }
        }
        None => Buffer::new(0)?,
    })
}

/// A member's part of a group's offer (see `crate::group`): its id, the attributes to seal
/// it with (`None`: sealed already) and its bytes.
///
/// # Errors
/// [`Status::Invstate`] for a CDO offered or demanded already; as [`cdo_seal`] and
/// [`cdo_offer`] otherwise.
pub(crate) fn group_offer_part(cdo: Cdo) -> Result<(CdoId, Option<Attributes>, Buffer)> {
    with_cdo(cdo, "group offer", |client, _, st| {
        let phase = phase(client, st);
        if phase == CdoPhase::Offered || st.demanded.is_some() {
            return Err(Error::new(
                Status::Invstate,
                "a member is offered or demanded already: a group offers CDOs only declared or sealed",
            ));
        }
        let attrs = (phase == CdoPhase::Declared)
            .then(|| sealed_attributes(st))
            .transpose()?;
        Ok((st.id, attrs, offered_bytes(st)?))
    })
}

/// The CDO's id in the pool.
pub(crate) fn cdo_id(cdo: Cdo) -> Result<CdoId> {
    with_cdo(cdo, "group", |_, _, st| Ok(st.id))
}

/// Cancels a require (`mstro_cdo_retract`).
///
/// # Errors
/// [`Status::Invstate`] if not required or already moving; connection errors.
pub fn cdo_retract(cdo: Cdo) -> Result<()> {
    with_cdo(cdo, "retract", |client, _, st| Ok(client.retract(st.id)?))
}

/// Takes the offer back (`mstro_cdo_withdraw`), once no transfer reads from it and no
/// consumer in this process holds it: then lent memory is the program's again.
///
/// # Errors
/// [`Status::Invstate`] unless offered; [`Status::Timeout`]; connection errors.
pub fn cdo_withdraw(cdo: Cdo) -> Result<()> {
    with_cdo(cdo, "withdraw", |client, _, st| {
        client.withdraw(st.id)?;
        match &st.lent {
            Some(lent) => crate::memory::withdrawn(lent.ptr),
            None => Ok(()),
        }
    })
}

/// Disposes of the CDO (`mstro_cdo_dispose`): the handle is invalid afterwards, its
/// library memory freed and lent memory the program's again.
///
/// # Errors
/// [`Status::Invstate`] while offered (withdraw first); [`Status::Invarg`] for a bad
/// handle; connection errors (the handle stays valid then).
pub fn cdo_dispose(cdo: Cdo) -> Result<()> {
    let inst = instance()?;
    with_cdo(cdo, "dispose", |client, _, st| {
        if phase(client, st) == CdoPhase::Offered {
            return Err(Error::new(
                Status::Invstate,
                "the CDO is offered: withdraw it before dispose",
            ));
        }
        if st.in_flight {
            return Err(Error::new(
                Status::Invstate,
                "an asynchronous demand of it is in flight: wait for its request (or dispose it) before dispose",
            ));
        }
        client.dispose(st.id)?;
        st.data = None;
        Ok(())
    })?;
    inst.cdos.remove(cdo.0).map(drop)
}
