//! CDO attributes: typed values under dotted keys, as in Maestro Core. Built-in keys live in
//! the `.maestro.core.cdo.` namespace; user keys in their schema's namespace.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `.maestro.core.cdo.name`: the CDO's name (set by the pool).
pub const NAME: &str = ".maestro.core.cdo.name";
/// `.maestro.core.cdo.scope.local-size`: the CDO's size in bytes.
pub const LOCAL_SIZE: &str = ".maestro.core.cdo.scope.local-size";
/// `.maestro.core.cdo.layout.order`: 0 row-major, 1 column-major.
pub const LAYOUT_ORDER: &str = ".maestro.core.cdo.layout.order";

/// A typed attribute value (the types of Maestro schemas).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AttrValue {
    /// `int()`
    Int(i64),
    /// `uint()`
    Uint(u64),
    /// `str()`
    Str(String),
    /// `bool()`
    Bool(bool),
    /// `double()`
    Double(f64),
    /// `timestamp()`: nanoseconds since the epoch.
    Timestamp(i128),
    /// `blob()`
    Blob(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// A CDO's attributes, ordered by key.
pub type Attributes = BTreeMap<String, AttrValue>;
