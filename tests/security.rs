//! The attack suite: what a peer without the workflow secret, another Unix user, and an
//! application that knows the secret but misbehaves could do to a workflow, each tried as
//! an attacker would and now refused with a clear error while an honest app is served.
//!
//! The tests that need a second Unix user run as root: they create the user
//! (`useradd`), and remove it at the end, as the network-namespace tests create their
//! namespaces. Everything else runs as any user.

mod common;

use pool::CallError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{build_c, maestro, rss_kib, run, start_pm, start_pm_with_env, tcp_addr};
use pool::attr::{self, AttrValue, Attributes};
use pool::bootstrap::{ControlAddr, PmInfo};
use pool::events::{EventKind, SubscribeOptions};
use pool::proto::{self, FromPm, Op, ToPm, cdo_ids};
use pool::selector::Expr;
use pool::{Client, ClientError, JoinOptions};
use pool_tools::wire::Conn;

use common::apps::{
    LIMIT, answer_challenge, buffer, client, honest_round_trip, info, is_alive, raw,
};

#[test]
fn a_crafted_frame_before_join_or_a_deep_selector_after_it_leaves_the_pm_serving() {
    let (pm, text) = start_pm("sec-frames", &[]);
    let info = info(&text);
    // Issue #28's frame: a Subscribe whose selector nests 20,000 nots, before any JOIN.
    let mut payload = vec![1u8, 14, 0, 0];
    payload.extend(std::iter::repeat_n(6u8, 20_000));
    payload.extend([0u8; 4]);
    let mut frame = proto::MAGIC.to_vec();
    frame.push(proto::VERSION);
    frame.extend((payload.len() as u32).to_le_bytes());
    frame.extend(&payload);
    let mut s = TcpStream::connect(tcp_addr(&info)).expect("connect");
    s.set_read_timeout(Some(LIMIT)).expect("timeout");
    s.write_all(&frame).expect("send");
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink); // the PM closes the connection
    assert!(is_alive(&pm), "the PM survived the frame");
    // A joined app sends the same depth in the wire's flat form: refused, PM alive.
    let (mut conn, _) = raw(&info, "deep");
    let mut deep = Expr::Has(".a".into());
    for _ in 0..20_000 {
        deep = Expr::Not(Box::new(deep));
    }
    let msg = ToPm::Subscribe {
        local: 1,
        kinds: EventKind::Offer.into(),
        selector: Box::new(deep),
        options: SubscribeOptions::default(),
    };
    conn.send_batch(std::slice::from_ref(&msg)).expect("send");
    // (Dropping a 20,000-deep tree recurses as deep: the test leaks it instead.)
    std::mem::forget(msg);
    match conn.recv(Op::Subscribe) {
        Err(ClientError::Call(CallError::Closed)) => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
    assert!(is_alive(&pm), "the PM survived the selector");
    honest_round_trip(&info, "after-frames");
}

/// A TCP connection to `to` from source address `from` (another loopback address: the PM
/// sees another peer).
fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else {
        return Err(std::io::Error::other("IPv4 expected"));
    };
    let addr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, owned by the TcpStream at once (closed on every path), bound
    // and connected with addresses that live through the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let src = addr(from, 0);
        if libc::bind(fd, (&raw const src).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let dst = addr(to.ip().octets(), to.port());
        if libc::connect(fd, (&raw const dst).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

#[test]
fn a_flood_of_unjoined_connections_does_not_lock_honest_apps_out() {
    let (mut pm, text) = start_pm(
        "sec-flood",
        &[
            "--max-unjoined",
            "200",
            "--max-unjoined-per-peer",
            "100",
            "--join-timeout",
            "60",
        ],
    );
    let stderr = common::lines(pm.child.stderr.take().expect("stderr"));
    let info = info(&text);
    // The flood comes from 127.0.0.2; honest apps join over TCP from 127.0.0.1 only.
    let pm_addr = info
        .endpoints
        .iter()
        .find_map(|e| match e {
            ControlAddr::Tcp(a) if a.ip().is_loopback() => Some(*a),
            _ => None,
        })
        .expect("the PM listens on loopback");
    let tcp_only = PmInfo {
        endpoints: vec![ControlAddr::Tcp(pm_addr)],
        ..info.clone()
    };
    let start = Instant::now();
    let flood: Vec<TcpStream> = (0..1100)
        .map(|_| connect_from([127, 0, 0, 2], pm_addr).expect("connect from 127.0.0.2"))
        .collect();
    for round in 0..5 {
        honest_round_trip(&tcp_only, &format!("during-flood-{round}"));
    }
    let took = start.elapsed();
    assert!(is_alive(&pm));
    // The flood evicted itself: at most 100 of its connections are still open.
    let open = flood
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).expect("nonblocking");
            let mut b = [0u8; 256];
            let mut s = *s;
            loop {
                match s.read(&mut b) {
                    Ok(0) => return false,
                    Ok(_) => {} // the challenge
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                    Err(_) => return false,
                }
            }
        })
        .count();
    assert!(open <= 100, "{open} flood connections still open");
    drop(flood);
    // Warnings are rate-limited: 1,000 evictions are not 1,000 lines. Counted until the
    // PM's log falls quiet (no line for 300 ms), at most 10 s.
    let quiet = Instant::now() + Duration::from_secs(10);
    let mut warned = 0;
    while Instant::now() < quiet && stderr.recv_timeout(Duration::from_millis(300)).is_ok() {
        warned += 1;
    }
    let bound = 10 * (took.as_secs() as usize + 2) + 20;
    assert!(
        warned <= bound,
        "{warned} log lines for the flood (at most {bound})"
    );
}

/// A second Unix user for the length of a test (root only: a test that needs one fails
/// when not root, it does not pass silently), removed on drop.
struct OtherUser {
    name: String,
    uid: u32,
    dir: PathBuf,
}

impl OtherUser {
    /// Creates the user.
    ///
    /// # Panics
    /// When not root: the test cannot prove anything then, and must not pass.
    fn create() -> OtherUser {
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "this test creates a second Unix user and needs root: run the suite as root, as scripts/test.sh does"
        );
        let name = format!("mstrosec{}", std::process::id());
        let made = Command::new("useradd")
            .args(["-M", "-s", "/bin/sh", &name])
            .status()
            .expect("useradd");
        assert!(made.success(), "useradd {name}");
        let out = Command::new("id").args(["-u", &name]).output().expect("id");
        let uid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("uid");
        // Programs the user runs: a directory it can read.
        let dir = std::env::temp_dir().join(format!("mstrosec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        set_mode(&dir, 0o755);
        OtherUser { name, uid, dir }
    }

    /// Runs `cmd` (a shell command line) as this user, at most `limit`.
    fn run(&self, cmd: &str, limit: Duration) -> common::Output {
        run(
            Command::new("su").args([&self.name, "-c", cmd]),
            limit + Duration::from_secs(5),
        )
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        // Whatever it still runs goes first, then the user.
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.uid.to_string()])
            .status();
        let _ = Command::new("userdel").arg(&self.name).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn another_user_gets_nothing_from_maestro_run() {
    let mallory = OtherUser::create();
    let intruder = build_c("cc", "intruder_tool.c", Some("pmix"), &mallory.dir);
    let claim_root = build_c("cc", "claim_root.so.c", None, &mallory.dir);
    let fake_client = build_c("cc", "pmix_client.c", Some("pmix"), &mallory.dir);
    let (job, uri) = common::tool_support_launcher(&["-n", "1", "--", "sleep", "12"]);
    let dir = std::fs::metadata(
        common::maestro_run_server_dir(job.pid())
            .parent()
            .expect("dir"),
    )
    .expect("run dir");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&dir.permissions()) & 0o777,
        0o700
    );
    let key = "maestro.pool.pm-info.sec";
    let tool = format!("{} '{uri}' {key} {key}", intruder.display());
    // An honest libpmix (claims its own uid), and one that claims to be root.
    for pre in [
        String::new(),
        format!("LD_PRELOAD={}", claim_root.display()),
    ] {
        // A refused tool waits for an answer that never comes: 2 s are enough to see.
        let out = mallory.run(&format!("{pre} timeout 2 {tool}"), Duration::from_secs(2));
        assert!(
            !out.stdout.contains("init OK"),
            "another user's tool was served:\n{}",
            out.stdout
        );
    }
    // A fake rank 0 from the other user, claiming root too.
    let port = uri.rsplit(':').next().expect("port");
    let client = format!(
        "LD_PRELOAD={} PMIX_NAMESPACE=maestro.job.{pid} PMIX_RANK=0 PMIX_SERVER_URI41='maestro.host.{pid}.0;tcp4://127.0.0.1:{port}' PMIX_SECURITY_MODE=native timeout 2 {}",
        claim_root.display(),
        fake_client.display(),
        pid = job.pid()
    );
    let out = mallory.run(&client, Duration::from_secs(2));
    assert!(
        !out.stdout.contains("OK"),
        "a fake rank was served:\n{}",
        out.stdout
    );
    // The user's own tool is still served.
    let own = run(
        Command::new(&intruder).args([&uri, key, key]),
        Duration::from_secs(10),
    );
    assert!(own.stdout.contains("init OK"), "{}", own.stdout);
    // The job ends as it should, and the launcher with it (bounded PMIx shutdown).
    let out = job.wait(Duration::from_secs(20));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("tool connection refused"),
        "{}",
        out.stderr
    );
}

#[test]
fn the_pm_info_is_kept_private() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("info.txt");
    let file = std::fs::File::create(&path).expect("create");
    set_mode(&path, 0o644);
    use std::os::unix::process::CommandExt;
    let mut pm = Command::new(maestro())
        .args(["pm", "--print-info", "--workflow", "sec-private"])
        .process_group(0)
        .stdout(file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("maestro pm");
    let end = Instant::now() + LIMIT;
    while std::fs::read_to_string(&path).map_or(true, |t| !t.contains(';')) {
        assert!(Instant::now() < end, "no PM info written");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path).expect("meta").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the info file was made private");
    // A mangled info never shows the secret in errors.
    let text = std::fs::read_to_string(&path).expect("info");
    let secret = text
        .trim()
        .trim_end_matches(';')
        .rsplit(':')
        .next()
        .expect("secret");
    let mangled = format!("{secret}:x");
    let err = PmInfo::parse(&mangled).expect_err("mangled").to_string();
    assert!(!err.contains(&secret[..16]), "{err}");
    // SAFETY: signalling the process this test started.
    unsafe { libc::kill(pm.id() as i32, libc::SIGTERM) };
    let _ = pm.wait();
}

#[test]
fn integrity_is_checked_end_to_end() {
    let (_pm, text) = start_pm("sec-integrity", &[]);
    let info = info(&text);
    let producer = client(&info, "producer");
    let consumer = client(&info, "consumer");
    let checked = || Attributes::from([(attr::INTEGRITY.to_string(), AttrValue::Bool(true))]);
    let cdo = producer.declare("good").expect("declare");
    producer
        .seal_and_offer(cdo, checked(), buffer(&[3; 65536]))
        .expect("offer");
    let want = consumer.declare("good").expect("declare");
    let (data, attrs) = consumer.demand(want).expect("intact bytes arrive");
    assert_eq!(data.as_slice(), &[3; 65536][..]);
    assert!(matches!(
        attrs.get(attr::CHECKSUM),
        Some(AttrValue::Uint(_))
    ));
    // A producer that changes its bytes while they are offered (the contract says it
    // must not): the consumer gets an error, not the changed data.
    let bad = producer.declare("changed").expect("declare");
    let buf = buffer(&[5; 65536]);
    let ptr = buf.as_slice().as_ptr().cast_mut();
    producer.seal_and_offer(bad, checked(), buf).expect("offer");
    // SAFETY: test only: the offered buffer stays allocated while offered; writing to it
    // is exactly the misbehaviour under test.
    unsafe { ptr.write_bytes(6, 100) };
    let want = consumer.declare("changed").expect("declare");
    match consumer.demand(want) {
        Err(ClientError::Call(CallError::Integrity { why, .. })) => {
            assert!(why.contains("checksum"), "{why}")
        }
        other => panic!(
            "changed bytes were delivered: {:?}",
            other.map(|(d, _)| d.len())
        ),
    }
}

/// A raw JOIN that announces what a real client would: a shared-memory endpoint (fake
/// address) and process memory, as `component` of process token `process` on this host.
fn raw_join_announcing(
    info: &PmInfo,
    component: &str,
    process: u64,
    memory: proto::ProcessMemory,
) -> (Conn, proto::AppId) {
    let mut c = Conn::connect(&ControlAddr::Tcp(tcp_addr(info)), LIMIT).expect("connect");
    let nonce = match c.recv(Op::Join).expect("challenge") {
        FromPm::Challenge { nonce } => nonce,
        other => panic!("{other:?}"),
    };
    let join = proto::Join {
        workflow: info.workflow.clone(),
        component: component.into(),
        index: 0,
        host: inventory::local_hostname(),
        process,
        job: String::new(),
        endpoint: Some(proto::FabricEndpoint {
            provider: "shm".into(),
            address: fabric::Address(component.as_bytes().to_vec()),
        }),
        alternates: Vec::new(),
        networks: Vec::new(),
        memory: Some(memory),
        credential: None,
        nics: Default::default(),
        gfs: None,
        role: Default::default(),
        proof: pool::auth::prove(&info.secret, &nonce, &info.workflow, component, 0),
        reclaim: None,
        member: None,
    };
    c.send_batch(&[ToPm::Join(Box::new(join))]).expect("join");
    let app = pool::welcome(c.recv(Op::Join).expect("welcome"))
        .expect("welcomed")
        .0;
    (c, app)
}

#[test]
fn a_replayed_memory_announcement_reads_nothing_the_producer_did_not_offer() {
    let (_pm, text) = start_pm("sec-replay", &[]);
    let info = info(&text);
    // The producer (this process) offers one CDO and keeps a secret it never offers.
    let secret = b"PRIVATE-NOT-OFFERED-password=hunter2".to_vec();
    let producer = client(&info, "producer");
    let public = producer.declare("public").expect("declare");
    // Larger than inline CDOs: its tickets name the producer's memory.
    producer
        .seal_and_offer(public, Attributes::new(), buffer(&[1; 8192]))
        .expect("offer");
    // A spy consumer learns the producer's pid, token and token address from a ticket.
    let nobody = proto::ProcessMemory {
        pid: 1,
        token: 1,
        token_addr: 1,
    };
    let (mut spy, spy_app) = raw_join_announcing(&info, "spy", 101, nobody);
    let want = *cdo_ids(spy_app).start();
    spy.send_batch(&[
        ToPm::Declare {
            cdo: want,
            name: "public".into(),
        },
        ToPm::Demand { cdo: want },
    ])
    .expect("send");
    let learned = match spy.recv(Op::Demand).expect("ticket") {
        FromPm::Ticket {
            source: proto::Source::Rma {
                memory: Some(m), ..
            },
            ..
        } => m.process,
        other => panic!("expected a same-host ticket, got {other:?}"),
    };
    // Mallory joins again announcing the producer's memory, and offers the address of
    // the secret as if it were hers.
    let (mut mallory, app) = raw_join_announcing(&info, "mallory", 202, learned);
    let cdo = *cdo_ids(app).start();
    mallory
        .send_batch(&[
            ToPm::Declare {
                cdo,
                name: "stolen".into(),
            },
            ToPm::SealOffer {
                cdo,
                attributes: Attributes::new(),
                region: fabric::RemoteRegion {
                    addr: secret.as_ptr() as u64,
                    key: 0,
                    len: secret.len() as u64,
                },
                extras: proto::OfferExtras::default(),
            },
        ])
        .expect("send");
    assert!(matches!(
        mallory.recv(Op::Offer).expect("answer"),
        FromPm::Done { op: Op::Offer, .. }
    ));
    // The consumer's ticket does not say "copy from the producer's memory": it reads
    // Mallory's (fake) endpoint and fails, never the secret.
    let consumer = Client::join(
        &info,
        JoinOptions::new("consumer", 0)
            .timeout(Duration::from_secs(3))
            .isolated()
            .fabric(fabric::Scope::SameNode)
            .expect("endpoint"),
    )
    .expect("join");
    let want = consumer.declare("stolen").expect("declare");
    match consumer.demand(want) {
        Ok((data, _)) => assert!(
            !data.as_slice().windows(8).any(|w| w == b"PRIVATE-"),
            "the consumer read the producer's private memory"
        ),
        Err(e) => eprintln!("the stolen offer is not served: {e}"),
    }
    drop(secret);
}

/// A directory every user may write, sticky like `/tmp` (a stand-in for it, removed at
/// the end), with the root-owned files this user's programs use (the hostname's).
fn shared_tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    set_mode(t.path(), 0o1777);
    t
}

/// `maestro ARGS` as this user with `TMPDIR=tmp` (and no `XDG_RUNTIME_DIR`: the user's
/// private directory is then `tmp/maestro-<uid>`).
fn maestro_in(tmp: &Path, args: &[&str], limit: Duration) -> common::Output {
    run(
        Command::new(maestro())
            .env("TMPDIR", tmp)
            .env_remove("XDG_RUNTIME_DIR")
            .args(args),
        limit,
    )
}

#[test]
fn files_another_user_plants_in_shared_places_are_never_trusted() {
    let mallory = OtherUser::create();
    let tmp = shared_tmp();
    let t = tmp.path().to_str().expect("utf-8 path");
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    // 1. libfabric shm files for the next 400 pids (both of libfabric's own names).
    let next = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .expect("ns_last_pid");
    let plant = format!(
        "for p in $(seq {} {}); do for e in 0 1; do f=/dev/shm/$p:{uid}:$e; head -c 4096 /dev/zero > $f; chmod 666 $f; done; done",
        next + 1,
        next + 400
    );
    let planted = mallory.run(&plant, Duration::from_secs(60));
    assert_eq!(planted.code(), Some(0), "{planted:?}");
    let exe = common::example("pool_workflow");
    let out = common::maestro_run(&[
        "-n",
        "4",
        exe.to_str().expect("utf-8"),
        "--cdos",
        "6",
        "--max-size",
        "65536",
    ]);
    out.assert_workflow(6);
    let fabric = run(
        Command::new(maestro()).args([
            "bench",
            "fabric",
            "--provider",
            "shm",
            "--sizes",
            "4K",
            "--volume",
            "1M",
        ]),
        Duration::from_secs(120),
    );
    assert_eq!(fabric.code(), Some(0), "{fabric:?}");
    // Not one planted file was adopted: each is still the attacker's 4 KiB of zeros.
    let adopted: Vec<String> = (next + 1..=next + 400)
        .flat_map(|p| [0, 1].map(|e| format!("/dev/shm/{p}:{uid}:{e}")))
        .filter(|f| std::fs::read(f).map_or(true, |b| b.len() != 4096 || b.iter().any(|&x| x != 0)))
        .collect();
    assert!(adopted.is_empty(), "planted shm files touched: {adopted:?}");
    mallory.run(
        &format!(
            "rm -f $(seq -f '/dev/shm/%g:{uid}:0' {} {}) $(seq -f '/dev/shm/%g:{uid}:1' {} {})",
            next + 1,
            next + 400,
            next + 1,
            next + 400
        ),
        Duration::from_secs(30),
    );

    // 2. A pre-created --info-file, a link there, a FIFO there: refused at once, naming
    // what is there; nothing written, nothing followed.
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "keep").expect("victim");
    let setup = format!(
        "touch {t}/wf.info && chmod 666 {t}/wf.info && ln -s {} {t}/link.info && mkfifo -m 666 {t}/fifo.info",
        victim.display()
    );
    assert_eq!(mallory.run(&setup, Duration::from_secs(10)).code(), Some(0));
    for (name, what) in [
        ("wf.info", format!("a file of uid {}", mallory.uid)),
        ("link.info", "a symbolic link".to_string()),
        ("fifo.info", "a FIFO".to_string()),
    ] {
        let path = format!("{t}/{name}");
        let pm = maestro_in(
            tmp.path(),
            &["pm", "--workflow", "sec-planted", "--info-file", &path],
            Duration::from_secs(20),
        );
        assert_eq!(pm.code(), Some(2), "{name}: {pm:?}");
        assert!(pm.stderr.contains(&what), "{name}: {}", pm.stderr);
        assert!(!pm.stdout.contains("MSTRO_POOL_MANAGER_INFO"), "{name}");
    }
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep");
    assert_eq!(
        std::fs::read(tmp.path().join("wf.info"))
            .expect("info")
            .len(),
        0
    );

    // 3. A FIFO at the system server's name: refused at once, and tools say whose it is;
    // a plain launcher (and its janitor) never blocks on it.
    let host = inventory::local_hostname();
    let fifo = format!("{t}/pmix.sys.{host}");
    assert_eq!(
        mallory
            .run(&format!("mkfifo -m 666 {fifo}"), Duration::from_secs(10))
            .code(),
        Some(0)
    );
    let sys = maestro_in(
        tmp.path(),
        &["run", "-n", "1", "--system-server", "--", "true"],
        Duration::from_secs(20),
    );
    assert_eq!(sys.code(), Some(2), "{sys:?}");
    assert!(sys.stderr.contains("a FIFO of uid"), "{}", sys.stderr);
    let query = maestro_in(
        tmp.path(),
        &["query", "--system", "--system-tmpdir", t],
        Duration::from_secs(20),
    );
    assert_ne!(query.code(), Some(0), "{query:?}");
    assert!(query.stderr.contains("a FIFO of uid"), "{}", query.stderr);
    let plain = maestro_in(
        tmp.path(),
        &["run", "-n", "1", "--", "true"],
        Duration::from_secs(20),
    );
    assert_eq!(plain.code(), Some(0), "{plain:?}");
    assert!(Path::new(&fifo).exists(), "what is not ours stays");

    // 4. Launchers' directories squatted for the next pids change nothing (they live in
    // the user's private directory); that directory squatted is a clear error naming the
    // squatter, never a silent loss.
    let squat = format!(
        "for p in $(seq {} {}); do mkdir -p {t}/maestro-run.$p; done",
        next + 1,
        next + 2000
    );
    assert_eq!(mallory.run(&squat, Duration::from_secs(60)).code(), Some(0));
    let ok = maestro_in(
        tmp.path(),
        &["run", "-n", "1", "--", "true"],
        Duration::from_secs(20),
    );
    assert_eq!(ok.code(), Some(0), "{ok:?}");
    let other = tempfile::tempdir().expect("tempdir");
    set_mode(other.path(), 0o1777);
    let o = other.path().to_str().expect("utf-8");
    assert_eq!(
        mallory
            .run(
                &format!("mkdir -m 777 {o}/maestro-{uid}"),
                Duration::from_secs(10)
            )
            .code(),
        Some(0)
    );
    let refused = maestro_in(
        other.path(),
        &["run", "-n", "1", "--", "true"],
        Duration::from_secs(20),
    );
    assert_ne!(refused.code(), Some(0), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains(&format!("a directory of uid {}", mallory.uid)),
        "{}",
        refused.stderr
    );
}

#[test]
fn another_user_holding_the_pm_info_is_refused_over_every_endpoint() {
    let mallory = OtherUser::create();
    // The PM listens where a workflow needs it: its NIC's address and loopback.
    let (pm, line) = start_pm("sec-holder", &[]);
    let info = PmInfo::parse(&line).expect("info");
    let exe = mallory.dir.join("maestro");
    std::fs::copy(maestro(), &exe).expect("copy maestro");
    set_mode(&exe, 0o755);
    let tcp: Vec<ControlAddr> = info
        .endpoints
        .iter()
        .filter(|e| matches!(e, ControlAddr::Tcp(_)))
        .cloned()
        .collect();
    assert!(!tcp.is_empty(), "{info:?}");
    // Each TCP endpoint alone (the Unix socket is in a directory only its user enters),
    // and the whole info as given: the secret is right, the user is not.
    let alone = tcp.into_iter().map(|e| PmInfo {
        endpoints: vec![e],
        ..info.clone()
    });
    for held in alone.chain([info.clone()]) {
        let cmd = format!("{} pool status --info '{}'", exe.display(), held.encode());
        let out = mallory.run(&cmd, Duration::from_secs(30));
        assert_eq!(out.code(), Some(2), "{:?}: {out:?}", held.endpoints);
        let why = format!("the connecting process runs as uid {}", mallory.uid);
        assert!(
            out.stderr.contains(&why),
            "{:?}: {}",
            held.endpoints,
            out.stderr
        );
        assert!(
            !out.stdout.contains("pool manager of workflow"),
            "{}",
            out.stdout
        );
    }
    // The user's own tool, from another job and over TCP, is served.
    let own = run(
        Command::new(maestro()).args(["pool", "status", "--info", &line]),
        Duration::from_secs(30),
    );
    assert_eq!(own.code(), Some(0), "{own:?}");
    let out = pm.terminate(Duration::from_secs(10));
    assert!(out.stderr.contains("was refused at JOIN"), "{}", out.stderr);
}

/// A TCP socket that `user` created and connected to `to`, handed over to this process
/// (`SCM_RIGHTS`): the kernel still names `user` as its owner, so speaking through it is
/// that user speaking, whatever this process then sends.
fn socket_made_by(user: &OtherUser, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    use std::os::unix::net::UnixListener;
    let path = user.dir.join(format!("pass-{}.sock", to.port()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).expect("bind");
    set_mode(&path, 0o777);
    let script = "import socket,sys; a=sys.argv; s=socket.create_connection((a[1], int(a[2]))); \
                  u=socket.socket(socket.AF_UNIX); u.connect(a[3]); socket.send_fds(u, [b'x'], [s.fileno()])";
    let cmd = format!(
        "python3 -c \"{script}\" '{}' {} '{}'",
        to.ip(),
        to.port(),
        path.display()
    );
    let helper = std::thread::scope(|s| {
        let h = s.spawn(|| user.run(&cmd, LIMIT));
        let (unix, _) = listener.accept().expect("the helper connects");
        let mut byte = [0u8; 1];
        let mut space = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // SAFETY: a zeroed msghdr pointing at this frame's buffers; the kernel writes at
        // most `msg_controllen` bytes of control data.
        let fd = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = space.as_mut_ptr().cast();
            msg.msg_controllen = space.len();
            let n = libc::recvmsg(
                std::os::fd::AsRawFd::as_raw_fd(&unix),
                &raw mut msg,
                libc::MSG_CMSG_CLOEXEC,
            );
            assert_eq!(n, 1, "one byte with the descriptor");
            let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            assert!(!cmsg.is_null(), "no descriptor passed");
            assert_eq!((*cmsg).cmsg_type, libc::SCM_RIGHTS);
            std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>())
        };
        // SAFETY: the kernel gave this process a fresh descriptor of a TCP socket.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        (h.join().expect("helper"), stream)
    });
    let _ = std::fs::remove_file(&path);
    let (out, stream) = helper;
    assert_eq!(out.code(), Some(0), "{out:?}");
    stream
}

#[test]
fn another_user_who_half_closes_its_connection_is_still_refused() {
    let mallory = OtherUser::create();
    let (pm, line) = start_pm(
        "sec-halfclose",
        &["--listen", "127.0.0.1:0", "--listen", "[::1]:0"],
    );
    let info = PmInfo::parse(&line).expect("info");
    // Root's CDO, small enough to travel inline: what the attack read before.
    let producer = client(&info, "root-producer");
    let cdo = producer.declare("root-secret").expect("declare");
    producer
        .seal_and_offer(cdo, Attributes::new(), buffer(b"root's bytes"))
        .expect("offer");
    let tcp: Vec<SocketAddr> = info
        .endpoints
        .iter()
        .filter_map(|e| match e {
            ControlAddr::Tcp(a) => Some(*a),
            ControlAddr::Unix(_) => None,
        })
        .collect();
    assert!(tcp.iter().any(SocketAddr::is_ipv4), "{tcp:?}");
    assert!(tcp.iter().any(SocketAddr::is_ipv6), "{tcp:?}");
    for &addr in &tcp {
        for role in [proto::Role::App, proto::Role::Observer] {
            let stream = socket_made_by(&mallory, addr);
            let mut conn = Conn::from_tcp(stream, LIMIT).expect("conn");
            let join = answer_challenge(&mut conn, &info, "mallory", |j| j.role = role);
            let mine = cdo_ids(1).next().expect("an id");
            let first = match role {
                proto::Role::App => vec![
                    join,
                    ToPm::Declare {
                        cdo: mine,
                        name: "root-secret".into(),
                    },
                    ToPm::Demand { cdo: mine },
                ],
                proto::Role::Observer => vec![
                    join,
                    ToPm::Query {
                        id: 1,
                        query: pool::view::Query::Ls(pool::view::Ls {
                            selector: None,
                            after: None,
                            limit: 10,
                            attributes: true,
                        }),
                    },
                ],
            };
            // JOIN and the first operations, then the writing half shut down at once:
            // the end is no longer ESTABLISHED when the PM asks who holds it.
            for m in first {
                conn.send_batch(std::slice::from_ref(&m)).expect("send");
            }
            conn.shutdown_write().expect("shutdown");
            let mut heard = Vec::new();
            loop {
                match conn.recv(Op::Join) {
                    Ok(m) => heard.push(m),
                    Err(ClientError::Call(CallError::Closed)) => break,
                    Err(e) => panic!("{addr} {role:?}: {e} after {heard:?}"),
                }
            }
            match heard.as_slice() {
                [
                    FromPm::Refused {
                        op: Op::Join,
                        why: proto::Refusal::NotTheUser(why),
                        ..
                    },
                ] => assert!(
                    why.contains(&format!("runs as uid {}", mallory.uid)),
                    "{addr} {role:?}: {why}"
                ),
                other => panic!("{addr} {role:?}: admitted or answered: {other:?}"),
            }
        }
    }
    assert!(is_alive(&pm));
    honest_round_trip(&info, "after-half-close");
    producer.withdraw(cdo).expect("withdraw");
}

#[test]
fn the_secret_goes_only_where_the_user_says() {
    // Standard output a pipe, as in `maestro pm ... | head -1` or a job's log: nothing.
    let mut cmd = Command::new(maestro());
    cmd.args(["pm", "--workflow", "sec-pipe"]);
    let mut pm = common::Group::spawn(&mut cmd);
    let stdout = pm.child.stdout.take().expect("stdout");
    let said = common::await_line(pm.child.stderr.take().expect("stderr"), "is not printed");
    assert!(said.contains("--print-info"), "{said}");
    let out = pm.terminate(Duration::from_secs(10));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let mut printed = String::new();
    let mut stdout = stdout;
    stdout.read_to_string(&mut printed).expect("stdout");
    assert!(!printed.contains("MSTRO_POOL_MANAGER_INFO"), "{printed}");
    // With --info-file the file has it (0600), and standard output still gets nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("wf.info");
    let mut cmd = Command::new(maestro());
    cmd.args(["pm", "--workflow", "sec-pipe", "--info-file"])
        .arg(&file);
    let pm = common::Group::spawn(&mut cmd);
    let end = Instant::now() + LIMIT;
    while std::fs::read_to_string(&file).map_or(true, |t| !t.contains(':')) {
        assert!(Instant::now() < end, "no info file written");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&file).expect("meta").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let out = pm.terminate(Duration::from_secs(10));
    assert!(
        !out.stdout.contains("MSTRO_POOL_MANAGER_INFO"),
        "{}",
        out.stdout
    );
    assert!(!file.exists(), "removed at exit");
}

/// The slowest of an honest app's demands (a round trip to the PM and the CDO's bytes)
/// while `attack` runs on another thread, and how many it made.
fn honest_latency_during(info: &PmInfo, attack: impl FnOnce() + Send) -> (Duration, usize) {
    let producer = client(info, "honest-producer");
    let offered = producer.declare("probe").expect("declare");
    producer
        .seal_and_offer(offered, Attributes::new(), buffer(b"probe bytes"))
        .expect("offer");
    let honest = client(info, "honest");
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Done however the attack ends (a panic included: the scope reports it).
            struct Done<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let _done = Done(&done);
            attack();
        });
        let (mut worst, mut n) = (Duration::ZERO, 0);
        while !done.load(std::sync::atomic::Ordering::Relaxed) || n < 20 {
            let t = Instant::now();
            let cdo = honest.declare("probe").expect("declare");
            let (data, _) = honest.demand(cdo).expect("demand");
            assert_eq!(data.as_slice(), b"probe bytes");
            worst = worst.max(t.elapsed());
            honest.dispose(cdo).expect("dispose");
            n += 1;
        }
        (worst, n)
    })
}

/// Declares and offers (sealed with `attributes`, `len` bytes) each of `cdos`, named
/// `PREFIX/ID`: the messages of a member that offers many CDOs.
fn offers(cdos: &[proto::CdoId], prefix: &str, attributes: &Attributes, len: u64) -> Vec<ToPm> {
    cdos.iter()
        .flat_map(|&cdo| {
            [
                ToPm::Declare {
                    cdo,
                    name: format!("{prefix}/{cdo}"),
                },
                ToPm::SealOffer {
                    cdo,
                    attributes: attributes.clone(),
                    region: fabric::RemoteRegion {
                        addr: 0,
                        key: cdo,
                        len,
                    },
                    extras: Default::default(),
                },
            ]
        })
        .collect()
}

/// The `HOST:PORT` of the metrics endpoint `pm` says it serves (its stderr is taken).
fn metrics_address(pm: &mut common::Group) -> String {
    let url = common::await_line(
        pm.child.stderr.take().expect("stderr"),
        "metrics at http://",
    );
    url.split("http://")
        .nth(1)
        .and_then(|u| u.split('/').next())
        .expect("address")
        .to_string()
}

/// Sends `msgs` on `conn` in batches, then a dispose that asks for an answer, and reads
/// until that answer (whatever else came).
fn send_all_and_sync(conn: &mut Conn, msgs: Vec<ToPm>, last: proto::CdoId) {
    for batch in msgs.chunks(1000) {
        conn.send_batch(batch).expect("send");
    }
    conn.send_batch(&[ToPm::Dispose {
        cdo: last,
        answer: true,
    }])
    .expect("send");
    loop {
        match conn.recv(Op::Dispose).expect("answers") {
            FromPm::Done {
                op: Op::Dispose, ..
            }
            | FromPm::Refused {
                op: Op::Dispose, ..
            } => return,
            _ => {}
        }
    }
}

#[test]
fn a_member_that_misbehaves_cannot_freeze_the_pm() {
    let (mut pm, text) = start_pm("sec-costs", &["--metrics", ":0"]);
    let addr = metrics_address(&mut pm);
    // `:PORT` is loopback.
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let info = info(&text);
    // 1. 200,000 demands of one name, then the app leaves.
    let (worst, n) = honest_latency_during(&info, || {
        let (mut conn, app) = raw(&info, "waiters");
        let ids: Vec<_> = cdo_ids(app).take(200_001).collect();
        let msgs = ids[..200_000]
            .iter()
            .flat_map(|&cdo| {
                [
                    ToPm::Declare {
                        cdo,
                        name: "one".into(),
                    },
                    ToPm::Demand { cdo },
                ]
            })
            .collect();
        conn.send_batch(&[ToPm::Declare {
            cdo: ids[200_000],
            name: "last".into(),
        }])
        .expect("send");
        send_all_and_sync(&mut conn, msgs, ids[200_000]);
        drop(conn);
        // Until the PM has let it go (its 200,000 CDOs are reaped after), asked by a
        // view that lists apps without counting CDOs.
        let mut watch = pool::Observer::connect(&info, "watch", LIMIT).expect("observer");
        let end = Instant::now() + LIMIT;
        while !matches!(watch.query(pool::view::Query::Fabric), Ok(pool::view::View::Fabric(f)) if f.apps.iter().all(|a| !a.label.starts_with("waiters")))
        {
            assert!(Instant::now() < end, "the waiters' app was not let go");
        }
    });
    eprintln!("200,000 waiters of one name: honest worst {worst:?} over {n} round trips");
    // 2. Selectors priced: 1,000 Unicode regex terms are refused at once.
    let (worst2, _) = honest_latency_during(&info, || {
        let (mut conn, _) = raw(&info, "regexes");
        let heavy = Expr::And(
            (0..1000)
                .map(|i| Expr::Match {
                    key: format!(".user.k{i}"),
                    pattern: r"\w{20}".into(),
                })
                .collect(),
        );
        for local in 0..4 {
            conn.send_batch(&[ToPm::Subscribe {
                local,
                kinds: EventKind::Offer.into(),
                selector: Box::new(heavy.clone()),
                options: SubscribeOptions::default(),
            }])
            .expect("send");
            match conn.recv(Op::Subscribe).expect("answer") {
                FromPm::Refused {
                    why: proto::Refusal::BadSelector(w),
                    ..
                } => assert!(w.contains("[A-Za-z0-9_]"), "{w}"),
                other => panic!("{other:?}"),
            }
        }
    });
    eprintln!("4 heavy selectors: honest worst {worst2:?}");
    // 3. Eight scrapers and 200 idle connections to the metrics endpoint.
    let (worst3, _) = honest_latency_during(&info, || {
        let idle: Vec<TcpStream> = (0..200)
            .filter_map(|_| TcpStream::connect(&addr).ok())
            .collect();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let end = Instant::now() + Duration::from_secs(3);
                    while Instant::now() < end {
                        let _ = ureq::get(format!("http://{addr}/metrics")).call();
                    }
                });
            }
        });
        drop(idle);
    });
    eprintln!("8 scrapers, 200 idle: honest worst {worst3:?}");
    // A scrape is served once the idle connections' second is up.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match ureq::get(format!("http://{addr}/metrics")).call() {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < end, "no scrape served: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (what, w) in [("selectors", worst2), ("scrapers", worst3)] {
        assert!(
            w < Duration::from_millis(100),
            "{what}: an honest round trip took {w:?}"
        );
    }
    // Adding and removing a waiter is O(log n) now (it was a scan: 9.4 s in a release
    // build for this attack); one connection has at most 256 KiB of messages ahead of the
    // others (its flood of 400,000 held an honest demand 1.75 s, all of it); the app's
    // 200,000 CDOs are reaped 1,024 per step after it leaves. What remains is the debug
    // build's cost of a step (100-130 ms worst here, a tenth of it in a release build).
    assert!(
        worst < Duration::from_secs(1),
        "waiters: an honest round trip took {worst:?}"
    );
    assert!(is_alive(&pm));
}

/// An observer that asks for page after page of a PM holding many CDOs and never reads an
/// answer: its reader pauses once 4 MiB of answers wait, so the PM grows by a few MiB
/// (it once queued 510 MB for one such observer and grew to 4.2 GB), the observer is not
/// cut off for it, and an honest app is served throughout.
#[test]
fn an_observer_that_never_reads_costs_the_pm_a_few_mib() {
    const CDOS: usize = 200_000;
    let (pm, text) = start_pm("sec-deaf", &[]);
    let info = info(&text);
    // Many CDOs, each with attributes, so that every page is a large answer.
    let (mut conn, app) = raw(&info, "many");
    let ids: Vec<_> = cdo_ids(app).take(CDOS + 1).collect();
    let attributes = Attributes::from([
        (".user.step".to_string(), AttrValue::Int(12)),
        (
            ".user.param".to_string(),
            AttrValue::Str("temperature".into()),
        ),
    ]);
    conn.send_batch(&[ToPm::Declare {
        cdo: ids[CDOS],
        name: "last".into(),
    }])
    .expect("send");
    let msgs = offers(&ids[..CDOS], "forecast/step", &attributes, 0);
    send_all_and_sync(&mut conn, msgs, ids[CDOS]);
    let before = rss_kib(pm.pid());
    let (worst, n) = honest_latency_during(&info, || {
        let mut deaf = Conn::connect(&ControlAddr::Tcp(tcp_addr(&info)), LIMIT).expect("connect");
        deaf.join_as(&info, ("deaf", 0), proto::Role::Observer)
            .expect("observer joins");
        deaf.set_write_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        // Pages back to back until the PM stops reading (this end's writes block).
        let ls = |id| ToPm::Query {
            id,
            query: pool::view::Query::Ls(pool::view::Ls {
                selector: None,
                after: None,
                limit: pool::view::MAX_PAGE,
                attributes: true,
            }),
        };
        let mut asked = 0;
        let end = Instant::now() + Duration::from_secs(20);
        while deaf.send_batch(&[ls(asked)]).is_ok() && Instant::now() < end {
            asked += 1;
        }
        assert!(Instant::now() < end, "the PM kept reading a deaf observer");
        eprintln!("a deaf observer asked {asked} pages before the PM stopped reading it");
        // Held a while, unread, as such an observer would.
        std::thread::sleep(Duration::from_secs(2));
        let grown = rss_kib(pm.pid()).saturating_sub(before);
        eprintln!("the PM grew by {grown} KiB");
        assert!(
            grown < 48 << 10,
            "the PM grew by {grown} KiB for one deaf observer"
        );
        // Still connected: paused, not cut off as a dead peer.
        let mut status = pool::Observer::connect(&info, "status", LIMIT).expect("observer");
        match status.query(pool::view::Query::Status) {
            Ok(pool::view::View::Status(s)) => assert_eq!(s.observer_count, 2, "{s:?}"),
            other => panic!("status: {other:?}"),
        }
        drop(deaf);
    });
    eprintln!("a deaf observer: honest worst {worst:?} over {n} round trips");
    assert!(worst < Duration::from_secs(1), "honest worst {worst:?}");
    assert!(is_alive(&pm));
}

/// The TCP addresses process `pid` listens on.
fn listening_of(pid: i32) -> Vec<SocketAddr> {
    pool::peers::listening_of(Path::new(&format!("/proc/{pid}/fd"))).expect("listening")
}

#[test]
fn an_excluded_interface_is_never_listened_on() {
    // Where the PM listens when nothing is excluded: its NIC's addresses and loopback.
    let (pm, _) = start_pm("sec-exclude-none", &[]);
    let chosen: Vec<SocketAddr> = listening_of(pm.pid());
    drop(pm);
    assert!(
        chosen.iter().all(|a| !a.ip().is_unspecified()),
        "{chosen:?}"
    );
    let all = inventory::netif::all_addresses().expect("interfaces");
    let nic = chosen
        .iter()
        .filter(|a| !a.ip().is_loopback())
        .find_map(|a| all.iter().find(|i| i.address == a.ip()))
        .map(|i| i.interface.clone());
    // Without a NIC with an address (a host with loopback only) the exclusion of each
    // interface is tried instead.
    let excluded: Vec<String> = match nic {
        Some(n) => vec![n],
        None => all
            .iter()
            .filter(|i| !i.address.is_loopback())
            .map(|i| i.interface.clone())
            .collect(),
    };
    let (pm, line) = start_pm_with_env(
        "sec-exclude",
        &[],
        &[("MSTRO_OFI_IFACE_EXCLUDE", &excluded.join(","))],
    );
    let listens = listening_of(pm.pid());
    eprintln!("excluding {excluded:?}: listening on {listens:?}");
    assert!(!listens.is_empty());
    for a in &listens {
        assert!(!a.ip().is_unspecified(), "the wildcard: {listens:?}");
        let on = all.iter().find(|i| i.address == a.ip());
        assert!(
            on.is_none_or(|i| !excluded.contains(&i.interface)),
            "{a} is on an excluded interface ({excluded:?})"
        );
    }
    // What it advertises is what it listens on, and it serves there.
    let info = PmInfo::parse(&line).expect("info");
    for e in &info.endpoints {
        if let ControlAddr::Tcp(a) = e {
            assert!(
                listens.contains(a),
                "{a} advertised, listening on {listens:?}"
            );
        }
    }
    honest_round_trip(&info, "excluded");
}

/// A GFS directory every user may write in (as a parallel file system's scratch space).
fn shared_gfs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    set_mode(dir.path(), 0o1777);
    dir
}

/// Root's producer offers a CDO marked to persist through the PM of `info`, which keeps
/// it; the producer leaves.
fn hand_over_persisted(info: &str, gfs: &Path, name: &str) {
    let info = PmInfo::parse(info).expect("info");
    let options = common::tcp_lo_options("producer").gfs(pool::GfsOptions {
        dir: gfs.to_path_buf(),
        offer: true,
        group_readable: false,
    });
    let producer = pool::Client::join(&info, options).expect("join");
    let cdo = producer.declare(name).expect("declare");
    let persist = Attributes::from([(
        ".maestro.core.cdo.persist".to_string(),
        AttrValue::Bool(true),
    )]);
    producer
        .seal_and_offer(cdo, persist, buffer(b"root's results"))
        .expect("offer");
    producer.withdraw(cdo).expect("withdraw");
    producer.dispose(cdo).expect("dispose");
}

#[test]
fn nothing_marked_to_persist_is_lost_to_another_users_plant() {
    let mallory = OtherUser::create();
    let gfs = shared_gfs();
    let theirs = mallory.dir.join("theirs");
    let plants = [
        (
            "sec-persist-dir",
            format!(
                "mkdir {}/maestro-persist-sec-persist-dir",
                gfs.path().display()
            ),
        ),
        (
            "sec-persist-link",
            format!(
                "mkdir {theirs} && ln -s {theirs} {}/maestro-persist-sec-persist-link",
                gfs.path().display(),
                theirs = theirs.display()
            ),
        ),
    ];
    set_mode(&mallory.dir, 0o777);
    for (workflow, plant) in plants {
        let planted = mallory.run(&plant, LIMIT);
        assert_eq!(planted.code(), Some(0), "{planted:?}");
        let gfs_dir = gfs.path().display().to_string();
        let (pm, info) = start_pm(workflow, &["--gfs-dir", &gfs_dir]);
        hand_over_persisted(&info, gfs.path(), "results/t2m");
        let out = pm.terminate(Duration::from_secs(30));
        // Said, and a failure.
        assert_ne!(out.code(), Some(0), "{out:?}");
        assert!(
            out.stderr.contains("could not be persisted in")
                && out.stderr.contains("it is persisted as"),
            "{}",
            out.stderr
        );
        // The file is root's, in a fresh private directory beside the usual one.
        let fresh: Vec<PathBuf> = std::fs::read_dir(gfs.path())
            .expect("gfs")
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("maestro-persist-{workflow}.")))
            })
            .collect();
        assert_eq!(fresh.len(), 1, "{fresh:?}");
        let meta = std::fs::symlink_metadata(&fresh[0]).expect("fresh");
        assert!(meta.is_dir());
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o700
        );
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
        assert_eq!(
            std::fs::read(fresh[0].join("results%2Ft2m")).expect("persisted"),
            b"root's results"
        );
        assert!(fresh[0].join("results%2Ft2m.maestro.json").exists());
        // Nothing went into the other user's directory.
        let planted_dir = gfs.path().join(format!("maestro-persist-{workflow}"));
        assert_eq!(
            std::fs::read_dir(&planted_dir).expect("planted").count(),
            0,
            "{planted_dir:?}"
        );
    }
}

#[test]
fn adoption_follows_no_link_and_takes_no_other_users_directory() {
    let mallory = OtherUser::create();
    let gfs = shared_gfs();
    let gfs_dir = gfs.path().display().to_string();
    // Workflow A persists a file.
    let (pm, info) = start_pm("sec-adopt-a", &["--gfs-dir", &gfs_dir]);
    hand_over_persisted(&info, gfs.path(), "a/result");
    let out = pm.terminate(Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let a = gfs.path().join("maestro-persist-sec-adopt-a");
    assert!(a.join("a%2Fresult").exists());
    // The other user plants B's directory as a link to A's, and C's as a directory of its
    // own holding a copy of A's description.
    let b = gfs.path().join("maestro-persist-sec-adopt-b");
    let c = gfs.path().join("maestro-persist-sec-adopt-c");
    set_mode(&a, 0o755);
    set_mode(&a.join("a%2Fresult.maestro.json"), 0o644);
    let plant = format!(
        "ln -s {a} {b} && mkdir {c} && cp {a}/a%2Fresult.maestro.json {c}/ && touch {c}/a%2Fresult",
        a = a.display(),
        b = b.display(),
        c = c.display()
    );
    let planted = mallory.run(&plant, LIMIT);
    assert_eq!(planted.code(), Some(0), "{planted:?}");
    set_mode(&a, 0o700);
    for (workflow, from, why) in [
        ("sec-adopt-b", &b, "symbolic link"),
        (
            "sec-adopt-c",
            &c,
            &*format!("a directory of uid {}", mallory.uid),
        ),
    ] {
        let from = from.display().to_string();
        let (pm, info) = start_pm(workflow, &["--gfs-dir", &gfs_dir, "--adopt", &from]);
        let status = common::run(
            Command::new(maestro()).args(["pool", "status", "--json", "--info", &info]),
            LIMIT,
        );
        let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
        assert_eq!(status["cdos"]["kept"], 0, "{status}");
        let out = pm.terminate(Duration::from_secs(30));
        assert_eq!(out.code(), Some(0), "{out:?}");
        assert!(
            out.stderr.contains(&format!("not adopting from {from}")) && out.stderr.contains(why),
            "{}",
            out.stderr
        );
    }
    // A's file is where A left it.
    assert_eq!(
        std::fs::read(a.join("a%2Fresult")).expect("A's file"),
        b"root's results"
    );
}

#[test]
fn an_info_file_is_not_read_through_a_directory_another_user_links() {
    let mallory = OtherUser::create();
    let (pm, line) = start_pm("sec-infodir", &[]);
    // Root's info file, in a private directory of root's.
    let private = tempfile::tempdir().expect("tempdir");
    let file = private.path().join("wf.info");
    std::fs::write(&file, &line).expect("info");
    set_mode(&file, 0o600);
    // The other user links a directory name of theirs to it.
    let shared = shared_gfs();
    let link = shared.path().join("jobdir");
    let planted = mallory.run(
        &format!("ln -s {} {}", private.path().display(), link.display()),
        LIMIT,
    );
    assert_eq!(planted.code(), Some(0), "{planted:?}");
    let through = link.join("wf.info");
    let status_from = |path: &Path| {
        run(
            Command::new(maestro())
                .args(["pool", "status", "--info-file"])
                .arg(path),
            LIMIT,
        )
    };
    let out = status_from(&through);
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(out.stderr.contains("symbolic link"), "{}", out.stderr);
    // The program waiting for the file (MSTRO_POOL_MANAGER_INFO_FILE) refuses it too.
    let waited = run(
        Command::new(common::example("pool_workflow"))
            .args(["--cdos", "1"])
            .env("MSTRO_POOL_MANAGER_INFO_FILE", &through)
            .env("MSTRO_WORKFLOW_NAME", "sec-infodir"),
        LIMIT,
    );
    assert_ne!(waited.code(), Some(0), "{waited:?}");
    assert!(waited.stderr.contains("symbolic link"), "{}", waited.stderr);
    // Given directly, the same file serves.
    let own = status_from(&file);
    assert_eq!(own.code(), Some(0), "{own:?}");
    drop(pm);
}

#[test]
fn a_subscriber_that_keeps_every_lease_holds_a_withdraw_only_for_the_grace() {
    let (pm, text) = start_pm("sec-leases", &[]);
    let info = info(&text);
    // The keeper, with a shared-memory endpoint to be leased offers by, subscribes to
    // offers, takes every lease it is given and never uses nor releases one.
    let mut keeper = Conn::connect(&ControlAddr::Tcp(tcp_addr(&info)), LIMIT).expect("connect");
    let join = answer_challenge(&mut keeper, &info, "keeper", |j| {
        j.endpoint = Some(proto::FabricEndpoint {
            provider: "shm".into(),
            address: fabric::Address(b"keeper".to_vec()),
        });
    });
    keeper.send_batch(&[join]).expect("join");
    assert!(matches!(
        keeper.recv(Op::Join).expect("welcome"),
        FromPm::Welcome { .. }
    ));
    keeper
        .send_batch(&[ToPm::Subscribe {
            local: 1,
            kinds: EventKind::Offer.into(),
            selector: Box::new(Expr::Has(".maestro.core.cdo.name".into())),
            options: SubscribeOptions::default(),
        }])
        .expect("subscribe");
    assert!(matches!(
        keeper.recv(Op::Subscribe).expect("subscribed"),
        FromPm::Subscribed { .. }
    ));
    let producer = client(&info, "producer");
    let mut worst = Duration::ZERO;
    for i in 0..3 {
        let cdo = producer.declare(&format!("field-{i}")).expect("declare");
        producer
            .seal_and_offer(cdo, Attributes::new(), buffer(&vec![7u8; 1 << 20]))
            .expect("offer");
        // The lease reached the keeper with the event.
        loop {
            match keeper.recv(Op::Subscribe).expect("event") {
                FromPm::Event { lease: Some(_), .. } => break,
                // The revocation of the last one, kept all the same.
                FromPm::Event { .. } | FromPm::Revoke { .. } => {}
                other => panic!("{other:?}"),
            }
        }
        let t = Instant::now();
        producer.withdraw(cdo).expect("withdraw");
        worst = worst.max(t.elapsed());
    }
    eprintln!("a withdraw with a kept lease: worst {worst:?}");
    assert!(worst < Duration::from_secs(2), "withdraw took {worst:?}");
    assert!(is_alive(&pm));
}

#[test]
fn half_open_metrics_connections_do_not_keep_a_scraper_out() {
    let (mut pm, _) = start_pm("sec-slowloris", &["--metrics", ":0"]);
    let addr = metrics_address(&mut pm);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (answered, busy) = std::thread::scope(|s| {
        // The slowloris: 200 connections, each with half a request, reopened as the PM
        // closes them, until the scrapes are done; from another address than the
        // scraper's, as from another host (one address is bounded as a whole: an
        // attacker sharing the scraper's address competes with it for its share).
        s.spawn(|| {
            let half = || {
                let mut c = connect_from([127, 0, 0, 2], addr.parse().ok()?).ok()?;
                c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").ok()?;
                c.set_nonblocking(true).ok()?;
                Some(c)
            };
            let mut held: Vec<TcpStream> = (0..200).filter_map(|_| half()).collect();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut byte = [0u8; 1];
                held.retain_mut(|c| !matches!(c.read(&mut byte), Ok(0)));
                while held.len() < 200 {
                    match half() {
                        Some(c) => held.push(c),
                        None => break,
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let (mut answered, mut busy) = (0, 0);
        for _ in 0..14 {
            match ureq::get(format!("http://{addr}/metrics")).call() {
                Ok(r) if r.status() == 200 => answered += 1,
                other => {
                    eprintln!("a scrape not answered: {other:?}");
                    busy += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (answered, busy)
    });
    eprintln!("with 200 half-open connections: {answered} of 14 scrapes answered, {busy} not");
    assert_eq!(answered, 14, "{busy} scrapes were not answered");
    assert!(is_alive(&pm));
}

#[test]
fn a_members_event_fan_out_is_bounded_as_it_is_made() {
    const OFFERS: usize = 10_000;
    let (mut pm, text) = start_pm("sec-fanout", &[]);
    let stderr = common::lines(pm.child.stderr.take().expect("stderr"));
    let info = info(&text);
    let before = common::status_kib("VmHWM", pm.pid());
    let (worst, n) = honest_latency_during(&info, || {
        let (mut conn, app) = raw(&info, "fanout");
        // 1,024 subscriptions to every offer.
        let subscribe: Vec<ToPm> = (0..1024)
            .map(|local| ToPm::Subscribe {
                local,
                kinds: EventKind::Offer.into(),
                selector: Box::new(Expr::Has(".maestro.core.cdo.name".into())),
                options: SubscribeOptions::default(),
            })
            .collect();
        conn.send_batch(&subscribe).expect("subscribe");
        let mut subscribed = 0;
        while subscribed < 1024 {
            if let FromPm::Subscribed { .. } = conn.recv(Op::Subscribe).expect("subscribed") {
                subscribed += 1;
            }
        }
        // Then frames of 2,000 offers each, 10,000 in all, read by nobody.
        let ids: Vec<_> = cdo_ids(app).take(OFFERS).collect();
        for frame in ids.chunks(2000) {
            let msgs = offers(frame, "field", &Attributes::new(), 8);
            if conn.send_batch(&msgs).is_err() {
                break; // cut off already
            }
        }
        // The PM cuts the connection off.
        loop {
            match conn.recv(Op::Offer) {
                Ok(_) => {}
                Err(ClientError::Call(CallError::Closed)) => break,
                Err(e) => panic!("{e}"),
            }
        }
    });
    let grown = common::status_kib("VmHWM", pm.pid()).saturating_sub(before);
    eprintln!(
        "1,024 subscriptions and {OFFERS} offers: the PM's peak grew {} MiB; honest worst {worst:?} over {n} round trips",
        grown >> 10
    );
    let said = loop {
        let line = stderr.recv_timeout(LIMIT).expect("the PM's log");
        if line.contains("cut off") {
            break line;
        }
    };
    assert!(said.contains("--max-event-bytes"), "{said}");
    assert!(grown < 256 << 10, "the PM grew by {grown} KiB");
    assert!(worst < Duration::from_millis(100), "honest worst {worst:?}");
    assert!(is_alive(&pm));
}

/// Declares CDOs with 4,000-byte names on `conn` (app `app`) until the PM refuses one;
/// returns how many it took and the refusal's text.
fn fill_until_refused(conn: &mut Conn, app: proto::AppId) -> (usize, String) {
    let mut ids = cdo_ids(app);
    let mut made = 0;
    loop {
        let batch: Vec<ToPm> = ids
            .by_ref()
            .take(256)
            .map(|cdo| ToPm::Declare {
                cdo,
                name: format!("{cdo:0>4000}"),
            })
            .collect();
        let last = match batch.last() {
            Some(ToPm::Declare { cdo, .. }) => *cdo,
            _ => panic!("no ids left"),
        };
        conn.send_batch(&batch).expect("send");
        conn.send_batch(&[ToPm::Dispose {
            cdo: last,
            answer: true,
        }])
        .expect("send");
        let mut refused = None;
        loop {
            match conn.recv(Op::Declare).expect("answer") {
                FromPm::Refused {
                    op: Op::Declare,
                    why: proto::Refusal::Quota(why),
                    ..
                } => {
                    refused.get_or_insert(why);
                }
                FromPm::Done {
                    op: Op::Dispose, ..
                }
                | FromPm::Refused {
                    op: Op::Dispose, ..
                } => break,
                _ => {}
            }
        }
        match refused {
            Some(why) => return (made, why),
            None => made += 255,
        }
    }
}

#[test]
fn one_secret_holder_with_many_apps_is_held_to_the_pools_budget() {
    let (pm, text) = start_pm(
        "sec-budget",
        &[
            "--max-app-bytes",
            "16M",
            "--max-bytes",
            "72M",
            "--max-apps-per-peer",
            "4",
        ],
    );
    let info = info(&text);
    let before = common::status_kib("VmHWM", pm.pid());
    // The hogs stay joined after the attack, holding what they filled.
    let hogs = std::sync::Mutex::new(Vec::new());
    let (worst, n) = honest_latency_during(&info, || {
        // Eight apps of one process over TCP: four are admitted.
        let mut joined = Vec::new();
        let mut refused = Vec::new();
        for i in 0..8 {
            let mut c = Conn::connect(&ControlAddr::Tcp(tcp_addr(&info)), LIMIT).expect("connect");
            match c.join(&info, &format!("hog-{i}"), 0) {
                Ok(app) => joined.push((c, app)),
                Err(ClientError::Call(CallError::Refused { why, .. })) => {
                    refused.push(why.to_string())
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(joined.len(), 4, "{refused:?}");
        assert!(
            refused.iter().all(|w| w.contains("--max-apps-per-peer")),
            "{refused:?}"
        );
        // Each fills its own quota.
        for (c, app) in &mut joined {
            let (made, why) = fill_until_refused(c, *app);
            assert!(why.contains("--max-app-bytes"), "{why}");
            assert!(made > 1000, "{made}");
        }
        hogs.lock().expect("hogs").extend(joined);
    });
    let grown = common::status_kib("VmHWM", pm.pid()).saturating_sub(before);
    eprintln!(
        "4 apps of one peer at their quota: the PM's peak grew {} MiB; honest worst {worst:?} over {n} round trips",
        grown >> 10
    );
    assert!(worst < Duration::from_millis(100), "honest worst {worst:?}");
    // Another peer (a process on the Unix socket) fills what is left of the pool and no
    // more: refused by the pool's budget, not its own.
    let unix = info
        .endpoints
        .iter()
        .find(|e| matches!(e, ControlAddr::Unix(_)))
        .expect("a Unix socket")
        .clone();
    let mut other = Conn::connect(&unix, LIMIT).expect("connect");
    let app = other.join(&info, "other-peer", 0).expect("join");
    let (_, why) = fill_until_refused(&mut other, app);
    assert!(why.contains("--max-bytes"), "{why}");
    // 72 MiB of CDOs, counted as the PM counts them: its memory stays in proportion.
    let grown = common::status_kib("VmHWM", pm.pid()).saturating_sub(before);
    eprintln!(
        "the pool at its budget: the PM's peak grew {} MiB",
        grown >> 10
    );
    assert!(grown < 256 << 10, "the PM grew by {grown} KiB");
    assert!(is_alive(&pm));
    drop(hogs);
}
