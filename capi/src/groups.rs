//! `mstro_group_*`: CDO groups over [`mstro`]'s groups. Members are CDO handles; values a
//! member keeps by pointer are read when the group's offer seals it, and the library's
//! copies of the members a consumer's group owned go with the group.

use std::ffi::c_char;

use mstro::Error;

use crate::{attrs, cdo, handle, mstro_cdo, put, raw, text};

/// A group handle.
pub use crate::header::mstro_group;

fn group(h: mstro_group) -> mstro::Group {
    mstro::Group(raw(h))
}

entry! {
    /// `mstro_group_declare`.
    ///
    /// # Safety
    /// `name` is NULL or NUL-terminated; `result` is NULL or writable.
    unsafe fn mstro_group_declare(
        name: *const c_char,
        result: *mut mstro_group,
    ) {
        if result.is_null() {
            return Err(Error::invarg("result (the handle pointer) is NULL"));
        }
        // SAFETY: `name` is NULL (refused) or a NUL-terminated string: this entry point's
        // contract with its C caller.
        let name = unsafe { text(name, "name") }?;
        let g = mstro::group_declare(name)?;
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { put(result, handle(g.0), "result") }
    }
}

entry! {
    /// `mstro_group_add`.
    fn mstro_group_add(g: mstro_group, member: mstro_cdo) {
        mstro::group_add(group(g), cdo(member))
    }
}

entry! {
    /// `mstro_group_size_set`.
    fn mstro_group_size_set(g: mstro_group, size: usize) {
        mstro::group_size_set(group(g), size)
    }
}

entry! {
    /// `mstro_group_size_get`.
    ///
    /// # Safety
    /// `size` is NULL or writable.
    unsafe fn mstro_group_size_get(g: mstro_group, size: *mut usize) {
        let n = mstro::group_size_get(group(g))?;
        // SAFETY: `size` is NULL (refused by `put`) or writable: this entry point's
        // contract with its C caller.
        unsafe { put(size, n, "size") }
    }
}

entry! {
    /// `mstro_group_next`: the next member in `*member`, NULL after the last.
    ///
    /// # Safety
    /// `member` is NULL or writable.
    unsafe fn mstro_group_next(g: mstro_group, member: *mut mstro_cdo) {
        let next = mstro::group_next(group(g))?;
        let h = next.map_or(std::ptr::null_mut(), |c| handle(c.0));
        // SAFETY: `member` is NULL (refused by `put`) or writable: this entry point's
        // contract with its C caller.
        unsafe { put(member, h, "member") }
    }
}

/// An entry point taking a group handle alone, doing `$body` with the group.
macro_rules! group_op {
    ($(#[$doc:meta])* $c:ident => $body:expr) => {
        entry! {
            $(#[$doc])*
            fn $c(g: mstro_group) {
                $body(group(g))
            }
        }
    };
}

group_op!(
    /// `mstro_group_seal`.
    mstro_group_seal => mstro::group_seal
);
group_op!(
    /// `mstro_group_offer`: members' values kept by pointer are read now.
    mstro_group_offer => |g| {
        for m in mstro::group_members(g)? {
            attrs::read_deferred(m)?;
        }
        mstro::group_offer(g)
    }
);
group_op!(
    /// `mstro_group_require`.
    mstro_group_require => mstro::group_require
);
group_op!(
    /// `mstro_group_demand`.
    mstro_group_demand => mstro::group_demand
);
group_op!(
    /// `mstro_group_withdraw`.
    mstro_group_withdraw => mstro::group_withdraw
);
group_op!(
    /// `mstro_group_retract`.
    mstro_group_retract => mstro::group_retract
);
group_op!(
    /// `mstro_group_dispose`: the members a demand brought go too, with the library's
    /// copies of their values.
    mstro_group_dispose => |g| {
        for m in mstro::group_dispose(g)? {
            attrs::forget(m);
        }
        Ok(())
    }
);
