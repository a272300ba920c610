//! Two "nodes" in network namespaces joined by two veth pairs (path 1 and path 2), created
//! and removed by the test (needs root). The pool manager runs under `maestro run` on node
//! A with its control endpoint on path 2; the archiver (consumer) on node B reads over
//! path 1. Taking path 1 down on node A: `maestro run`'s link monitor raises a PMIx fabric
//! event, the pool manager turns it into a pool event (the tracer on node B logs it) and
//! plans the transfers that follow over the remaining path: RMA between the endpoints the
//! apps also have on path 2, instead of RMA over path 1.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Group, await_line, example, expect_line, lines, maestro};
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

#[test]
fn a_link_going_down_is_a_pool_event_and_transfers_take_the_other_path() {
    let (a, b) = (
        format!("mstro-a{}", std::process::id()),
        format!("mstro-b{}", std::process::id()),
    );
    let _ns = Namespaces::create(&[&a, &b]);
    for (path, (va, vb)) in [("1", ("va1", "vb1")), ("2", ("va2", "vb2"))] {
        ip(&[
            "link", "add", va, "netns", &a, "type", "veth", "peer", "name", vb, "netns", &b,
        ]);
        ip(&[
            "-n",
            &a,
            "addr",
            "add",
            &format!("10.201.{path}.1/24"),
            "dev",
            va,
        ]);
        ip(&[
            "-n",
            &b,
            "addr",
            "add",
            &format!("10.201.{path}.2/24"),
            "dev",
            vb,
        ]);
        ip(&["-n", &a, "link", "set", va, "up"]);
        ip(&["-n", &b, "link", "set", vb, "up"]);
    }
    for ns in [&a, &b] {
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    for (ns, dev) in [(&a, "va1"), (&a, "va2"), (&b, "vb1"), (&b, "vb2")] {
        await_link_up(ns, dev);
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
