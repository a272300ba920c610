//! The blocking client: an [`AsyncClient`] on a private one-thread tokio runtime, so its
//! driver keeps serving tickets and stream requests between the application's calls.

use std::future::Future;
use std::time::Duration;

use fabric::Buffer;

use super::{AsyncClient, CdoData, JoinOptions, Result, Subscription, outbox};
use crate::attr::Attributes;
use crate::bootstrap::PmInfo;
use crate::events::{EventKinds, SubscribeOptions};
use crate::proto::{AppId, CdoId};
use crate::selector::Selector;

/// A background operation on a client's runtime ([`Client::spawn`]): waited for with
/// [`Client::join_task`], stopped with [`Task::abort`] (dropping it lets it run on).
pub struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Task<T> {
    /// True once it ended (finished, panicked or aborted).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Stops it at its next await point (what it waited for at the pool manager is given up
    /// as a dropped call's is).
    pub fn abort(&self) {
        self.0.abort();
    }
}

/// How often a bounded wait asks whether it is interrupted ([`Bounds::interrupted`]).
pub const INTERRUPT_POLL: Duration = Duration::from_millis(50);

/// How long [`Client::block_on`] polls at most while short RMA reads of its client are in
/// flight (see `transport::rma::SHORT_READ`; when [`JoinOptions::wait_spin`] is shorter,
/// and not at all when it is zero): as long as a blocking fabric wait drives progress
/// before it sleeps ([`fabric::spin_budget`] of a small read). The read's report comes
/// from the fabric's progress thread; waking a sleeping caller for it cost the reporter
/// 8-10 µs and the caller 14-20 µs more on this project's VM, a third of a 64 KiB demand
/// across two nodes (docs/benchmarks-journal.md, "An RMA read reported by the thread that
/// completes it").
const READ_SPIN: Duration = Duration::from_millis(10);

/// How a blocking wait may end before what it waits for: at a time limit, or when the
/// caller asks it to stop (a Python program's Ctrl-C); and what to say, once, if it lasts.
#[derive(Clone, Copy, Default)]
pub struct Bounds<'a> {
    /// Give up after this long (`None`: no limit).
    pub limit: Option<Duration>,
    /// Asked every [`INTERRUPT_POLL`]; `true` stops the wait.
    pub interrupted: Option<&'a (dyn Fn() -> bool + Sync)>,
    /// Called once if the wait lasts this long (a warning that it may last forever).
    pub notice: Option<(Duration, &'a (dyn Fn() + Sync))>,
}

/// How a bounded wait ended.
#[derive(Debug)]
pub enum Bounded<T> {
    /// What it waited for ended: its outcome.
    Done(T),
    /// Interrupted, but what it waited for could not be called off any more (a demand whose
    /// transfer was under way) and was waited for: its outcome.
    LateInterrupt(T),
    /// Interrupted, and what it waited for called off.
    Interrupted,
    /// The limit passed first (what it waited for stands).
    TimedOut,
}

/// Where [`Bounds::wait`] stopped.
enum Step<T> {
    Done(T),
    TimedOut,
    Interrupted,
}

impl Bounds<'_> {
    /// Waits for `work` until it completes, the limit passes or the caller interrupts (on
    /// the client's runtime: its timers). Cancel safe: `work` is only borrowed.
    async fn wait<F: Future + Unpin>(&self, work: &mut F) -> Step<F::Output> {
        let now = std::time::Instant::now();
        let deadline = self.limit.and_then(|l| now.checked_add(l));
        let mut notice = self
            .notice
            .map(|(after, say)| (now.checked_add(after), say));
        loop {
            tokio::select! {
                r = &mut *work => return Step::Done(r),
                () = crate::sleep_until(deadline) => return Step::TimedOut,
                () = crate::sleep_until(notice.and_then(|(at, _)| at)) => {
                    if let Some((_, say)) = notice.take() {
                        say();
                    }
                }
                () = tokio::time::sleep(INTERRUPT_POLL), if self.interrupted.is_some() => {
                    if self.interrupted.is_some_and(|stop| stop()) {
                        return Step::Interrupted;
                    }
                }
            }
        }
    }
}

/// A joined application, for blocking code. Each call waits at most the join timeout.
///
/// # Examples
///
/// A pool manager in this process, a producer that offers a CDO and a consumer that
/// demands it. Both clients live in one process, so the consumer gets the producer's buffer
/// without a copy; between processes the bytes move by RMA (give [`JoinOptions::endpoint`]
/// or let [`JoinOptions`] choose one) or by stream.
///
/// ```
/// use pool::attr::Attributes;
/// use pool::{Client, JoinOptions, PmConfig, PoolManager};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let listen = vec!["127.0.0.1:0".parse()?];
/// let pm = PoolManager::start(PmConfig::new("demo", b"a workflow secret", listen))?;
/// let producer = Client::join(pm.info(), JoinOptions::new("producer", 0))?;
/// let consumer = Client::join(pm.info(), JoinOptions::new("consumer", 0))?;
///
/// let cdo = producer.declare("temperature")?;
/// producer.seal_and_offer(cdo, Attributes::new(), fabric::Buffer::from_slice(b"21.5")?)?;
///
/// let wanted = consumer.declare("temperature")?;
/// let (data, _attributes) = consumer.demand(wanted)?;
/// assert_eq!(&data[..], b"21.5");
/// drop(data);
///
/// producer.withdraw(cdo)?;
/// producer.dispose(cdo)?;
/// consumer.dispose(wanted)?;
/// producer.leave()?;
/// consumer.leave()?;
/// # Ok(())
/// # }
/// ```
pub struct Client {
    inner: AsyncClient,
    // Dropped after `inner`, whose drop stops the driver tasks on it.
    rt: tokio::runtime::Runtime,
    /// How long a call polls for its answer before sleeping ([`JoinOptions::wait_spin`]).
    spin: std::time::Duration,
}

impl Client {
    /// Joins the PM named by `info`; see [`AsyncClient::join`].
    ///
    /// # Errors
    /// As [`AsyncClient::join`], plus the OS error if the runtime thread cannot start.
    pub fn join(info: &PmInfo, opts: JoinOptions) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pool-client")
            .enable_all()
            .build()?;
        let spin = opts.wait_spin;
        let inner = rt.block_on(AsyncClient::join(info, opts))?;
        Ok(Client { inner, rt, spin })
    }

    /// Runs `f` on the client's runtime until it completes: for pipelining many operations
    /// from blocking code, e.g.
    /// `c.block_on(futures::future::join_all(cdos.iter().map(|&x| c.as_async().demand(x))))`.
    /// Every blocking call waits this way: it first polls `f` on this thread (yielding the
    /// CPU between polls) for up to [`JoinOptions::wait_spin`] (longer while short RMA
    /// reads are in flight: see `READ_SPIN`), then sleeps until woken.
    /// Each poll is corked: the messages the operations polled send go in one write when
    /// the poll returns (see `client/outbox.rs`). A poll that leaves `f` waiting first
    /// helps the client's copy crew with a piece of a same-host copy, if one is queued
    /// (see `client/transport/crew.rs`), and polls again.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let crew = &self.inner.shared.crew;
        if !self.spin.is_zero() {
            // Timers and IO registered while polling here belong to the client's runtime.
            let _in_runtime = self.rt.enter();
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let start = std::time::Instant::now();
            // This thread reads the answers off the PM's rings itself while it spins
            // (their reader tasks are rung again once it stops: before it sleeps).
            let shared = &self.inner.shared;
            let rings = shared.read_rings();
            loop {
                let polled = poll_burst(shared, || outbox::corked(|| f.as_mut().poll(&mut cx)));
                if let std::task::Poll::Ready(v) = polled {
                    return v;
                }
                if rings.progress(shared) || crew.help() {
                    continue;
                }
                // Longer while short reads are in flight: their reports come from the
                // fabric's progress thread, which need not wake a thread that polls.
                let limit = if shared
                    .short_reads
                    .load(std::sync::atomic::Ordering::Acquire)
                    > 0
                {
                    self.spin.max(READ_SPIN)
                } else {
                    self.spin
                };
                if start.elapsed() >= limit {
                    break;
                }
                std::thread::yield_now();
            }
        }
        // Polled again with a real waker, which replaces the no-op one.
        let shared = &self.inner.shared;
        self.rt.block_on(std::future::poll_fn(|cx| {
            let polled = poll_burst(shared, || outbox::corked(|| f.as_mut().poll(cx)));
            if polled.is_pending() && crew.help() {
                // Not asleep yet: polled again at once.
                cx.waker().wake_by_ref();
            }
            polled
        }))
    }

    /// Runs `f` on the client's runtime, in the background (an asynchronous demand, say:
    /// [`AsyncClient::demand_detached`]); [`Client::join_task`] waits for it.
    pub fn spawn<F>(&self, f: F) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Task(self.rt.spawn(f))
    }

    /// Waits for a background `task` within `bounds`; it runs on when the wait ends early.
    /// A task that panicked or was aborted is `Done(Err(why))`.
    pub fn join_task<T>(
        &self,
        task: &mut Task<T>,
        bounds: Bounds<'_>,
    ) -> Bounded<std::result::Result<T, String>> {
        self.block_on(async {
            match bounds.wait(&mut task.0).await {
                Step::Done(r) => Bounded::Done(r.map_err(|e| e.to_string())),
                Step::TimedOut => Bounded::TimedOut,
                Step::Interrupted => Bounded::Interrupted,
            }
        })
    }

    /// Demands `cdo` (landing in `into`, memory the application lends, when given: see
    /// [`AsyncClient::demand_into`]), waiting within `bounds`: past the limit (which may be
    /// longer than the client's timeout) the call returns [`Bounded::TimedOut`] and the
    /// demand stands at the pool manager (a later demand takes it up); without one it waits
    /// the client's timeout, as [`Client::demand`]; when interrupted, the demand is retracted
    /// ([`Bounded::Interrupted`]: the CDO may be demanded again), unless its transfer is
    /// under way: then it lands first ([`Bounded::LateInterrupt`]).
    pub fn demand_bounded(
        &self,
        cdo: CdoId,
        into: Option<Buffer>,
        bounds: Bounds<'_>,
    ) -> Bounded<Result<(CdoData, Attributes)>> {
        // The PM's answer is awaited as long as the limit says (a moment longer, so that
        // the limit decides), not the client's timeout.
        let deadline = bounds
            .limit
            .and_then(|l| std::time::Instant::now().checked_add(l + Duration::from_secs(1)));
        self.block_on(async {
            let mut wait = std::pin::pin!(self.inner.demand_until(cdo, into, deadline));
            match bounds.wait(&mut wait).await {
                Step::Done(r) => Bounded::Done(r),
                Step::TimedOut => Bounded::TimedOut,
                Step::Interrupted if self.inner.retract(cdo).await.is_ok() => Bounded::Interrupted,
                Step::Interrupted => Bounded::LateInterrupt(wait.await),
            }
        })
    }

    /// The async client underneath.
    pub fn as_async(&self) -> &AsyncClient {
        &self.inner
    }

    /// This app's id.
    pub fn app(&self) -> AppId {
        self.inner.app()
    }

    /// See [`AsyncClient::pm_info`].
    pub fn pm_info(&self) -> crate::bootstrap::PmInfo {
        self.inner.pm_info()
    }

    /// See [`AsyncClient::schemas`].
    pub fn schemas(&self) -> &crate::schema::Schemas {
        self.inner.schemas()
    }

    /// See [`AsyncClient::declare`].
    ///
    /// # Errors
    /// `BadName` for an empty or over-long name (checked here); [`CallError::Protocol`](crate::CallError::Protocol)
    /// once the app declared 2^40 - 1 CDOs; [`CallError::Closed`](crate::CallError::Closed) after the connection
    /// ended.
    pub fn declare(&self, name: &str) -> Result<CdoId> {
        self.inner.declare(name)
    }

    /// See [`AsyncClient::phase`].
    pub fn phase(&self, cdo: CdoId) -> Option<crate::CdoPhase> {
        self.inner.phase(cdo)
    }

    /// See [`AsyncClient::seal`].
    ///
    /// # Errors
    /// [`CallError::Attribute`](crate::CallError::Attribute) for attributes the schemas refuse (nothing is sent);
    /// `WrongState` unless declared; connection errors.
    pub fn seal(&self, cdo: CdoId, attributes: Attributes) -> Result<()> {
        self.block_on(self.inner.seal(cdo, attributes))
    }

    /// See [`AsyncClient::offer`].
    ///
    /// # Errors
    /// Registration errors; `WrongState` unless sealed; connection errors.
    pub fn offer(&self, cdo: CdoId, data: Buffer) -> Result<()> {
        self.block_on(self.inner.offer(cdo, data))
    }

    /// See [`AsyncClient::seal_and_offer`].
    ///
    /// # Errors
    /// [`CallError::Attribute`](crate::CallError::Attribute) for attributes the schemas refuse (nothing is sent);
    /// registration errors; `WrongState` (as an offer) unless declared; connection errors.
    pub fn seal_and_offer(&self, cdo: CdoId, attributes: Attributes, data: Buffer) -> Result<()> {
        self.block_on(self.inner.seal_and_offer(cdo, attributes, data))
    }

    /// See [`AsyncClient::offer_many`].
    ///
    /// # Errors
    /// As [`AsyncClient::offer_many`]: the whole call for a bad name or a closed
    /// connection, each offer on its own otherwise.
    pub fn offer_many(&self, offers: Vec<super::NewOffer>) -> Result<Vec<Result<CdoId>>> {
        self.block_on(self.inner.offer_many(offers))
    }

    /// See [`AsyncClient::fetch_many`].
    ///
    /// # Errors
    /// As [`AsyncClient::fetch_many`]: the whole call for a bad name or a closed
    /// connection, each name on its own otherwise.
    pub fn fetch_many(&self, names: &[&str]) -> Result<Vec<Result<(CdoData, Attributes)>>> {
        self.block_on(self.inner.fetch_many(names))
    }

    /// See [`AsyncClient::require`].
    ///
    /// # Errors
    /// `WrongState` unless declared; connection errors.
    pub fn require(&self, cdo: CdoId) -> Result<()> {
        self.block_on(self.inner.require(cdo))
    }

    /// See [`AsyncClient::require_into`].
    ///
    /// # Errors
    /// As [`AsyncClient::require`]; `dst` is the application's again at once then.
    pub fn require_into(&self, cdo: CdoId, dst: Buffer) -> Result<()> {
        self.block_on(self.inner.require_into(cdo, dst))
    }

    /// See [`AsyncClient::demand`].
    ///
    /// # Errors
    /// [`CallError::Timeout`](crate::CallError::Timeout) if nobody offers it in time (the demand stays; retract it or
    /// demand again); `NoProvider` if its providers vanished; connection errors.
    pub fn demand(&self, cdo: CdoId) -> Result<(CdoData, Attributes)> {
        self.block_on(self.inner.demand(cdo))
    }

    /// See [`AsyncClient::demand_into`].
    ///
    /// # Errors
    /// As [`AsyncClient::demand`].
    pub fn demand_into(&self, cdo: CdoId, dst: Buffer) -> Result<(CdoData, Attributes)> {
        self.block_on(self.inner.demand_into(cdo, dst))
    }

    /// See [`AsyncClient::retract`].
    ///
    /// # Errors
    /// `WrongState` if not required or already moving; connection errors.
    pub fn retract(&self, cdo: CdoId) -> Result<()> {
        self.block_on(self.inner.retract(cdo))
    }

    /// See [`AsyncClient::discard`].
    ///
    /// # Errors
    /// `NotAllowed` (refused) when another component owns the name (`maestro pm
    /// --owner`); `BadName`; connection errors.
    pub fn discard(&self, name: &str) -> Result<u64> {
        self.block_on(self.inner.discard(name))
    }

    /// See [`AsyncClient::withdraw`].
    ///
    /// # Errors
    /// `WrongState` unless offered; [`CallError::Timeout`](crate::CallError::Timeout) if a same-process consumer
    /// still holds a borrowed offer after the client's timeout (the offer is withdrawn at the
    /// PM; its memory stays lent until that consumer lets go); connection errors.
    pub fn withdraw(&self, cdo: CdoId) -> Result<Buffer> {
        self.block_on(self.inner.withdraw(cdo))
    }

    /// See [`AsyncClient::dispose`].
    ///
    /// # Errors
    /// `WrongState` while offered or moving; `UnknownCdo` for an id this app did not
    /// declare (or disposed); connection errors.
    pub fn dispose(&self, cdo: CdoId) -> Result<()> {
        self.block_on(self.inner.dispose(cdo))
    }

    /// See [`AsyncClient::offer_group`].
    ///
    /// # Errors
    /// [`CallError::Refused`](crate::CallError::Refused) with `UnknownCdo` for a member this app did not declare; the
    /// first refusal of a member or of the group; registration and connection errors.
    pub fn offer_group(
        &self,
        group: CdoId,
        members: Vec<(CdoId, Option<Attributes>, Buffer)>,
    ) -> Result<()> {
        self.block_on(self.inner.offer_group(group, members))
    }

    /// See [`AsyncClient::demand_group`].
    ///
    /// # Errors
    /// As [`AsyncClient::demand`] for the group and each member (the first error; members
    /// that arrived are disposed); [`CallError::Protocol`](crate::CallError::Protocol) when the CDO of that name is
    /// no group; `Quota` for a group of more than [`GROUP_IDS`](crate::GROUP_IDS) members.
    pub fn demand_group(&self, group: CdoId) -> Result<(Vec<super::GroupMember>, Attributes)> {
        self.block_on(self.inner.demand_group(group))
    }

    /// See [`AsyncClient::withdraw_group`].
    ///
    /// # Errors
    /// The first refusal (`WrongState` unless offered); connection errors.
    pub fn withdraw_group(&self, group: CdoId, members: &[CdoId]) -> Result<Vec<Buffer>> {
        self.block_on(self.inner.withdraw_group(group, members))
    }

    /// See [`AsyncClient::report`].
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) when the connection is gone.
    pub fn report(&self, change: crate::events::FabricChange) -> Result<()> {
        self.inner.report(change)
    }

    /// See [`AsyncClient::selector`].
    ///
    /// # Errors
    /// [`ClientError::Selector`](super::ClientError::Selector) pointing at the column of the problem.
    pub fn selector(&self, text: &str, namespace: &str) -> Result<Selector> {
        self.inner.selector(text, namespace)
    }

    /// See [`AsyncClient::subscribe`]; wait for events with [`Subscription::wait`].
    ///
    /// # Errors
    /// `BadSelector` if the PM cannot compile it; timeout and connection errors.
    pub fn subscribe(
        &self,
        selector: &Selector,
        kinds: impl Into<EventKinds>,
        options: SubscribeOptions,
    ) -> Result<Subscription> {
        self.block_on(self.inner.subscribe(selector, kinds, options))
    }

    /// See [`Subscription::unsubscribe`].
    ///
    /// # Errors
    /// [`CallError::Timeout`](crate::CallError::Timeout) when the PM does not answer in time;
    /// [`CallError::Closed`](crate::CallError::Closed) when the connection is gone.
    pub fn unsubscribe(&self, sub: Subscription) -> Result<()> {
        self.block_on(sub.unsubscribe())
    }

    /// See [`AsyncClient::leave`].
    ///
    /// # Errors
    /// Timeout and connection errors.
    pub fn leave(self) -> Result<()> {
        let Client { inner, rt, .. } = self;
        rt.block_on(inner.leave())
    }
}

/// One poll of an application's future in [`Client::block_on`], as a burst: the copies of
/// small CDOs its leased demands start are made together at the poll's end (see
/// [`SMALL`](super::transport::burst::SMALL)).
fn poll_burst<R>(shared: &std::sync::Arc<super::Shared>, poll: impl FnOnce() -> R) -> R {
    super::transport::burst::during(shared, super::transport::burst::SMALL, poll)
}
