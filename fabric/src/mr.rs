//! Memory for RMA: page-aligned, pre-faulted buffers ([`Buffer`]), their registration with a
//! domain ([`MemoryRegion`]), the descriptor a peer needs to read them ([`RemoteRegion`]),
//! and a pool that keeps registered buffers for reuse ([`RegionPool`]).
//!
//! Fresh memory is page-fault bound (measured here: 0.6-0.8 GB/s into never-touched pages
//! against 7-10 GB/s into warm ones), so buffers are mapped with `MAP_POPULATE` and pooled.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::access::{Access, Local, NoRemoteWrites};
use crate::domain::Shared;
use crate::error::{FabricError, Result};
use crate::pages::{huge_pages, map, pages};
use fabric_types::RemoteRegion;

/// Memory for CDO bytes: a page-aligned anonymous mapping, populated at creation and
/// unmapped when dropped, or memory the caller owns and lends ([`Buffer::borrowed`], never
/// freed here). Zero-length buffers are valid (they map nothing).
pub struct Buffer {
    ptr: *mut u8,
    len: usize,
    /// Bytes mapped here; 0 for empty and borrowed buffers (nothing to unmap).
    mapped: usize,
    /// The caller's memory ([`Buffer::borrowed`]).
    borrowed: bool,
    /// A small private mapping of [`Buffer::new`]'s, kept for the next buffer of its size
    /// when dropped rather than unmapped (see [`spare`]).
    recycled: bool,
    /// The memory file behind a [`Buffer::shareable`] buffer (or the one a [`Buffer::lend`]
    /// view names), while others may map it.
    file: Option<FileRef>,
}

/// The memory file of a buffer: its own, its owner's (a [`Buffer::lend`] view), or the
/// slab it is a slot of ([`Buffer::for_offer`]).
enum FileRef {
    Own(crate::pages::OwnFile),
    Lent(fabric_types::MemoryFile),
    Slot(crate::slab::Slot),
}

// SAFETY: the buffer is the only handle to its bytes in this process: memory it mapped
// (unmapped once, by whichever thread drops it), or memory lent by `Buffer::borrowed`,
// whose contract makes the lender keep it allocated and unwritten for the buffer's life
// from any thread; the memory file is an owned descriptor or plain data. Nothing in it is
// tied to the thread that made it.
unsafe impl Send for Buffer {}
// SAFETY: through `&Buffer` the bytes are only read (`as_slice`); writing needs `&mut`.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Maps `len` bytes (rounded up to pages), zeroed and pre-faulted; up to 64 KiB, the
    /// mapping a dropped buffer of the same size left, zeroed, when one is kept (see
    /// `spare` in this file).
    ///
    /// # Errors
    /// [`FabricError::Call`] with the OS error when the mapping fails (out of memory,
    /// `ulimit -v`).
    pub fn new(len: usize) -> Result<Buffer> {
        if len == 0 {
            return Ok(Buffer::empty());
        }
        let size = pages(len);
        let ptr = match spare::take(size) {
            Some(ptr) => {
                // SAFETY: a mapping of `size` bytes that no buffer holds any more (see
                // `spare`): zeroed, as a fresh one is.
                unsafe { ptr.write_bytes(0, size) };
                ptr
            }
            None => {
                let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
                map_buffer(len, size, flags, -1)?
            }
        };
        let mut buf = Buffer::mapped(ptr, len, size, None);
        buf.recycled = true;
        Ok(buf)
    }

    /// Like [`Buffer::new`], in a memory file (`memfd`) that processes of this host may map
    /// instead of copying the bytes: offered to a same-host consumer, the pool hands it a
    /// copy-on-write view of these very pages (see [`crate::cma::map`]). The file is sealed: its
    /// size, so a view can never lose its pages, and writes but through this buffer, so
    /// nobody who opens it can change the bytes. Costs one file descriptor while the
    /// buffer lives (until [`Buffer::keep_private`]). Where the system gives shared memory
    /// huge pages ([`crate::cma::huge_shared_pages`]), buffers of 1 MiB and more are asked
    /// for them and rounded up to whole huge pages (at most 2 MiB more), so that views map
    /// them whole.
    ///
    /// # Errors
    /// [`FabricError::Os`] when the file cannot be made (no descriptors left: raise
    /// `ulimit -n`), sealed (Linux before 5.1) or mapped (out of memory).
    pub fn shareable(len: usize) -> Result<Buffer> {
        if len == 0 {
            return Ok(Buffer::empty());
        }
        let size = if len >= MAP_PAYS && crate::pages::huge_shared_pages() {
            huge_pages(len)
        } else {
            pages(len)
        };
        let file = crate::pages::OwnFile::create(size)?;
        let ptr = map_buffer(len, size, libc::MAP_SHARED, file.raw())?;
        let buf = Buffer::mapped(ptr, len, size, Some(file));
        if let Some(FileRef::Own(file)) = &buf.file {
            file.seal()?;
        }
        // Huge pages where the system allows them for shared memory
        // (/sys/kernel/mm/transparent_hugepage/shmem_enabled): a view of 2 MiB then costs
        // one page-table entry instead of 512. Refused quietly where not allowed.
        // SAFETY: advice on the mapping just made, owned by `buf`.
        unsafe { libc::madvise(ptr.cast(), buf.mapped, libc::MADV_HUGEPAGE) };
        // SAFETY: advice on the mapping just made, owned by `buf`: pre-faults it for writing,
        // as MAP_POPULATE would.
        if unsafe { libc::madvise(ptr.cast(), buf.mapped, libc::MADV_POPULATE_WRITE) } != 0 {
            return Err(FabricError::Os {
                what: format!("pre-faulting a shareable {len}-byte buffer"),
                source: std::io::Error::last_os_error(),
                hint: "out of memory: lower the buffer size or raise `ulimit -v`",
            });
        }
        Ok(buf)
    }

    /// A buffer for bytes to offer: [`Buffer::shareable`] where a same-host consumer maps it
    /// for less than a copy costs, else a slot of a slab (`fabric/src/slab.rs`): memory a
    /// same-host consumer maps once for many buffers and copies each out of with a
    /// `memcpy`, rather than by a system call per copy (64 KiB in 8.9 µs against 15 µs,
    /// 4 KiB in 0.2 µs against 2.3). Zeroed and pre-faulted either way; a slot costs
    /// neither a descriptor nor a mapping of its own. Both are shared memory: a child of
    /// `fork()` shares the buffers it inherits with its parent rather than getting copies
    /// (its own new buffers come from slabs of its own). Mapping pays most with huge pages:
    /// a view of 2 MiB is then one page-table entry (measured: 2 MiB mapped in 5 µs,
    /// 16 MiB in 12 µs, 256 MiB in 150 µs). On 4 KiB pages a view costs about as much as a
    /// copy (65 µs per MiB here, against 25-60 µs for the copy), and less only for large
    /// buffers (16 MiB demanded in 1.6-1.7 ms against 1.7-2.0 ms, 256 MiB in 24-29 ms
    /// against 33-41 ms). So: from 1 MiB where the system gives shared memory huge pages
    /// ([`crate::cma::huge_shared_pages`]; rounded up to whole huge pages: up to twice the
    /// memory at 1 MiB, at most 2 MiB more above), from 16 MiB elsewhere. Plain memory,
    /// when the memory file or slab cannot be had (no file descriptor left).
    ///
    /// # Errors
    /// As [`Buffer::new`].
    pub fn for_offer(len: usize) -> Result<Buffer> {
        let huge = crate::pages::huge_shared_pages();
        let made = if len >= MAP_PAYS_SMALL_PAGES || (len >= MAP_PAYS && huge) {
            Buffer::shareable(len)
        } else if len == 0 {
            return Ok(Buffer::empty());
        } else {
            crate::slab::take(len).map(|(ptr, slot)| {
                // Nothing mapped of its own: the slot goes back to its slab when dropped.
                let mut buf = Buffer::mapped(ptr, len, 0, None);
                buf.file = Some(FileRef::Slot(slot));
                buf
            })
        };
        made.or_else(|e| {
            tracing::debug!("plain memory for a {len}-byte offer: {e}");
            Buffer::new(len)
        })
    }

    /// `mapped` bytes at `ptr`, of which the first `len` are the buffer's; unmapped on drop.
    pub(crate) fn mapped(
        ptr: *mut u8,
        len: usize,
        mapped: usize,
        file: Option<crate::pages::OwnFile>,
    ) -> Buffer {
        Buffer {
            ptr,
            len,
            mapped,
            borrowed: false,
            recycled: false,
            file: file.map(FileRef::Own),
        }
    }

    /// The memory file others may map these bytes from: a [`Buffer::shareable`] buffer's
    /// own, the slab of a slot [`Buffer::for_offer`] made (its
    /// [`MemoryFile::slab`](fabric_types::MemoryFile::slab) says where it lies), or the
    /// file of the buffer a [`Buffer::lend`] view is of.
    pub fn memory_file(&self) -> Option<fabric_types::MemoryFile> {
        self.file.as_ref().map(|f| match f {
            FileRef::Own(own) => own.describe(),
            FileRef::Lent(lent) => *lent,
            FileRef::Slot(slot) => slot.describe(),
        })
    }

    /// A view of this buffer's first `len` bytes (at most all) that names its memory file,
    /// as [`Buffer::borrowed`]
    /// lends memory: for a program that offers memory it allocated as a shareable buffer
    /// (the C API's `mstro_mem_alloc`), so same-host consumers still map it. Taking the
    /// bytes back from the consumers ([`Buffer::keep_private`]) is this buffer's to do; on
    /// the view it does nothing.
    ///
    /// # Safety
    /// As [`Buffer::borrowed`]: this buffer outlives the view, and nobody writes to it
    /// while the view is offered.
    pub unsafe fn lend(&self, len: usize) -> Buffer {
        // SAFETY: the caller keeps this buffer alive past the view and unwritten while it is
        // offered (this function's contract); `len` is clamped to this buffer.
        let mut view = unsafe { Buffer::borrowed(self.ptr, len.min(self.len)) };
        if view.len > 0 {
            view.file = self.memory_file().map(FileRef::Lent);
        }
        view
    }

    /// Makes the bytes this buffer's alone again: views others mapped from its memory file
    /// keep what they saw, and later writes here are not seen there (the pages become
    /// copy-on-write; the file is closed). For a provider taking back a buffer it offered.
    /// Nothing to do for other buffers.
    ///
    /// # Errors
    /// [`FabricError::Os`] if the kernel cannot remap the range (out of memory); the buffer
    /// is then unchanged.
    pub fn keep_private(&mut self) -> Result<()> {
        let Some(FileRef::Own(file)) = &self.file else {
            return Ok(());
        };
        // SAFETY: replaces this buffer's own mapping in place with a private mapping of the
        // same file (same bytes); `&mut self` means no reference into it is alive.
        let p = unsafe {
            libc::mmap(
                self.ptr.cast(),
                self.mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                file.raw(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(FabricError::Os {
                what: format!("remapping a {}-byte offered buffer privately", self.len),
                source: std::io::Error::last_os_error(),
                hint: "out of memory",
            });
        }
        self.file = None;
        Ok(())
    }

    /// A zero-length buffer.
    fn empty() -> Buffer {
        Buffer {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
            mapped: 0,
            borrowed: false,
            recycled: false,
            file: None,
        }
    }

    /// Lends the caller's memory `[ptr, ptr+len)` as a buffer, without copying it: it can be
    /// registered and offered like any other, and dropping the buffer leaves the memory
    /// alone. This is how C and Python programs offer their own arrays with no copy.
    ///
    /// # Safety
    /// Until the buffer (and every [`MemoryRegion`] made of it) is dropped, the memory must
    /// stay allocated, and nobody may write to it while it is registered and offered
    /// (peers read it remotely at any time) or while this buffer is written through
    /// [`Buffer::as_mut_slice`]. `ptr` must be non-null unless `len` is 0.
    pub unsafe fn borrowed(ptr: *mut u8, len: usize) -> Buffer {
        if len == 0 || ptr.is_null() {
            return Buffer::empty();
        }
        Buffer {
            ptr,
            len,
            mapped: 0,
            borrowed: true,
            recycled: false,
            file: None,
        }
    }

    /// True if this is the caller's memory ([`Buffer::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        self.borrowed
    }

    /// A buffer holding a copy of `data`.
    ///
    /// # Errors
    /// As [`Buffer::new`].
    pub fn from_slice(data: &[u8]) -> Result<Buffer> {
        let mut b = Buffer::new(data.len())?;
        b.as_mut_slice().copy_from_slice(data);
        Ok(b)
    }

    /// The length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped (or a dangling pointer with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: exclusive access to `len` mapped bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("len", &self.len)
            .field("borrowed", &self.borrowed)
            .field("file", &self.memory_file())
            .finish()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.recycled && spare::keep(self.ptr, self.mapped) {
            return;
        }
        if self.mapped > 0 {
            // SAFETY: unmapping what this buffer mapped (views others mapped from its
            // memory file keep their pages).
            unsafe { libc::munmap(self.ptr.cast(), self.mapped) };
        }
    }
}

/// Small buffers' mappings kept for the next buffers of their size, so that a program
/// making a buffer per CDO (and dropping it after the CDO's withdraw) pays neither a
/// mapping with its page faults nor an `munmap`, whose TLB flush interrupts the process's
/// other threads on other CPUs. Measured here: a new and dropped buffer of 8 B costs
/// 6.6 us mapped (32 KiB: 16.8 us); a blocking withdraw whose buffer was dropped took
/// about 20 us more than one whose buffer was kept (docs/benchmarks-journal.md, "One
/// offer at a time"). Only [`Buffer::new`]'s private anonymous mappings of at most
/// [`SPARE_PAGES`] pages come here, at most [`SPARE_BYTES`] of them in all; the pages stay
/// mapped and populated while kept (nothing is given back to the system in between, so a
/// registration a provider's cache kept for the address still names the same pages).
mod spare {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, PoisonError};

    /// The largest mapping kept, in pages of 4 KiB (64 KiB).
    pub(super) const SPARE_PAGES: usize = 16;
    /// Most bytes kept in all.
    pub(super) const SPARE_BYTES: usize = 8 << 20;

    /// The kept mappings' addresses, by their size in pages less one.
    static KEPT: [Mutex<Vec<usize>>; SPARE_PAGES] = [const { Mutex::new(Vec::new()) }; SPARE_PAGES];
    /// Bytes kept.
    static HELD: AtomicUsize = AtomicUsize::new(0);

    fn class(size: usize) -> Option<&'static Mutex<Vec<usize>>> {
        let pages = size / 4096;
        (size.is_multiple_of(4096) && (1..=SPARE_PAGES).contains(&pages)).then(|| &KEPT[pages - 1])
    }

    /// A kept mapping of `size` bytes, now the caller's, if there is one.
    pub(super) fn take(size: usize) -> Option<*mut u8> {
        let addr = class(size)?
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()?;
        HELD.fetch_sub(size, Ordering::Relaxed);
        Some(addr as *mut u8)
    }

    /// Keeps the mapping of `size` bytes at `ptr`, which its buffer lets go, for the next
    /// buffer of its size; false (the caller unmaps it) when it is not one kept or there
    /// is no room.
    pub(super) fn keep(ptr: *mut u8, size: usize) -> bool {
        let Some(class) = class(size) else {
            return false;
        };
        if HELD.fetch_add(size, Ordering::Relaxed) + size > SPARE_BYTES {
            HELD.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        class
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ptr as usize);
        true
    }

    #[cfg(test)]
    mod tests {
        use super::super::Buffer;

        #[test]
        fn a_small_buffer_reuses_a_dropped_mapping_zeroed_and_large_ones_are_unmapped() {
            // 13 pages: a size no other test of this process makes.
            let len = 13 * 4096 - 100;
            let mut b = Buffer::new(len).expect("buffer");
            b.as_mut_slice().fill(7);
            let was = b.as_ptr();
            drop(b);
            let b = Buffer::new(len).expect("buffer");
            assert_eq!(b.as_ptr(), was, "the mapping kept");
            assert!(b.as_slice().iter().all(|&x| x == 0), "zeroed");
            assert!(!super::keep(std::ptr::null_mut(), 80 << 10), "past 64 KiB");
            assert!(!super::keep(std::ptr::null_mut(), 100), "not whole pages");
            assert!(super::take(5 << 20).is_none());
        }

        #[test]
        fn what_is_kept_is_bounded() {
            let bufs: Vec<Buffer> = (0..(super::SPARE_BYTES / (64 << 10)) + 8)
                .map(|_| Buffer::new(64 << 10).expect("buffer"))
                .collect();
            drop(bufs);
            assert!(super::HELD.load(std::sync::atomic::Ordering::Relaxed) <= super::SPARE_BYTES);
        }
    }
}

/// From this size a view of huge pages costs less than a copy of the bytes (see
/// [`Buffer::for_offer`]).
const MAP_PAYS: usize = 1 << 20;

/// From this size a view of 4 KiB pages costs less than a copy of the bytes.
const MAP_PAYS_SMALL_PAGES: usize = 16 << 20;

// Every offer below it fits a slab's slot.
const _: () = assert!(MAP_PAYS_SMALL_PAGES <= crate::slab::LARGEST);

/// [`map`] for a new buffer of `len` bytes (`size` mapped).
///
/// # Errors
/// [`FabricError::Os`] with the OS error.
fn map_buffer(len: usize, size: usize, flags: i32, fd: i32) -> Result<*mut u8> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    map(size, prot, flags, fd).map_err(|source| FabricError::Os {
        what: format!("mapping a {len}-byte buffer"),
        source,
        hint: "out of memory: lower the buffer size or raise `ulimit -v`",
    })
}

/// A buffer registered with an endpoint's domain for access mode `A` ([`Local`] unless
/// said otherwise). Peers may access it remotely through [`MemoryRegion::remote`] as `A`
/// allows; it stays registered (and its endpoint open) as long as it lives. Operations take
/// it by value and give it back on completion, so no local code can touch bytes a transfer
/// is writing; and the bytes of a region peers may write ([`RemoteWrite`](crate::access::RemoteWrite)) are never
/// handed out as slices while it is registered.
///
/// An empty buffer is not registered with the provider (there is nothing to reach): its
/// remote descriptor has length 0 and key 0.
pub struct MemoryRegion<A: Access = Local> {
    pub(crate) buf: Buffer,
    pub(crate) mr: *mut fabric_sys::fid_mr,
    pub(crate) desc: *mut std::ffi::c_void,
    pub(crate) remote: RemoteRegion,
    pub(crate) shared: Arc<Shared>,
    access: PhantomData<fn() -> A>,
}

// SAFETY: the registration is only closed in drop; libfabric's domain is FI_THREAD_SAFE.
unsafe impl<A: Access> Send for MemoryRegion<A> {}
// SAFETY: a `&MemoryRegion` reads the bytes only in modes where no peer can write them
// (`as_slice` needs `NoRemoteWrites`); everything else it reaches is plain data.
unsafe impl<A: Access> Sync for MemoryRegion<A> {}

impl<A: NoRemoteWrites> MemoryRegion<A> {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The bytes, mutably. Peers holding the descriptor of a [`RemoteRead`](crate::access::RemoteRead) region may
    /// still read it while you change them: coordinate (the pool does, through offers and
    /// withdrawals).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }
}

impl<A: Access> MemoryRegion<A> {
    /// A registration of `buf` (`mr`, with local descriptor `desc`) with `shared`'s domain.
    pub(crate) fn new(
        buf: Buffer,
        (mr, desc): (*mut fabric_sys::fid_mr, *mut std::ffi::c_void),
        remote: RemoteRegion,
        shared: Arc<Shared>,
    ) -> MemoryRegion<A> {
        MemoryRegion {
            buf,
            mr,
            desc,
            remote,
            shared,
            access: PhantomData,
        }
    }

    /// The descriptor to hand to peers.
    pub fn remote(&self) -> RemoteRegion {
        self.remote
    }

    /// True if the region belongs to the domain of `shared` (an endpoint's).
    pub(crate) fn of_domain(&self, shared: &Arc<Shared>) -> bool {
        Arc::ptr_eq(&self.shared, shared)
    }

    /// The length.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// True if the region is the caller's memory ([`Buffer::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        self.buf.is_borrowed()
    }

    /// Deregisters and returns the buffer.
    pub fn into_buffer(mut self) -> Buffer {
        self.close();
        std::mem::replace(&mut self.buf, Buffer::empty())
    }

    fn close(&mut self) {
        if !self.mr.is_null() {
            // SAFETY: closing the registration made for this buffer, once.
            let rc = unsafe { fabric_sys::fi_close(&mut (*self.mr).fid) };
            if rc != 0 {
                tracing::warn!("fi_close(mr): {rc}");
            }
            self.mr = std::ptr::null_mut();
        }
    }
}

impl<A: Access> Drop for MemoryRegion<A> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Registered landing regions ([`Local`]) kept for reuse, by capacity: mapping,
/// pre-faulting and registering a buffer for every read costs more than the read itself at
/// large sizes. `take` returns a region of at least the requested length (its
/// [`MemoryRegion::len`] is the capacity; use the first `len` bytes). The pool keeps at most
/// its limit in bytes; regions given back beyond it are released. Taking and giving back
/// cost the same whether the pool keeps ten regions or a hundred thousand (a group's
/// members each land in one).
pub struct RegionPool {
    shelf: std::sync::Mutex<Shelf>,
    limit: usize,
}

/// A pool's regions by capacity, and their bytes.
#[derive(Default)]
struct Shelf {
    by_len: std::collections::BTreeMap<usize, Vec<MemoryRegion>>,
    bytes: usize,
    count: usize,
}

impl Default for RegionPool {
    fn default() -> Self {
        RegionPool::with_limit(usize::MAX)
    }
}

impl RegionPool {
    /// An empty pool without a limit.
    pub fn new() -> RegionPool {
        RegionPool::default()
    }

    /// An empty pool that keeps at most `bytes` of regions.
    pub fn with_limit(bytes: usize) -> RegionPool {
        RegionPool {
            shelf: std::sync::Mutex::new(Shelf::default()),
            limit: bytes,
        }
    }

    fn shelf(&self) -> std::sync::MutexGuard<'_, Shelf> {
        self.shelf
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The smallest region of capacity >= `len` from the pool, or a new one registered
    /// with `ep` (capacity rounded up to a power of two, at least 4 KiB).
    ///
    /// # Errors
    /// Allocation or registration failures.
    pub fn take(&self, ep: &crate::Endpoint, len: usize) -> Result<MemoryRegion> {
        if let Some(region) = self.take_kept(ep, len) {
            return Ok(region);
        }
        ep.register(Buffer::new(len.max(4096).next_power_of_two())?)
    }

    /// A kept region of `ep` of at least `len` bytes (the smallest), if there is one:
    /// never registers, so never blocks.
    pub fn take_kept(&self, ep: &crate::Endpoint, len: usize) -> Option<MemoryRegion> {
        let mut kept = self.shelf();
        let domain = ep.shared();
        // Regions of another endpoint's domain are passed over (a client with endpoints on
        // several networks keeps regions of each).
        let (cap, at) = kept.by_len.range(len..).find_map(|(&cap, regions)| {
            let at = regions.iter().rposition(|r| r.of_domain(domain))?;
            Some((cap, at))
        })?;
        let regions = kept.by_len.get_mut(&cap)?;
        let region = regions.swap_remove(at);
        if regions.is_empty() {
            kept.by_len.remove(&cap);
        }
        kept.bytes -= region.len();
        kept.count -= 1;
        Some(region)
    }

    /// Returns a region for reuse; released at once if the pool would exceed its limit.
    pub fn give(&self, region: MemoryRegion) {
        let mut kept = self.shelf();
        if kept.bytes.saturating_add(region.len()) > self.limit {
            drop(kept);
            // Deregistered here, outside the lock.
            drop(region);
            return;
        }
        kept.bytes += region.len();
        kept.count += 1;
        kept.by_len.entry(region.len()).or_default().push(region);
    }

    /// Number of regions kept.
    pub fn len(&self) -> usize {
        self.shelf().count
    }

    /// True when no region is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
