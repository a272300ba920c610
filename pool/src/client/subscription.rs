//! Subscriptions on the client side: the reader task files each event of a subscription in
//! its queue; the application takes them with `poll`, `wait` or `wait_timeout` (blocking),
//! or `next`/`next_timeout` (async), and acknowledges those that need it.

use crate::CallError;
use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{ClientError, Result, Shared};
use crate::events::{PoolEvent, SubId};
use crate::proto::Op;

/// One subscription's queue, shared by the reader task and the [`Subscription`].
#[derive(Default)]
pub(crate) struct EventQueue {
    inner: Mutex<QueueInner>,
    /// Wakes blocking waiters.
    cv: Condvar,
    /// Wakes async waiters (keeps a permit, so no wake-up is lost).
    notify: tokio::sync::Notify,
}

#[derive(Default)]
struct QueueInner {
    events: VecDeque<PoolEvent>,
    /// The connection ended: no more events.
    closed: bool,
    /// The PM ended the subscription (why): no more events.
    ended: Option<String>,
    /// Serials whose acknowledgement the PM gave up waiting for.
    late: BTreeSet<u64>,
    /// Threads blocked on the condition variable: only then does a new event notify it
    /// (a notification is a system call even when nobody waits, and the reader files an
    /// event per offer: 18 % of its time at 8 B before).
    sleepers: usize,
}

impl EventQueue {
    fn lock(&self) -> MutexGuard<'_, QueueInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files an event (reader task).
    pub(crate) fn push(&self, event: PoolEvent) {
        let mut q = self.lock();
        q.events.push_back(event);
        self.wake(q);
    }

    /// Notes an acknowledgement that came too late (reader task).
    pub(crate) fn late(&self, serial: u64) {
        self.lock().late.insert(serial);
    }

    /// No more events will come (the connection ended).
    pub(crate) fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        self.wake(q);
    }

    /// The PM ended the subscription: no more events will come, for `why`.
    pub(crate) fn end(&self, why: String) {
        let mut q = self.lock();
        q.closed = true;
        q.ended = Some(why);
        self.wake(q);
    }

    /// Wakes the waiters of the queue `q` just changed (its lock let go first): blocked
    /// threads only when there are some, async waiters always (a permit if none waits).
    fn wake(&self, q: MutexGuard<'_, QueueInner>) {
        let sleepers = q.sleepers > 0;
        drop(q);
        if sleepers {
            self.cv.notify_all();
        }
        self.notify.notify_one();
    }

    /// Blocks on the queue while `more` says so (or `timeout` passes); the queue, still
    /// locked. Counted among the sleepers meanwhile (under the lock before it is let go in
    /// the wait: a push sees it).
    fn wait_while(
        &self,
        timeout: Duration,
        more: impl FnMut(&mut QueueInner) -> bool,
    ) -> MutexGuard<'_, QueueInner> {
        let mut q = self.lock();
        q.sleepers += 1;
        let (mut q, _) = self
            .cv
            .wait_timeout_while(q, timeout, more)
            .unwrap_or_else(PoisonError::into_inner);
        q.sleepers -= 1;
        q
    }

    /// The next event, `Ok(None)` if none yet, `Err(Closed)` if none will come.
    fn take(&self) -> Result<Option<PoolEvent>> {
        self.lock().take()
    }
}

impl QueueInner {
    /// As [`EventQueue::take`], under the lock.
    fn take(&mut self) -> Result<Option<PoolEvent>> {
        match self.events.pop_front() {
            Some(e) => Ok(Some(e)),
            None if self.closed => Err(match &self.ended {
                Some(why) => ClientError::SubscriptionEnded(why.clone()),
                None => ClientError::Call(CallError::Closed),
            }),
            None => Ok(None),
        }
    }
}

/// A subscription to pool events (see [`crate::events`]). Events come in order; those with
/// [`PoolEvent::needs_ack`] hold an operation until [`Subscription::ack`].
///
/// Dropping it ends the subscription at the PM without waiting (operations held for its
/// acknowledgements go on); [`Subscription::unsubscribe`] does the same and waits for the
/// PM's answer.
///
/// # Examples
///
/// A tracer that hears of every offer whose attributes match a selector.
///
/// ```
/// use std::time::Duration;
///
/// use pool::attr::{AttrValue, Attributes};
/// use pool::events::{EventKind, SubscribeOptions};
/// use pool::{Client, JoinOptions, PmConfig, PoolManager};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let listen = vec!["127.0.0.1:0".parse()?];
/// let pm = PoolManager::start(PmConfig::new("demo", b"a workflow secret", listen))?;
/// let tracer = Client::join(pm.info(), JoinOptions::new("tracer", 0))?;
/// let producer = Client::join(pm.info(), JoinOptions::new("producer", 0))?;
///
/// let large = tracer.selector("(> .maestro.core.cdo.scope.local-size 2)", "")?;
/// let offers = tracer.subscribe(&large, EventKind::Offer, SubscribeOptions::default())?;
///
/// for (name, bytes) in [("small", &b"ab"[..]), ("large", &b"abcd"[..])] {
///     let cdo = producer.declare(name)?;
///     producer.seal_and_offer(cdo, Attributes::new(), fabric::Buffer::from_slice(bytes)?)?;
/// }
/// let event = offers.wait_timeout(Duration::from_secs(10))?.expect("an offer event");
/// assert_eq!(event.kind, EventKind::Offer);
/// assert_eq!(event.cdo.as_deref(), Some("large"));
/// assert_eq!(
///     event.attributes.get(".maestro.core.cdo.scope.local-size"),
///     Some(&AttrValue::Uint(4))
/// );
/// # Ok(())
/// # }
/// ```
pub struct Subscription {
    pub(crate) id: SubId,
    pub(crate) queue: Arc<EventQueue>,
    pub(crate) shared: Arc<Shared>,
    /// Ended by `unsubscribe` (nothing left for drop to do).
    pub(crate) ended: bool,
}

impl Subscription {
    /// The subscription's id at the PM.
    pub fn id(&self) -> SubId {
        self.id
    }

    /// The next event if one is there, without waiting.
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) when no event is left and none will come.
    pub fn poll(&self) -> Result<Option<PoolEvent>> {
        self.took(self.queue.take())
    }

    /// Counts the event taken, if one was, against the subscription's window at the PM
    /// (which sends the next events as the app takes these: see
    /// [`crate::events::EVENT_WINDOW`]); `taken` as it was.
    fn took(&self, taken: Result<Option<PoolEvent>>) -> Result<Option<PoolEvent>> {
        if let Ok(Some(e)) = &taken {
            self.took_all(std::slice::from_ref(e));
        }
        taken
    }

    /// As [`Subscription::took`], for each of `events`.
    fn took_all(&self, events: &[PoolEvent]) {
        let sub = self.id;
        // A connection that ended sends nothing more; its events stopped already.
        let _ = self.shared.with_core(|c| {
            events.iter().for_each(|e| c.took(sub, e.serial));
            Ok(())
        });
    }

    /// Blocks until at least `count` events wait in the queue, or the connection ended, or
    /// `timeout` passed (for a consumer that takes events in batches); how many wait then:
    /// at most a window's worth ([`crate::events::EVENT_WINDOW`]) beyond a replay's.
    ///
    /// Do not call this on a thread of a tokio runtime.
    pub fn wait_queued(&self, count: usize, timeout: Duration) -> usize {
        let more = |q: &mut QueueInner| q.events.len() < count && !q.closed;
        self.queue.wait_while(timeout, more).events.len()
    }

    /// Every event queued now, oldest first, without waiting (empty if none).
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) when no event is left and none will come.
    pub fn drain(&self) -> Result<Vec<PoolEvent>> {
        let mut q = self.queue.lock();
        if q.events.is_empty() {
            q.take()?;
        }
        let all: Vec<PoolEvent> = q.events.drain(..).collect();
        drop(q);
        self.took_all(&all);
        Ok(all)
    }

    /// Blocks until the next event (or `timeout` passes: `Ok(None)`).
    ///
    /// Do not call this on a thread of a tokio runtime; use [`Subscription::next_timeout`].
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) when the connection ended.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<Option<PoolEvent>> {
        let mut q = (self.queue).wait_while(timeout, |q| q.events.is_empty() && !q.closed);
        let taken = q.take();
        drop(q);
        self.took(taken)
    }

    /// Blocks until the next event, at most the client's timeout.
    ///
    /// # Errors
    /// [`CallError::Timeout`](crate::CallError::Timeout) (op `subscribe`) when nothing came in time;
    /// [`CallError::Closed`](crate::CallError::Closed).
    pub fn wait(&self) -> Result<PoolEvent> {
        self.wait_timeout(self.shared.timeout)?
            .ok_or(ClientError::Call(CallError::Timeout(Op::Subscribe)))
    }

    /// Waits for the next event (or `timeout`: `Ok(None)`).
    ///
    /// # Cancel safety
    /// Cancel safe: an event is taken from the queue only when this returns it.
    ///
    /// # Errors
    /// [`CallError::Closed`](crate::CallError::Closed) when the connection ended.
    pub async fn next_timeout(&self, timeout: Duration) -> Result<Option<PoolEvent>> {
        let waiting = async {
            loop {
                if let Some(e) = self.took(self.queue.take())? {
                    return Ok(e);
                }
                self.queue.notify.notified().await;
            }
        };
        match tokio::time::timeout(timeout, waiting).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// Waits for the next event, at most the client's timeout.
    ///
    /// # Errors
    /// As [`Subscription::wait`].
    pub async fn next(&self) -> Result<PoolEvent> {
        self.next_timeout(self.shared.timeout)
            .await?
            .ok_or(ClientError::Call(CallError::Timeout(Op::Subscribe)))
    }

    /// Acknowledges `event`, letting the operation it holds go on. Events that need no
    /// acknowledgement are accepted and ignored.
    ///
    /// # Errors
    /// [`CallError::AckTooLate`](crate::CallError::AckTooLate) if the PM stopped waiting for it already (the operation
    /// went on without it); [`CallError::Closed`](crate::CallError::Closed).
    pub fn ack(&self, event: &PoolEvent) -> Result<()> {
        if !event.needs_ack {
            return Ok(());
        }
        let (sub, serial) = (self.id, event.serial);
        self.shared.with_core(|c| c.ack(sub, serial))
    }

    /// Serials of events whose acknowledgement the PM gave up waiting for.
    pub fn late_acks(&self) -> Vec<u64> {
        self.queue.lock().late.iter().copied().collect()
    }

    /// Ends the subscription at the PM (operations waiting for its acks go on).
    ///
    /// # Errors
    /// [`CallError::Timeout`](crate::CallError::Timeout) when the PM does not answer in time;
    /// [`CallError::Closed`](crate::CallError::Closed) when the connection is gone.
    pub async fn unsubscribe(mut self) -> Result<()> {
        self.ended = true;
        let sub = self.id;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self
            .shared
            .with_core(|c| c.unsubscribe(std::time::Instant::now(), sub, tx))?;
        // Nothing to give up when the wait is dropped: no other call waits under this key.
        super::answer(&self.shared, (Op::Unsubscribe, sub), None, rx)
            .await
            .map(drop)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let sub = self.id;
        // Nobody waits for the answer; a closed connection ended it anyway.
        let _ = self.shared.with_core(|c| {
            c.drop_subscription(sub);
            Ok(())
        });
    }
}
