//! Runs bindgen over `infiniband/ibnetdisc.h` (libibnetdisc-dev) and `infiniband/mad.h`
//! (libibmad-dev). The functions are bound for loading at run time (bindgen's
//! `dynamic_library_name`): nothing is linked, so machines without InfiniBand need no
//! rdma-core library to run the binaries that can discover a fabric.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .dynamic_library_name("IbNetDisc")
        .dynamic_link_require_all(true)
        .allowlist_function("ibnd_discover_fabric|ibnd_destroy_fabric|mad_get_field")
        .allowlist_type("ibnd_.*|MAD_FIELDS|MAD_NODE_TYPE")
        .rustified_enum("MAD_FIELDS")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen failed on infiniband/ibnetdisc.h: {e}\n\
                 It needs the headers and libclang: apt-get install libibnetdisc-dev libibmad-dev clang libclang-dev (or run scripts/setup.sh)"
            )
        });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs into OUT_DIR");
}
