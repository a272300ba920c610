//! Attribute types and values as schemas write them: `int(min=0, max=10)` and friends,
//! values from YAML defaults and from text, range checks, and timestamps in RFC 3339.

use super::{AttrError, AttrSpec, AttrType};
use crate::attr::AttrValue;

/// Parses `int(min=0, max=10)` and the like.
pub(super) fn parse_type(text: &str) -> Result<(AttrType, Option<f64>, Option<f64>), String> {
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

pub(super) fn check_range(spec: &AttrSpec, v: &AttrValue) -> Result<(), AttrError> {
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

pub(super) fn parse_text(spec: &AttrSpec, text: &str) -> Result<AttrValue, AttrError> {
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

pub(super) fn from_yaml(spec: &AttrSpec, v: &serde_norway::Value) -> Result<AttrValue, AttrError> {
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

/// `YYYY-MM-DDTHH:MM:SS[.frac]Z` (UTC) to nanoseconds since the epoch.
pub(super) fn parse_rfc3339(t: &str) -> Option<i128> {
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
