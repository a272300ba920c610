//! The product-generation workflow (`examples/pgen`) as a user runs it on one node:
//! `examples/pgen/run.sh`, the forecast, the archiver and the workflow manager each a
//! `maestro run` job of its own, sharing one pool by the workflow's name; the manager
//! spawns a product-generation job per step (`PMIx_Spawn`), the last one only after the
//! forecast has left (its fields then come from the archive); `pgen verify` checks every
//! archived field and every product.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{example, maestro, repo, run};

#[test]
fn the_product_generation_workflow_runs_across_jobs_under_maestro_run() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(repo().join("examples/pgen/run.sh"));
    cmd.arg(work.path())
        .env("MAESTRO", maestro())
        .env("PGEN", example("pgen"))
        .env("PGEN_FORECAST_RANKS", "3")
        .env(
            "PGEN_SHAPE",
            "--steps 3 --params 2 --levels 2 --min-size 1048576 --max-size 16777216",
        )
        .env(
            "MSTRO_WORKFLOW_NAME",
            format!("pgen-test-{}", std::process::id()),
        );
    let out = run(&mut cmd, Duration::from_secs(300));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let said = &out.stdout;
    for what in [
        "verified: 12 archived fields",
        "and 3 products",
        // Steps 0 and 1 started as their fields came; step 2 once the forecast left,
        // served by the archive's copies.
        "[manager] manager: step 2 complete; its product job started (after the forecast left: from the archive)",
        "[manager] pgen step 2: 4 fields checked (4 from archive)",
        "[forecast] forecast rank 0: the workflow is done; the pool manager stops",
        "[archiver] archiver: 12 fields written",
    ] {
        assert!(said.contains(what), "{what:?} not in:\n{said}");
    }
    for step in 0..3 {
        assert!(
            work.path()
                .join(format!("products/step-{step}.txt"))
                .exists()
        );
    }
}
