//! Conversions between Rust data and libpmix's C representation: allocated C strings,
//! byte objects, `malloc`'ed copies and data arrays (PMIx frees what goes in with its own
//! destructors; what comes out is copied). Fixed and borrowed C strings: [`super::cstr`].

use std::ffi::c_char;

use pmix_sys as sys;

use super::cstr::{cstr_lossy, cstring};
use super::info::Info;
use super::{DeviceDistance, Proc, ProcInfo, Value};
use crate::error::{Error, Result};

/// `strdup` into malloc'ed memory that PMIx may free.
pub(crate) fn strdup(s: &str, what: &str) -> Result<*mut c_char> {
    let c = cstring(s, what)?;
    // SAFETY: c is a valid C string; strdup copies it.
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(Error::InvalidArgument(format!(
            "out of memory copying {what}"
        )));
    }
    Ok(p)
}

/// malloc'ed copy of a byte slice as a PMIx byte object.
pub(crate) fn bytes_to_raw(b: &[u8]) -> sys::pmix_byte_object_t {
    if b.is_empty() {
        return sys::pmix_byte_object_t::default();
    }
    // SAFETY: malloc of b.len() bytes, then a non-overlapping copy into it.
    unsafe {
        let p = libc::malloc(b.len()) as *mut c_char;
        if p.is_null() {
            return sys::pmix_byte_object_t::default();
        }
        std::ptr::copy_nonoverlapping(b.as_ptr(), p as *mut u8, b.len());
        sys::pmix_byte_object_t {
            bytes: p,
            size: b.len(),
        }
    }
}

/// Copies the bytes of a PMIx byte object.
pub(crate) fn bytes_from_raw(bo: &sys::pmix_byte_object_t) -> Vec<u8> {
    if bo.bytes.is_null() || bo.size == 0 {
        return Vec::new();
    }
    // SAFETY: a valid byte object holds `size` readable bytes.
    unsafe { std::slice::from_raw_parts(bo.bytes as *const u8, bo.size) }.to_vec()
}

/// malloc'ed copy of one POD value.
///
/// # Safety
/// `T` must be plain old data that PMIx frees with `free`.
pub(crate) unsafe fn alloc_copy<T: Copy>(v: &T) -> *mut T {
    // SAFETY: malloc of size_of::<T>() bytes, then a write of one T.
    unsafe {
        let p = libc::malloc(std::mem::size_of::<T>()) as *mut T;
        if !p.is_null() {
            p.write(*v);
        }
        p
    }
}

/// Builds a malloc'ed `pmix_data_array_t` of `ty`, filling element `i` with `fill`.
pub(crate) fn data_array<T, E>(
    items: &[T],
    ty: u32,
    fill: impl Fn(*mut E, &T) -> Result<()>,
) -> Result<*mut sys::pmix_data_array_t> {
    // SAFETY: creates an array of `items.len()` zeroed elements of type `ty`.
    let darray = unsafe { sys::mpmix_data_array_create(items.len(), ty as u16) };
    if darray.is_null() {
        return Err(Error::InvalidArgument(
            "out of memory for a data array".into(),
        ));
    }
    for (i, item) in items.iter().enumerate() {
        // SAFETY: darray->array holds items.len() elements of E.
        let slot = unsafe { ((*darray).array as *mut E).add(i) };
        if let Err(e) = fill(slot, item) {
            // SAFETY: frees what was filled so far; the rest is zeroed.
            unsafe { sys::mpmix_data_array_free(darray) };
            return Err(e);
        }
    }
    Ok(darray)
}

/// Copies a data array into the matching [`Value`] variant.
///
/// # Safety
/// `da` must be a valid data array.
pub(crate) unsafe fn darray_from_raw(da: &sys::pmix_data_array_t) -> Value {
    let n = if da.array.is_null() { 0 } else { da.size };
    // SAFETY: `array` holds `size` elements of the tagged type.
    unsafe {
        match u32::from(da.type_) {
            sys::PMIX_INFO => Value::Infos(Info::vec_from_raw(da.array as *const _, n)),
            sys::PMIX_PROC => Value::Procs(
                (0..n)
                    .map(|i| Proc::from_raw((da.array as *const sys::pmix_proc_t).add(i)))
                    .collect(),
            ),
            sys::PMIX_STRING => Value::Strings(
                (0..n)
                    .map(|i| cstr_lossy(*(da.array as *const *const c_char).add(i)))
                    .collect(),
            ),
            sys::PMIX_PROC_INFO => Value::ProcInfos(
                (0..n)
                    .map(|i| {
                        let p = &*(da.array as *const sys::pmix_proc_info_t).add(i);
                        ProcInfo {
                            proc: Proc::from_raw(&p.proc_),
                            hostname: cstr_lossy(p.hostname),
                            executable: cstr_lossy(p.executable_name),
                            pid: p.pid,
                            exit_code: p.exit_code,
                            state: p.state,
                        }
                    })
                    .collect(),
            ),
            sys::PMIX_DEVICE_DIST => Value::DeviceDistances(
                (0..n)
                    .map(|i| {
                        let d = &*(da.array as *const sys::pmix_device_distance_t).add(i);
                        DeviceDistance {
                            uuid: cstr_lossy(d.uuid),
                            osname: cstr_lossy(d.osname),
                            device_type: d.type_,
                            mindist: d.mindist,
                            maxdist: d.maxdist,
                        }
                    })
                    .collect(),
            ),
            sys::PMIX_UINT16 if n == 0 => Value::Uint16s(Vec::new()),
            sys::PMIX_UINT16 => {
                Value::Uint16s(std::slice::from_raw_parts(da.array as *const u16, n).to_vec())
            }
            _ => Value::Other(sys::PMIX_DATA_ARRAY as u16),
        }
    }
}
