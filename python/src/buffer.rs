//! The buffer protocol, declared here because PyO3 gates it to CPython 3.11 under abi3 (the
//! release that put it in the stable ABI). `PyObject_GetBuffer`, `PyBuffer_Release` and
//! `Py_buffer`'s layout are unchanged since CPython 3.3, so an abi3 module for 3.9+ may use
//! them. [`Held`] keeps a buffer acquired (its exporter cannot resize or free it) until
//! dropped.

use std::ffi::{c_char, c_int, c_void};

use pyo3::ffi::{Py_ssize_t, PyObject};
use pyo3::prelude::*;

/// CPython's `Py_buffer` (3.3 and later).
#[repr(C)]
struct PyBuffer {
    buf: *mut c_void,
    obj: *mut PyObject,
    len: Py_ssize_t,
    itemsize: Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut Py_ssize_t,
    strides: *mut Py_ssize_t,
    suboffsets: *mut Py_ssize_t,
    internal: *mut c_void,
}

/// `PyBUF_WRITABLE`.
const WRITABLE: c_int = 0x0001;
/// `PyBUF_ANY_CONTIGUOUS`: C- or Fortran-contiguous, with shape and strides (what tells
/// the two apart), no format.
const ANY_CONTIGUOUS: c_int = 0x0080 | 0x0010 | 0x0008;

unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut PyBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBuffer);
}

/// An acquired buffer, released (with the GIL) when dropped.
pub struct Held {
    view: Box<PyBuffer>,
}

// SAFETY: the view is only released, under the GIL, in drop; the memory it describes is
// the exporter's, pinned while held.
unsafe impl Send for Held {}

impl Held {
    /// Acquires `obj`'s buffer as contiguous bytes (in C or Fortran order), writable if the
    /// object allows it.
    ///
    /// # Errors
    /// `MaestroError(MSTRO_INVARG)` if the object has no contiguous buffer.
    pub fn get(obj: &Bound<'_, PyAny>) -> PyResult<Held> {
        let mut view = Box::new(PyBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        for flags in [ANY_CONTIGUOUS | WRITABLE, ANY_CONTIGUOUS] {
            // SAFETY: the GIL is held (`obj` is bound); `view` is a valid Py_buffer to fill.
            if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } == 0 {
                return Ok(Held { view });
            }
            // Not writable, or no buffer at all: clear and try read-only, then give up.
            let _ = PyErr::take(obj.py());
        }
        Err(crate::raise(mstro::Error::invarg(format!(
            "raw-ptr needs an object with a contiguous buffer (bytes, bytearray, memoryview, a NumPy array in C or Fortran order), not {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))))
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.view.buf.cast()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }

    /// True if the exporter allows writes.
    pub fn writable(&self) -> bool {
        self.view.readonly == 0
    }

    /// The array layout of a buffer of two or more dimensions (a NumPy array of order `'C'`
    /// or `'F'`): its shape, its element size (1 to 16 bytes) and which order its strides
    /// say (C where both hold, a dimension of 1 say). `None` for one dimension (both orders
    /// are the same), larger elements, or an exporter that gave no shape or strides.
    pub fn layout(&self) -> Option<mstro::layout::Layout> {
        let v = &*self.view;
        let ndim = usize::try_from(v.ndim).ok().filter(|&n| n >= 2)?;
        if v.shape.is_null() || v.strides.is_null() {
            return None;
        }
        // SAFETY: with PyBUF_STRIDES the exporter filled `ndim` shape and stride entries,
        // valid while the view is held.
        let (shape, strides) = unsafe {
            (
                std::slice::from_raw_parts(v.shape, ndim),
                std::slice::from_raw_parts(v.strides, ndim),
            )
        };
        let item = usize::try_from(v.itemsize).ok()?;
        if item == 0 || item > mstro::layout::MAX_ELEMENT_SIZE {
            return None;
        }
        let dims: Vec<u64> = shape
            .iter()
            .map(|&d| u64::try_from(d).ok())
            .collect::<Option<_>>()?;
        // Contiguous in an order: each stride is the product of the faster dimensions'
        // sizes (dimensions of size 1 may have any stride).
        let contiguous = |axes: Vec<usize>| {
            let mut expect = v.itemsize;
            axes.into_iter().all(|a| {
                let ok = shape[a] <= 1 || strides[a] == expect;
                expect *= shape[a];
                ok
            })
        };
        let order = if contiguous((0..ndim).rev().collect()) {
            mstro::layout::Order::RowMajor
        } else if contiguous((0..ndim).collect()) {
            mstro::layout::Order::ColumnMajor
        } else {
            return None;
        };
        Some(mstro::layout::Layout {
            order,
            element_size: item,
            dims,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: releasing the view acquired in `get`, once, with the GIL.
        Python::attach(|_| unsafe { PyBuffer_Release(&mut *self.view) });
    }
}
