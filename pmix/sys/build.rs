//! Finds the system OpenPMIx with pkg-config, compiles the macro shim and runs bindgen over
//! `pmix.h`, `pmix_server.h` and `pmix_tool.h`. Fails with a message naming the Debian
//! packages when PMIx or libclang is missing.
use std::env;
use std::path::PathBuf;

const MIN_PMIX: &str = "4.2";

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim.h");
    println!("cargo:rerun-if-changed=shim.c");
    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_PMIX)
        .probe("pmix")
    {
        Ok(lib) => lib,
        Err(e) => panic!(
            "pmix-sys needs OpenPMIx >= {MIN_PMIX} found through pkg-config `pmix`: {e}\n\
             On Debian 12: apt-get install libpmix-dev pkg-config (or run scripts/setup.sh)"
        ),
    };
    // pkg-config adds -rpath for the private pmix2 directory; keep it for the final binaries.
    for path in &lib.link_paths {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", path.display());
    }
    let mut cc = cc::Build::new();
    cc.file("shim.c").warnings(true);
    for inc in &lib.include_paths {
        cc.include(inc);
    }
    cc.compile("mpmix_shim");

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("PMIx_.*")
        .allowlist_function("mpmix_.*")
        .allowlist_type("pmix_.*")
        .allowlist_var("PMIX_.*")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for inc in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", inc.display()));
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        panic!(
            "bindgen failed on the PMIx headers: {e}\n\
             bindgen needs libclang: apt-get install clang libclang-dev"
        )
    });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs into OUT_DIR");
}
