//! The protocol's two ends wired together in memory (feature `sim`), for tests and IO-free
//! measurements: a [`Driver`] whose bytes are vectors and whose waiting calls, queues and
//! routes are plain tags ([`Plain`]), the JOIN of a [`ClientCore`] to a [`Manager`]
//! through the core's own handshake ([`join`]), and [`World`]: the managers of a pool (one,
//! or the shards of a sharded pool: [`World::with_shards`]) and any number of apps, each a
//! sharded client ([`Sharded`]: one core per shard it uses) whose IO the world does as a
//! driver would (memory reads, stream pieces, waiting calls), with time simulated:
//! [`World::run_until`] jumps to the earliest deadline of the managers and the cores
//! ([`Manager::poll_timeout`], [`ClientCore::poll_timeout`]), so tests assert exact
//! instants. A scenario written against a world gives the same outcome at one shard and
//! at several.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fabric_types::{Address, MemoryFile, RemoteRegion};

use crate::attr::{AttrValue, Attributes};
use crate::client::sharded::Routed;
use crate::client::{
    CallError, CallResult, ClientCore, DEFAULT_INLINE_MAX, Driver, Event, Fetch, News, Offer,
    Sharded, Transmit,
};
use crate::proto::{
    AppId, CdoId, FabricEndpoint, FromPm, InlineBytes, Join, ProcessMemory, Source, ToPm,
};
use crate::schema::Schemas;
use crate::shards::Shards;
use crate::{Clock, ConnId, Manager};

/// The workflow a [`World`]'s manager serves.
pub const WORKFLOW: &str = "wf";
/// The workflow secret of a [`World`]'s manager.
pub const SECRET: &[u8] = b"workflow secret";
/// How long a [`World`]'s cores wait for their answers.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A manager of [`WORKFLOW`] proving [`SECRET`], instance 77, whose clock's origin
/// (wall-clock time 0) is `origin`.
pub fn manager(origin: Instant) -> Manager {
    manager_of(origin, 77)
}

fn manager_of(origin: Instant, instance: u64) -> Manager {
    let clock = Clock {
        origin,
        origin_unix_ns: 0,
    };
    Manager::new(WORKFLOW, SECRET, instance, clock)
}

/// The shm endpoint of a test app named `component` (its address: the name's bytes).
pub fn shm(component: &str) -> FabricEndpoint {
    FabricEndpoint {
        provider: "shm".into(),
        address: Address(component.as_bytes().to_vec()),
    }
}

/// Where a test app named `component` says same-host consumers may copy its offers from:
/// a pid made of the name.
pub fn memory_of(component: &str) -> ProcessMemory {
    ProcessMemory {
        pid: component.bytes().map(u32::from).sum(),
        token: 7,
        token_addr: 0x1000,
    }
}

/// The memory file test offers name (passed on to same-host consumers only).
pub fn memory_file() -> MemoryFile {
    MemoryFile {
        fd: 17,
        inode: std::num::NonZeroU64::new(4242).unwrap_or(std::num::NonZeroU64::MIN),
        slab: None,
    }
}

/// The JOIN of a test app named `component` (index 0) to [`WORKFLOW`]: on host node1, with
/// its [`shm`] endpoint and its [`memory_of`], in job `maestro.job.1`; no proof yet (a
/// core's handshake makes it).
pub fn join_message(component: &str) -> Join {
    Join {
        workflow: WORKFLOW.into(),
        component: component.into(),
        index: 0,
        host: "node1".into(),
        process: 0,
        job: "maestro.job.1".into(),
        endpoint: Some(shm(component)),
        alternates: Vec::new(),
        networks: Vec::new(),
        memory: Some(memory_of(component)),
        credential: None,
        nics: crate::proto::Nics::default(),
        gfs: None,
        role: crate::proto::Role::default(),
        proof: Vec::new(),
        reclaim: None,
        member: None,
    }
}

/// The world's global file system: the file of the bytes under `key` is `/gfs/KEY`.
fn gfs_file(key: u64, bytes: &[u8]) -> crate::proto::GfsFile {
    crate::proto::GfsFile {
        path: format!("/gfs/{key}").into(),
        checksum: crate::attr::checksum(bytes),
    }
}

/// A driver of plain values: a CDO's bytes are a vector, memory lent for a transfer is a
/// vector (the bytes of an inline ticket are copied into it when they fit, as a real
/// driver does), and a waiting call, a subscription's queue and a stream's route are tags
/// the harness chooses.
#[derive(Debug)]
pub struct Plain;

impl Driver for Plain {
    type Data = Vec<u8>;
    type Waiter = u32;
    type Memory = Vec<u8>;
    type Events = u32;
    type Stream = u64;

    fn inline(bytes: InlineBytes, lent: Option<Vec<u8>>) -> Vec<u8> {
        match lent {
            Some(mut dst) if dst.len() >= bytes.len() => {
                dst[..bytes.len()].copy_from_slice(&bytes.0);
                dst.truncate(bytes.len());
                dst
            }
            _ => bytes.0.to_vec(),
        }
    }
}

/// Connects a new client core to `manager` as connection `conn` at `now` and runs the
/// handshake: the manager challenges with `nonce`, the core answers with `join` and its
/// proof of `secret`, the manager welcomes or refuses. Returns the core (its
/// [`ClientCore::joined`] says how the JOIN ended; its calls wait at most `timeout`) and
/// what the manager sent other connections meanwhile (subscribers hearing of the join).
pub fn join<T: Driver>(
    manager: &mut Manager,
    (now, conn, nonce): (Instant, ConnId, [u8; 32]),
    join: Join,
    secret: &[u8],
    timeout: Duration,
) -> (ClientCore<T>, Vec<(ConnId, FromPm)>) {
    let mut core = ClientCore::connect(now, join, secret, timeout);
    let mut others = Vec::new();
    manager.connected(now, conn, nonce);
    loop {
        let mut moved = false;
        while let Some((to, msg)) = manager.poll_output() {
            moved = true;
            if to == conn {
                core.handle(now, msg);
            } else {
                others.push((to, msg));
            }
        }
        while let Some(t) = core.poll_transmit() {
            moved = true;
            manager.handle(now, conn, t.msg);
        }
        if !moved {
            return (core, others);
        }
    }
}

/// Joins an app of `component` (no memory file, process id `conn`) on connection `conn`
/// through a client core's handshake, as the examples that time the manager do; its app
/// id, or what the manager answered instead of a welcome.
pub fn join_app(manager: &mut Manager, conn: ConnId, component: &str) -> Result<AppId, String> {
    let join = Join {
        process: conn,
        memory: None,
        ..join_message(component)
    };
    let at = (Instant::now(), conn, [conn as u8; 32]);
    let (core, _) = self::join::<Plain>(manager, at, join, SECRET, CALL_TIMEOUT);
    match core.joined() {
        Some(Ok((app, _))) => Ok(*app),
        other => Err(format!("{component} was not welcomed: {other:?}")),
    }
}

/// How long the apps of a [`World`] wait for a manager to take over
/// ([`World::restart_manager`]).
pub const RECLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// One app: its connections, its client, and what its client gave it to do.
pub struct App {
    /// Its connection to shard 0's manager (the only one, in a pool of one).
    pub conn: ConnId,
    /// Its connection to each shard's manager (0: none yet).
    pub conns: Vec<ConnId>,
    /// Its component name (what a JOIN names).
    pub component: String,
    /// Its protocol client: a core per shard it uses.
    pub core: Sharded<Plain>,
    /// Answers by waiting tag.
    pub answers: HashMap<u32, CallResult<u64>>,
    /// Subscriptions' news by queue tag.
    pub news: HashMap<u32, Vec<News>>,
    /// Messages it sent, in order (to every shard).
    pub sent: Vec<Transmit>,
    /// Stream transfers it fetches: bytes so far.
    pub streams: HashMap<u64, (Vec<u8>, u64)>,
    /// Tickets it was given (the harness carries each out at once).
    pub tickets: Vec<Source>,
    /// Lent memory handed back with tickets.
    pub lent_back: Vec<Vec<u8>>,
    /// Why stream fetches ended early.
    pub stream_errors: Vec<CallError>,
}

/// The pool's managers and its apps, with the bytes every offer made readable (by region
/// key).
pub struct World {
    /// The pool's managers, by shard (one in a pool of one).
    pub managers: Vec<Manager>,
    /// The pool's shards.
    shards: Shards,
    /// The world's time: every input carries it; [`World::run_until`] moves it on.
    pub now: Instant,
    /// The next connection's id.
    next: ConnId,
    /// The apps, in the order they joined.
    pub apps: Vec<App>,
    /// The bytes of every offer, by region key.
    memory: HashMap<u64, Vec<u8>>,
    /// Each offer's region key, by app and CDO.
    offers: HashMap<(usize, CdoId), u64>,
    /// Flip the first byte of every CDO a fetch reads (a corrupting transport).
    pub corrupt: bool,
    /// Providers ignore the PM's requests for stream pieces and to write offers to files.
    pub deaf: bool,
    /// Hold tickets instead of carrying them out.
    pub hold: bool,
    /// The tickets held back while `hold`: (app, fetch).
    pub held: Vec<(usize, Fetch<Vec<u8>>)>,
    /// A slow app: what the manager sends it waits (in order) until [`World::unstall`],
    /// as in a process that does not get the CPU; it still sends what its calls make.
    pub stalled: Option<usize>,
    /// What waits for the stalled app, by shard.
    stalled_inbox: Vec<(usize, FromPm)>,
    /// The world's file system links no file into the PM's directory, for this reason
    /// (another file system, say): see [`Event::HandOver`].
    pub unlinkable: Option<String>,
    /// Hand-overs wait here (app, CDO, directory) instead of being linked, while `Some`
    /// (links as slow as a parallel file system's): the test links them ([`World::link`]).
    pub linking: Option<Vec<(usize, CdoId, std::sync::Arc<str>)>>,
    /// Files linked into the PM's directory: the key of the bytes each names.
    linked: HashMap<String, u64>,
    /// Kept files wait here to be checked and described, by shard, while `Some` (a
    /// manager that dies before it described them); otherwise each passes at once.
    pub describing: Option<Vec<(usize, crate::KeptCheck)>>,
}

/// The built-in schemas and the `.user.step` the tests seal with.
pub fn user_schemas() -> std::sync::Arc<Schemas> {
    let mut schemas = Schemas::builtin();
    let user = "schema-name: user\nschema-version: 1\nschema-namespace: .user.\n\
                maestro-attributes:\n  - key: step\n    type: int()\n";
    schemas
        .load_str(user, "user.yaml")
        .expect("the tests' schema");
    std::sync::Arc::new(schemas)
}

impl World {
    /// A pool manager of workflow [`WORKFLOW`] (secret [`SECRET`]) and no app yet, its
    /// clock's origin now (wall-clock time 0); inside [`at_shards`], a pool of that many
    /// managers.
    pub fn new() -> World {
        World::with_shards(SHARDS.get())
    }

    /// A pool of `shards` managers (shard `s` of instance `77 + s`), as [`World::new`].
    pub fn with_shards(shards: Shards) -> World {
        let now = Instant::now();
        let managers = (0..shards.count())
            .filter_map(|s| shards.place(s))
            .map(|place| {
                let mut m = manager_of(now, 77 + place.index() as u64);
                m.set_shard(place);
                m
            })
            .collect();
        World {
            managers,
            shards,
            now,
            next: 1,
            apps: Vec::new(),
            memory: HashMap::new(),
            offers: HashMap::new(),
            corrupt: false,
            deaf: false,
            hold: false,
            held: Vec::new(),
            stalled: None,
            stalled_inbox: Vec::new(),
            unlinkable: None,
            linking: None,
            linked: HashMap::new(),
            describing: None,
        }
    }

    /// The stalled app (see [`World::stalled`]) runs again: it handles what waited for it,
    /// and the messages move.
    pub fn unstall(&mut self) {
        let Some(i) = self.stalled.take() else {
            return;
        };
        for (shard, m) in std::mem::take(&mut self.stalled_inbox) {
            self.apps[i].core.handle(self.now, shard, m);
        }
        self.pump();
    }

    /// Joins `component` (shm endpoint on node1, or none: stream transfers only) through
    /// its core's handshake.
    pub fn join(&mut self, component: &str, fabric: bool) -> usize {
        let mut join = join_message(component);
        let conn = self.next;
        self.next += 1;
        if fabric {
            join.process = conn;
        } else {
            (join.host, join.process, join.endpoint) = ("node2".into(), 9, None);
        }
        let i = self.connect(conn, join, SECRET);
        self.pump();
        assert!(
            matches!(self.apps[i].core.joined(), Some(Ok(_))),
            "{component} did not join: {:?}",
            self.apps[i].core.joined()
        );
        // The tests look at what the app sent once joined.
        self.apps[i].sent.clear();
        i
    }

    /// Joins `component` on `host` with no fabric endpoint and the world's global file
    /// system (`/gfs`) announced: it shares no network with anyone.
    pub fn join_with_gfs_only(&mut self, component: &str, host: &str) -> usize {
        let mut join = join_message(component);
        let conn = self.next;
        self.next += 1;
        (join.host, join.process, join.endpoint) = (host.into(), conn, None);
        join.gfs = Some("/gfs".into());
        let i = self.connect(conn, join, SECRET);
        self.client(i).set_gfs(crate::client::GfsUse {
            dir: true,
            by_default: false,
        });
        self.pump();
        self.apps[i].sent.clear();
        i
    }

    /// Connects an app that joins with `join`, proving `secret`, as connection `conn` to
    /// shard 0 (through its client's handshake, as [`join`] runs it); it connects to
    /// another shard when it first uses it.
    pub fn connect(&mut self, conn: ConnId, join: Join, secret: &[u8]) -> usize {
        let component = join.component.clone();
        let mut core = Sharded::connect(self.now, join, secret, CALL_TIMEOUT, self.shards);
        core.set_schemas(user_schemas());
        let mut conns = vec![0; self.shards.count()];
        conns[0] = conn;
        // Shard 0's connection is this one.
        let _ = core.poll_connect();
        self.managers[0].connected(self.now, conn, [conn as u8; 32]);
        self.apps.push(App {
            conn,
            conns,
            component,
            core,
            answers: HashMap::new(),
            news: HashMap::new(),
            sent: Vec::new(),
            streams: HashMap::new(),
            tickets: Vec::new(),
            lent_back: Vec::new(),
            stream_errors: Vec::new(),
        });
        let i = self.apps.len() - 1;
        self.handshake(i);
        i
    }

    /// Moves the messages of app `i`'s handshakes (and what the managers tell others
    /// meanwhile) until they are quiet, as [`join`] does for one core.
    fn handshake(&mut self, i: usize) {
        loop {
            let out = self.drain();
            let moved = !out.is_empty();
            self.deliver(out);
            let mut sent = false;
            while let Some((shard, t)) = self.apps[i].core.poll_transmit() {
                sent = true;
                let conn = self.apps[i].conns[shard];
                self.managers[shard].handle(self.now, conn, t.msg);
            }
            if !moved && !sent {
                return;
            }
        }
    }

    /// The pool manager dies and another takes over, in its grace period for `grace`
    /// ([`Manager::reclaiming`]): every app's core loses its connection
    /// ([`ClientCore::lost`], waiting [`RECLAIM_TIMEOUT`] for the next manager) until
    /// [`World::reclaim`]. In a pool of several shards, every shard's manager.
    pub fn restart_manager(&mut self, grace: Duration) {
        for shard in 0..self.managers.len() {
            self.restart_shard(shard, grace);
        }
    }

    /// The manager of shard `shard` dies and another takes over, as
    /// [`World::restart_manager`]; the other shards serve on.
    pub fn restart_shard(&mut self, shard: usize, grace: Duration) {
        let m = &mut self.managers[shard];
        // Each manager its own instance, as a random one would be.
        let instance = m.instance().wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let place = m.shard();
        *m = manager_of(self.now, instance);
        m.set_shard(place);
        m.reclaiming(self.now + grace);
        let until = self.now + RECLAIM_TIMEOUT;
        for app in &mut self.apps {
            app.core.lost(self.now, shard, until);
            app.conns[shard] = 0;
            if shard == 0 {
                app.conn = 0;
            }
        }
    }

    /// App `app` joins the new manager on a new connection ([`ClientCore::rejoin`]),
    /// reclaiming its old app id, and replays what it holds ([`ClientCore::replay`]).
    /// Returns the app id the manager gave, or why the JOIN failed (the core stays lost).
    pub fn reclaim(&mut self, app: usize) -> CallResult<AppId> {
        // The cores that lost their manager rejoin on the connections the world opens
        // (with those of cores made since, which join as they are).
        let lost: Vec<usize> = (self.apps[app].core.cores())
            .filter(|(_, c)| c.is_lost())
            .map(|(s, _)| s)
            .collect();
        for shard in lost {
            let now = self.now;
            self.apps[app].core.rejoin(now, shard, SECRET);
            self.pump();
        }
        match self.apps[app].core.joined() {
            Some(Ok((id, _))) => Ok(*id),
            Some(Err(e)) => Err(e.clone()),
            None => Err(CallError::Timeout(crate::proto::Op::Join)),
        }
    }

    /// Hands shard `shard`'s manager `msg` from `conn` at the world's time; everything
    /// the managers send.
    fn hand_manager(&mut self, shard: usize, conn: ConnId, msg: ToPm) -> Vec<(ConnId, FromPm)> {
        self.managers[shard].handle(self.now, conn, msg);
        self.drain()
    }

    /// Everything the managers want to send, their deferred work done and their kept
    /// files described (as a driver does it, unless [`World::describing`] holds them),
    /// with the shard of each (connection ids are the world's, unique).
    fn drain(&mut self) -> Vec<(ConnId, FromPm)> {
        let mut out = Vec::new();
        for (shard, m) in self.managers.iter_mut().enumerate() {
            loop {
                while m.has_work() {
                    m.work(self.now);
                }
                let checks = m.take_kept_checks();
                match &mut self.describing {
                    _ if checks.is_empty() => break,
                    Some(held) => held.extend(checks.into_iter().map(|c| (shard, c))),
                    None => {
                        for c in checks {
                            m.kept_checked(self.now, c.id, Ok(()));
                        }
                    }
                }
            }
            out.extend(std::iter::from_fn(|| m.poll_output()));
        }
        out
    }

    /// The pool's shard 0 manager (the only one, in a pool of one).
    pub fn manager(&mut self) -> &mut Manager {
        &mut self.managers[0]
    }

    /// The pool as an observer asking `query` sees it: every manager's answer, merged
    /// ([`crate::view::View::merge`]).
    pub fn view(&mut self, query: crate::view::Query) -> crate::view::View {
        let now = self.now;
        let parts = (self.managers.iter_mut())
            .map(|m| m.view(now, query.clone()))
            .collect();
        crate::view::View::merge(&query, parts).expect("every manager answers the query")
    }

    /// Whether any manager of the pool is in its grace period.
    pub fn in_grace(&self) -> bool {
        self.managers.iter().any(Manager::in_grace)
    }

    /// The live CDOs of every manager of the pool.
    pub fn cdo_count(&self) -> usize {
        self.managers.iter().map(Manager::cdo_count).sum()
    }

    /// App `app` declares `name` at the world's time (see [`Sharded::declare`]).
    ///
    /// # Errors
    /// As [`Sharded::declare`].
    pub fn declare(&mut self, app: usize, name: &str) -> CallResult<CdoId> {
        let now = self.now;
        self.apps[app].core.declare(now, name)
    }

    /// App `app`'s client: its calls go to the shards they concern. Unless the app is
    /// [`World::stalled`], its reader is [`World::caught_up`] first, as a driver's reader
    /// that finds its connections empty.
    pub fn client(&mut self, app: usize) -> &mut Sharded<Plain> {
        if self.stalled != Some(app) {
            self.caught_up(app);
        }
        &mut self.apps[app].core
    }

    /// App `app`'s reader caught up by now: it handled all the managers sent it
    /// ([`Sharded::drained`]). For a stalled app, this models a message held up on its way
    /// (which its client cannot tell from one not sent yet).
    pub fn caught_up(&mut self, app: usize) {
        let a = &mut self.apps[app];
        for (shard, &conn) in a.conns.iter().enumerate() {
            if conn != 0 {
                a.core.drained(shard, self.now);
            }
        }
    }

    /// App `app`'s core at shard 0 (its only one, in a pool of one): its connection's
    /// state machine, for what a test looks at in it.
    pub fn core(&mut self, app: usize) -> &mut ClientCore<Routed<Plain>> {
        self.apps[app]
            .core
            .core(0)
            .expect("every app has shard 0's core")
    }

    /// Runs `step` on app `app`'s client at the world's time.
    pub fn timed<R>(
        &mut self,
        app: usize,
        step: impl FnOnce(&mut Sharded<Plain>, Instant) -> R,
    ) -> R {
        let now = self.now;
        step(self.client(app), now)
    }

    /// The earliest deadline of the managers and of every core.
    pub fn next_deadline(&self) -> Option<Instant> {
        let cores = self.apps.iter().filter_map(|a| a.core.poll_timeout());
        let managers = self.managers.iter().filter_map(Manager::poll_timeout);
        cores.chain(managers).min()
    }

    /// Runs the world until `until`: time jumps to each deadline on the way (the PM's and
    /// the cores'), where both sides handle their timeouts and the messages move; the
    /// world's time ends at `until`.
    pub fn run_until(&mut self, until: Instant) {
        self.pump();
        while let Some(at) = self.next_deadline().filter(|&at| at <= until) {
            self.now = self.now.max(at);
            let now = self.now;
            for m in &mut self.managers {
                m.handle_timeout(now);
            }
            let out = self.drain();
            self.deliver(out);
            for app in &mut self.apps {
                app.core.handle_timeout(now);
            }
            self.pump();
        }
        self.now = self.now.max(until);
    }

    /// Moves messages both ways and carries out what the cores ask until all is quiet.
    pub fn pump(&mut self) {
        loop {
            let mut moved = false;
            for i in 0..self.apps.len() {
                while let Some(shard) = self.apps[i].core.poll_connect() {
                    // A shard the app needs now: its connection, JOIN first.
                    let conn = self.next;
                    self.next += 1;
                    self.apps[i].conns[shard] = conn;
                    if shard == 0 {
                        self.apps[i].conn = conn;
                    }
                    self.managers[shard].connected(self.now, conn, [conn as u8; 32]);
                    let out = self.drain();
                    self.deliver(out);
                }
                while let Some((shard, t)) = self.apps[i].core.poll_transmit() {
                    moved = true;
                    let conn = self.apps[i].conns[shard];
                    let out = self.hand_manager(shard, conn, t.msg.clone());
                    self.apps[i].sent.push(t);
                    self.deliver(out);
                }
                while let Some((shard, e)) = self.apps[i].core.poll_event() {
                    moved = true;
                    self.carry_out(i, shard, e);
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// The kept files [`World::describing`] held are checked and described, each with
    /// `outcome`, and the managers' answers delivered; files kept later pass at once.
    pub fn describe(&mut self, outcome: Result<(), &str>) {
        for (shard, c) in self.describing.take().unwrap_or_default() {
            if let Some(m) = self.managers.get_mut(shard) {
                m.kept_checked(self.now, c.id, outcome);
            }
        }
        let out = self.drain();
        self.deliver(out);
        self.pump();
    }

    /// The world's file system links app `i`'s file of `cdo` into the PM's directory `dir`
    /// under the CDO's id, unless it links none, and says so to the app.
    pub fn link(&mut self, i: usize, cdo: CdoId, dir: &str) {
        let linked = match &self.unlinkable {
            Some(why) => Err(why.clone()),
            None => {
                let path = format!("{dir}/{cdo}");
                self.linked.insert(path.clone(), self.offers[&(i, cdo)]);
                Ok(Some(path.into()))
            }
        };
        self.client(i).handed_over(cdo, linked);
    }

    /// Hands each app the messages the manager sent it.
    fn deliver(&mut self, out: Vec<(ConnId, FromPm)>) {
        for (conn, m) in out {
            let Some((i, shard)) = self.apps.iter().enumerate().find_map(|(i, a)| {
                let shard = a.conns.iter().position(|&c| c == conn && c != 0)?;
                Some((i, shard))
            }) else {
                continue;
            };
            if self.stalled == Some(i) {
                self.stalled_inbox.push((shard, m));
            } else {
                self.apps[i].core.handle(self.now, shard, m);
            }
        }
    }

    /// Does what a driver does with an event of app `i`'s core of shard `shard`.
    fn carry_out(&mut self, i: usize, shard: usize, e: Event<Plain>) {
        match e {
            Event::Answer { waiter, result } => {
                let old = self.apps[i].answers.insert(waiter, result);
                assert!(old.is_none(), "waiter {waiter} answered twice");
            }
            Event::Fetch(f) if self.hold => self.held.push((i, f)),
            Event::Fetch(f) => self.fetch(i, f),
            Event::Serve { .. } | Event::Spill { .. } if self.deaf => {}
            Event::Serve {
                transfer,
                cdo,
                offset,
                len,
            } => {
                let bytes = &self.memory[&self.offers[&(i, cdo)]];
                let (o, n) = (offset as usize, len as usize);
                let data = bytes[o..o + n].to_vec();
                (self.client(i).served((shard, transfer), offset, data)).expect("chunk");
            }
            Event::HandOver { cdo, dir } => match &mut self.linking {
                Some(waiting) => waiting.push((i, cdo, dir)),
                None => self.link(i, cdo, &dir),
            },
            // The world's global file system has every offer's bytes as `/gfs/KEY`.
            Event::Spill { cdo } => {
                let key = self.offers[&(i, cdo)];
                let file = gfs_file(key, &self.memory[&key]);
                self.client(i).spilled(cdo, Ok(file));
            }
            Event::Piece { stream, piece } => {
                let (offset, data) = match piece {
                    Ok(piece) => piece,
                    Err(e) => {
                        self.apps[i].streams.remove(&stream);
                        self.apps[i].stream_errors.push(e.clone());
                        let (shard, transfer) = split(stream);
                        self.client(i).fetched(shard, transfer, Err(e.to_string()));
                        return;
                    }
                };
                let (buf, len) = self.apps[i].streams.get_mut(&stream).expect("routed");
                buf[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
                *len -= data.len() as u64;
                if *len == 0 {
                    let (buf, _) = self.apps[i].streams.remove(&stream).expect("routed");
                    let (shard, transfer) = split(stream);
                    self.client(i).fetched(shard, transfer, Ok((buf, None)));
                }
            }
            Event::Subscription { events, news } => {
                self.apps[i].news.entry(events).or_default().push(news);
            }
        }
    }

    /// Carries out a ticket as a driver would: reads the region, takes the inline bytes,
    /// or fetches a stream through the core, piece by piece.
    fn fetch(&mut self, i: usize, f: Fetch<Vec<u8>>) {
        self.apps[i].tickets.push(f.source.clone());
        if let Some(lent) = f.lent {
            self.apps[i].lent_back.push(lent);
        }
        let mut bytes = match &f.source {
            Source::Rma { region, .. } => self.memory[&region.key].clone(),
            Source::Inline { bytes } => bytes.0.to_vec(),
            Source::Stream { len } => {
                let buf = vec![0; *len as usize];
                // A stream's route names the shard and its transfer there.
                let route = joined(f.shard, f.transfer);
                self.apps[i].streams.insert(route, (buf, *len));
                let (at, len) = ((f.shard, f.transfer), *len);
                self.timed(i, |k, now| k.stream(now, at, len, route))
                    .expect("stream");
                return;
            }
            Source::SameProcess { .. } => panic!("no app shares a process here"),
            // The world's "global file system": a file's name is its bytes' key, or it
            // was linked into the PM's directory.
            Source::Gfs { file, .. } => {
                let key = (self.linked.get(&*file.path).copied())
                    .or_else(|| file.path.strip_prefix("/gfs/")?.parse().ok());
                let bytes = key
                    .and_then(|k| self.memory.get(&k))
                    .expect("a file offered");
                assert_eq!(
                    file.checksum,
                    crate::attr::checksum(bytes),
                    "the file's checksum"
                );
                bytes.clone()
            }
        };
        if self.corrupt && !bytes.is_empty() {
            bytes[0] ^= 0xff;
        }
        self.client(i)
            .fetched(f.shard, f.transfer, Ok((bytes, None)));
    }

    /// Declares `name` at `app`, seals it with `.user.step`, offers `bytes` (inline when
    /// `inline`); the CDO and the tag its offer's answer comes under.
    pub fn offer(&mut self, app: usize, name: &str, bytes: &[u8], inline: bool) -> (CdoId, u32) {
        let mut attributes = Attributes::new();
        attributes.insert(".user.step".into(), AttrValue::Int(2));
        self.offer_sealed(app, name, (bytes, inline), attributes)
    }

    /// As [`World::offer`], sealed with `attributes` (and the bytes' checksum).
    pub fn offer_sealed(
        &mut self,
        app: usize,
        name: &str,
        (bytes, inline): (&[u8], bool),
        attributes: Attributes,
    ) -> (CdoId, u32) {
        self.offer_as(app, name, (bytes, inline, false), attributes)
    }

    /// As [`World::offer`], the bytes written to a file of the world's global file system
    /// (`/gfs/KEY`) that the offer names ([`Source::Gfs`]).
    pub fn offer_to_gfs(&mut self, app: usize, name: &str, bytes: &[u8]) -> (CdoId, u32) {
        self.offer_as(app, name, (bytes, false, true), Attributes::new())
    }

    fn offer_as(
        &mut self,
        app: usize,
        name: &str,
        (bytes, inline, gfs): (&[u8], bool, bool),
        attributes: Attributes,
    ) -> (CdoId, u32) {
        let cdo = self.declare(app, name).expect("declare");
        let key = self.memory.len() as u64 + 100;
        self.memory.insert(key, bytes.to_vec());
        self.offers.insert((app, cdo), key);
        let region = RemoteRegion {
            addr: 0,
            key,
            len: bytes.len() as u64,
        };
        let tag = 1000 + cdo as u32;
        let core = self.client(app);
        core.set_inline_max(if inline { DEFAULT_INLINE_MAX } else { 0 });
        let offer = Offer {
            cdo,
            bytes,
            region,
            registered: true,
            alternates: Vec::new(),
            file: Some(memory_file()),
            seal: Some(attributes),
            gfs: gfs.then(|| gfs_file(key, bytes)),
        };
        self.timed(app, |k, now| k.offer(now, offer, tag))
            .expect("offer");
        (cdo, tag)
    }

    /// The answer filed under `tag` at app `app`, once there.
    pub fn answer(&self, app: usize, tag: u32) -> Option<&CallResult<u64>> {
        self.apps[app].answers.get(&tag)
    }

    /// The messages `app` sent, without the deferred flag.
    pub fn sent(&self, app: usize) -> Vec<&ToPm> {
        self.apps[app].sent.iter().map(|t| &t.msg).collect()
    }
}

thread_local! {
    /// The shards of the pools [`World::new`] makes on this thread ([`at_shards`]).
    static SHARDS: std::cell::Cell<Shards> = std::cell::Cell::new(Shards::default());
}

/// Runs `scenario` with every [`World::new`] of this thread a pool of `shards` managers:
/// a scenario test written for one manager runs unchanged against a sharded pool, and
/// must give the outcome it asserts there too.
pub fn at_shards<R>(shards: Shards, scenario: impl FnOnce() -> R) -> R {
    struct Restore(Shards);
    impl Drop for Restore {
        fn drop(&mut self) {
            SHARDS.set(self.0);
        }
    }
    let _restore = Restore(SHARDS.replace(shards));
    scenario()
}

/// A stream's route tag: the shard in the top 16 bits, its transfer below.
fn joined(shard: usize, transfer: u64) -> u64 {
    ((shard as u64) << 48) | transfer
}

/// The shard and transfer of a stream's route tag.
fn split(route: u64) -> (usize, u64) {
    ((route >> 48) as usize, route & ((1 << 48) - 1))
}

impl Default for World {
    fn default() -> World {
        World::new()
    }
}
