//! Two processes move data by `fi_read` through our fabric layer (`maestro-bench fabric-peer`):
//! 256 MiB with a checksum on every provider of this machine, and a reader whose owner is
//! killed mid-stream fails fast with a clear error.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Group, maestro, maestro_bench, run};

/// Starts an owner of `size` bytes and returns it with its announcement line.
fn owner(provider: &str, size: usize) -> (Group, String) {
    let mut cmd = Command::new(maestro_bench());
    cmd.args([
        "fabric-peer",
        "owner",
        "--provider",
        provider,
        "--size",
        &size.to_string(),
    ]);
    // The owner serves until its stdin closes: keep it open (in `g`) until the end.
    let mut g = Group::spawn_with_stdin(&mut cmd, Stdio::piped());
    let stdout = g.child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("announcement");
    assert!(
        line.contains("\"checksum\""),
        "{provider}: owner said {line:?}"
    );
    (g, line.trim().to_string())
}

fn transfer_256_mib(provider: &str) {
    let size = 256 << 20;
    let (g, announcement) = owner(provider, size);
    let out = run(
        Command::new(maestro_bench()).args([
            "fabric-peer",
            "reader",
            "--count",
            "1",
            "--owner",
            &announcement,
        ]),
        Duration::from_secs(240),
    );
    drop(g);
    assert_eq!(out.code(), Some(0), "{provider}: {out:?}");
    assert!(
        out.stdout.contains(&format!("read 1 ok: {size} bytes")),
        "{provider}: {}",
        out.stdout
    );
}

#[test]
fn tcp_rxm_moves_256_mib_intact() {
    transfer_256_mib("tcp;ofi_rxm");
}

#[test]
fn net_moves_256_mib_intact() {
    transfer_256_mib("net");
}

#[test]
fn shm_moves_256_mib_intact() {
    transfer_256_mib("shm");
}

#[test]
fn udp_rxd_moves_256_mib_intact() {
    transfer_256_mib("udp;ofi_rxd");
}

#[test]
fn killing_the_owner_fails_the_reader_at_once() {
    let (g, announcement) = owner("tcp;ofi_rxm", 16 << 20);
    let mut cmd = Command::new(maestro_bench());
    cmd.args([
        "fabric-peer",
        "reader",
        "--count",
        "0",
        "--owner",
        &announcement,
    ]);
    let mut reader = Group::spawn(&mut cmd);
    // Kill the owner once reads are flowing: the reader prints a line per read.
    let mut lines = BufReader::new(reader.child.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(first.starts_with("read 1 ok"), "reader said {first:?}");
    drop(g); // SIGKILL to the owner's process group
    let killed = Instant::now();
    // Keep draining the reader's output so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let out = reader.wait(Duration::from_secs(30));
    let took = killed.elapsed();
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains("fi_read"),
        "unclear error: {}",
        out.stderr
    );
    eprintln!("the reader noticed {took:?} after the kill");
}

/// A process killed with SIGKILL leaves its shm file (`/dev/shm/<pid>:0:0`) behind; when
/// the pid comes round again, libfabric's `fi_enable` used to fail with EBUSY. The shell
/// plants such a file under its own pid and `exec`s the reader, which keeps that pid.
#[test]
fn a_stale_shm_file_under_our_pid_does_not_block_shm() {
    let (g, announcement) = owner("shm", 1 << 20);
    let script = r#"f="/dev/shm/$$:0:0"; head -c 65536 /dev/zero > "$f" && exec "$0" fabric-peer reader --count 1 --owner "$1""#;
    let out = run(
        Command::new("sh").args([
            "-c",
            script,
            &maestro_bench().to_string_lossy(),
            &announcement,
        ]),
        Duration::from_secs(60),
    );
    drop(g);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("read 1 ok"), "{}", out.stdout);
}

/// What `fabric-peer owner` announces (the fields this test uses).
#[derive(serde::Deserialize)]
struct Announced {
    provider: String,
    address: fabric::Address,
    region: fabric::RemoteRegion,
}

/// A second process holding the owner's valid key tries to overwrite the offered region:
/// the write fails (offered memory is remotely readable only) and the bytes are unchanged.
fn a_peer_with_the_key_cannot_write(provider: &str) {
    use fabric::{Buffer, Config, Endpoint, MemoryRegion, Scope, discover, select};
    let (g, announcement) = owner(provider, 64 << 10);
    let owner: Announced = serde_json::from_str(&announcement).expect("announcement");
    let cfg = Config {
        provider: Some(owner.provider.clone()),
        iface: (provider != "shm").then(|| "lo".to_string()),
        ..Config::default()
    };
    let scope = if provider == "shm" {
        Scope::SameNode
    } else {
        Scope::AnyNode
    };
    let offer = select(&discover().expect("fi_getinfo"), &cfg, scope, &["lo"])
        .expect("offer")
        .remove(0);
    let mut ep = Endpoint::open(&offer).expect("endpoint");
    ep.set_timeouts(fabric::Timeouts {
        base: Duration::from_secs(3),
        ..fabric::Timeouts::default()
    });
    let peer = ep.insert_peer(&owner.address).expect("peer");
    let limit = Duration::from_secs(30);
    let len = usize::try_from(owner.region.len).expect("len");
    let read = |ep: &Endpoint, peer| {
        let dst: MemoryRegion = ep
            .register(Buffer::new(len).expect("buffer"))
            .expect("register");
        ep.read(peer, dst, owner.region)
            .expect("post read")
            .wait(limit)
            .expect("read")
            .as_slice()
            .to_vec()
    };
    let before = read(&ep, peer);
    let junk: MemoryRegion = ep
        .register(Buffer::from_slice(&vec![0xA5; len]).expect("buffer"))
        .expect("register");
    let wrote = ep.write(peer, junk, owner.region).map(|op| op.wait(limit));
    match wrote {
        Ok(Ok(_)) => panic!("{provider}: a peer overwrote an offered region"),
        Ok(Err(e)) | Err(e) => eprintln!("{provider}: the write was refused: {e}"),
    }
    // The owner still serves (tcp drops the intruder's connection: read from a fresh
    // endpoint), and its bytes are what they were.
    drop(ep);
    let ep = Endpoint::open(&offer).expect("endpoint");
    let peer = ep.insert_peer(&owner.address).expect("peer");
    assert!(
        read(&ep, peer) == before,
        "{provider}: the offered bytes changed"
    );
    drop(g);
}

#[test]
fn tcp_rxm_offered_memory_is_read_only_to_peers() {
    a_peer_with_the_key_cannot_write("tcp;ofi_rxm");
}

#[test]
fn shm_offered_memory_is_read_only_to_peers() {
    a_peer_with_the_key_cannot_write("shm");
}

#[test]
fn net_offered_memory_is_read_only_to_peers() {
    a_peer_with_the_key_cannot_write("net");
}

/// `maestro bench fabric` at a terminal shows a bar while it measures (and clears it before
/// the table); into a pipe or a log it draws none.
#[test]
fn the_fabric_benchmark_shows_its_progress_at_a_terminal_only() {
    let args = [
        "bench",
        "fabric",
        "--provider",
        "shm",
        "--sizes",
        "4K,64K",
        "--volume",
        "64M",
    ];
    let pty = common::pty::Pty::spawn(Command::new(maestro()).args(args), 24, 80);
    let text = pty.wait_for(Duration::from_secs(120), |t| t.contains("| 64K |"));
    assert!(text.contains("bench fabric ["), "{text}");
    assert!(text.contains("\r\x1b[2K"), "the bar is cleared: {text:?}");
    assert!(pty.wait(Duration::from_secs(30)).success(), "{text}");
    let piped = run(Command::new(maestro()).args(args), Duration::from_secs(120));
    assert_eq!(piped.code(), Some(0), "{piped:?}");
    assert!(piped.stdout.contains("| 64K |"), "{piped:?}");
    assert!(!piped.stderr.contains('\r'), "{piped:?}");
}

/// The benchmarks end their helper processes (the memory's owner, the pool's provider) by
/// closing their input, so that they remove their `shm` files: none is left in
/// `/dev/shm` afterwards (a private one, in a mount namespace of the test's own).
#[test]
fn the_benchmarks_leave_no_shared_memory_files() {
    let line = format!(
        "mount -t tmpfs tmpfs /dev/shm \
         && '{m}' bench fabric --provider shm --sizes 4K --volume 1M >/dev/null \
         && '{m}' bench pool --provider shm --sizes 64 --volume 64K >/dev/null \
         && '{m}' bench copy --sizes 4K --volume 64K >/dev/null \
         && ls -A /dev/shm",
        m = maestro().display()
    );
    let out = run(
        Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &line]),
        Duration::from_secs(300),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "", "left in /dev/shm");
}

/// `maestro bench copy` takes another process's memory each way there is (copied one range
/// per call, several per call, through a view of its memory file), checks the bytes of
/// each, and reports every way's cost per range; options that cannot work are refused.
#[test]
fn the_copy_benchmark_measures_every_way_and_checks_the_bytes() {
    let out = run(
        Command::new(maestro()).args([
            "bench", "copy", "--sizes", "4K,64K", "--volume", "8M", "--batch", "8", "--json",
        ]),
        Duration::from_secs(120),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(v["batch"], 8, "{v}");
    let rows = v["rows"].as_array().expect("rows");
    let ranges: Vec<u64> = rows.iter().filter_map(|r| r["ranges"].as_u64()).collect();
    assert_eq!(ranges, [2048, 128], "{v}");
    for r in rows {
        for way in [
            "one_per_call_us",
            "batched_us",
            "map_us",
            "view_us",
            "view_again_us",
        ] {
            assert!(r[way].as_f64().is_some_and(|us| us > 0.0), "{way}: {r}");
        }
    }
    let bad = run(
        Command::new(maestro()).args(["bench", "copy", "--sizes", "1M", "--volume", "64K"]),
        Duration::from_secs(60),
    );
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    assert!(bad.stderr.contains("at least the largest size"), "{bad:?}");
}
