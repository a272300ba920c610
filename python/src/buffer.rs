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
/// `PyBUF_SIMPLE`: contiguous bytes, no format or shape asked for.
const SIMPLE: c_int = 0;

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
    /// Acquires `obj`'s buffer as contiguous bytes, writable if the object allows it.
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
        for flags in [SIMPLE | WRITABLE, SIMPLE] {
            // SAFETY: the GIL is held (`obj` is bound); `view` is a valid Py_buffer to fill.
            if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } == 0 {
                return Ok(Held { view });
            }
            // Not writable, or no buffer at all: clear and try read-only, then give up.
            let _ = PyErr::take(obj.py());
        }
        Err(crate::raise(mstro::Error::invarg(format!(
            "raw-ptr needs an object with a contiguous buffer (bytes, bytearray, memoryview, a C-contiguous NumPy array), not {}",
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
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: releasing the view acquired in `get`, once, with the GIL.
        Python::attach(|_| unsafe { PyBuffer_Release(&mut *self.view) });
    }
}
