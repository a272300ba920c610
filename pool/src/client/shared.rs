//! The driver's side of a client: the state its handle and tasks share (`Shared`), one
//! step of the protocol's sans-IO core under its lock and what comes of it
//! (`Shared::with_core`: messages to each shard's outbox, connections opened, events
//! carried out), the calls' deadlines (`Shared::timer`), and how a call waits for its
//! answer (`ask`, `answer`).

use pool_core::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fabric::{Buffer, Endpoint};
use pool_core::client::{CallError, CallId, CallKey, Driver, Event, News, Route, Sharded};
use tokio::sync::{mpsc, oneshot};

use super::subscription::EventQueue;
use super::{CdoData, ClientError, Result, data, driver, gfs, outbox, reclaim, transport};
use crate::bootstrap::PmInfo;
use crate::proto::{self, AppId, ToPm};
use crate::ring::inlet::{Inlet, Reading};
use crate::schema::Schemas;

/// What this driver gives the protocol's core ([`ClientCore`](pool_core::client::ClientCore)) to keep.
pub(crate) struct Io;

impl Driver for Io {
    type Data = CdoData;
    type Waiter = oneshot::Sender<std::result::Result<u64, CallError>>;
    type Memory = Buffer;
    type Events = Arc<EventQueue>;
    type Stream = mpsc::UnboundedSender<driver::Piece>;

    fn inline(bytes: proto::InlineBytes, lent: Option<Buffer>) -> CdoData {
        transport::inline::land(bytes, lent)
    }
}

/// The client's protocol state: a core per shard of the pool the app uses.
pub(crate) type Core = Sharded<Io>;

thread_local! {
    /// The events of one step of the core, for [`Shared::with_core`] to carry out: a list
    /// each thread keeps, since a reader's step over a burst of hundreds of offer events
    /// would grow a new one by doubling, step after step. Taken out while in use (an event
    /// carried out may step the core again: that step gets a list of its own).
    static STEP_EVENTS: std::cell::Cell<Vec<(usize, Event<Io>)>> =
        const { std::cell::Cell::new(Vec::new()) };
}

/// Most events' room a thread keeps in [`STEP_EVENTS`] between steps.
const STEP_EVENTS_KEPT: usize = 256;

/// State shared by the client handle and its driver tasks.
pub(crate) struct Shared {
    pub(crate) app: AppId,
    /// The instance (generation) of shard 0's manager (of the one manager in a pool of
    /// one): a manager that takes over has another (see `reclaim`). This app's offers in
    /// the process's table are filed under it (`data`), whichever shard holds them.
    pub(super) pool: AtomicU64,
    /// How to join a manager that takes over, where the client rides out the loss of its
    /// PM ([`JoinOptions::reclaim`]).
    pub(crate) rejoin: Option<reclaim::Rejoin>,
    /// The PM info of the manager joined now (another after a takeover).
    pub(super) info: Mutex<PmInfo>,
    /// The protocol's state: calls waiting, CDOs, transfers, subscriptions.
    pub(super) core: Mutex<Core>,
    /// The calls' deadlines: the timer task sleeps until the core's earliest
    /// ([`Shared::timer`]).
    pub(crate) deadlines: Deadlines,
    /// Copies of same-host offers, shared by a helper thread and waiting callers
    /// ([`transport::crew`]).
    pub(crate) crew: Arc<transport::crew::Crew>,
    /// The sending side of each shard's control connection (shard 0's from the join;
    /// another's holds what its core sends until the connection is open).
    pub(crate) outs: Vec<Arc<outbox::Outbox>>,
    /// The client's tasks (its timer, link watch and each shard's connection, those
    /// opened after the join too), aborted when the client is dropped.
    pub(crate) tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// The runtime the client's tasks run on (a blocking client's calls step the core on
    /// the application's threads, outside it).
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) endpoint: Option<Endpoint>,
    /// Endpoints on the app's other networks (`via` 1, 2, ... in tickets).
    pub(crate) alternates: Vec<Endpoint>,
    /// Providers' endpoints already in an endpoint's address vector, by `via` and address.
    pub(crate) peers: Mutex<HashMap<(u8, fabric::Address), fabric::Peer>>,
    pub(crate) timeout: Duration,
    /// How the client reaches a manager (the one that takes over, another shard's).
    pub(crate) route: super::driver::Route,
    /// The schemas selectors are parsed with (the core checks seals against the same).
    pub(crate) schemas: Arc<Schemas>,
    /// Registered landing buffers of RMA reads, reused once the application drops the
    /// data (at most [`LANDING_POOL_BYTES`] kept).
    pub(crate) landing: Arc<fabric::RegionPool>,
    /// Whether this client copies same-host offers from their providers' memory (cleared
    /// when the kernel refuses it).
    pub(crate) cross_memory: std::sync::atomic::AtomicBool,
    /// Providers' processes whose token checked out (true) or not (false), by announcement.
    pub(crate) verified: Mutex<HashMap<proto::ProcessMemory, bool>>,
    /// Views of same-host providers' slabs, which copies of offers in them read (at most
    /// [`super::VIEWS_BYTES`] of address space; swept by `transport::host::sweep_views`).
    pub(crate) views: fabric::cma::Views,
    /// The global file system, where the app uses one.
    pub(crate) gfs: Option<Arc<gfs::Gfs>>,
    /// The reading ends of the shards' rings from their managers while their reader
    /// tasks run: the threads waiting in `Client::block_on` read them too
    /// ([`Shared::read_rings`]).
    pub(crate) inlets: Mutex<Inlets>,
    /// When each shard's connection was last read down to what was there
    /// ([`super::drains`]).
    pub(crate) drains: super::drains::Drains,
    /// The sockets of shards whose reader tasks run ([`Shared::watch`]).
    pub(crate) watches: Mutex<super::drains::Watches>,
    /// RMA reads of at most [`super::transport::rma::SHORT_READ`] posted by
    /// [`super::transport::rma::read_then`] and not reported yet: a thread waiting in
    /// `Client::block_on` polls on through them.
    pub(crate) short_reads: std::sync::atomic::AtomicUsize,
}

/// The rings' reading ends shared now, by shard (mostly one: no allocation for it).
pub(crate) type Inlets = smallvec::SmallVec<[(usize, Arc<Inlet>); 1]>;

/// A ring's reading end shared by its reader task ([`Shared::share_inlet`]), until dropped.
pub(crate) struct SharedInlet<'a> {
    shared: &'a Shared,
    inlet: Arc<Inlet>,
}

impl Drop for SharedInlet<'_> {
    fn drop(&mut self) {
        let mut inlets = self
            .shared
            .inlets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        inlets.retain(|(_, i)| !Arc::ptr_eq(i, &self.inlet));
    }
}

/// A socket watched while its reader runs ([`Shared::watch`]), until dropped.
pub(crate) struct Watched<'a> {
    shared: &'a Shared,
    watch: Arc<super::drains::Watch>,
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        let mut watches = self
            .shared
            .watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        watches.retain(|(_, w)| !Arc::ptr_eq(w, &self.watch));
    }
}

impl Shared {
    /// Watches shard `shard`'s socket while the returned guard lives (its reader's loop:
    /// the descriptor must stay open meanwhile).
    pub(crate) fn watch(&self, shard: usize, watch: &Arc<super::drains::Watch>) -> Watched<'_> {
        let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        watches.push((shard, Arc::clone(watch)));
        Watched {
            shared: self,
            watch: Arc::clone(watch),
        }
    }

    /// [`Shared::with_core`] for a step that may use leases of memory (a demand, a batch
    /// fetch): the connections are caught up first ([`Shared::catch_up`], outside the
    /// core's lock, which handing messages to the core takes), and the core told their
    /// last drains ([`super::drains::Drains::tell`]).
    ///
    /// # Errors
    /// As [`Shared::with_core`].
    pub(crate) fn with_core_current<R>(
        self: &Arc<Self>,
        now: Instant,
        f: impl FnOnce(&mut Core) -> std::result::Result<R, CallError>,
    ) -> Result<R> {
        self.catch_up(now);
        self.with_core(|c| {
            self.drains.tell(c);
            f(c)
        })
    }

    /// Before a call that may use a lease of memory, for each connection last drained
    /// [`super::drains::CATCH_UP_AFTER`] ago or earlier: reads on this thread what a ring holds (unless
    /// another thread is reading it) and hands it to the core; notes a socket drained now
    /// when it is ([`super::drains::Watch`]). A quiet connection whose reader sleeps thus counts as
    /// drained now.
    fn catch_up(self: &Arc<Self>, now: Instant) {
        let behind: Inlets = self
            .inlets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(shard, _)| self.drains.behind(*shard, now))
            .cloned()
            .collect();
        for (shard, inlet) in behind {
            let Some(mut taken) = inlet.try_lock() else {
                continue;
            };
            // The reader task meets the same error and ends the connection.
            if driver::take_and_deliver(&inlet, &mut taken, self, shard).is_err() {
                inlet.wake_task();
            }
        }
        let watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        for (shard, watch) in watches.iter() {
            if self.drains.behind(*shard, now) {
                let at = Instant::now();
                if watch.drained() {
                    self.drains.note(*shard, at);
                }
            }
        }
    }
}

/// The rings a waiting thread reads ([`Shared::read_rings`]): their managers write
/// without ringing the reader tasks until this is dropped.
pub(crate) struct RingsRead(smallvec::SmallVec<[(usize, Reading); 1]>);

impl RingsRead {
    /// Takes what each ring holds, unless another thread is taking it, and hands it to
    /// the core: whether anything came.
    pub(crate) fn progress(&self, shared: &Arc<Shared>) -> bool {
        let mut came = false;
        for (shard, reading) in &self.0 {
            let inlet = reading.inlet();
            let Some(mut taken) = inlet.try_lock() else {
                continue;
            };
            match driver::take_and_deliver(inlet, &mut taken, shared, *shard) {
                Ok(n) => came |= n > 0,
                // The reader task meets the same and ends the connection.
                Err(_) => inlet.wake_task(),
            }
        }
        came
    }
}

/// What the timer task sleeps until, and how a call with an earlier deadline wakes it.
pub(crate) struct Deadlines {
    /// The instant `armed` counts from.
    origin: Instant,
    /// Nanoseconds after `origin` the timer sleeps until (`u64::MAX`: none); written
    /// under the core's lock.
    armed: AtomicU64,
    wake: tokio::sync::Notify,
}

impl Deadlines {
    pub(crate) fn new() -> Deadlines {
        Deadlines {
            origin: Instant::now(),
            armed: AtomicU64::new(u64::MAX),
            wake: tokio::sync::Notify::new(),
        }
    }

    fn nanos(&self, at: Option<Instant>) -> u64 {
        at.map_or(u64::MAX, |t| {
            u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
        })
    }

    /// The timer sleeps until `at` now (called under the core's lock).
    fn armed(&self, at: Option<Instant>) {
        self.armed.store(self.nanos(at), Ordering::Relaxed);
    }

    /// Wakes the timer when `core`'s earliest deadline comes before what it sleeps until
    /// (called under the core's lock, after each step).
    fn rearm(&self, core: &Core) {
        let next = core.poll_timeout();
        let at = self.nanos(next);
        if at < self.armed.load(Ordering::Relaxed) {
            self.armed.store(at, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }
}

impl Shared {
    /// Shares `inlet`, the reading end of shard `shard`'s ring, with the threads that
    /// wait for answers, until the returned guard is dropped.
    pub(crate) fn share_inlet(&self, shard: usize, inlet: &Arc<Inlet>) -> SharedInlet<'_> {
        let mut inlets = self.inlets.lock().unwrap_or_else(PoisonError::into_inner);
        inlets.push((shard, Arc::clone(inlet)));
        SharedInlet {
            shared: self,
            inlet: Arc::clone(inlet),
        }
    }

    /// The rings a thread waiting for an answer reads meanwhile (see
    /// [`crate::ring::inlet`]).
    pub(crate) fn read_rings(&self) -> RingsRead {
        let inlets = self.inlets.lock().unwrap_or_else(PoisonError::into_inner);
        RingsRead(inlets.iter().map(|(s, i)| (*s, i.reading())).collect())
    }

    /// The protocol's state, for what queues no message and produces no event.
    pub(crate) fn core(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the protocol's state, writes the messages it queued (under the lock, so
    /// they leave in the order the core queued them and no answer can overtake the call
    /// that waits for it), then does what it produced (answers, tickets, stream pieces,
    /// subscriptions' news) after the lock is released.
    ///
    /// # Errors
    /// `f`'s error; [`CallError::Closed`](crate::CallError::Closed) when a message (other than a deferred notice)
    /// could not be written: the connection is gone.
    pub(crate) fn with_core<R>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Core) -> std::result::Result<R, CallError>,
    ) -> Result<R> {
        let mut core = self.core();
        let r = f(&mut core);
        self.deadlines.rearm(&core);
        let mut sent = Ok(());
        // What the step queued for one shard goes in one write (a burst's reports, say).
        let mut now: smallvec::SmallVec<[ToPm; 2]> = smallvec::SmallVec::new();
        let mut to = 0;
        while let Some((shard, t)) = core.poll_transmit() {
            if shard != to {
                self.send_now(to, &mut now, &mut sent);
                to = shard;
            }
            if !t.deferred {
                now.push(t.msg);
                continue;
            }
            self.send_now(to, &mut now, &mut sent);
            // Nobody waits for it: a PM gone meanwhile changes nothing.
            if let Err(e) = self.outs[shard].send_deferred(t.msg) {
                tracing::debug!("notice not told to the pool manager: {e}");
            }
        }
        self.send_now(to, &mut now, &mut sent);
        let opening: smallvec::SmallVec<[usize; 1]> =
            std::iter::from_fn(|| core.poll_connect()).collect();
        let mut events = STEP_EVENTS.take();
        events.extend(std::iter::from_fn(|| core.poll_event()));
        drop(core);
        for shard in opening {
            self.open(shard);
        }
        for (shard, e) in events.drain(..) {
            self.carry_out(shard, e);
        }
        events.shrink_to(STEP_EVENTS_KEPT);
        STEP_EVENTS.set(events);
        let r = r?;
        if self.rejoin.is_some() {
            // A connection that failed is rejoined and what the core holds replayed: the
            // call waits for the manager that takes over.
            return Ok(r);
        }
        sent.map(|()| r)
    }

    /// Sends `msgs` to shard `shard`'s manager (emptying it), noting a failure in `sent`.
    fn send_now(
        &self,
        shard: usize,
        msgs: &mut smallvec::SmallVec<[ToPm; 2]>,
        sent: &mut Result<()>,
    ) {
        if let Err(e) = self.outs[shard].send_all(msgs) {
            *sent = Err(e);
        }
        msgs.clear();
    }

    /// Opens the connection to shard `shard` the core asked for: a task connects to the
    /// shard's manager, then reads and writes it (`reclaim::spawn`). Nothing for a shard
    /// whose connection is open or lost already (its task reconnects itself).
    fn open(self: &Arc<Self>, shard: usize) {
        if !self.outs[shard].never_opened() {
            return;
        }
        let _in = self.runtime.enter();
        let task = reclaim::spawn(Arc::clone(self), shard, None);
        self.keep(&task);
    }

    /// Aborts `task` with the client.
    pub(crate) fn keep(&self, task: &tokio::task::JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task.abort_handle());
    }

    /// The app rejoined a manager that took over: its offers in the process's table are
    /// filed under that manager's instance.
    pub(crate) fn rejoined(&self, new: u64) {
        let old = self.pool.swap(new, Ordering::Relaxed);
        data::rekey_app(old, new, self.app);
    }

    /// The PM info of the manager joined now.
    pub(crate) fn pm_info(&self) -> PmInfo {
        self.info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The client joined the manager of `info`, which took over.
    pub(crate) fn set_pm_info(&self, info: PmInfo) {
        *self.info.lock().unwrap_or_else(PoisonError::into_inner) = info;
    }

    /// The instance of the PM joined (the key of this app's offers in the process's
    /// table, with its app id and the CDO: see `data`).
    pub(crate) fn pool(&self) -> u64 {
        self.pool.load(Ordering::Relaxed)
    }

    /// Does what the core of shard `shard` asks.
    fn carry_out(self: &Arc<Self>, shard: usize, e: Event<Io>) {
        match e {
            Event::Answer { waiter, result } => {
                // One that gives up right now just misses its answer.
                let _ = waiter.send(result);
            }
            Event::Fetch(fetch) => transport::burst::start(self, fetch),
            Event::Serve {
                transfer,
                cdo,
                offset,
                len,
            } => transport::stream::serve(self, shard, transfer, cdo, offset, len),
            Event::Spill { cdo } => transport::gfs::spill(self, cdo),
            Event::HandOver { cdo, dir } => transport::gfs::hand_over(self, cdo, dir),
            Event::Piece { stream, piece } => {
                let _ = stream.send(piece);
            }
            Event::Subscription { events, news } => match news {
                News::Event(e) => events.push(e),
                News::Late(serial) => events.late(serial),
                News::Ended(why) => events.end(why),
                News::Closed => events.close(),
            },
        }
    }

    /// Keeps the calls' deadlines: sleeps until the core's earliest, then answers the calls
    /// whose deadline passed ([`ClientCore::handle_timeout`](pool_core::client::ClientCore::handle_timeout)). Runs until the client's
    /// tasks are aborted.
    pub(crate) async fn timer(self: Arc<Self>) {
        loop {
            let next = {
                let core = self.core();
                let next = core.poll_timeout();
                self.deadlines.armed(next);
                next
            };
            let Some(at) = next else {
                self.deadlines.wake.notified().await;
                continue;
            };
            tokio::select! {
                () = tokio::time::sleep_until(at.into()) => {
                    let _ = self.with_core(|c| {
                        c.handle_timeout(Instant::now());
                        Ok(())
                    });
                }
                () = self.deadlines.wake.notified() => {}
            }
        }
    }

    /// Providers' endpoints already in an endpoint's address vector.
    pub(crate) fn peers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(u8, fabric::Address), fabric::Peer>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The waiter of one call.
pub(super) type Waiter = <Io as Driver>::Waiter;

/// Runs `step`, a call the core files under `key` (its id a CDO's) with the time and the
/// waiter it is given, and waits for the answer (at most the client's timeout: the
/// core's deadline).
pub(super) async fn ask(
    shared: &Arc<Shared>,
    key: CallKey,
    step: impl FnOnce(&mut Core, Instant, Waiter) -> std::result::Result<CallId, CallError>,
) -> Result<u64> {
    let (tx, rx) = oneshot::channel();
    let now = Instant::now();
    let call = shared.with_core(|c| Ok((c.shard_of(Route::Cdo(key.1)), step(c, now, tx)?)))?;
    answer(shared, key, Some(call), rx).await
}

/// Waits for the answer `rx` to call `call` (of a shard's core) filed under `key` (the
/// core answers [`CallError::Timeout`] at the call's deadline); a call whose future is
/// dropped is given up in its core, so its answer goes to the next call filed under
/// `key`. A call of no one core (`None`: merged from several) is given up by its caller.
pub(super) async fn answer(
    shared: &Shared,
    key: CallKey,
    call: Option<(usize, CallId)>,
    rx: oneshot::Receiver<std::result::Result<u64, CallError>>,
) -> Result<u64> {
    struct GiveUp<'a>(&'a Shared, CallKey, Option<(usize, CallId)>, bool);
    impl Drop for GiveUp<'_> {
        fn drop(&mut self) {
            if let (true, Some((shard, call))) = (self.3, self.2)
                && let Some(core) = self.0.core().core(shard)
            {
                core.abandon(self.1, call);
            }
        }
    }
    let mut waiting = GiveUp(shared, key, call, true);
    let r = match rx.await {
        Ok(r) => r.map_err(ClientError::from),
        Err(_) => Err(ClientError::Call(CallError::Closed)),
    };
    // Answered (or the core dropped the waiter): nothing to give up.
    waiting.3 = false;
    r
}
