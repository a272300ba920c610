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
