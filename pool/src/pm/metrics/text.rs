//! The two text formats a scraper may ask for, written from one description of the
//! figures: OpenMetrics 1.0 (`application/openmetrics-text`, what Prometheus asks for
//! first) and Prometheus' text format 0.0.4 (`text/plain`, what `curl`, `promtool check
//! metrics` and older scrapers read). They differ in where a counter's `_total` goes (the
//! family's name in 0.0.4, only the samples' in OpenMetrics), in info metrics and in the
//! closing `# EOF`. Pure: the server picks the format from the request's `Accept`.

use std::fmt::Write;

/// What a family measures, as the formats type it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (samples named `<name>_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Facts as labels on a sample of value 1 (samples named `<name>_info`).
    Info,
}

/// A sample's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A count, written exactly.
    Int(u64),
    /// A measurement (seconds, a rate).
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

/// Label names and values of one sample.
pub type Labels = Vec<(&'static str, String)>;

/// One metric family: its name (without `_total` or `_info`), help text, kind and samples.
#[derive(Clone, Debug)]
pub struct Family {
    /// The family's name, e.g. `maestro_pm_operations`.
    pub name: String,
    /// What it measures, in a sentence.
    pub help: &'static str,
    /// Counter, gauge or info.
    pub kind: Kind,
    /// Its samples (none: the family is still described, so dashboards find it).
    pub samples: Vec<(Labels, Value)>,
}

impl Family {
    /// A family of one unlabelled sample.
    pub fn one(name: String, help: &'static str, kind: Kind, value: impl Into<Value>) -> Family {
        Family {
            name,
            help,
            kind,
            samples: vec![(Vec::new(), value.into())],
        }
    }
}

/// The text format of a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0.
    OpenMetrics,
    /// Prometheus' text format 0.0.4.
    Prometheus,
}

impl Format {
    /// The format a request's `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` (with a quality above 0), else 0.0.4, which every
    /// scraper reads.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let wants = |range: &str| {
            let mut parts = range.split(';').map(str::trim);
            parts
                .next()
                .is_some_and(|t| t.eq_ignore_ascii_case("application/openmetrics-text"))
                && !parts.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f64>().ok())
                        .is_some_and(|q| q <= 0.0)
                })
        };
        match accept {
            Some(a) if a.split(',').any(wants) => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    /// The `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// `families` in `format`.
pub fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::new();
    for f in families {
        let (family_name, suffix, kind) = match (f.kind, format) {
            (Kind::Counter, Format::OpenMetrics) => (f.name.clone(), "_total", "counter"),
            (Kind::Counter, Format::Prometheus) => (format!("{}_total", f.name), "", "counter"),
            (Kind::Gauge, _) => (f.name.clone(), "", "gauge"),
            (Kind::Info, Format::OpenMetrics) => (f.name.clone(), "_info", "info"),
            (Kind::Info, Format::Prometheus) => (format!("{}_info", f.name), "", "gauge"),
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "# HELP {family_name} {}",
            escape(f.help, format, false)
        );
        let _ = writeln!(out, "# TYPE {family_name} {kind}");
        for (labels, value) in &f.samples {
            out += &family_name;
            out += suffix;
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    let comma = if i == 0 { "" } else { "," };
                    let _ = write!(out, "{comma}{k}=\"{}\"", escape(v, format, true));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", number(*value));
        }
    }
    if format == Format::OpenMetrics {
        out += "# EOF\n";
    }
    out
}

/// `s` escaped for a label value (`\\`, `\"`, `\n`) or a help text (`\\`, `\n`; and `\"`
/// in OpenMetrics).
fn escape(s: &str, format: Format, label: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out += "\\\\",
            '\n' => out += "\\n",
            '"' if label || format == Format::OpenMetrics => out += "\\\"",
            c => out.push(c),
        }
    }
    out
}

fn number(v: Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Float(x) if x.is_nan() => "NaN".into(),
        Value::Float(x) if x.is_infinite() => if x > 0.0 { "+Inf" } else { "-Inf" }.into(),
        Value::Float(x) => format!("{x:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn families() -> Vec<Family> {
        vec![
            Family {
                name: "m_ops".into(),
                help: "Operations \"handled\"\nby kind \\ op",
                kind: Kind::Counter,
                samples: vec![
                    (vec![("op", "offer".into())], 5.into()),
                    (vec![("op", "a\"b\\c\nd".into())], 1.into()),
                ],
            },
            Family::one("m_apps".into(), "Apps", Kind::Gauge, 2),
            Family::one("m_start_time_seconds".into(), "Start", Kind::Gauge, 1.5e9),
            Family {
                name: "m_build".into(),
                help: "Build",
                kind: Kind::Info,
                samples: vec![(vec![("version", "0.1.0".into())], 1.into())],
            },
            Family {
                name: "m_empty".into(),
                help: "None yet",
                kind: Kind::Counter,
                samples: Vec::new(),
            },
        ]
    }

    #[test]
    fn prometheus_text_names_counters_with_total_and_has_no_eof() {
        let text = encode(&families(), Format::Prometheus);
        assert_eq!(
            text,
            "# HELP m_ops_total Operations \"handled\"\\nby kind \\\\ op\n\
             # TYPE m_ops_total counter\n\
             m_ops_total{op=\"offer\"} 5\n\
             m_ops_total{op=\"a\\\"b\\\\c\\nd\"} 1\n\
             # HELP m_apps Apps\n\
             # TYPE m_apps gauge\n\
             m_apps 2\n\
             # HELP m_start_time_seconds Start\n\
             # TYPE m_start_time_seconds gauge\n\
             m_start_time_seconds 1500000000.0\n\
             # HELP m_build_info Build\n\
             # TYPE m_build_info gauge\n\
             m_build_info{version=\"0.1.0\"} 1\n\
             # HELP m_empty_total None yet\n\
             # TYPE m_empty_total counter\n"
        );
    }

    #[test]
    fn openmetrics_names_families_without_suffixes_and_ends_with_eof() {
        let text = encode(&families(), Format::OpenMetrics);
        for line in [
            "# HELP m_ops Operations \\\"handled\\\"\\nby kind \\\\ op",
            "# TYPE m_ops counter",
            "m_ops_total{op=\"offer\"} 5",
            "# TYPE m_build info",
            "m_build_info{version=\"0.1.0\"} 1",
            "# TYPE m_empty counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert!(text.ends_with("m_build_info{version=\"0.1.0\"} 1\n# HELP m_empty None yet\n# TYPE m_empty counter\n# EOF\n"));
    }

    #[test]
    fn the_accept_header_picks_the_format() {
        let om = Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        );
        assert_eq!(Format::from_accept(om), Format::OpenMetrics);
        for plain in [
            None,
            Some("*/*"),
            Some("text/plain"),
            Some("application/openmetrics-text;q=0, text/plain"),
            Some("garbage;;;,"),
        ] {
            assert_eq!(Format::from_accept(plain), Format::Prometheus, "{plain:?}");
        }
        assert!(
            Format::Prometheus
                .content_type()
                .starts_with("text/plain; version=0.0.4")
        );
    }

    #[test]
    fn odd_numbers_are_written_as_the_formats_spell_them() {
        assert_eq!(number(Value::Float(f64::NAN)), "NaN");
        assert_eq!(number(Value::Float(f64::INFINITY)), "+Inf");
        assert_eq!(number(Value::Float(f64::NEG_INFINITY)), "-Inf");
        assert_eq!(number(Value::Float(0.25)), "0.25");
        assert_eq!(number(Value::Int(u64::MAX)), "18446744073709551615");
    }
}
