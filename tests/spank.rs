//! The maestro SPANK plugin under the single-node Slurm (which loads it, as required): with
//! `--maestro-nic` every task gets `MSTRO_OFI_IFACE` and the reason; without, nothing
//! changes; the environment form works; a NIC the node lacks fails the step with a message;
//! a bad value stops srun before anything runs. The multi-NIC cases run on the cluster
//! (tests/cluster.rs).

mod common;

use std::time::Duration;

use common::{Output, Slurm, run};

/// The NICs of this machine as the inventory (which the plugin uses) lists them, and the
/// one it chooses for local rank 0 (a machine with one NIC besides loopback: that one).
fn nics_here() -> (String, Vec<String>) {
    let (inv, choice) = inventory::nic_for_this_process(0).expect("a NIC chosen here");
    (
        choice.nic,
        inv.nics.iter().map(|n| n.name.clone()).collect(),
    )
}

/// Each task prints its local id, `MSTRO_OFI_IFACE` and `MSTRO_NIC_REASON`.
fn tasks(slurm: &Slurm, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = slurm.srun();
    cmd.args(["-n", "2"]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args([
        "sh",
        "-c",
        "echo \"task $SLURM_LOCALID: iface=[$MSTRO_OFI_IFACE] why=[$MSTRO_NIC_REASON]\"",
    ]);
    run(&mut cmd, Duration::from_secs(60))
}

#[test]
fn maestro_nic_gives_every_task_its_nic_and_nothing_changes_without_it() {
    let slurm = Slurm::start();
    let (nic, _) = nics_here();
    let chosen = tasks(&slurm, &["--maestro-nic"], &[]);
    assert_eq!(chosen.code(), Some(0), "{chosen:?}");
    for t in 0..2 {
        // Every task gets the NIC the inventory chooses (a machine with one NIC besides
        // loopback: that one, preferred over loopback), with the reason.
        let line = chosen
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("task {t}:")))
            .unwrap_or_else(|| panic!("no task {t} in {}", chosen.stdout));
        assert!(line.contains(&format!("iface=[{nic}]")), "{line}");
        assert!(line.contains("preferred over lo (loopback)"), "{line}");
    }
    let plain = tasks(&slurm, &[], &[]);
    assert_eq!(plain.code(), Some(0), "{plain:?}");
    assert_eq!(
        plain.lines_with("iface=[] why=[]").len(),
        2,
        "{}",
        plain.stdout
    );
    let by_env = tasks(&slurm, &[], &[("SLURM_SPANK_MAESTRO_NIC", "lo")]);
    assert_eq!(
        by_env.lines_with("iface=[lo]").len(),
        2,
        "{}",
        by_env.stdout
    );
}

#[test]
fn a_nic_the_node_lacks_fails_the_step_with_the_reason() {
    let slurm = Slurm::start();
    let (_, all) = nics_here();
    let out = tasks(&slurm, &["--maestro-nic=ib7"], &[]);
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.contains("maestro: no NIC \"ib7\" on node")
            && out
                .stderr
                .contains(&format!("NICs here: {}", all.join(", "))),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "no task ran: {}", out.stdout);
    let bad = tasks(&slurm, &["--maestro-nic=a;b"], &[]);
    assert_ne!(bad.code(), Some(0), "{bad:?}");
    assert!(bad.stderr.contains("is not a NIC"), "{}", bad.stderr);
}
