//! Chaos with a pool manager that dies (issue #52): honest apps, driven through their
//! client cores in memory (`sim::World`), offer, demand, withdraw and watch offers at
//! random, and the manager is killed and replaced at random points among them (fixed
//! seeds: the same runs every time). Some apps die with it; the others make calls while no
//! manager runs, then reclaim what they hold in random order. After each grace period:
//! every CDO a live app offers is offered again, every demand of a live provider's offer
//! is served with its bytes, no watcher heard an offer or withdraw twice, serials only
//! grow, and the CDOs by state add up.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use pool_core::client::{Demand, News, Phase};
use pool_core::events::{EventKind, SubscribeOptions};
use pool_core::proto::CdoId;
use pool_core::selector::Selector;
use pool_core::shards::Shards;
use pool_core::sim::World;
use pool_core::view::{Ls, MAX_PAGE, Query, View};
use support::Rng;

const GRACE: Duration = Duration::from_secs(2);

/// One live offer: its name, provider, CDO and bytes.
struct Offered {
    name: String,
    app: usize,
    cdo: CdoId,
    bytes: Vec<u8>,
}

/// A demand waiting: the consumer, its tag, its CDO, the offer's name.
struct Waiting {
    app: usize,
    tag: u32,
    cdo: CdoId,
    name: String,
}

struct Run {
    w: World,
    rng: Rng,
    alive: Vec<bool>,
    offered: Vec<Offered>,
    waiting: Vec<Waiting>,
    /// Watchers of offers and withdraws: (app, queue), and the names offered since each
    /// subscribed (each must hear of every one).
    watchers: Vec<(usize, u32)>,
    owed: HashMap<u32, Vec<String>>,
    next_tag: u32,
    names: u64,
    /// What the run got through, to show it went where the test is about.
    served: usize,
    restarts: usize,
    died: usize,
}

impl Run {
    fn new(seed: u64, shards: Shards) -> Run {
        let mut run = Run {
            w: World::with_shards(shards),
            rng: Rng::seeded(seed),
            alive: Vec::new(),
            offered: Vec::new(),
            waiting: Vec::new(),
            watchers: Vec::new(),
            owed: HashMap::new(),
            next_tag: 1 << 30,
            names: 0,
            served: 0,
            restarts: 0,
            died: 0,
        };
        for _ in 0..4 {
            run.join();
        }
        run
    }

    fn tag(&mut self) -> u32 {
        self.next_tag += 1;
        self.next_tag
    }

    fn join(&mut self) {
        let n = self.alive.len();
        let app = self.w.join(&format!("app{n}"), true);
        assert_eq!(app, n);
        self.alive.push(true);
    }

    fn live(&mut self) -> Option<usize> {
        let live: Vec<usize> = (0..self.alive.len()).filter(|&i| self.alive[i]).collect();
        (!live.is_empty()).then(|| self.rng.pick(&live))
    }

    fn offer(&mut self) {
        let Some(app) = self.live() else { return };
        let name = format!("n{}", self.names);
        self.names += 1;
        let len = 1 + self.rng.below(300);
        let bytes: Vec<u8> = (0..len).map(|i| (i as u64 ^ self.names) as u8).collect();
        let inline = self.rng.below(2) == 0;
        let (cdo, _) = self.w.offer(app, &name, &bytes, inline);
        for (_, queue) in &self.watchers {
            self.owed.entry(*queue).or_default().push(name.clone());
        }
        self.offered.push(Offered {
            name,
            app,
            cdo,
            bytes,
        });
    }

    fn demand(&mut self) {
        let Some(app) = self.live() else { return };
        let candidates: Vec<usize> = (0..self.offered.len())
            .filter(|&i| self.offered[i].app != app)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let name = self.offered[self.rng.pick(&candidates)].name.clone();
        let cdo = self.w.declare(app, &name).expect("declare");
        let tag = self.tag();
        match self.w.timed(app, |k, now| k.demand(now, cdo, tag)) {
            Ok(Demand::Waiting(_)) => self.waiting.push(Waiting {
                app,
                tag,
                cdo,
                name,
            }),
            // Served at once by the lease an offer event brought (small CDOs).
            Ok(Demand::Here(bytes, _)) => {
                let want = &self
                    .offered
                    .iter()
                    .find(|o| o.name == name)
                    .expect("offered");
                assert_eq!(bytes, want.bytes, "{name}");
                self.served += 1;
            }
            Err(e) => panic!("demand: {e}"),
        }
    }

    /// Withdraws an offer nobody waits for.
    fn withdraw(&mut self) {
        let free: Vec<usize> = (0..self.offered.len())
            .filter(|&i| !self.waiting.iter().any(|d| d.name == self.offered[i].name))
            .collect();
        if free.is_empty() {
            return;
        }
        let o = self.offered.swap_remove(self.rng.pick(&free));
        let tag = self.tag();
        self.w
            .timed(o.app, |k, now| k.withdraw(now, o.cdo, tag))
            .expect("withdraw");
    }

    fn watch(&mut self) {
        let Some(app) = self.live() else { return };
        let queue = self.tag();
        let kinds = EventKind::Offer | EventKind::Withdraw;
        let wanted = (
            kinds,
            Selector::all().expr().clone(),
            SubscribeOptions::default(),
        );
        let tag = self.tag();
        self.w
            .timed(app, |k, now| k.subscribe(now, wanted, queue, tag))
            .expect("subscribe");
        self.watchers.push((app, queue));
    }

    /// One random operation, or time passing.
    fn step(&mut self) {
        match self.rng.below(12) {
            0..=2 => self.offer(),
            3..=5 => self.demand(),
            6 => self.withdraw(),
            7 if self.watchers.len() < 4 => self.watch(),
            8 if self.alive.iter().filter(|a| **a).count() < 8 => self.join(),
            9 => {
                let until = self.w.now + Duration::from_millis(self.rng.below(500) as u64);
                self.w.run_until(until);
            }
            _ => {}
        }
        self.w.pump();
    }

    /// The manager dies and another takes over: some apps die with it, the others make
    /// calls meanwhile, then reclaim in random order; the grace period passes. In a pool
    /// of several shards, every shard's manager, or (half the time) one shard's while the
    /// others serve on (no app dies then).
    fn failover(&mut self) {
        self.restarts += 1;
        let shards = self.w.client(0).shards().count();
        let one = (shards > 1 && self.rng.below(2) == 0).then(|| self.rng.below(shards));
        match one {
            Some(shard) => self.w.restart_shard(shard, GRACE),
            None => self.w.restart_manager(GRACE),
        }
        for app in 0..self.alive.len() {
            if one.is_none() && self.alive[app] && self.rng.below(8) == 0 {
                self.died += 1;
                self.alive[app] = false;
                self.w.client(app).close(0);
                self.offered.retain(|o| o.app != app);
                self.waiting.retain(|d| d.app != app);
                self.watchers.retain(|(a, _)| *a != app);
            }
        }
        // Demands of what died with its provider are not honest any more.
        let names: HashSet<String> = self.offered.iter().map(|o| o.name.clone()).collect();
        self.waiting.retain(|d| names.contains(&d.name));
        for _ in 0..self.rng.below(4) {
            match self.rng.below(5) {
                0 | 1 => self.offer(),
                2 | 3 => self.demand(),
                // A subscription asked while no manager runs (at the shards killed).
                _ if self.watchers.len() < 6 => self.watch(),
                _ => {}
            }
        }
        let mut order: Vec<usize> = (0..self.alive.len()).filter(|&a| self.alive[a]).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, self.rng.below(i + 1));
        }
        for app in order {
            self.w.reclaim(app).expect("reclaimed in the grace period");
        }
        let until = self.w.now + GRACE;
        self.w.run_until(until);
        assert!(!self.w.in_grace());
    }

    /// What must hold once the manager is quiet.
    fn check(&mut self, seed: u64) {
        self.w.pump();

        // Every live app's offers are offered again.
        let mut pages = HashMap::new();
        let mut after = None;
        loop {
            let ls = Ls {
                selector: None,
                after,
                limit: MAX_PAGE,
                attributes: false,
            };
            let View::Cdos(page) = self.w.view(Query::Ls(ls)) else {
                panic!("a page")
            };
            for c in page.cdos {
                pages.insert(c.id, c.state);
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        for o in &self.offered {
            assert_eq!(
                self.w.client(o.app).phase(o.cdo),
                Some(Phase::Offered),
                "seed {seed}"
            );
            assert_eq!(
                pages.get(&o.cdo).map(String::as_str),
                Some("offered"),
                "seed {seed}: {} (CDO {:#x}) of app {} is not offered by the manager ({} listed, {:?})",
                o.name,
                o.cdo,
                o.app,
                pages.len(),
                pages.get(&o.cdo)
            );
        }
        // Every honest demand is served, with its bytes.
        for d in std::mem::take(&mut self.waiting) {
            assert_eq!(
                self.w.answer(d.app, d.tag),
                Some(&Ok(d.cdo)),
                "seed {seed}: demand of {} by app {}",
                d.name,
                d.app
            );
            let (got, _) = self.w.client(d.app).take_arrived(d.cdo).expect("arrived");
            let want = &self
                .offered
                .iter()
                .find(|o| o.name == d.name)
                .expect("offered")
                .bytes;
            assert_eq!(&got, want, "seed {seed}: {}", d.name);
            self.served += 1;
        }
        // Every watcher heard of every offer made since it subscribed, none twice; serials
        // only grow.
        for &(app, queue) in &self.watchers {
            let mut seen = HashSet::new();
            let heard: HashSet<String> = (self.w.apps[app].news.get(&queue).into_iter().flatten())
                .filter_map(|n| match n {
                    News::Event(e) if e.kind == EventKind::Offer => e.cdo.clone(),
                    _ => None,
                })
                .collect();
            for name in self.owed.get(&queue).into_iter().flatten() {
                assert!(
                    heard.contains(name),
                    "seed {seed}: queue {queue} missed the offer of {name}"
                );
            }
            // Each shard's serials only grow (shard s numbers from s * 2^48).
            let mut last = HashMap::new();
            let shards = self.w.client(app).shards();
            for news in self.w.apps[app].news.get(&queue).into_iter().flatten() {
                let News::Event(e) = news else { continue };
                let shard = shards.of_serial(e.serial);
                let last = last.entry(shard).or_insert(0);
                assert!(
                    e.serial > *last,
                    "seed {seed}: serial {} after {last} (shard {shard})",
                    e.serial
                );
                *last = e.serial;
                let what = (e.kind, e.cdo.clone());
                assert!(
                    seen.insert(what.clone()),
                    "seed {seed}: heard twice: {what:?}"
                );
            }
        }
        // The books balance.
        let View::Status(s) = self.w.view(Query::Status) else {
            panic!("a status")
        };
        let counted: u64 = s.cdos.values().sum();
        assert_eq!(
            counted,
            self.w.cdo_count() as u64,
            "seed {seed}: {:?}",
            s.cdos
        );
    }
}

#[test]
fn a_manager_killed_at_random_points_loses_nothing_a_live_app_holds() {
    chaos(Shards::default());
}

/// The same with three shards: at each failover all of them are killed and taken over,
/// or one while the others serve on.
#[test]
fn three_shards_killed_at_random_points_lose_nothing_a_live_app_holds() {
    chaos(Shards::new(3).expect("three"));
}

fn chaos(shards: Shards) {
    let (mut served, mut restarts, mut died) = (0, 0, 0);
    for seed in 1..=12u64 {
        let mut run = Run::new(seed, shards);
        for i in 0..600 {
            run.step();
            if run.rng.below(60) == 0 || i == 599 {
                run.failover();
                run.check(seed);
            }
        }
        (served, restarts, died) = (
            served + run.served,
            restarts + run.restarts,
            died + run.died,
        );
    }
    eprintln!("served {served}, restarts {restarts}, apps died {died}");
    assert!(
        served > 200 && restarts > 50 && died > 5,
        "served {served}, restarts {restarts}, apps died {died}"
    );
}
