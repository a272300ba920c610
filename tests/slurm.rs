//! Real Slurm (`srun --mpi=pmix`) on this node, started by scripts/slurm-local.sh: the same
//! client code runs there, and the capabilities Slurm lacks come back as NotSupported.

mod common;

use std::time::Duration;

use common::{Slurm, example, run};

#[test]
fn pmix_hello_under_srun_degrades_cleanly() {
    let slurm = Slurm::start();
    let out = run(
        slurm
            .srun()
            .args(["--mpi=pmix", "-n", "3"])
            .arg(example("pmix_hello")),
        Duration::from_secs(120),
    );
    out.assert_hello(3);
    assert!(out.stdout.contains("slurm.pmix."), "{}", out.stdout);
    assert_eq!(
        out.lines_with("publish/lookup: not supported by this host")
            .len(),
        3,
        "{}",
        out.stdout
    );
    assert_eq!(
        out.lines_with("rank 1: credential: not supported by this host")
            .len(),
        1
    );
}

#[test]
fn the_pool_workflow_under_srun() {
    let slurm = Slurm::start();
    let out = run(
        slurm
            .srun()
            .args(["--mpi=pmix", "-n", "4"])
            .arg(example("pool_workflow"))
            .args(["--cdos", "40", "--max-size", "8388608"]),
        Duration::from_secs(180),
    );
    out.assert_workflow(40);
    // Slurm delivers no PMIx events: that is how Slurm is, not news at every run.
    assert!(!out.stdout.contains("not forwarded"), "{}", out.stdout);
}

/// `examples/pgen/slurm.sh` asks Slurm whether each allocation fits before it submits: the
/// default forecast (`-N 4`) on this one-node Slurm is refused at once, naming the setting
/// to change, instead of pending until the timeout.
#[test]
fn the_workflow_script_refuses_an_allocation_the_cluster_cannot_give() {
    let slurm = Slurm::start();
    let work = tempfile::tempdir().expect("tempdir");
    let out = run(
        slurm
            .command(common::repo().join("examples/pgen/slurm.sh"))
            .arg(work.path())
            .env("PGEN", example("pgen")),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr
            .contains("the forecast's allocation (-N 4 -n 8) is more than this cluster gives")
            && out.stderr.contains("set PGEN_FORECAST_SBATCH"),
        "{}",
        out.stderr
    );
    assert!(out.elapsed < Duration::from_secs(30), "{out:?}");
}
