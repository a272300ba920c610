//! Open MPI's `mpirun` (ORTE over OpenPMIx) as a third PMIx host.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{example, run};

#[test]
fn pmix_hello_under_mpirun() {
    let out = run(
        Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-np", "3"])
            .arg(example("pmix_hello")),
        Duration::from_secs(120),
    );
    out.assert_hello(3);
    assert_eq!(
        out.lines_with("publish/lookup: ok (").len(),
        2,
        "{}",
        out.stdout
    );
    assert_eq!(
        out.lines_with("rank 1: credential: not supported by this host")
            .len(),
        1
    );
}
