//! Runs bindgen over Slurm's `slurm/spank.h` (and `slurm_version.h`, for the version the
//! plugin must declare) as the system installs them. The plugin's SPANK functions are
//! provided by the Slurm program that loads it (srun, slurmstepd), so nothing is linked.
//! Fails with a message naming the Debian package when the header or libclang is missing.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("spank_.*")
        .allowlist_function("slurm_(error|info|verbose|debug)")
        .allowlist_type("spank_.*")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_type("slurm_err_t")
        .allowlist_var("ESPANK_SUCCESS")
        .rustified_enum("spank_item")
        .rustified_enum("spank_context")
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen failed on slurm/spank.h: {e}\n\
                 it needs Slurm's headers and libclang: apt-get install libslurm-dev clang libclang-dev \
                 (or run scripts/setup.sh)"
            )
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs into OUT_DIR");
}
