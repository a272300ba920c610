//! The blocking client: an [`AsyncClient`] on a private one-thread tokio runtime, so its
//! driver keeps serving tickets and stream requests between the application's calls.

use std::future::Future;

use fabric::Buffer;

use super::{AsyncClient, CdoData, JoinOptions, Result, Subscription};
use crate::attr::Attributes;
use crate::bootstrap::PmInfo;
use crate::events::{EventKinds, SubscribeOptions};
use crate::proto::{AppId, CdoId};
use crate::selector::Selector;

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
    /// CPU between polls) for up to [`JoinOptions::wait_spin`], then sleeps until woken.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        if !self.spin.is_zero() {
            // Timers and IO registered while polling here belong to the client's runtime.
            let _in_runtime = self.rt.enter();
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let start = std::time::Instant::now();
            loop {
                if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    return v;
                }
                if start.elapsed() >= self.spin {
                    break;
                }
                std::thread::yield_now();
            }
        }
        // Polled again with a real waker, which replaces the no-op one.
        self.rt.block_on(f)
    }

    /// Runs `f` on the client's runtime, in the background (an asynchronous demand, say:
    /// [`AsyncClient::demand_detached`]).
    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.spawn(f)
    }

    /// The async client underneath.
    pub fn as_async(&self) -> &AsyncClient {
        &self.inner
    }

    /// This app's id.
    pub fn app(&self) -> AppId {
        self.inner.app()
    }

    /// See [`AsyncClient::schemas`].
    pub fn schemas(&self) -> &crate::schema::Schemas {
        self.inner.schemas()
    }

    /// See [`AsyncClient::declare`].
    ///
    /// # Errors
    /// As there.
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
    /// As there.
    pub fn seal(&self, cdo: CdoId, attributes: Attributes) -> Result<()> {
        self.block_on(self.inner.seal(cdo, attributes))
    }

    /// See [`AsyncClient::offer`].
    ///
    /// # Errors
    /// As there.
    pub fn offer(&self, cdo: CdoId, data: Buffer) -> Result<()> {
        self.block_on(self.inner.offer(cdo, data))
    }

    /// See [`AsyncClient::seal_and_offer`].
    ///
    /// # Errors
    /// As there.
    pub fn seal_and_offer(&self, cdo: CdoId, attributes: Attributes, data: Buffer) -> Result<()> {
        self.rt
            .block_on(self.inner.seal_and_offer(cdo, attributes, data))
    }

    /// See [`AsyncClient::require`].
    ///
    /// # Errors
    /// As there.
    pub fn require(&self, cdo: CdoId) -> Result<()> {
        self.block_on(self.inner.require(cdo))
    }

    /// See [`AsyncClient::demand`].
    ///
    /// # Errors
    /// As there.
    pub fn demand(&self, cdo: CdoId) -> Result<(CdoData, Attributes)> {
        self.block_on(self.inner.demand(cdo))
    }

    /// See [`AsyncClient::demand_into`].
    ///
    /// # Errors
    /// As there.
    pub fn demand_into(&self, cdo: CdoId, dst: Buffer) -> Result<(CdoData, Attributes)> {
        self.block_on(self.inner.demand_into(cdo, dst))
    }

    /// See [`AsyncClient::retract`].
    ///
    /// # Errors
    /// As there.
    pub fn retract(&self, cdo: CdoId) -> Result<()> {
        self.block_on(self.inner.retract(cdo))
    }

    /// See [`AsyncClient::withdraw`].
    ///
    /// # Errors
    /// As there.
    pub fn withdraw(&self, cdo: CdoId) -> Result<Buffer> {
        self.block_on(self.inner.withdraw(cdo))
    }

    /// See [`AsyncClient::dispose`].
    ///
    /// # Errors
    /// As there.
    pub fn dispose(&self, cdo: CdoId) -> Result<()> {
        self.block_on(self.inner.dispose(cdo))
    }

    /// See [`AsyncClient::offer_group`].
    ///
    /// # Errors
    /// As there.
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
    /// As there.
    pub fn demand_group(&self, group: CdoId) -> Result<(Vec<super::GroupMember>, Attributes)> {
        self.block_on(self.inner.demand_group(group))
    }

    /// See [`AsyncClient::withdraw_group`].
    ///
    /// # Errors
    /// As there.
    pub fn withdraw_group(&self, group: CdoId, members: &[CdoId]) -> Result<Vec<Buffer>> {
        self.block_on(self.inner.withdraw_group(group, members))
    }

    /// See [`AsyncClient::report`].
    ///
    /// # Errors
    /// As there.
    pub fn report(&self, change: crate::events::FabricChange) -> Result<()> {
        self.inner.report(change)
    }

    /// See [`AsyncClient::selector`].
    ///
    /// # Errors
    /// As there.
    pub fn selector(&self, text: &str, namespace: &str) -> Result<Selector> {
        self.inner.selector(text, namespace)
    }

    /// See [`AsyncClient::subscribe`]; wait for events with [`Subscription::wait`].
    ///
    /// # Errors
    /// As there.
    pub fn subscribe(
        &self,
        selector: &Selector,
        kinds: impl Into<EventKinds>,
        options: SubscribeOptions,
    ) -> Result<Subscription> {
        self.rt
            .block_on(self.inner.subscribe(selector, kinds, options))
    }

    /// See [`Subscription::unsubscribe`].
    ///
    /// # Errors
    /// As there.
    pub fn unsubscribe(&self, sub: Subscription) -> Result<()> {
        self.block_on(sub.unsubscribe())
    }

    /// See [`AsyncClient::leave`].
    ///
    /// # Errors
    /// As there.
    pub fn leave(self) -> Result<()> {
        let Client { inner, rt, .. } = self;
        rt.block_on(inner.leave())
    }
}
