//! Schemas: loading, types, defaults, checks and their errors.

use super::values::parse_rfc3339;
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
    assert!(bad("schema-name: t\nschema-version: 1\nschema-namespace: t\n").contains("namespace"));
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
        bad(&format!(
            "{head}maestro-attributes:\n  - key: a\n    type: int()\n  - key: a\n    type: str()\n"
        ))
        .contains("twice")
    );
    assert!(
        bad(&format!(
            "{head}maestro-attributes:\n  - key: a\n    type: int()\n    colour: red\n"
        ))
        .contains("colour")
    );
}

#[test]
fn the_drop_unknown_setting_is_a_switch_or_a_clear_error() {
    for (v, want) in [
        ("1", true),
        (" ON", true),
        ("yes", true),
        ("", false),
        ("off", false),
    ] {
        assert_eq!(Schemas::drop_unknown_setting(v).expect(v), want, "{v:?}");
    }
    let e = Schemas::drop_unknown_setting("sometimes").expect_err("not a switch");
    assert!(
        e.to_string()
            .starts_with("MSTRO_DROP_UNKNOWN_ATTRIBUTES=\"sometimes\": expected 1/0"),
        "{e}"
    );
}
