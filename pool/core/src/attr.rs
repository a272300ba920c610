//! CDO attributes: typed values under dotted keys, as in Maestro Core. Built-in keys live in
//! the `.maestro.core.cdo.` namespace; user keys in their schema's namespace.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `.maestro.core.cdo.name`: the CDO's name (set by the pool).
pub const NAME: &str = ".maestro.core.cdo.name";
/// `.maestro.core.cdo.scope.local-size`: the CDO's size in bytes.
pub const LOCAL_SIZE: &str = ".maestro.core.cdo.scope.local-size";
/// Whose bytes a demanded CDO holds: the providing application's `component:index`, set
/// by the pool on the consumer's CDO when its transfer is ticketed.
pub const PROVIDER: &str = ".maestro.core.cdo.provider";
/// Set to `true` on an offered CDO to have the library check its bytes end to end: the
/// producer's library adds [`CHECKSUM`] at offer, the consumer's checks it on arrival.
pub const INTEGRITY: &str = ".maestro.core.cdo.integrity";
/// `.maestro.core.cdo.isgroup`: the CDO is a group of CDOs (see `pool`'s groups).
pub const IS_GROUP: &str = ".maestro.core.cdo.isgroup";
/// `.maestro.core.cdo.group.members`: a group CDO's members' names, a JSON array of
/// strings, in the order they were added (set by the library).
pub const GROUP_MEMBERS: &str = ".maestro.core.cdo.group.members";
/// The attributes of a group CDO listing `members` (see [`IS_GROUP`], [`GROUP_MEMBERS`]).
pub fn group_attributes<S: AsRef<str>>(members: &[S]) -> Attributes {
    let names: Vec<&str> = members.iter().map(AsRef::as_ref).collect();
    // A list of strings always encodes.
    let listing = serde_json::to_string(&names).unwrap_or_default();
    Attributes::from([
        (IS_GROUP.to_string(), AttrValue::Bool(true)),
        (GROUP_MEMBERS.to_string(), AttrValue::Str(listing)),
    ])
}

/// The members a group CDO's attributes list, in order; `None` for a CDO that is no group
/// (or whose list is malformed).
pub fn group_members(attributes: &Attributes) -> Option<Vec<String>> {
    if attributes.get(IS_GROUP) != Some(&AttrValue::Bool(true)) {
        return None;
    }
    match attributes.get(GROUP_MEMBERS) {
        Some(AttrValue::Str(json)) => serde_json::from_str(json).ok(),
        _ => None,
    }
}

/// The XXH3-64 checksum of a CDO's bytes, added by the producer's library when
/// [`INTEGRITY`] is set; a consumer whose bytes do not match gets an error, not data.
pub const CHECKSUM: &str = ".maestro.core.cdo.checksum";
/// `.maestro.core.cdo.layout.order`: 0 row-major, 1 column-major.
pub const LAYOUT_ORDER: &str = ".maestro.core.cdo.layout.order";

/// `.maestro.core.cdo.lifetime`: how long the pool keeps a CDO whose producer handed its
/// file over (seconds from the hand-over; 0 or absent: until the workflow ends).
pub const LIFETIME: &str = ".maestro.core.cdo.lifetime";
/// `.maestro.core.cdo.persist`: keep a kept CDO's file after the workflow ends.
pub const PERSIST: &str = ".maestro.core.cdo.persist";

/// `.maestro.core.cdo.transport`: how this CDO's consumers get its bytes, `GFS` (a file the
/// producer writes under its `MSTRO_TRANSPORT_GFS_DIR`, which outlives the producer) or
/// `RDMA` (from the producer's memory: the fabric, same-host copies, the PM's stream),
/// whatever `MSTRO_TRANSPORT_DEFAULT` says for the process (this project's attribute:
/// Maestro Core chooses per process only). Case does not matter.
pub const TRANSPORT: &str = ".maestro.core.cdo.transport";

/// What [`TRANSPORT`] in `attributes` asks for: `Some(true)` the global file system,
/// `Some(false)` RDMA, `None` nothing (the process's default).
///
/// # Errors
/// Another value (or type): why, saying the two it may be.
pub fn wants_gfs(attributes: &Attributes) -> Result<Option<bool>, String> {
    match attributes.get(TRANSPORT) {
        None => Ok(None),
        Some(AttrValue::Str(t)) if t.eq_ignore_ascii_case("gfs") => Ok(Some(true)),
        Some(AttrValue::Str(t)) if t.eq_ignore_ascii_case("rdma") => Ok(Some(false)),
        Some(other) => Err(format!(
            "{other:?} is no transport: give \"GFS\" or \"RDMA\" (MIO is not supported)"
        )),
    }
}

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

/// Nanoseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, milliseconds): how
/// timestamps are shown to people (the inverse of what [`Schemas`](crate::schema::Schemas) parses for
/// `timestamp()` values, to the millisecond).
pub fn format_timestamp(ns: i128) -> String {
    let secs = i64::try_from(ns.div_euclid(1_000_000_000)).unwrap_or(0);
    let millis = ns.rem_euclid(1_000_000_000) / 1_000_000;
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // The civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// A value as people read it and selectors write it: numbers and `true`/`false` as they
/// are, strings quoted, timestamps quoted as UTC dates (to the millisecond), blobs as
/// their length and first bytes in hex.
impl std::fmt::Display for AttrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Uint(v) => write!(f, "{v}"),
            AttrValue::Double(v) => write!(f, "{v}"),
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Str(v) => write!(f, "{v:?}"),
            AttrValue::Timestamp(ns) => {
                write!(f, "\"{}\"", format_timestamp(*ns))
            }
            AttrValue::Blob(b) => {
                write!(f, "<{} bytes", b.len())?;
                if !b.is_empty() {
                    f.write_str(":")?;
                    for byte in b.iter().take(16) {
                        write!(f, " {byte:02x}")?;
                    }
                    if b.len() > 16 {
                        f.write_str(" ...")?;
                    }
                }
                f.write_str(">")
            }
        }
    }
}

/// A CDO's attributes, ordered by key.
pub type Attributes = BTreeMap<String, AttrValue>;

/// The built-in attributes the pool derives rather than stores: the name, the size and
/// the provider. A sealed CDO's attributes as an app may give them leave these out.
pub const DERIVED: [&str; 3] = [NAME, LOCAL_SIZE, PROVIDER];

/// Removes the [`DERIVED`] attributes (from a demanded CDO's attributes, say, before
/// they are sealed again on another CDO).
pub fn strip_derived(attributes: &mut Attributes) {
    for key in DERIVED {
        attributes.remove(key);
    }
}

/// The checksum [`CHECKSUM`] holds: XXH3-64 of the bytes (about 10 GB/s on one core).
pub fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// A producer's half of end-to-end integrity: when `attributes` ask for it ([`INTEGRITY`]
/// is `true`), adds [`CHECKSUM`] of `bytes` (replacing any value given).
pub fn add_checksum(attributes: &mut Attributes, bytes: &[u8]) {
    if matches!(attributes.get(INTEGRITY), Some(AttrValue::Bool(true))) {
        attributes.insert(CHECKSUM.into(), AttrValue::Uint(checksum(bytes)));
    }
}

/// A consumer's half: when `attributes` carry a [`CHECKSUM`], checks `bytes` against it.
///
/// # Errors
/// What was expected and found, when they differ (or the checksum is not a `uint`).
pub fn verify_checksum(attributes: &Attributes, bytes: &[u8]) -> Result<(), String> {
    match attributes.get(CHECKSUM) {
        None => Ok(()),
        Some(AttrValue::Uint(want)) => {
            let got = checksum(bytes);
            if got == *want {
                Ok(())
            } else {
                Err(format!(
                    "the {} bytes that arrived have checksum {got:#018x}, the producer's were {want:#018x}: corrupted on the way or changed while offered",
                    bytes.len()
                ))
            }
        }
        Some(other) => Err(format!("{CHECKSUM} is {other:?}, not a uint")),
    }
}

/// Attributes as people and JSON tools read them: in human-readable formats (JSON) each
/// value is a plain JSON value (`".user.step": 3`, `".user.label": "x"`, a blob as an array
/// of bytes), not serde's tagged form (`{"Uint": 3}`); the schema says the type. Binary
/// formats (the wire protocol) keep the tags. Reading JSON takes plain values back (an
/// integer that fits `i64` is `Int`, a larger one `Uint`, a fraction `Double`, an array of
/// bytes `Blob`): the reader applies the schema for finer types (`timestamp()`).
///
/// Use with `#[serde(with = "pool_core::attr::plain")]` on an [`Attributes`] field.
pub mod plain {
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{AttrValue, Attributes};

    struct Plain<'a>(&'a AttrValue);

    impl Serialize for Plain<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.0 {
                AttrValue::Int(v) => s.serialize_i64(*v),
                AttrValue::Uint(v) => s.serialize_u64(*v),
                AttrValue::Str(v) => s.serialize_str(v),
                AttrValue::Bool(v) => s.serialize_bool(*v),
                AttrValue::Double(v) => s.serialize_f64(*v),
                AttrValue::Timestamp(v) => s.serialize_i128(*v),
                AttrValue::Blob(v) => v.serialize(s),
            }
        }
    }

    /// A value read from JSON.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Loose {
        Int(i64),
        Uint(u64),
        Double(f64),
        Bool(bool),
        Str(String),
        Blob(Vec<u8>),
    }

    /// Serialises `attrs` (plain values in human-readable formats).
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(attrs: &Attributes, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return attrs.serialize(s);
        }
        let mut map = s.serialize_map(Some(attrs.len()))?;
        for (k, v) in attrs {
            map.serialize_entry(k, &Plain(v))?;
        }
        map.end()
    }

    /// Deserialises attributes (plain values in human-readable formats).
    ///
    /// # Errors
    /// The deserializer's, for anything that is not a map of attribute values.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Attributes, D::Error> {
        if !d.is_human_readable() {
            return Attributes::deserialize(d);
        }
        let loose = std::collections::BTreeMap::<String, Loose>::deserialize(d)?;
        Ok(loose
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Loose::Int(v) => AttrValue::Int(v),
                    Loose::Uint(v) => AttrValue::Uint(v),
                    Loose::Double(v) => AttrValue::Double(v),
                    Loose::Bool(v) => AttrValue::Bool(v),
                    Loose::Str(v) => AttrValue::Str(v),
                    Loose::Blob(v) => AttrValue::Blob(v),
                };
                (k, v)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_show_as_people_read_them() {
        let shown = |v: AttrValue| v.to_string();
        assert_eq!(shown(AttrValue::Str("p1/field-0".into())), "\"p1/field-0\"");
        assert_eq!(shown(AttrValue::Int(-3)), "-3");
        assert_eq!(shown(AttrValue::Uint(7)), "7");
        assert_eq!(shown(AttrValue::Double(0.5)), "0.5");
        assert_eq!(shown(AttrValue::Bool(true)), "true");
        assert_eq!(
            shown(AttrValue::Timestamp(1_700_000_000_123_456_789)),
            "\"2023-11-14T22:13:20.123Z\""
        );
        assert_eq!(shown(AttrValue::Blob(vec![0, 255])), "<2 bytes: 00 ff>");
        assert_eq!(
            shown(AttrValue::Blob(vec![1; 20])).matches(" 01").count(),
            16
        );
        assert_eq!(shown(AttrValue::Blob(Vec::new())), "<0 bytes>");
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Doc {
        #[serde(with = "plain")]
        attributes: Attributes,
    }

    fn doc() -> Doc {
        let mut attributes = Attributes::new();
        attributes.insert(".user.step".into(), AttrValue::Int(-3));
        attributes.insert(".user.big".into(), AttrValue::Uint(u64::MAX));
        attributes.insert(".user.label".into(), AttrValue::Str("x".into()));
        attributes.insert(".user.ok".into(), AttrValue::Bool(true));
        attributes.insert(".user.ratio".into(), AttrValue::Double(0.5));
        attributes.insert(".user.raw".into(), AttrValue::Blob(vec![1, 2]));
        Doc { attributes }
    }

    #[test]
    fn json_shows_plain_values_and_reads_them_back() {
        let json = serde_json::to_string(&doc()).expect("json");
        assert_eq!(
            json,
            r#"{"attributes":{".user.big":18446744073709551615,".user.label":"x",".user.ok":true,".user.ratio":0.5,".user.raw":[1,2],".user.step":-3}}"#
        );
        assert_eq!(serde_json::from_str::<Doc>(&json).expect("back"), doc());
        assert!(serde_json::from_str::<Doc>(r#"{"attributes":{"k":{"Uint":1}}}"#).is_err());
    }

    #[test]
    fn the_wire_keeps_types() {
        let mut d = doc();
        d.attributes
            .insert(".user.when".into(), AttrValue::Timestamp(7));
        let bytes = postcard::to_allocvec(&d).expect("postcard");
        assert_eq!(postcard::from_bytes::<Doc>(&bytes).expect("back"), d);
    }
}

#[cfg(test)]
mod checksum_tests {
    use super::*;

    #[test]
    fn integrity_is_added_when_asked_and_checked_on_arrival() {
        let bytes = b"field data".to_vec();
        let mut plain = Attributes::new();
        add_checksum(&mut plain, &bytes);
        assert!(!plain.contains_key(CHECKSUM), "not asked: nothing added");
        assert_eq!(verify_checksum(&plain, b"anything"), Ok(()));
        let mut asked = Attributes::from([(INTEGRITY.to_string(), AttrValue::Bool(true))]);
        add_checksum(&mut asked, &bytes);
        assert_eq!(verify_checksum(&asked, &bytes), Ok(()));
        let e = verify_checksum(&asked, b"EVIL-DATA-").expect_err("changed bytes");
        assert!(e.contains("checksum"), "{e}");
        asked.insert(CHECKSUM.into(), AttrValue::Str("x".into()));
        assert!(verify_checksum(&asked, &bytes).is_err());
    }
}
