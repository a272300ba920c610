//! Two real endpoints in one process, on each provider this machine offers: RMA read and
//! write, tagged messages, bad keys, and closing with operations in flight.

use std::time::Duration;

use fabric::access::{Local, RemoteRead, RemoteWrite};
use fabric::{
    Buffer, Config, Endpoint, FabricError, MemoryRegion, ProviderInfo, RemoteRegion, Scope,
    Timeouts, discover, select,
};

const WAIT: Duration = Duration::from_secs(20);

fn offer(provider: &str) -> ProviderInfo {
    let cfg = Config {
        provider: Some(provider.into()),
        iface: (provider != "shm").then(|| "lo".to_string()),
        ..Config::default()
    };
    let scope = if provider == "shm" {
        Scope::SameNode
    } else {
        Scope::AnyNode
    };
    select(&discover().expect("fi_getinfo"), &cfg, scope, &["lo"])
        .unwrap_or_else(|e| panic!("{provider}: {e}"))
        .remove(0)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn exercise(provider: &str) {
    let o = offer(provider);
    let a = Endpoint::open(&o).unwrap_or_else(|e| panic!("{provider}: {e}"));
    let b = Endpoint::open(&o).expect("second endpoint");
    let a_to_b = b.insert_peer(a.address()).expect("insert a");
    let b_to_a = a.insert_peer(b.address()).expect("insert b");

    // b reads a's exposed region.
    let original = pattern(1 << 20, 7);
    let exposed: MemoryRegion<RemoteWrite> = a
        .register(Buffer::from_slice(&original).expect("buffer"))
        .expect("register");
    let dst: MemoryRegion<Local> = b
        .register(Buffer::new(1 << 20).expect("buffer"))
        .expect("register");
    let got = b
        .read(a_to_b, dst, exposed.remote())
        .expect("post read")
        .wait(WAIT)
        .expect("read");
    assert!(got.as_slice() == original, "{provider}: read data differs");

    // The same read without waiting for the provider: posted, or the region comes back
    // untouched to be posted again.
    let mut dst = got;
    dst.as_mut_slice().fill(0);
    let deadline = std::time::Instant::now() + WAIT;
    let got = loop {
        match b.try_read(a_to_b, dst, exposed.remote()).expect("try_read") {
            Ok(op) => break op.wait(WAIT).expect("read"),
            Err(back) => {
                assert_eq!(back.len(), 1 << 20, "{provider}: the region came back");
                assert!(
                    std::time::Instant::now() < deadline,
                    "{provider}: never taken"
                );
                std::thread::sleep(Duration::from_millis(1));
                dst = back;
            }
        }
    };
    assert!(
        got.as_slice() == original,
        "{provider}: data read by try_read differs"
    );

    // b writes into a's region.
    let src: MemoryRegion<Local> = b
        .register(Buffer::from_slice(&pattern(4096, 9)).expect("buffer"))
        .expect("register");
    let remote = exposed.remote().slice(0, 4096).expect("slice");
    let _src = b
        .write(a_to_b, src, remote)
        .expect("post write")
        .wait(WAIT)
        .expect("write");
    // Some providers (net, libfabric 1.17) report delivery a moment before the target's
    // CPU sees the bytes: allow a bounded settle time.
    // CPU sees the bytes: allow a bounded settle time. The bytes of a region peers may
    // write are reached only once it is deregistered: read them back through the fabric.
    let expected = pattern(4096, 9);
    let settle = std::time::Instant::now();
    let mut back = got;
    loop {
        back = b
            .read(a_to_b, back, remote)
            .expect("post read")
            .wait(WAIT)
            .expect("read back");
        if back.as_slice()[..4096] == expected[..] || settle.elapsed() > Duration::from_secs(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        back.as_slice()[..4096] == expected[..],
        "{provider}: written data never arrived"
    );
    let bytes = exposed.into_buffer();
    assert!(
        bytes.as_slice()[..4096] == expected[..] && bytes.as_slice()[4096..] == original[4096..]
    );

    // Tagged messages both ways.
    let rx = a.recv(42, 64).expect("post recv");
    b.send(a_to_b, 42, b"hello")
        .expect("post send")
        .wait(WAIT)
        .expect("send");
    assert_eq!(rx.wait(WAIT).expect("recv"), b"hello");
    let rx = b.recv(7, 64).expect("post recv");
    a.send(b_to_a, 7, b"")
        .expect("post send")
        .wait(WAIT)
        .expect("send");
    assert!(rx.wait(WAIT).expect("recv").is_empty());
}

#[test]
fn tcp_rxm() {
    exercise("tcp;ofi_rxm");
}

#[test]
fn net() {
    exercise("net");
}

#[test]
fn shm() {
    exercise("shm");
}

#[test]
fn udp_rxd() {
    exercise("udp;ofi_rxd");
}

/// Two tcp;ofi_rxm endpoints, `a` and `b`, and `a` as `b`'s peer; `b`'s operations end
/// after 0.5 s (not 30).
fn impatient_pair() -> (Endpoint, Endpoint, fabric::Peer) {
    let o = offer("tcp;ofi_rxm");
    let a = Endpoint::open(&o).expect("endpoint");
    let mut b = Endpoint::open(&o).expect("endpoint");
    b.set_timeouts(Timeouts {
        base: Duration::from_millis(500),
        min_bandwidth: 1e9,
        ..Timeouts::default()
    });
    let peer = b.insert_peer(a.address()).expect("insert");
    (a, b, peer)
}

#[test]
fn bad_keys_and_oversized_reads_are_errors_not_hangs() {
    let (a, b, peer) = impatient_pair();
    let exposed: MemoryRegion<RemoteRead> = a
        .register(Buffer::new(4096).expect("buffer"))
        .expect("register");
    let dst: MemoryRegion<Local> = b
        .register(Buffer::new(4096).expect("buffer"))
        .expect("register");
    let bogus = RemoteRegion {
        key: exposed.remote().key + 1000,
        ..exposed.remote()
    };
    // The provider refuses the key, or the operation's own 0.5 s deadline ends it: not the
    // waiter's limit.
    match b.read(peer, dst, bogus).expect("post").wait(WAIT) {
        Ok(_) => panic!("a read with a wrong key succeeded"),
        Err(FabricError::Timeout { waited, .. }) if waited == WAIT => {
            panic!("the read outlived its deadline")
        }
        Err(e) => eprintln!("a wrong key: {e}"),
    }
    let small: MemoryRegion<Local> = b
        .register(Buffer::new(16).expect("buffer"))
        .expect("register");
    assert!(matches!(
        b.read(peer, small, exposed.remote()),
        Err(FabricError::InvalidArgument(_))
    ));
    // A region of another endpoint's domain is refused, not handed to the provider.
    let foreign: MemoryRegion<Local> = a
        .register(Buffer::new(4096).expect("buffer"))
        .expect("register");
    match b.read(peer, foreign, exposed.remote()) {
        Err(FabricError::InvalidArgument(why)) => assert!(why.contains("domain"), "{why}"),
        other => panic!("a foreign region was accepted: {:?}", other.is_ok()),
    }
    // An empty buffer is not registered with the provider: nothing to reach.
    let empty: MemoryRegion<RemoteRead> = a
        .register(Buffer::new(0).expect("buffer"))
        .expect("register an empty buffer");
    assert_eq!(empty.remote().len, 0);
    assert!(empty.as_slice().is_empty() && empty.into_buffer().is_empty());
    assert!(exposed.remote().slice(4000, 200).is_err());
}

#[test]
fn closing_an_endpoint_fails_what_is_in_flight() {
    let o = offer("tcp;ofi_rxm");
    let a = Endpoint::open(&o).expect("endpoint");
    let rx = a.recv(1, 16).expect("post recv");
    drop(a);
    assert!(matches!(rx.wait(WAIT), Err(FabricError::Canceled(_))));
}

/// Endpoints of IP providers bound to loopback name 127.0.0.1; shm's have no IP.
#[test]
fn ip_providers_expose_the_address_they_are_bound_to() {
    for provider in ["tcp;ofi_rxm", "net", "udp;ofi_rxd"] {
        let ep = Endpoint::open(&offer(provider)).expect("endpoint");
        assert_eq!(
            ep.address().ip(),
            Some(std::net::Ipv4Addr::LOCALHOST.into()),
            "{provider}: {:?}",
            ep.address()
        );
    }
    let shm = Endpoint::open(&offer("shm")).expect("shm");
    assert_eq!(shm.address().ip(), None);
}

/// Landing regions are reused (the smallest that fits), and the pool keeps no more than its
/// limit.
#[test]
fn region_pools_reuse_the_smallest_fit_within_their_limit() {
    let ep = Endpoint::open(&offer("shm")).expect("endpoint");
    let pool = fabric::RegionPool::with_limit(3 << 20);
    let big = pool.take(&ep, 2 << 20).expect("2 MiB");
    let small = pool.take(&ep, 100).expect("4 KiB");
    assert_eq!((big.len(), small.len()), (2 << 20, 4096), "powers of two");
    let (big_at, small_at) = (big.as_slice().as_ptr(), small.as_slice().as_ptr());
    pool.give(big);
    pool.give(small);
    assert_eq!(pool.len(), 2);
    let again = pool.take(&ep, 1000).expect("reuse");
    assert_eq!(
        again.as_slice().as_ptr(),
        small_at,
        "the smallest that fits"
    );
    let again_big = pool.take(&ep, 4097).expect("reuse");
    assert_eq!(again_big.as_slice().as_ptr(), big_at);
    pool.give(again_big);
    let over = pool.take(&ep, 2 << 20).expect("a new 2 MiB region");
    pool.give(over);
    assert_eq!(
        pool.len(),
        1,
        "a second 2 MiB region exceeds the 3 MiB limit"
    );
    drop(again);
}

/// A pool of thousands of regions (a group's members each landed in one) gives every one
/// back for reuse, of the right size, without registering more.
#[test]
fn region_pools_reuse_thousands_of_regions() {
    let ep = Endpoint::open(&offer("shm")).expect("endpoint");
    let pool = fabric::RegionPool::new();
    let first: Vec<_> = (0..3000)
        .map(|i| pool.take(&ep, if i % 3 == 0 { 70_000 } else { 100 }))
        .collect::<Result<_, _>>()
        .expect("regions");
    let addresses: std::collections::HashSet<_> = first
        .iter()
        .map(|r| r.as_slice().as_ptr() as usize)
        .collect();
    for r in first {
        pool.give(r);
    }
    assert_eq!(pool.len(), 3000);
    let again: Vec<_> = (0..3000)
        .map(|i| pool.take_kept(&ep, if i % 3 == 0 { 65_537 } else { 4096 }))
        .collect::<Option<_>>()
        .expect("every one kept");
    assert!(pool.is_empty());
    assert!(
        again
            .iter()
            .all(|r| addresses.contains(&(r.as_slice().as_ptr() as usize))),
        "the same regions"
    );
    assert_eq!(
        again.iter().filter(|r| r.len() == 128 << 10).count(),
        1000,
        "each size where it was asked for"
    );
}

/// Set in the child of [`a_process_that_exits_without_closing_leaves_no_shm_file`].
const EXIT_CHILD: &str = "FABRIC_TEST_EXIT_WITHOUT_CLOSING";

#[test]
fn a_process_that_exits_without_closing_leaves_no_shm_file() {
    if std::env::var_os(EXIT_CHILD).is_some() {
        // The child: an endpoint left open, then exit (as a C program that never finalizes).
        let ep = Endpoint::open(&offer("shm")).expect("shm endpoint");
        std::mem::forget(ep);
        std::process::exit(0);
    }
    let exe = std::env::current_exe().expect("test binary");
    let child = std::process::Command::new(exe)
        .args([
            "a_process_that_exits_without_closing_leaves_no_shm_file",
            "--exact",
            "--nocapture",
        ])
        .env(EXIT_CHILD, "1")
        .spawn()
        .expect("child");
    let pid = child.id();
    let out = child.wait_with_output().expect("child ends");
    assert!(out.status.success(), "{out:?}");
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{pid}:")))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// What a read's callback saw: its thread, and the bytes or the error.
type Seen = (std::thread::ThreadId, Result<Vec<u8>, String>);

/// A read's callback that tells `tx` what it saw.
fn report(
    tx: &std::sync::mpsc::Sender<Seen>,
) -> impl FnOnce(fabric::Result<MemoryRegion<Local>>) + Send + 'static {
    let to = tx.clone();
    move |r| {
        let seen = r.map(|g| g.as_slice().to_vec()).map_err(|e| e.to_string());
        to.send((std::thread::current().id(), seen)).expect("send");
    }
}

/// `Op::then`: the outcome goes to the callback on the thread that read the completion
/// (the progress thread, or the poster for a read over before `then`), failures
/// included; a callback that panics leaves the endpoint working; one that drops the
/// endpoint itself, on its own progress thread, neither hangs nor stops the other
/// endpoint.
#[test]
fn completion_callbacks_get_the_outcome_on_the_completing_thread() {
    let (a, b, peer) = impatient_pair();
    let original = pattern(64 << 10, 3);
    let exposed: MemoryRegion<RemoteRead> = a
        .register(Buffer::from_slice(&original).expect("buffer"))
        .expect("register");
    let landing = |ep: &Endpoint| -> MemoryRegion<Local> {
        ep.register(Buffer::new(64 << 10).expect("buffer"))
            .expect("register")
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let read = |ep: &Endpoint, peer, from| ep.read(peer, landing(ep), from).expect("post");

    // A read already over when `then` comes has its callback run at once, on the poster's
    // thread (as documented): of a few reads, some complete on the progress thread.
    let poster = std::thread::current().id();
    let mut elsewhere = 0;
    for _ in 0..20 {
        read(&b, peer, exposed.remote()).then(report(&tx));
        let (by, got) = rx.recv_timeout(WAIT).expect("the callback ran");
        assert!(got.expect("read") == original, "the bytes differ");
        elsewhere += usize::from(by != poster);
    }
    assert!(elsewhere > 0, "every callback ran on the poster's thread");

    // A callback that panics; the next read completes as before.
    read(&b, peer, exposed.remote()).then(|_| panic!("a callback that panics"));
    read(&b, peer, exposed.remote()).then(report(&tx));
    let (_, again) = rx
        .recv_timeout(WAIT)
        .expect("the callback ran after a panic");
    assert!(again.expect("read") == original);

    // The callback owns the endpoint whose read it completes, and drops it.
    let c = Endpoint::open(&offer("tcp;ofi_rxm")).expect("endpoint");
    let to_a = c.insert_peer(a.address()).expect("insert");
    let op = read(&c, to_a, exposed.remote());
    let tell = report(&tx);
    op.then(move |r| {
        drop(c);
        tell(r);
    });
    let (_, owned) = rx
        .recv_timeout(WAIT)
        .expect("the callback closing its endpoint returned");
    assert!(owned.expect("read") == original);
    let got = read(&b, peer, exposed.remote())
        .wait(WAIT)
        .expect("read after");
    assert!(got.as_slice() == original, "`a` no longer serves reads");

    // Last (tcp drops the connection after it): a wrong key, the provider's error or
    // the 0.5 s deadline, through the callback.
    let bogus = RemoteRegion {
        key: exposed.remote().key + 1000,
        ..exposed.remote()
    };
    read(&b, peer, bogus).then(report(&tx));
    let (_, failed) = rx.recv_timeout(WAIT).expect("the callback ran");
    let why = failed.expect_err("a read with a wrong key succeeded");
    eprintln!("a wrong key: {why}");
}
