//! A real pool manager on loopback with producers and consumers joining it with the workflow
//! secret; CDOs of mixed sizes moved by every transport the PM plans (RMA over the fabric
//! layer, the stream relayed over the control connections, the same-process hand-over) and
//! checked byte for byte; a wrong secret and a connection sending garbage do not disturb
//! them; pipelined async operations.

use pool::CallError;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use fabric::{Buffer, Config, Scope};
use pool::attr::{AttrValue, Attributes};
use pool::bootstrap::PmInfo;
use pool::proto::Refusal;
use pool::schema::{AttrError, Schemas};
use pool::{
    AsyncClient, Bounded, Bounds, Client, ClientError, CredentialVerdict, JoinOptions, PmConfig,
    PoolManager,
};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
const T: Duration = Duration::from_secs(30);
const SIZES: [usize; 6] = [0, 1, 4096, 1 << 20, (3 << 20) + 5, 8 << 20];

fn start_pm() -> PoolManager {
    let listen = vec!["127.0.0.1:0".parse().expect("addr")];
    PoolManager::start(PmConfig::new("wf", SECRET, listen)).expect("pm")
}

/// tcp;ofi_rxm on loopback.
fn tcp_lo() -> Config {
    Config {
        provider: Some("tcp;ofi_rxm".into()),
        iface: Some("lo".into()),
        ..Config::default()
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(17).wrapping_add(seed))
        .collect()
}

/// How a test's client joins.
#[derive(Clone, Copy)]
enum Side {
    /// With a tcp endpoint, as a process of its own.
    Rma,
    /// Without an endpoint, as a process of its own: data by stream.
    NoFabric,
    /// Sharing this process with the other side.
    InProcess,
}

/// The schema of the tests' user attribute.
const SCHEMA: &str = "schema-name: e2e
schema-version: 1
schema-namespace: .user.
maestro-attributes:
  - key: step
    type: int()
";

fn schemas() -> Schemas {
    let mut s = Schemas::builtin();
    s.load_str(SCHEMA, "e2e").expect("schema");
    s
}

fn opts(component: &str, side: Side) -> JoinOptions {
    let o = JoinOptions::new(component, 0).timeout(T).schemas(schemas());
    match side {
        Side::Rma => o
            .fabric_with(&tcp_lo(), Scope::AnyNode)
            .expect("tcp on lo")
            .isolated(),
        Side::NoFabric => o.isolated(),
        Side::InProcess => o.fabric_with(&tcp_lo(), Scope::AnyNode).expect("tcp on lo"),
    }
}

fn with_secret(info: &PmInfo, secret: &[u8]) -> PmInfo {
    PmInfo {
        secret: secret.to_vec(),
        ..info.clone()
    }
}

/// A producer offers SIZES; a consumer requires half of them early and demands all, checks
/// bytes and attributes; returns whether the consumer's data was shared (same process).
fn move_all(info: &PmInfo, producer: Side, consumer: Side) -> Vec<bool> {
    let theirs = info.clone();
    let consumer = std::thread::spawn(move || -> pool::Result<Vec<bool>> {
        let c = Client::join(&theirs, opts("consumer", consumer))?;
        let mut shared = Vec::new();
        for (i, &len) in SIZES.iter().enumerate() {
            let cdo = c.declare(&format!("field-{i}"))?;
            if i % 2 == 0 {
                c.require(cdo)?;
            }
            let (bytes, attrs) = c.demand(cdo)?;
            assert_eq!(bytes.len(), len, "CDO {i}");
            assert!(*bytes == data(len, i as u8), "CDO {i} corrupted");
            assert_eq!(attrs.get(".user.step"), Some(&AttrValue::Int(i as i64)));
            shared.push(bytes.is_shared());
            c.dispose(cdo)?;
        }
        c.leave()?;
        Ok(shared)
    });
    let p = Client::join(info, opts("producer", producer)).expect("producer joins");
    let mut offered = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let cdo = p.declare(&format!("field-{i}")).expect("declare");
        let mut attrs = Attributes::new();
        attrs.insert(".user.step".into(), AttrValue::Int(i as i64));
        let buf = Buffer::from_slice(&data(len, i as u8)).expect("buffer");
        // Half in two steps, half in one message.
        if i % 2 == 0 {
            p.seal(cdo, attrs).expect("seal");
            p.offer(cdo, buf).expect("offer");
        } else {
            p.seal_and_offer(cdo, attrs, buf).expect("seal and offer");
        }
        offered.push((cdo, len));
    }
    let shared = consumer
        .join()
        .expect("consumer thread")
        .unwrap_or_else(|e| panic!("consumer: {e}"));
    for (cdo, len) in offered {
        let buf = p.withdraw(cdo).expect("withdraw");
        assert_eq!(buf.len(), len);
        p.dispose(cdo).expect("dispose");
    }
    p.leave().expect("leave");
    shared
}

#[test]
fn rma_moves_cdos_intact_despite_intruders() {
    let pm = start_pm();
    // Intruders: a wrong secret is refused; garbage closes only that connection.
    let bad = with_secret(pm.info(), b"wrong");
    match Client::join(&bad, opts("intruder", Side::NoFabric)) {
        Err(ClientError::Call(CallError::Refused {
            why: Refusal::BadProof,
            ..
        })) => {}
        other => panic!("wrong secret: {:?}", other.map(|c| c.app())),
    }
    let mut garbage = TcpStream::connect(pm.tcp_addr().expect("a TCP endpoint")).expect("connect");
    garbage
        .write_all(b"GET / HTTP/1.1\r\n\r\nthis is not a frame")
        .expect("write");
    let shared = move_all(pm.info(), Side::Rma, Side::Rma);
    assert!(shared.iter().all(|s| !s));
    drop(garbage);
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn without_a_common_fabric_provider_cdos_travel_by_stream() {
    let pm = start_pm();
    // A consumer without fabric reads from a provider with one, and the other way round.
    move_all(pm.info(), Side::Rma, Side::NoFabric);
    move_all(pm.info(), Side::NoFabric, Side::Rma);
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn in_one_process_the_consumer_gets_the_providers_buffer() {
    let pm = start_pm();
    let shared = move_all(pm.info(), Side::InProcess, Side::InProcess);
    // The 0-byte CDO has nothing to share; every other one is the provider's own buffer.
    assert_eq!(shared[1..], [true; SIZES.len() - 1]);

    // Withdrawing while the consumer still holds the data gives the provider a copy.
    let p = Client::join(pm.info(), opts("p", Side::InProcess)).expect("p");
    let c = Client::join(pm.info(), opts("c", Side::InProcess)).expect("c");
    let cdo = p.declare("held").expect("declare");
    p.seal(cdo, Attributes::new()).expect("seal");
    p.offer(cdo, Buffer::from_slice(b"kept by both").expect("buffer"))
        .expect("offer");
    let want = c.declare("held").expect("declare");
    let (held, _) = c.demand(want).expect("demand");
    let back = p.withdraw(cdo).expect("withdraw");
    assert_eq!(back.as_slice(), b"kept by both");
    assert_eq!(&*held, b"kept by both");
    drop(held);
    c.dispose(want).expect("dispose");

    // The application's own memory is not copied: its withdrawal waits until the consumer
    // lets go, and returns as soon as it does (woken by the drop, not polling).
    let mut mine = b"lent by the app".to_vec();
    // SAFETY: `mine` outlives the offer: the withdrawal below returns it before the end.
    let lent = unsafe { Buffer::borrowed(mine.as_mut_ptr(), mine.len()) };
    let cdo = p.declare("lent").expect("declare");
    p.seal(cdo, Attributes::new()).expect("seal");
    p.offer(cdo, lent).expect("offer");
    let want = c.declare("lent").expect("declare");
    let (held, _) = c.demand(want).expect("demand");
    assert!(held.is_shared(), "the provider's own memory");
    let (back, returned, let_go) = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = &p;
        scope.spawn(move || {
            let back = p.withdraw(cdo);
            let _ = tx.send((back, std::time::Instant::now()));
        });
        // While the consumer holds the memory, the withdrawal does not come back.
        let early = rx.recv_timeout(Duration::from_secs(1));
        assert!(
            early.is_err(),
            "withdraw returned while a consumer held the memory"
        );
        let let_go = std::time::Instant::now();
        drop(held);
        let (back, returned) = rx.recv_timeout(T).expect("withdraw returns once let go");
        (back.expect("withdraw"), returned, let_go)
    });
    assert!(returned >= let_go, "returned before the consumer let go");
    assert_eq!(
        back.as_slice().as_ptr(),
        mine.as_ptr(),
        "the app's own memory, not a copy"
    );
    c.dispose(want).expect("dispose");
    c.leave().expect("c leaves");
    p.dispose(cdo).expect("dispose");
    p.leave().expect("p leaves");
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn unanswered_declares_and_disposes_still_report_what_the_pm_would_refuse() {
    let pm = start_pm();
    let p = Client::join(pm.info(), opts("p", Side::InProcess)).expect("p");
    let c = Client::join(pm.info(), opts("c", Side::InProcess)).expect("c");
    let refused = |r: pool::Result<_>| match r {
        Err(ClientError::Call(CallError::Refused { why, .. })) => why,
        other => panic!("expected a refusal, got {other:?}"),
    };
    // Names are checked before anything is sent.
    assert_eq!(refused(p.declare("").map(drop)), Refusal::BadName);
    assert_eq!(
        refused(p.declare(&"x".repeat(pool::MAX_NAME + 1)).map(drop)),
        Refusal::BadName
    );
    // Ids are the app's own, one after another.
    let cdo = p.declare("unanswered").expect("declare");
    assert_eq!(pool::proto::cdo_owner(cdo), p.as_async().app());
    assert_eq!(p.declare("next").expect("declare"), cdo + 1);
    p.seal(cdo, Attributes::new())
        .expect("seal (behind the unanswered declare)");
    p.offer(cdo, Buffer::from_slice(b"bytes").expect("buffer"))
        .expect("offer");
    // While offered, a dispose waits for the PM, which refuses it.
    assert!(matches!(
        refused(p.dispose(cdo)),
        Refusal::WrongState { .. }
    ));
    let want = c.declare("unanswered").expect("declare");
    let (data, _) = c.demand(want).expect("demand");
    assert_eq!(&*data, b"bytes");
    drop(data);
    // Demanded and here: disposed without waiting; the PM forgot it (the next operation
    // on it, which waits, is refused).
    c.dispose(want).expect("dispose");
    assert_eq!(refused(c.require(want)), Refusal::UnknownCdo);
    // Never declared by this app: the dispose waits, and is refused.
    assert_eq!(refused(c.dispose(cdo)), Refusal::UnknownCdo);
    p.withdraw(cdo).expect("withdraw");
    p.dispose(cdo).expect("dispose");
    p.dispose(cdo + 1).expect("dispose the declared one");
    assert_eq!(refused(p.dispose(cdo)), Refusal::UnknownCdo);
    c.leave().expect("c leaves");
    p.leave().expect("p leaves");
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn async_operations_pipeline() {
    let pm = start_pm();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let c = AsyncClient::join(pm.info(), JoinOptions::new("async", 0).timeout(T))
            .await
            .expect("join");
        let names: Vec<String> = (0..2000).map(|i| format!("cdo-{i}")).collect();
        let ids: Vec<_> = names
            .iter()
            .map(|n| c.declare(n))
            .collect::<Result<_, _>>()
            .expect("declares");
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        let r = &c;
        futures::future::try_join_all(ids.iter().map(|&id| async move {
            r.seal(id, Attributes::new()).await?;
            r.offer(id, Buffer::new(16)?).await
        }))
        .await
        .expect("seal and offer");
        // A wrong-state operation is refused, and only it.
        match c.seal(ids[0], Attributes::new()).await {
            Err(ClientError::Call(CallError::Refused {
                why: Refusal::WrongState { .. },
                ..
            })) => {}
            other => panic!("second seal: {other:?}"),
        }
        futures::future::try_join_all(ids.iter().map(|&id| async move {
            r.withdraw(id).await?;
            r.dispose(id).await
        }))
        .await
        .expect("withdraw and dispose");
        c.leave().await.expect("leave");
    });
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn a_pm_checking_credentials_refuses_forged_and_other_users_ones_only() {
    let listen = vec!["127.0.0.1:0".parse().expect("addr")];
    let mut config = PmConfig::new("wf", SECRET, listen);
    let me = safefs::euid();
    config.credentials = Some(std::sync::Arc::new(move |c: &[u8]| match c {
        b"issued by the host" => CredentialVerdict::Valid { uid: Some(me) },
        b"another user's" => CredentialVerdict::Valid {
            uid: Some(me.wrapping_add(1)),
        },
        b"forged" => CredentialVerdict::Forged("signature".into()),
        _ => CredentialVerdict::Unverifiable("another launcher's".into()),
    }));
    let pm = PoolManager::start(config).expect("pm");
    let try_join = |cred: Option<&[u8]>| {
        let mut o = JoinOptions::new("c", 0).timeout(T);
        if let Some(c) = cred {
            o = o.credential(c.to_vec());
        }
        Client::join(pm.info(), o)
    };
    for cred in [b"forged".as_slice(), b"another user's"] {
        match try_join(Some(cred)) {
            Err(ClientError::Call(CallError::Refused {
                why: Refusal::NotTheUser(_),
                ..
            })) => {}
            other => panic!("{cred:?}: {:?}", other.map(|c| c.app())),
        }
    }
    // A valid credential, one this host cannot check (a component of another job) and
    // none at all: the secret decides.
    for cred in [
        Some(b"issued by the host".as_slice()),
        Some(b"from another launcher"),
        None,
    ] {
        let ok = try_join(cred).expect("joins");
        ok.leave().expect("leave");
    }
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn seal_checks_attributes_against_the_schemas() {
    let pm = start_pm();
    let c = Client::join(pm.info(), opts("c", Side::NoFabric)).expect("join");
    let cdo = c.declare("typed").expect("declare");
    let mut bad = Attributes::new();
    bad.insert(".user.step".into(), AttrValue::Str("two".into()));
    assert!(matches!(
        c.seal(cdo, bad),
        Err(ClientError::Call(CallError::Attribute(
            AttrError::Type { .. }
        )))
    ));
    let mut unknown = Attributes::new();
    unknown.insert(".user.colour".into(), AttrValue::Str("red".into()));
    assert!(matches!(
        c.seal(cdo, unknown),
        Err(ClientError::Call(CallError::Attribute(AttrError::Unknown(
            _
        ))))
    ));
    // Nothing was sent: the CDO is still declared and seals with good attributes.
    let mut good = Attributes::new();
    good.insert(
        ".user.step".into(),
        c.schemas().parse_value(".user.step", "2").expect("typed"),
    );
    c.seal(cdo, good).expect("seal");
    c.dispose(cdo).expect("dispose");
    c.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// The PM advertises its Unix socket first (in a private directory, gone when it stops);
/// a client elsewhere, where that path does not exist, falls through to TCP.
#[test]
fn unix_socket_first_then_tcp_where_it_does_not_exist() {
    use pool::bootstrap::ControlAddr;
    use std::os::unix::fs::PermissionsExt;
    let pm = start_pm();
    let info = pm.info().clone();
    let ControlAddr::Unix(socket) = &info.endpoints[0] else {
        panic!("the first endpoint is {}", info.endpoints[0]);
    };
    let dir = socket.parent().expect("socket dir").to_path_buf();
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the socket's directory is private");
    let c = Client::join(&info, opts("local", Side::NoFabric)).expect("join by unix socket");
    c.leave().expect("leave");
    // Elsewhere: the path names nothing, the TCP endpoint after it is used.
    let elsewhere = PmInfo {
        endpoints: std::iter::once(ControlAddr::Unix(dir.join("absent.sock")))
            .chain(info.endpoints[1..].iter().cloned())
            .collect(),
        ..info.clone()
    };
    let c = Client::join(&elsewhere, opts("remote", Side::NoFabric)).expect("join by TCP");
    c.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
    assert!(!dir.exists(), "the socket's directory is removed at stop");
}

// ---- Pool events through a real pool manager ----

use pool::events::{EventKind, SubscribeOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// An ack timeout that never ends within a test (which is killed as hung after minutes).
const NEVER: Duration = Duration::from_secs(24 * 3600);

fn start_pm_with_ack_timeout(timeout: Duration) -> PoolManager {
    let mut config = PmConfig::new("wf", SECRET, vec!["127.0.0.1:0".parse().expect("addr")]);
    config.ack_timeout = timeout;
    PoolManager::start(config).expect("pm")
}

/// Declares and seals `name` with `.user.step = step`.
fn sealed(c: &Client, name: &str, step: i64) -> pool::proto::CdoId {
    let cdo = c.declare(name).expect("declare");
    let attrs = Attributes::from([(".user.step".to_string(), AttrValue::Int(step))]);
    c.seal(cdo, attrs).expect("seal");
    cdo
}

const HOLD: SubscribeOptions = SubscribeOptions {
    signal_before: true,
    require_ack: true,
    no_local: false,
    replay: false,
};

#[test]
fn a_selector_subscription_sees_exactly_the_matching_offers() {
    let pm = start_pm();
    let tracer = Client::join(pm.info(), opts("tracer", Side::NoFabric)).expect("tracer");
    let selector = tracer.selector("(step = 2)", ".user.").expect("selector");
    let sub = tracer
        .subscribe(&selector, EventKind::Offer, SubscribeOptions::default())
        .expect("subscribe");
    let p = Client::join(pm.info(), opts("producer", Side::Rma)).expect("producer");
    for step in 0..5 {
        let cdo = sealed(&p, &format!("field-{step}"), step);
        p.offer(cdo, Buffer::from_slice(&[step as u8; 32]).expect("buffer"))
            .expect("offer");
    }
    let e = sub.wait().expect("the matching offer");
    assert_eq!(e.kind, EventKind::Offer);
    assert_eq!((e.cdo.as_deref(), e.app), (Some("field-2"), p.app()));
    assert_eq!(e.attributes.get(".user.step"), Some(&AttrValue::Int(2)));
    assert!(
        sub.wait_timeout(Duration::from_millis(300))
            .expect("open")
            .is_none(),
        "no other offer matches"
    );
    tracer.unsubscribe(sub).expect("unsubscribe");
    tracer.leave().expect("leave");
    p.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn a_demand_after_a_completed_require_needs_no_pool_manager() {
    let pm = start_pm();
    let p = Client::join(pm.info(), opts("producer", Side::Rma)).expect("producer");
    let c = Client::join(pm.info(), opts("consumer", Side::Rma)).expect("consumer");
    let moved = c
        .subscribe(
            &pool::selector::Selector::all(),
            EventKind::TransportCompleted,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    let bytes = data(4096, 9);
    let offer = p.declare("prefetched").expect("declare");
    let buffer = Buffer::from_slice(&bytes).expect("buffer");
    p.seal_and_offer(offer, Attributes::new(), buffer)
        .expect("offer");
    let cdo = c.declare("prefetched").expect("declare");
    c.require(cdo).expect("require");
    assert!(
        moved.wait_timeout(T).expect("wait").is_some(),
        "the require moved nothing"
    );
    // The bytes are here: the demand does not need the PM any more, even a stopped one.
    pm.stop().expect("the PM ends with nothing lost");
    let (got, attrs) = c.demand(cdo).expect("a local demand");
    assert!(*got == bytes);
    assert_eq!(
        attrs.get(pool::attr::LOCAL_SIZE),
        Some(&AttrValue::Uint(4096))
    );
}

#[test]
fn small_cdos_travel_inline_with_their_tickets_unless_turned_off() {
    let pm = start_pm();
    let watcher = Client::join(pm.info(), opts("watcher", Side::NoFabric)).expect("watcher");
    let started = watcher
        .subscribe(
            &pool::selector::Selector::all(),
            EventKind::TransportStarted,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    let c = Client::join(pm.info(), opts("consumer", Side::Rma)).expect("consumer");
    for (inline_max, name, how) in [
        (
            pool::DEFAULT_INLINE_MAX,
            "small",
            "by inline (100 bytes with the ticket)",
        ),
        (0, "small-off", "by rma over"),
    ] {
        let p = Client::join(
            pm.info(),
            opts("producer", Side::Rma).inline_max(inline_max),
        )
        .expect("producer");
        let bytes = data(100, 3);
        let offer = p.declare(name).expect("declare");
        let buffer = Buffer::from_slice(&bytes).expect("buffer");
        p.seal_and_offer(offer, Attributes::new(), buffer)
            .expect("offer");
        let cdo = c.declare(name).expect("declare");
        let (got, _) = c.demand(cdo).expect("demand");
        assert!(*got == bytes);
        let event = started.wait_timeout(T).expect("wait").expect("an event");
        let detail = &event.detail;
        assert!(detail.contains(how), "{name}: {detail}");
        c.dispose(cdo).expect("dispose");
        p.withdraw(offer).expect("withdraw");
        p.leave().expect("leave");
    }
}

#[test]
fn signal_before_and_require_ack_hold_the_offer_until_the_ack() {
    let pm = start_pm();
    let archiver = Client::join(pm.info(), opts("archiver", Side::Rma)).expect("archiver");
    let sub = archiver
        .subscribe(&pool::selector::Selector::all(), EventKind::Offer, HOLD)
        .expect("subscribe");
    let info = pm.info().clone();
    let offered = Arc::new(AtomicBool::new(false));
    let flag = offered.clone();
    let producer = std::thread::spawn(move || {
        let p = Client::join(&info, opts("producer", Side::Rma)).expect("producer");
        let cdo = sealed(&p, "precious", 1);
        p.offer(cdo, Buffer::from_slice(b"keep me").expect("buffer"))
            .expect("offer");
        flag.store(true, Ordering::SeqCst);
        p.withdraw(cdo).expect("withdraw");
        p.leave().expect("leave");
    });
    let e = sub.wait().expect("event before the offer");
    assert!(e.before && e.needs_ack, "{e:?}");
    // The archiver requires the CDO before letting the offer happen, so it gets it. The
    // PM's own view says the offer has not taken effect: the producer's CDO is sealed,
    // not offered, and the archiver's waits with no provider.
    let mine = archiver.declare("precious").expect("declare");
    archiver.require(mine).expect("require");
    let mut observer = pool::Observer::connect(pm.info(), "test", T).expect("observer");
    let ls = pool::view::Query::Ls(pool::view::Ls {
        selector: None,
        after: None,
        limit: 10,
        attributes: false,
    });
    let pool::view::View::Cdos(page) = observer.query(ls).expect("ls") else {
        panic!("not a page of CDOs");
    };
    let mut states: Vec<(&str, &str, usize)> = page
        .cdos
        .iter()
        .filter(|c| c.name == "precious")
        .map(|c| (c.app.as_str(), c.state.as_str(), c.providers.len()))
        .collect();
    states.sort_unstable();
    assert_eq!(
        states,
        [("archiver:0", "required", 0), ("producer:0", "sealed", 0)],
        "the held offer is not in effect"
    );
    assert!(
        !offered.load(Ordering::SeqCst),
        "the offer call has not returned"
    );
    sub.ack(&e).expect("ack");
    let (data, _) = archiver.demand(mine).expect("demand");
    assert_eq!(&*data, b"keep me");
    producer.join().expect("producer");
    assert!(offered.load(Ordering::SeqCst));
    archiver.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn an_ack_that_never_comes_delays_the_offer_until_the_timeout_and_ends_the_subscription() {
    let pm = start_pm_with_ack_timeout(Duration::from_secs(1));
    let slow = Client::join(pm.info(), opts("slow", Side::NoFabric)).expect("slow");
    let sub = slow
        .subscribe(&pool::selector::Selector::all(), EventKind::Offer, HOLD)
        .expect("subscribe");
    let p = Client::join(pm.info(), opts("producer", Side::NoFabric)).expect("producer");
    let cdo = sealed(&p, "x", 1);
    let start = Instant::now();
    p.offer(cdo, Buffer::from_slice(b"x").expect("buffer"))
        .expect("the offer proceeds after the timeout");
    // Held for the whole timeout (its end is what let the offer go: the subscriber is told
    // below that its ack came too late).
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(1), "{took:?}");
    let e = sub.wait().expect("event");
    // The PM told the subscriber (and ended its subscription): its late ack is an error
    // saying so.
    match sub.wait() {
        Err(ClientError::SubscriptionEnded(why)) => assert!(why.contains("ack"), "{why}"),
        other => panic!("a late subscriber's wait: {other:?}"),
    }
    assert_eq!(sub.late_acks(), [e.serial]);
    match sub.ack(&e) {
        Err(ClientError::Call(CallError::AckTooLate(serial))) => assert_eq!(serial, e.serial),
        other => panic!("late ack: {other:?}"),
    }
    // The PM ended the late subscription: nothing holds the next offer.
    let mut observer = pool::Observer::connect(pm.info(), "test", T).expect("observer");
    match observer.query(pool::view::Query::Status).expect("status") {
        pool::view::View::Status(s) => assert_eq!(s.subscriptions, 0, "{s:?}"),
        other => panic!("{other:?}"),
    }
    let next = sealed(&p, "y", 1);
    p.offer(next, Buffer::from_slice(b"y").expect("buffer"))
        .expect("offer");
    p.withdraw(next).expect("withdraw");
    p.withdraw(cdo).expect("withdraw");
    p.leave().expect("leave");
    slow.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// A producer in a thread of its own offers one CDO; the thread returns when the offer
/// went through (a subscriber may hold it).
fn offer_from_a_thread(info: PmInfo) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let p = Client::join(&info, opts("producer", Side::NoFabric)).expect("producer");
        let cdo = sealed(&p, "x", 1);
        p.offer(cdo, Buffer::from_slice(b"x").expect("buffer"))
            .expect("offer");
        p.withdraw(cdo).expect("withdraw");
        p.leave().expect("leave");
    })
}

#[test]
fn a_subscriber_that_exits_without_acking_releases_the_offer_at_once() {
    // Acks never time out here: only the subscriber's exit can release the offer (if it
    // did not, the producer would wait until the test is killed as hung).
    let pm = start_pm_with_ack_timeout(NEVER);
    let quitter = Client::join(pm.info(), opts("quitter", Side::NoFabric)).expect("quitter");
    let sub = quitter
        .subscribe(&pool::selector::Selector::all(), EventKind::Offer, HOLD)
        .expect("subscribe");
    let producer = offer_from_a_thread(pm.info().clone());
    sub.wait().expect("event");
    // As when the process exits: no unsubscribe (which dropping `sub` would send), only
    // the connection closing.
    std::mem::forget(sub);
    drop(quitter);
    producer.join().expect("the producer's offer went through");
    pm.stop().expect("the PM ends with nothing lost");
}

/// A subscriber that stops reading does not make the PM's memory grow without bound: past
/// `max_queued` its connection is closed as if it had died, and the others carry on.
#[test]
fn a_subscriber_that_stops_reading_is_cut_off() {
    use pool::proto::{FromPm, Op, ToPm};
    let mut config = PmConfig::new("wf", SECRET, vec!["127.0.0.1:0".parse().expect("addr")]);
    // Above what a reading client ever has waiting here (the producer's 90,000 answers are
    // about 450 KB in all), below what the stuck subscriber's events come to (about 3 MB
    // beyond what the socket itself buffers).
    config.max_queued = 1 << 20;
    // Not what one round's events for 40 subscriptions are bounded by: the test is of a
    // connection that stops reading.
    config.policy.max_event_bytes = 64 << 20;
    let pm = PoolManager::start(config).expect("pm");
    let info = pm.info().clone();
    let watcher = Client::join(&info, opts("watcher", Side::NoFabric)).expect("watcher");
    let left = watcher
        .subscribe(
            &pool::selector::Selector::all(),
            EventKind::AppLeave,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    // The stuck subscriber: a bare connection that subscribes, then never reads again.
    // Each subscription is sent a window of events ahead of what its app took (the rest
    // wait at the PM): 40 of them make some 40,000 events sent, 3 MB.
    let mut stuck = pool_tools::wire::Conn::connect(&info.endpoints[0], T).expect("connect");
    let stuck_app = stuck.join(&info, "stuck", 0).expect("join");
    let subscribe = |local| ToPm::Subscribe {
        local,
        kinds: EventKind::Offer.into(),
        selector: Box::new(pool::selector::Expr::All),
        options: SubscribeOptions::default(),
    };
    let subs: Vec<ToPm> = (1..=40).map(subscribe).collect();
    stuck.send_batch(&subs).expect("subscribe");
    for _ in &subs {
        assert!(matches!(
            stuck.recv(Op::Subscribe).expect("answer"),
            FromPm::Subscribed { .. }
        ));
    }
    let p = Client::join(&info, opts("producer", Side::NoFabric)).expect("producer");
    let offered = p.block_on(async {
        let c = p.as_async();
        let ids = futures::future::try_join_all((0..30_000).map(|i| async move {
            let id = c.declare(&format!("many/{i}"))?;
            c.seal(id, Attributes::new()).await?;
            c.offer(id, Buffer::new(0)?).await?;
            Ok::<_, ClientError>(id)
        }))
        .await
        .expect("offers");
        ids.len()
    });
    assert_eq!(offered, 30_000);
    let e = left.wait().expect("the stuck subscriber leaves");
    assert_eq!(e.app, stuck_app);
    assert!(e.detail.contains("stopped reading"), "{e:?}");
    drop(stuck);
    p.leave().expect("leave");
    watcher.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// A subscriber that takes its events late holds a window of them, never the backlog:
/// its queue has at most `EVENT_WINDOW` events whenever it looks, the rest waiting at the
/// PM until the client reports it took some, and every event comes once, in order.
#[test]
fn a_late_subscriber_holds_a_window_of_events_and_gets_them_all_in_order() {
    use pool::events::EVENT_WINDOW;
    let pm = start_pm();
    let info = pm.info().clone();
    let late = Client::join(&info, opts("late", Side::NoFabric)).expect("late");
    let offers = late
        .subscribe(
            &pool::selector::Selector::all(),
            EventKind::Offer,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    let p = Client::join(&info, opts("producer", Side::NoFabric)).expect("producer");
    let total = 3 * EVENT_WINDOW as usize + 100;
    p.block_on(async {
        let c = p.as_async();
        futures::future::try_join_all((0..total).map(|i| async move {
            let id = c.declare(&format!("late/{i}"))?;
            c.seal(id, Attributes::new()).await?;
            c.offer(id, Buffer::new(0)?).await
        }))
        .await
        .expect("offers");
    });
    // Every offer is done: what the PM sends ahead (a window's worth) comes.
    let queued = offers.wait_queued(EVENT_WINDOW as usize, T);
    assert!(queued >= EVENT_WINDOW as usize, "{queued} queued");
    let mut names = Vec::new();
    let mut most = 0;
    while names.len() < total {
        let got = offers.drain().expect("events");
        most = most.max(got.len());
        assert!(got.len() <= EVENT_WINDOW as usize, "{} queued", got.len());
        if got.is_empty() {
            let e = offers.wait().expect("the next event");
            names.push((e.serial, e.cdo.expect("named")));
        }
        names.extend(got.into_iter().map(|e| (e.serial, e.cdo.expect("named"))));
    }
    assert!(
        names.windows(2).all(|w| w[0].0 < w[1].0),
        "in the pool's order"
    );
    assert_eq!(
        most, EVENT_WINDOW as usize,
        "a full window waited for the late taker"
    );
    let want: Vec<String> = (0..total).map(|i| format!("late/{i}")).collect();
    let mut sorted: Vec<String> = names.into_iter().map(|(_, name)| name).collect();
    sorted.sort_by_key(|n| n[5..].parse::<usize>().expect("number"));
    assert_eq!(sorted, want, "every event once");
    assert!(offers.poll().expect("open").is_none(), "none twice");
    p.leave().expect("leave");
    late.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// Dropping a `Subscription` ends it at the PM: an offer it holds goes on at once, and the
/// client stays joined.
#[test]
fn dropping_a_subscription_releases_what_it_holds() {
    // Acks never time out here: only the dropped subscription can release the offer.
    let pm = start_pm_with_ack_timeout(NEVER);
    let s = Client::join(pm.info(), opts("dropper", Side::NoFabric)).expect("join");
    let sub = s
        .subscribe(&pool::selector::Selector::all(), EventKind::Offer, HOLD)
        .expect("subscribe");
    let producer = offer_from_a_thread(pm.info().clone());
    sub.wait().expect("the held offer's event");
    drop(sub);
    producer.join().expect("the producer's offer went through");
    // Still joined: later offers are not held.
    let cdo = sealed(&s, "mine", 1);
    s.offer(cdo, Buffer::from_slice(b"y").expect("buffer"))
        .expect("offer");
    s.withdraw(cdo).expect("withdraw");
    s.leave().expect("leave");
    pm.stop().expect("the PM ends with nothing lost");
}

/// The demand of a CDO its `require` brought is not written by the caller: it goes with
/// the next message, or on its own within a millisecond. With no next message, the PM
/// still hears of it: a subscriber sees its event.
#[test]
fn a_local_demand_reaches_the_pm_without_another_message() {
    let pm = start_pm();
    let watcher = Client::join(pm.info(), opts("watcher", Side::NoFabric)).expect("watcher");
    let events = watcher
        .subscribe(
            &pool::selector::Selector::all(),
            EventKind::Declare
                | EventKind::Demand
                | EventKind::Dispose
                | EventKind::TransportCompleted,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    let next = |kind: EventKind, name: &str| loop {
        let e = events.wait().expect("an event");
        if e.kind == kind && e.cdo.as_deref() == Some(name) {
            break e;
        }
    };
    let p = Client::join(pm.info(), opts("producer", Side::NoFabric)).expect("producer");
    let c = Client::join(pm.info(), opts("consumer", Side::NoFabric)).expect("consumer");
    // A declare, and nothing after it.
    let lonely = c.declare("lonely").expect("declare");
    next(EventKind::Declare, "lonely");
    // The demand of a CDO its require brought, and nothing after it. (64 KiB: not inline,
    // so the transfer completes only once the consumer holds the bytes, and the demand is
    // local.)
    let cdo = sealed(&p, "early", 1);
    p.offer(cdo, Buffer::from_slice(&[7; 64 << 10]).expect("buffer"))
        .expect("offer");
    let want = c.declare("early").expect("declare");
    c.require(want).expect("require");
    next(EventKind::TransportCompleted, "early");
    let (data, _) = c.demand(want).expect("a local demand");
    assert_eq!(data.len(), 64 << 10);
    next(EventKind::Demand, "early");
    // A dispose, and nothing after it.
    c.dispose(lonely).expect("dispose");
    next(EventKind::Dispose, "lonely");
    drop(events);
    c.dispose(want).expect("dispose");
    p.withdraw(cdo).expect("withdraw");
    for app in [c, p, watcher] {
        app.leave().expect("leave");
    }
    pm.stop().expect("the PM ends with nothing lost");
}

#[test]
fn a_bounded_demand_outlasts_the_client_timeout_ends_at_its_limit_and_is_retracted_when_interrupted()
 {
    let pm = start_pm();
    let timeout = Duration::from_secs(1);
    let join = |name: &str| {
        Client::join(pm.info(), JoinOptions::new(name, 0).timeout(timeout)).expect("join")
    };
    let (p, c) = (join("producer"), join("consumer"));

    // Offered 1.5 s after the demand began, past the client's timeout, within the
    // demand's 4 s limit. (The time that passes is what is tested: the producer waits for
    // the PM's word that the demand waits, then lets the client's timeout go by.)
    let demands = p
        .subscribe(
            &pool::selector::Selector::all(),
            EventKind::Demand,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    let field = c.declare("field").expect("declare");
    let offered = std::thread::scope(|s| {
        let offer = s.spawn(|| {
            let demanded = demands.wait_timeout(T).expect("wait");
            assert!(demanded.is_some(), "the demand never reached the PM");
            std::thread::sleep(timeout + Duration::from_millis(500));
            let cdo = p.declare("field").expect("declare");
            let bytes = Buffer::from_slice(b"late but here").expect("buffer");
            p.seal_and_offer(cdo, Attributes::new(), bytes)
                .expect("offer");
        });
        let limit = Bounds {
            limit: Some(4 * timeout),
            ..Bounds::default()
        };
        let got = c.demand_bounded(field, None, limit);
        offer.join().expect("the producer");
        got
    });
    match offered {
        Bounded::Done(Ok((data, _))) => assert_eq!(&data[..], b"late but here"),
        other => panic!("{other:?}"),
    }

    // Nobody offers: the limit ends the wait.
    let never = c.declare("never").expect("declare");
    let limit = Bounds {
        limit: Some(Duration::from_millis(200)),
        ..Bounds::default()
    };
    assert!(matches!(
        c.demand_bounded(never, None, limit),
        Bounded::TimedOut
    ));

    // Said once after 100 ms, and the caller stops then: retracted, demandable again.
    let other = c.declare("other").expect("declare");
    let stop = AtomicBool::new(false);
    let said = std::sync::atomic::AtomicUsize::new(0);
    let notice = || {
        said.fetch_add(1, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
    };
    let interrupted = || stop.load(Ordering::SeqCst);
    let bounds = Bounds {
        limit: Some(T),
        interrupted: Some(&interrupted),
        notice: Some((Duration::from_millis(100), &notice)),
    };
    assert!(matches!(
        c.demand_bounded(other, None, bounds),
        Bounded::Interrupted
    ));
    assert_eq!(said.load(Ordering::SeqCst), 1);
    let again = c.demand_bounded(other, None, limit);
    assert!(matches!(again, Bounded::TimedOut), "{again:?}");
}

#[test]
fn a_pool_of_three_managers_moves_cdos_and_tells_events_as_one_does() {
    let shards = pool::shards::Shards::new(3).expect("three shards");
    let pool = pool::ShardedPool::start(shards, |_| {
        Ok(PmConfig::new(
            "wf",
            SECRET,
            vec!["127.0.0.1:0".parse().expect("addr")],
        ))
    })
    .expect("three managers");
    let info = pool.info().clone();
    assert_eq!(info.shards().count(), 3);
    let again = PmInfo::parse(&info.encode()).expect("the info of three shards parses");
    assert_eq!(again, info);
    let homes: std::collections::HashSet<usize> = (0..SIZES.len())
        .map(|i| shards.home(&format!("field-{i}")))
        .collect();
    assert!(
        homes.len() > 1,
        "the names live at several shards: {homes:?}"
    );
    // Every transport, with the names spread over the shards.
    assert!(move_all(&info, Side::Rma, Side::Rma).iter().all(|s| !s));
    move_all(&info, Side::Rma, Side::NoFabric);
    let shared = move_all(&info, Side::InProcess, Side::InProcess);
    assert!(shared.iter().skip(1).all(|s| *s), "{shared:?}");
    // A subscription hears the offers of every shard, each once.
    let tracer = Client::join(&info, opts("tracer", Side::NoFabric)).expect("tracer");
    let selector = tracer.selector("(step >= 0)", ".user.").expect("selector");
    let sub = tracer
        .subscribe(&selector, EventKind::Offer, SubscribeOptions::default())
        .expect("subscribe");
    let p = Client::join(&info, opts("producer", Side::Rma)).expect("producer");
    let names: Vec<String> = (0..24).map(|i| format!("spread-{i}")).collect();
    for (step, name) in names.iter().enumerate() {
        let cdo = sealed(&p, name, step as i64);
        p.offer(cdo, Buffer::from_slice(&[step as u8; 32]).expect("buffer"))
            .expect("offer");
    }
    let mut heard = std::collections::BTreeSet::new();
    while heard.len() < names.len() {
        let e = sub.wait_timeout(T).expect("open").expect("an offer event");
        assert_eq!(e.app, p.app());
        assert!(
            heard.insert(e.cdo.clone().expect("a name")),
            "{:?} heard twice",
            e.cdo
        );
    }
    let expected: std::collections::BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(heard, expected);
    tracer.unsubscribe(sub).expect("unsubscribe");
    tracer.leave().expect("leave");
    p.leave().expect("leave");
    pool.stop().expect("the managers end with nothing lost");
}

/// Apps on the PM's host: one whose control connection moved to shared-memory rings, one
/// that kept the Unix socket (asked for none), one the PM refused rings (its limit
/// reached) that stays on the socket: all three move CDOs among themselves.
#[test]
fn control_connections_over_rings_and_over_the_socket_work_side_by_side() {
    let mut config = PmConfig::new("wf", SECRET, vec!["127.0.0.1:0".parse().expect("addr")]);
    config.max_rings = 1;
    let pm = PoolManager::start(config).expect("pm");
    let join = |name: &str, rings: bool| {
        Client::join(
            pm.info(),
            JoinOptions::new(name, 0).isolated().rings(rings).timeout(T),
        )
        .expect("join")
    };
    let ringed = join("ringed", true);
    let socket = join("socket", false);
    let refused = join("refused", true);
    // One ring segment, mapped by the PM and by the app granted it (this process is both).
    let segment = segment_name(&pm);
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    assert_eq!(maps.matches(&segment).count(), 2, "{segment} in {maps}");
    for (i, (from, to)) in [(&ringed, &socket), (&socket, &refused), (&refused, &ringed)]
        .into_iter()
        .enumerate()
    {
        let name = format!("cdo-{i}");
        let bytes = data(100_000 + i, i as u8);
        let mut buf = Buffer::new(bytes.len()).expect("buffer");
        buf.as_mut_slice().copy_from_slice(&bytes);
        let id = from.declare(&name).expect("declare");
        from.seal_and_offer(id, Attributes::new(), buf)
            .expect("offer");
        let there = to.declare(&name).expect("declare");
        let (got, _) = to.demand(there).expect("demand");
        assert!(got.as_slice() == bytes, "{name} intact");
        to.dispose(there).expect("dispose");
        drop(from.withdraw(id).expect("withdraw"));
    }
}

/// An app that scribbles on the shared segment of its control connection (here: the
/// position of what it read of the PM's ring, moved past what the PM wrote) loses its own
/// connection; the PM serves on, and an app beside it moves a CDO afterwards.
#[test]
fn an_app_scribbling_on_its_ring_loses_its_connection_and_nobody_else_does() {
    use std::os::unix::fs::FileExt;
    let pm = PoolManager::start(PmConfig::new(
        "wf",
        SECRET,
        vec!["127.0.0.1:0".parse().expect("addr")],
    ))
    .expect("pm");
    let join = |name: &str, timeout: Duration| {
        Client::join(
            pm.info(),
            JoinOptions::new(name, 0).isolated().timeout(timeout),
        )
        .expect("join")
    };
    // Its calls wait 5 s at most.
    let hostile = join("hostile", Duration::from_secs(5));
    // The segment, mapped by the PM and by the hostile app (this process is both): the
    // PM's ring to the app is the second control block (256 bytes each), its tail the
    // second cache line.
    let segment = segment_name(&pm);
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let start = maps
        .lines()
        .find(|l| l.contains(&segment))
        .and_then(|l| l.split('-').next())
        .and_then(|a| u64::from_str_radix(a, 16).ok())
        .expect("the ring segment is mapped");
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/mem")
        .expect("/proc/self/mem");
    mem.write_at(&(1u64 << 40).to_ne_bytes(), start + 256 + 64)
        .expect("scribble");
    // The PM's next write to it finds the position out of range: that app's calls fail.
    let cdo = hostile.declare("hostile/0").expect("declare");
    let failed = hostile.require(cdo);
    assert!(failed.is_err(), "the scribbling app was served: {failed:?}");
    let honest = join("honest", T);
    let other = join("other", T);
    let bytes = data(4096, 3);
    let id = honest.declare("after").expect("declare");
    honest
        .seal_and_offer(
            id,
            Attributes::new(),
            Buffer::from_slice(&bytes).expect("buffer"),
        )
        .expect("offer");
    let there = other.declare("after").expect("declare");
    let (got, _) = other.demand(there).expect("demand");
    assert!(got.as_slice() == bytes, "served on");
}

/// The name `/proc/self/maps` shows for the shared segments of `pm`'s rings (named after
/// its socket directory: other tests' pool managers in this process have their own).
fn segment_name(pm: &PoolManager) -> String {
    let dir = pm
        .info()
        .endpoints
        .iter()
        .find_map(|e| match e {
            pool::bootstrap::ControlAddr::Unix(path) => path.parent()?.file_name(),
            pool::bootstrap::ControlAddr::Tcp(_) => None,
        })
        .expect("a unix socket")
        .to_string_lossy()
        .into_owned();
    format!("memfd:maestro-ring {dir} ")
}
