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
