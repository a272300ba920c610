//! Batch calls against a real pool manager on loopback: `offer_many` declares, seals and
//! offers CDOs of every size the PM moves differently (carried with their tickets, read
//! by RMA, in pieces) and fails one with attributes the schemas refuse on its own;
//! `fetch_many` takes them, some served from the leases of a subscription, one name
//! nobody offers failing on its own after the client's timeout; a bad name fails the
//! whole call before anything is declared. Alike with one manager and with three. A
//! consumer whose connection (socket or ring) stayed quiet still takes its leases.

use std::time::Duration;

use fabric::{Buffer, Config, Scope};
use pool::attr::{AttrValue, Attributes};
use pool::bootstrap::PmInfo;
use pool::events::{EventKind, SubscribeOptions};
use pool::proto::{Op, Refusal};
use pool::schema::Schemas;
use pool::selector::Selector;
use pool::shards::Shards;
use pool::{CallError, Client, ClientError, JoinOptions, PmConfig, PoolManager, ShardedPool};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
const SIZES: [usize; 5] = [0, 1, 4096, 64 << 10, (1 << 20) + 3];

/// The tests' user attribute.
const SCHEMA: &str = "schema-name: batch
schema-version: 1
schema-namespace: .user.
maestro-attributes:
  - key: step
    type: int()
";

fn opts(component: &str, timeout: Duration) -> JoinOptions {
    let mut schemas = Schemas::builtin();
    schemas.load_str(SCHEMA, "batch").expect("schema");
    let tcp = Config {
        provider: Some("tcp;ofi_rxm".into()),
        iface: Some("lo".into()),
        ..Config::default()
    };
    JoinOptions::new(component, 0)
        .timeout(timeout)
        .schemas(schemas)
        .fabric_with(&tcp, Scope::AnyNode)
        .expect("tcp on lo")
        .isolated()
}

fn data(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed) as u8).collect()
}

fn step(n: i64) -> Attributes {
    let mut a = Attributes::new();
    a.insert(".user.step".into(), AttrValue::Int(n));
    a
}

fn pm_config() -> std::io::Result<PmConfig> {
    let listen = vec!["127.0.0.1:0".parse().expect("addr")];
    Ok(PmConfig::new("wf", SECRET, listen))
}

#[test]
fn offered_and_fetched_in_batches_each_cdo_arrives_intact_or_fails_alone() {
    let pm = PoolManager::start(pm_config().expect("config")).expect("pm");
    offer_and_fetch_in_batches(pm.info());
    pm.stop().expect("pm stops");
}

/// The same in a pool of three managers: a batch's names live at several of them.
#[test]
fn batches_span_the_managers_of_a_sharded_pool() {
    let shards = Shards::new(3).expect("three shards");
    let homes: std::collections::HashSet<usize> = (0..20)
        .map(|i| shards.home(&format!("batch/{i}")))
        .collect();
    assert!(
        homes.len() > 1,
        "the names live at several shards: {homes:?}"
    );
    let pool = ShardedPool::start(shards, |_| pm_config()).expect("three managers");
    offer_and_fetch_in_batches(pool.info());
    pool.stop().expect("the managers end with nothing lost");
}

/// A producer offers 21 CDOs in two batches (one refused by the schema), a consumer
/// subscribed to offers fetches them in one batch with a name nobody offers.
fn offer_and_fetch_in_batches(info: &PmInfo) {
    let producer = Client::join(info, opts("producer", Duration::from_secs(30))).expect("p");
    let consumer = Client::join(info, opts("consumer", Duration::from_secs(2))).expect("c");
    // Told of the first half's offers: those are served from their leases.
    let told = consumer
        .subscribe(
            &Selector::all(),
            EventKind::Offer,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    let batch = |range: std::ops::Range<usize>| -> Vec<pool::NewOffer> {
        range
            .map(|i| {
                let size = SIZES[i % SIZES.len()];
                let buf = Buffer::from_slice(&data(size, i)).expect("buffer");
                (format!("batch/{i}"), step(i as i64), buf)
            })
            .collect()
    };
    let mut first = batch(0..10);
    // The schema says .user.step is an integer: this one fails alone.
    let mut wrong = Attributes::new();
    wrong.insert(".user.step".into(), AttrValue::Str("seven".into()));
    first.push((
        "batch/wrong".into(),
        wrong,
        Buffer::from_slice(b"x").expect("b"),
    ));
    let offered = producer.offer_many(first).expect("offer_many");
    assert_eq!(offered.len(), 11);
    assert!(offered[..10].iter().all(Result::is_ok), "{offered:?}");
    assert!(
        matches!(offered[10], Err(ClientError::Call(CallError::Attribute(_)))),
        "{:?}",
        offered[10]
    );
    assert_eq!(told.wait_queued(10, Duration::from_secs(30)), 10);
    let second = producer.offer_many(batch(10..20)).expect("offer_many");
    assert!(second.iter().all(Result::is_ok), "{second:?}");

    let mut names: Vec<String> = (0..20).map(|i| format!("batch/{i}")).collect();
    names.insert(7, "batch/nobody-offers-this".into());
    names.push("batch/wrong".into());
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let got = consumer.fetch_many(&refs).expect("fetch_many");
    assert_eq!(got.len(), names.len());
    for (name, r) in names.iter().zip(&got) {
        match name
            .strip_prefix("batch/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(i) => {
                let (bytes, attributes) = r.as_ref().expect(name);
                assert_eq!(bytes.as_slice(), data(SIZES[i % SIZES.len()], i), "{name}");
                assert_eq!(
                    attributes.get(".user.step"),
                    Some(&AttrValue::Int(i as i64)),
                    "{name}"
                );
            }
            // Never offered: each waits until the consumer's timeout, alone.
            None => assert!(
                matches!(r, Err(ClientError::Call(CallError::Timeout(Op::Demand)))),
                "{name}: {r:?}"
            ),
        }
    }
    // The consumer keeps no CDO: fetched again, every name comes again.
    let again = consumer.fetch_many(&refs[..3]).expect("again");
    assert!(again.iter().all(Result::is_ok), "{again:?}");

    // A bad name fails the whole call, and nothing of it is declared.
    let bad = consumer.fetch_many(&["batch/0", ""]);
    assert!(
        matches!(
            bad,
            Err(ClientError::Call(CallError::Refused {
                op: Op::Declare,
                why: Refusal::BadName
            }))
        ),
        "{bad:?}"
    );
    let bad = producer.offer_many(vec![(
        String::new(),
        Attributes::new(),
        Buffer::from_slice(b"y").expect("b"),
    )]);
    assert!(matches!(
        bad,
        Err(ClientError::Call(CallError::Refused { .. }))
    ));
    drop(told);
    consumer.leave().expect("consumer leaves");
    for cdo in offered.into_iter().chain(second).flatten() {
        producer.withdraw(cdo).expect("withdraw");
    }
    producer.leave().expect("producer leaves");
}

/// A consumer whose connection stayed quiet for longer than half the lease grace (its
/// reader asleep, so its lease table is not known current) still takes a lease of
/// memory: its fetch catches up with the connection first (a socket: the kernel holds
/// nothing for it and its reader waits; a ring: read on the caller's thread). An app
/// watching transports hears that the lease moved the bytes, not a ticket of the PM's.
#[test]
fn a_quiet_consumer_still_takes_its_leases_of_memory() {
    let mut config = pm_config().expect("config");
    config.policy.lease_grace = Duration::from_millis(200);
    let pm = PoolManager::start(config).expect("pm");
    let info = pm.info();
    let producer = Client::join(info, opts("producer", Duration::from_secs(30))).expect("p");
    let watcher = Client::join(info, opts("watcher", Duration::from_secs(30))).expect("w");
    let moved = watcher
        .subscribe(
            &Selector::all(),
            EventKind::TransportStarted,
            SubscribeOptions::default(),
        )
        .expect("subscribe");
    for (i, rings) in [false, true].into_iter().enumerate() {
        let consumer = Client::join(info, opts("consumer", Duration::from_secs(30)).rings(rings))
            .expect("consumer");
        let told = consumer
            .subscribe(
                &Selector::all(),
                EventKind::Offer,
                SubscribeOptions::default(),
            )
            .expect("subscribe");
        let name = format!("quiet/{i}");
        let bytes = data(64 << 10, i);
        let buf = Buffer::from_slice(&bytes).expect("buffer");
        let offered = producer
            .offer_many(vec![(name.clone(), step(0), buf)])
            .expect("offer");
        assert!(offered[0].is_ok(), "{offered:?}");
        assert_eq!(told.wait_queued(1, Duration::from_secs(30)), 1);
        // The connection stays quiet for longer than half the grace: nobody withdraws.
        let withdraws = consumer
            .subscribe(
                &Selector::all(),
                EventKind::Withdraw,
                SubscribeOptions::default(),
            )
            .expect("subscribe");
        assert!(
            withdraws
                .wait_timeout(Duration::from_millis(300))
                .expect("wait")
                .is_none(),
            "nothing comes"
        );
        let got = consumer.fetch_many(&[name.as_str()]).expect("fetch_many");
        let (data, _) = got[0].as_ref().expect("fetched");
        assert_eq!(data.as_slice(), bytes, "rings: {rings}");
        let by_lease = std::iter::from_fn(|| {
            moved
                .wait_timeout(Duration::from_secs(30))
                .expect("the transport's event")
        })
        .find(|e| e.cdo.as_deref() == Some(name.as_str()))
        .expect("the transport's event");
        assert!(
            by_lease.detail.contains("by a lease"),
            "rings: {rings}: {}",
            by_lease.detail
        );
        consumer.leave().expect("consumer leaves");
    }
    drop(moved);
    watcher.leave().expect("watcher leaves");
    producer.leave().expect("producer leaves");
    pm.stop().expect("pm stops");
}
