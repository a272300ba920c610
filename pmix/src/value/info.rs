//! [`Info`]: a key with a [`Value`], PMIx's unit of data, directives and qualifiers; and
//! the owned C arrays of them passed into PMIx calls.

use pmix_sys as sys;

use super::Value;
use super::cstr::{copy_cstr, fixed_str};
use crate::error::{Error, Result};

/// A key/value pair (`pmix_info_t`), used for data, directives and qualifiers alike.
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    /// The key (at most 511 bytes), usually one of the `PMIX_*` attribute names.
    pub key: String,
    /// The value.
    pub value: Value,
    /// `PMIX_INFO_REQD`: the receiver must honour this directive or fail.
    pub required: bool,
}

impl Info {
    /// A key/value pair.
    pub fn new(key: impl Into<String>, value: Value) -> Info {
        Info {
            key: key.into(),
            value,
            required: false,
        }
    }

    /// Marks the directive as required (`PMIX_INFO_REQD`).
    pub fn required(mut self) -> Info {
        self.required = true;
        self
    }

    /// Writes this info into `dst`.
    ///
    /// # Safety
    /// `dst` must point to a writable, zeroed `pmix_info_t`.
    pub(crate) unsafe fn load(&self, dst: *mut sys::pmix_info_t) -> Result<()> {
        // SAFETY: the caller guarantees validity.
        let dst = unsafe { &mut *dst };
        copy_cstr(&mut dst.key, &self.key, "key")?;
        if self.required {
            dst.flags |= sys::PMIX_INFO_REQD;
        }
        // SAFETY: dst.value is zeroed.
        unsafe { self.value.load(&mut dst.value) }
    }

    /// Copies a C info.
    ///
    /// # Safety
    /// `raw` must point to a valid `pmix_info_t`.
    pub(crate) unsafe fn from_raw(raw: *const sys::pmix_info_t) -> Info {
        // SAFETY: the caller guarantees validity.
        let raw = unsafe { &*raw };
        Info {
            key: fixed_str(&raw.key),
            // SAFETY: the value of a valid info is valid.
            value: unsafe { Value::from_raw(&raw.value) },
            required: raw.flags & sys::PMIX_INFO_REQD != 0,
        }
    }

    /// Copies a C info array; a NULL pointer or a zero count gives an empty vector.
    ///
    /// # Safety
    /// `raw` must point to `n` valid infos (or be NULL).
    pub(crate) unsafe fn vec_from_raw(raw: *const sys::pmix_info_t, n: usize) -> Vec<Info> {
        if raw.is_null() {
            return Vec::new();
        }
        // SAFETY: the caller guarantees `n` valid elements.
        (0..n)
            .map(|i| unsafe { Info::from_raw(raw.add(i)) })
            .collect()
    }
}

/// Finds the value of `key` in a list of infos.
pub fn find<'a>(infos: &'a [Info], key: &str) -> Option<&'a Value> {
    infos.iter().find(|i| i.key == key).map(|i| &i.value)
}

/// An owned C array of `pmix_info_t`, freed with `PMIX_INFO_FREE` on drop. Used to pass
/// directives into PMIx calls.
pub(crate) struct InfoArray {
    ptr: *mut sys::pmix_info_t,
    len: usize,
}

// SAFETY: owned C memory with no thread affinity; PMIx only reads it.
unsafe impl Send for InfoArray {}

impl InfoArray {
    /// Builds the C array from Rust infos.
    pub(crate) fn new(infos: &[Info]) -> Result<InfoArray> {
        // SAFETY: mpmix_info_create returns a zeroed array of the given length or NULL.
        let ptr = unsafe { sys::mpmix_info_create(infos.len()) };
        if ptr.is_null() && !infos.is_empty() {
            return Err(Error::InvalidArgument(
                "out of memory for an info array".into(),
            ));
        }
        let arr = InfoArray {
            ptr,
            len: infos.len(),
        };
        for (i, info) in infos.iter().enumerate() {
            // SAFETY: `i < len` and the element is zeroed.
            unsafe { info.load(arr.ptr.add(i))? };
        }
        Ok(arr)
    }

    /// Pointer for PMIx (NULL when empty).
    pub(crate) fn as_ptr(&self) -> *mut sys::pmix_info_t {
        self.ptr
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Hands the array to C, which then owns and frees it.
    pub(crate) fn into_raw(self) -> (*mut sys::pmix_info_t, usize) {
        let out = (self.ptr, self.len);
        std::mem::forget(self);
        out
    }
}

impl Drop for InfoArray {
    fn drop(&mut self) {
        // SAFETY: the array was created by mpmix_info_create with this length.
        unsafe { sys::mpmix_info_free(self.ptr, self.len) };
    }
}
