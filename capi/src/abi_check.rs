//! The header against the library, beyond the prototypes (which `build.rs` checks at
//! compile time): a test compiles a C program against `include/maestro.h` that prints what
//! the C compiler makes of it (the status and event-kind enumerators, found by reading the
//! header, and the event structs' sizes and field offsets, which the library's own event
//! node must match since it stands for `struct mstro_pool_event_`) and compares every
//! figure with the Rust side.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const HEADER: &str = include_str!("../include/maestro.h");

/// The enumerators of the C enum that follows `opening` in the header, in order (each
/// on a line of its own, with or without `= value`).
fn enumerators(opening: &str) -> Vec<String> {
    let start = HEADER
        .find(opening)
        .unwrap_or_else(|| panic!("{opening} not in the header"));
    let body = &HEADER[start + opening.len()..];
    let body = &body[..body.find('}').expect("the enum ends")];
    body.lines()
        .filter_map(|l| {
            let name = l.trim().split([' ', ',', '=']).next()?;
            name.starts_with("MSTRO_").then(|| name.to_string())
        })
        .collect()
}

/// The `#define MSTRO_ATTR_CORE_...` attribute names of the header.
fn attribute_names() -> Vec<String> {
    HEADER
        .lines()
        .filter_map(|l| l.strip_prefix("#define MSTRO_ATTR_CORE_"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| format!("MSTRO_ATTR_CORE_{n}"))
        .collect()
}

/// Compiles and runs `program` against the header; its `name value` lines.
fn c_figures(program: &str) -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("abi.c");
    std::fs::write(&src, program).expect("write the program");
    let exe = dir.path().join("abi");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let built = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-I"])
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe).output().expect("run the program");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `NotTwice` -> `NOT_TWICE`.
fn upper_snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The C program printing every figure: enumerators and attribute names by name, sizes
/// and offsets as `layout` names them.
fn figures_program(names: &[&String], strings: &[String], layout: &[(String, usize)]) -> String {
    let mut program = String::from(
        "#include <maestro.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
    for name in names {
        program.push_str(&format!("  printf(\"{name} %ld\\n\", (long){name});\n"));
    }
    for name in strings {
        program.push_str(&format!("  printf(\"{name} %s\\n\", {name});\n"));
    }
    for (what, _) in layout {
        program.push_str(&format!("  printf(\"{what} %zu\\n\", {what});\n"));
    }
    program.push_str("  return 0;\n}\n");
    program
}

#[test]
fn the_header_says_what_the_library_does() {
    let statuses = enumerators("typedef enum mstro_status_ {");
    let kinds = enumerators("enum mstro_pool_event_kind {");
    let value_types = enumerators("enum mstro_cdo_attr_value_type {");
    let options = enumerators("enum mstro_subscription_opts_ {");
    let names = attribute_names();
    let mut layout = crate::events::layout();
    layout.extend(crate::attrs::layout());
    let all: Vec<&String> = [&statuses, &kinds, &value_types, &options]
        .into_iter()
        .flatten()
        .collect();
    let c = c_figures(&figures_program(&all, &names, &layout));

    let rust_statuses: Vec<String> = mstro::Status::ALL
        .iter()
        .map(|s| format!("MSTRO_{}", upper_snake(&format!("{s:?}"))))
        .collect();
    assert_eq!(statuses, rust_statuses, "the status enumerators, in order");
    for s in mstro::Status::ALL {
        let name = format!("MSTRO_{}", upper_snake(&format!("{s:?}")));
        assert_eq!(c[&name], (s as i32).to_string(), "{name}");
    }
    let rust_kinds: Vec<String> = std::iter::once("MSTRO_POOL_EVENT_NONE".to_string())
        .chain(mstro::EventKind::ALL.iter().map(|k| {
            format!(
                "MSTRO_POOL_EVENT_{}",
                k.name().replace('-', "_").to_uppercase()
            )
        }))
        .collect();
    assert_eq!(kinds, rust_kinds, "the event kinds, in order");
    for k in mstro::EventKind::ALL {
        let name = format!(
            "MSTRO_POOL_EVENT_{}",
            k.name().replace('-', "_").to_uppercase()
        );
        assert_eq!(c[&name], k.bit().to_string(), "{name}");
    }
    let rust_types = crate::attrs::value_types();
    assert_eq!(
        value_types,
        rust_types
            .iter()
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>(),
        "the attribute value types, in order"
    );
    for (name, value) in rust_types {
        assert_eq!(c[name], value.to_string(), "{name}");
    }
    use mstro::SubscriptionOptions as O;
    let rust_options = [
        ("MSTRO_SUBSCRIPTION_OPTS_DEFAULT", O::DEFAULT),
        ("MSTRO_SUBSCRIPTION_OPTS_SIGNAL_BEFORE", O::SIGNAL_BEFORE),
        ("MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK", O::REQUIRE_ACK),
        (
            "MSTRO_SUBSCRIPTION_OPTS_NO_LOCAL_EVENTS",
            O::NO_LOCAL_EVENTS,
        ),
        ("MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE", O::CURRENT_STATE),
    ];
    assert_eq!(
        options,
        rust_options.map(|(n, _)| n.to_string()),
        "the subscription options, in order"
    );
    for (name, value) in rust_options {
        assert_eq!(c[name], value.to_string(), "{name}");
    }
    // Attribute names the library knows by a constant are the header's strings.
    use mstro::attr;
    for (name, value) in [
        ("NAME", attr::NAME),
        ("RAW_PTR", mstro::RAW_PTR),
        ("SCOPE_LOCAL_SIZE", attr::LOCAL_SIZE),
        ("LAYOUT_ORDER", attr::LAYOUT_ORDER),
        ("ISGROUP", attr::IS_GROUP),
        ("PROVIDER", attr::PROVIDER),
        ("INTEGRITY", attr::INTEGRITY),
        ("CHECKSUM", attr::CHECKSUM),
    ] {
        let name = format!("MSTRO_ATTR_CORE_CDO_{name}");
        assert_eq!(c[&name], value, "{name}");
    }
    // Every other name the header defines is one the built-in schema declares.
    mstro::init(Some("abi"), Some("check"), 0).expect("init");
    for name in &names {
        let key = &c[name];
        assert!(
            mstro::cdo_attribute_type(key).is_ok(),
            "{name} ({key}) is no attribute of the built-in schema"
        );
    }
    mstro::finalize().expect("finalize");
    for (what, size) in layout {
        assert_eq!(c[&what], size.to_string(), "{what}");
    }
}
