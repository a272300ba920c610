//! Clients that are not our Rust library run under `maestro run` as they do under Slurm: a
//! plain C PMIx client and an Open MPI program, both compiled here from tests/c/.

mod common;

use common::{build_c as build, maestro_run};

#[test]
fn a_c_pmix_client_finds_every_job_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build("cc", "pmix_client.c", Some("pmix"), dir.path());
    let out = maestro_run(&["-n", "3", exe.to_str().expect("utf-8 path")]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    for key in [
        "pmix.job.size",
        "pmix.lpeers",
        "pmix.lrank",
        "pmix.hname",
        "pmix.locstr",
        "fence",
        "c.client.rank",
    ] {
        assert_eq!(
            out.lines_with(&format!(" OK {key}")).len(),
            3,
            "{key}: {}",
            out.stdout
        );
    }
}

#[test]
fn an_open_mpi_program_runs_as_one_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build("mpicc", "mpi_hello.c", None, dir.path());
    let out = maestro_run(&["-n", "3", exe.to_str().expect("utf-8 path")]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    for r in 0..3 {
        assert!(
            out.stdout
                .contains(&format!("mpi rank {r} of 3: sum of ranks 3")),
            "{}",
            out.stdout
        );
    }
}
