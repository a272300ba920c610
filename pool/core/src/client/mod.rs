//! The client's protocol as a state machine, beside [`Manager`](crate::Manager): the JOIN
//! handshake ([`ClientCore::connect`]: the PM's challenge answered with the proof of the
//! workflow secret, then its welcome), what an application has asked the pool manager and
//! waits for, its CDOs from declare to dispose,
//! transfers it carries out, groups whose members the PM names, and its subscriptions.
//! No sockets, threads, clock or memory registration, as `quinn-proto`'s connection is to
//! its endpoint: a driver (the `pool` crate's tokio client) calls the operations and
//! [`ClientCore::handle`] with each message of the PM, writes what
//! [`ClientCore::poll_transmit`] gives and carries out what [`ClientCore::poll_event`]
//! gives (answers to hand to waiting calls, tickets to fetch, stream pieces to serve or
//! route, subscriptions' news).
//!
//! The driver chooses what a CDO's bytes, a waiting call, memory lent for a transfer, a
//! subscription's queue and a stream's route are ([`Driver`]); the tests drive a core
//! against a [`Manager`](crate::Manager) in memory with plain values for them.
//!
//! Time comes in as `now` with each call that waits, as for quinn-proto's connection: every
//! waiting call has a deadline (`now` plus the core's call timeout, or its own: see
//! [`ClientCore::set_deadline`]); the driver sleeps until [`ClientCore::poll_timeout`] and
//! then calls [`ClientCore::handle_timeout`], which answers the calls whose deadline passed
//! with [`CallError::Timeout`]. A call the application gives up (a dropped future) is
//! given up through [`ClientCore::abandon`].
//!
//! What the core does not do: batch messages (each [`Transmit`] says whether anybody
//! waits for it; the driver decides when to write).

mod cdos;
mod handshake;
mod leases;
mod observer;
mod offers;
mod reclaim;
pub mod sharded;
mod streams;
mod subscriptions;
mod took;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::HashMap;
use crate::events::PoolEvent;
use crate::proto::{CdoId, Direct, FromPm, Op, Refusal, Source, ToPm, TransferId};

use cdos::{Arriving, Fetching, Mine, Named};
pub use cdos::{DEFAULT_INLINE_MAX, Demand, GROUP_IDS, GroupHere, GroupMember, Phase};
pub use leases::{LEASE_HOLD, MAX_HELD as MAX_HELD_LEASES};
pub use observer::ObserverCore;
pub use offers::{GfsUse, INLINE_PAUSE, Offer, Transport};
pub use sharded::{Route, Sharded};
pub use streams::{STREAM_PIECE, STREAM_WINDOW};
pub use took::{LeaseCopy, TAKE_MOST, Taken};

/// What a driver supplies the core with: the types of what it keeps for the driver, and
/// how a small CDO's bytes that came with its ticket become its data.
pub trait Driver {
    /// A CDO's bytes once here (the result of a fetch). Read for the end-to-end checksum.
    type Data: AsRef<[u8]>;
    /// Who waits for an answer (handed back in [`Event::Answer`]; dropped unanswered when
    /// the connection closes).
    type Waiter;
    /// Memory the application lends for a CDO's next transfer (handed back in
    /// [`Fetch::lent`]).
    type Memory;
    /// A subscription's event queue (a clone goes with each [`Event::Subscription`]).
    type Events: Clone;
    /// Where the pieces of a stream transfer go (a clone goes with each [`Event::Piece`]).
    type Stream: Clone;

    /// The data of a CDO whose bytes came with its ticket: copied into `lent` when the
    /// application lent memory that fits them, else kept as they came. The core carries
    /// such tickets out itself (no [`Event::Fetch`]): nothing is left to do but this.
    fn inline(bytes: crate::proto::InlineBytes, lent: Option<Self::Memory>) -> Self::Data;
}

/// Why a call failed, as the core knows it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The PM refused the operation.
    #[error("{op} refused: {why}")]
    Refused {
        /// The operation.
        op: Op,
        /// Why.
        why: Refusal,
    },
    /// The connection ended (or the core was closed): nothing more is sent or answered.
    #[error("the pool manager closed the connection")]
    Closed,
    /// A CDO's bytes did not match the checksum its producer sealed: refused, not
    /// delivered.
    #[error("integrity check failed: CDO from {provider}: {why}")]
    Integrity {
        /// The providing application (`component:index`).
        provider: std::sync::Arc<str>,
        /// What did not match (both checksums).
        why: String,
    },
    /// This app cannot take the bytes the way its ticket says (a file on the global file
    /// system its settings do not reach): the demand fails with the reason, since another
    /// ticket of the same kind would fail alike.
    #[error("{0}")]
    Unreadable(String),
    /// The CDO was disposed while the call waited (a demand or require of it).
    #[error("{op} of CDO {cdo} ended: the CDO was disposed meanwhile")]
    Disposed {
        /// The operation that waited.
        op: Op,
        /// The CDO.
        cdo: CdoId,
    },
    /// The PM (or the app's own use of ids) broke the protocol; the text says how.
    #[error("{0}")]
    Protocol(String),
    /// The call's deadline passed without an answer ([`ClientCore::handle_timeout`]). The
    /// request stays with the PM: a later identical call waits for its answer.
    #[error("{0} got no answer from the pool manager in time")]
    Timeout(Op),
    /// A seal's attributes do not match the schemas: nothing was sent.
    #[error(transparent)]
    Attribute(#[from] crate::schema::AttrError),
    /// A CDO asks for the global file system ([`crate::attr::TRANSPORT`]) in an app that
    /// has none ([`ClientCore::set_gfs`]): nothing was sent.
    #[error(
        "CDO {cdo} asks for the global file system ({} = GFS) but this app has no GFS directory: set MSTRO_TRANSPORT_GFS_DIR",
        crate::attr::TRANSPORT
    )]
    NoGfs {
        /// The CDO.
        cdo: CdoId,
    },
    /// The PM stopped waiting for the acknowledgement of this event (its serial) and
    /// ended the subscription: nothing was sent.
    #[error(
        "event {0} was acknowledged too late: the pool manager went on without it; acknowledge events sooner"
    )]
    AckTooLate(u64),
}

/// The built-in schemas every core starts with, parsed once per process (a driver usually
/// replaces them right after the handshake: [`ClientCore::set_schemas`]).
static BUILTIN_SCHEMAS: std::sync::LazyLock<std::sync::Arc<crate::schema::Schemas>> =
    std::sync::LazyLock::new(|| std::sync::Arc::new(crate::schema::Schemas::builtin()));

/// Result alias of the core's calls.
pub type CallResult<T> = Result<T, CallError>;

/// Identifies a waiting call, to give it up ([`ClientCore::abandon`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(u64);

/// What an answer is filed under: the operation and the CDO (declare: the app's handle;
/// leave: 0; subscribe: the app's handle; unsubscribe: the subscription).
pub type CallKey = (Op, u64);

/// A message for the PM.
#[derive(Debug, PartialEq)]
pub struct Transmit {
    /// The message.
    pub msg: ToPm,
    /// Nobody waits for it (a local demand's notice): it may go with the next message.
    pub deferred: bool,
}

/// One piece of a stream transfer: bytes at an offset, or why the fetch ended
/// ([`ClientCore::stream`]).
pub type Piece = Result<(u64, Vec<u8>), CallError>;

/// What a subscription's queue is told.
#[derive(Debug, PartialEq)]
pub enum News {
    /// One of its events.
    Event(PoolEvent),
    /// The PM gave up waiting for the acknowledgement of this serial ...
    Late(u64),
    /// ... and ended the subscription (why): no more events.
    Ended(String),
    /// The connection ended: no more events.
    Closed,
}

/// A ticket to carry out: get the bytes from `source`, then report with
/// [`ClientCore::fetched`]. (Tickets whose bytes came with them are carried out by the core,
/// see [`Driver::inline`].)
#[derive(Debug)]
pub struct Fetch<M> {
    /// The transfer.
    pub transfer: TransferId,
    /// This app's CDO the bytes are for.
    pub cdo: CdoId,
    /// Where and how to get them.
    pub source: Source,
    /// Memory the application lent for this CDO's transfer, if any.
    pub lent: Option<M>,
    /// The shard whose manager issued the ticket (0 in a pool of one): the core the
    /// driver tells how it went ([`Sharded::fetched`]), as transfer ids are each
    /// manager's own.
    pub shard: usize,
}

/// What the driver is to do.
pub enum Event<T: Driver> {
    /// Hand `result` (the CDO or subscription id on success) to the waiting call.
    Answer {
        /// Who waits.
        waiter: T::Waiter,
        /// The answer.
        result: CallResult<u64>,
    },
    /// Carry out a ticket.
    Fetch(Fetch<T::Memory>),
    /// Send the PM `len` bytes at `offset` of this app's offered `cdo` (a stream
    /// transfer's piece: [`ToPm::Chunk`]).
    Serve {
        /// The transfer.
        transfer: TransferId,
        /// The offered CDO.
        cdo: CdoId,
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// Write offered `cdo` whole to a file under this app's GFS directory and report it
    /// with [`ClientCore::spilled`] (the PM's [`FromPm::Spill`]).
    Spill {
        /// The offered CDO.
        cdo: CdoId,
    },
    /// Link the file of offered `cdo` in this app's GFS directory into `dir`, the PM's
    /// directory of kept files, and say how that went with [`ClientCore::handed_over`]
    /// (its withdraw waits: [`ClientCore::withdraw`]).
    HandOver {
        /// The offered CDO.
        cdo: CdoId,
        /// The PM's directory.
        dir: std::sync::Arc<str>,
    },
    /// A piece of a stream transfer this app fetches, for its route.
    Piece {
        /// Where it goes.
        stream: T::Stream,
        /// The piece.
        piece: Piece,
    },
    /// News for a subscription's queue.
    Subscription {
        /// The queue.
        events: T::Events,
        /// What happened.
        news: News,
    },
}

/// A call waiting for its answer.
struct Waiting<W> {
    call: CallId,
    deadline: Option<Instant>,
    waiter: W,
}

/// A client's protocol state (see the module's documentation).
pub struct ClientCore<T: Driver> {
    app: crate::proto::AppId,
    /// The id the next declared CDO gets, and the end of the app's ids.
    next_cdo: CdoId,
    last_cdo: CdoId,
    /// The shard of its pool this core's manager is ([`ClientCore::set_shard`]): which
    /// part of the app's CDO ids the core numbers with.
    shard: crate::shards::Place,
    /// Waiting calls by what their answer is filed under, first come first served.
    /// Mostly one call per key: kept inline, where a queue cost each call an allocation.
    waiters: HashMap<CallKey, smallvec::SmallVec<[Waiting<T::Waiter>; 1]>>,
    next_call: u64,
    /// The deadlines of waiting calls, earliest first, and what each call is filed under.
    deadlines: BTreeMap<(Instant, CallId), CallKey>,
    /// How long a call waits unless given a deadline of its own.
    call_timeout: Duration,
    /// The number the next subscription or discard gets (what its answer carries).
    next_local: u64,
    /// This app's CDOs, from declare to dispose. Boxed: a producer may hold hundreds of
    /// thousands, and the table's growth then moves a pointer per CDO, not its ~300 bytes.
    cdos: HashMap<CdoId, Box<Mine<T>>>,
    /// Tickets being carried out.
    fetching: HashMap<TransferId, Fetching>,
    /// Groups demanded with their members' ids reserved (the first, how many), until the
    /// PM names the members; then their names and the group's attributes; groups whose
    /// members are on their way, by their first member's id.
    groups_wanted: HashMap<CdoId, (CdoId, u32)>,
    groups: HashMap<CdoId, Named>,
    /// Members of groups named lately that live at other shards ([`ClientCore::named_elsewhere`]).
    elsewhere: Vec<cdos::Elsewhere>,
    arriving: std::collections::BTreeMap<CdoId, Arriving>,
    subs: subscriptions::Subscriptions<T>,
    /// What rides out the loss of the manager (see `reclaim.rs`).
    reclaiming: reclaim::Reclaiming,
    /// Stream transfers being fetched.
    streams: streams::Streams<T::Stream>,
    /// Leases granted with offer events, for demands to come.
    leases: leases::Leases,
    transmit: VecDeque<Transmit>,
    /// Messages of calls made before the welcome of a member core
    /// ([`ClientCore::connect_member`]): they follow the JOIN once the welcome came.
    early: VecDeque<Transmit>,
    events: VecDeque<Event<T>>,
    /// The connection ended: every later call fails at once.
    closed: bool,
    /// The app asked to leave, or the PM said BYE unasked: notices nobody waits for are
    /// no longer sent (the PM closes the connection after its BYE; a notice written then
    /// would fail the leave).
    left: bool,
    /// The JOIN handshake while it runs ([`ClientCore::connect`], [`ClientCore::rejoin`]),
    /// and how it ended.
    handshake: Option<handshake::Handshake>,
    joined: Option<CallResult<(crate::proto::AppId, u64)>>,
    /// Where the PM keeps files of GFS offers handed over at withdraw, as its welcome said.
    keep_dir: Option<std::sync::Arc<str>>,
    /// What `seal` checks attributes against ([`ClientCore::set_schemas`]).
    schemas: std::sync::Arc<crate::schema::Schemas>,
    /// Most bytes an offer carries to the PM ([`ClientCore::set_inline_max`]).
    inline_max: usize,
    /// Offers carry no bytes until then: the PM dropped some it had no room for
    /// ([`FromPm::BytesDropped`], [`INLINE_PAUSE`]).
    bytes_paused: Option<Instant>,
    /// How the app may use the global file system ([`ClientCore::set_gfs`]).
    gfs: GfsUse,
}

impl<T: Driver> ClientCore<T> {
    /// The PM's directory for the files of GFS offers it keeps after their withdraw (see
    /// the `keep` of [`ToPm::Withdraw`]), as its welcome said; `None`: it keeps none.
    pub fn keep_dir(&self) -> Option<&std::sync::Arc<str>> {
        self.keep_dir.as_ref()
    }

    /// The core of app `app` (as the PM's `Welcome` numbered it) joined already, which
    /// has declared nothing yet; its calls wait at most `call_timeout` for their answers.
    pub fn new(app: crate::proto::AppId, call_timeout: Duration) -> ClientCore<T> {
        let ids = crate::proto::cdo_ids(app);
        ClientCore {
            app,
            next_cdo: *ids.start(),
            last_cdo: *ids.end(),
            shard: crate::shards::Place::default(),
            waiters: HashMap::default(),
            next_call: 0,
            deadlines: BTreeMap::new(),
            call_timeout,
            next_local: 1,
            cdos: HashMap::default(),
            fetching: HashMap::default(),
            groups_wanted: HashMap::default(),
            groups: HashMap::default(),
            elsewhere: Vec::new(),
            arriving: std::collections::BTreeMap::new(),
            subs: subscriptions::Subscriptions::default(),
            reclaiming: reclaim::Reclaiming::default(),
            streams: streams::Streams::default(),
            leases: leases::Leases::default(),
            transmit: VecDeque::new(),
            early: VecDeque::new(),
            events: VecDeque::new(),
            closed: false,
            left: false,
            handshake: None,
            joined: Some(Ok((app, 0))),
            keep_dir: None,
            schemas: BUILTIN_SCHEMAS.clone(),
            inline_max: DEFAULT_INLINE_MAX,
            bytes_paused: None,
            gfs: GfsUse::default(),
        }
    }

    /// The schemas a seal's attributes are checked against from now on (the default:
    /// [`Schemas::builtin`](crate::schema::Schemas::builtin), Maestro's core namespace).
    pub fn set_schemas(&mut self, schemas: std::sync::Arc<crate::schema::Schemas>) {
        self.schemas = schemas;
    }

    /// The schemas a seal's attributes are checked against.
    pub fn schemas(&self) -> &std::sync::Arc<crate::schema::Schemas> {
        &self.schemas
    }

    /// Offers of at most `bytes` bytes carry them to the PM from now on (see
    /// [`ClientCore::offer`]; default [`DEFAULT_INLINE_MAX`]; 0: none does). At most
    /// [`MAX_INLINE_OFFER`](crate::policy::MAX_INLINE_OFFER) is carried whatever this says:
    /// the PM would refuse more.
    pub fn set_inline_max(&mut self, bytes: usize) {
        self.inline_max = bytes.min(crate::policy::MAX_INLINE_OFFER);
    }

    /// Whether an offer of `len` bytes carries them to the PM (at most
    /// [`ClientCore::set_inline_max`], or none at all). Its driver need not register such
    /// an offer with the fabric ([`Offer::registered`]): consumers get its bytes with the
    /// ticket, or copy them on its host.
    pub fn carries(&self, len: usize) -> bool {
        len == 0 || len <= self.inline_max
    }

    /// Asks the PM to end the CDOs the pool keeps under `name` (see
    /// [`ToPm::Discard`]); the answer, filed for `waiter` under `(Op::Discard, number)`,
    /// is how many it ended. Returns the call's number and id.
    ///
    /// # Errors
    /// `BadName` (refused) for an empty or over-long name; [`CallError::Closed`].
    pub fn discard(
        &mut self,
        now: Instant,
        name: &str,
        waiter: T::Waiter,
    ) -> CallResult<(u64, CallId)> {
        crate::proto::check_name(name).map_err(|why| CallError::Refused {
            op: Op::Discard,
            why,
        })?;
        let local = self.next_local;
        self.next_local += 1;
        let msg = ToPm::Discard {
            local,
            name: name.into(),
        };
        let call = self.request(now, (Op::Discard, local), msg, waiter)?;
        self.reclaiming.discarding.insert(local, name.into());
        Ok((local, call))
    }

    /// Cancels a require, or a demand still waiting, of `cdo`; files `waiter` for the
    /// answer (the CDO is settled then: a dispose is not waited for).
    ///
    /// # Errors
    /// [`CallError::Closed`].
    pub fn retract(&mut self, now: Instant, cdo: CdoId, waiter: T::Waiter) -> CallResult<CallId> {
        self.request(now, (Op::Retract, cdo), ToPm::Retract { cdo }, waiter)
    }

    /// Leaves the workflow; `waiter` hears the PM's BYE (once no consumer still needs
    /// this app's offers).
    ///
    /// # Errors
    /// [`CallError::Closed`].
    pub fn leave(&mut self, now: Instant, waiter: T::Waiter) -> CallResult<CallId> {
        let call = self.request(now, (Op::Leave, 0), ToPm::Leave, waiter)?;
        self.left = true;
        Ok(call)
    }

    /// Tells the PM of a change of the fabric this app saw (its PMIx host's event, or a
    /// link of its endpoint: for a PM that does not hear them). Nothing is answered.
    ///
    /// # Errors
    /// [`CallError::Closed`] once the connection ended.
    pub fn report(&mut self, change: crate::events::FabricChange) -> CallResult<()> {
        self.tell(ToPm::Report { change })
    }

    /// Whether the connection ended ([`ClientCore::close`]).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The next message for the PM, in order.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    /// The next thing for the driver to do, in order.
    pub fn poll_event(&mut self) -> Option<Event<T>> {
        self.events.pop_front()
    }

    /// Queues `msg`, which nobody waits for, on an open connection.
    ///
    /// # Errors
    /// [`CallError::Closed`] once the connection ended; `Protocol` before the welcome.
    fn tell(&mut self, msg: ToPm) -> CallResult<()> {
        self.open()?;
        self.queue(msg);
        Ok(())
    }

    /// Queues `msg` for the PM; while the connection is lost it is dropped (the replay
    /// rebuilds what it changed: [`ClientCore::replay`]).
    fn queue(&mut self, msg: ToPm) {
        if self.reclaiming.lost.is_some() {
            return;
        }
        self.sendable().push_back(Transmit {
            msg,
            deferred: false,
        });
    }

    /// Where a call's message goes: out, or, before the welcome of a member core, after
    /// it.
    fn sendable(&mut self) -> &mut VecDeque<Transmit> {
        if self.handshake.is_some() {
            &mut self.early
        } else {
            &mut self.transmit
        }
    }

    /// The driver had handled everything the PM had written to this connection by `at`:
    /// it read the connection at `at` (or later) down to what was there, and handed every
    /// message of it to [`ClientCore::handle`]. Leases of memory are used only within half
    /// the PM's lease grace of the last such instant (see `leases`): tell it each time the
    /// reader finds the connection empty, and before a demand or a batch fetch when the
    /// connection has been quiet (an instant earlier than the last one told changes
    /// nothing).
    pub fn drained(&mut self, at: Instant) {
        self.leases.drained(at);
    }

    /// Tells the PM this app will not use `lease` (with its next message).
    fn release(&mut self, lease: TransferId) {
        self.defer(ToPm::Release {
            leases: vec![lease],
        });
    }

    /// Queues `msg`, which nobody waits for and may go with the next message (unless the
    /// connection ended or the app is leaving: then it is dropped).
    fn defer(&mut self, msg: ToPm) {
        if !self.closed && !self.left && self.reclaiming.lost.is_none() {
            self.sendable().push_back(Transmit {
                msg,
                deferred: true,
            });
        }
    }

    fn open(&self) -> CallResult<()> {
        if self.closed {
            return Err(CallError::Closed);
        }
        // A member core knows its app id from the start: its calls wait for the welcome.
        if self.handshake.is_some() && self.reclaiming.lost.is_none() && self.app == 0 {
            return Err(CallError::Protocol(
                "a call before the pool manager's welcome: wait until the core is joined".into(),
            ));
        }
        Ok(())
    }

    /// Sends `msg` and files `waiter` for the answer under `key`, until `now` plus the
    /// call timeout.
    ///
    /// # Errors
    /// [`CallError::Closed`] once the connection ended (nothing is sent).
    fn request(
        &mut self,
        now: Instant,
        key: CallKey,
        msg: ToPm,
        waiter: T::Waiter,
    ) -> CallResult<CallId> {
        let call = self.wait(now, key, waiter)?;
        self.queue(msg);
        Ok(call)
    }

    /// Files `waiter` for the answer under `key` until `now` plus the call timeout,
    /// sending nothing (what is sent is the caller's).
    ///
    /// # Errors
    /// [`CallError::Closed`] once the connection ended.
    fn wait(&mut self, now: Instant, key: CallKey, waiter: T::Waiter) -> CallResult<CallId> {
        self.open()?;
        let call = CallId(self.next_call);
        self.next_call += 1;
        // A timeout too long for the clock means no deadline.
        let deadline = now.checked_add(self.call_timeout);
        if let Some(at) = deadline {
            self.deadlines.insert((at, call), key);
        }
        self.waiters.entry(key).or_default().push(Waiting {
            call,
            deadline,
            waiter,
        });
        Ok(call)
    }

    /// Gives call `call`, waiting under `key`, the deadline `deadline` instead (`None`:
    /// it waits until answered or given up). No effect on a call no longer waiting.
    pub fn set_deadline(&mut self, key: CallKey, call: CallId, deadline: Option<Instant>) {
        let Some(w) = self
            .waiters
            .get_mut(&key)
            .and_then(|q| q.iter_mut().find(|w| w.call == call))
        else {
            return;
        };
        if let Some(old) = w.deadline {
            self.deadlines.remove(&(old, call));
        }
        w.deadline = deadline;
        if let Some(at) = deadline {
            self.deadlines.insert((at, call), key);
        }
    }

    /// The earliest deadline of a waiting call: when to call
    /// [`ClientCore::handle_timeout`] next (`None`: nothing waits with a deadline).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let calls = self.deadlines.first_key_value().map(|(&(at, _), _)| at);
        let handshake = self.handshake.as_ref().map(handshake::Handshake::deadline);
        let leases = self.leases.next_expiry();
        [
            calls,
            handshake,
            self.streams.next_deadline(),
            leases,
            self.reclaiming.lost,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Answers every call whose deadline is `now` or earlier with
    /// [`CallError::Timeout`]; each is given up as by [`ClientCore::abandon`] (a later
    /// answer goes to the next call filed under its key). Leases held unused for
    /// [`LEASE_HOLD`] are given back.
    pub fn handle_timeout(&mut self, now: Instant) {
        for release in self.leases.expire(now) {
            self.defer(release);
        }
        if self.handshake.as_ref().is_some_and(|h| h.deadline() <= now) {
            self.handshake = None;
            self.joined = Some(Err(CallError::Timeout(Op::Join)));
            if self.reclaiming.lost.is_none() {
                self.close();
            }
        }
        if self.reclaiming.lost.is_some_and(|until| until <= now) {
            tracing::warn!("pool client: no pool manager took over in time; closing");
            self.close();
        }
        self.streams_timed_out(now);
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, call), key) = entry.remove_entry();
            if let Some(w) = self.unfile(key, call) {
                self.events.push_back(Event::Answer {
                    waiter: w.waiter,
                    result: Err(CallError::Timeout(key.0)),
                });
                self.given_up(key);
            }
        }
    }

    /// The call `call` waiting under `key` gave up (a dropped future): its answer goes to
    /// the next call filed under `key`, or nowhere.
    pub fn abandon(&mut self, key: CallKey, call: CallId) {
        if let Some(w) = self.unfile(key, call) {
            if let Some(at) = w.deadline {
                self.deadlines.remove(&(at, call));
            }
            self.given_up(key);
        }
    }

    /// Takes call `call` out of the queue of `key`.
    fn unfile(&mut self, key: CallKey, call: CallId) -> Option<Waiting<T::Waiter>> {
        let q = self.waiters.get_mut(&key)?;
        let w = q.iter().position(|w| w.call == call).map(|i| q.remove(i));
        if q.is_empty() {
            self.waiters.remove(&key);
        }
        w
    }

    /// What giving up a call under `key` changes besides its answer.
    fn given_up(&mut self, key: CallKey) {
        match key.0 {
            // A group given up: its members still arrive, and wait to be disposed.
            Op::Demand => self.stop_arriving(key.1),
            Op::Discard => drop(self.reclaiming.discarding.remove(&key.1)),
            _ => {}
        }
    }

    /// Hands `result` to the oldest call waiting under `key`; false if none waits.
    fn resolve(&mut self, key: CallKey, result: CallResult<u64>) -> bool {
        if key.0 == Op::Discard {
            self.reclaiming.discarding.remove(&key.1);
        }
        // A group's member counts for its group even when the app also demanded it alone.
        let counted =
            key.0 == Op::Demand && !self.arriving.is_empty() && self.member_arrived(key.1, &result);
        let Some(q) = self.waiters.get_mut(&key) else {
            return counted;
        };
        let Some(w) = (!q.is_empty()).then(|| q.remove(0)) else {
            return false;
        };
        if q.is_empty() {
            self.waiters.remove(&key);
        }
        if let Some(at) = w.deadline {
            self.deadlines.remove(&(at, w.call));
        }
        self.events.push_back(Event::Answer {
            waiter: w.waiter,
            result,
        });
        true
    }

    /// One message of the PM, received at `now`: answers go to their calls (and settle the CDOs they
    /// concern), tickets become [`Event::Fetch`], stream requests [`Event::Serve`], pieces
    /// [`Event::Piece`], subscriptions' messages [`Event::Subscription`]. A message that
    /// makes no sense here (a handshake message after the handshake, an observer's
    /// answer) is logged and dropped.
    pub fn handle(&mut self, now: Instant, msg: FromPm) {
        if let Some(step) = self.handshake.take() {
            return self.handshake(now, step, msg);
        }
        match msg {
            FromPm::Done { op, cdo } => self.done(op, cdo),
            FromPm::DoneMany { op, cdos } => {
                for cdo in cdos {
                    self.done(op, cdo);
                }
            }
            FromPm::Ready { cdo } => {
                self.resolve((Op::Demand, cdo), Ok(cdo));
            }
            FromPm::Bye => {
                if !self.resolve((Op::Leave, 0), Ok(0)) {
                    // Not asked for: the manager ends the workflow (it stops), so the end of
                    // its connection is no loss to reclaim from (see `lost`).
                    self.left = true;
                    self.reclaiming.ended = true;
                }
            }
            FromPm::Refused {
                op: Op::Fetch,
                cdo: Some(transfer),
                why,
            } => self.piece(
                now,
                transfer,
                Err(CallError::Refused { op: Op::Fetch, why }),
            ),
            FromPm::Refused { op, cdo, why } => {
                if let (Op::Demand, Some(cdo)) = (op, cdo) {
                    // A lease's use refused: what its fetch brings is not the CDO's.
                    let leased = self.fetching.values().any(|f| f.is(cdo));
                    self.fetching.retain(|_, f| !f.is(cdo));
                    if leased && why == Refusal::UnknownTransfer {
                        // Revoked, and not used within the PM's grace (this process was
                        // slow to say so): the PM serves the demand as any other.
                        tracing::debug!("CDO {cdo}: its lease was abandoned; demanding it");
                        return self.queue(ToPm::Demand { cdo });
                    }
                }
                if matches!(op, Op::Offer | Op::Withdraw)
                    && let Some(cdo) = cdo
                    && self.offer_refused(op, cdo, &why)
                {
                    return;
                }
                let text = why.to_string();
                if !self.resolve((op, cdo.unwrap_or(0)), Err(CallError::Refused { op, why })) {
                    tracing::warn!("pool manager refused {op} ({text})");
                }
            }
            FromPm::GroupMembers {
                group,
                names,
                attributes,
            } => self.group_named(group, names, attributes),
            FromPm::Ticket {
                transfer,
                cdo,
                source,
                attributes,
                provider,
                completes_demand,
            } => self.ticket(
                transfer,
                cdo,
                source,
                (attributes, provider),
                completes_demand,
            ),
            FromPm::Serve {
                transfer,
                cdo,
                offset,
                len,
            } => self.serve(transfer, cdo, offset, len),
            FromPm::Spill { cdo } => self.events.push_back(Event::Spill { cdo }),
            FromPm::Discarded { local, count } => {
                self.resolve((Op::Discard, local), Ok(count));
            }
            FromPm::Chunk(c) => self.piece(now, c.transfer, Ok((c.offset, c.data))),
            FromPm::Revoke { lease } => {
                if self.leases.forget(lease).is_some() {
                    self.release(lease);
                }
            }
            FromPm::Subscribed { local, sub } => self.subscribed(local, sub),
            FromPm::Event { sub, event, lease } => {
                let event = event.into_event();
                if let Some(grant) = lease {
                    let provider = self.leases.provider(&event.component, event.index);
                    let release = match leases::Lease::of(*grant, &event, provider) {
                        Ok(lease) => self.leases.add(now, lease),
                        Err(id) => Some(id),
                    };
                    if let Some(id) = release {
                        self.release(id);
                    }
                }
                if let Some(serial) = self.subs.event(now, sub, event, &mut self.events) {
                    // An echo the app acknowledged the first of (see `subscriptions`).
                    self.queue(ToPm::Ack { sub, serial });
                }
            }
            FromPm::AckTooLate { sub, serial } => {
                self.subs.ack_too_late(sub, serial, &mut self.events);
            }
            FromPm::Challenge { .. } | FromPm::Welcome { .. } => {
                tracing::warn!("pool manager sent a handshake message after the handshake");
            }
            FromPm::View { id, .. } => {
                tracing::warn!("pool manager sent an app the answer to an observer's query {id}");
            }
            FromPm::BytesDropped { cdo } => self.bytes_dropped(now, cdo),
        }
    }

    /// An operation completed: what it changes of the CDO, then its answer.
    fn done(&mut self, op: Op, cdo: CdoId) {
        match op {
            Op::Dispose => self.forget(cdo),
            // Room for bytes again, perhaps (see `bytes_dropped`).
            Op::Withdraw => {
                self.bytes_paused = None;
                self.confirmed(op, cdo);
            }
            op => self.confirmed(op, cdo),
        }
        self.resolve((op, cdo), Ok(cdo));
    }

    /// The connection ended: every waiting call fails (its waiter is dropped), every
    /// subscription's queue hears [`News::Closed`], and every later call fails at once.
    pub fn close(&mut self) {
        self.closed = true;
        self.reclaiming.lost = None;
        if self.handshake.take().is_some() {
            self.joined = Some(Err(CallError::Closed));
        }
        self.waiters.clear();
        self.deadlines.clear();
        self.reclaiming.discarding.clear();
        self.reclaiming.dropped.clear();
        self.arriving.clear();
        self.streams.clear();
        self.leases.clear();
        self.transmit.clear();
        self.early.clear();
        self.subs.close(&mut self.events);
    }
}

/// A transfer ended here: its bytes, and whether (and how) they were taken straight from
/// the provider's memory; or why it failed.
pub type Fetched<D> = Result<(D, Option<Direct>), String>;

impl<T: Driver> std::fmt::Debug for ClientCore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCore")
            .field("app", &self.app)
            .field("cdos", &self.cdos.len())
            .field("waiting", &self.waiters.len())
            .field("fetching", &self.fetching.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}
