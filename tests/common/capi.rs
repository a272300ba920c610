//! The C API installed as users install it (`scripts/install.sh --debug`) and the C
//! programs built against it with `pkg-config`: shared by the C API, Python and cluster
//! tests. One installation per build, made under a lock by whichever test comes first.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::{FileLock, maestro, repo, run};

/// The installation the programs are built against, and the programs.
pub struct Installed {
    /// The installation prefix.
    pub prefix: PathBuf,
}

impl Installed {
    /// A C program built against the installation.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.prefix.join("examples").join(name)
    }

    /// The directory holding the `maestro_core` Python package (for `PYTHONPATH`).
    pub fn site_packages(&self) -> PathBuf {
        let lib = self.prefix.join("lib");
        std::fs::read_dir(&lib)
            .expect("lib dir")
            .flatten()
            .map(|e| e.path().join("site-packages"))
            .find(|p| p.join("maestro_core").exists())
            .unwrap_or_else(|| panic!("no maestro_core under {}", lib.display()))
    }
}

/// What the installation depends on: when any of it changed, install and build again.
fn stamp(sources: &[PathBuf]) -> String {
    let target = maestro().parent().expect("target dir").to_path_buf();
    let mut files = vec![
        target.join("libmaestro.so"),
        target.join("lib_native.so"),
        maestro(),
    ];
    files.extend_from_slice(sources);
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            format!("{} {:?} {}\n", f.display(), m.modified().ok(), m.len())
        })
        .collect()
}

/// Installs (once per build, shared by the test processes under a lock) and compiles the
/// C programs against the installation.
pub fn installed() -> Installed {
    let target = maestro().parent().expect("target dir").to_path_buf();
    let prefix = target.join("capi-test-prefix");
    // Each program, its source and the pkg-config packages it builds with.
    let programs: [(&str, PathBuf, &str); 14] = [
        ("first", repo().join("examples/c/first.c"), "maestro"),
        ("pm_tool", repo().join("examples/c/pm_tool.c"), "maestro"),
        ("producer", repo().join("examples/c/producer.c"), "maestro"),
        ("consumer", repo().join("examples/c/consumer.c"), "maestro"),
        (
            "local_pool",
            repo().join("examples/c/local_pool.c"),
            "maestro",
        ),
        ("bad_calls", repo().join("tests/c/bad_calls.c"), "maestro"),
        (
            "async_demand",
            repo().join("tests/c/async_demand.c"),
            "maestro",
        ),
        (
            "late_subscriber",
            repo().join("tests/c/late_subscriber.c"),
            "maestro",
        ),
        ("groups", repo().join("tests/c/groups.c"), "maestro"),
        ("layout", repo().join("tests/c/layout.c"), "maestro"),
        ("outlive", repo().join("tests/c/outlive.c"), "maestro"),
        ("api_cxx", repo().join("tests/c/api_cxx.cpp"), "maestro"),
        (
            "pgen_product",
            repo().join("examples/pgen/product.c"),
            "maestro",
        ),
        // PMIx too: its jobs' ranks and sizes, PMIx_Spawn.
        (
            "pgen_c",
            repo().join("examples/pgen/pgen_c.c"),
            "maestro pmix",
        ),
    ];
    let mut sources: Vec<PathBuf> = programs.iter().map(|(_, p, _)| p.clone()).collect();
    sources.push(repo().join("capi/include/maestro.h"));
    sources.push(repo().join("examples/c/common.h"));
    sources.push(repo().join("examples/pgen/pgen.h"));
    sources.push(repo().join("tests/c/expect.h"));
    sources.push(repo().join("python/maestro_core/__init__.py"));
    let _lock = FileLock::acquire(&target.join("capi-test-prefix.lock"));
    // The library is not a dependency of these tests: build it (a no-op when current), in
    // the profile the tests run in (`--release` for the cluster's scale tests), as
    // scripts/test.sh builds the workspace: a build of these packages alone unifies other
    // features and relinks `maestro` while other tests run it (seen: "spawning
    // target/debug/maestro: No such file or directory").
    let release = target.ends_with("release");
    let built = run(
        Command::new("cargo")
            .args(["build", "--workspace", "--all-targets"])
            .args(release.then_some("--release")),
        Duration::from_secs(1200),
    );
    assert_eq!(built.code(), Some(0), "cargo build: {}", built.stderr);
    let want = stamp(&sources);
    let stamp_file = prefix.join("stamp");
    if std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(want.as_str()) {
        return Installed { prefix };
    }
    let _ = std::fs::remove_dir_all(&prefix);
    let out = run(
        Command::new(repo().join("scripts/install.sh"))
            .args((!release).then_some("--debug"))
            .arg("--built")
            .arg(&prefix),
        Duration::from_secs(600),
    );
    assert_eq!(out.code(), Some(0), "install.sh: {out:?}");
    for f in [
        "include/maestro.h",
        "lib/libmaestro.so",
        "lib/libmaestro.a",
        "bin/maestro",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    let pc = prefix.join("lib/pkgconfig");
    let flags = |packages: &str| -> Vec<String> {
        let out = run(
            Command::new("pkg-config")
                .args(["--cflags", "--libs"])
                .args(packages.split(' '))
                .env("PKG_CONFIG_PATH", &pc),
            Duration::from_secs(10),
        );
        assert_eq!(out.code(), Some(0), "pkg-config {packages}: {out:?}");
        out.stdout.split_whitespace().map(String::from).collect()
    };
    std::fs::create_dir_all(prefix.join("examples")).expect("examples dir");
    for (name, src, packages) in &programs {
        let cxx = src.extension().is_some_and(|e| e == "cpp");
        let mut cc = Command::new(if cxx { "g++" } else { "cc" });
        if cxx {
            cc.arg("-std=c++11");
        } else {
            cc.args(["-std=c99", "-D_POSIX_C_SOURCE=200809L"]);
        }
        cc.args(["-Wall", "-Wextra", "-pedantic", "-Werror", "-g", "-o"])
            .arg(prefix.join("examples").join(name))
            .arg(src)
            .args(flags(packages))
            .arg("-lpthread");
        let out = run(&mut cc, Duration::from_secs(120));
        assert_eq!(out.code(), Some(0), "compiling {name}: {}", out.stderr);
    }
    std::fs::write(&stamp_file, want).expect("stamp");
    Installed { prefix }
}

/// The PM info line the C PM tool prints, and the thread reading the rest of its output.
pub fn tool_info(tool: &mut super::Group) -> (String, std::thread::JoinHandle<String>) {
    let stdout = tool.child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(info) = line
                .strip_prefix("MSTRO_POOL_MANAGER_INFO;")
                .and_then(|l| l.strip_suffix(';'))
            {
                let _ = tx.send(info.to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let info = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the PM tool prints its info");
    (info, reader)
}

/// The C PM tool saw two clients join and leave, and stopped.
pub fn assert_tool_saw_two(tool: super::Group, reader: std::thread::JoinHandle<String>) {
    let done = tool.wait(Duration::from_secs(30));
    assert_eq!(done.code(), Some(0), "{done:?}");
    let said = reader.join().expect("reader");
    assert!(
        said.contains("pm-tool: 2 joined, 2 left; stopping"),
        "{said}"
    );
    assert!(
        said.contains("pm-tool: producer #0 joined as app"),
        "{said}"
    );
}
