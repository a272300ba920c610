//! A CDO's attributes: staged until seal, typed by the schemas, read back (with the
//! built-in ones), and the memory a program lends to a CDO.

use std::any::Any;

use pool::attr;
use pool::attr::{AttrValue, Attributes};
use pool::schema::AttrType;

use super::{RAW_PTR, cell};
use crate::cells::{CdoState, Lent};
use crate::handles::Cdo;
use crate::instance::instance;
use crate::status::{Error, Result, Status};

/// A value read back with [`cdo_attribute_get`].
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// A typed value.
    Value(AttrValue),
    /// The CDO's data: the lent memory or the demanded bytes (`.maestro.core.cdo.raw-ptr`).
    RawPtr(*const u8, usize),
}

// SAFETY: `RawPtr` carries an address and a length for the caller, who reads through it
// under `cdo_access`'s contract; nothing here dereferences it.
unsafe impl Send for Attr {}

/// The attribute's schema type, as values for it must be given (`.maestro.core.cdo.raw-ptr`
/// is not typed by a schema: `None`).
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Noent`] for a key no schema declares (unless
/// `MSTRO_DROP_UNKNOWN_ATTRIBUTES`, then `Ok(None)` and setting it does nothing).
pub fn cdo_attribute_type(key: &str) -> Result<Option<AttrType>> {
    let inst = instance()?;
    if key == RAW_PTR {
        return Ok(None);
    }
    match inst.settings.schemas.spec(key) {
        Some(spec) => Ok(Some(spec.ty)),
        None if inst.settings.schemas.drops_unknown() => Ok(None),
        None => Err(unknown_key(key)),
    }
}

fn unknown_key(key: &str) -> Error {
    let hint = if key.starts_with('.') {
        "declare it in a schema (MSTRO_SCHEMA_PATH, MSTRO_SCHEMA_LIST) or set MSTRO_DROP_UNKNOWN_ATTRIBUTES=1"
    } else {
        "keys are absolute: they start with the namespace, e.g. .maestro.core.cdo.scope.local-size"
    };
    Error::new(
        Status::Noent,
        format!("attribute {key:?} is in no schema; {hint}"),
    )
}

/// Stages attribute `key` = `value` (`mstro_cdo_attribute_set`), checked against the
/// schemas' type now and completely at seal. `.maestro.core.cdo.scope.local-size` (int or
/// uint, not negative) is the length of the memory lent with [`cdo_set_user_memory`].
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for a bad handle or a value of the wrong type;
/// [`Status::Noent`] for a key in no schema; [`Status::Invstate`] after seal (and, for a
/// consumer, after demand).
pub fn cdo_attribute_set(cdo: Cdo, key: &str, value: AttrValue) -> Result<()> {
    let inst = instance()?;
    let session = inst.session()?;
    let c = cell(&inst, cdo)?;
    let mut st = c.lock();
    if key == attr::LOCAL_SIZE {
        let size = match value {
            AttrValue::Int(n) if n >= 0 => n as u64,
            AttrValue::Uint(n) => n,
            other => {
                return Err(Error::invarg(format!(
                    "{key} is a size in bytes (a non-negative integer), not {other:?}"
                )));
            }
        };
        if frozen_now(&session, &st) {
            return Err(frozen(&c.name, key));
        }
        st.local_size = Some(size);
        return Ok(());
    }
    let Some(ty) = cdo_attribute_type(key)? else {
        tracing::debug!("dropping attribute {key}: in no schema");
        return Ok(());
    };
    if frozen_now(&session, &st) {
        return Err(frozen(&c.name, key));
    }
    let got = pool::schema::AttrType::of(&value);
    if got != ty {
        return Err(Error::invarg(format!(
            "attribute {key} is {ty} in the schema; the value given is {got}"
        )));
    }
    st.attrs.insert(key.to_string(), value);
    Ok(())
}

/// Whether the CDO's attributes are frozen: sealed (as the pool manager confirmed it) or
/// demanded.
fn frozen_now(session: &crate::session::Session, st: &CdoState) -> bool {
    st.demanded.is_some() || super::phase(session.client(), st) != pool::CdoPhase::Declared
}

fn frozen(name: &str, key: &str) -> Error {
    Error::new(
        Status::Invstate,
        format!("CDO {name:?} is sealed or demanded: its attributes are frozen ({key})"),
    )
}

/// Lends `[ptr, ptr+len)` to the CDO (`.maestro.core.cdo.raw-ptr` and
/// `scope.local-size`): a producer's offer serves reads from it in place (no copy) until
/// [`cdo_withdraw`](crate::cdo_withdraw) returns; a consumer's [`cdo_demand`](crate::cdo_demand) writes the bytes into it. `keep`
/// is dropped when the memory is no longer lent (dispose, or a new call).
///
/// `writable` says whether the memory may be written: a demand into read-only memory is
/// refused.
///
/// # Safety
/// The memory must stay valid until the CDO is disposed or lent other memory; between
/// offer and the return of withdraw the program must not write to it; between demand and
/// its return the program must not touch it.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for a bad handle or a NULL pointer with a
/// non-zero length; [`Status::Invstate`] after seal or demand.
pub unsafe fn cdo_set_user_memory(
    cdo: Cdo,
    ptr: *mut u8,
    len: Option<usize>,
    writable: bool,
    keep: Option<Box<dyn Any + Send>>,
) -> Result<()> {
    let inst = instance()?;
    let session = inst.session()?;
    let c = cell(&inst, cdo)?;
    let mut st = c.lock();
    if frozen_now(&session, &st) {
        return Err(frozen(&c.name, RAW_PTR));
    }
    if ptr.is_null() && len.is_some_and(|l| l > 0) {
        return Err(Error::invarg(format!(
            "CDO {:?}: a NULL raw-ptr with {} bytes",
            c.name,
            len.unwrap_or(0)
        )));
    }
    if let Some(len) = len {
        st.local_size = Some(len as u64);
    }
    st.lent = Some(Lent {
        ptr,
        writable,
        _keep: keep,
    });
    Ok(())
}

/// Reads attribute `key` back (`mstro_cdo_attribute_get`): staged values before seal, the
/// sealed attributes after a demand (with the built-in name and size);
/// `.maestro.core.cdo.name` is always there, `.maestro.core.cdo.raw-ptr` is
/// [`Attr::RawPtr`].
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for a bad handle; [`Status::Noent`] if the
/// attribute is not set.
pub fn cdo_attribute_get(cdo: Cdo, key: &str) -> Result<Attr> {
    let inst = instance()?;
    let c = cell(&inst, cdo)?;
    let st = c.lock();
    let missing = || {
        Error::new(
            Status::Noent,
            format!("CDO {:?} has no attribute {key}", c.name),
        )
    };
    match key {
        RAW_PTR => {
            if let Some(data) = &st.data {
                return Ok(Attr::RawPtr(data.as_ptr(), data.len()));
            }
            let lent = st.lent.as_ref().ok_or_else(missing)?;
            let len = st.demanded.or(st.local_size).unwrap_or(0) as usize;
            Ok(Attr::RawPtr(lent.ptr, len))
        }
        attr::NAME => Ok(Attr::Value(AttrValue::Str(c.name.clone()))),
        attr::LOCAL_SIZE => st
            .demanded
            .or(st.local_size)
            .map(|n| Attr::Value(AttrValue::Uint(n)))
            .ok_or_else(missing),
        _ => st
            .attrs
            .get(key)
            .cloned()
            .map(Attr::Value)
            .ok_or_else(missing),
    }
}

/// Every attribute of the CDO (`mstro_cdo_attributes_print`), with the name and, when
/// known, the size.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for a bad handle.
pub fn cdo_attributes(cdo: Cdo) -> Result<Attributes> {
    let inst = instance()?;
    let c = cell(&inst, cdo)?;
    let st = c.lock();
    let mut all = st.attrs.clone();
    all.insert(attr::NAME.into(), AttrValue::Str(c.name.clone()));
    if let Some(n) = st.demanded.or(st.local_size) {
        all.insert(attr::LOCAL_SIZE.into(), AttrValue::Uint(n));
    }
    Ok(all)
}

/// The attributes a CDO is sealed with: those staged, and where the program asks for
/// end-to-end integrity, the lent bytes' checksum.
pub(super) fn sealed_attributes(st: &CdoState) -> Result<Attributes> {
    let mut attrs = st.attrs.clone();
    if let (Some(lent), Some(len)) = (&st.lent, st.local_size)
        && matches!(attrs.get(attr::INTEGRITY), Some(AttrValue::Bool(true)))
    {
        let len = usize::try_from(len)
            .map_err(|_| Error::invarg(format!("{len} bytes do not fit in memory")))?;
        let bytes: &[u8] = if len == 0 || lent.ptr.is_null() {
            &[]
        } else {
            // SAFETY: the caller of `cdo_set_user_memory` keeps `len` bytes at `ptr`
            // valid and unwritten until withdraw returns (raw-ptr's contract).
            unsafe { std::slice::from_raw_parts(lent.ptr.cast_const(), len) }
        };
        attr::add_checksum(&mut attrs, bytes);
    }
    Ok(attrs)
}
