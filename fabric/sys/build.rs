//! Finds the system libfabric with pkg-config and runs bindgen over its public headers.
//! The library itself is not linked: `lazy.c` defines the few library functions the
//! bindings call and opens libfabric.so.1 on first use (see there for why).
//! libfabric's object API (`fi_domain`, `fi_endpoint`, `fi_read`, ...) is made of `static
//! inline` functions calling through ops tables; bindgen's `wrap_static_fns` emits a C file
//! with one exported wrapper per inline function (`<name>__extern`), compiled here, so Rust
//! calls exactly the header's code for the installed version.
use std::env;
use std::path::PathBuf;

const MIN_LIBFABRIC: &str = "1.17";

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=lazy.c");
    let lib = pkg_config::Config::new()
        .atleast_version(MIN_LIBFABRIC)
        .cargo_metadata(false)
        .probe("libfabric")
        .unwrap_or_else(|e| {
            panic!(
                "fabric-sys needs libfabric >= {MIN_LIBFABRIC} found through pkg-config `libfabric`: {e}\n\
                 On Debian 12: apt-get install libfabric-dev pkg-config (or run scripts/setup.sh)"
            )
        });
    // Where the library is, for callers that fingerprint the installation (the inventory
    // cache) without loading it.
    let libdir = pkg_config::get_variable("libfabric", "libdir").unwrap_or_default();
    println!("cargo:rustc-env=FABRIC_SYS_LIBDIR={libdir}");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wrappers = out.join("fabric_static_wrappers");
    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*|FID_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
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
            "bindgen failed on the libfabric headers: {e}\n\
             bindgen needs libclang: apt-get install clang libclang-dev"
        )
    });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs into OUT_DIR");
    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c"))
        .include(env!("CARGO_MANIFEST_DIR"))
        .flag("-include")
        .flag("wrapper.h")
        .warnings(false);
    for inc in &lib.include_paths {
        cc.include(inc);
    }
    cc.compile("fabric_static_wrappers");
    // The loader on its own: no forced include, every warning an error (an undeclared
    // dlvsym would silently truncate the pointers it returns).
    let mut lazy = cc::Build::new();
    lazy.file("lazy.c")
        .define("_GNU_SOURCE", None)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    for inc in &lib.include_paths {
        lazy.include(inc);
    }
    lazy.compile("fabric_lazy");
}
