//! Views of other processes' slabs (see [`crate::Buffer::for_offer`]), each mapped once and
//! kept: a copy out of one is a `memcpy` with no system call, where `process_vm_readv`
//! pins the other process's pages anew for every copy (64 KiB in 8.9 µs against 15 µs,
//! 4 KiB in 0.2 µs against 2.3, measured here).
//!
//! A view is mapped read-only and shared: it sees the owner's later writes, so it is
//! only read for bytes the owner keeps unwritten meanwhile (an offer's, until it is
//! withdrawn: the pool's rule, as for a copy by system call). The slab's file is sealed
//! against shrinking, so a view never loses its pages.
//!
//! [`Views`] keeps them by process and file, at most [`Views::new`]'s bytes of address
//! space (the least recently used go first) and, through [`Views::sweep`], none that went
//! unused between two sweeps: a view of a slab its owner let go, or of an owner that
//! exited, holds the slab's pages until dropped.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use fabric_types::{MemoryFile, SlabPlace};

use super::{CmaError, open, read};
use crate::pages::map;

/// A view of a slab of another process of this host, mapped read-only.
pub struct View {
    pid: u32,
    ptr: *const u8,
    place: SlabPlace,
    /// When it was last read ([`Views`]'s clock).
    used: AtomicU64,
}

// SAFETY: the mapping is the view's own, unmapped once (in drop) after every holder of the
// view let go; it is only read.
unsafe impl Send for View {}
// SAFETY: as for `Send`; the use stamp is atomic.
unsafe impl Sync for View {}

impl View {
    /// Copies `dst.len()` bytes at the owner's address `addr` into `dst`: out of the view
    /// when they lie within the slab, else by system call ([`read`]).
    ///
    /// # Errors
    /// As [`read`], for bytes outside the slab.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), CmaError> {
        let Some(offset) = self.place.offset_of(addr, dst.len() as u64) else {
            return read(self.pid, addr, dst);
        };
        // SAFETY: `offset + dst.len()` lies within the mapping (`offset_of` checked it
        // against the slab's length, which the mapping covers, and the file cannot shrink),
        // which lives as long as `self`; `dst` is this process's own memory, not the view.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
        Ok(())
    }

    /// The process whose slab this is.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: unmapping the view's own mapping, which nobody reads any more.
        unsafe { libc::munmap(self.ptr.cast_mut().cast(), self.place.len as usize) };
    }
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("pid", &self.pid)
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

/// Where a same-host copy reads: another process's memory by system call, or a view of
/// its slab kept mapped.
#[derive(Clone, Debug)]
pub enum Origin {
    /// Process `pid`'s memory, by `process_vm_readv`.
    Process(u32),
    /// A view of one of its slabs (bytes outside the slab are read by system call).
    View(Arc<View>),
}

impl Origin {
    /// Copies `dst.len()` bytes at `addr` of the process into `dst`.
    ///
    /// # Errors
    /// As [`read`].
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), CmaError> {
        match self {
            Origin::Process(pid) => read(*pid, addr, dst),
            Origin::View(view) => view.read(addr, dst),
        }
    }

    /// The process read.
    pub fn pid(&self) -> u32 {
        match self {
            Origin::Process(pid) => *pid,
            Origin::View(view) => view.pid,
        }
    }
}

/// The views a process keeps of other processes' slabs (see the module's documentation).
pub struct Views {
    state: Mutex<State>,
    /// Most bytes of address space the views take.
    most: u64,
    /// Counts reads: a view's stamp is the count of its last.
    clock: AtomicU64,
}

#[derive(Default)]
struct State {
    by_file: HashMap<(u32, NonZeroU64), Arc<View>>,
    /// Bytes the views map.
    bytes: u64,
    /// The clock at the last sweep.
    swept: u64,
}

impl Views {
    /// No views yet; at most `most` bytes of them at a time.
    pub fn new(most: u64) -> Views {
        Views {
            state: Mutex::new(State::default()),
            most,
            clock: AtomicU64::new(1),
        }
    }

    /// The view of slab `file` of process `pid`: the one kept, else mapped now and kept
    /// (the least recently read let go first when the views would take more than their
    /// bytes). Stamped as read now.
    ///
    /// # Errors
    /// [`CmaError::NotTheFile`] when `file` names no slab, or another file than the
    /// process holds at its descriptor (closed, reused, another length, unsealed); else as
    /// [`super::map`].
    pub fn view(&self, pid: u32, file: MemoryFile) -> Result<Arc<View>, CmaError> {
        let not_it = |why: &str| CmaError::NotTheFile {
            pid,
            fd: file.fd,
            why: why.into(),
        };
        let place = file.slab.ok_or_else(|| not_it("not a slab"))?;
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let key = (pid, file.inode);
        if let Some(v) = self.lock().by_file.get(&key).filter(|v| v.place == place) {
            v.used.store(now, Ordering::Relaxed);
            return Ok(Arc::clone(v));
        }
        // Mapped without the lock: opening and mapping take tens of microseconds.
        let (f, size) = open(pid, file)?;
        if size != place.len {
            return Err(not_it(&format!(
                "{size} bytes, not the slab's {}",
                place.len
            )));
        }
        let len = usize::try_from(place.len).map_err(|_| not_it("larger than memory"))?;
        let ptr = map(len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd()).map_err(|source| {
            CmaError::Os {
                pid,
                what: "mapping a slab",
                source,
            }
        })?;
        let view = Arc::new(View {
            pid,
            ptr,
            place,
            used: AtomicU64::new(now),
        });
        let mut s = self.lock();
        if let Some(old) = s.by_file.insert(key, Arc::clone(&view)) {
            s.bytes -= old.place.len;
        }
        s.bytes += place.len;
        while s.bytes > self.most && s.by_file.len() > 1 {
            let oldest = s
                .by_file
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, v)| v.used.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            let Some(oldest) = oldest else { break };
            if let Some(gone) = s.by_file.remove(&oldest) {
                s.bytes -= gone.place.len;
            }
        }
        Ok(view)
    }

    /// Lets go of the views not read since the last sweep (called every few seconds: a
    /// view of a slab its owner let go, or of an owner gone, is used no more).
    pub fn sweep(&self) {
        let now = self.clock.load(Ordering::Relaxed);
        let mut s = self.lock();
        let since = s.swept;
        let before = s.by_file.len();
        s.by_file
            .retain(|_, v| v.used.load(Ordering::Relaxed) >= since);
        if s.by_file.len() != before {
            s.bytes = s.by_file.values().map(|v| v.place.len).sum();
        }
        s.swept = now;
    }

    /// Bytes of address space the views kept take.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buffer;

    /// A buffer of a slab, counting up from `seed`.
    fn offered(len: usize, seed: u8) -> Buffer {
        let mut b = Buffer::for_offer(len).expect("buffer");
        for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
            *x = (i as u8).wrapping_add(seed);
        }
        b
    }

    #[test]
    fn copies_out_of_a_slab_mapped_once_see_later_writes_and_fall_back_outside_it() {
        let views = Views::new(1 << 40);
        let pid = std::process::id();
        let mut a = offered(5 * 4096 + 3, 1);
        let b = offered(5 * 4096 + 3, 2);
        let file = a.memory_file().expect("a slab's file");
        let v = views.view(pid, file).expect("mapped");
        let again = views
            .view(pid, b.memory_file().expect("file"))
            .expect("kept");
        assert!(Arc::ptr_eq(&v, &again), "one view of one slab");
        let mut dst = vec![0u8; a.len()];
        v.read(a.as_slice().as_ptr() as u64, &mut dst)
            .expect("copied");
        assert_eq!(dst, a.as_slice());
        v.read(b.as_slice().as_ptr() as u64, &mut dst)
            .expect("copied");
        assert_eq!(dst, b.as_slice());
        // The view shares the owner's pages.
        a.as_mut_slice().fill(9);
        v.read(a.as_slice().as_ptr() as u64, &mut dst)
            .expect("copied");
        assert!(dst.iter().all(|&x| x == 9));
        // Memory outside the slab is read by system call.
        let plain = vec![5u8; 100];
        let mut out = vec![0u8; 100];
        v.read(plain.as_ptr() as u64, &mut out).expect("read");
        assert_eq!(out, plain);
        assert_eq!(views.bytes(), file.slab.expect("place").len);
    }

    #[test]
    fn a_file_that_is_not_the_slab_announced_is_refused() {
        let views = Views::new(1 << 40);
        let pid = std::process::id();
        let b = offered(4096, 0);
        let file = b.memory_file().expect("file");
        let whole = MemoryFile { slab: None, ..file };
        assert!(matches!(
            views.view(pid, whole),
            Err(CmaError::NotTheFile { .. })
        ));
        let mut wrong = file;
        wrong.inode = NonZeroU64::new(file.inode.get() + 1).expect("nonzero");
        assert!(matches!(
            views.view(pid, wrong),
            Err(CmaError::NotTheFile { .. })
        ));
        let mut longer = file;
        if let Some(p) = longer.slab.as_mut() {
            p.len += 4096;
        }
        assert!(matches!(
            views.view(pid, longer),
            Err(CmaError::NotTheFile { .. })
        ));
        assert_eq!(views.bytes(), 0);
    }

    #[test]
    fn views_are_bounded_and_those_unused_between_sweeps_let_go() {
        let pid = std::process::id();
        // Two slabs: buffers of two classes (6 and 7 pages, used by no other test).
        let (a, b) = (offered(6 * 4096, 0), offered(7 * 4096, 0));
        let (fa, fb) = (
            a.memory_file().expect("file"),
            b.memory_file().expect("file"),
        );
        let slab = fa.slab.expect("place").len;
        let views = Views::new(slab);
        let va = views.view(pid, fa).expect("mapped");
        views.view(pid, fb).expect("mapped");
        assert_eq!(views.bytes(), slab, "the older view let go");
        drop(va);
        views.sweep();
        assert_eq!(views.bytes(), slab, "read since the last sweep");
        views.sweep();
        assert_eq!(views.bytes(), 0, "unused since the last sweep");
    }
}
