//! Attribute schemas, as in Maestro Core: YAML files that declare typed attributes under a
//! namespace, loaded from `MSTRO_SCHEMA_PATH` (directories, `:`-separated) and
//! `MSTRO_SCHEMA_LIST` (file names, `;`-separated), on top of the built-in
//! `.maestro.core.cdo.` schema. A client checks a CDO's attributes against them at `seal`:
//! wrong types, values out of range, unknown keys (unless `MSTRO_DROP_UNKNOWN_ATTRIBUTES`)
//! and missing required attributes are [`AttrError`]s; defaults fill what is unset.
//!
//! ```yaml
//! schema-name: ecmwf
//! schema-version: 1
//! schema-namespace: .maestro.ecmwf.
//! maestro-attributes:          # `attributes` is accepted too
//!   - key: step
//!     type: int(min=0)
//!     required: true
//!     documentation: forecast step
//!   - key: param
//!     type: str(max=64)
//!     default: "2t"
//! ```
//!
//! Types: `int()`, `uint()`, `double()` (with optional `min=`/`max=` bounds), `str()`,
//! `blob()` (with optional `min=`/`max=` lengths), `bool()`, `timestamp()` (nanoseconds
//! since the epoch, or RFC 3339-like `YYYY-MM-DDTHH:MM:SS[.frac]Z` text). Unlike Maestro Core,
//! a missing required attribute is an error, not a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::attr::{self, AttrValue, Attributes};

/// An attribute's declared type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrType {
    /// `int()`: i64.
    Int,
    /// `uint()`: u64.
    Uint,
    /// `str()`
    Str,
    /// `bool()`
    Bool,
    /// `double()`
    Double,
    /// `timestamp()`
    Timestamp,
    /// `blob()`
    Blob,
}

impl AttrType {
    /// The type of a value.
    pub fn of(v: &AttrValue) -> AttrType {
        match v {
            AttrValue::Int(_) => AttrType::Int,
            AttrValue::Uint(_) => AttrType::Uint,
            AttrValue::Str(_) => AttrType::Str,
            AttrValue::Bool(_) => AttrType::Bool,
            AttrValue::Double(_) => AttrType::Double,
            AttrValue::Timestamp(_) => AttrType::Timestamp,
            AttrValue::Blob(_) => AttrType::Blob,
        }
    }

    fn name(self) -> &'static str {
        match self {
            AttrType::Int => "int",
            AttrType::Uint => "uint",
            AttrType::Str => "str",
            AttrType::Bool => "bool",
            AttrType::Double => "double",
            AttrType::Timestamp => "timestamp",
            AttrType::Blob => "blob",
        }
    }
}

impl std::fmt::Display for AttrType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}()", self.name())
    }
}

/// One declared attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct AttrSpec {
    /// The full key (namespace + key).
    pub key: String,
    /// Its type.
    pub ty: AttrType,
    /// Must be set by `seal` (after defaults).
    pub required: bool,
    /// Set when the CDO does not set it.
    pub default: Option<AttrValue>,
    /// Lower bound: value for numbers, length for `str`/`blob`.
    pub min: Option<f64>,
    /// Upper bound: value for numbers, length for `str`/`blob`.
    pub max: Option<f64>,
    /// Its documentation.
    pub documentation: String,
    /// Set by the pool, not by applications (name, size).
    pub derived: bool,
}

/// Why a schema could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The file could not be read.
    #[error("schema {path}: {source}; check MSTRO_SCHEMA_PATH and MSTRO_SCHEMA_LIST")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `MSTRO_SCHEMA_LIST` names a file found in no directory of `MSTRO_SCHEMA_PATH`.
    #[error("schema {name:?} is in none of {path:?} (MSTRO_SCHEMA_PATH); add its directory")]
    NotFound {
        /// The file name.
        name: String,
        /// The directories searched.
        path: Vec<PathBuf>,
    },
    /// Not valid YAML or not of the schema's shape.
    #[error("schema {origin}: {why}")]
    Invalid {
        /// The file (or "inline").
        origin: String,
        /// What is wrong.
        why: String,
    },
    /// An environment variable has a value that is not understood.
    #[error("{var}={value:?}: {why}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is expected.
        why: &'static str,
    },
}

/// Why a CDO's attributes were refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AttrError {
    /// No schema declares the key.
    #[error(
        "attribute {0:?} is in no loaded schema; declare it in a schema (MSTRO_SCHEMA_PATH/MSTRO_SCHEMA_LIST) or set MSTRO_DROP_UNKNOWN_ATTRIBUTES=1"
    )]
    Unknown(String),
    /// The value has another type than declared.
    #[error("attribute {key:?} is declared {expected} but was given a {got} value")]
    Type {
        /// The key.
        key: String,
        /// The declared type.
        expected: AttrType,
        /// The value's type.
        got: AttrType,
    },
    /// The value (or its length) is outside the declared bounds.
    #[error("attribute {key:?} = {value} is outside [{min}, {max}] declared by its schema")]
    Range {
        /// The key.
        key: String,
        /// The value (or length) given.
        value: String,
        /// Lower bound (or -inf).
        min: f64,
        /// Upper bound (or inf).
        max: f64,
    },
    /// A required attribute is not set.
    #[error("attribute {0:?} is required by its schema; set it before sealing")]
    Missing(String),
    /// An attribute the pool sets itself.
    #[error("attribute {0:?} is set by the pool; do not set it")]
    Derived(String),
    /// Text that does not parse as the declared type.
    #[error("attribute {key:?}: {text:?} is not a valid {expected} value")]
    Parse {
        /// The key.
        key: String,
        /// The text.
        text: String,
        /// The declared type.
        expected: AttrType,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaFile {
    #[serde(rename = "schema-name")]
    name: String,
    #[serde(rename = "schema-version")]
    version: serde_norway::Value,
    #[serde(rename = "schema-namespace")]
    namespace: String,
    #[serde(rename = "maestro-attributes", alias = "attributes", default)]
    attributes: Vec<SpecFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    key: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    default: Option<serde_norway::Value>,
    #[serde(default)]
    documentation: String,
}

/// The loaded schemas: every declared attribute by full key.
#[derive(Clone, Debug)]
pub struct Schemas {
    specs: BTreeMap<String, AttrSpec>,
    loaded: Vec<String>,
    drop_unknown: bool,
}

const BUILTIN: &str = r#"
schema-name: maestro-core
schema-version: 1
schema-namespace: .maestro.core.cdo.
maestro-attributes:
  - key: name
    type: str()
    documentation: the CDO's name (set by the pool)
  - key: scope.local-size
    type: uint()
    documentation: the CDO's size in bytes (set by the pool)
  - key: provider
    type: str()
    documentation: the application whose bytes a demanded CDO holds, component:index (set by the pool)
  - key: integrity
    type: bool()
    documentation: check the bytes end to end (the producer's library adds checksum, the consumer's checks it)
  - key: checksum
    type: uint()
    documentation: XXH3-64 of the bytes (set by the producer's library when integrity is true)
  - key: layout.order
    type: int(min=0, max=1)
    documentation: 0 row-major, 1 column-major
  - key: layout.element-size
    type: uint()
    documentation: bytes per element
  - key: layout.ndims
    type: uint()
    documentation: number of dimensions
  - key: layout.dims-size
    type: blob()
    documentation: per-dimension sizes, little-endian u64 each
  - key: lifetime
    type: uint()
    documentation: how long the CDO is kept, in seconds (0 forever)
  - key: persist
    type: bool()
    documentation: keep the CDO after the workflow ends
  - key: isgroup
    type: bool()
    documentation: the CDO is a group of CDOs
  - key: group.members
    type: str()
    documentation: a group's members' names, a JSON array in the order they were added (set by the library)
"#;

impl Schemas {
    /// The built-in `.maestro.core.cdo.` schema only.
    pub fn builtin() -> Schemas {
        let mut s = Schemas {
            specs: BTreeMap::new(),
            loaded: Vec::new(),
            drop_unknown: false,
        };
        if let Err(e) = s.load_str(BUILTIN, "built-in") {
            unreachable!("the built-in schema is valid: {e}");
        }
        for key in attr::DERIVED {
            if let Some(spec) = s.specs.get_mut(key) {
                spec.derived = true;
            }
        }
        s
    }

    /// The built-in schema plus those `MSTRO_SCHEMA_PATH` + `MSTRO_SCHEMA_LIST` name, and
    /// `MSTRO_DROP_UNKNOWN_ATTRIBUTES`.
    ///
    /// # Errors
    /// Unreadable, missing or invalid schema files; a malformed variable.
    pub fn from_env() -> Result<Schemas, SchemaError> {
        let mut s = Schemas::builtin();
        let path: Vec<PathBuf> = std::env::var_os("MSTRO_SCHEMA_PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_else(|| vec![PathBuf::from(".")]);
        if let Ok(list) = std::env::var("MSTRO_SCHEMA_LIST") {
            for name in list.split(';').map(str::trim).filter(|n| !n.is_empty()) {
                let file = path
                    .iter()
                    .map(|d| d.join(name))
                    .find(|f| f.is_file())
                    .ok_or_else(|| SchemaError::NotFound {
                        name: name.to_string(),
                        path: path.clone(),
                    })?;
                s.load_file(&file)?;
            }
        }
        if let Ok(v) = std::env::var("MSTRO_DROP_UNKNOWN_ATTRIBUTES") {
            s.drop_unknown = match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "" | "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(SchemaError::Env {
                        var: "MSTRO_DROP_UNKNOWN_ATTRIBUTES",
                        value: v,
                        why: "expected 1/0, true/false, yes/no or on/off",
                    });
                }
            };
        }
        Ok(s)
    }

    /// Drops (instead of refusing) attributes no schema declares.
    pub fn drop_unknown(mut self, on: bool) -> Schemas {
        self.drop_unknown = on;
        self
    }

    /// True if attributes no schema declares are dropped rather than refused
    /// (`MSTRO_DROP_UNKNOWN_ATTRIBUTES`).
    pub fn drops_unknown(&self) -> bool {
        self.drop_unknown
    }

    /// Loads a schema file.
    ///
    /// # Errors
    /// Unreadable or invalid file.
    pub fn load_file(&mut self, path: &Path) -> Result<(), SchemaError> {
        let text = std::fs::read_to_string(path).map_err(|source| SchemaError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_str(&text, &path.display().to_string())
    }

    /// Loads a schema from YAML text; `origin` names it in errors.
    ///
    /// # Errors
    /// [`SchemaError::Invalid`] saying what is wrong (bad YAML, unknown field, bad type,
    /// a default of the wrong type, a key declared twice).
    pub fn load_str(&mut self, yaml: &str, origin: &str) -> Result<(), SchemaError> {
        let invalid = |why: String| SchemaError::Invalid {
            origin: origin.to_string(),
            why,
        };
        let file: SchemaFile = serde_norway::from_str(yaml).map_err(|e| invalid(e.to_string()))?;
        if !file.namespace.starts_with('.') || !file.namespace.ends_with('.') {
            return Err(invalid(format!(
                "schema-namespace {:?} must start and end with '.' (like .maestro.ecmwf.)",
                file.namespace
            )));
        }
        let mut new = Vec::new();
        for a in file.attributes {
            if a.key.is_empty() || a.key.starts_with('.') {
                return Err(invalid(format!(
                    "attribute key {:?} must be non-empty and relative to the namespace",
                    a.key
                )));
            }
            let key = format!("{}{}", file.namespace, a.key);
            let (ty, min, max) =
                parse_type(&a.ty).map_err(|why| invalid(format!("{key}: {why}")))?;
            let mut spec = AttrSpec {
                key: key.clone(),
                ty,
                required: a.required,
                default: None,
                min,
                max,
                documentation: a.documentation,
                derived: false,
            };
            if let Some(d) = a.default {
                let v = from_yaml(&spec, &d).map_err(|e| invalid(format!("default: {e}")))?;
                check_range(&spec, &v).map_err(|e| invalid(format!("default: {e}")))?;
                spec.default = Some(v);
            }
            if self.specs.contains_key(&key) || new.iter().any(|s: &AttrSpec| s.key == key) {
                return Err(invalid(format!("attribute {key} is declared twice")));
            }
            new.push(spec);
        }
        let version = match file.version {
            serde_norway::Value::String(s) => s,
            other => serde_norway::to_string(&other)
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        };
        self.loaded.push(format!("{} {}", file.name, version));
        self.specs
            .extend(new.into_iter().map(|s| (s.key.clone(), s)));
        Ok(())
    }

    /// The schemas loaded, as `name version`.
    pub fn loaded(&self) -> &[String] {
        &self.loaded
    }

    /// The declaration of `key`, if any.
    pub fn spec(&self, key: &str) -> Option<&AttrSpec> {
        self.specs.get(key)
    }

    /// Parses `text` as a value of `key`'s declared type (for command lines and YAML).
    ///
    /// # Errors
    /// [`AttrError::Unknown`] or [`AttrError::Parse`].
    pub fn parse_value(&self, key: &str, text: &str) -> Result<AttrValue, AttrError> {
        let spec = self
            .specs
            .get(key)
            .ok_or_else(|| AttrError::Unknown(key.to_string()))?;
        parse_text(spec, text)
    }

    /// Sets attributes from a YAML mapping of key to value (as `mstro_cdo_attribute_set_yaml`),
    /// typed by the schemas; keys may be relative to `namespace`.
    ///
    /// # Errors
    /// Bad YAML ([`AttrError::Parse`] on key `"<yaml>"`), unknown keys, wrong types.
    pub fn set_yaml(
        &self,
        attrs: &mut Attributes,
        namespace: &str,
        yaml: &str,
    ) -> Result<(), AttrError> {
        let map: BTreeMap<String, serde_norway::Value> =
            serde_norway::from_str(yaml).map_err(|_| AttrError::Parse {
                key: "<yaml>".into(),
                text: yaml.chars().take(80).collect(),
                expected: AttrType::Str,
            })?;
        for (k, v) in map {
            let key = if k.starts_with('.') {
                k
            } else {
                format!("{namespace}{k}")
            };
            let spec = self
                .specs
                .get(&key)
                .ok_or_else(|| AttrError::Unknown(key.clone()))?;
            attrs.insert(key, from_yaml(spec, &v)?);
        }
        Ok(())
    }

    /// Checks attributes for `seal`: fills defaults, then refuses unknown keys (or drops
    /// them), wrong types, values out of range, pool-set keys and missing required ones.
    ///
    /// # Errors
    /// The first [`AttrError`] found.
    pub fn check(&self, attrs: &mut Attributes) -> Result<(), AttrError> {
        if self.drop_unknown {
            attrs.retain(|k, _| {
                let known = self.specs.contains_key(k);
                if !known {
                    tracing::debug!("dropping attribute {k}: in no schema");
                }
                known
            });
        }
        for (key, value) in attrs.iter() {
            let spec = self
                .specs
                .get(key)
                .ok_or_else(|| AttrError::Unknown(key.clone()))?;
            if spec.derived {
                return Err(AttrError::Derived(key.clone()));
            }
            if AttrType::of(value) != spec.ty {
                return Err(AttrError::Type {
                    key: key.clone(),
                    expected: spec.ty,
                    got: AttrType::of(value),
                });
            }
            check_range(spec, value)?;
        }
        for spec in self.specs.values() {
            if attrs.contains_key(&spec.key) {
                continue;
            }
            match &spec.default {
                Some(d) => {
                    attrs.insert(spec.key.clone(), d.clone());
                }
                None if spec.required => return Err(AttrError::Missing(spec.key.clone())),
                None => {}
            }
        }
        Ok(())
    }
}

/// Parses `int(min=0, max=10)` and the like.
fn parse_type(text: &str) -> Result<(AttrType, Option<f64>, Option<f64>), String> {
    let text = text.trim();
    let (name, args) = match text.split_once('(') {
        Some((n, rest)) => (
            n.trim(),
            rest.strip_suffix(')')
                .ok_or_else(|| format!("type {text:?} lacks its closing ')'"))?,
        ),
        None => (text, ""),
    };
    let ty = match name {
        "int" => AttrType::Int,
        "uint" => AttrType::Uint,
        "str" => AttrType::Str,
        "bool" => AttrType::Bool,
        "double" | "num" => AttrType::Double,
        "timestamp" => AttrType::Timestamp,
        "blob" => AttrType::Blob,
        other => {
            return Err(format!(
                "unknown type {other:?}; use int(), uint(), str(), bool(), double(), timestamp() or blob()"
            ));
        }
    };
    let (mut min, mut max) = (None, None);
    for arg in args.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let (k, v) = arg
            .split_once('=')
            .ok_or_else(|| format!("type argument {arg:?} is not name=value"))?;
        let v: f64 = v
            .trim()
            .parse()
            .map_err(|_| format!("type argument {arg:?}: {v:?} is not a number"))?;
        match (k.trim(), ty) {
            (_, AttrType::Bool | AttrType::Timestamp) => {
                return Err(format!("{ty} takes no arguments, got {arg:?}"));
            }
            ("min", _) => min = Some(v),
            ("max", _) => max = Some(v),
            (other, _) => return Err(format!("unknown type argument {other:?}; use min= or max=")),
        }
    }
    Ok((ty, min, max))
}

fn check_range(spec: &AttrSpec, v: &AttrValue) -> Result<(), AttrError> {
    let x = match v {
        AttrValue::Int(i) => *i as f64,
        AttrValue::Uint(u) => *u as f64,
        AttrValue::Double(d) => *d,
        AttrValue::Str(s) => s.len() as f64,
        AttrValue::Blob(b) => b.len() as f64,
        AttrValue::Bool(_) | AttrValue::Timestamp(_) => return Ok(()),
    };
    let (min, max) = (
        spec.min.unwrap_or(f64::NEG_INFINITY),
        spec.max.unwrap_or(f64::INFINITY),
    );
    if x.is_nan() || x < min || x > max {
        return Err(AttrError::Range {
            key: spec.key.clone(),
            value: x.to_string(),
            min,
            max,
        });
    }
    Ok(())
}

fn parse_text(spec: &AttrSpec, text: &str) -> Result<AttrValue, AttrError> {
    let v = parse_unchecked(spec, text)?;
    check_range(spec, &v)?;
    Ok(v)
}

/// `text` as a value of `spec`'s type, without its bounds (a selector may compare against
/// any value).
pub(crate) fn parse_unchecked(spec: &AttrSpec, text: &str) -> Result<AttrValue, AttrError> {
    let bad = || AttrError::Parse {
        key: spec.key.clone(),
        text: text.chars().take(80).collect(),
        expected: spec.ty,
    };
    let t = text.trim();
    let v = match spec.ty {
        AttrType::Int => AttrValue::Int(t.parse().map_err(|_| bad())?),
        AttrType::Uint => AttrValue::Uint(t.parse().map_err(|_| bad())?),
        AttrType::Double => AttrValue::Double(t.parse().map_err(|_| bad())?),
        AttrType::Bool => AttrValue::Bool(match t.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => true,
            "false" | "0" | "no" | "off" => false,
            _ => return Err(bad()),
        }),
        AttrType::Str => AttrValue::Str(text.to_string()),
        AttrType::Blob => AttrValue::Blob(text.as_bytes().to_vec()),
        AttrType::Timestamp => AttrValue::Timestamp(match t.parse::<i128>() {
            Ok(ns) => ns,
            Err(_) => parse_rfc3339(t).ok_or_else(bad)?,
        }),
    };
    Ok(v)
}

fn from_yaml(spec: &AttrSpec, v: &serde_norway::Value) -> Result<AttrValue, AttrError> {
    use serde_norway::Value;
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => {
            return Err(AttrError::Parse {
                key: spec.key.clone(),
                text: format!("{v:?}"),
                expected: spec.ty,
            });
        }
    };
    parse_text(spec, &text)
}

/// Nanoseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, milliseconds): how
/// timestamps are shown to people (the inverse of what [`Schemas`] parses for
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

/// `YYYY-MM-DDTHH:MM:SS[.frac]Z` (UTC) to nanoseconds since the epoch.
fn parse_rfc3339(t: &str) -> Option<i128> {
    let t = t.strip_suffix('Z').or_else(|| t.strip_suffix("+00:00"))?;
    let (date, time) = t.split_once(['T', ' '])?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut h = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    if !frac.is_empty() && (frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let nanos: i128 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(i128::from(secs) * 1_000_000_000 + nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_format_as_they_parse() {
        for t in [
            "1970-01-01T00:00:00.000Z",
            "2026-11-25T23:40:01.123Z",
            "2000-02-29T12:00:59.999Z",
            "1969-12-31T23:59:59.500Z",
        ] {
            let ns = parse_rfc3339(t).expect("parses");
            assert_eq!(format_timestamp(ns), t);
        }
    }

    const ECMWF: &str = r#"
schema-name: ecmwf
schema-version: 1
schema-namespace: .maestro.ecmwf.
maestro-attributes:
  - key: step
    type: int(min=0)
    required: true
    documentation: forecast step
  - key: param
    type: str(max=8)
    default: "2t"
  - key: date
    type: timestamp()
  - key: scale
    type: double(min=0, max=1)
"#;

    fn schemas() -> Schemas {
        let mut s = Schemas::builtin();
        s.load_str(ECMWF, "ecmwf.yaml").expect("valid schema");
        s
    }

    #[test]
    fn defaults_fill_and_good_attributes_pass() {
        let s = schemas();
        let mut a = Attributes::new();
        a.insert(".maestro.ecmwf.step".into(), AttrValue::Int(3));
        a.insert(attr::LAYOUT_ORDER.into(), AttrValue::Int(1));
        s.check(&mut a).expect("valid");
        assert_eq!(
            a.get(".maestro.ecmwf.param"),
            Some(&AttrValue::Str("2t".into()))
        );
        assert_eq!(s.loaded(), ["maestro-core 1", "ecmwf 1"]);
    }

    #[test]
    fn every_bad_attribute_is_a_typed_error() {
        let s = schemas();
        let check = |k: &str, v: AttrValue| {
            let mut a = Attributes::new();
            a.insert(".maestro.ecmwf.step".into(), AttrValue::Int(0));
            a.insert(k.into(), v);
            s.check(&mut a)
        };
        assert!(matches!(
            check(".user.x", AttrValue::Int(1)),
            Err(AttrError::Unknown(_))
        ));
        assert!(matches!(
            check(".maestro.ecmwf.step", AttrValue::Str("3".into())),
            Err(AttrError::Type {
                expected: AttrType::Int,
                got: AttrType::Str,
                ..
            })
        ));
        assert!(matches!(
            check(".maestro.ecmwf.step", AttrValue::Int(-1)),
            Err(AttrError::Range { .. })
        ));
        assert!(matches!(
            check(
                ".maestro.ecmwf.param",
                AttrValue::Str("too long a name".into())
            ),
            Err(AttrError::Range { .. })
        ));
        assert!(matches!(
            check(".maestro.ecmwf.scale", AttrValue::Double(f64::NAN)),
            Err(AttrError::Range { .. })
        ));
        assert!(matches!(
            check(attr::NAME, AttrValue::Str("x".into())),
            Err(AttrError::Derived(_))
        ));
        assert!(matches!(
            check(attr::LAYOUT_ORDER, AttrValue::Int(2)),
            Err(AttrError::Range { .. })
        ));
        let mut none = Attributes::new();
        assert_eq!(
            s.check(&mut none),
            Err(AttrError::Missing(".maestro.ecmwf.step".into()))
        );
        // Dropping unknown keys instead.
        let lenient = schemas().drop_unknown(true);
        let mut a = Attributes::new();
        a.insert(".maestro.ecmwf.step".into(), AttrValue::Int(0));
        a.insert(".user.x".into(), AttrValue::Int(1));
        lenient.check(&mut a).expect("dropped");
        assert!(!a.contains_key(".user.x"));
    }

    #[test]
    fn text_and_yaml_values_parse_by_declared_type() {
        let s = schemas();
        assert_eq!(
            s.parse_value(".maestro.ecmwf.step", " 12 "),
            Ok(AttrValue::Int(12))
        );
        assert_eq!(
            s.parse_value(".maestro.ecmwf.date", "1970-01-02T00:00:01.5Z"),
            Ok(AttrValue::Timestamp(86_401_500_000_000))
        );
        assert_eq!(
            s.parse_value(".maestro.ecmwf.date", "2024-02-29T12:00:00Z"),
            Ok(AttrValue::Timestamp(1_709_208_000_000_000_000))
        );
        assert!(matches!(
            s.parse_value(".maestro.ecmwf.date", "2024-13-01T00:00:00Z"),
            Err(AttrError::Parse { .. })
        ));
        assert!(matches!(
            s.parse_value(".maestro.ecmwf.step", "three"),
            Err(AttrError::Parse { .. })
        ));
        let mut a = Attributes::new();
        s.set_yaml(
            &mut a,
            ".maestro.ecmwf.",
            "step: 4\nparam: tp\n.maestro.core.cdo.persist: true",
        )
        .expect("yaml");
        assert_eq!(a.get(".maestro.ecmwf.step"), Some(&AttrValue::Int(4)));
        assert_eq!(
            a.get(".maestro.core.cdo.persist"),
            Some(&AttrValue::Bool(true))
        );
        assert!(matches!(
            s.set_yaml(&mut a, ".maestro.ecmwf.", "nope: 1"),
            Err(AttrError::Unknown(_))
        ));
        assert!(matches!(
            s.set_yaml(&mut a, ".maestro.ecmwf.", "[not, a, map]"),
            Err(AttrError::Parse { .. })
        ));
    }

    #[test]
    fn bad_schemas_say_what_is_wrong() {
        let bad = |yaml: &str| {
            let e = Schemas::builtin()
                .load_str(yaml, "t.yaml")
                .expect_err("invalid");
            e.to_string()
        };
        let head = "schema-name: t\nschema-version: 1\nschema-namespace: .t.\n";
        assert!(bad("{").contains("t.yaml"));
        assert!(bad("schema-name: t\n").contains("schema-version"));
        assert!(
            bad("schema-name: t\nschema-version: 1\nschema-namespace: t\n").contains("namespace")
        );
        assert!(
            bad(&format!(
                "{head}maestro-attributes:\n  - key: a\n    type: integer()\n"
            ))
            .contains("unknown type")
        );
        assert!(
            bad(&format!(
                "{head}maestro-attributes:\n  - key: a\n    type: int(lo=1)\n"
            ))
            .contains("unknown type argument")
        );
        assert!(
            bad(&format!(
                "{head}maestro-attributes:\n  - key: a\n    type: int()\n    default: x\n"
            ))
            .contains("default")
        );
        assert!(
            bad(&format!("{head}maestro-attributes:\n  - key: a\n    type: int()\n  - key: a\n    type: str()\n"))
                .contains("twice")
        );
        assert!(
            bad(&format!(
                "{head}maestro-attributes:\n  - key: a\n    type: int()\n    colour: red\n"
            ))
            .contains("colour")
        );
    }
}
