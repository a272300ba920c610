//! Two "nodes" in network namespaces joined by two veth pairs (path 1 and path 2), created
//! and removed by the test (needs root). The pool manager runs under `maestro run` on node
//! A with its control endpoint on path 2; the archiver (consumer) on node B reads over
//! path 1. Taking path 1 down on node A: `maestro run`'s link monitor raises a PMIx fabric
//! event, the pool manager turns it into a pool event (the tracer on node B logs it) and
//! plans the transfers that follow over the remaining path: RMA between the endpoints the
//! apps also have on path 2, instead of RMA over path 1.
//!
//! Three "nodes" for a management network the pool is kept off (`MSTRO_OFI_IFACE_EXCLUDE`):
//! a consumer and a provider that share only that network reach each other's data through
//! the pool manager, which alone is on both of their data networks.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Group, await_line, example, expect_line, lines, maestro, run};
use pool::attr::Attributes;
use pool_tools::archive::Archive;

const T: Duration = Duration::from_secs(20);

/// Network namespaces, removed (with their veths) on drop.
struct Namespaces(Vec<String>);

impl Namespaces {
    fn create(names: &[&str]) -> Namespaces {
        let ns = Namespaces(names.iter().map(|n| n.to_string()).collect());
        for n in names {
            ip(&["netns", "add", n]);
        }
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {} (this test needs root to create network namespaces)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until `dev` in namespace `ns` is operationally up: a veth's carrier comes a moment
/// after both ends are set up, and until then its addresses count as unusable.
fn await_link_up(ns: &str, dev: &str) {
    let deadline = std::time::Instant::now() + T;
    loop {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", dev])
            .output()
            .expect("run ip");
        if String::from_utf8_lossy(&out.stdout).contains("state UP") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{dev} in {ns} is not up after {T:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `cmd` run inside namespace `ns`.
fn inside(ns: &str, program: &std::path::Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

/// `program` run inside namespace `ns` as host `host` (a UTS namespace of its own: the
/// pool manager takes processes of one host name for one machine).
fn on_host(ns: &str, host: &str, program: &std::path::Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "unshare", "--uts", "sh", "-c"])
        .arg("hostname \"$0\" && exec \"$@\"")
        .arg(host)
        .arg(program);
    c
}

/// A veth pair between namespaces `a` and `b`: `a`'s end `va` at `addr_a`, `b`'s end
/// `vb` at `addr_b` (both `/24`), up.
fn link(a: (&str, &str, &str), b: (&str, &str, &str)) {
    let ((ns_a, va, addr_a), (ns_b, vb, addr_b)) = (a, b);
    ip(&[
        "link", "add", va, "netns", ns_a, "type", "veth", "peer", "name", vb, "netns", ns_b,
    ]);
    for (ns, dev, addr) in [(ns_a, va, addr_a), (ns_b, vb, addr_b)] {
        ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
    }
    await_link_up(ns_a, va);
    await_link_up(ns_b, vb);
}

#[test]
fn a_link_going_down_is_a_pool_event_and_transfers_take_the_other_path() {
    let (a, b) = (
        format!("mstro-a{}", std::process::id()),
        format!("mstro-b{}", std::process::id()),
    );
    let _ns = Namespaces::create(&[&a, &b]);
    for path in ["1", "2"] {
        link(
            (&a, &format!("va{path}"), &format!("10.201.{path}.1")),
            (&b, &format!("vb{path}"), &format!("10.201.{path}.2")),
        );
    }
    for ns in [&a, &b] {
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }

    // Node A: the pool manager, controlled over path 2 only.
    let mut pm = Group::spawn(
        inside(&a, &maestro())
            .args(["run", "-n", "1", "--"])
            .arg(maestro())
            .args([
                "pm",
                "--print-info",
                "--workflow",
                "links",
                "--listen",
                "10.201.2.1:0",
                "--no-unix-socket",
            ]),
    );
    let info = await_line(
        pm.child.stdout.take().expect("stdout"),
        "MSTRO_POOL_MANAGER_INFO;",
    )
    .trim()
    .trim_start_matches("MSTRO_POOL_MANAGER_INFO;")
    .trim_end_matches(';')
    .to_string();
    let pm_log = lines(pm.child.stderr.take().expect("stderr"));
    expect_line(&pm_log, &["announced through PMIx"], T);

    // Node B: a tracer, and the archiver reading over path 1.
    let mut tracer = Group::spawn(
        inside(&b, &example("pool_tracer"))
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .args(["--kinds", "fabric,transport-started"]),
    );
    await_line(tracer.child.stderr.take().expect("stderr"), "subscribed");
    let traced = lines(tracer.child.stdout.take().expect("stdout"));
    let archive_dir = tempfile::tempdir().expect("tempdir");
    let mut archiver = Group::spawn(
        inside(&b, &example("pool_archiver"))
            .env("MSTRO_POOL_MANAGER_INFO", &info)
            .env("MSTRO_OFI_PROVIDER", "tcp;ofi_rxm")
            .env("MSTRO_OFI_IFACE", "vb1")
            .args(["--dir", &archive_dir.path().to_string_lossy()]),
    );
    await_line(
        archiver.child.stderr.take().expect("stderr"),
        "archiving offers",
    );
    let archived = lines(archiver.child.stdout.take().expect("stdout"));

    // Node A: a librarian offering over path 1.
    let offer = |name: &str, data: &[u8], iface: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        Archive::open(dir.path())
            .expect("archive")
            .store(name, data, &Attributes::new())
            .expect("store");
        let mut lib = Group::spawn(
            inside(&a, &example("pool_librarian"))
                .env("MSTRO_POOL_MANAGER_INFO", &info)
                .env("MSTRO_OFI_PROVIDER", "tcp;ofi_rxm")
                .env("MSTRO_OFI_IFACE", iface)
                .args(["--dir", &dir.path().to_string_lossy(), "--eager"]),
        );
        let log = lines(lib.child.stderr.take().expect("stderr"));
        (lib, log, dir)
    };
    let before: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();
    let (lib1, _log1, _dir1) = offer("before", &before, "va1");
    expect_line(&archived, &["archived before"], T);
    let rma = expect_line(&traced, &["TransportStarted", "\"before\""], T);
    assert!(rma.contains("by rma"), "{rma}");
    drop(lib1);

    // Path 1 goes down on node A.
    ip(&["-n", &a, "link", "set", "va1", "down"]);
    expect_line(&pm_log, &["link va1 down"], T);
    let fabric = expect_line(
        &traced,
        &["\"Fabric\"", "link va1 down", "10.201.1.1/24"],
        T,
    );
    assert!(fabric.contains("\"app\":0"), "{fabric}");

    // The next CDO, from a provider whose first NIC is node A's other one: the archiver's
    // first endpoint is on path 1, which is down, so the PM pairs the provider with the
    // archiver's endpoint on path 2.
    let after: Vec<u8> = (0..(1 << 20)).map(|i| (i % 241) as u8).collect();
    let (lib2, _log2, _dir2) = offer("after", &after, "va2");
    expect_line(&archived, &["archived after"], T);
    let rerouted = expect_line(&traced, &["TransportStarted", "\"after\""], T);
    assert!(
        rerouted.contains("by rma over tcp;ofi_rxm from 10.201.2.1 to 10.201.2.2 (another network: the consumer's endpoint 10.201.1.2 is on a link that is down"),
        "{rerouted}"
    );
    drop(lib2);

    let archive = Archive::open(archive_dir.path()).expect("archive");
    for (name, data) in [("before", &before), ("after", &after)] {
        let (got, _) = archive.load(name).expect("load").expect("archived");
        assert!(got == *data, "{name} arrived intact");
    }
    drop(archiver);
    drop(tracer);
    // The launcher forwards SIGTERM to the PM and exits with 128 + 15.
    let end = pm.terminate(T);
    assert_eq!(end.code(), Some(143), "{end:?}");
}

/// Node P runs the pool manager, with a data network to node B (10.202.2/24) and one to
/// node C (10.202.3/24) and a management interface of its own (`mgmt`, 10.202.9/24); B and
/// C share only a management network (10.202.1/24, `mgmt` on both). With
/// `MSTRO_OFI_IFACE_EXCLUDE=mgmt` everywhere the PM does not advertise its management
/// address, no endpoint opens on `mgmt`, and C's offer reaches B's archiver through the PM
/// (a stream, which the transport event explains and `maestro pool transfers` shows),
/// intact; a client told to keep off the data network does not even try the PM there.
#[test]
fn a_management_network_is_kept_free_of_data_and_the_pm_relays_across_networks() {
    let id = std::process::id();
    let (p, b, c) = (
        format!("mstro-p{id}"),
        format!("mstro-q{id}"),
        format!("mstro-r{id}"),
    );
    let _ns = Namespaces::create(&[&p, &b, &c]);
    for ns in [&p, &b, &c] {
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    link((&p, "tob", "10.202.2.1"), (&b, "data", "10.202.2.2"));
    link((&p, "toc", "10.202.3.1"), (&c, "data", "10.202.3.3"));
    link((&b, "mgmt", "10.202.1.2"), (&c, "mgmt", "10.202.1.3"));
    // P's management interface leads nowhere (a veth pair within P, the other end without
    // an address): only its address matters.
    ip(&[
        "-n", &p, "link", "add", "mgmt", "type", "veth", "peer", "name", "mgmt-end",
    ]);
    ip(&["-n", &p, "addr", "add", "10.202.9.1/24", "dev", "mgmt"]);
    for dev in ["mgmt", "mgmt-end"] {
        ip(&["-n", &p, "link", "set", dev, "up"]);
    }
    let kept_off = |cmd: &mut Command| {
        cmd.env("MSTRO_OFI_IFACE_EXCLUDE", "mgmt")
            .env("MSTRO_OFI_PROVIDER", "tcp;ofi_rxm");
    };

    let mut pm_cmd = on_host(&p, "p", &maestro());
    pm_cmd.args([
        "pm",
        "--print-info",
        "--workflow",
        "kept-off",
        "--listen",
        "0.0.0.0:0",
        "--no-unix-socket",
    ]);
    kept_off(&mut pm_cmd);
    let mut pm = Group::spawn(&mut pm_cmd);
    let info = await_line(
        pm.child.stdout.take().expect("stdout"),
        "MSTRO_POOL_MANAGER_INFO;",
    )
    .trim()
    .to_string();
    assert!(
        info.contains("10.202.2.1") && info.contains("10.202.3.1"),
        "the PM advertises both data networks: {info}"
    );
    assert!(
        !info.contains("10.202.9.1"),
        "the management address is not advertised: {info}"
    );
    let with_info = |ns: &str, host: &str, program: &std::path::Path| {
        let mut cmd = on_host(ns, host, program);
        cmd.env("MSTRO_POOL_MANAGER_INFO", &info);
        kept_off(&mut cmd);
        cmd
    };

    let mut tracer = Group::spawn(
        with_info(&b, "b", &example("pool_tracer")).args(["--kinds", "transport-started"]),
    );
    await_line(tracer.child.stderr.take().expect("stderr"), "subscribed");
    let traced = lines(tracer.child.stdout.take().expect("stdout"));
    let archive_dir = tempfile::tempdir().expect("tempdir");
    let mut archiver = Group::spawn(
        with_info(&b, "b", &example("pool_archiver"))
            .args(["--dir", &archive_dir.path().to_string_lossy()]),
    );
    await_line(
        archiver.child.stderr.take().expect("stderr"),
        "archiving offers",
    );
    let archived = lines(archiver.child.stdout.take().expect("stdout"));

    let data: Vec<u8> = (0..(4 << 20)).map(|i| (i % 253) as u8).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    Archive::open(dir.path())
        .expect("archive")
        .store("relayed", &data, &Attributes::new())
        .expect("store");
    let librarian = Group::spawn(with_info(&c, "c", &example("pool_librarian")).args([
        "--dir",
        &dir.path().to_string_lossy(),
        "--eager",
    ]));
    expect_line(&archived, &["archived relayed"], T);
    let how = expect_line(&traced, &["TransportStarted", "\"relayed\""], T);
    assert!(
        how.contains("by stream: the consumer's network 10.202.2.2/24 does not reach the provider's endpoint 10.202.3.3"),
        "{how}"
    );
    let (got, _) = Archive::open(archive_dir.path())
        .expect("archive")
        .load("relayed")
        .expect("load")
        .expect("archived");
    assert!(got == data, "the relayed CDO arrived intact");

    let transfers = run(
        with_info(&b, "b", &maestro()).args(["pool", "transfers"]),
        T,
    );
    assert_eq!(transfers.code(), Some(0), "{transfers:?}");
    let row = transfers
        .stdout
        .lines()
        .find(|l| l.contains("relayed"))
        .unwrap_or_else(|| panic!("no transfer of relayed: {}", transfers.stdout));
    assert!(row.contains("stream") && row.contains("done"), "{row}");

    // Told to keep off B's data network too, a client does not try the PM there.
    let lost = run(
        with_info(&b, "b", &example("pool_librarian"))
            .env("MSTRO_OFI_IFACE_EXCLUDE", "mgmt,data")
            .args(["--dir", &dir.path().to_string_lossy()]),
        T,
    );
    assert_ne!(lost.code(), Some(0), "{lost:?}");
    assert!(
        lost.stderr.contains("not tried, on data's network 10.202.2.0/24, which MSTRO_OFI_IFACE_EXCLUDE keeps the pool off"),
        "{lost:?}"
    );
    drop(librarian);
    drop(archiver);
    drop(tracer);
    let end = pm.terminate(T);
    assert!(end.code().is_some(), "{end:?}");
}

/// A veth pair this test creates (needs root): a rank started while it is up asks
/// with `PMIx_Fabric_update` after `maestro run`'s link monitor saw it go down, and the
/// host answers with its state now, not the launch-time snapshot.
#[test]
fn fabric_update_answers_with_the_link_states_of_now() {
    struct Dummy(&'static str);
    impl Drop for Dummy {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", self.0]).status();
        }
    }
    let _ = Command::new("ip")
        .args(["link", "del", "mstrdummy0"])
        .status();
    ip(&[
        "link",
        "add",
        "mstrdummy0",
        "type",
        "veth",
        "peer",
        "name",
        "mstrdummy1",
    ]);
    let _dummy = Dummy("mstrdummy0");
    ip(&["link", "set", "mstrdummy0", "up"]);
    ip(&["link", "set", "mstrdummy1", "up"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let mut run = Group::spawn(
        Command::new(maestro())
            .args(["run", "-n", "1", "--"])
            .arg(example("fabric_info"))
            .arg("--update-when")
            .arg(&go),
    );
    let said = lines(run.child.stdout.take().expect("stdout"));
    let logged = lines(run.child.stderr.take().expect("stderr"));
    let first = expect_line(&said, &["PMIx fabric:", "mstrdummy0"], T);
    assert!(first.contains("devices"), "{first}");
    ip(&["link", "set", "mstrdummy0", "down"]);
    expect_line(&logged, &["maestro run: link mstrdummy0 down"], T);
    std::fs::write(&go, b"").expect("go");
    let now = expect_line(&said, &["now:"], T);
    assert!(now.contains("mstrdummy0=down"), "{now}");
    let out = run.wait(T);
    assert_eq!(out.code(), Some(0), "{out:?}");
}
