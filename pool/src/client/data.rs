//! CDO bytes on either side of a transfer: what a provider keeps offered ([`Offered`], in a
//! process-wide table so that consumers in the same process can take it without a copy) and
//! what a consumer gets from `demand` ([`CdoData`]).

use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use fabric::access::RemoteRead;
use fabric::{Buffer, MemoryRegion, RegionPool};
use tokio::sync::Notify;

use crate::proto::{AppId, CdoId};

/// An offered CDO's bytes: registered with the app's endpoint (readable by RMA), or plain
/// memory when the app has no RMA provider (served by stream).
pub(crate) enum Offered {
    Registered(Registration),
    Plain(Buffer),
}

/// Bytes registered with the app's first endpoint (which owns them) and with each of its
/// alternate endpoints (registrations of the same memory). Fields drop in order: the extra
/// registrations go before the memory they describe.
pub(crate) struct Registration {
    extras: Vec<MemoryRegion<RemoteRead>>,
    region: MemoryRegion<RemoteRead>,
}

impl Registration {
    pub(crate) fn new(
        region: MemoryRegion<RemoteRead>,
        extras: Vec<MemoryRegion<RemoteRead>>,
    ) -> Registration {
        Registration { extras, region }
    }

    fn into_buffer(self) -> Buffer {
        let Registration { extras, region } = self;
        drop(extras);
        region.into_buffer()
    }
}

/// An offer's bytes made readable by consumers, and where they read them.
pub(crate) struct Readable {
    /// The bytes, as kept while offered.
    pub(crate) offered: Offered,
    /// Where the first endpoint reads them (the address in this process and the length,
    /// and the key when `registered`).
    pub(crate) region: fabric::RemoteRegion,
    /// Where each alternate endpoint reads them (none unless `registered`).
    pub(crate) alternates: Vec<fabric::RemoteRegion>,
    /// Whether the region is registered with the fabric (readable by RMA).
    pub(crate) registered: bool,
}

impl Offered {
    /// `data` kept as plain memory, not registered with the fabric (no endpoint, offered
    /// through a file, or carried to the PM): the region consumers are told of is its
    /// address in this process (which same-host consumers copy from) and its length.
    pub(crate) fn plain(data: Buffer) -> Readable {
        let region = fabric::RemoteRegion {
            addr: data.as_slice().as_ptr() as u64,
            key: 0,
            len: data.len() as u64,
        };
        Readable {
            offered: Offered::Plain(data),
            region,
            alternates: Vec::new(),
            registered: false,
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Offered::Registered(r) => r.region.as_slice(),
            Offered::Plain(b) => b.as_slice(),
        }
    }

    /// True if the bytes are the application's own memory (see [`Buffer::borrowed`]).
    pub(crate) fn is_borrowed(&self) -> bool {
        match self {
            Offered::Registered(r) => r.region.is_borrowed(),
            Offered::Plain(b) => b.is_borrowed(),
        }
    }

    fn into_buffer(self) -> Buffer {
        match self {
            Offered::Registered(r) => r.into_buffer(),
            Offered::Plain(b) => b,
        }
    }
}

/// Names an offer in this process: PM instance, providing app, its CDO.
pub(crate) type OfferKey = (u64, AppId, CdoId);

/// An offer kept in this process.
type LocalOffer = Arc<Offered>;

/// Tells withdrawals waiting in this process ([`until_returned`]) that a same-process
/// consumer let go of an offer: one for all offers, where one per offer cost each offer
/// an allocation (a withdrawal that waits is rare, and checks again which it was).
static RELEASED: Notify = Notify::const_new();

/// Offers of every client in this process, so that a same-process consumer takes the
/// provider's buffer itself (any client of the process may be that consumer).
static OFFERS: LazyLock<Mutex<Offers>> = LazyLock::new(Mutex::default);

/// The offers' table (the core's fast hasher: a producer inserts one entry per offer, and
/// SipHash cost a producer's thread about 5 % of the 8 B stream).
type Offers = pool_core::HashMap<OfferKey, LocalOffer>;

fn offers() -> std::sync::MutexGuard<'static, Offers> {
    OFFERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps `data` offered under `key`; returns it to be read while the offer is made (a
/// reference held counts as a consumer's for [`lent_out`]: drop it before a withdraw).
pub(crate) fn keep(key: OfferKey, data: Offered) -> Arc<Offered> {
    let data = Arc::new(data);
    offers().insert(key, data.clone());
    data
}

/// The offer under `key`, as a same-process consumer's data.
pub(crate) fn find(key: &OfferKey) -> Option<CdoData> {
    let offer = offers().get(key).cloned()?;
    Some(CdoData(Inner::Shared(Some(offer))))
}

/// Waits until no consumer in this process holds the application's own memory offered
/// under `key` (see [`lent_out`]): woken by each consumer that lets go, never polling.
/// Cancel safe.
pub(crate) async fn until_returned(key: &OfferKey) {
    loop {
        // Waiting before the check: a consumer that lets go after it wakes this.
        let released = RELEASED.notified();
        let mut released = std::pin::pin!(released);
        released.as_mut().enable();
        if !lent_out(key) {
            return;
        }
        released.await;
    }
}

/// True while a consumer in this process holds the bytes of the application's own memory
/// offered under `key`: the provider may free that memory once it has it back, so a
/// withdrawal waits for them (a library-owned buffer is copied instead, see [`take_back`]).
pub(crate) fn lent_out(key: &OfferKey) -> bool {
    offers()
        .get(key)
        .is_some_and(|o| o.is_borrowed() && Arc::strong_count(o) > 1)
}

/// Removes the offer under `key` and returns its buffer. If same-process consumers still
/// hold it, they keep the original and the provider gets a copy (so neither side waits);
/// views other processes mapped keep what they saw ([`Buffer::keep_private`]).
///
/// # Errors
/// Allocation of the copy, or of the private pages.
pub(crate) fn take_back(key: &OfferKey) -> Option<fabric::Result<Buffer>> {
    let shared = offers().remove(key)?;
    Some(match Arc::try_unwrap(shared) {
        // Same-host consumers may hold views of its memory file: the provider's writes
        // from now on must not reach them.
        Ok(o) => {
            let mut b = o.into_buffer();
            match b.keep_private() {
                Ok(()) => Ok(b),
                // The pages could not be made private: a private copy keeps the views
                // apart just as well.
                Err(_) => Buffer::from_slice(b.as_slice()),
            }
        }
        Err(shared) => Buffer::from_slice(shared.as_slice()),
    })
}

/// Forgets every offer of `app` of PM instance `pool` (the client is gone).
/// App `app`'s offers, kept under the PM instance `old`, are under `new` from now on (the
/// app rejoined a manager that took over: its tickets name the new instance).
pub(crate) fn rekey_app(old: u64, new: u64, app: AppId) {
    let mut offers = offers();
    let moved: Vec<OfferKey> = (offers.keys())
        .filter(|k| k.0 == old && k.1 == app)
        .copied()
        .collect();
    for k in moved {
        if let Some(o) = offers.remove(&k) {
            offers.insert((new, k.1, k.2), o);
        }
    }
}

pub(crate) fn forget_app(pool: u64, app: AppId) {
    offers().retain(|k, _| !(k.0 == pool && k.1 == app));
}

/// A CDO's bytes at the consumer, returned by `demand`: read into memory of its own, or, when
/// the provider is in the same process, the provider's buffer itself (no copy; read-only),
/// or, on the provider's host, a view of its memory file (no copy).
pub struct CdoData(Inner);

enum Inner {
    Own(Buffer, usize),
    /// Read by RMA into a registered landing buffer, which goes back to its pool on drop.
    Landed(Option<MemoryRegion>, usize, Arc<RegionPool>),
    /// A same-process provider's offer (always `Some` until dropped; a withdrawal may
    /// wait for it to be let go, [`RELEASED`]).
    Shared(Option<Arc<Offered>>),
    /// A view of a same-host provider's memory file.
    Mapped(Buffer),
    /// A small CDO's bytes, as they came with the ticket.
    Inline(Arc<[u8]>),
}

impl Drop for CdoData {
    fn drop(&mut self) {
        match &mut self.0 {
            Inner::Landed(region, _, pool) => {
                if let Some(region) = region.take() {
                    pool.give(region);
                }
            }
            Inner::Shared(offer) => {
                // Let go first, then tell a withdrawal waiting for it.
                drop(offer.take());
                RELEASED.notify_waiters();
            }
            _ => {}
        }
    }
}

impl CdoData {
    pub(crate) fn own(buf: Buffer, len: usize) -> CdoData {
        CdoData(Inner::Own(buf, len))
    }

    /// The bytes of `buf`, made by the consumer's library from a demand's (the demanded
    /// array in the consumer's layout, say).
    pub fn from_buffer(buf: Buffer) -> CdoData {
        let len = buf.len();
        CdoData(Inner::Own(buf, len))
    }

    /// The first `len` bytes of `region`, which returns to `pool` when dropped.
    pub(crate) fn landed(region: MemoryRegion, len: usize, pool: Arc<RegionPool>) -> CdoData {
        CdoData(Inner::Landed(Some(region), len, pool))
    }

    /// A small CDO's bytes from its ticket ([`crate::proto::Source::Inline`]), not copied.
    pub(crate) fn inline(bytes: Arc<[u8]>) -> CdoData {
        CdoData(Inner::Inline(bytes))
    }

    /// A view of a same-host provider's memory ([`fabric::cma::map`]).
    pub(crate) fn mapped(view: Buffer) -> CdoData {
        CdoData(Inner::Mapped(view))
    }

    /// True if these bytes are a view of a same-host provider's memory: no copy was made
    /// (the provider offered a [`Buffer::shareable`] buffer). The view stays valid after the
    /// provider withdraws, frees or exits.
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Inner::Mapped(_))
    }

    /// True if these bytes are the provider's own buffer (same-process hand-over).
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Inner::Shared(..))
    }

    /// Where the bytes are: the memory lent to [`super::AsyncClient::demand_into`] when they
    /// landed there.
    pub fn as_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Inner::Own(b, len) => &b.as_slice()[..*len],
            Inner::Landed(r, len, _) => r.as_ref().map_or(&[][..], |r| &r.as_slice()[..*len]),
            Inner::Shared(o) => o.as_deref().map_or(&[][..], Offered::as_slice),
            Inner::Mapped(b) => b.as_slice(),
            Inner::Inline(bytes) => bytes,
        }
    }
}

impl std::ops::Deref for CdoData {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for CdoData {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for CdoData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CdoData")
            .field("len", &self.len())
            .field("shared", &self.is_shared())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}
