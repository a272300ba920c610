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

/// Every path of the project that README.md, BENCHMARKS.md and docs/ cite (in backticks:
/// `src/run/host/upcalls.rs`, `examples/pgen/`, or a Rust source relative to its crate,
/// `manager/plan.rs`) names a file or directory of the checkout: docs that drift fail
/// here.
#[test]
fn the_paths_the_docs_cite_exist() {
    let repo = common::repo();
    let listed = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(&repo)
        .output()
        .expect("git ls-files");
    assert!(listed.status.success(), "git ls-files: {listed:?}");
    let files: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| format!("/{l}"))
        .collect();
    let cited = |token: &str| -> bool {
        let dir = token.ends_with('/');
        let looks_like_path = token.contains('/')
            && !token.starts_with('/')
            && !token.starts_with('.')
            && token
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        let ext = [
            ".rs", ".c", ".h", ".cpp", ".py", ".sh", ".md", ".yaml", ".toml", ".json",
        ];
        // Ours: a Rust source (at the top or relative to a crate), or under a top-level
        // entry of the checkout; `slurm/spank.h` or `PREFIX/include/maestro.h` are not.
        let top = token.split('/').next().unwrap_or_default();
        let ours = token.ends_with(".rs") || repo.join(top).exists();
        looks_like_path && ours && (dir || ext.iter().any(|e| token.ends_with(e)))
    };
    let mut docs = vec![repo.join("README.md"), repo.join("BENCHMARKS.md")];
    let mut dirs = vec![repo.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
    }
    let mut missing = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("a doc");
        for token in text.split('`').skip(1).step_by(2).filter(|t| cited(t)) {
            let suffix = format!("/{token}");
            let found = if token.ends_with('/') {
                files.iter().any(|f| f.contains(&suffix))
            } else {
                files.iter().any(|f| f.ends_with(&suffix))
            };
            if !found {
                missing.push(format!(
                    "{}: `{token}`",
                    doc.strip_prefix(&repo).unwrap_or(doc).display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs cite that the checkout does not have:\n{}",
        missing.join("\n")
    );
}
