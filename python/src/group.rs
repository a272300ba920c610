//! CDO groups from Python (`mstro_group_*`): a [`Group`] handle, its members [`Cdo`]
//! handles. Every call that talks to the pool releases the GIL.

use pyo3::prelude::*;

use super::{Cdo, call};

/// A group of CDOs (`mstro_group`).
#[pyclass(frozen, module = "maestro_core")]
pub struct Group {
    handle: u64,
    /// The name it was declared with.
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl Group {
    fn __repr__(&self) -> String {
        format!("<maestro_core.Group {:?}>", self.name)
    }
}

impl Group {
    fn h(&self) -> mstro::Group {
        mstro::Group(self.handle)
    }
}

/// Declares a group (`mstro_group_declare`), producer and consumer alike.
#[pyfunction]
pub fn mstro_group_declare(py: Python<'_>, name: String) -> PyResult<Group> {
    let g = call(py, || mstro::group_declare(&name))?;
    Ok(Group { handle: g.0, name })
}

/// Adds a CDO this process declared (not offered) before the group's seal
/// (`mstro_group_add`).
#[pyfunction]
pub fn mstro_group_add(py: Python<'_>, group: &Group, cdo: &Cdo) -> PyResult<()> {
    let (g, c) = (group.h(), cdo.h());
    call(py, move || mstro::group_add(g, c))
}

/// Says how many members the group will have; its seal checks it (`mstro_group_size_set`).
#[pyfunction]
pub fn mstro_group_size_set(py: Python<'_>, group: &Group, size: usize) -> PyResult<()> {
    let g = group.h();
    call(py, move || mstro::group_size_set(g, size))
}

/// The group's size (`mstro_group_size_get`).
#[pyfunction]
pub fn mstro_group_size_get(py: Python<'_>, group: &Group) -> PyResult<usize> {
    let g = group.h();
    call(py, move || mstro::group_size_get(g))
}

/// The next member, `None` after the last (`mstro_group_next`).
#[pyfunction]
pub fn mstro_group_next(py: Python<'_>, group: &Group) -> PyResult<Option<Cdo>> {
    let g = group.h();
    let next = call(py, move || {
        mstro::group_next(g)?
            .map(|c| Ok((c.0, mstro::cdo_name(c)?)))
            .transpose()
    })?;
    Ok(next.map(|(handle, name)| Cdo { handle, name }))
}

macro_rules! group_op {
    ($(#[$doc:meta])* $name:ident => $f:path) => {
        $(#[$doc])*
        #[pyfunction]
        pub fn $name(py: Python<'_>, group: &Group) -> PyResult<()> {
            let g = group.h();
            call(py, move || $f(g))
        }
    };
}

group_op!(/// Seals the group: its members are fixed (`mstro_group_seal`).
    mstro_group_seal => mstro::group_seal);
group_op!(/// Offers the group and its members in one burst, all or nothing (`mstro_group_offer`).
    mstro_group_offer => mstro::group_offer);
group_op!(/// Declares the intent to demand the group (`mstro_group_require`).
    mstro_group_require => mstro::group_require);
group_op!(/// Waits until the group and all its members are here (`mstro_group_demand`).
    mstro_group_demand => mstro::group_demand);
group_op!(/// Takes back an offered group and its members (`mstro_group_withdraw`).
    mstro_group_withdraw => mstro::group_withdraw);
group_op!(/// Cancels a group's require (`mstro_group_retract`).
    mstro_group_retract => mstro::group_retract);

/// Forgets the group, and the members its demand brought (`mstro_group_dispose`).
#[pyfunction]
pub fn mstro_group_dispose(py: Python<'_>, group: &Group) -> PyResult<()> {
    let g = group.h();
    call(py, move || mstro::group_dispose(g).map(drop))
}

/// Adds the group functions and class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Group>()?;
    m.add_function(wrap_pyfunction!(mstro_group_declare, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_add, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_size_set, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_size_get, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_seal, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_offer, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_require, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_demand, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_next, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_withdraw, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_retract, m)?)?;
    m.add_function(wrap_pyfunction!(mstro_group_dispose, m)?)?;
    Ok(())
}
