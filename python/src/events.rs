//! Pool events as Python objects: `ev.kind`, `ev.serial`, `ev.payload.offer.cdo_name`,
//! `ev.payload.join.component_name`, ... (the same names as the C structs), and the
//! `MSTRO_POOL_EVENT_*` / `MSTRO_SUBSCRIPTION_OPTS_*` constants.

use pyo3::prelude::*;
use pyo3::types::PyList;

use mstro::SubscriptionOptions;
use mstro::{EventKind, PoolEvent};

/// One pool event (from `mstro_subscription_poll` / `_wait`).
#[pyclass(frozen, module = "maestro_core")]
pub struct Event {
    pub(crate) inner: PoolEvent,
}

#[pymethods]
impl Event {
    /// The kind: one MSTRO_POOL_EVENT_* bit.
    #[getter]
    fn kind(&self) -> u32 {
        self.inner.kind.bit()
    }

    /// Pool-wide, increasing.
    #[getter]
    fn serial(&self) -> u64 {
        self.inner.serial
    }

    /// When the PM saw it, nanoseconds since the epoch.
    #[getter]
    fn time_ns(&self) -> i128 {
        self.inner.time
    }

    /// Delivered before the operation took effect.
    #[getter]
    fn before(&self) -> bool {
        self.inner.before
    }

    /// The operation waits for `mstro_subscription_ack`.
    #[getter]
    fn needs_ack(&self) -> bool {
        self.inner.needs_ack
    }

    /// The payload, by kind: `.offer.cdo_name`, `.join.component_name`, ...
    #[getter]
    fn payload(slf: Bound<'_, Self>) -> Payload {
        Payload {
            event: slf.unbind(),
        }
    }

    fn __repr__(&self) -> String {
        let e = &self.inner;
        format!(
            "<maestro_core.Event {} #{} cdo={:?} app={} {:?}>",
            e.kind.name(),
            e.serial,
            e.cdo.as_deref().unwrap_or(""),
            e.app,
            e.component
        )
    }
}

/// The payload of an event, named by kind as in C (`payload.offer`, `payload.join`, ...).
#[pyclass(frozen, module = "maestro_core")]
pub struct Payload {
    event: Py<Event>,
}

/// Payload of CDO events (declare ... dispose, transport).
#[pyclass(frozen, get_all, module = "maestro_core")]
pub struct CdoPayload {
    /// The CDO's name.
    cdo_name: String,
    /// The application that caused the event.
    appid: u64,
    /// Its component name.
    component_name: String,
    /// Its component index.
    component_index: i64,
    /// The transport used, why a transfer failed, ... ("" if nothing).
    detail: String,
}

/// Payload of application and fabric events.
#[pyclass(frozen, get_all, module = "maestro_core")]
pub struct AppPayload {
    /// The application (0 for fabric events).
    appid: u64,
    /// Its component name (also on leave).
    component_name: String,
    /// Its component index.
    component_index: i64,
    /// Why it left; what changed in the fabric ("" if nothing).
    detail: String,
}

impl Payload {
    fn cdo(&self) -> CdoPayload {
        let e = &self.event.get().inner;
        CdoPayload {
            cdo_name: e.cdo.clone().unwrap_or_default(),
            appid: e.app,
            component_name: e.component.clone(),
            component_index: e.index,
            detail: e.detail.clone(),
        }
    }

    fn app(&self) -> AppPayload {
        let e = &self.event.get().inner;
        AppPayload {
            appid: e.app,
            component_name: e.component.clone(),
            component_index: e.index,
            detail: e.detail.clone(),
        }
    }
}

macro_rules! payload_getters {
    ($($(#[$doc:meta])* $name:ident => $how:ident: $ty:ty),* $(,)?) => {
        #[pymethods]
        impl Payload {
            $(
                $(#[$doc])*
                #[getter]
                fn $name(&self) -> $ty {
                    self.$how()
                }
            )*
        }
    };
}

payload_getters!(
    /// DECLARE's payload.
    declare => cdo: CdoPayload,
    /// SEAL's payload.
    seal => cdo: CdoPayload,
    /// OFFER's payload.
    offer => cdo: CdoPayload,
    /// REQUIRE's payload.
    require => cdo: CdoPayload,
    /// DEMAND's payload.
    demand => cdo: CdoPayload,
    /// WITHDRAW's payload.
    withdraw => cdo: CdoPayload,
    /// RETRACT's payload.
    retract => cdo: CdoPayload,
    /// DISPOSE's payload.
    dispose => cdo: CdoPayload,
    /// TRANSPORT_STARTED's and TRANSPORT_COMPLETED's payload.
    transport => cdo: CdoPayload,
    /// APP_JOIN's payload.
    join => app: AppPayload,
    /// APP_LEAVE's payload.
    leave => app: AppPayload,
    /// FABRIC's payload.
    fabric => app: AppPayload,
    /// PM_FAILOVER's payload (the pool itself: app 0; the detail says what came back).
    failover => app: AppPayload,
);

/// The events as a Python list, or None if there are none.
pub fn list(py: Python<'_>, events: Vec<PoolEvent>) -> PyResult<Option<Bound<'_, PyList>>> {
    if events.is_empty() {
        return Ok(None);
    }
    let items: Vec<Py<Event>> = events
        .into_iter()
        .map(|inner| Py::new(py, Event { inner }))
        .collect::<PyResult<_>>()?;
    Ok(Some(PyList::new(py, items)?))
}

/// The MSTRO_POOL_EVENT_* and MSTRO_SUBSCRIPTION_OPTS_* constants.
pub fn constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for k in EventKind::ALL {
        let name = match k {
            EventKind::AppJoin => "APP_JOIN".to_string(),
            EventKind::AppLeave => "APP_LEAVE".to_string(),
            EventKind::TransportStarted => "TRANSPORT_STARTED".to_string(),
            EventKind::TransportCompleted => "TRANSPORT_COMPLETED".to_string(),
            EventKind::PmFailover => "PM_FAILOVER".to_string(),
            other => other.name().to_uppercase(),
        };
        m.add(format!("MSTRO_POOL_EVENT_{name}"), k.bit())?;
    }
    m.add("MSTRO_POOL_EVENT_NONE", 0u32)?;
    for (name, v) in [
        ("DEFAULT", SubscriptionOptions::DEFAULT),
        ("SIGNAL_BEFORE", SubscriptionOptions::SIGNAL_BEFORE),
        ("REQUIRE_ACK", SubscriptionOptions::REQUIRE_ACK),
        ("NO_LOCAL_EVENTS", SubscriptionOptions::NO_LOCAL_EVENTS),
        ("CURRENT_STATE", SubscriptionOptions::CURRENT_STATE),
    ] {
        m.add(format!("MSTRO_SUBSCRIPTION_OPTS_{name}"), v)?;
    }
    Ok(())
}
