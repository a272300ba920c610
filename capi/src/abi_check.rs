//! The header against the library: `include/maestro.h` is written by hand, so a test
//! compiles a C program against it that prints what the C compiler makes of it (the
//! status and event-kind enumerators, found by reading the header, and the event structs'
//! sizes and field offsets) and compares every figure with the Rust side.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const HEADER: &str = include_str!("../include/maestro.h");

/// The enumerators `NAME = ...` of the C enum that follows `opening` in the header.
fn enumerators(opening: &str) -> Vec<String> {
    let start = HEADER
        .find(opening)
        .unwrap_or_else(|| panic!("{opening} not in the header"));
    let body = &HEADER[start..];
    let body = &body[..body.find('}').expect("the enum ends")];
    body.lines()
        .filter_map(|l| {
            l.trim()
                .split_once(" = ")
                .map(|(n, _)| n.trim().to_string())
        })
        .filter(|n| n.starts_with("MSTRO_"))
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

#[test]
fn the_header_says_what_the_library_does() {
    let statuses = enumerators("typedef enum mstro_status_ {");
    let kinds = enumerators("enum mstro_pool_event_kind {");
    let layout = crate::events::layout();
    let mut program = String::from(
        "#include <maestro.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
    for name in statuses.iter().chain(&kinds) {
        program.push_str(&format!("  printf(\"{name} %ld\\n\", (long){name});\n"));
    }
    for (what, _) in &layout {
        program.push_str(&format!("  printf(\"{what} %zu\\n\", {what});\n"));
    }
    program.push_str("  return 0;\n}\n");
    let c = c_figures(&program);

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
    for (what, size) in layout {
        assert_eq!(c[&what], size.to_string(), "{what}");
    }
}
