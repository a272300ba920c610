//! Pool clients: [`AsyncClient`] (tokio) and the blocking [`Client`] built on it. Both join
//! the pool manager with proof of the workflow secret and run the CDO operations named after
//! Maestro's (`declare`, `seal`, `offer`, `require`, `demand`, `withdraw`, `retract`,
//! `dispose`).
//!
//! A client owns a driver (two tokio tasks) that keeps reading the control connection:
//! answers go to the waiting call, tickets are carried out at once (RMA read, same-process
//! hand-over or stream, as the PM planned) and reported, and stream requests for this app's
//! offers are served, whether or not the application is inside a call. Operations issued
//! without waiting for each other (e.g. `join_all` over many `offer`s) are pipelined: each
//! message is a frame of its own, written by the caller's thread at once (`outbox`), and
//! the PM answers a batch of them in one frame.

mod blocking;
mod data;
mod driver;
mod group;
mod join;
mod link;
mod observer;
mod options;
mod outbox;
mod pending;
mod subscription;
mod transfer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fabric::access::RemoteRead;
use fabric::{Buffer, Endpoint, MemoryRegion};
use tokio::sync::oneshot;

pub use blocking::Client;
pub use data::CdoData;
pub use group::{GROUP_IDS, GroupMember};
pub use observer::Observer;
pub use options::{DEFAULT_INLINE_MAX, DEFAULT_WAIT_SPIN, JoinOptions};
pub use subscription::Subscription;

use crate::attr::{self, Attributes};
use crate::events::{EventKinds, SubscribeOptions};
use crate::proto::{self, AppId, CdoId, Op, Refusal, ToPm};
use crate::schema::Schemas;
use crate::selector::{Selector, SelectorError};
pub(crate) use join::{Endpoints, join_message};
pub use join::{bare_join, welcome};
use pending::Mine;
pub(crate) use pending::Pending;
use subscription::EventQueue;

/// What can go wrong for a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The control connection failed.
    #[error("pool manager connection: {0}")]
    Io(#[from] std::io::Error),
    /// The PM sent a bad frame.
    #[error("pool manager sent a bad frame: {0}")]
    Frame(#[from] proto::FrameError),
    /// The PM refused an operation.
    #[error("{op} refused: {why}")]
    Refused {
        /// The operation.
        op: Op,
        /// Why.
        why: Refusal,
    },
    /// No answer in time.
    #[error("{0} got no answer from the pool manager in time")]
    Timeout(Op),
    /// The PM closed the connection (or the client's driver stopped).
    #[error("the pool manager closed the connection")]
    Closed,
    /// None of the PM's endpoints could be reached.
    #[error("no pool manager endpoint answered ({0}); is the PM running and the PM info current?")]
    Unreachable(String),
    /// A fabric error while moving data.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// The PM answered something unexpected.
    #[error("unexpected answer from the pool manager: {0}")]
    Protocol(String),
    /// The attribute schemas could not be loaded.
    #[error(transparent)]
    Schema(#[from] crate::schema::SchemaError),
    /// A CDO's attributes do not match the schemas (checked at `seal`, before sending).
    #[error(transparent)]
    Attribute(#[from] crate::schema::AttrError),
    /// No libfabric endpoint could be chosen (the reason says which setting or provider).
    #[error("no fabric endpoint: {0}")]
    NoFabric(String),
    /// A selector did not parse.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// The PM stopped waiting for this event's acknowledgement; the operation went on.
    #[error(
        "event {0} was acknowledged too late: the pool manager went on without it; acknowledge events sooner"
    )]
    AckTooLate(u64),
    /// The PM ended the subscription: it missed an acknowledgement deadline (the reason).
    #[error(
        "the pool manager ended this subscription: {0}; acknowledge events sooner, or subscribe without require-ack"
    )]
    SubscriptionEnded(String),
    /// A CDO's bytes did not match the checksum its producer sealed
    /// ([`crate::attr::CHECKSUM`]): the data is refused, not delivered.
    #[error("integrity check failed: {0}")]
    Integrity(String),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ClientError>;

/// State shared by the client handle and its driver tasks.
pub(crate) struct Shared {
    pub(crate) app: AppId,
    pub(crate) pool: u64,
    /// The id of the next CDO this app declares (see [`proto::cdo_ids`]).
    next_cdo: std::sync::atomic::AtomicU64,
    pub(crate) pending: Mutex<Pending>,
    /// The control connection's sending side.
    pub(crate) out: Arc<outbox::Outbox>,
    pub(crate) endpoint: Option<Endpoint>,
    /// Endpoints on the app's other networks (`via` 1, 2, ... in tickets).
    pub(crate) alternates: Vec<Endpoint>,
    /// Providers' endpoints already in an endpoint's address vector, by `via` and address.
    pub(crate) peers: Mutex<HashMap<(u8, fabric::Address), fabric::Peer>>,
    pub(crate) timeout: Duration,
    /// See [`JoinOptions::inline_max`].
    pub(crate) inline_max: usize,
    pub(crate) schemas: Arc<Schemas>,
    /// Registered landing buffers of RMA reads, reused once the application drops the
    /// data (at most [`LANDING_POOL_BYTES`] kept).
    pub(crate) landing: Arc<fabric::RegionPool>,
    /// Whether this client copies same-host offers from their providers' memory (cleared
    /// when the kernel refuses it).
    pub(crate) cross_memory: std::sync::atomic::AtomicBool,
    /// Providers' processes whose token checked out (true) or not (false), by announcement.
    pub(crate) verified: Mutex<HashMap<proto::ProcessMemory, bool>>,
}

/// The most bytes of landing buffers a client keeps registered for reuse.
pub const LANDING_POOL_BYTES: usize = 1 << 30;

impl Shared {
    pub(crate) fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn send(&self, msg: ToPm) -> Result<()> {
        self.out.send(msg)
    }

    /// Providers' endpoints already in an endpoint's address vector.
    pub(crate) fn peers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(u8, fabric::Address), fabric::Peer>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A joined application, for async code. Methods take `&self`: issue many without awaiting
/// each to pipeline them.
///
/// # Cancel safety
/// Dropping an operation's future (or its timing out) only stops the wait: the message has
/// been sent and the PM carries it out; a later identical call waits for its own answer.
/// A dropped `demand` leaves the CDO demanded; its data is kept until the next `demand` or
/// `dispose` of that CDO.
pub struct AsyncClient {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl AsyncClient {
    /// This app's id.
    pub fn app(&self) -> AppId {
        self.shared.app
    }

    /// Sends `msg` and waits for the answer filed under `key`.
    async fn call(&self, key: (Op, u64), msg: ToPm) -> Result<u64> {
        call(&self.shared, key, msg).await
    }

    /// Reports a fabric change this app's PMIx host raised to the pool manager (for a PM
    /// outside the app's job, which does not hear that host; see
    /// [`crate::pmix_events::forward`]). Nothing is answered.
    ///
    /// # Errors
    /// [`ClientError::Closed`] when the connection is gone.
    pub fn report(&self, change: crate::events::FabricChange) -> Result<()> {
        self.shared.send(ToPm::Report { change })
    }

    /// Parses a selector with this client's schemas; relative keys get `namespace` in
    /// front (see [`crate::selector`]).
    ///
    /// # Errors
    /// [`ClientError::Selector`] pointing at the column of the problem.
    pub fn selector(&self, text: &str, namespace: &str) -> Result<Selector> {
        Ok(Selector::parse(text, namespace, &self.shared.schemas)?)
    }

    /// Subscribes to the events of `kinds` that `selector` matches (see
    /// [`crate::events`] for the options).
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped (or times out) after the request went out, the
    /// subscription the PM sets up anyway is ended as soon as its answer arrives, so no
    /// operation waits for acknowledgements nobody will send.
    ///
    /// # Errors
    /// `BadSelector` if the PM cannot compile it; timeout and connection errors.
    pub async fn subscribe(
        &self,
        selector: &Selector,
        kinds: impl Into<EventKinds>,
        options: SubscribeOptions,
    ) -> Result<Subscription> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let local = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let queue = Arc::new(EventQueue::default());
        self.shared
            .pending()
            .new_subscriptions
            .insert(local, queue.clone());
        // Unless this call hands out the subscription, its end (error, timeout, dropped
        // future) ends the subscription: one the PM set up already is ended now, one it
        // sets up later is ended by the reader when the answer comes (`driver::dispatch`).
        struct Forget<'a> {
            shared: &'a Shared,
            local: u64,
            queue: &'a Arc<EventQueue>,
            handed_out: bool,
        }
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                if self.handed_out {
                    return;
                }
                let mut p = self.shared.pending();
                p.new_subscriptions.remove(&self.local);
                let set_up = p
                    .subscriptions
                    .iter()
                    .find(|(_, q)| Arc::ptr_eq(q, self.queue))
                    .map(|(&sub, _)| sub);
                if let Some(sub) = set_up {
                    p.subscriptions.remove(&sub);
                    let _ = self.shared.send(ToPm::Unsubscribe { sub });
                }
            }
        }
        let mut forget = Forget {
            shared: &self.shared,
            local,
            queue: &queue,
            handed_out: false,
        };
        let msg = ToPm::Subscribe {
            local,
            kinds: kinds.into(),
            selector: Box::new(selector.expr().clone()),
            options,
        };
        let id = self.call((Op::Subscribe, local), msg).await?;
        forget.handed_out = true;
        drop(forget);
        Ok(Subscription {
            id,
            queue,
            shared: self.shared.clone(),
            ended: false,
        })
    }

    /// Declares a CDO named `name`; returns its id. The app numbers its own CDOs, so this
    /// does not wait for the PM: the declaration travels ahead of the operations that name
    /// the CDO, and the PM carries them out in order (when subscribers must acknowledge
    /// the declaration first, the app's next operation waits for that).
    ///
    /// # Errors
    /// `BadName` for an empty or over-long name (checked here); [`ClientError::Protocol`]
    /// once the app declared 2^40 - 1 CDOs; [`ClientError::Closed`] after the connection
    /// ended.
    pub fn declare(&self, name: &str) -> Result<CdoId> {
        proto::check_name(name).map_err(|why| ClientError::Refused {
            op: Op::Declare,
            why,
        })?;
        let cdo = self
            .shared
            .next_cdo
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !proto::cdo_ids(self.shared.app).contains(&cdo) {
            return Err(ClientError::Protocol(format!(
                "app {} has declared all the CDOs it can number; join again as a new app",
                self.shared.app
            )));
        }
        let mut p = self.shared.pending();
        if p.closed {
            return Err(ClientError::Closed);
        }
        let mine = Mine {
            name: name.into(),
            busy: false,
        };
        p.mine.insert(cdo, mine);
        self.shared.send(ToPm::Declare {
            cdo,
            name: name.into(),
        })?;
        Ok(cdo)
    }

    /// The schemas `seal` checks attributes against (also for typing values from text:
    /// [`Schemas::parse_value`], [`Schemas::set_yaml`]).
    pub fn schemas(&self) -> &Schemas {
        &self.shared.schemas
    }

    /// Seals a declared CDO with its attributes (frozen from now on), after checking them
    /// against the schemas and filling in their defaults.
    ///
    /// # Errors
    /// [`ClientError::Attribute`] for attributes the schemas refuse (nothing is sent);
    /// `WrongState` unless declared; connection errors.
    pub async fn seal(&self, cdo: CdoId, mut attributes: Attributes) -> Result<()> {
        self.shared.schemas.check(&mut attributes)?;
        self.call((Op::Seal, cdo), ToPm::Seal { cdo, attributes })
            .await
            .map(drop)
    }

    /// Offers a sealed CDO's bytes. They stay readable by consumers (registered with the
    /// fabric when the app has an endpoint) until [`AsyncClient::withdraw`] gives them back.
    ///
    /// # Errors
    /// Registration errors; `WrongState` unless sealed; connection errors.
    pub async fn offer(&self, cdo: CdoId, data: Buffer) -> Result<()> {
        self.offer_with(cdo, data, |cdo, region, extras| ToPm::Offer {
            cdo,
            region,
            extras,
        })
        .await
    }

    /// Seals a declared CDO with its attributes and offers its bytes in one message (one
    /// round trip, one answer): as [`AsyncClient::seal`] then [`AsyncClient::offer`]. When
    /// the attributes ask for end-to-end integrity ([`crate::attr::INTEGRITY`]), the
    /// checksum of `data` is sealed with them and consumers check it on arrival.
    ///
    /// # Errors
    /// [`ClientError::Attribute`] for attributes the schemas refuse (nothing is sent);
    /// registration errors; `WrongState` (as an offer) unless declared; connection errors.
    pub async fn seal_and_offer(
        &self,
        cdo: CdoId,
        mut attributes: Attributes,
        data: Buffer,
    ) -> Result<()> {
        self.shared.schemas.check(&mut attributes)?;
        attr::add_checksum(&mut attributes, data.as_slice());
        self.offer_with(cdo, data, move |cdo, region, extras| ToPm::SealOffer {
            cdo,
            attributes,
            region,
            extras,
        })
        .await
    }

    /// Makes `data` readable by consumers (registered with every endpoint the app has),
    /// sends the message `msg` builds with its regions (and memory file), and takes the
    /// data back if refused.
    async fn offer_with(
        &self,
        cdo: CdoId,
        data: Buffer,
        msg: impl FnOnce(CdoId, fabric::RemoteRegion, proto::OfferExtras) -> ToPm,
    ) -> Result<()> {
        let file = data.memory_file();
        // A small CDO's bytes travel with the offer (the PM may keep them for tickets).
        let inline = (!data.is_empty() && data.len() <= self.shared.inline_max)
            .then(|| std::sync::Arc::<[u8]>::from(data.as_slice()));
        let (offered, region, alternates) = match &self.shared.endpoint {
            Some(ep) => {
                let r: MemoryRegion<RemoteRead> = ep.register(data)?;
                let remote = r.remote();
                let mut extras = Vec::new();
                for alt in &self.shared.alternates {
                    // SAFETY: `r`'s memory stays mapped and unwritten while offered; the
                    // extra registrations are dropped before `r` (`data::Registration`).
                    let view =
                        unsafe { Buffer::borrowed(r.as_slice().as_ptr().cast_mut(), r.len()) };
                    extras.push(alt.register::<RemoteRead>(view)?);
                }
                let regions = extras.iter().map(fabric::MemoryRegion::remote).collect();
                let registered = data::Registration::new(r, extras);
                (data::Offered::Registered(registered), remote, regions)
            }
            None => {
                let remote = fabric::RemoteRegion {
                    addr: 0,
                    key: 0,
                    len: data.len() as u64,
                };
                (data::Offered::Plain(data), remote, Vec::new())
            }
        };
        let key = (self.shared.pool, self.shared.app, cdo);
        data::keep(key, offered);
        self.shared.pending().set_busy(cdo, true);
        let mut extras = proto::OfferExtras::new(alternates, file);
        if let Some(bytes) = inline {
            extras = extras.with_inline(bytes);
        }
        let r = self.call((Op::Offer, cdo), msg(cdo, region, extras)).await;
        if r.is_err() {
            data::take_back(&key);
        }
        r.map(drop)
    }

    /// Declares the intent to consume `cdo`: the PM may move it right away.
    ///
    /// # Errors
    /// `WrongState` unless declared; connection errors.
    pub async fn require(&self, cdo: CdoId) -> Result<()> {
        self.shared.pending().set_busy(cdo, true);
        self.call((Op::Require, cdo), ToPm::Require { cdo })
            .await
            .map(drop)
    }

    /// Waits until `cdo` is local (offered by someone and moved here) and returns its bytes
    /// and the attributes it was sealed with. A CDO whose `require` already brought it here
    /// returns at once, without a round trip to the pool manager.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] if nobody offers it in time (the demand stays; retract it or
    /// demand again); `NoProvider` if its providers vanished; connection errors.
    pub async fn demand(&self, cdo: CdoId) -> Result<(CdoData, Attributes)> {
        demand(&self.shared, cdo).await
    }

    /// As [`AsyncClient::demand`] (into `dst` when given, as
    /// [`AsyncClient::demand_into`]), as a future that owns what it needs: it may be
    /// spawned and outlive this borrow (an asynchronous demand of the C API or Python).
    /// Dropping it stops only the wait, as for `demand`.
    pub fn demand_detached(
        &self,
        cdo: CdoId,
        dst: Option<Buffer>,
    ) -> impl Future<Output = Result<(CdoData, Attributes)>> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            let Some(dst) = dst else {
                return demand(&shared, cdo).await;
            };
            shared.pending().destinations.insert(cdo, dst);
            let result = demand(&shared, cdo).await;
            // Unused (or the demand failed): the memory is the application's again.
            shared.pending().destinations.remove(&cdo);
            result
        }
    }

    /// As [`AsyncClient::demand`], with the bytes landing in `dst`, memory the application
    /// lends (see [`Buffer::borrowed`]): when the transfer starts after this call, the CDO
    /// fits and it moves by RMA or straight from a same-host provider's memory, the
    /// returned data *is* `dst`'s memory (check with [`CdoData::as_ptr`]), and nothing is
    /// copied besides the transfer itself. Otherwise (it arrived before, by a `require`; a
    /// same-process offer; a stream; too small) the data is where it landed, and `dst` is
    /// dropped unused.
    ///
    /// # Errors
    /// As [`AsyncClient::demand`].
    pub async fn demand_into(&self, cdo: CdoId, dst: Buffer) -> Result<(CdoData, Attributes)> {
        self.demand_detached(cdo, Some(dst)).await
    }

    /// Cancels a require (or a waiting demand).
    ///
    /// # Errors
    /// `WrongState` if not required or already moving; connection errors.
    pub async fn retract(&self, cdo: CdoId) -> Result<()> {
        self.call((Op::Retract, cdo), ToPm::Retract { cdo }).await?;
        self.shared.pending().set_busy(cdo, false);
        Ok(())
    }

    /// Takes an offer back once no transfer reads from it; returns the buffer (a copy of it
    /// if a consumer in this process still holds the original). A [`Buffer::borrowed`]
    /// offer is returned only once no consumer in this process holds it (the caller may
    /// free that memory next).
    ///
    /// # Errors
    /// `WrongState` unless offered; [`ClientError::Timeout`] if a same-process consumer
    /// still holds a borrowed offer after the client's timeout (the offer is withdrawn at the
    /// PM; its memory stays lent until that consumer lets go); connection errors.
    pub async fn withdraw(&self, cdo: CdoId) -> Result<Buffer> {
        self.call((Op::Withdraw, cdo), ToPm::Withdraw { cdo })
            .await?;
        self.shared.pending().set_busy(cdo, false);
        let key = (self.shared.pool, self.shared.app, cdo);
        // The application's own memory goes back only when no consumer in this process
        // reads it any more (they dispose their handle or drop their `CdoData`).
        let start = tokio::time::Instant::now();
        let deadline = start + self.shared.timeout;
        let mut warned = false;
        while data::lent_out(&key) {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout(Op::Withdraw));
            }
            if !warned && now - start >= Duration::from_secs(1) {
                warned = true;
                tracing::warn!(
                    "withdraw of CDO {cdo} waits until a consumer in this process lets go of the offered memory (disposes its handle and drops every view of the data)"
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        match data::take_back(&key) {
            Some(b) => Ok(b?),
            None => Err(ClientError::Protocol(format!(
                "withdrew CDO {cdo} that this client did not offer"
            ))),
        }
    }

    /// Forgets a CDO (its unclaimed data too). When the client knows the PM accepts it
    /// (the CDO is declared, sealed, withdrawn, or demanded and here), this does not wait
    /// for the PM; otherwise it waits for its answer.
    ///
    /// # Errors
    /// `WrongState` while offered or moving; `UnknownCdo` for an id this app did not
    /// declare (or disposed); connection errors.
    pub async fn dispose(&self, cdo: CdoId) -> Result<()> {
        let settled = {
            let p = self.shared.pending();
            if p.closed {
                return Err(ClientError::Closed);
            }
            p.mine.get(&cdo).is_some_and(|m| !m.busy)
        };
        if settled {
            self.shared.send(ToPm::Dispose { cdo, answer: false })?;
        } else {
            self.call((Op::Dispose, cdo), ToPm::Dispose { cdo, answer: true })
                .await?;
        }
        let mut p = self.shared.pending();
        p.arrived.remove(&cdo);
        p.mine.remove(&cdo);
        Ok(())
    }

    /// Leaves the workflow; returns once the PM says BYE (when no consumer still needs this
    /// app's offers).
    ///
    /// # Errors
    /// Timeout and connection errors.
    pub async fn leave(self) -> Result<()> {
        self.call((Op::Leave, 0), ToPm::Leave).await.map(drop)
    }
}

/// The demand of [`AsyncClient::demand`], on the client's shared state.
/// Waits until `cdo`, which the PM demanded for this app (a group's member), is here: no
/// message of its own.
async fn arrival(shared: &Shared, cdo: CdoId) -> Result<(CdoData, Attributes)> {
    let rx = {
        let mut p = shared.pending();
        if let Some(found) = p.arrived.remove(&cdo) {
            p.set_busy(cdo, false);
            return Ok(found);
        }
        if p.closed {
            return Err(ClientError::Closed);
        }
        let (tx, rx) = oneshot::channel();
        p.waiters
            .entry((Op::Demand, cdo))
            .or_default()
            .push_back(tx);
        rx
    };
    answer(shared, (Op::Demand, cdo), rx).await?;
    let mut p = shared.pending();
    p.set_busy(cdo, false);
    p.arrived
        .remove(&cdo)
        .ok_or_else(|| ClientError::Protocol(format!("CDO {cdo} ready but no data arrived")))
}

async fn demand(shared: &Shared, cdo: CdoId) -> Result<(CdoData, Attributes)> {
    {
        let mut p = shared.pending();
        // Required, and its transfer completed: the bytes are here, so the demand is
        // local. The PM still learns of it (after the transfer's completion, on the
        // same connection: it then finds the CDO local), with the next message or within
        // a millisecond (`outbox::DEFER`: the caller does not write it), but nobody waits
        // for its `Ready`, which finds no waiter and is dropped.
        if let Some(found) = p.arrived.remove(&cdo) {
            p.set_busy(cdo, false);
            drop(p);
            tracing::trace!("demand of CDO {cdo}: required and here already");
            // A PM gone meanwhile changes nothing: the bytes are here.
            if let Err(e) = shared.out.send_deferred(ToPm::Demand { cdo }) {
                tracing::debug!("demand of CDO {cdo} not told to the pool manager: {e}");
            }
            return Ok(found);
        }
        p.set_busy(cdo, true);
    }
    call(shared, (Op::Demand, cdo), ToPm::Demand { cdo }).await?;
    let mut p = shared.pending();
    p.set_busy(cdo, false);
    p.arrived
        .remove(&cdo)
        .ok_or_else(|| ClientError::Protocol(format!("CDO {cdo} ready but no data arrived")))
}

/// Sends `msg` and waits for the answer filed under `key`, at most the client's timeout.
async fn call(shared: &Shared, key: (Op, u64), msg: ToPm) -> Result<u64> {
    let rx = {
        let mut p = shared.pending();
        if p.closed {
            return Err(ClientError::Closed);
        }
        let (tx, rx) = oneshot::channel();
        p.waiters.entry(key).or_default().push_back(tx);
        // Sent under the lock: answers cannot overtake the registration.
        shared.send(msg)?;
        rx
    };
    answer(shared, key, rx).await
}

/// Waits for the answer `rx` to `key`, at most the client's timeout.
async fn answer(
    shared: &Shared,
    key: (Op, u64),
    rx: oneshot::Receiver<Result<u64>>,
) -> Result<u64> {
    match tokio::time::timeout(shared.timeout, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(ClientError::Closed),
        Err(_) => Err(ClientError::Timeout(key.0)),
    }
}

impl Drop for AsyncClient {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.shared.out.close();
        data::forget_app(self.shared.pool, self.shared.app);
    }
}
