//! Slabs: the memory of offers too small for a memory file of their own
//! ([`crate::Buffer::for_offer`]), carved out of a few large memory files, one size class
//! each.
//!
//! Why: a consumer on the provider's host copies an offer's bytes straight out of the
//! provider's memory. By system call (`process_vm_readv`) every copy pins the provider's
//! pages anew: 2.3 µs for 4 KiB, 15 µs for 64 KiB, 230 µs for 1 MiB measured here. Out of a
//! view of the provider's memory file that the consumer keeps mapped it is a plain
//! `memcpy`: 0.2, 8.9 and 77 µs ([`crate::cma::Views`]). A file per buffer would cost a
//! descriptor and a mapping per CDO, and a consumer's view of it would be used once; a slab
//! costs one of each per [`SLAB_MIN`] bytes and is mapped once by each consumer.
//!
//! A class holds buffers of one size in whole pages, four classes per doubling (at most a
//! quarter of a buffer is lost to rounding); its slabs are memory files sealed against
//! shrinking, growing and any write but through this process's mapping, as a shareable
//! buffer's. A buffer handed out is zeroed and pre-faulted, as [`crate::Buffer::new`]'s. A
//! buffer dropped gives its slot back; a slab left with no buffer is let go (unmapped and
//! closed) when its class has another such slab already, so a class keeps at most one
//! empty slab. Views others mapped keep the pages of a slab let go until they drop them.
//!
//! After `fork()` the child shares its parent's slabs (they are shared memory): a buffer
//! it inherited is the parent's very memory, not a copy. Its allocator starts afresh: it
//! never hands out a slot of a slab the parent made ([`GENERATION`]), so two processes
//! never fill one slot.
//!
//! Who may map a slab sees every buffer in it, as a process allowed to copy out of the
//! provider's memory sees all of that memory: the kernel grants both under the same
//! permission (that of a `ptrace` read), and the pool hands a consumer the address of the
//! CDOs it may take only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fabric_types::{MemoryFile, SlabPlace};

use crate::error::{FabricError, Result};
use crate::pages::{OwnFile, map, pages};

/// A page.
const PAGE: usize = 4096;

/// The least bytes of a slab (its memory is only taken as its slots are: an unused slot
/// costs address space, not memory).
pub(crate) const SLAB_MIN: usize = 32 << 20;

/// Slots of a slab at least: a slab of the largest class holds this many.
const SLOTS_MIN: usize = 4;

/// The largest buffer a slab holds.
pub(crate) const LARGEST: usize = 16 << 20;

/// Size classes up to [`LARGEST`] (see [`class_of`]).
const CLASSES: usize = 44;

/// Counts the `fork()`s of this process's line up to this process (bumped in the child): a
/// slab belongs to the process of the generation it was made in. Atomic, so the child's
/// handler may bump it (async-signal-safe).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// This process's [`GENERATION`]: what a process keeps that a child of `fork()` must not
/// use as its own (a slab's free slots, random bits drawn ahead) is marked with it, and
/// set aside where it differs. Watches forks from the first call on.
pub(crate) fn generation() -> u64 {
    watch_forks();
    GENERATION.load(Ordering::Relaxed)
}

/// Has every child of `fork()` bump [`GENERATION`], once per process.
fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn child() {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only bumps an atomic (async-signal-safe, as a
        // handler run in the child of a multithreaded process must be).
        let r = unsafe { libc::pthread_atfork(None, None, Some(child)) };
        if r != 0 {
            tracing::warn!(
                "slabs of offer buffers: cannot watch fork() ({}); a child must not offer them",
                std::io::Error::from_raw_os_error(r)
            );
        }
    });
}

/// The classes' slabs.
static SLABS: [Mutex<Class>; CLASSES] =
    [const { Mutex::new(Class { slabs: Vec::new() }) }; CLASSES];

/// The class of a buffer of `len` bytes (at most [`LARGEST`]) and its slots' size: up to 7
/// pages, each size its own class; above, `m << k` pages with `m` of 4 to 7, the least
/// that holds `len`.
fn class_of(len: usize) -> (usize, usize) {
    let p = pages(len.max(1)) / PAGE;
    if p <= 7 {
        return (p - 1, p * PAGE);
    }
    let mut k = (usize::BITS - 1 - p.leading_zeros() - 2) as usize;
    let mut m = p.div_ceil(1 << k);
    if m == 8 {
        (m, k) = (4, k + 1);
    }
    (7 + 4 * (k - 1) + (m - 4), (m << k) * PAGE)
}

/// A class's slabs, with their slots' bookkeeping.
struct Class {
    slabs: Vec<Entry>,
}

/// A slab of a class and its slots.
struct Entry {
    slab: Arc<Slab>,
    /// Slots given back, to hand out again (zeroed first).
    free: Vec<u32>,
    /// Slots never handed out are those from here on (fresh: zero, not faulted in).
    fresh: u32,
    /// Slots handed out and not given back.
    live: u32,
}

impl Entry {
    fn has_room(&self) -> bool {
        !self.free.is_empty() || (self.fresh as usize) < self.slab.slots
    }

    /// Whether the slab is this process's (not inherited through `fork()`).
    fn ours(&self, generation: u64) -> bool {
        self.slab.generation == generation
    }
}

/// A slab: a sealed memory file mapped here, cut into slots of one size.
struct Slab {
    file: OwnFile,
    ptr: *mut u8,
    /// Bytes mapped (the file's length).
    len: usize,
    /// Bytes of a slot.
    slot: usize,
    /// Slots in it.
    slots: usize,
    /// Its class.
    class: usize,
    /// The [`GENERATION`] it was made in.
    generation: u64,
}

// SAFETY: the mapping is the slab's alone, unmapped once (in drop); its slots' bytes are
// reached only through the buffers holding them, one each.
unsafe impl Send for Slab {}
// SAFETY: as for `Send`: the slab itself is only read (its address and sizes).
unsafe impl Sync for Slab {}

impl Slab {
    /// A slab of class `class`, whose slots hold `slot` bytes.
    ///
    /// # Errors
    /// [`FabricError::Os`] when the memory file cannot be made, mapped or sealed.
    fn new(class: usize, slot: usize) -> Result<Slab> {
        let slots = (SLAB_MIN / slot).max(SLOTS_MIN);
        let len = slots * slot;
        let file = OwnFile::create(len)?;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let ptr =
            map(len, prot, libc::MAP_SHARED, file.raw()).map_err(|source| FabricError::Os {
                what: format!("mapping a {len}-byte slab of offer buffers"),
                source,
                hint: "out of memory or address space: raise `ulimit -v`",
            })?;
        // Huge pages where the system gives them to shared memory when asked
        // (`shmem_enabled=advise`): a consumer's view of the slab then maps 2 MiB per
        // page-table entry, and copying a fresh CDO out of it faults once per 2 MiB
        // instead of once per 64 KiB. Refused quietly where not allowed.
        // SAFETY: advice on the mapping just made, owned by the slab.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
        watch_forks();
        let slab = Slab {
            file,
            ptr,
            len,
            slot,
            slots,
            class,
            generation: GENERATION.load(Ordering::Relaxed),
        };
        slab.file.seal()?;
        Ok(slab)
    }

    /// Where slot `index` starts.
    fn at(&self, index: u32) -> *mut u8 {
        // SAFETY: `index` is below `slots` (the entry hands out no other), so the slot lies
        // within the mapping.
        unsafe { self.ptr.add(index as usize * self.slot) }
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: unmapping the slab's own mapping, which no buffer holds any more (each
        // holds the slab alive); others' views keep their pages.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A buffer's slot in a slab, given back when dropped.
pub(crate) struct Slot {
    slab: Arc<Slab>,
    index: u32,
}

impl Slot {
    /// The slab's memory file, as a reader of this host maps it.
    pub(crate) fn describe(&self) -> MemoryFile {
        MemoryFile {
            slab: Some(SlabPlace {
                base: self.slab.ptr as u64,
                len: self.slab.len as u64,
            }),
            ..self.slab.file.describe()
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut class = lock(self.slab.class);
        let Some(i) = class
            .slabs
            .iter()
            .position(|e| Arc::ptr_eq(&e.slab, &self.slab))
        else {
            return;
        };
        let entry = &mut class.slabs[i];
        entry.free.push(self.index);
        entry.live -= 1;
        let empty = |e: &Entry| e.live == 0;
        if empty(&class.slabs[i])
            && class
                .slabs
                .iter()
                .enumerate()
                .any(|(j, e)| j != i && empty(e))
        {
            // The class keeps one empty slab; this one goes once this slot's hold on it
            // is dropped too.
            class.slabs.swap_remove(i);
        }
    }
}

fn lock(class: usize) -> MutexGuard<'static, Class> {
    SLABS[class].lock().unwrap_or_else(PoisonError::into_inner)
}

/// A slot for a buffer of `len` bytes (1 to [`LARGEST`]): its memory, zeroed and
/// pre-faulted, and the slot to hold while the buffer lives.
///
/// # Errors
/// [`FabricError::Os`] when a new slab is needed and cannot be made.
pub(crate) fn take(len: usize) -> Result<(*mut u8, Slot)> {
    debug_assert!(len > 0 && len <= LARGEST);
    let (class, size) = class_of(len);
    let (slot, fresh) = {
        let mut c = lock(class);
        let generation = GENERATION.load(Ordering::Relaxed);
        // Slabs inherited through fork() are the parent's to fill: forgotten here (the
        // buffers inherited keep theirs mapped).
        c.slabs.retain(|e| e.ours(generation));
        let i = match c.slabs.iter().position(Entry::has_room) {
            Some(i) => i,
            None => {
                c.slabs.push(Entry {
                    slab: Arc::new(Slab::new(class, size)?),
                    free: Vec::new(),
                    fresh: 0,
                    live: 0,
                });
                c.slabs.len() - 1
            }
        };
        let e = &mut c.slabs[i];
        let (index, fresh) = match e.free.pop() {
            Some(index) => (index, false),
            None => {
                e.fresh += 1;
                (e.fresh - 1, true)
            }
        };
        e.live += 1;
        let slab = Arc::clone(&e.slab);
        (Slot { slab, index }, fresh)
    };
    let ptr = slot.slab.at(slot.index);
    if fresh {
        // Pre-faulted as a new buffer is; a kernel without MADV_POPULATE_WRITE (before
        // 5.14) faults the pages in as they are written.
        // SAFETY: advice on this slot's pages, which only this buffer holds.
        unsafe { libc::madvise(ptr.cast(), size, libc::MADV_POPULATE_WRITE) };
    } else {
        // SAFETY: the slot's first `len` bytes (within it), which only this buffer holds.
        unsafe { ptr.write_bytes(0, len) };
    }
    Ok((ptr, slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_grow_with_the_size_and_lose_at_most_a_quarter_to_rounding() {
        let mut last = (0, 0);
        for p in 1..=LARGEST / PAGE {
            for len in [p * PAGE - PAGE + 1, p * PAGE] {
                let (class, size) = class_of(len);
                assert!(size >= len, "{len}: a slot of {size}");
                assert!(size <= pages(len) * 5 / 4, "{len}: a slot of {size}");
                assert!(class >= last.0 && size >= last.1, "{len}: not monotone");
                assert!(class < CLASSES);
                assert_eq!(size % PAGE, 0);
                last = (class, size);
            }
        }
        assert_eq!(class_of(LARGEST), (CLASSES - 1, LARGEST));
        assert_eq!(class_of(1), (0, PAGE));
        assert_eq!(class_of(9 * PAGE).1, 10 * PAGE);
    }

    #[test]
    fn a_slot_given_back_is_handed_out_again_zeroed_and_slots_do_not_overlap() {
        // 37 pages: a class no other test of this process uses (40 pages).
        let len = 37 * PAGE - 5;
        let (a, slot_a) = take(len).expect("slot");
        let (b, slot_b) = take(len).expect("slot");
        let (sa, sb) = (a as usize, b as usize);
        assert!(sa.abs_diff(sb) >= len, "overlapping slots");
        // SAFETY: `a` is the slot's memory, `len` bytes, held by `slot_a`.
        unsafe { a.write_bytes(7, len) };
        let file = slot_a.describe();
        let place = file.slab.expect("a slab");
        assert_eq!(
            place.offset_of(sa as u64, len as u64),
            Some((sa as u64) - place.base)
        );
        assert_eq!(slot_b.describe().inode, file.inode, "one slab");
        drop(slot_a);
        let (again, _slot) = take(len).expect("slot");
        assert_eq!(again, a, "the slot given back");
        // SAFETY: the slot's memory, `len` bytes, held by `_slot`.
        let bytes = unsafe { std::slice::from_raw_parts(again, len) };
        assert!(bytes.iter().all(|&x| x == 0), "zeroed");
    }

    #[test]
    fn a_child_of_fork_fills_slabs_of_its_own() {
        // 33 pages (a class of 36 no other test uses).
        let len = 33 * PAGE;
        let (parent, _held) = take(len).expect("slot");
        let (free, slot) = take(len).expect("slot");
        drop(slot);
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only takes a slot of this test's own size class (whose lock no
        // other thread holds) with glibc's malloc (safe in a child of fork), writes a byte
        // to the pipe and leaves with `_exit` (no destructors, no atexit handlers).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = match take(len) {
                Ok((p, _slot)) => p != parent && p != free,
                Err(_) => false,
            };
            let byte = [u8::from(ok)];
            // SAFETY: a write of one byte from a live buffer, then `_exit`.
            unsafe {
                libc::write(fds[1], byte.as_ptr().cast(), 1);
                libc::_exit(0);
            }
        }
        let mut got = [0u8; 1];
        // SAFETY: reading one byte into a live buffer; reaping the child this test forked.
        unsafe {
            libc::close(fds[1]);
            assert_eq!(libc::read(fds[0], got.as_mut_ptr().cast(), 1), 1);
            libc::close(fds[0]);
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &raw mut status, 0), pid);
        }
        assert_eq!(got[0], 1, "the child took a slot of its parent's slab");
    }

    #[test]
    fn a_class_keeps_one_empty_slab() {
        // 10 MiB buffers (a class of 4 slots per slab no other test uses).
        let len = 10 << 20;
        let (class, _) = class_of(len);
        let held: Vec<_> = (0..9).map(|_| take(len).expect("slot").1).collect();
        assert_eq!(lock(class).slabs.len(), 3, "9 buffers in slabs of 4");
        drop(held);
        let c = lock(class);
        assert_eq!(c.slabs.len(), 1, "the empty slabs but one let go");
        assert_eq!(c.slabs[0].live, 0);
    }
}
