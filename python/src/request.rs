//! Asynchronous demand from Python (`mstro_cdo_demand_async`, `mstro_request_*`): a
//! [`Request`] object per demand in flight. `maestro_core.mstro_request_wait_async` (in
//! `__init__.py`) awaits one from asyncio.

use pyo3::prelude::*;

use super::{Cdo, call, interrupted, interruption, raise};

/// An asynchronous demand in flight (`mstro_request`).
#[pyclass(frozen, module = "maestro_core")]
pub struct Request {
    handle: u64,
    /// The name of the CDO it demands.
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl Request {
    fn __repr__(&self) -> String {
        format!("<maestro_core.Request for {:?}>", self.name)
    }
}

impl Request {
    fn h(&self) -> mstro::Request {
        mstro::Request(self.handle)
    }
}

/// Starts demanding the CDO in the background and returns at once
/// (`mstro_cdo_demand_async`).
#[pyfunction]
pub fn mstro_cdo_demand_async(py: Python<'_>, cdo: &Cdo) -> PyResult<Request> {
    let h = cdo.h();
    let r = call(py, move || mstro::cdo_demand_async(h))?;
    Ok(Request {
        handle: r.0,
        name: cdo.name.clone(),
    })
}

/// Whether the request finished, well or not (`mstro_request_test`); never waits.
#[pyfunction]
pub fn mstro_request_test(py: Python<'_>, request: &Request) -> PyResult<bool> {
    let h = request.h();
    call(py, move || mstro::request_test(h))
}

/// Waits until the request finished and raises the demand's error, if any
/// (`mstro_request_wait`), the GIL released. Ctrl-C ends the wait within 50 ms with the
/// handler's exception (`KeyboardInterrupt`); the request stays in flight.
#[pyfunction]
pub fn mstro_request_wait(py: Python<'_>, request: &Request) -> PyResult<()> {
    let h = request.h();
    let raised = std::sync::Mutex::new(None);
    let result = py.detach(|| mstro::request_wait_interruptible(h, &|| interrupted(&raised)));
    interruption(raised)?;
    result.map_err(raise)
}

/// Forgets the request, cancelling it if still in flight (`mstro_request_dispose`).
#[pyfunction]
pub fn mstro_request_dispose(py: Python<'_>, request: &Request) -> PyResult<()> {
    let h = request.h();
    call(py, move || mstro::request_dispose(h))
}
