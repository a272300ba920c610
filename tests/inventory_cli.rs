//! `maestro inventory` end to end: the live machine (real hwloc, kernel and libfabric), the
//! reference XML topologies, JSON and Slurm output, and bad input.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Output, maestro, repo, run};

fn inventory(args: &[&str]) -> Output {
    run(
        Command::new(maestro()).arg("inventory").args(args),
        Duration::from_secs(60),
    )
}

fn topology(name: &str) -> String {
    repo()
        .join("inventory/tests/data")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_live_table_lists_interfaces_with_state_mtu_providers_and_a_choice() {
    let out = inventory(&[]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let mut expected = vec!["lo"];
    if std::path::Path::new("/sys/class/net/eth0").exists() {
        expected.push("eth0");
    }
    for nic in expected {
        let row = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{nic} ")))
            .unwrap_or_else(|| panic!("no {nic} row:\n{}", out.stdout));
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{nic}/mtu"))
            .expect("mtu")
            .trim()
            .to_string();
        assert!(row.contains(&format!(" {mtu} ")), "{row}");
        assert!(
            row.contains("tcp;ofi_rxm") && row.contains("udp;ofi_rxd"),
            "{row}"
        );
    }
    assert!(
        out.stdout.contains("within the node: shm"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("chosen NIC for CPUs "),
        "{}",
        out.stdout
    );
}

#[test]
fn xml_topologies_find_the_infiniband_nic_and_its_locality() {
    let t24 = topology("24em64t-2n6c2t-pci.xml");
    let local = inventory(&["--topology", &t24, "--cpuset", "0", "--json"]);
    assert_eq!(local.code(), Some(0), "{local:?}");
    let v: serde_json::Value = serde_json::from_str(&local.stdout).expect("JSON");
    assert_eq!(v["schema"], "maestro.inventory/1");
    assert_eq!(v["choice"]["nic"], "ib0");
    assert_eq!(v["choice"]["proximity"], "local");
    let ib = v["nics"]
        .as_array()
        .expect("nics")
        .iter()
        .find(|n| n["name"] == "ib0")
        .expect("ib0")
        .clone();
    assert_eq!(ib["aliases"][0], "mlx4_0");
    assert_eq!(ib["locality"]["numa_nodes"], "0");
    let remote = inventory(&["--topology", &t24, "--cpuset", "1"]);
    assert!(
        remote
            .stdout
            .contains("chosen NIC for CPUs 1 (local rank 0): ib0"),
        "{}",
        remote.stdout
    );
    assert!(
        remote
            .stdout
            .contains("remote (attached to another package)"),
        "{}",
        remote.stdout
    );
    let t32 = inventory(&["--topology", &topology("32em64t-2n8c2t-pci-normalio.xml")]);
    assert!(t32.stdout.contains("ib0 (mlx5_0)"), "{}", t32.stdout);
}

#[test]
fn slurm_lines_name_the_rdma_nics() {
    let out = inventory(&[
        "--slurm",
        "--topology",
        &topology("32em64t-2n8c2t-pci-normalio.xml"),
    ]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let node = out.lines_with("Features=");
    assert_eq!(node.len(), 1, "{}", out.stdout);
    assert!(
        node[0].contains("rdma") && node[0].contains("nic_mlx5_0") && node[0].contains("Gres=nic:"),
        "{}",
        node[0]
    );
    assert!(out.stdout.contains("Name=nic Type=infiniband Count=1"));
    assert!(out.stdout.contains("# topology.conf:"));
    // No plugin next to this build's binary: no `required` line naming a path that is
    // not there, but how to get one.
    assert!(
        !out.stdout.contains("required ") && out.stdout.contains("scripts/install.sh PREFIX"),
        "{}",
        out.stdout
    );
}

#[test]
fn bad_input_is_exit_2_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.xml");
    std::fs::write(&bad, "<topology><object").expect("write");
    let bad = bad.to_string_lossy().into_owned();
    let t24 = topology("24em64t-2n6c2t-pci.xml");
    for (args, says) in [
        (vec!["--topology", "/nonexistent.xml"], "no such file"),
        (vec!["--topology", bad.as_str()], "cannot load"),
        (vec!["--cpuset", ""], "empty CPU list"),
        (vec!["--cpuset", "0-x"], "not a CPU number"),
        (
            vec!["--topology", t24.as_str(), "--cpuset", "0-99"],
            "out of range",
        ),
        (
            vec!["--provider", "warp-drive"],
            "no NIC offers provider \"warp-drive\"",
        ),
        (vec!["--placement", "-1"], "1 or more are needed"),
        (vec!["--hosts", "n1"], "give the fabric too"),
        (vec!["--ib-ca", "mlx5_0"], "--discover-fabric"),
        (
            vec!["--discover-fabric", "--ib-ca", "mlx5_0:0"],
            "is no port",
        ),
        // No InfiniBand adapter here (the tests' ibsim is not preloaded).
        (
            vec!["--discover-fabric"],
            "no InfiniBand fabric discovered through the first active adapter port",
        ),
        (
            vec!["--fabric", "/etc/hostname"],
            "neither a Slurm topology.conf",
        ),
        (
            vec!["--fabric", t24.as_str(), "--placement", "2"],
            "neither a Slurm topology.conf",
        ),
    ] {
        let out = inventory(&args);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    // A log level that is not one is said, not silently ignored.
    let out = run(
        Command::new(maestro())
            .arg("inventory")
            .env("MSTRO_LOG_LEVEL", "bogus"),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("MSTRO_LOG_LEVEL=\"bogus\" is not a level"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    // `maestro inventory --placement 2000 | head -1`
    let mut g =
        common::Group::spawn(Command::new(maestro()).args(["inventory", "--placement", "2000"]));
    let mut out = BufReader::new(g.child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("a line");
    assert!(first.contains("placement"), "{first}");
    drop(out);
    let end = g.wait(Duration::from_secs(30));
    assert_eq!(end.status.signal(), Some(libc::SIGPIPE), "{end:?}");
    assert!(!end.stderr.contains("panicked"), "{}", end.stderr);
}
