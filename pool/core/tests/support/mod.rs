//! The pool manager driven in memory: a harness shared by the manager's test files (each
//! uses part of it).
#![allow(dead_code)]

use fabric_types::{Address, RemoteRegion};
use pool_core::attr::{AttrValue, Attributes};
use pool_core::auth::prove;
use pool_core::events::{EventKinds, PoolEvent, SubscribeOptions};
use pool_core::proto::{
    AppId, CdoId, FabricEndpoint, FromPm, OfferExtras, Op, Refusal, ToPm, TransferId, cdo_ids,
};
use pool_core::selector::Selector;
use pool_core::{ConnId, Manager};
use std::time::{Duration, Instant};

// Each test file uses part of these.
#[allow(unused_imports)]
pub use pool_core::sim::{SECRET, join_message, memory_file, memory_of, shm};

pub struct Pm {
    pub m: Manager,
    pub next: ConnId,
    /// Each joined connection's app and the last CDO id it declared.
    pub apps: std::collections::HashMap<ConnId, (AppId, CdoId)>,
    /// The clock's origin: wall-clock time 0.
    pub t0: Instant,
    /// The time of the inputs the harness hands over (set it to move time on).
    pub now: Instant,
}

impl Pm {
    pub fn new() -> Pm {
        let t0 = Instant::now();
        Pm {
            m: pool_core::sim::manager(t0),
            next: 1,
            apps: std::collections::HashMap::new(),
            t0,
            now: t0,
        }
    }

    /// The instant `ns` nanoseconds after the clock's origin.
    pub fn at(&self, ns: u64) -> Instant {
        self.t0 + Duration::from_nanos(ns)
    }

    /// Sends and returns everything the PM wants to send.
    pub fn feed(&mut self, conn: ConnId, msg: ToPm) -> Vec<(ConnId, FromPm)> {
        self.m.handle(self.now, conn, msg);
        self.drain()
    }

    /// Everything the PM wants to send, its deferred work done (as a driver does it).
    pub fn drain(&mut self) -> Vec<(ConnId, FromPm)> {
        while self.m.has_work() {
            self.m.work(self.now);
        }
        std::iter::from_fn(|| self.m.poll_output()).collect()
    }

    /// The driver checks and describes the files kept since it last looked, each with
    /// `outcome`: those files, and what the PM sends then.
    pub fn describe(
        &mut self,
        outcome: Result<(), &str>,
    ) -> (Vec<pool_core::KeptCheck>, Vec<(ConnId, FromPm)>) {
        let checks = self.m.take_kept_checks();
        for c in &checks {
            self.m.kept_checked(self.now, c.id, outcome);
        }
        (checks, self.drain())
    }

    pub fn connect(&mut self) -> (ConnId, [u8; 32]) {
        let conn = self.next;
        self.next += 1;
        let nonce = [conn as u8; 32];
        self.m.connected(self.now, conn, nonce);
        assert_eq!(
            self.m.poll_output(),
            Some((conn, FromPm::Challenge { nonce }))
        );
        (conn, nonce)
    }

    /// Joins as `component` of its own process on host node1 with an shm endpoint.
    pub fn join(&mut self, component: &str) -> (ConnId, AppId) {
        let (host, process) = ("node1", self.next);
        self.join_at(component, host, process, Some(shm(component)))
    }

    pub fn join_at(
        &mut self,
        component: &str,
        host: &str,
        process: u64,
        endpoint: Option<FabricEndpoint>,
    ) -> (ConnId, AppId) {
        self.join_with(component, |j| {
            j.host = host.into();
            j.process = process;
            j.endpoint = endpoint;
        })
    }

    /// Joins with endpoints on several networks: `(endpoint, network)`, the first first.
    pub fn join_on(
        &mut self,
        component: &str,
        host: &str,
        endpoints: &[(FabricEndpoint, &str)],
    ) -> (ConnId, AppId) {
        self.join_with(component, |j| {
            j.host = host.into();
            j.process = 1;
            j.endpoint = endpoints.first().map(|(e, _)| e.clone());
            j.alternates = endpoints.iter().skip(1).map(|(e, _)| e.clone()).collect();
            j.networks = endpoints
                .iter()
                .map(|(_, n)| Some(n.parse().expect("subnet")))
                .collect();
        })
    }

    /// Sends `component`'s JOIN (on node1, an shm endpoint) as `edit` changes it; the
    /// connection and everything the PM sent.
    pub fn join_sending(
        &mut self,
        component: &str,
        secret: &[u8],
        edit: impl FnOnce(&mut pool_core::proto::Join),
    ) -> (ConnId, Vec<(ConnId, FromPm)>) {
        let (conn, nonce) = self.connect();
        let proof = prove(secret, &nonce, "wf", component, 0);
        let mut msg = join_msg(component, &proof);
        if let ToPm::Join(j) = &mut msg {
            edit(j);
        }
        let out = self.feed(conn, msg);
        (conn, out)
    }

    /// Joins as `component`, its JOIN as `edit` changes it; its connection and app id.
    pub fn join_with(
        &mut self,
        component: &str,
        edit: impl FnOnce(&mut pool_core::proto::Join),
    ) -> (ConnId, AppId) {
        let (conn, out) = self.join_sending(component, SECRET, edit);
        // Subscribers of app joins hear of it too (see the event tests).
        let mine: Vec<_> = out.iter().filter(|(c, _)| *c == conn).collect();
        let app = match mine.as_slice() {
            [(_, FromPm::Welcome { app, pool: 77, .. })] => *app,
            other => panic!("join: {other:?}"),
        };
        self.apps.insert(conn, (app, *cdo_ids(app).start() - 1));
        (conn, app)
    }

    /// The next id `conn`'s app gives a CDO.
    pub fn next_cdo(&mut self, conn: ConnId) -> CdoId {
        let (_, last) = self.apps.get_mut(&conn).expect("joined");
        *last += 1;
        *last
    }

    /// Declares `name` (answered by nothing when it succeeds).
    pub fn declare(&mut self, conn: ConnId, name: &str) -> CdoId {
        let cdo = self.next_cdo(conn);
        let msg = ToPm::Declare {
            cdo,
            name: name.into(),
        };
        let out = self.feed(conn, msg);
        assert!(
            !out.iter()
                .any(|(c, m)| *c == conn && !matches!(m, FromPm::Event { .. })),
            "declare: {out:?}"
        );
        cdo
    }

    pub fn seal(&mut self, conn: ConnId, cdo: CdoId) -> Vec<(ConnId, FromPm)> {
        let mut attributes = Attributes::new();
        attributes.insert(".user.step".into(), AttrValue::Int(2));
        self.feed(conn, ToPm::Seal { cdo, attributes })
    }

    /// Declares and seals `name`, then offers `len` bytes; returns the CDO and what the
    /// offer produced.
    pub fn offer(&mut self, conn: ConnId, name: &str, len: u64) -> (CdoId, Vec<(ConnId, FromPm)>) {
        let cdo = self.declare(conn, name);
        assert_eq!(self.seal(conn, cdo), [(conn, done(Op::Seal, cdo))]);
        let out = self.feed(
            conn,
            ToPm::Offer {
                cdo,
                region: region(len),
                extras: OfferExtras::new(Vec::new(), Some(memory_file())),
            },
        );
        assert_eq!(out[0], (conn, done(Op::Offer, cdo)));
        (cdo, out)
    }
}

/// [`join_message`] of `component` with `proof`.
pub fn join_msg(component: &str, proof: &[u8]) -> ToPm {
    ToPm::Join(Box::new(pool_core::proto::Join {
        proof: proof.to_vec(),
        ..join_message(component)
    }))
}

pub fn region(len: u64) -> RemoteRegion {
    RemoteRegion {
        addr: 0,
        key: 1,
        len,
    }
}

pub fn done(op: Op, cdo: CdoId) -> FromPm {
    FromPm::Done { op, cdo }
}

pub fn refused(op: Op, cdo: Option<CdoId>, why: Refusal) -> FromPm {
    FromPm::Refused { op, cdo, why }
}

pub fn wrong(op: Op, state: &str) -> Refusal {
    Refusal::WrongState {
        op,
        state: state.into(),
    }
}

/// The (consumer connection, transfer, consumer CDO, length) of the first ticket in `out`.
pub fn ticket_of(out: &[(ConnId, FromPm)]) -> (ConnId, TransferId, CdoId, u64) {
    out.iter()
        .find_map(|(c, m)| match m {
            FromPm::Ticket {
                transfer,
                cdo,
                source,
                ..
            } => Some((*c, *transfer, *cdo, source.len())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ticket in {out:?}"))
}

/// A consumer's report that `transfer` completed (by RMA).
pub fn transferred(transfer: TransferId) -> ToPm {
    ToPm::TransferDone {
        transfer,
        error: None,
        direct: None,
    }
}

/// Whether the ticket in `out` completes a demand at the consumer (no `Ready` follows).
pub fn completes_demand(out: &[(ConnId, FromPm)]) -> bool {
    out.iter()
        .find_map(|(_, m)| match m {
            FromPm::Ticket {
                completes_demand, ..
            } => Some(*completes_demand),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ticket in {out:?}"))
}

impl Pm {
    /// `consumer` declares and demands `name`: the kind of source its ticket names.
    pub fn ticket_kind(&mut self, consumer: ConnId, name: &str) -> &'static str {
        let want = self.declare(consumer, name);
        let out = self.feed(consumer, ToPm::Demand { cdo: want });
        out.iter()
            .find_map(|(_, m)| match m {
                FromPm::Ticket { source, .. } => Some(source.kind()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{out:?}"))
    }
}

impl Pm {
    /// As [`Pm::subscribe`], returning what the subscription's answer came with.
    pub fn subscribe_seeing(
        &mut self,
        conn: ConnId,
        kinds: impl Into<EventKinds>,
        selector: &str,
        options: SubscribeOptions,
    ) -> (u64, Vec<(ConnId, FromPm)>) {
        let selector = Selector::parse(selector, ".user.", &pool_core::schema::Schemas::builtin())
            .expect("selector")
            .expr()
            .clone();
        let msg = ToPm::Subscribe {
            local: 5,
            kinds: kinds.into(),
            selector: Box::new(selector),
            options,
        };
        let out = self.feed(conn, msg);
        match out.first() {
            Some((c, FromPm::Subscribed { local: 5, sub })) if *c == conn => (*sub, out),
            other => panic!("subscribe: {other:?}"),
        }
    }

    /// Subscribes `conn` to `kinds` matching `selector` (parsed in `.user.`); nothing but
    /// the answer comes back.
    pub fn subscribe(
        &mut self,
        conn: ConnId,
        kinds: impl Into<EventKinds>,
        selector: &str,
        options: SubscribeOptions,
    ) -> u64 {
        let (sub, out) = self.subscribe_seeing(conn, kinds, selector, options);
        assert_eq!(out.len(), 1, "subscribe: {out:?}");
        sub
    }

    /// Declares `name` and seals it with `.user.step = step`.
    pub fn sealed(&mut self, conn: ConnId, name: &str, step: i64) -> CdoId {
        let cdo = self.declare(conn, name);
        let attributes = Attributes::from([(".user.step".to_string(), AttrValue::Int(step))]);
        assert_eq!(
            self.feed(conn, ToPm::Seal { cdo, attributes }),
            [(conn, done(Op::Seal, cdo))]
        );
        cdo
    }
}

/// The lease `conn` was granted with an offer's event in `out`.
pub fn lease_to(out: &[(ConnId, FromPm)], conn: ConnId) -> TransferId {
    out.iter()
        .find_map(|(to, m)| match m {
            FromPm::Event { lease: Some(l), .. } if *to == conn => Some(l.lease),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no lease for {conn} in {out:?}"))
}

/// The events in `out` sent to `conn`.
pub fn events_to(out: &[(ConnId, FromPm)], conn: ConnId) -> Vec<PoolEvent> {
    out.iter()
        .filter(|(c, _)| *c == conn)
        .filter_map(|(_, m)| match m {
            FromPm::Event { event, .. } => Some((**event).clone()),
            _ => None,
        })
        .collect()
}

pub fn offer_msg(cdo: CdoId, len: u64) -> ToPm {
    ToPm::Offer {
        cdo,
        region: region(len),
        extras: OfferExtras::default(),
    }
}

pub fn tcp(name: &str) -> FabricEndpoint {
    FabricEndpoint {
        provider: "tcp;ofi_rxm".into(),
        address: Address(name.as_bytes().to_vec()),
    }
}

/// A tcp endpoint bound to `ip` (a `sockaddr_in`, as libfabric's IP providers name them).
pub fn tcp_at(ip: [u8; 4]) -> FabricEndpoint {
    let mut sa = vec![0u8; 16];
    sa[..2].copy_from_slice(&2u16.to_ne_bytes()); // AF_INET
    sa[2..4].copy_from_slice(&4000u16.to_be_bytes());
    sa[4..8].copy_from_slice(&ip);
    FabricEndpoint {
        provider: "tcp;ofi_rxm".into(),
        address: Address(sa),
    }
}

/// xorshift64*: enough randomness for choosing operations, and the same every run (the
/// chaos tests' fixed seeds).
pub struct Rng(pub u64);

impl Rng {
    /// A generator for `seed` (any, 0 included).
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// A consumer of `host` (the global file system, no fabric) demanding `name`: its bytes.
pub fn demanded(w: &mut pool_core::sim::World, host: &str, name: &str) -> Vec<u8> {
    let c = w.join_with_gfs_only("consumer", host);
    let cdo = w.core(c).declare(name).expect("declare");
    w.timed(c, |k, now| k.demand(now, cdo, 99)).expect("demand");
    w.pump();
    assert_eq!(w.answer(c, 99), Some(&Ok(cdo)), "{name} demanded");
    assert!(
        matches!(w.apps[c].tickets.last(), Some(pool_core::proto::Source::Gfs { file, .. }) if file.path.starts_with("/gfs/")),
        "read from a file: {:?}",
        w.apps[c].tickets
    );
    w.core(c).take_arrived(cdo).expect("arrived").0
}

/// The withdraws `app` sent, with the file each asked the PM to keep.
pub fn withdraws(w: &pool_core::sim::World, app: usize) -> Vec<Option<String>> {
    w.sent(app)
        .into_iter()
        .filter_map(|m| match m {
            ToPm::Withdraw { keep, .. } => Some(keep.as_deref().map(String::from)),
            _ => None,
        })
        .collect()
}

/// Runs the scenario tests `name`s of the file (plain `fn()` tests that make their
/// worlds with `World::new`) again against a pool of three shards
/// ([`pool_core::sim::at_shards`]): each must give there the outcome it asserts with one
/// manager. Tests of one connection's messages stay with one manager. (Each test file uses
/// part of this harness: the files without scenarios leave it unused.)
#[allow(unused_macros)]
macro_rules! at_three_shards {
    ($($name:ident),* $(,)?) => {
        mod at_three_shards {
            $(
                #[test]
                fn $name() {
                    let shards = pool_core::shards::Shards::new(3).expect("three shards");
                    pool_core::sim::at_shards(shards, super::$name);
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use at_three_shards;
