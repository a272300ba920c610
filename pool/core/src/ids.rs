//! The ids the pool hands out and the protocol carries: apps, CDOs (which apps number
//! themselves within their own range) and transfers. A module of their own so that the
//! events and views can name them without depending on the wire protocol.

/// An application's id, assigned in [`FromPm::Welcome`](crate::proto::FromPm::Welcome): apps are numbered from 1 in the
/// order they join, at most [`MAX_APP`] over a PM's lifetime.
pub type AppId = u64;
/// A CDO's id: its app's id in the high bits, the app's count of its declarations in the
/// low [`CDO_SEQ_BITS`] (see [`cdo_ids`]). Apps number their own CDOs, so a declare needs
/// no answer: the operations after it name the CDO at once.
pub type CdoId = u64;

/// Bits of a [`CdoId`] that count an app's declarations: 2^40 - 1 CDOs per app (12 days
/// of a million declares a second).
pub const CDO_SEQ_BITS: u32 = 40;

/// The most apps a PM admits over its lifetime (2^24 - 1): the app id must fit above the
/// declaration count in a [`CdoId`].
pub const MAX_APP: AppId = (1 << (64 - CDO_SEQ_BITS)) - 1;

/// The ids app `app` may give its CDOs, in the order it should use them.
///
/// ```
/// use pool_core::proto::{cdo_ids, cdo_owner};
///
/// let ids = cdo_ids(3);
/// assert_eq!(cdo_owner(*ids.start()), 3);
/// assert_eq!(cdo_owner(*ids.end()), 3);
/// assert!(!ids.contains(&(3 << 40)), "the app's id alone names no CDO");
/// ```
pub fn cdo_ids(app: AppId) -> std::ops::RangeInclusive<CdoId> {
    let base = app << CDO_SEQ_BITS;
    base + 1..=base | ((1 << CDO_SEQ_BITS) - 1)
}

/// The app that declared `cdo`.
pub fn cdo_owner(cdo: CdoId) -> AppId {
    cdo >> CDO_SEQ_BITS
}

/// A transfer's id, carried by tickets.
pub type TransferId = u64;
