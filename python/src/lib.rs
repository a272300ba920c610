//! `maestro_core._native`: the Python module over the [`mstro`] layer (not over the C ABI).
//! `maestro_core/__init__.py` re-exports it and adds what is easier in Python (memoryviews
//! over demanded bytes, context managers).
//!
//! Every failure raises `maestro_core.MaestroError` with `.status` (an `MSTRO_*` value) and
//! `.message`; nothing crashes the interpreter. Every call into the layer runs with the GIL
//! released ([`Python::detach`]), so blocking calls (demand, waits, join) let other Python
//! threads run, and no lock of the layer is ever waited for while holding the GIL.
//!
//! The buffer protocol: PyO3 offers `Py_buffer` under abi3 only from CPython 3.11 on, when it
//! joined the stable ABI; the functions and the struct layout are the same since CPython
//! 3.3, so this module declares them itself (the `buffer` module) and runs on 3.9 and later.

mod buffer;
mod events;
mod group;
mod request;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList};

use mstro::{Attr, Cdo as CdoHandle, Status};
use mstro::{AttrType, AttrValue, attr};

pyo3::create_exception!(
    maestro_core,
    MaestroError,
    PyException,
    "A Maestro call failed: `.status` is the MSTRO_* status, `.message` says what was wrong and what to do."
);

/// Raises `MaestroError` for `e`.
fn raise(e: mstro::Error) -> PyErr {
    let err = MaestroError::new_err(e.message.clone());
    Python::attach(|py| {
        let v = err.value(py);
        let _ = v.setattr("status", e.status as i32);
        let _ = v.setattr("message", e.message.as_str());
    });
    err
}

/// Runs `f` with the GIL released, raising its error.
fn call<T: Send>(py: Python<'_>, f: impl FnOnce() -> mstro::Result<T> + Send) -> PyResult<T> {
    py.detach(f).map_err(raise)
}

/// A CDO handle (`mstro_cdo`).
#[pyclass(frozen, module = "maestro_core")]
pub struct Cdo {
    handle: u64,
    #[pyo3(get)]
    /// The name it was declared with.
    name: String,
}

#[pymethods]
impl Cdo {
    fn __repr__(&self) -> String {
        format!("<maestro_core.Cdo {:?}>", self.name)
    }
}

impl Cdo {
    fn h(&self) -> CdoHandle {
        CdoHandle(self.handle)
    }
}

/// A selector handle (`mstro_cdo_selector`).
#[pyclass(frozen, module = "maestro_core")]
pub struct Selector {
    handle: u64,
}

/// A subscription handle (`mstro_subscription`).
#[pyclass(frozen, module = "maestro_core")]
pub struct Subscription {
    handle: u64,
}

/// Starts Maestro in this process (`mstro_init`); `None` names come from
/// `MSTRO_WORKFLOW_NAME` / `MSTRO_COMPONENT_NAME`.
#[pyfunction]
#[pyo3(signature = (workflow=None, component=None, index=0))]
fn mstro_init(
    py: Python<'_>,
    workflow: Option<String>,
    component: Option<String>,
    index: i64,
) -> PyResult<()> {
    call(py, || {
        mstro::init(workflow.as_deref(), component.as_deref(), index)
    })
}

/// Ends Maestro in this process (`mstro_finalize`): leaves the pool, forgets every handle.
#[pyfunction]
fn mstro_finalize(py: Python<'_>) -> PyResult<()> {
    call(py, mstro::finalize)
}

/// This library's version.
#[pyfunction]
fn mstro_version() -> &'static str {
    mstro::version()
}

/// Nanoseconds on a monotonic clock.
#[pyfunction]
fn mstro_clock() -> u64 {
    mstro::clock()
}

/// The description of `status`.
#[pyfunction]
fn mstro_status_description(status: i32) -> &'static str {
    Status::from_code(status).map_or("unknown status", Status::description)
}

/// Declares a CDO (`mstro_cdo_declare`); `attributes` must be None (`MSTRO_ATTR_DEFAULT`).
#[pyfunction]
#[pyo3(signature = (name, attributes=None))]
fn mstro_cdo_declare(py: Python<'_>, name: String, attributes: Option<Py<PyAny>>) -> PyResult<Cdo> {
    if attributes.is_some() {
        return Err(raise(mstro::Error::invarg(
            "declare takes None for the attributes; set them with mstro_cdo_attribute_set",
        )));
    }
    let h = call(py, || mstro::cdo_declare(&name))?;
    Ok(Cdo { handle: h.0, name })
}

macro_rules! cdo_op {
    ($py:ident: $(#[$doc:meta])* $name:ident => $f:path) => {
        $(#[$doc])*
        #[pyfunction]
        fn $name(py: Python<'_>, cdo: &Cdo) -> PyResult<()> {
            let h = cdo.h();
            call(py, move || $f(h))
        }
    };
}

cdo_op!(py: /// Freezes the attributes, checked against the schemas (`mstro_cdo_seal`).
    mstro_cdo_seal => mstro::cdo_seal);
cdo_op!(py: /// Offers the CDO; a raw-ptr buffer is offered in place (`mstro_cdo_offer`).
    mstro_cdo_offer => mstro::cdo_offer);
cdo_op!(py: /// Declares the intent to demand (`mstro_cdo_require`).
    mstro_cdo_require => mstro::cdo_require);
/// Waits until the CDO is here, the GIL released (`mstro_cdo_demand`). Ctrl-C (any
/// signal whose Python handler raises) ends the wait within 50 ms: the demand is retracted
/// and the handler's exception (`KeyboardInterrupt`) is raised.
#[pyfunction]
fn mstro_cdo_demand(py: Python<'_>, cdo: &Cdo) -> PyResult<()> {
    let h = cdo.h();
    let raised = std::sync::Mutex::new(None);
    let result = py.detach(|| mstro::cdo_demand_interruptible(h, &|| interrupted(&raised)));
    interruption(raised)?;
    result.map_err(raise)
}

/// Asks Python whether a signal handler raised (Ctrl-C: `KeyboardInterrupt`), keeping the
/// exception in `raised` for the caller to raise once the call returned.
fn interrupted(raised: &std::sync::Mutex<Option<PyErr>>) -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            *raised
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
            true
        }
    })
}

/// The exception a signal handler raised during a call, if one did.
fn interruption(raised: std::sync::Mutex<Option<PyErr>>) -> PyResult<()> {
    match raised
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
cdo_op!(py: /// Cancels a require (`mstro_cdo_retract`).
    mstro_cdo_retract => mstro::cdo_retract);
cdo_op!(py: /// Takes the offer back; the buffer is the program's again (`mstro_cdo_withdraw`).
    mstro_cdo_withdraw => mstro::cdo_withdraw);
cdo_op!(py: /// Forgets the CDO (`mstro_cdo_dispose`).
    mstro_cdo_dispose => mstro::cdo_dispose);

/// The attribute value for `key` of schema type `ty`, from a Python object.
fn value_of(key: &str, ty: AttrType, v: &Bound<'_, PyAny>) -> PyResult<AttrValue> {
    let wrong = |what: &str| {
        raise(mstro::Error::invarg(format!(
            "attribute {key} is {ty} in the schema: give {what}, not {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        )))
    };
    Ok(match ty {
        AttrType::Bool => {
            if !v.is_instance_of::<PyBool>() {
                return Err(wrong("a bool"));
            }
            AttrValue::Bool(v.extract().map_err(|_| wrong("a bool"))?)
        }
        AttrType::Int => AttrValue::Int(v.extract().map_err(|_| wrong("an int"))?),
        AttrType::Uint => AttrValue::Uint(v.extract().map_err(|_| wrong("an int >= 0"))?),
        AttrType::Double => AttrValue::Double(v.extract().map_err(|_| wrong("a float"))?),
        AttrType::Str => AttrValue::Str(v.extract().map_err(|_| wrong("a str"))?),
        AttrType::Timestamp => {
            let ns: i64 = if v.hasattr("timestamp")? {
                let secs: f64 = v.call_method0("timestamp")?.extract()?;
                (secs * 1e9).round() as i64
            } else {
                v.extract()
                    .map_err(|_| wrong("nanoseconds since the epoch (int) or a datetime"))?
            };
            AttrValue::Timestamp(i128::from(ns))
        }
        AttrType::Blob => AttrValue::Blob(v.extract().map_err(|_| wrong("bytes"))?),
    })
}

/// Sets attribute `key` (`mstro_cdo_attribute_set`), typed by the schemas. For
/// `MSTRO_ATTR_CORE_CDO_RAW_PTR` the value is any object with the buffer protocol (bytes,
/// bytearray, memoryview, a NumPy array in C or Fortran order): its memory is offered in
/// place, no copy, and the object is kept alive by the CDO until dispose; a demand writes
/// into it (it must be writable then). An array of two or more dimensions also sets the
/// layout attributes (order, element size, dimensions): a consumer's array of the other
/// order gets the producer's array in its own order.
#[pyfunction]
fn mstro_cdo_attribute_set(
    py: Python<'_>,
    cdo: &Cdo,
    key: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let h = cdo.h();
    if key == mstro::RAW_PTR {
        let held = buffer::Held::get(value)?;
        let (addr, len, writable) = (held.ptr() as usize, held.len(), held.writable());
        let layout = held.layout();
        let keep: Box<dyn std::any::Any + Send> = Box::new(held);
        // SAFETY: the buffer stays valid and its exporter locked (no resize) while `keep`
        // lives, which the CDO holds until it is disposed or lent other memory.
        call(py, move || unsafe {
            mstro::cdo_set_user_memory(h, addr as *mut u8, Some(len), writable, Some(keep))
        })?;
        // An array of 2 or more dimensions says its layout: a producer's travels with its
        // offer, and a consumer's array gets the bytes in its own order.
        if let Some(l) = layout {
            let mut attrs = attr::Attributes::new();
            l.to_attributes(&mut attrs);
            return call(py, move || {
                attrs
                    .into_iter()
                    .try_for_each(|(k, v)| mstro::cdo_attribute_set(h, &k, v))
            });
        }
        return Ok(());
    }
    if key == attr::LOCAL_SIZE {
        let n: u64 = value.extract().map_err(|_| {
            raise(mstro::Error::invarg(format!(
                "{key} is a size in bytes (an int >= 0)"
            )))
        })?;
        return call(py, move || {
            mstro::cdo_attribute_set(h, key, AttrValue::Uint(n))
        });
    }
    let key_owned = key.to_string();
    let Some(ty) = call(py, move || mstro::cdo_attribute_type(&key_owned))? else {
        return Ok(());
    };
    let v = value_of(key, ty, value)?;
    call(py, move || mstro::cdo_attribute_set(h, key, v))
}

fn to_python(py: Python<'_>, v: &AttrValue) -> PyResult<Py<PyAny>> {
    Ok(match v {
        AttrValue::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
        AttrValue::Uint(n) => n.into_pyobject(py)?.into_any().unbind(),
        AttrValue::Double(d) => d.into_pyobject(py)?.into_any().unbind(),
        AttrValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        AttrValue::Str(s) => s.into_pyobject(py)?.into_any().unbind(),
        AttrValue::Timestamp(ns) => ns.into_pyobject(py)?.into_any().unbind(),
        AttrValue::Blob(b) => PyBytes::new(py, b).into_any().unbind(),
    })
}

/// Reads attribute `key` back (`mstro_cdo_attribute_get`) as a Python value: int, float,
/// bool, str, bytes, a timestamp as int nanoseconds; `MSTRO_ATTR_CORE_CDO_RAW_PTR` gives
/// the data's address (an int). `valtype` is accepted for Maestro Core's signature and
/// ignored.
#[pyfunction]
#[pyo3(signature = (cdo, key, valtype=None))]
fn mstro_cdo_attribute_get(
    py: Python<'_>,
    cdo: &Cdo,
    key: &str,
    valtype: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    drop(valtype);
    let h = cdo.h();
    match call(py, move || mstro::cdo_attribute_get(h, key))? {
        Attr::RawPtr(p, _) => Ok((p as usize).into_pyobject(py)?.into_any().unbind()),
        Attr::Value(v) => to_python(py, &v),
    }
}

/// Every attribute of the CDO as a dict (with name and, when known, size).
#[pyfunction]
fn mstro_cdo_attributes<'py>(py: Python<'py>, cdo: &Cdo) -> PyResult<Bound<'py, PyDict>> {
    let h = cdo.h();
    let all = call(py, move || mstro::cdo_attributes(h))?;
    let d = PyDict::new(py);
    for (k, v) in &all {
        d.set_item(k, to_python(py, v)?)?;
    }
    Ok(d)
}

/// Prints every attribute of the CDO, one `key = value` per line
/// (`mstro_cdo_attributes_print`).
#[pyfunction]
fn mstro_cdo_attributes_print(py: Python<'_>, cdo: &Cdo) -> PyResult<()> {
    let h = cdo.h();
    let all = call(py, move || mstro::cdo_attributes(h))?;
    println!("CDO {:?}:", cdo.name);
    for (k, v) in &all {
        println!("  {k} = {}", to_python(py, v)?.bind(py).repr()?);
    }
    Ok(())
}

/// The demanded bytes, kept alive as long as the returned keeper: `(address, length,
/// keeper)`. `maestro_core.mstro_cdo_access_ptr` turns it into a memoryview.
#[pyfunction]
fn _mstro_cdo_access(py: Python<'_>, cdo: &Cdo) -> PyResult<(usize, usize, DemandedBytes)> {
    let h = cdo.h();
    let bytes = call(py, move || mstro::cdo_bytes(h))?;
    Ok((
        bytes.as_ptr() as usize,
        bytes.len(),
        DemandedBytes { _bytes: bytes },
    ))
}

/// Keeps a CDO's bytes alive while a view of them exists.
#[pyclass(frozen, module = "maestro_core")]
pub struct DemandedBytes {
    _bytes: mstro::Bytes,
}

/// Memory for CDO data that consumers on this node map instead of copying
/// (`mstro_mem_alloc`, see [`mstro::mem_alloc`]): `(address, length, owner)`, the memory
/// freed when the owner is. `maestro_core.mstro_mem_alloc` turns it into a writable
/// memoryview that holds the owner.
#[pyfunction]
fn _mstro_mem_alloc(py: Python<'_>, size: usize) -> PyResult<(usize, usize, Allocation)> {
    let address = call(py, move || mstro::mem_alloc(size).map(|p| p as usize))?;
    Ok((address, size, Allocation { address }))
}

/// Owns memory of `mstro::mem_alloc` and frees it when Python lets go of it: a CDO lending
/// it holds the view (and so this) until disposed, so it cannot be freed while offered.
#[pyclass(frozen, module = "maestro_core")]
pub struct Allocation {
    address: usize,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // Cannot fail: the address came from `mem_alloc`, and only this owner frees it.
        let freed = mstro::mem_free(self.address as *mut u8);
        debug_assert!(freed.is_ok(), "{freed:?}");
    }
}

/// Parses a selector (`mstro_cdo_selector_create`); `schema` must be None.
#[pyfunction]
#[pyo3(signature = (schema, nspace, query))]
fn mstro_cdo_selector_create(
    py: Python<'_>,
    schema: Option<Py<PyAny>>,
    nspace: Option<String>,
    query: String,
) -> PyResult<Selector> {
    if schema.is_some() {
        return Err(raise(mstro::Error::invarg(
            "schema must be None: selectors use the schemas of MSTRO_SCHEMA_PATH/MSTRO_SCHEMA_LIST",
        )));
    }
    let s = call(py, move || {
        mstro::selector_create(nspace.as_deref(), &query)
    })?;
    Ok(Selector { handle: s.0 })
}

/// Frees a selector (`mstro_cdo_selector_dispose`).
#[pyfunction]
fn mstro_cdo_selector_dispose(py: Python<'_>, sel: &Selector) -> PyResult<()> {
    let h = sel.handle;
    call(py, move || mstro::selector_dispose(mstro::Selector(h)))
}

/// Subscribes to events of `kinds` (MSTRO_POOL_EVENT_* bits) matching `sel` (None: every
/// CDO) with `opts` (MSTRO_SUBSCRIPTION_OPTS_* bits) (`mstro_subscribe`).
#[pyfunction]
fn mstro_subscribe(
    py: Python<'_>,
    sel: Option<&Selector>,
    kinds: u32,
    opts: u32,
) -> PyResult<Subscription> {
    let sel = sel.map(|s| mstro::Selector(s.handle));
    let s = call(py, move || {
        mstro::subscribe(sel, kinds, mstro::SubscriptionOptions(opts))
    })?;
    Ok(Subscription { handle: s.0 })
}

/// Every event queued now as a list, or None when there is none
/// (`mstro_subscription_poll`).
#[pyfunction]
fn mstro_subscription_poll<'py>(
    py: Python<'py>,
    sub: &Subscription,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let h = mstro::Subscription(sub.handle);
    let got = call(py, move || mstro::subscription_poll(h))?;
    events::list(py, got)
}

/// Waits for events, the GIL released, then returns every event queued as a list
/// (`mstro_subscription_wait`). With `timeout` (seconds) it returns None when nothing came
/// in time; without, it waits at most `MSTRO_TIMEOUT` and raises MaestroError(MSTRO_TIMEOUT).
#[pyfunction]
#[pyo3(signature = (sub, timeout=None))]
fn mstro_subscription_wait<'py>(
    py: Python<'py>,
    sub: &Subscription,
    timeout: Option<f64>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let h = mstro::Subscription(sub.handle);
    let limit = match timeout {
        Some(t) if t.is_finite() && t >= 0.0 => Some(std::time::Duration::from_secs_f64(t)),
        Some(t) => {
            return Err(raise(mstro::Error::invarg(format!(
                "timeout {t} is not a number of seconds >= 0"
            ))));
        }
        None => None,
    };
    let raised = std::sync::Mutex::new(None);
    let got =
        py.detach(|| mstro::subscription_wait_interruptible(h, limit, &|| interrupted(&raised)));
    interruption(raised)?;
    match got {
        Ok(got) => events::list(py, got),
        Err(e) if e.status == Status::Timeout && limit.is_some() => Ok(None),
        Err(e) => Err(raise(e)),
    }
}

/// Acknowledges the events (a list, or one event) that need it (`mstro_subscription_ack`).
#[pyfunction]
fn mstro_subscription_ack(
    py: Python<'_>,
    sub: &Subscription,
    events: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let list: Vec<Py<events::Event>> = match events.extract::<Py<events::Event>>() {
        Ok(one) => vec![one],
        Err(_) => events.extract().map_err(|_| {
            raise(mstro::Error::invarg(
                "acknowledge a list of events from poll/wait, or one event",
            ))
        })?,
    };
    let owned: Vec<mstro::PoolEvent> = list.iter().map(|e| e.get().inner.clone()).collect();
    let h = mstro::Subscription(sub.handle);
    call(py, move || {
        mstro::subscription_ack(h, &owned.iter().collect::<Vec<_>>())
    })
}

/// Ends a subscription (`mstro_subscription_dispose`).
#[pyfunction]
fn mstro_subscription_dispose(py: Python<'_>, sub: &Subscription) -> PyResult<()> {
    let h = mstro::Subscription(sub.handle);
    call(py, move || mstro::subscription_dispose(h))
}

/// The name of event kind `kind` ("offer", "app-join", ...; "invalid" for others).
#[pyfunction]
fn mstro_pool_event_description(kind: u32) -> &'static str {
    mstro::EventKind::ALL
        .into_iter()
        .find(|k| k.bit() == kind)
        .map_or("invalid", |k| k.name())
}

/// Makes this process the workflow's pool manager and joins it (`mstro_pm_start`).
#[pyfunction]
fn mstro_pm_start(py: Python<'_>) -> PyResult<()> {
    call(py, mstro::pm_start)
}

/// The PM info of the pool manager this process serves (`mstro_pm_getinfo`).
#[pyfunction]
fn mstro_pm_getinfo(py: Python<'_>) -> PyResult<String> {
    call(py, mstro::pm_getinfo)
}

/// Stops the pool manager this process serves (`mstro_pm_terminate`).
#[pyfunction]
fn mstro_pm_terminate(py: Python<'_>) -> PyResult<()> {
    call(py, mstro::pm_terminate)
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("MaestroError", py.get_type::<MaestroError>())?;
    for s in Status::ALL {
        m.add(s.name(), s as i32)?;
    }
    events::constants(m)?;
    for (name, key) in [
        ("MSTRO_ATTR_CORE_CDO_NAME", attr::NAME),
        ("MSTRO_ATTR_CORE_CDO_RAW_PTR", mstro::RAW_PTR),
        ("MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE", attr::LOCAL_SIZE),
        ("MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER", attr::LAYOUT_ORDER),
        (
            "MSTRO_ATTR_CORE_CDO_LAYOUT_ELEMENT_SIZE",
            ".maestro.core.cdo.layout.element-size",
        ),
        (
            "MSTRO_ATTR_CORE_CDO_LAYOUT_NDIMS",
            ".maestro.core.cdo.layout.ndims",
        ),
        (
            "MSTRO_ATTR_CORE_CDO_LAYOUT_DIMS_SIZE",
            ".maestro.core.cdo.layout.dims-size",
        ),
        ("MSTRO_ATTR_CORE_CDO_LIFETIME", ".maestro.core.cdo.lifetime"),
        ("MSTRO_ATTR_CORE_CDO_PERSIST", ".maestro.core.cdo.persist"),
        (
            "MSTRO_ATTR_CORE_CDO_TRANSPORT",
            ".maestro.core.cdo.transport",
        ),
        ("MSTRO_ATTR_CORE_CDO_ISGROUP", ".maestro.core.cdo.isgroup"),
        ("MSTRO_ATTR_CORE_CDO_PROVIDER", ".maestro.core.cdo.provider"),
        (
            "MSTRO_ATTR_CORE_CDO_INTEGRITY",
            ".maestro.core.cdo.integrity",
        ),
        ("MSTRO_ATTR_CORE_CDO_CHECKSUM", ".maestro.core.cdo.checksum"),
    ] {
        m.add(name, key)?;
    }
    m.add("MSTRO_ENV_POOL_INFO", mstro::PM_INFO_ENV)?;
    m.add("MSTRO_ATTR_DEFAULT", py.None())?;
    m.add_class::<Cdo>()?;
    m.add_class::<Selector>()?;
    m.add_class::<Subscription>()?;
    m.add_class::<request::Request>()?;
    m.add_function(wrap_pyfunction!(request::mstro_cdo_demand_async, m)?)?;
    m.add_function(wrap_pyfunction!(request::mstro_request_test, m)?)?;
    m.add_function(wrap_pyfunction!(request::mstro_request_wait, m)?)?;
    m.add_function(wrap_pyfunction!(request::mstro_request_dispose, m)?)?;
    group::register(m)?;
    m.add_class::<DemandedBytes>()?;
    m.add_class::<Allocation>()?;
    m.add_function(wrap_pyfunction!(_mstro_mem_alloc, m)?)?;
    m.add_class::<events::Event>()?;
    m.add_class::<events::Payload>()?;
    m.add_class::<events::CdoPayload>()?;
    m.add_class::<events::AppPayload>()?;
    m.add_function(wrap_pyfunction!(mstro_init, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_finalize, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_version, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_clock, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_status_description, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_declare, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_seal, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_offer, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_require, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_demand, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_retract, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_withdraw, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_dispose, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_attribute_set, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_attribute_get, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_attributes, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_attributes_print, m)?)?;
    m.add_function(wrap_pyfunction!(_mstro_cdo_access, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_selector_create, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_cdo_selector_dispose, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_subscribe, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_subscription_poll, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_subscription_wait, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_subscription_ack, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_subscription_dispose, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_pool_event_description, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_pm_start, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_pm_getinfo, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_pm_terminate, m)?)?;
    Ok(())
}
