//! Selectors as the pool's tools take them from a command line or a query: typed by the
//! schemas of the environment (`MSTRO_SCHEMA_PATH`, `MSTRO_SCHEMA_LIST`), as the apps'
//! subscriptions are (`maestro pool ls`, the launcher's `maestro.pool.cdos` query).

use pool::selector::{Expr, Selector};

/// Parses a selector as subscriptions take them (relative keys in `namespace`, literals
/// typed by the schemas of `MSTRO_SCHEMA_PATH`/`MSTRO_SCHEMA_LIST`), for a page of CDOs.
///
/// # Errors
/// The schemas' or the selector's error, as text.
pub fn parse(text: &str, namespace: &str) -> Result<Box<Expr>, String> {
    parse_checked(text, namespace).map(|(expr, _)| expr)
}

/// As [`parse`], with the keys it names that no schema known here declares: no
/// CDO carries them (a seal refuses undeclared keys), so they are most likely misspelled.
///
/// # Errors
/// As [`parse`].
pub fn parse_checked(text: &str, namespace: &str) -> Result<(Box<Expr>, Vec<String>), String> {
    let schemas = pool::schema::from_env().map_err(|e| e.to_string())?;
    let selector = Selector::parse(text, namespace, &schemas).map_err(|e| e.to_string())?;
    let unknown = selector
        .expr()
        .keys()
        .into_iter()
        .filter(|k| schemas.spec(k).is_none())
        .map(String::from)
        .collect();
    Ok((Box::new(selector.expr().clone()), unknown))
}
