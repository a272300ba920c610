//! A manager's place among the shards of its pool (issue #53, docs/developers/shards.md),
//! in memory: shard 0 numbers the apps and tells their joins and leaves; another shard
//! takes only apps of shard 0, each by the id shard 0 gave it, once, and tells no app
//! events.

mod support;

use pool_core::client::Route;
use pool_core::events::EventKind;
use pool_core::proto::{Reclaim, Refusal, ToPm};
use pool_core::shards::Shards;
use pool_core::view::{Query, View};
use support::*;

/// A manager that is shard `index` of `count`.
fn shard(index: usize, count: usize) -> Pm {
    let mut pm = Pm::new();
    let place = Shards::new(count)
        .expect("count")
        .place(index)
        .expect("place");
    pm.m.set_shard(place);
    pm
}

fn refused_with(out: &[(u64, pool_core::proto::FromPm)], conn: u64) -> Refusal {
    match out.iter().find(|(c, _)| *c == conn) {
        Some((_, pool_core::proto::FromPm::Refused { why, .. })) => why.clone(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn another_shard_takes_apps_of_shard_0_by_their_id_once() {
    let mut pm = shard(2, 3);
    let (plain, out) = pm.join_sending("producer", SECRET, |_| {});
    let why = refused_with(&out, plain);
    assert!(
        matches!(&why, Refusal::Shard(t) if t.contains("shard 2 of 3: join shard 0 first")),
        "{why}"
    );
    let (conn, app) = pm.join_with("producer", |j| j.member = Some(7));
    assert_eq!(app, 7, "the id shard 0 gave");
    // Its CDO ids are its own here too.
    let cdo = pm.declare(conn, "t2m/step-6");
    assert_eq!(pool_core::proto::cdo_owner(cdo), 7);
    let (twice, out) = pm.join_sending("producer", SECRET, |j| j.member = Some(7));
    let why = refused_with(&out, twice);
    assert!(
        matches!(&why, Refusal::Shard(t) if t.contains("joined here already")),
        "{why}"
    );
    for nobody in [0, 1 << 24] {
        let (c, out) = pm.join_sending("x", SECRET, |j| j.member = Some(nobody));
        assert!(
            matches!(refused_with(&out, c), Refusal::Shard(_)),
            "{nobody}"
        );
    }
    // The secret is needed as at any JOIN.
    let (forged, out) = pm.join_sending("x", b"not the secret", |j| j.member = Some(8));
    assert_eq!(refused_with(&out, forged), Refusal::BadProof);
}

#[test]
fn shard_0_numbers_the_apps_and_takes_no_member_id() {
    let mut pm = shard(0, 3);
    let (conn, out) = pm.join_sending("producer", SECRET, |j| j.member = Some(7));
    let why = refused_with(&out, conn);
    assert!(
        matches!(&why, Refusal::Shard(t) if t.contains("numbers the apps")),
        "{why}"
    );
    let (_, app) = pm.join("producer");
    assert_eq!(app, 1);
}

#[test]
fn only_shard_0_tells_apps_joins_and_leaves() {
    for (index, heard) in [(0, true), (1, false)] {
        let mut pm = shard(index, 2);
        let member = |id: u64| {
            move |j: &mut pool_core::proto::Join| {
                j.member = (index > 0).then_some(id);
            }
        };
        let (watcher, _) = pm.join_with("watcher", member(1));
        let (early, _) = pm.join_with("early", member(2));
        let kinds: pool_core::events::EventKinds = [EventKind::AppJoin, EventKind::AppLeave]
            .into_iter()
            .collect();
        let (_, out) = pm.subscribe_seeing(watcher, kinds, "", Default::default());
        let past = events_to(&out, watcher);
        let (late, out) = pm.join_sending("late", SECRET, member(3));
        let mut told = events_to(&out, watcher);
        let out = pm.feed(late, ToPm::Leave);
        told.extend(events_to(&out, watcher));
        let out = pm.feed(early, ToPm::Leave);
        told.extend(events_to(&out, watcher));
        let kinds: Vec<_> = past.iter().chain(&told).map(|e| e.kind).collect();
        if heard {
            assert_eq!(
                kinds,
                [
                    EventKind::AppJoin,
                    EventKind::AppJoin,
                    EventKind::AppLeave,
                    EventKind::AppLeave
                ],
                "shard 0: the app joined before, the late one, both leaves"
            );
        } else {
            assert!(kinds.is_empty(), "shard {index}: {kinds:?}");
        }
    }
}

#[test]
fn in_a_grace_period_a_member_reclaims_its_own_id_only_and_one_new_here_joins_at_once() {
    let mut pm = shard(1, 2);
    let until = pm.at(1_000_000_000);
    pm.m.reclaiming(until);
    let reclaim = |app| {
        Some(Reclaim {
            app,
            generation: 5,
            last_serial: 0,
        })
    };
    let (other, out) = pm.join_sending("producer", SECRET, |j| {
        j.member = Some(4);
        j.reclaim = reclaim(5);
    });
    let why = refused_with(&out, other);
    assert!(
        matches!(&why, Refusal::Shard(t) if t.contains("reclaims app 5")),
        "{why}"
    );
    // A member new to this shard (it holds nothing here) joins at once: shard 0
    // numbered it, it is no new app of the pool.
    let (_, newcomer) = pm.join_with("late", |j| j.member = Some(9));
    assert_eq!(newcomer, 9);
    let (_, app) = pm.join_with("producer", |j| {
        j.member = Some(4);
        j.reclaim = reclaim(4);
    });
    assert_eq!(app, 4);
}

/// A client core joined to shard 2 of 4 as member 7 numbers its CDOs in that shard's part
/// of app 7's ids, which the id alone names, and the manager takes them.
#[test]
fn a_core_at_a_shard_numbers_its_cdos_in_that_shards_part_of_the_apps_ids() {
    use pool_core::client::Event;
    use std::time::{Duration, Instant};
    let now = Instant::now();
    let four = Shards::new(4).expect("4");
    let place = four.place(2).expect("place");
    let mut manager = pool_core::sim::manager(now);
    manager.set_shard(place);
    let mut join = pool_core::sim::join_message("producer");
    join.member = Some(7);
    let at = (now, 1, [1; 32]);
    let (mut core, _) = pool_core::sim::join::<pool_core::sim::Plain>(
        &mut manager,
        at,
        join,
        SECRET,
        Duration::from_secs(5),
    );
    assert!(
        matches!(core.joined(), Some(Ok((7, _)))),
        "{:?}",
        core.joined()
    );
    core.set_shard(place);
    let cdo = core.declare("t2m/step-6").expect("declare");
    assert!(place.cdo_ids(7).contains(&cdo), "{cdo:x}");
    assert_eq!(four.of_cdo(cdo), 2);
    core.seal(now, cdo, Default::default(), 1).expect("seal");
    while let Some(t) = core.poll_transmit() {
        manager.handle(now, 1, t.msg);
    }
    while let Some((_, msg)) = manager.poll_output() {
        core.handle(now, msg);
    }
    assert!(
        matches!(core.poll_event(), Some(Event::Answer { waiter: 1, result: Ok(id) }) if id == cdo),
        "the manager sealed it"
    );
}

#[test]
fn a_shard_enforces_its_share_of_the_pools_per_app_quotas() {
    use pool_core::policy::Policy;
    let pool = Policy {
        max_app_bytes: 4096,
        max_leases: 0,
        ..Policy::default()
    };
    let four = Shards::new(4).expect("4");
    let share = pool.share(four);
    assert_eq!(
        (share.max_app_bytes, share.max_leases),
        (1024, 0),
        "0 stays 0"
    );
    assert_eq!(share.max_kept_bytes, pool.max_kept_bytes / 4);
    assert_eq!(share.max_bytes, pool.max_bytes, "one process's bound");
    assert_eq!(
        share.max_subscriptions, pool.max_subscriptions,
        "every shard sees each"
    );
    assert_eq!(pool.share(Shards::default()), pool, "one shard: as set");
    // A shard refuses what passes its share (an app's attributes past a quarter of its
    // bytes), where one manager takes it.
    for (place, count, refused) in [(0, 1, false), (0, 4, true), (3, 4, true)] {
        let mut pm = shard(place, count);
        pm.m.set_policy(pool.clone());
        let member = move |j: &mut pool_core::proto::Join| j.member = (place > 0).then_some(1);
        let (conn, _) = pm.join_with("producer", member);
        let cdo = pm.declare(conn, "big");
        let attributes = pool_core::attr::Attributes::from([(
            "user.note".to_string(),
            pool_core::attr::AttrValue::Str("x".repeat(1500)),
        )]);
        let out = pm.feed(conn, ToPm::Seal { cdo, attributes });
        let quota = out.iter().any(|(_, m)| {
            matches!(m, pool_core::proto::FromPm::Refused { why: Refusal::Quota(t), .. }
                if t.contains("this shard's 1/4 of the pool's 4096"))
        });
        assert_eq!(quota, refused, "shard {place} of {count}: {out:?}");
    }
}

/// A sharded pool in memory: `K` managers (shard `s` is `managers[s]`) and apps, each the
/// client cores of its shards ([`pool_core::client::Sharded`]); messages move as a driver
/// moves them, a connection per (app, shard).
struct ShardedPool {
    now: std::time::Instant,
    managers: Vec<pool_core::Manager>,
    apps: Vec<ShardedApp>,
    next_conn: u64,
    /// The bytes of each offer, by the key of its region, and each offer's key.
    memory: std::collections::HashMap<u64, Vec<u8>>,
    offers: std::collections::HashMap<u64, u64>,
    /// Messages moved so far: to the managers, and to the apps.
    to_managers: u64,
    to_apps: u64,
}

struct ShardedApp {
    client: pool_core::client::Sharded<pool_core::sim::Plain>,
    /// Its connection to each shard it uses.
    conns: std::collections::HashMap<usize, u64>,
    answers: std::collections::HashMap<u32, pool_core::client::CallResult<u64>>,
    /// What each subscription's queue heard, in order, with the shard that told it.
    news: std::collections::HashMap<u32, Vec<(usize, pool_core::client::News)>>,
}

impl ShardedPool {
    fn new(k: usize) -> ShardedPool {
        let now = std::time::Instant::now();
        let shards = Shards::new(k).expect("count");
        let managers = (0..k)
            .map(|s| {
                let mut m = pool_core::sim::manager(now);
                m.set_shard(shards.place(s).expect("place"));
                m
            })
            .collect();
        ShardedPool {
            now,
            managers,
            apps: Vec::new(),
            next_conn: 1,
            memory: Default::default(),
            offers: Default::default(),
            to_managers: 0,
            to_apps: 0,
        }
    }

    fn join(&mut self, component: &str) -> usize {
        let shards = Shards::new(self.managers.len()).expect("count");
        let mut join = pool_core::sim::join_message(component);
        join.process = self.next_conn;
        let client = pool_core::client::Sharded::connect(
            self.now,
            join,
            SECRET,
            std::time::Duration::from_secs(5),
            shards,
        );
        self.apps.push(ShardedApp {
            client,
            conns: Default::default(),
            answers: Default::default(),
            news: Default::default(),
        });
        self.pump();
        let i = self.apps.len() - 1;
        assert!(
            matches!(self.apps[i].client.joined(), Some(Ok(_))),
            "{:?}",
            self.apps[i].client.joined()
        );
        i
    }

    /// Moves every message and carries out every event until nothing moves.
    fn pump(&mut self) {
        let now = self.now;
        loop {
            let mut moved = false;
            for app in &mut self.apps {
                while let Some(shard) = app.client.poll_connect() {
                    let conn = self.next_conn;
                    self.next_conn += 1;
                    self.managers[shard].connected(now, conn, [conn as u8; 32]);
                    app.conns.insert(shard, conn);
                    moved = true;
                }
                while let Some((shard, e)) = app.client.poll_event() {
                    match e {
                        pool_core::client::Event::Answer { waiter, result } => {
                            app.answers.insert(waiter, result);
                        }
                        pool_core::client::Event::Subscription { events, news } => {
                            app.news.entry(events).or_default().push((shard, news));
                        }
                        // A ticket: the bytes read from the provider's memory.
                        pool_core::client::Event::Fetch(f) => {
                            let bytes = match &f.source {
                                pool_core::proto::Source::Rma { region, .. } => {
                                    self.memory[&region.key].clone()
                                }
                                // An app's own offer, from its own memory.
                                pool_core::proto::Source::SameProcess { cdo, .. } => {
                                    self.memory[&self.offers[cdo]].clone()
                                }
                                other => panic!("a ticket by {other:?}"),
                            };
                            if let Some(core) = app.client.core(shard) {
                                core.fetched(f.transfer, Ok((bytes, None)));
                            }
                        }
                        _ => {}
                    }
                    moved = true;
                }
                // After the events: what they made the cores send goes too.
                while let Some((shard, t)) = app.client.poll_transmit() {
                    self.managers[shard].handle(now, app.conns[&shard], t.msg);
                    self.to_managers += 1;
                    moved = true;
                }
            }
            for (shard, m) in self.managers.iter_mut().enumerate() {
                while m.has_work() {
                    m.work(now);
                }
                while let Some((conn, msg)) = m.poll_output() {
                    let app = self
                        .apps
                        .iter_mut()
                        .find(|a| a.conns.get(&shard) == Some(&conn));
                    if let Some(app) = app {
                        app.client.handle(now, shard, msg);
                    }
                    self.to_apps += 1;
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// App `app` subscribes to every event of `kind` with `options` at every shard, its
    /// events going to queue `queue`; set up (answered under tag 1) before it returns: its
    /// id.
    fn subscribe(
        &mut self,
        app: usize,
        kind: pool_core::events::EventKind,
        options: pool_core::events::SubscribeOptions,
        queue: u32,
    ) -> u64 {
        let wanted = (
            kind.into(),
            pool_core::selector::Selector::all().expr().clone(),
            options,
        );
        let now = self.now;
        let sub = self.apps[app]
            .client
            .subscribe(now, wanted, queue, 1)
            .expect("subscribe");
        self.pump();
        assert_eq!(self.apps[app].answers.get(&1), Some(&Ok(sub)), "set up");
        sub
    }

    /// App `app` offers `name` with `bytes` carried inline (answered under `tag`).
    fn offer(&mut self, app: usize, name: &str, bytes: &[u8], tag: u32) -> u64 {
        let now = self.now;
        let client = &mut self.apps[app].client;
        let core = client.at(now, Route::Name(name)).expect("home");
        let cdo = core.declare(name).expect("declare");
        let key = self.memory.len() as u64 + 1;
        self.memory.insert(key, bytes.to_vec());
        self.offers.insert(cdo, key);
        let offer = pool_core::client::Offer {
            cdo,
            bytes,
            region: fabric_types::RemoteRegion {
                addr: 0,
                key,
                len: bytes.len() as u64,
            },
            registered: true,
            alternates: Vec::new(),
            file: None,
            seal: Some(Default::default()),
            gfs: None,
        };
        core.offer(now, offer, tag.into()).expect("offer");
        cdo
    }

    /// App `app` demands `name` (answered under `tag`).
    fn demand(&mut self, app: usize, name: &str, tag: u32) -> u64 {
        let now = self.now;
        let core = self.apps[app]
            .client
            .at(now, Route::Name(name))
            .expect("home");
        let cdo = core.declare(name).expect("declare");
        let waits = matches!(
            core.demand(now, cdo, tag.into()),
            Ok(pool_core::client::Demand::Waiting(_))
        );
        assert!(waits, "{name} waits for its offer");
        cdo
    }
}

/// The same exchange, 24 names offered by one app and demanded by another, with one
/// manager and with three: the same answers and bytes; with three, every shard serves its
/// own names and only shard 0 knows every app.
#[test]
fn a_pool_of_three_shards_exchanges_what_a_pool_of_one_does() {
    let mut outcomes = Vec::new();
    for k in [1, 3] {
        let mut pool = ShardedPool::new(k);
        let producer = pool.join("producer");
        let consumer = pool.join("consumer");
        let names: Vec<String> = (0..24).map(|i| format!("t2m/step-{i}")).collect();
        let mut demanded = Vec::new();
        for (i, name) in names.iter().enumerate() {
            demanded.push(pool.demand(consumer, name, i as u32));
        }
        pool.pump();
        assert!(
            pool.apps[consumer].answers.is_empty(),
            "nothing offered yet"
        );
        for (i, name) in names.iter().enumerate() {
            pool.offer(producer, name, name.as_bytes(), 100 + i as u32);
        }
        pool.pump();
        let mut got = Vec::new();
        for (i, cdo) in demanded.iter().enumerate() {
            let answer = pool.apps[consumer].answers.get(&(i as u32)).cloned();
            assert_eq!(answer, Some(Ok(*cdo)), "K = {k}, {}", names[i]);
            let core = pool.apps[consumer]
                .client
                .at(pool.now, Route::Cdo(*cdo))
                .expect("core");
            let (bytes, _) = core.take_arrived(*cdo).expect("arrived");
            got.push(String::from_utf8(bytes).expect("utf-8"));
        }
        assert_eq!(got, names, "K = {k}");
        let offers_answered =
            (0..24).all(|i| matches!(pool.apps[producer].answers.get(&(100 + i)), Some(Ok(_))));
        assert!(offers_answered, "K = {k}");
        if k == 3 {
            let now = pool.now;
            for (s, m) in pool.managers.iter_mut().enumerate() {
                let pool_core::view::View::Status(st) = m.view(now, pool_core::view::Query::Status)
                else {
                    panic!("status")
                };
                assert_eq!(st.app_count, 2, "shard {s}: both apps use it");
            }
            let used: Vec<usize> = pool.apps[producer].client.cores().map(|(s, _)| s).collect();
            assert_eq!(used, [0, 1, 2], "the names' homes spread over the shards");
        }
        outcomes.push((got, pool.apps[consumer].answers.len()));
    }
    assert_eq!(outcomes[0], outcomes[1], "K = 1 and K = 3 agree");
}

/// A shard whose manager dies is taken over and reclaimed by the apps holding its names,
/// while the other shards serve on: what was offered there before is served after.
#[test]
fn a_shard_that_dies_is_reclaimed_while_the_others_serve_on() {
    use std::time::Duration;
    let mut pool = ShardedPool::new(3);
    let producer = pool.join("producer");
    let consumer = pool.join("consumer");
    let shards = Shards::new(3).expect("3");
    let names: Vec<String> = (0..30).map(|i| format!("field-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        pool.offer(producer, name, name.as_bytes(), 100 + i as u32);
    }
    // The consumer uses every shard before the death.
    for (i, name) in names.iter().take(6).enumerate() {
        pool.demand(consumer, name, 200 + i as u32);
    }
    pool.pump();
    let on = |s: usize| -> Vec<&String> { names.iter().filter(|n| shards.home(n) == s).collect() };
    let (dead_shard, live_shard) = (on(1), on(2));
    assert!(!dead_shard.is_empty() && !live_shard.is_empty());
    // Shard 1's manager dies; another takes its place, in a grace period.
    let mut next = pool_core::sim::manager(pool.now);
    next.set_shard(shards.place(1).expect("place"));
    next.reclaiming(pool.now + Duration::from_secs(2));
    pool.managers[1] = next;
    let until = pool.now + Duration::from_secs(30);
    for app in &mut pool.apps {
        app.client.lost(pool.now, 1, until);
        app.conns.remove(&1);
    }
    // Shard 2 serves on meanwhile.
    let live = live_shard[live_shard.len() - 1].clone();
    let cdo = pool.demand(consumer, &live, 300);
    pool.pump();
    assert_eq!(pool.apps[consumer].answers.get(&300), Some(&Ok(cdo)));
    // A demand of a name of shard 1 waits for its takeover.
    let dead = dead_shard[dead_shard.len() - 1].clone();
    let waiting = pool.demand(consumer, &dead, 301);
    pool.pump();
    assert_eq!(pool.apps[consumer].answers.get(&301), None, "waits");
    for app in 0..pool.apps.len() {
        pool.apps[app].client.rejoin(pool.now, 1, SECRET);
    }
    pool.pump();
    for app in &pool.apps {
        assert!(matches!(app.client.joined(), Some(Ok(_))));
    }
    // The producer replayed its offers there: the waiting demand is served.
    assert_eq!(pool.apps[consumer].answers.get(&301), Some(&Ok(waiting)));
    let core = pool.apps[consumer]
        .client
        .at(pool.now, Route::Cdo(waiting))
        .expect("core");
    let (bytes, _) = core.take_arrived(waiting).expect("arrived");
    assert_eq!(bytes, dead.as_bytes());
}

/// A subscription fans out to every shard and its events merge in one queue: a watcher
/// that must acknowledge each offer before it happens (signal-before) holds the offers of
/// names of all three shards, hears each once, and its acknowledgements, sent through the
/// sharded client, find the shard that raised each event: every offer then goes through.
/// The subscription is answered once every shard set it up, and ends at every shard.
#[test]
fn a_subscription_fans_out_to_every_shard_and_its_acks_find_their_shard() {
    use pool_core::client::News;
    use pool_core::events::{EventKind, SubscribeOptions};
    let mut pool = ShardedPool::new(3);
    let producer = pool.join("producer");
    let watcher = pool.join("watcher");
    let options = SubscribeOptions {
        signal_before: true,
        require_ack: true,
        ..Default::default()
    };
    let now = pool.now;
    let sub = pool.subscribe(watcher, EventKind::Offer, options, 7);
    let shards = Shards::new(3).expect("3");
    let names: Vec<String> = (0..12).map(|i| format!("level-{i}")).collect();
    let homes: std::collections::BTreeSet<usize> = names.iter().map(|n| shards.home(n)).collect();
    assert_eq!(homes.len(), 3, "names of every shard");
    for (i, name) in names.iter().enumerate() {
        pool.offer(producer, name, name.as_bytes(), 100 + i as u32);
    }
    pool.pump();
    // Each shard holds the producer's first offer there until the watcher acknowledges
    // it (its later ones wait behind it, as with one manager): one event per shard at a
    // time, acknowledged through the sharded client.
    let mut heard: Vec<(usize, pool_core::events::PoolEvent)> = Vec::new();
    let mut seen = 0;
    loop {
        let news = &pool.apps[watcher].news[&7];
        let fresh = &news[seen..];
        seen = news.len();
        let new: Vec<(usize, pool_core::events::PoolEvent)> = fresh
            .iter()
            .filter_map(|(s, n)| match n {
                News::Event(e) => Some((*s, e.clone())),
                _ => None,
            })
            .collect();
        if new.is_empty() {
            break;
        }
        let shards_now: std::collections::BTreeSet<usize> = new.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            shards_now.len(),
            new.len(),
            "one held offer per shard at a time"
        );
        for (shard, e) in &new {
            assert_eq!(
                shards.of_serial(e.serial),
                *shard,
                "the serial names its shard"
            );
            assert_eq!(shards.home(e.cdo.as_deref().unwrap_or("")), *shard);
            pool.apps[watcher].client.ack(sub, e.serial).expect("ack");
        }
        heard.extend(new);
        pool.pump();
    }
    let mut told: Vec<String> = heard.iter().filter_map(|(_, e)| e.cdo.clone()).collect();
    told.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(told, want, "each offer once");
    for i in 0..12 {
        assert!(
            matches!(pool.apps[producer].answers.get(&(100 + i)), Some(Ok(_))),
            "{} went through once acknowledged",
            names[i as usize]
        );
    }
    pool.apps[watcher]
        .client
        .unsubscribe(now, sub, 2)
        .expect("unsubscribe");
    pool.pump();
    assert!(matches!(pool.apps[watcher].answers.get(&2), Some(Ok(_))));
    let before = pool.apps[watcher].news[&7].len();
    pool.offer(producer, "after", b"after", 200);
    pool.pump();
    assert_eq!(
        pool.apps[watcher].news[&7].len(),
        before,
        "no events after its end"
    );
    assert!(matches!(pool.apps[producer].answers.get(&200), Some(Ok(_))));
}

/// An app leaves every shard it used, shard 0 last: the leave is answered once all said
/// BYE, every shard forgets it, and a watcher of app leaves hears it once (from shard 0).
#[test]
fn an_app_leaves_every_shard_and_is_told_gone_once() {
    use pool_core::client::News;
    use pool_core::events::{EventKind, SubscribeOptions};
    let mut pool = ShardedPool::new(3);
    let watcher = pool.join("watcher");
    let producer = pool.join("producer");
    let now = pool.now;
    pool.subscribe(watcher, EventKind::AppLeave, SubscribeOptions::default(), 9);
    for i in 0..9 {
        let name = format!("n-{i}");
        pool.offer(producer, &name, name.as_bytes(), 100 + i);
    }
    pool.pump();
    let used: Vec<usize> = pool.apps[producer].client.cores().map(|(s, _)| s).collect();
    assert_eq!(used, [0, 1, 2]);
    pool.apps[producer].client.leave(now, 50).expect("leave");
    pool.pump();
    assert_eq!(pool.apps[producer].answers.get(&50), Some(&Ok(0)), "BYE");
    for (s, m) in pool.managers.iter_mut().enumerate() {
        let pool_core::view::View::Status(st) = m.view(now, pool_core::view::Query::Status) else {
            panic!("status")
        };
        assert_eq!(st.app_count, 1, "shard {s} forgot the producer");
    }
    let leaves: Vec<usize> = pool.apps[watcher].news[&9]
        .iter()
        .filter_map(|(s, n)| {
            matches!(n, News::Event(e) if e.kind == EventKind::AppLeave).then_some(*s)
        })
        .collect();
    assert_eq!(leaves, [0], "told once, by shard 0");
}

/// What one run of the chaos below ended with: each demand's name and the bytes it got
/// (`None` for one left waiting), and the offers the watcher heard of, by name.
type Outcome = (Vec<(String, Option<Vec<u8>>)>, Vec<String>);

/// 1500 random operations of six apps over 120 names (offers, demands, requires; a watcher of
/// offers) on a pool of `k` shards, then every name not offered yet is: every demand and
/// require is served with its name's bytes (but those of an app that offers the name
/// itself, which no offer of its own serves), the watcher heard of each offer once, and
/// the shards hold every offer once between them.
fn chaos(seed: u64, k: usize) -> Outcome {
    use pool_core::client::News;
    use pool_core::events::EventKind;
    let mut rng = Rng::seeded(seed);
    let mut pool = ShardedPool::new(k);
    let apps: Vec<usize> = (0..6).map(|i| pool.join(&format!("app-{i}"))).collect();
    let watcher = pool.join("watcher");
    let now = pool.now;
    pool.subscribe(watcher, EventKind::Offer, Default::default(), 5);
    let names: Vec<String> = (0..120).map(|i| format!("v/{i}")).collect();
    let mut offered: Vec<Option<usize>> = vec![None; names.len()];
    // (app, tag, name, cdo) of each demand and require.
    let mut waits: Vec<(usize, u32, usize, u64)> = Vec::new();
    let mut tag = 1000u32;
    for _ in 0..1500 {
        let app = rng.pick(&apps);
        let n = rng.below(names.len());
        tag += 1;
        match rng.below(3) {
            0 if offered[n].is_none() => {
                offered[n] = Some(app);
                let bytes = format!("{}@{app}", names[n]);
                pool.offer(app, &names[n], bytes.as_bytes(), tag);
            }
            1 => {
                let cdo = pool.demand(app, &names[n], tag);
                waits.push((app, tag, n, cdo));
            }
            _ => {
                let core = pool.apps[app]
                    .client
                    .at(now, Route::Name(&names[n]))
                    .expect("home");
                let cdo = core.declare(&names[n]).expect("declare");
                core.require(now, cdo, tag.into()).expect("require");
                waits.push((app, tag, n, cdo));
            }
        }
        if rng.below(4) == 0 {
            pool.pump();
        }
    }
    for (n, name) in names.iter().enumerate() {
        if offered[n].is_none() {
            offered[n] = Some(apps[0]);
            tag += 1;
            let bytes = format!("{name}@{}", apps[0]);
            pool.offer(apps[0], name, bytes.as_bytes(), tag);
        }
    }
    pool.pump();
    let mut got = Vec::new();
    for &(app, tag, n, cdo) in &waits {
        let answer = pool.apps[app].answers.get(&tag).cloned();
        if offered[n] == Some(app) && answer.is_none() {
            got.push((names[n].clone(), None));
            continue;
        }
        assert_eq!(answer, Some(Ok(cdo)), "K = {k}: {} at app {app}", names[n]);
        let core = pool.apps[app]
            .client
            .at(now, Route::Cdo(cdo))
            .expect("core");
        let (bytes, _) = core.take_arrived(cdo).expect("arrived");
        let want = format!("{}@{}", names[n], offered[n].unwrap_or_default());
        assert_eq!(bytes, want.as_bytes(), "K = {k}");
        got.push((names[n].clone(), Some(bytes)));
    }
    let mut heard: Vec<String> = pool.apps[watcher].news[&5]
        .iter()
        .filter_map(|(_, n)| match n {
            News::Event(e) => e.cdo.clone(),
            _ => None,
        })
        .collect();
    heard.sort();
    let mut all = names.clone();
    all.sort();
    assert_eq!(heard, all, "K = {k}: each offer heard once");
    let mut held = 0;
    for m in &mut pool.managers {
        let pool_core::view::View::Status(st) = m.view(now, pool_core::view::Query::Status) else {
            panic!("status")
        };
        held += st.cdos.get("offered").copied().unwrap_or(0);
    }
    assert_eq!(held, names.len() as u64, "K = {k}: every offer held once");
    (got, heard)
}

#[test]
fn random_operations_give_the_same_outcome_on_one_shard_and_on_four() {
    for seed in 0..8 {
        let one = chaos(seed, 1);
        let four = chaos(seed, 4);
        assert_eq!(one, four, "seed {seed}");
        assert!(
            one.0.iter().filter(|(_, b)| b.is_some()).count() > 200,
            "seed {seed}"
        );
    }
}

/// The messages an operation costs do not grow with the shards: once an app uses every
/// shard, offering and demanding 200 names (and hearing of each offer) moves as many
/// messages with one shard, two or four.
#[test]
fn messages_per_operation_stay_the_same_whatever_the_number_of_shards() {
    use pool_core::events::EventKind;
    let mut counts = Vec::new();
    for k in [1, 2, 4] {
        let mut pool = ShardedPool::new(k);
        let producer = pool.join("producer");
        let consumer = pool.join("consumer");
        let watcher = pool.join("watcher");
        let now = pool.now;
        pool.subscribe(watcher, EventKind::Offer, Default::default(), 3);
        // Every app uses every shard first (its joins there are not the operations').
        for app in [producer, consumer] {
            for s in 0..k {
                pool.apps[app]
                    .client
                    .at(now, Route::Shard(s))
                    .expect("core");
            }
        }
        pool.pump();
        let before = (pool.to_managers, pool.to_apps);
        for i in 0..200u32 {
            let name = format!("m-{i}");
            pool.demand(consumer, &name, i);
            pool.offer(producer, &name, name.as_bytes(), 1000 + i);
        }
        pool.pump();
        assert!((0..200).all(|i| pool.apps[consumer].answers.contains_key(&i)));
        counts.push((pool.to_managers - before.0, pool.to_apps - before.1));
    }
    assert_eq!(counts[0], counts[1], "K = 1 and 2: {counts:?}");
    assert_eq!(counts[0], counts[2], "K = 1 and 4: {counts:?}");
    eprintln!(
        "messages for 200 demands, offers and offer events, to the managers and to the apps: {:?}",
        counts[0]
    );
}

/// An observer of a pool of three shards lists every live CDO once, in id order, page by
/// page (each shard lists its part of the apps' ids, and the merged pages stop where a
/// shard stopped), and the pool's status counts them all.
#[test]
fn a_sharded_pools_listing_shows_every_cdo_once_in_id_order() {
    use pool_core::view::{Ls, Query, View};
    let mut w = pool_core::sim::World::with_shards(Shards::new(3).expect("3"));
    let (p, q) = (w.join("producer", true), w.join("other", true));
    for i in 0..40 {
        w.offer(
            if i % 2 == 0 { p } else { q },
            &format!("field-{i}"),
            &[i as u8; 8],
            true,
        );
    }
    w.pump();
    let (mut ids, mut after) = (Vec::new(), None);
    loop {
        let ls = Ls {
            selector: None,
            after,
            limit: 7,
            attributes: false,
        };
        let View::Cdos(page) = w.view(Query::Ls(ls)) else {
            panic!("a page")
        };
        assert!(page.cdos.len() <= 7);
        ids.extend(page.cdos.iter().map(|c| c.id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(ids, sorted, "in id order, each once");
    assert_eq!(ids.len(), 40);
    let View::Status(s) = w.view(Query::Status) else {
        panic!("a status")
    };
    assert_eq!(s.cdos["offered"], 40);
    assert_eq!(s.shards.len(), 3);
    assert!(
        s.shards.iter().all(|x| x.cdos > 0),
        "the names spread over the shards: {:?}",
        s.shards
    );
}

/// A group whose members live at other shards than the group is demanded whole: the
/// group's home names every member, each is demanded at its own home, and the call is
/// answered once all arrived; the members come in the producer's order with their bytes,
/// each held at its home (its id in that shard's part), each once in the pool. The same
/// answers at one shard.
#[test]
fn a_group_whose_members_live_at_other_shards_is_demanded_whole() {
    let three = Shards::new(3).expect("3");
    for shards in [Shards::default(), three] {
        let mut w = pool_core::sim::World::with_shards(shards);
        let (p, c) = (w.join("producer", true), w.join("consumer", true));
        let names: Vec<String> = (0..40).map(|i| format!("member-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for (i, n) in names.iter().enumerate() {
            w.offer(p, n, &vec![i as u8; 16 + i], i % 2 == 0);
        }
        let group = pool_core::attr::group_attributes(&names);
        w.offer_sealed(p, "group", (&[], false), group);
        let g = w.declare(c, "group").expect("declare");
        w.timed(c, |k, now| k.demand_group(now, g, 1))
            .expect("demand group");
        w.pump();
        assert_eq!(w.answer(c, 1), Some(&Ok(g)), "at {} shards", shards.count());
        let here = w.client(c).take_group(g).expect("named");
        assert_eq!(here.ids.len(), names.len());
        let listed: Vec<&str> = here.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(listed, names, "in the producer's order");
        let far = names
            .iter()
            .filter(|n| shards.home(n) != shards.home("group"))
            .count();
        assert_eq!(far > 0, shards.count() > 1, "{far} members elsewhere");
        for (i, m) in here.members.iter().enumerate() {
            assert_eq!(m.data, vec![i as u8; 16 + i], "{}", m.name);
            assert_eq!(m.cdo, here.ids[i]);
            assert_eq!(
                shards.of_cdo(m.cdo),
                shards.home(&m.name),
                "held at its home"
            );
            assert_eq!(w.client(c).name(m.cdo).map(|n| &**n), Some(names[i]));
        }
        // Each member is the consumer's once in the pool: 40 offered, 40 demanded, and
        // the two group CDOs.
        let View::Status(s) = w.view(Query::Status) else {
            panic!("a status")
        };
        assert_eq!(s.cdos.values().sum::<u64>(), 82, "{:?}", s.cdos);
    }
}

/// A member core whose connection ended before its manager's welcome (the shard's
/// manager died as the app first met it) joins afresh on the next connection: its second
/// JOIN names the same member, and the calls made meanwhile follow it, once.
#[test]
fn a_member_core_cut_off_before_its_welcome_joins_afresh_and_keeps_its_calls() {
    use pool_core::client::ClientCore;
    use pool_core::proto::{FromPm, Join};
    use pool_core::sim::{CALL_TIMEOUT, Plain};
    use std::time::Instant;
    let place = Shards::new(3).expect("3").place(1).expect("shard 1");
    let join = || -> Join { join_message("consumer") };
    let now = Instant::now();
    let mut core: ClientCore<Plain> =
        ClientCore::connect_member(now, join(), SECRET, CALL_TIMEOUT, (7, place));
    let cdo = core.declare("x").expect("declare before the welcome");
    let sent = |core: &mut ClientCore<Plain>| -> Vec<ToPm> {
        std::iter::from_fn(|| core.poll_transmit())
            .map(|t| t.msg)
            .collect()
    };
    core.handle(now, FromPm::Challenge { nonce: [1; 32] });
    assert!(matches!(&sent(&mut core)[..], [ToPm::Join(j)] if j.member == Some(7)));
    // The connection ends here; the next one is to the manager that took over.
    assert!(
        core.join_again(now, join(), SECRET),
        "not welcomed: joins again"
    );
    core.handle(now, FromPm::Challenge { nonce: [2; 32] });
    let again = sent(&mut core);
    assert!(
        matches!(&again[..], [ToPm::Join(j)] if j.member == Some(7) && j.reclaim.is_none()),
        "{again:?}"
    );
    core.handle(
        now,
        FromPm::Welcome {
            app: 7,
            pool: 9,
            keep: None,
            lease_grace: std::time::Duration::from_secs(1),
        },
    );
    assert_eq!(core.joined(), Some(&Ok((7, 9))));
    let after = sent(&mut core);
    assert!(
        matches!(&after[..], [ToPm::Declare { cdo: c, name }] if *c == cdo && &**name == "x"),
        "{after:?}"
    );
    assert!(
        !core.join_again(now, join(), SECRET),
        "welcomed: lost, not joined again"
    );
}

/// `--owner` bindings are a property of names: every shard holds the whole list and
/// enforces it for its names, so an owned name is refused to another component at
/// whichever shard is its home, and offered by its owner there.
#[test]
fn owned_names_are_their_owners_at_every_shard() {
    use pool_core::client::CallError;
    use pool_core::policy::Policy;
    let shards = Shards::new(3).expect("3");
    let mut w = pool_core::sim::World::with_shards(shards);
    let policy = Policy {
        owners: vec!["field-=producer".parse().expect("owner")],
        ..Policy::default()
    };
    for m in &mut w.managers {
        m.set_policy(policy.clone());
    }
    let (mallory, producer) = (w.join("mallory", true), w.join("producer", true));
    let names: Vec<String> = (0..12).map(|i| format!("field-{i}")).collect();
    let homes: std::collections::BTreeSet<usize> = names.iter().map(|n| shards.home(n)).collect();
    assert_eq!(homes.len(), 3, "the owned names live at every shard");
    for name in &names {
        let (_, tag) = w.offer(mallory, name, &[1; 8], true);
        w.pump();
        match w.answer(mallory, tag) {
            Some(Err(CallError::Refused {
                why: Refusal::NotAllowed(why),
                ..
            })) => assert!(why.contains("\"producer\""), "{why}"),
            other => panic!("{name} at shard {}: {other:?}", shards.home(name)),
        }
        let (_, tag) = w.offer(producer, name, &[2; 8], true);
        w.pump();
        assert!(matches!(w.answer(producer, tag), Some(Ok(_))), "{name}");
    }
}
