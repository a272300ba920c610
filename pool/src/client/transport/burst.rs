//! A burst of tickets: the rest of what one read of the control connection brought (a
//! group's members, above all). Copies out of one provider's memory are gathered while the
//! reader handles the burst and made at its end: out of the views of the provider's slabs
//! this client keeps, where the offers lie in one ([`fabric::cma::Views`]), the others in
//! one `process_vm_readv` of many ranges ([`fabric::cma::read_many_parallel`]: several
//! threads for a batch of many megabytes) instead of one call each, and reported in one
//! step of the core (one write). Whatever the batch cannot do (a process not verified, a
//! range the kernel refuses) goes the single ticket's way, with its fallbacks. One poll of
//! an application's future in `Client::block_on` is a burst too, of the small copies its
//! leased demands start ([`SMALL`]). A burst is its thread's own ([`during`]).

use pool_core::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fabric::Buffer;
use fabric::cma::Origin;
use pool_core::client::Fetch;

use super::Transfer;
use super::crew::{self, Dst};
use super::host::{self, INLINE_COPY};
use crate::client::Shared;
use crate::client::data::CdoData;
use crate::proto::{Direct, ProcessMemory, Source};

type Gathering = Vec<(ProcessMemory, Fetch<Buffer>)>;

/// A burst under way on a thread: its client (the address of its [`Shared`]), the
/// largest copy it gathers, and the copies gathered so far.
struct Under {
    client: usize,
    most: usize,
    gathered: Gathering,
}

thread_local! {
    /// The burst under way on this thread. A thread's own: readers of two shards'
    /// connections may handle bursts at once, and each gathers, and makes, only the copies
    /// its own step started (one burst begun on another thread must not drop or take this
    /// one's).
    static BURST: std::cell::RefCell<Option<Under>> = const { std::cell::RefCell::new(None) };
}

/// The largest copy a reader's burst gathers: all it may copy on its thread.
pub(crate) const TICKETS: usize = INLINE_COPY;

/// The largest copy the burst of an application thread's poll gathers
/// ([`Client::block_on`](crate::Client::block_on)): the leased demands of small CDOs it
/// started (a demand of four 4 KiB CDOs of one provider in one `process_vm_readv`, 1.3 µs
/// each, against 2.3 one call each); larger ones go to the copy crew, whose two threads
/// copy them faster than one batch.
pub(crate) const SMALL: usize = crew::HANDOFF_MIN - 1;

/// Runs `f` as a burst of `shared` on this thread: the same-host copies of at most `most`
/// bytes started meanwhile are gathered and made at its end (also if `f` panics), one
/// call per provider process, and reported to the core in one step. Within a burst under
/// way on this thread, `f` is part of it (the outer burst makes its copies).
pub(crate) fn during<R>(shared: &Arc<Shared>, most: usize, f: impl FnOnce() -> R) -> R {
    /// Ends the burst when dropped.
    struct End<'a>(&'a Arc<Shared>);
    impl Drop for End<'_> {
        fn drop(&mut self) {
            end(self.0);
        }
    }
    if BURST.with_borrow(Option::is_some) {
        return f();
    }
    BURST.set(Some(Under {
        client: client_of(shared),
        most,
        gathered: Vec::new(),
    }));
    let _end = End(shared);
    f()
}

/// Names `shared`'s client for [`BURST`].
fn client_of(shared: &Arc<Shared>) -> usize {
    Arc::as_ptr(shared) as usize
}

/// Starts `fetch`, or gathers it into the burst under way when it is a copy from a
/// same-host provider's memory the burst can batch.
///
/// A copy of at least [`crew::HANDOFF_MIN`] bytes outside a burst (a leased demand's, on
/// the demanding thread) goes to the client's copy crew, which reports it to the core from
/// the thread that finished it.
pub(crate) fn start(shared: &Arc<Shared>, fetch: Fetch<Buffer>) {
    let Some(process) = copy_from(shared, &fetch) else {
        return super::start(shared, fetch);
    };
    let Some(fetch) = gather_into_burst(shared, process, fetch) else {
        return;
    };
    let crew = fetch.source.len() >= crew::HANDOFF_MIN as u64 && shared.crew.helps();
    if crew && host::genuine(shared, process) {
        return hand_to_crew(shared, fetch);
    }
    super::start(shared, fetch);
}

/// Gathers `fetch` (a copy from `process`) into the burst of `shared` under way on this
/// thread; `fetch` back when there is none.
fn gather_into_burst(
    shared: &Arc<Shared>,
    process: ProcessMemory,
    fetch: Fetch<Buffer>,
) -> Option<Fetch<Buffer>> {
    BURST.with_borrow_mut(|burst| match burst {
        Some(b) if b.client == client_of(shared) && fetch.source.len() <= b.most as u64 => {
            b.gathered.push((process, fetch));
            None
        }
        _ => Some(fetch),
    })
}

/// Has the copy crew copy `fetch` (a copy from its provider's memory), and the thread that
/// finishes it report the bytes to the core; a copy that fails goes the single ticket's
/// way.
fn hand_to_crew(shared: &Arc<Shared>, fetch: Fetch<Buffer>) {
    let g = match gather(shared, fetch) {
        Ok(g) => g,
        Err(e) => return super::start(shared, e.1),
    };
    let Some(from) = g.origin(shared) else {
        return super::start(shared, g.back(shared));
    };
    let pid = from.pid();
    let (at, len) = (g.addr(), g.len());
    let Gathered {
        transfer,
        cdo,
        source,
        landing,
    } = g;
    let owner = Arc::clone(shared);
    shared
        .crew
        .copy_then((from, at), landing, len, move |landing, copied| {
            let g = Gathered {
                transfer,
                cdo,
                source,
                landing,
            };
            if let Err(e) = copied {
                host::refused(&owner, &e);
                tracing::debug!(
                    "pool client: copying from process {pid} failed ({e}); the single way"
                );
                return super::start(&owner, g.back(&owner));
            }
            let (shard, transfer) = g.transfer;
            let data = g.landing.into_data(len, &owner);
            // Fails only when the connection is gone, which the client hears of anyway.
            let _ = owner.with_core(|c| {
                c.fetched(shard, transfer, Ok((data, Some(Direct::Copied))));
                Ok(())
            });
        });
}

/// The provider's process a ticket can be copied from in a batch: a same-host offer this
/// client may copy, small enough to copy on the reader's thread, not one to map instead.
fn copy_from(shared: &Shared, fetch: &Fetch<Buffer>) -> Option<ProcessMemory> {
    let Source::Rma {
        memory: Some(m), ..
    } = &fetch.source
    else {
        return None;
    };
    let len = usize::try_from(fetch.source.len()).ok()?;
    let lent = fetch.lent.as_ref().filter(|b| b.len() >= len);
    let batchable = len > 0
        && len <= INLINE_COPY
        && shared.cross_memory.load(Ordering::Relaxed)
        && !host::mappable(m, lent);
    batchable.then_some(m.process)
}

/// The burst is over: makes the copies it gathered, one call per provider process for
/// its tickets, and hands the bytes to the core in one step.
fn end(shared: &Arc<Shared>) {
    let Some(Under { gathered, .. }) = BURST.take() else {
        return;
    };
    let mut by_process: HashMap<ProcessMemory, Vec<Fetch<Buffer>>> = HashMap::default();
    for (process, f) in gathered {
        by_process.entry(process).or_default().push(f);
    }
    let mut done = Vec::new();
    for (process, fetches) in by_process {
        if fetches.len() == 1 || !host::genuine(shared, process) {
            fetches.into_iter().for_each(|f| super::start(shared, f));
            continue;
        }
        match copy_all(shared, process.pid, fetches) {
            Ok(copied) => done.extend(copied),
            Err(fetches) => fetches.into_iter().for_each(|f| super::start(shared, f)),
        }
    }
    if done.is_empty() {
        return;
    }
    // Fails only when the connection is gone, which the client hears of anyway.
    let _ = shared.with_core(|c| {
        for ((shard, transfer), data) in done {
            c.fetched(shard, transfer, Ok((data, Some(Direct::Copied))));
        }
        Ok(())
    });
}

/// A gathered ticket with where its bytes land.
struct Gathered {
    /// The shard that issued the ticket and its transfer there.
    transfer: Transfer,
    cdo: crate::proto::CdoId,
    source: Source,
    landing: Dst,
}

impl Gathered {
    /// The ticket as it came (a landing region given back), to go the single way.
    fn back(self, shared: &Shared) -> Fetch<Buffer> {
        let lent = self.landing.give_back(shared);
        Fetch {
            transfer: self.transfer.1,
            cdo: self.cdo,
            source: self.source,
            lent,
            shard: self.transfer.0,
        }
    }

    fn len(&self) -> usize {
        usize::try_from(self.source.len()).unwrap_or(0)
    }

    fn addr(&self) -> u64 {
        match &self.source {
            Source::Rma { region, .. } => region.addr,
            _ => 0,
        }
    }

    /// Where its copy reads ([`host::origin`]); `None` unless it is a copy from its
    /// provider's memory.
    fn origin(&self, shared: &Shared) -> Option<Origin> {
        match &self.source {
            Source::Rma {
                memory: Some(m), ..
            } => Some(host::origin(shared, m)),
            _ => None,
        }
    }
}

/// Copies `fetches` (all from process `pid`) in one batch; their bytes, or the fetches
/// back (as they came) when the batch failed.
fn copy_all(
    shared: &Arc<Shared>,
    pid: u32,
    fetches: Vec<Fetch<Buffer>>,
) -> std::result::Result<Vec<(Transfer, CdoData)>, Vec<Fetch<Buffer>>> {
    let mut gathered = Vec::with_capacity(fetches.len());
    let mut rest = fetches.into_iter();
    let mut failed = None;
    for f in rest.by_ref() {
        match gather(shared, f) {
            Ok(g) => gathered.push(g),
            Err(e) => {
                failed = Some(*e);
                break;
            }
        }
    }
    let copied = match &failed {
        Some((why, _)) => Err(why.clone()),
        None => copy_gathered(shared, pid, &mut gathered),
    };
    if let Err(why) = copied {
        tracing::debug!(
            "pool client: copying a burst from process {pid} failed ({why}); one by one"
        );
        let mut back: Vec<_> = gathered.into_iter().map(|g| g.back(shared)).collect();
        back.extend(failed.map(|(_, f)| f));
        back.extend(rest);
        return Err(back);
    }
    Ok(gathered
        .into_iter()
        .map(|g| {
            let len = g.len();
            (g.transfer, g.landing.into_data(len, shared))
        })
        .collect())
}

/// Copies `gathered` (all from process `pid`): those in a slab this client keeps a view of
/// out of the view, the others in one batch by system call; why not, when a copy failed.
fn copy_gathered(
    shared: &Shared,
    pid: u32,
    gathered: &mut [Gathered],
) -> std::result::Result<(), String> {
    let failed = |e: fabric::cma::CmaError| {
        host::refused(shared, &e);
        e.to_string()
    };
    let mut ranges: Vec<(u64, &mut [u8])> = Vec::with_capacity(gathered.len());
    for g in gathered.iter_mut() {
        let (addr, len) = (g.addr(), g.len());
        let from = g.origin(shared);
        let dst = &mut g.landing.as_mut_slice()[..len];
        match from {
            Some(Origin::View(view)) => view.read(addr, dst).map_err(failed)?,
            _ => ranges.push((addr, dst)),
        }
    }
    if ranges.is_empty() {
        return Ok(());
    }
    fabric::cma::read_many_parallel(pid, &mut ranges, copy_threads()).map_err(failed)
}

/// Threads a batch of many megabytes is copied with (see
/// [`fabric::cma::read_many_parallel`]): the machine's cores, at most four, beyond which the
/// memory, not the cores, bounds a copy. On two cores, groups of 64 KiB members drained
/// at 4.1-5.1 GB/s copied by the reader alone (the other core idle once the PM had
/// ticketed them) and at the rates in docs/benchmarks-journal.md with both.
fn copy_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

/// Where `f`'s bytes land: the memory lent for them when it fits, else a landing region of
/// the endpoint the ticket names; `f` back with why when there is none.
fn gather(
    shared: &Shared,
    f: Fetch<Buffer>,
) -> std::result::Result<Gathered, Box<(String, Fetch<Buffer>)>> {
    let len = usize::try_from(f.source.len()).unwrap_or(0);
    let Fetch {
        transfer,
        cdo,
        source,
        lent,
        shard,
    } = f;
    let via = match &source {
        Source::Rma { via, .. } => *via,
        _ => 0,
    };
    let landing = host::landing(shared, via, len, lent.filter(|b| b.len() >= len));
    match landing {
        Ok(landing) => Ok(Gathered {
            transfer: (shard, transfer),
            cdo,
            source,
            landing,
        }),
        // Only a landing region can fail, and then nothing was lent that fits.
        Err(e) => Err(Box::new((
            e.to_string(),
            Fetch {
                transfer,
                cdo,
                source,
                lent: None,
                shard,
            },
        ))),
    }
}
