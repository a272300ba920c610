//! Attribute schemas, as in Maestro Core: YAML files that declare typed attributes under a
//! namespace, on top of the built-in `.maestro.core.cdo.` schema (the driver crate `pool`
//! reads the files `MSTRO_SCHEMA_PATH` and `MSTRO_SCHEMA_LIST` name: `pool::schema::from_env`;
//! this sans-IO core takes their text, [`Schemas::load_str`]). A client checks a CDO's attributes against them at `seal`:
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

#[cfg(test)]
mod tests;
mod values;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

pub use crate::attr::format_timestamp;
use crate::attr::{self, AttrValue, Attributes};
pub(crate) use values::parse_unchecked;
use values::{check_range, from_yaml, parse_text, parse_type};

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
    /// The value is of the declared type but not one the pool understands (why).
    #[error("attribute {key:?}: {why}")]
    Value {
        /// The key.
        key: String,
        /// What is wrong, and what to give.
        why: String,
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
  - key: transport
    type: str()
    documentation: how consumers get the bytes, GFS (a file under MSTRO_TRANSPORT_GFS_DIR) or RDMA (the producer's memory), whatever MSTRO_TRANSPORT_DEFAULT says
  - key: lifetime
    type: uint()
    documentation: how long the pool keeps a CDO its producer handed over at withdraw (GFS), in seconds from then (0 until the workflow ends)
  - key: persist
    type: bool()
    documentation: keep a kept CDO's file after the workflow ends (as DIR/maestro-persist-WORKFLOW/NAME)
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

    /// Whether `value` of `MSTRO_DROP_UNKNOWN_ATTRIBUTES` turns dropping unknown attributes
    /// on (`1`, `true`, `yes`, `on`) or off (`0`, `false`, `no`, `off`, empty), any case.
    ///
    /// # Errors
    /// [`SchemaError::Env`] for anything else.
    pub fn drop_unknown_setting(value: &str) -> Result<bool, SchemaError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "" | "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(SchemaError::Env {
                var: "MSTRO_DROP_UNKNOWN_ATTRIBUTES",
                value: value.to_string(),
                why: "expected 1/0, true/false, yes/no or on/off",
            }),
        }
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
        attr::wants_gfs(attrs).map_err(|why| AttrError::Value {
            key: attr::TRANSPORT.into(),
            why,
        })?;
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
