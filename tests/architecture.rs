//! The shape of the code against what the documents say of it: `scripts/architecture.py`
//! (the script a developer runs to regenerate the crate diagram) checks that the diagram in
//! `docs/architecture.md` is the one `cargo metadata` gives and that no crate's modules
//! depend on each other in a cycle.

mod common;

use std::process::Command;

#[test]
fn the_crate_diagram_is_generated_and_no_modules_form_a_cycle() {
    let out = Command::new("python3")
        .arg(common::repo().join("scripts/architecture.py"))
        .arg("check")
        .output()
        .expect("run python3 scripts/architecture.py");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
