//! Pool clients: [`AsyncClient`] (tokio) and the blocking [`Client`] built on it. Both join
//! the pool manager with proof of the workflow secret and run the CDO operations named after
//! Maestro's (`declare`, `seal`, `offer`, `require`, `demand`, `withdraw`, `retract`,
//! `dispose`).
//!
//! What the client knows and waits for, from the JOIN handshake on, and every call's
//! deadline live in the protocol's sans-IO core ([`pool_core::client::Sharded`]: one
//! [`pool_core::client::ClientCore`] per shard of the pool the app uses, one for a pool
//! of one manager); this module and its children are its driver: every operation is a
//! step of the core under its lock (`shared`: `Shared::with_core`), whose messages are
//! written at once by the caller's thread (`outbox`, one per shard) and whose events
//! (answers, tickets, stream pieces, subscriptions' news) are carried out after the lock
//! is released; a timer task sleeps until the core's earliest deadline (`Shared::timer`).
//! A task per shard's control connection (`reclaim`; opened when the app first needs that
//! shard) keeps reading and writing it whether or not the application is inside a call:
//! tickets are carried out at once (RMA read, same-process hand-over, a copy out of
//! a same-host provider's memory, batched per provider for a burst of them (`burst`), or
//! stream, as the PM planned) and reported, and stream requests for this app's offers are
//! served. Operations issued without waiting for each other (e.g. `join_all` over many
//! `offer`s) are pipelined, and the PM answers a batch of them in one frame.

mod batch;
mod blocking;
mod data;
mod drains;
mod driver;
mod gfs;
mod group;
mod join;
mod link;
mod observer;
mod offer;
mod options;
mod outbox;
mod reclaim;
mod shared;
mod subscription;
mod transport;

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use fabric::Buffer;
use pool_core::client::{CallError, Demand, Route};
use tokio::sync::oneshot;

pub use batch::{BATCH_STEP, NewOffer};
pub use blocking::{Bounded, Bounds, Client, INTERRUPT_POLL, Task};
pub use data::CdoData;
pub use gfs::{GfsOptions, KEPT_FOR_TAKER, KeptOfGone, sweep as sweep_gfs};
pub(crate) use gfs::{
    ORPHANED, POOL_MARKER, host_prefix as gfs_host_prefix, process_dir as gfs_process_dir,
};
pub use group::GroupMember;
pub use observer::{Ended, Observer};
pub use options::{DEFAULT_INLINE_MAX, DEFAULT_WAIT_SPIN, JoinOptions};
pub use pool_core::client::{GROUP_IDS, Phase as CdoPhase};
pub use reclaim::{Finder, ReclaimOptions};
pub use subscription::Subscription;

use crate::attr::Attributes;
use crate::bootstrap::PmInfo;
use crate::events::{EventKinds, SubscribeOptions};
use crate::proto::{self, AppId, CdoId, Op};
use crate::schema::Schemas;
use crate::selector::{Selector, SelectorError};
pub(crate) use join::{Endpoints, join_message};
pub use join::{bare_join, welcome};
use shared::{Core, Shared, answer, ask};
use subscription::EventQueue;

/// What can go wrong for a client: a call the protocol's core failed ([`ClientError::Call`],
/// whose [`CallError`] says how: refused with the PM's reason, no answer in time, the
/// connection ended, ...), or what the driver around it met (the connection, the fabric,
/// the schemas, the global file system).
///
/// # Examples
///
/// What a caller matches on: the PM's reason for a refusal.
///
/// ```
/// use pool::proto::{Op, Refusal};
/// use pool::{CallError, ClientError};
///
/// fn already_offered(e: &ClientError) -> bool {
///     matches!(
///         e,
///         ClientError::Call(CallError::Refused {
///             op: Op::Offer,
///             why: Refusal::WrongState { .. },
///         })
///     )
/// }
/// # let _ = already_offered;
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A call failed as the client's protocol core tells it (see [`CallError`]).
    #[error(transparent)]
    Call(#[from] CallError),
    /// The control connection failed.
    #[error("pool manager connection: {0}")]
    Io(#[from] std::io::Error),
    /// The PM sent a bad frame.
    #[error("pool manager sent a bad frame: {0}")]
    Frame(#[from] proto::FrameError),
    /// None of the PM's endpoints could be reached.
    #[error("no pool manager endpoint answered ({0}); is the PM running and the PM info current?")]
    Unreachable(String),
    /// A fabric error while moving data.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// The attribute schemas could not be loaded.
    #[error(transparent)]
    Schema(#[from] crate::schema::SchemaError),
    /// No libfabric endpoint could be chosen (the reason says which setting or provider).
    #[error("no fabric endpoint: {0}")]
    NoFabric(String),
    /// A selector did not parse.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// The PM ended the subscription: it missed an acknowledgement deadline (the reason).
    #[error(
        "the pool manager ended this subscription: {0}; acknowledge events sooner, or subscribe without require-ack"
    )]
    SubscriptionEnded(String),
    /// The global file system could not be used (the reason says what to change).
    #[error("global file system: {0}")]
    Gfs(String),
}

impl From<crate::schema::AttrError> for ClientError {
    fn from(e: crate::schema::AttrError) -> ClientError {
        ClientError::Call(CallError::Attribute(e))
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ClientError>;

/// The most bytes of landing buffers a client keeps registered for reuse.
pub const LANDING_POOL_BYTES: usize = 1 << 30;

/// The most bytes of address space a client's views of same-host providers' slabs take
/// ([`fabric::cma::Views`]): the pages are the providers', which they hold anyway, so
/// this bounds mappings, not memory, while the providers keep their slabs.
pub const VIEWS_BYTES: u64 = 4 << 30;

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
}

impl AsyncClient {
    /// This app's id.
    pub fn app(&self) -> AppId {
        self.shared.app
    }

    /// The PM info of the pool manager this app is joined to now: the one it joined, or,
    /// after it rode out the loss of that one ([`JoinOptions::reclaim`]), the one that
    /// took over. What to hand another job that is to join the same pool.
    pub fn pm_info(&self) -> PmInfo {
        self.shared.pm_info()
    }

    /// Reports a fabric change this app's PMIx host raised to the pool manager (for a PM
    /// outside the app's job, which does not hear that host; see
    /// [`crate::pmix_events::forward`]). Nothing is answered.
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) when the connection is gone.
    pub fn report(&self, change: crate::events::FabricChange) -> Result<()> {
        self.shared.with_core(|c| c.report(&change))
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
        let queue = Arc::new(EventQueue::default());
        let wanted = (kinds.into(), selector.expr().clone(), options);
        // Unless this call hands out the subscription, its end (error, timeout, dropped
        // future) ends the subscription: one the PM set up already now, one it sets up
        // later when its answer comes.
        struct Forget<'a> {
            shared: &'a Arc<Shared>,
            sub: u64,
            handed_out: bool,
        }
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                if !self.handed_out {
                    let sub = self.sub;
                    let _ = self.shared.with_core(|c| {
                        c.drop_subscription(sub);
                        Ok(())
                    });
                }
            }
        }
        let (tx, rx) = oneshot::channel();
        let events = queue.clone();
        let sub = self
            .shared
            .with_core(|c| c.subscribe(Instant::now(), wanted, events, tx))?;
        let mut forget = Forget {
            shared: &self.shared,
            sub,
            handed_out: false,
        };
        // Given up, the subscription's parts are ended (`Forget`): no call to abandon.
        let id = answer(&self.shared, (Op::Subscribe, sub), None, rx).await?;
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
    /// `BadName` for an empty or over-long name (checked here); [`CallError::Protocol`](crate::CallError::Protocol)
    /// once the app declared 2^40 - 1 CDOs; [`CallError::Closed`](crate::CallError::Closed) after the connection
    /// ended.
    pub fn declare(&self, name: &str) -> Result<CdoId> {
        self.shared.with_core(|c| c.declare(Instant::now(), name))
    }

    /// How far `cdo` went as a producer's CDO, as the pool manager confirmed it (declared,
    /// sealed, offered): what Maestro's API allows next. `None` for an id this app did not
    /// declare, or disposed.
    pub fn phase(&self, cdo: CdoId) -> Option<CdoPhase> {
        self.shared.core().phase(cdo)
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
    /// [`CallError::Attribute`](crate::CallError::Attribute) for attributes the schemas refuse (nothing is sent);
    /// `WrongState` unless declared; connection errors.
    pub async fn seal(&self, cdo: CdoId, attributes: Attributes) -> Result<()> {
        ask(&self.shared, (Op::Seal, cdo), |c, now, waiter| {
            c.seal(now, cdo, attributes, waiter)
        })
        .await
        .map(drop)
    }

    /// Offers a sealed CDO's bytes. They stay readable by consumers (registered with the
    /// fabric when the app has an endpoint) until [`AsyncClient::withdraw`] gives them back.
    ///
    /// # Errors
    /// Registration errors; `WrongState` unless sealed; connection errors.
    pub async fn offer(&self, cdo: CdoId, data: Buffer) -> Result<()> {
        self.offer_with(cdo, data, None).await
    }

    /// Seals a declared CDO with its attributes and offers its bytes in one message (one
    /// round trip, one answer): as [`AsyncClient::seal`] then [`AsyncClient::offer`]. When
    /// the attributes ask for end-to-end integrity ([`crate::attr::INTEGRITY`]), the
    /// checksum of `data` is sealed with them and consumers check it on arrival.
    ///
    /// # Errors
    /// [`CallError::Attribute`](crate::CallError::Attribute) for attributes the schemas refuse (nothing is sent);
    /// registration errors; `WrongState` (as an offer) unless declared; connection errors.
    pub async fn seal_and_offer(
        &self,
        cdo: CdoId,
        attributes: Attributes,
        data: Buffer,
    ) -> Result<()> {
        self.offer_with(cdo, data, Some(attributes)).await
    }

    /// Makes `data` readable by consumers (registered with every endpoint the app has),
    /// has the core send the offer (sealing with `seal` first, if given), and takes the
    /// data back if refused.
    async fn offer_with(&self, cdo: CdoId, data: Buffer, seal: Option<Attributes>) -> Result<()> {
        let gfs = self.gfs_for(cdo, seal.as_ref())?;
        let carried = gfs.is_none() && self.shared.core().carries(data.len());
        let ready = offer::Ready::make(&self.shared, cdo, data, (gfs, carried)).await?;
        let r = ask(&self.shared, (Op::Offer, cdo), move |c, now, waiter| {
            ready.offer(c, now, seal, waiter)
        })
        .await;
        if r.is_err() {
            offer::forget(&self.shared, cdo);
        }
        r.map(drop)
    }

    /// Declares the intent to consume `cdo`: the PM may move it right away.
    ///
    /// # Errors
    /// `WrongState` unless declared; connection errors.
    pub async fn require(&self, cdo: CdoId) -> Result<()> {
        ask(&self.shared, (Op::Require, cdo), |c, now, waiter| {
            c.require(now, cdo, waiter)
        })
        .await
        .map(drop)
    }

    /// As [`AsyncClient::require`], the bytes to land in `dst`, memory the application
    /// lends (see [`Buffer::borrowed`]): when the transfer the require starts moves them by
    /// RMA or straight from a same-host provider's memory and the CDO fits, the later
    /// demand's data *is* `dst`'s memory (Maestro's user memory set before a require). `dst`
    /// stays lent until a demand of `cdo` returns or `cdo` is disposed: the caller keeps it
    /// alive and untouched until then.
    ///
    /// # Errors
    /// As [`AsyncClient::require`]; `dst` is the application's again at once then.
    pub async fn require_into(&self, cdo: CdoId, dst: Buffer) -> Result<()> {
        self.shared.core().lend(cdo, dst);
        let r = self.require(cdo).await;
        if r.is_err() {
            self.shared.core().unlend(cdo);
        }
        r
    }

    /// Waits until `cdo` is local (offered by someone and moved here) and returns its bytes
    /// and the attributes it was sealed with. A CDO whose `require` already brought it here
    /// returns at once, without a round trip to the pool manager.
    ///
    /// # Errors
    /// [`CallError::Timeout`](crate::CallError::Timeout) if nobody offers it in time (the demand stays; retract it or
    /// demand again); `NoProvider` if its providers vanished; connection errors.
    pub async fn demand(&self, cdo: CdoId) -> Result<(CdoData, Attributes)> {
        demand(&self.shared, cdo, None).await
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
        self.demand_until(cdo, dst, None)
    }

    /// As [`AsyncClient::demand_detached`], waiting for the PM's answer until `deadline`
    /// instead of the client's timeout, when given (a demand with a limit of its own).
    pub(crate) fn demand_until(
        &self,
        cdo: CdoId,
        dst: Option<Buffer>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<(CdoData, Attributes)>> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            if let Some(dst) = dst {
                shared.core().lend(cdo, dst);
            }
            let result = demand(&shared, cdo, deadline).await;
            // Unused (or the demand failed): the memory lent here or by `require_into` is
            // the application's again.
            shared.core().unlend(cdo);
            result
        }
    }

    /// As [`AsyncClient::demand`], with the bytes landing in `dst`, memory the application
    /// lends (see [`Buffer::borrowed`]): when the transfer starts after this call, the CDO
    /// fits and it moves by RMA or straight from a same-host provider's memory, the
    /// returned data *is* `dst`'s memory (check with [`CdoData::as_ptr`]), and nothing is
    /// copied besides the transfer itself. Otherwise (it arrived before, by a `require`
    /// (lend with [`AsyncClient::require_into`] then); a
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
        ask(&self.shared, (Op::Retract, cdo), |c, now, waiter| {
            c.retract(now, cdo, waiter)
        })
        .await
        .map(drop)
    }

    /// Takes an offer back once no transfer reads from it; returns the buffer (a copy of it
    /// if a consumer in this process still holds the original). A [`Buffer::borrowed`]
    /// offer is returned only once no consumer in this process holds it (the caller may
    /// free that memory next). An offer written to the global file system is handed over
    /// to a PM that keeps such files: the pool offers it from then on, after this app is
    /// gone (a PM that cannot keep it says why in this app's log, and the CDO ends here).
    ///
    /// # Errors
    /// `WrongState` unless offered; [`CallError::Timeout`](crate::CallError::Timeout) if a same-process consumer
    /// still holds a borrowed offer after the client's timeout (the offer is withdrawn at the
    /// PM; its memory stays lent until that consumer lets go); connection errors.
    pub async fn withdraw(&self, cdo: CdoId) -> Result<Buffer> {
        ask(&self.shared, (Op::Withdraw, cdo), |c, now, waiter| {
            c.withdraw(now, cdo, waiter)
        })
        .await?;
        // Its file on the global file system, if it went there: no consumer reads it now.
        if let Some(g) = &self.shared.gfs {
            g.remove(cdo);
        }
        let key = (self.shared.pool(), self.shared.app, cdo);
        // The application's own memory goes back only when no consumer in this process
        // reads it any more (they dispose their handle or drop their `CdoData`).
        let returned = data::until_returned(&key);
        tokio::pin!(returned);
        let patience = Duration::from_secs(1).min(self.shared.timeout);
        if tokio::time::timeout(patience, &mut returned).await.is_err() {
            tracing::warn!(
                "withdraw of CDO {cdo} waits until a consumer in this process lets go of the offered memory (disposes its handle and drops every view of the data)"
            );
            let rest = self.shared.timeout.saturating_sub(patience);
            if tokio::time::timeout(rest, returned).await.is_err() {
                return Err(ClientError::Call(CallError::Timeout(Op::Withdraw)));
            }
        }
        match data::take_back(&key) {
            Some(b) => Ok(b?),
            None => Err(ClientError::Call(CallError::Protocol(format!(
                "withdrew CDO {cdo} that this client did not offer"
            )))),
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
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        let dispose = |c: &mut Core| {
            c.dispose(now, cdo, tx)
                .map(|call| (c.shard_of(Route::Cdo(cdo)), call))
        };
        match self.shared.with_core(dispose)? {
            (_, None) => Ok(()),
            (shard, Some(call)) => {
                answer(&self.shared, (Op::Dispose, cdo), Some((shard, call)), rx)
                    .await
                    .map(drop)
            }
        }
    }

    /// Leaves the workflow; returns once the PM says BYE (when no consumer still needs this
    /// app's offers).
    ///
    /// # Errors
    /// Timeout and connection errors.
    pub async fn leave(self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let call = self
            .shared
            .with_core(|c| c.leave(Instant::now(), tx))?
            .map(|call| (0, call));
        answer(&self.shared, (Op::Leave, 0), call, rx)
            .await
            .map(drop)
    }
}

/// The demand of [`AsyncClient::demand`], on the client's shared state.
/// Demands `cdo`, its answer awaited until `deadline` when given, else the client's timeout.
async fn demand(
    shared: &Arc<Shared>,
    cdo: CdoId,
    deadline: Option<Instant>,
) -> Result<(CdoData, Attributes)> {
    let (tx, rx) = oneshot::channel();
    let now = Instant::now();
    // A lease may serve it: the core is told how current its lease table is.
    let (shard, demanded) = shared.with_core_current(now, |c| {
        let d = c.demand(now, cdo, tx)?;
        if let (Demand::Waiting(call), Some(at)) = (&d, deadline) {
            c.set_deadline((Op::Demand, cdo), *call, Some(at));
        }
        Ok((c.shard_of(Route::Cdo(cdo)), d))
    })?;
    match demanded {
        Demand::Here(data, attributes) => {
            tracing::trace!("demand of CDO {cdo}: required and here already");
            Ok((data, attributes))
        }
        Demand::Waiting(call) => {
            answer(shared, (Op::Demand, cdo), Some((shard, call)), rx).await?;
            Ok(shared.core().take_arrived(cdo)?)
        }
    }
}

impl Drop for AsyncClient {
    fn drop(&mut self) {
        for t in self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            t.abort();
        }
        for out in &self.shared.outs {
            out.close();
        }
        self.shared.crew.close();
        data::forget_app(self.shared.pool(), self.shared.app);
    }
}
