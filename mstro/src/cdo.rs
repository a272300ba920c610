//! CDO handles: a name, attributes staged before seal, the producer's lent memory or the
//! consumer's landing buffer, and after a demand the bytes and the attributes the CDO was
//! sealed with. Operations go to the pool manager through the instance's session.

use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabric::Buffer;
use pool::CdoData;
use pool::attr::{self, AttrValue, Attributes};
use pool::proto::CdoId;
use pool::schema::AttrType;

use crate::cells::{Background, CdoCell, CdoState, Lent};
use crate::handles::Cdo;
use crate::instance::{Instance, instance};
use crate::status::{Error, Result, Status};

/// `.maestro.core.cdo.raw-ptr`: the CDO's data pointer (set with
/// [`cdo_set_user_memory`]; read with [`cdo_attribute_get`] as [`Attr::RawPtr`]).
pub const RAW_PTR: &str = ".maestro.core.cdo.raw-ptr";

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

fn cell(inst: &Instance, cdo: Cdo) -> Result<Arc<CdoCell>> {
    inst.cdos.get(cdo.0)
}

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
            sealed: false,
            offered: false,
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
        if st.sealed || st.demanded.is_some() {
            return Err(frozen(&c.name, key));
        }
        st.local_size = Some(size);
        return Ok(());
    }
    let Some(ty) = cdo_attribute_type(key)? else {
        tracing::debug!("dropping attribute {key}: in no schema");
        return Ok(());
    };
    if st.sealed || st.demanded.is_some() {
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

fn frozen(name: &str, key: &str) -> Error {
    Error::new(
        Status::Invstate,
        format!("CDO {name:?} is sealed or demanded: its attributes are frozen ({key})"),
    )
}

/// Lends `[ptr, ptr+len)` to the CDO (`.maestro.core.cdo.raw-ptr` and
/// `scope.local-size`): a producer's offer serves reads from it in place (no copy) until
/// [`cdo_withdraw`] returns; a consumer's [`cdo_demand`] writes the bytes into it. `keep`
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
    let c = cell(&inst, cdo)?;
    let mut st = c.lock();
    if st.sealed || st.demanded.is_some() {
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

/// Runs a pool operation on the CDO with its state locked.
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
        if st.sealed {
            return Err(Error::new(Status::Invstate, "sealed already"));
        }
        client.seal(st.id, sealed_attributes(st)?)?;
        st.sealed = true;
        Ok(())
    })
}

/// The attributes a CDO is sealed with: those staged, and where the program asks for
/// end-to-end integrity, the lent bytes' checksum.
fn sealed_attributes(st: &CdoState) -> Result<Attributes> {
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

/// Offers the sealed CDO (`mstro_cdo_offer`): its bytes are the memory lent with
/// [`cdo_set_user_memory`] (registered with the fabric in place, no copy), or none (a
/// 0-byte CDO, a synchronisation point).
///
/// # Errors
/// [`Status::Invstate`] unless sealed; [`Status::Invarg`] for lent memory without a size;
/// registration and connection errors.
pub fn cdo_offer(cdo: Cdo) -> Result<()> {
    with_cdo(cdo, "offer", |client, _, st| {
        if !st.sealed {
            return Err(Error::new(
                Status::Invstate,
                "the CDO is not sealed: call seal before offer",
            ));
        }
        client.offer(st.id, offered_bytes(st)?)?;
        st.offered = true;
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
    with_cdo(cdo, "group offer", |_, _, st| {
        if st.offered || st.demanded.is_some() {
            return Err(Error::new(
                Status::Invstate,
                "a member is offered or demanded already: a group offers CDOs only declared or sealed",
            ));
        }
        let attrs = (!st.sealed).then(|| sealed_attributes(st)).transpose()?;
        Ok((st.id, attrs, offered_bytes(st)?))
    })
}

/// Marks a group's members offered (`true`: after its offer) or withdrawn (`false`).
pub(crate) fn set_offered(cdo: Cdo, offered: bool) -> Result<()> {
    with_cdo(cdo, "group", |_, _, st| {
        st.sealed = true;
        st.offered = offered;
        Ok(())
    })
}

/// The CDO's id in the pool.
pub(crate) fn cdo_id(cdo: Cdo) -> Result<CdoId> {
    with_cdo(cdo, "group", |_, _, st| Ok(st.id))
}

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
/// it here as soon as it is offered.
///
/// # Errors
/// [`Status::Invstate`] unless declared; connection errors.
pub fn cdo_require(cdo: Cdo) -> Result<()> {
    with_cdo(cdo, "require", |client, _, st| Ok(client.require(st.id)?))
}

/// Waits until the CDO is here (`mstro_cdo_demand`), at most `MSTRO_TIMEOUT`.
///
/// # Errors
/// As [`cdo_demand_within`].
pub fn cdo_demand(cdo: Cdo) -> Result<()> {
    cdo_demand_within(cdo, None)
}

/// Waits until the CDO is here, at most `limit` (or `MSTRO_TIMEOUT`): its bytes land in the
/// memory lent with [`cdo_set_user_memory`] (one copy; it must be large enough) or stay in
/// library memory ([`cdo_access`]); the attributes become those it was sealed with.
///
/// # Errors
/// [`Status::Timeout`] if nobody offers it in time (the demand stands: demand again or
/// retract); [`Status::Noent`] if its providers vanished; [`Status::Invarg`] if the lent
/// memory is too small; [`Status::Invstate`] if demanded already; connection errors.
pub fn cdo_demand_within(cdo: Cdo, limit: Option<Duration>) -> Result<()> {
    demand(cdo, limit, None)
}

/// How often an interruptible demand asks whether it is interrupted.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

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

/// How a demand's wait ended.
enum Waited<T> {
    Done(T),
    /// Done, but interrupted while its transfer ran.
    LateInterrupt(T),
    Interrupted,
    TimedOut,
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
        let demand = || async {
            match into {
                Some(dst) => client.as_async().demand_into(id, dst).await,
                None => client.as_async().demand(id).await,
            }
        };
        // In a local pool only this process's threads can offer: a demand that waits says
        // so after a second, once.
        let local = instance()
            .ok()
            .and_then(|i| i.session().ok().map(|s| s.found().clone()))
            .is_some_and(|f| matches!(f, crate::session::Found::LocalPool));
        // Built inside the runtime: the timers need its context.
        let waited = client.block_on(async {
            let wait = demand();
            tokio::pin!(wait);
            let now = tokio::time::Instant::now();
            let deadline = limit.map(|l| now + l);
            let mut notice = local.then(|| now + Duration::from_secs(1));
            let until = |at: Option<tokio::time::Instant>| async move {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            loop {
                tokio::select! {
                    r = &mut wait => return Waited::Done(r),
                    () = until(deadline) => return Waited::TimedOut,
                    () = until(notice) => {
                        notice = None;
                        tracing::warn!(
                            "demand of {name:?} waits in a local pool: only threads of this process can offer it (set MSTRO_POOL_MANAGER_INFO or run under a PMIx launcher to reach other processes)"
                        );
                    }
                    () = tokio::time::sleep(INTERRUPT_POLL), if interrupted.is_some() => {
                        if interrupted.is_some_and(|stop| stop()) {
                            if client.as_async().retract(id).await.is_ok() {
                                return Waited::Interrupted;
                            }
                            // Its transfer is under way: it lands, then the call says so.
                            return Waited::LateInterrupt(wait.await);
                        }
                    }
                }
            }
        });
        let (got, late) = match waited {
            Waited::Done(r) => (r, false),
            Waited::LateInterrupt(r) => (r, true),
            Waited::Interrupted => {
                return Err(Error::new(
                    Status::Fail,
                    format!(
                        "interrupted: the demand of {name:?} was retracted; demand again to wait for it"
                    ),
                ));
            }
            Waited::TimedOut => {
                return Err(Error::new(
                    Status::Timeout,
                    format!(
                        "nobody offered {name:?} within {:?}; the demand stands",
                        limit.unwrap_or_default()
                    ),
                ));
            }
        };
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
        // during the demand (contract of `cdo_set_user_memory`) nor frees it before the
        // demand ended (settled or its request disposed).
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
/// kept in library memory.
///
/// # Errors
/// [`Status::Invarg`] when the lent memory is read-only or too small (the bytes are then
/// kept in library memory).
fn settle(st: &mut CdoState, (data, attrs): (pool::CdoData, Attributes)) -> Result<()> {
    let len = data.len();
    st.demanded = Some(len as u64);
    st.attrs = attrs;
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
        st.offered = false;
        match &st.lent {
            Some(lent) => crate::memory::withdrawn(lent.ptr),
            None => Ok(()),
        }
    })
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
// SAFETY: as above; only reads go through `&Bytes`.
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

/// Disposes of the CDO (`mstro_cdo_dispose`): the handle is invalid afterwards, its
/// library memory freed and lent memory the program's again.
///
/// # Errors
/// [`Status::Invstate`] while offered (withdraw first); [`Status::Invarg`] for a bad
/// handle; connection errors (the handle stays valid then).
pub fn cdo_dispose(cdo: Cdo) -> Result<()> {
    let inst = instance()?;
    with_cdo(cdo, "dispose", |client, _, st| {
        if st.offered {
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
