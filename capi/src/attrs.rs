//! Attribute values as C hands them over and takes them back: reading `void *val` by the
//! schema's type, values kept by pointer until seal (`copy_value = false`), values the
//! library must free (`user_owned_value = false`), and the storage that
//! `mstro_cdo_attribute_get`'s pointers point into.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use mstro::{Attr, Cdo, Error, Status};
use mstro::{AttrType, AttrValue, attr};

/// `enum mstro_cdo_attr_value_type`, as the header defines it.
mod vt {
    pub use crate::header::{
        MSTRO_CDO_ATTR_VALUE_blob as BLOB, MSTRO_CDO_ATTR_VALUE_bool as BOOL,
        MSTRO_CDO_ATTR_VALUE_cstring as CSTRING, MSTRO_CDO_ATTR_VALUE_double as DOUBLE,
        MSTRO_CDO_ATTR_VALUE_int64 as INT64, MSTRO_CDO_ATTR_VALUE_pointer as POINTER,
        MSTRO_CDO_ATTR_VALUE_timestamp as TIMESTAMP, MSTRO_CDO_ATTR_VALUE_uint64 as UINT64,
        mstro_cdo_attr_value_type as Type,
    };
}

/// `mstro_timestamp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
struct Timestamp {
    sec: u64,
    nsec: u32,
    offset: i32,
}

/// `mstro_blob`.
#[repr(C)]
struct Blob {
    len: usize,
    data: *const c_void,
}

/// The enumerators of `enum mstro_cdo_attr_value_type` and their values, in the header's
/// order (checked against the header by a test).
#[cfg(test)]
pub(crate) fn value_types() -> [(&'static str, vt::Type); 9] {
    [
        ("MSTRO_CDO_ATTR_VALUE_INVALID", 0),
        ("MSTRO_CDO_ATTR_VALUE_bool", vt::BOOL),
        ("MSTRO_CDO_ATTR_VALUE_int64", vt::INT64),
        ("MSTRO_CDO_ATTR_VALUE_uint64", vt::UINT64),
        ("MSTRO_CDO_ATTR_VALUE_double", vt::DOUBLE),
        ("MSTRO_CDO_ATTR_VALUE_cstring", vt::CSTRING),
        ("MSTRO_CDO_ATTR_VALUE_timestamp", vt::TIMESTAMP),
        ("MSTRO_CDO_ATTR_VALUE_blob", vt::BLOB),
        ("MSTRO_CDO_ATTR_VALUE_pointer", vt::POINTER),
    ]
}

/// `sizeof`/`offsetof` of the value structs as Rust lays them out (the C names), for the
/// test that compares them with the header.
#[cfg(test)]
pub(crate) fn layout() -> Vec<(String, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("sizeof(mstro_timestamp)".into(), size_of::<Timestamp>()),
        (
            "offsetof(mstro_timestamp, sec)".into(),
            offset_of!(Timestamp, sec),
        ),
        (
            "offsetof(mstro_timestamp, nsec)".into(),
            offset_of!(Timestamp, nsec),
        ),
        (
            "offsetof(mstro_timestamp, offset)".into(),
            offset_of!(Timestamp, offset),
        ),
        ("sizeof(mstro_blob)".into(), size_of::<Blob>()),
        ("offsetof(mstro_blob, len)".into(), offset_of!(Blob, len)),
        ("offsetof(mstro_blob, data)".into(), offset_of!(Blob, data)),
    ]
}

/// A pointer the program handed over, read at seal and possibly freed at dispose.
struct HandedOver {
    key: String,
    ptr: *mut c_void,
    ty: AttrType,
    free: bool,
}

/// A value in C form, boxed so the pointer handed out stays put.
enum CValue {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(CString),
    Time(Timestamp),
    /// The bytes (owned here) and the `mstro_blob` pointing at them.
    Blob {
        _bytes: Vec<u8>,
        view: Blob,
    },
}

#[derive(Default)]
struct PerCdo {
    handed: Vec<HandedOver>,
    /// Pointers the library must `free()` at dispose (a raw-ptr handed over, values kept by
    /// pointer that a demand replaced).
    owned: Vec<*mut c_void>,
    /// What `get` handed out, by key, with the value it came from.
    got: HashMap<String, (AttrValue, Box<CValue>)>,
}

// SAFETY: the raw pointers are the program's memory, only read (and freed once) under the
// table's lock as the header documents.
unsafe impl Send for PerCdo {}

static TABLE: LazyLock<Mutex<HashMap<u64, PerCdo>>> = LazyLock::new(Mutex::default);

fn table() -> MutexGuard<'static, HashMap<u64, PerCdo>> {
    TABLE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `T` at `val`.
///
/// # Safety
/// `val` points at a valid, aligned `T`.
unsafe fn load<T: Copy>(val: *const c_void) -> T {
    // SAFETY: `val` points to a `T`, the key's schema type, as `maestro.h` requires of the
    // caller that set it.
    unsafe { *val.cast::<T>() }
}

/// Reads the value at `val` as type `ty`.
///
/// # Safety
/// `val` points at a value of `ty` (for `str()`, is the string) as `maestro.h` documents.
unsafe fn read(key: &str, ty: AttrType, val: *const c_void) -> mstro::Result<AttrValue> {
    if val.is_null() {
        return Err(Error::invarg(format!("the value of {key} is NULL")));
    }
    Ok(match ty {
        // SAFETY: `val` is of the key's type (the caller's contract).
        AttrType::Bool => AttrValue::Bool(unsafe { load(val) }),
        // SAFETY: `val` is of the key's type (the caller's contract).
        AttrType::Int => AttrValue::Int(unsafe { load(val) }),
        // SAFETY: `val` is of the key's type (the caller's contract).
        AttrType::Uint => AttrValue::Uint(unsafe { load(val) }),
        // SAFETY: `val` is of the key's type (the caller's contract).
        AttrType::Double => AttrValue::Double(unsafe { load(val) }),
        AttrType::Str => {
            // SAFETY: `val` is of the key's type (the caller's contract).
            let s = unsafe { CStr::from_ptr(val.cast::<c_char>()) };
            AttrValue::Str(
                s.to_str()
                    .map_err(|_| Error::invarg(format!("the value of {key} is not UTF-8")))?
                    .to_string(),
            )
        }
        AttrType::Timestamp => {
            // SAFETY: `val` is of the key's type (the caller's contract).
            let t: Timestamp = unsafe { load(val) };
            if t.nsec >= 1_000_000_000 {
                return Err(Error::invarg(format!(
                    "{key}: nsec {} is not below one second",
                    t.nsec
                )));
            }
            AttrValue::Timestamp(i128::from(t.sec) * 1_000_000_000 + i128::from(t.nsec))
        }
        AttrType::Blob => {
            // SAFETY: `val` is of the key's type (the caller's contract).
            let b: &Blob = unsafe { &*val.cast::<Blob>() };
            if b.data.is_null() && b.len > 0 {
                return Err(Error::invarg(format!(
                    "{key}: a NULL blob of {} bytes",
                    b.len
                )));
            }
            if b.len == 0 {
                AttrValue::Blob(Vec::new())
            } else {
                // SAFETY: a blob's `data` has `len` readable bytes (the caller's contract).
                AttrValue::Blob(
                    unsafe { std::slice::from_raw_parts(b.data.cast::<u8>(), b.len) }.to_vec(),
                )
            }
        }
    })
}

/// `mstro_cdo_attribute_set`.
///
/// # Safety
/// As the header documents for `val`.
pub(crate) unsafe fn set(
    cdo: Cdo,
    key: &str,
    val: *mut c_void,
    copy_value: bool,
    user_owned_value: bool,
) -> mstro::Result<()> {
    if key == mstro::RAW_PTR {
        // Lent in place, never copied; freed at dispose if the library owns it.
        // SAFETY: the program keeps the memory valid (header contract).
        unsafe { mstro::cdo_set_user_memory(cdo, val.cast(), None, true, None) }?;
        if !user_owned_value && !val.is_null() {
            table().entry(cdo.0).or_default().owned.push(val);
        }
        return Ok(());
    }
    if key == attr::LOCAL_SIZE {
        if val.is_null() {
            return Err(Error::invarg(format!("the value of {key} is NULL")));
        }
        // SAFETY: an int64_t (header contract).
        let n = unsafe { *val.cast::<i64>() };
        return mstro::cdo_attribute_set(cdo, key, AttrValue::Int(n));
    }
    let Some(ty) = mstro::cdo_attribute_type(key)? else {
        return Ok(());
    };
    if copy_value {
        // SAFETY: the header contract.
        let v = unsafe { read(key, ty, val) }?;
        return mstro::cdo_attribute_set(cdo, key, v);
    }
    if val.is_null() {
        return Err(Error::invarg(format!("the value of {key} is NULL")));
    }
    // Checks the handle and the CDO's state now rather than at seal.
    mstro::cdo_name(cdo)?;
    let mut t = table();
    let per = t.entry(cdo.0).or_default();
    per.handed.retain(|k| k.key != key);
    per.handed.push(HandedOver {
        key: key.to_string(),
        ptr: val,
        ty,
        free: !user_owned_value,
    });
    Ok(())
}

/// Reads the values kept by pointer into the CDO's attributes (at seal).
pub(crate) fn read_deferred(cdo: Cdo) -> mstro::Result<()> {
    let kept: Vec<(String, *mut c_void, AttrType)> = table()
        .get(&cdo.0)
        .map(|p| {
            p.handed
                .iter()
                .map(|k| (k.key.clone(), k.ptr, k.ty))
                .collect()
        })
        .unwrap_or_default();
    for (key, ptr, ty) in kept {
        // SAFETY: the program kept the value valid until seal (header contract).
        let v = unsafe { read(&key, ty, ptr) }?;
        mstro::cdo_attribute_set(cdo, &key, v)?;
    }
    Ok(())
}

/// Forgets what `get` handed out and the values kept by pointer (the CDO's attributes were
/// replaced by a demand); those the library owns are still freed at dispose.
pub(crate) fn forget_values(cdo: Cdo) {
    if let Some(p) = table().get_mut(&cdo.0) {
        p.got.clear();
        let kept = std::mem::take(&mut p.handed);
        p.owned
            .extend(kept.into_iter().filter(|k| k.free).map(|k| k.ptr));
    }
}

fn free_owned(per: PerCdo) {
    for k in per.handed.into_iter().filter(|k| k.free) {
        // SAFETY: handed over with user_owned_value = false: malloc'd, ours to free once.
        unsafe { libc::free(k.ptr) };
    }
    for p in per.owned {
        // SAFETY: `p` was handed over with user_owned_value = false: malloc'd by the
        // program, ours to free, once (it leaves the table here).
        unsafe { libc::free(p) };
    }
}

/// Frees what the library owns of a disposed CDO.
pub(crate) fn forget(cdo: Cdo) {
    let per = table().remove(&cdo.0);
    if let Some(per) = per {
        free_owned(per);
    }
}

/// At finalize: every handle is gone.
pub(crate) fn forget_all() {
    let all: Vec<PerCdo> = table().drain().map(|(_, p)| p).collect();
    all.into_iter().for_each(free_owned);
}

fn c_value(key: &str, v: &AttrValue) -> mstro::Result<CValue> {
    Ok(match v {
        AttrValue::Bool(b) => CValue::Bool(*b),
        // Maestro programs read the size as int64_t.
        AttrValue::Uint(n) if key == attr::LOCAL_SIZE => CValue::Int(*n as i64),
        AttrValue::Int(n) => CValue::Int(*n),
        AttrValue::Uint(n) => CValue::Uint(*n),
        AttrValue::Double(d) => CValue::Double(*d),
        AttrValue::Str(s) => CValue::Str(
            CString::new(s.as_str())
                .map_err(|_| Error::new(Status::Fail, format!("{key} holds a NUL byte")))?,
        ),
        AttrValue::Timestamp(ns) => CValue::Time(Timestamp {
            sec: u64::try_from(ns.div_euclid(1_000_000_000)).unwrap_or(0),
            nsec: ns.rem_euclid(1_000_000_000) as u32,
            offset: 0,
        }),
        AttrValue::Blob(b) => {
            let bytes = b.clone();
            let blob = Blob {
                len: bytes.len(),
                data: bytes.as_ptr().cast(),
            };
            CValue::Blob {
                _bytes: bytes,
                view: blob,
            }
        }
    })
}

fn pointer(v: &CValue) -> (vt::Type, *const c_void) {
    match v {
        CValue::Bool(b) => (vt::BOOL, std::ptr::from_ref(b).cast()),
        CValue::Int(n) => (vt::INT64, std::ptr::from_ref(n).cast()),
        CValue::Uint(n) => (vt::UINT64, std::ptr::from_ref(n).cast()),
        CValue::Double(d) => (vt::DOUBLE, std::ptr::from_ref(d).cast()),
        CValue::Str(s) => (vt::CSTRING, s.as_ptr().cast()),
        CValue::Time(t) => (vt::TIMESTAMP, std::ptr::from_ref(t).cast()),
        CValue::Blob { view, .. } => (vt::BLOB, std::ptr::from_ref(view).cast()),
    }
}

/// `mstro_cdo_attribute_get`: the type and the pointer to hand out.
pub(crate) fn get(cdo: Cdo, key: &str) -> mstro::Result<(vt::Type, *const c_void)> {
    let kept = table().get(&cdo.0).and_then(|p| {
        p.handed
            .iter()
            .find(|k| k.key == key)
            .map(|k| (k.ptr, k.ty))
    });
    let value = match kept {
        // Not read yet: read through the program's pointer.
        // SAFETY: the program keeps it valid until seal (header contract).
        Some((ptr, ty)) => unsafe { read(key, ty, ptr) }?,
        None => match mstro::cdo_attribute_get(cdo, key)? {
            Attr::RawPtr(p, _) => return Ok((vt::POINTER, p.cast())),
            Attr::Value(v) => v,
        },
    };
    let mut t = table();
    let per = t.entry(cdo.0).or_default();
    let fresh = match per.got.get(key) {
        Some((old, _)) => *old != value,
        None => true,
    };
    if fresh {
        let c = Box::new(c_value(key, &value)?);
        per.got.insert(key.to_string(), (value, c));
    }
    let (_, boxed) = &per.got[key];
    Ok(pointer(boxed))
}
