//! Attribute schemas: the types and checks of [`pool_core::schema`], and reading schema
//! files as the environment names them, which the sans-IO core does not do.

use std::path::{Path, PathBuf};

pub use pool_core::schema::*;

/// The built-in schema plus those `MSTRO_SCHEMA_PATH` (directories, `:`-separated; default
/// the working directory) and `MSTRO_SCHEMA_LIST` (file names, `;`-separated) name, with
/// `MSTRO_DROP_UNKNOWN_ATTRIBUTES`.
///
/// # Errors
/// [`SchemaError::NotFound`] for a listed file in no directory of the path;
/// [`SchemaError::Read`] and [`SchemaError::Invalid`] for a file that cannot be read or
/// is not a schema; [`SchemaError::Env`] for a malformed `MSTRO_DROP_UNKNOWN_ATTRIBUTES`.
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
            load_file(&mut s, &file)?;
        }
    }
    if let Ok(v) = std::env::var("MSTRO_DROP_UNKNOWN_ATTRIBUTES") {
        s = s.drop_unknown(Schemas::drop_unknown_setting(&v)?);
    }
    Ok(s)
}

/// Adds the schema in the file at `path` to `schemas`.
///
/// # Errors
/// [`SchemaError::Read`] for a file that cannot be read, [`SchemaError::Invalid`] for one
/// that is not a schema.
pub fn load_file(schemas: &mut Schemas, path: &Path) -> Result<(), SchemaError> {
    let text = std::fs::read_to_string(path).map_err(|source| SchemaError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    schemas.load_str(&text, &path.display().to_string())
}
