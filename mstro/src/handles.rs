//! Handles: what C and Python hold instead of pointers to Rust objects. A handle is a
//! non-zero 64-bit number whose top byte names its kind and whose rest counts up, never
//! reused; the registry maps it to the object. So a NULL handle, a handle of the wrong kind
//! and a handle used after dispose are each an [`Error`] with [`Status::Invarg`](crate::Status::Invarg), never a
//! dangling pointer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::status::{Error, Result};

/// A CDO handle (Maestro's `mstro_cdo`): a number checked against the instance's registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cdo(pub u64);

/// A group handle (Maestro's `mstro_group`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Group(pub u64);

/// A request handle (Maestro's `mstro_request`): a number checked against the instance's
/// registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request(pub u64);

/// The kinds of handle, with their top-byte tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Cdo = 0x43,
    Selector = 0x53,
    Subscription = 0x55,
    Request = 0x52,
    Group = 0x47,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Cdo => "CDO",
            Kind::Selector => "selector",
            Kind::Subscription => "subscription",
            Kind::Request => "request",
            Kind::Group => "group",
        }
    }

    fn of(raw: u64) -> Option<Kind> {
        [
            Kind::Cdo,
            Kind::Selector,
            Kind::Subscription,
            Kind::Request,
            Kind::Group,
        ]
        .into_iter()
        .find(|k| (raw >> 56) == *k as u64)
    }
}

/// Objects of one kind by handle.
pub(crate) struct Registry<T> {
    kind: Kind,
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<T>>>,
}

impl<T> Registry<T> {
    pub(crate) fn new(kind: Kind) -> Registry<T> {
        Registry {
            kind,
            next: AtomicU64::new(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files `value`; returns its new handle.
    pub(crate) fn insert(&self, value: T) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed) & ((1 << 56) - 1);
        let raw = ((self.kind as u64) << 56) | n;
        self.map().insert(raw, Arc::new(value));
        raw
    }

    fn check(&self, raw: u64) -> Result<()> {
        let kind = self.kind.name();
        if raw == 0 {
            return Err(Error::invarg(format!("NULL {kind} handle")));
        }
        match Kind::of(raw) {
            Some(k) if k == self.kind => Ok(()),
            Some(other) => Err(Error::invarg(format!(
                "a {} handle was passed where a {kind} handle belongs",
                other.name()
            ))),
            None => Err(Error::invarg(format!(
                "{raw:#x} is not a {kind} handle (a stray pointer?)"
            ))),
        }
    }

    fn unknown(&self) -> Error {
        Error::invarg(format!(
            "unknown {} handle: already disposed, or from before mstro_finalize",
            self.kind.name()
        ))
    }

    /// The object behind `raw`.
    ///
    /// # Errors
    /// [`crate::Status::Invarg`] for NULL, the wrong kind or a disposed handle.
    pub(crate) fn get(&self, raw: u64) -> Result<Arc<T>> {
        self.check(raw)?;
        self.map().get(&raw).cloned().ok_or_else(|| self.unknown())
    }

    /// Removes and returns the object behind `raw`.
    ///
    /// # Errors
    /// As [`Registry::get`].
    pub(crate) fn remove(&self, raw: u64) -> Result<Arc<T>> {
        self.check(raw)?;
        self.map().remove(&raw).ok_or_else(|| self.unknown())
    }

    /// Removes and returns every object.
    pub(crate) fn drain(&self) -> Vec<Arc<T>> {
        self.map().drain().map(|(_, v)| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    #[test]
    fn null_wrong_kind_and_disposed_handles_are_invalid_arguments() {
        let cdos = Registry::new(Kind::Cdo);
        let sels: Registry<u8> = Registry::new(Kind::Selector);
        let h = cdos.insert("x");
        assert_eq!(*cdos.get(h).unwrap(), "x");
        for bad in [0, sels.insert(1), 0x1234, h + 1] {
            let e = cdos.get(bad).unwrap_err();
            assert_eq!(e.status, Status::Invarg, "{bad:#x}: {e}");
        }
        assert!(
            cdos.get(sels.insert(2))
                .unwrap_err()
                .message
                .contains("selector handle")
        );
        cdos.remove(h).unwrap();
        let e = cdos.get(h).unwrap_err();
        assert!(e.message.contains("disposed"), "{e}");
        assert_ne!(cdos.insert("y"), h, "handles are never reused");
    }
}
