//! The main workflow at scale: `pool_workflow` with 64 ranks and with 128 ranks on 16 nodes
//! of `scripts/cluster.sh` (network namespaces of this machine, 4 CPUs configured per
//! node), ten consecutive runs each, every run reported. Each case takes minutes on a
//! 2-core machine, so both are ignored by a plain test run; run them with
//!
//!     cargo build --release -p pool-tools --example pool_workflow
//!     cargo nextest run --release --test scale --run-ignored only --no-capture
//!
//! (docs/benchmarks-journal.md holds the numbers). Root only, as every cluster test.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, example, run};

/// Runs `pool_workflow` `runs` times as `srun -N 16 -n RANKS EXTRA... pool_workflow ARGS...`
/// and asserts every run delivered and verified every CDO.
fn ten_runs(ranks: u32, srun_extra: &[&str], args: &[&str]) {
    let cluster = Cluster::start_nodes(16);
    let cdos = 10;
    let mut times = Vec::new();
    for i in 1..=10 {
        let start = Instant::now();
        let out = run(
            cluster
                .srun()
                .args(["-N", "16", "-n", &ranks.to_string(), "--mpi=pmix"])
                .args(srun_extra)
                .arg(example("pool_workflow"))
                .args(["--cdos", &cdos.to_string()])
                .args(args),
            Duration::from_secs(600),
        );
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "{ranks} ranks, run {i}: exit {:?} in {secs:.1} s",
            out.code()
        );
        // Every producer (all ranks but the PM and the consumer) offered, the consumer
        // verified all their CDOs.
        out.assert_workflow_of((ranks - 2) as usize, cdos);
        times.push(secs);
    }
    let (lo, hi) = times
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    eprintln!("{ranks} ranks: 10 of 10 runs passed, {lo:.1}-{hi:.1} s");
}

#[test]
#[ignore = "minutes per run: cargo nextest run --release --test scale --run-ignored only"]
fn sixty_four_ranks_on_sixteen_nodes_ten_times() {
    ten_runs(64, &[], &[]);
}

#[test]
#[ignore = "minutes per run: cargo nextest run --release --test scale --run-ignored only"]
fn a_hundred_and_twenty_eight_ranks_on_sixteen_nodes_ten_times() {
    // 8 ranks on nodes of 4 CPUs; CDOs up to 1 MiB (the consumer requires all 1,260 up
    // front: with 64 MiB ones that is 10 GB, more than this machine has).
    ten_runs(128, &["--overcommit"], &["--max-size", "1048576"]);
}
