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
}
