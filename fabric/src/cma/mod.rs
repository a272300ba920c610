//! Cross-memory attach: copying bytes straight out of another process's memory on this
//! host (`process_vm_readv`), as MPI libraries do between ranks of a node.
//!
//! Between processes of one host, an RMA read over the shared-memory provider needs the
//! target's progress (its progress thread copies the bytes, or hands the reader a
//! descriptor), and with `block` progress that thread may be asleep. Here the reader copies
//! alone, once, with no work for the other process. The kernel allows it where it allows
//! `ptrace` reads: same user, and not forbidden by Yama's `ptrace_scope` or a hardened
//! container; [`CmaError::Denied`] says so, and callers fall back to the fabric.
//!
//! Better than one copy is none: a buffer made with [`crate::Buffer::shareable`] lives in a
//! memory file, and [`map`] gives a process of the same host a view of those very pages
//! (opened through `/proc/<pid>/fd/<fd>`, under the same permission as the copy). Small
//! buffers share slabs ([`crate::Buffer::for_offer`]): [`Views`] maps each slab once and
//! copies a buffer out of it with a `memcpy`, no system call.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use fabric_types::MemoryFile;

use crate::Buffer;
pub use crate::pages::huge_shared_pages;
use crate::pages::{huge_pages, map as map_pages, pages};

mod views;
pub use views::{Origin, View, Views};

/// Why a cross-memory copy did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CmaError {
    /// The kernel refuses this process access to the other's memory.
    #[error(
        "process {pid}: cross-memory reads are not permitted ({source}); they need the same user and a Yama ptrace_scope of 0 (/proc/sys/kernel/yama/ptrace_scope), else reads go over the fabric"
    )]
    Denied {
        /// The process.
        pid: u32,
        /// The OS error (`EPERM`).
        source: io::Error,
    },
    /// No such process (it exited, or lives in another PID namespace).
    #[error("process {pid} does not exist here")]
    NoProcess {
        /// The process.
        pid: u32,
    },
    /// The range is not mapped in the other process (or not in this one).
    #[error("process {pid}: {len} bytes at {addr:#x} are not readable there ({source})")]
    BadAddress {
        /// The process.
        pid: u32,
        /// Start of the range in its memory.
        addr: u64,
        /// Length.
        len: usize,
        /// The OS error.
        source: io::Error,
    },
    /// The descriptor does not name the memory file announced (it was closed, and perhaps
    /// reused), or the file is not sealed against shrinking (a view could lose its pages).
    #[error("process {pid}: descriptor {fd} is not the memory file announced ({why})")]
    NotTheFile {
        /// The process.
        pid: u32,
        /// The descriptor number.
        fd: u32,
        /// What did not match.
        why: String,
    },
    /// Any other OS error.
    #[error("process {pid}: {what}: {source}")]
    Os {
        /// The process.
        pid: u32,
        /// The call that failed.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

/// Largest piece of one `process_vm_readv` call: the kernel pins the remote pages of each
/// call, and a bounded piece keeps that bounded.
const PIECE: usize = 64 << 20;

/// Copies `dst.len()` bytes at `addr` in process `pid` into `dst` (the whole range, in as
/// many calls as the kernel needs). Blocks for the copy: call it off async runtimes for
/// large ranges.
///
/// # Errors
/// [`CmaError::Denied`] (not permitted), [`CmaError::NoProcess`], [`CmaError::BadAddress`]
/// (the range is not mapped there, or the process unmapped it meanwhile), or another OS
/// error. On an error `dst` may hold part of the bytes.
pub fn read(pid: u32, addr: u64, dst: &mut [u8]) -> Result<(), CmaError> {
    let os_pid = libc::pid_t::try_from(pid).map_err(|_| CmaError::NoProcess { pid })?;
    let mut done = 0usize;
    while done < dst.len() {
        let want = (dst.len() - done).min(PIECE);
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: want,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: want,
        };
        // SAFETY: `local` covers `want` writable bytes of `dst`; the kernel checks the
        // remote range against the other process's mappings and never writes there.
        let n = unsafe { libc::process_vm_readv(os_pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let source = io::Error::last_os_error();
            return Err(match source.raw_os_error() {
                Some(libc::EPERM) => CmaError::Denied { pid, source },
                Some(libc::ESRCH) => CmaError::NoProcess { pid },
                Some(libc::EFAULT) => CmaError::BadAddress {
                    pid,
                    addr,
                    len: dst.len(),
                    source,
                },
                Some(libc::EINTR) => continue,
                _ => CmaError::Os {
                    pid,
                    what: "process_vm_readv",
                    source,
                },
            });
        }
        if n == 0 {
            // Nothing more readable: the range ends in an unmapped page.
            return Err(CmaError::BadAddress {
                pid,
                addr,
                len: dst.len(),
                source: io::Error::from_raw_os_error(libc::EFAULT),
            });
        }
        done += n as usize;
    }
    Ok(())
}

/// Most ranges of one `process_vm_readv` call (the kernel's `IOV_MAX`).
const RANGES: usize = 1024;

/// Copies several ranges of process `pid` at once: `(addr, dst)` pairs, each `dst.len()`
/// bytes at `addr` into `dst`, in as few calls as the kernel takes (up to 1024 ranges and
/// 64 MiB per call): the members of a group from one provider in one copy instead of one
/// call each. Blocks for the copy.
///
/// # Errors
/// As [`read`], for the first range that could not be read (`addr` and `len` name it);
/// the ranges before it are copied, those after it may not be.
pub fn read_many(pid: u32, ranges: &mut [(u64, &mut [u8])]) -> Result<(), CmaError> {
    let os_pid = libc::pid_t::try_from(pid).map_err(|_| CmaError::NoProcess { pid })?;
    let mut next = 0;
    while next < ranges.len() {
        // One call: as many whole ranges as fit, at least one (a range larger than a
        // call's bytes goes to `read`, which splits it).
        let mut end = next;
        let mut bytes = 0usize;
        while end < ranges.len() && end - next < RANGES {
            let len = ranges[end].1.len();
            if end > next && bytes + len > PIECE {
                break;
            }
            bytes += len;
            end += 1;
        }
        if end == next + 1 && bytes > PIECE {
            let (addr, dst) = &mut ranges[next];
            read(pid, *addr, dst)?;
            next = end;
            continue;
        }
        let (local, remote): (Vec<libc::iovec>, Vec<libc::iovec>) = ranges[next..end]
            .iter_mut()
            .map(|(addr, dst)| {
                let local = libc::iovec {
                    iov_base: dst.as_mut_ptr().cast(),
                    iov_len: dst.len(),
                };
                let remote = libc::iovec {
                    iov_base: *addr as usize as *mut libc::c_void,
                    iov_len: dst.len(),
                };
                (local, remote)
            })
            .unzip();
        // SAFETY: each local iovec covers the writable bytes of its `dst`, borrowed
        // mutably for the call; the kernel checks the remote ranges against the other
        // process's mappings and never writes there. Both arrays have `end - next`
        // (at most 1024) entries.
        let n = unsafe {
            libc::process_vm_readv(
                os_pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        let Ok(mut left) = usize::try_from(n) else {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // The first range read alone says which failed and why (or that it passed).
            let (addr, dst) = &mut ranges[next];
            read(pid, *addr, dst)?;
            next += 1;
            continue;
        };
        // Transfers stop between whole ranges (the kernel never splits one).
        let first = next;
        while next < end && left >= ranges[next].1.len() {
            left -= ranges[next].1.len();
            next += 1;
        }
        if next == first {
            // Nothing read: the first range alone says why.
            let (addr, dst) = &mut ranges[next];
            read(pid, *addr, dst)?;
            next += 1;
        }
    }
    Ok(())
}

/// Bytes each thread of [`read_many_parallel`] copies at least: below it, starting a
/// thread (tens of microseconds) costs more than sharing the copy saves.
pub const PARALLEL_MIN: usize = 2 << 20;

/// As [`read_many`], the ranges split by bytes among up to `threads` threads (the caller's
/// one of them), each taking at least [`PARALLEL_MIN`]: a copy of many megabytes is bound
/// by one core's page pinning and copying, and the kernel copies for several callers at
/// once. A thread the system cannot start leaves its share to the caller's.
///
/// # Errors
/// As [`read_many`], for the first share that failed (others may be copied or not).
pub fn read_many_parallel(
    pid: u32,
    ranges: &mut [(u64, &mut [u8])],
    threads: usize,
) -> Result<(), CmaError> {
    let total: usize = ranges.iter().map(|(_, d)| d.len()).sum();
    let threads = threads.min(total / PARALLEL_MIN).max(1);
    if threads == 1 {
        return read_many(pid, ranges);
    }
    let per = total.div_ceil(threads);
    let mut shares: Vec<&mut [(u64, &mut [u8])]> = Vec::with_capacity(threads);
    let mut rest = ranges;
    while !rest.is_empty() {
        let mut bytes = 0;
        let n = rest
            .iter()
            .take_while(|(_, d)| {
                let more = bytes < per;
                bytes += d.len();
                more
            })
            .count()
            .max(1);
        let (share, after) = rest.split_at_mut(n);
        shares.push(share);
        rest = after;
    }
    // Each thread takes shares until none is left: a thread that cannot start leaves
    // its share to the others.
    let queue = std::sync::Mutex::new(shares);
    let work = || {
        let mut result = Ok(());
        loop {
            let share = queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop();
            let Some(share) = share else {
                return result;
            };
            result = result.and(read_many(pid, share));
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("cma-copy".into())
                    .spawn_scoped(scope, work)
                    .ok()
            })
            .collect();
        let mut result = work();
        for helper in helpers {
            let theirs = helper
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            result = result.and(theirs);
        }
        result
    })
}

/// Whether process `pid` holds `token` at `addr`: how a reader checks that a process id it
/// was told names the process that told it, not another process with that number (in
/// another PID namespace, or after the id was reused).
///
/// # Errors
/// As [`read`]; `Ok(false)` when the process holds something else there.
pub fn holds(pid: u32, addr: u64, token: u64) -> Result<bool, CmaError> {
    let mut got = [0u8; 8];
    read(pid, addr, &mut got)?;
    Ok(u64::from_ne_bytes(got) == token)
}

/// Maps the first `len` bytes of memory file `file` of process `pid` (see
/// [`Buffer::shareable`]): no copy, the view shares the owner's pages, populated here.
/// Writes through the view stay private to it (copy-on-write); the owner must not write to
/// the file while the view is used (the pool's rule for offered bytes, and its owner
/// remaps privately before writing again: [`Buffer::keep_private`]). The view lives on if
/// the owner exits or frees its buffer.
///
/// # Errors
/// [`CmaError::Denied`] (opening another process's descriptors needs the permission of a
/// cross-memory copy), [`CmaError::NoProcess`], [`CmaError::NotTheFile`] (closed, reused,
/// shorter than `len` or unsealed), [`CmaError::Os`] when the kernel cannot map it.
pub fn map(pid: u32, file: MemoryFile, len: usize) -> Result<Buffer, CmaError> {
    let os = |what, source| CmaError::Os { pid, what, source };
    let (f, size) = open(pid, file)?;
    if size < pages(len) as u64 {
        let why = format!("{size} bytes, not {len}");
        return Err(CmaError::NotTheFile {
            pid,
            fd: file.fd,
            why,
        });
    }
    // Whole huge pages where the file has them (one page-table entry each).
    let mapped = if size >= huge_pages(len) as u64 {
        huge_pages(len)
    } else {
        pages(len)
    };
    let flags = libc::MAP_PRIVATE | libc::MAP_POPULATE;
    let ptr =
        map_pages(mapped, libc::PROT_READ, flags, f.as_raw_fd()).map_err(|e| os("mmap", e))?;
    let view = Buffer::mapped(ptr, len, mapped, None);
    // Writable, copy-on-write: a consumer that changes its bytes changes only its own.
    // SAFETY: changes the protection of the mapping just made, owned by `view`.
    if unsafe { libc::mprotect(ptr.cast(), mapped, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
        return Err(os("mprotect", io::Error::last_os_error()));
    }
    Ok(view)
}

/// Opens memory file `file` of process `pid` for reading, checked to be the file announced
/// (its inode) and sealed against shrinking (a view of it can never lose its pages); the
/// file and its length.
///
/// # Errors
/// As [`map`].
fn open(pid: u32, file: MemoryFile) -> Result<(std::fs::File, u64), CmaError> {
    let fd = file.fd;
    let not_it = |why: String| CmaError::NotTheFile { pid, fd, why };
    let os = |what, source| CmaError::Os { pid, what, source };
    let opened = std::fs::File::open(format!("/proc/{pid}/fd/{fd}"));
    let f = opened.map_err(|source| match source.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => CmaError::Denied { pid, source },
        Some(libc::ENOENT) if !std::path::Path::new(&format!("/proc/{pid}")).exists() => {
            CmaError::NoProcess { pid }
        }
        Some(libc::ENOENT) => not_it("no such descriptor".into()),
        _ => os("opening the memory file", source),
    })?;
    let meta = f.metadata().map_err(|e| os("fstat", e))?;
    if meta.ino() != file.inode.get() {
        return Err(not_it(format!("inode {}", meta.ino())));
    }
    // SAFETY: a plain call on a valid descriptor.
    let seals = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(not_it("not sealed against shrinking".into()));
    }
    Ok((f, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_memory_in_pieces_and_names_bad_ranges() {
        let src: Vec<u8> = (0..3 * PIECE / 2).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        read(std::process::id(), src.as_ptr() as u64, &mut dst).expect("own memory");
        assert!(dst == src);

        let token = Box::new(0x5eed_u64);
        let at = &raw const *token as u64;
        assert!(holds(std::process::id(), at, 0x5eed).expect("readable"));
        assert!(!holds(std::process::id(), at, 1).expect("readable"));

        let err = read(std::process::id(), 8, &mut [0u8; 8]).expect_err("page 0 is unmapped");
        assert!(matches!(err, CmaError::BadAddress { .. }), "{err}");
        let err = read(u32::MAX, at, &mut [0u8; 8]).expect_err("no such process");
        assert!(matches!(err, CmaError::NoProcess { .. }), "{err}");
    }

    /// Buffers of zeroes as long as `sources`.
    fn zeroed_like(sources: &[Vec<u8>]) -> Vec<Vec<u8>> {
        sources.iter().map(|s| vec![0; s.len()]).collect()
    }

    /// Ranges copying each of `sources` (in this process) into its `dsts`.
    fn ranges_of<'a>(sources: &[Vec<u8>], dsts: &'a mut [Vec<u8>]) -> Vec<(u64, &'a mut [u8])> {
        sources
            .iter()
            .zip(dsts.iter_mut())
            .map(|(s, d)| (s.as_ptr() as u64, d.as_mut_slice()))
            .collect()
    }

    #[test]
    fn reads_many_ranges_in_few_calls_and_names_the_bad_one() {
        let me = std::process::id();
        // More ranges than one call takes, of many sizes (empty ones too).
        let sources: Vec<Vec<u8>> = (0..2500usize)
            .map(|i| (0..(i * 37) % 5000).map(|j| (i + j) as u8).collect())
            .collect();
        let mut dsts = zeroed_like(&sources);
        let mut ranges = ranges_of(&sources, &mut dsts);
        read_many(me, &mut ranges).expect("own memory");
        assert!(dsts == sources);

        // An unmapped range in the middle: the error names it; those before it are read.
        let good = [5u8; 100];
        let (mut a, mut bad, mut c) = ([0u8; 100], [0u8; 16], [0u8; 100]);
        let mut ranges: Vec<(u64, &mut [u8])> = vec![
            (good.as_ptr() as u64, &mut a),
            (8, &mut bad),
            (good.as_ptr() as u64, &mut c),
        ];
        let err = read_many(me, &mut ranges).expect_err("page 0 is unmapped");
        assert!(
            matches!(
                err,
                CmaError::BadAddress {
                    addr: 8,
                    len: 16,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(a, [5u8; 100]);
    }

    #[test]
    fn reads_many_ranges_with_several_threads_and_names_a_bad_one() {
        let me = std::process::id();
        // 40 ranges of 300 KiB (12 MB: several shares) and a few small ones between.
        let sources: Vec<Vec<u8>> = (0..44usize)
            .map(|i| {
                let len = if i % 11 == 0 { 7 } else { 300 << 10 };
                (0..len).map(|j| (i * 31 + j) as u8).collect()
            })
            .collect();
        let mut dsts = zeroed_like(&sources);
        let mut ranges = ranges_of(&sources, &mut dsts);
        read_many_parallel(me, &mut ranges, 4).expect("own memory");
        assert!(dsts == sources);

        // A bad range in the last share fails the whole copy, named.
        let mut dsts = zeroed_like(&sources);
        let mut ranges = ranges_of(&sources, &mut dsts);
        let last = ranges.len() - 1;
        ranges[last].0 = 8;
        let err = read_many_parallel(me, &mut ranges, 4).expect_err("page 0 is unmapped");
        assert!(matches!(err, CmaError::BadAddress { addr: 8, .. }), "{err}");
        assert!(dsts[0] == sources[0], "the first share was copied");
    }

    #[test]
    fn maps_a_shareable_buffer_without_a_copy_and_keeps_views_apart() {
        let me = std::process::id();
        let len = 3 * 4096 + 100;
        let mut owner = Buffer::shareable(len).expect("a memory file");
        owner.as_mut_slice().fill(7);
        let file = owner.memory_file().expect("shareable buffers have a file");

        let mut view = map(me, file, len).expect("own descriptor");
        assert_eq!(view.len(), len);
        assert!(view.as_slice().iter().all(|&b| b == 7));
        assert_ne!(view.as_slice().as_ptr(), owner.as_slice().as_ptr());
        // The view's writes are its own.
        view.as_mut_slice()[0] = 1;
        assert_eq!(owner.as_slice()[0], 7);

        // Nobody changes the bytes through the file, even opened read-write.
        let path = format!("/proc/{me}/fd/{}", file.fd);
        let rw = std::fs::OpenOptions::new().write(true).open(&path);
        let wrote = rw.and_then(|mut f| std::io::Write::write(&mut f, b"x"));
        assert!(wrote.is_err(), "a write through the file: {wrote:?}");
        assert_eq!(owner.as_slice()[0], 7);

        // The owner takes its buffer back: its writes are its own, the view keeps the bytes.
        let other = map(me, file, 4096).expect("a second view");
        owner.keep_private().expect("remapped");
        assert!(owner.memory_file().is_none());
        owner.as_mut_slice().fill(9);
        assert!(other.as_slice().iter().all(|&b| b == 7));
        drop(owner);
        assert!(
            other.as_slice().iter().all(|&b| b == 7),
            "a view outlives its owner"
        );
        assert_eq!(view.as_slice()[1], 7);

        // The descriptor is closed: nothing to map, or not the same file.
        let err = map(me, file, 4096).expect_err("closed");
        assert!(matches!(err, CmaError::NotTheFile { .. }), "{err}");
        let fresh = Buffer::shareable(4096).expect("a memory file");
        let mut wrong = fresh.memory_file().expect("file");
        wrong.inode = std::num::NonZeroU64::new(wrong.inode.get() + 1).expect("non-zero");
        let err = map(me, wrong, 4096).expect_err("another inode");
        assert!(err.to_string().contains("is not the memory file"), "{err}");
        let right = fresh.memory_file().expect("file");
        let err = map(me, right, 8192).expect_err("longer than the file");
        assert!(matches!(err, CmaError::NotTheFile { .. }), "{err}");
        let err = map(u32::MAX, right, 4096).expect_err("no such process");
        assert!(matches!(err, CmaError::NoProcess { .. }), "{err}");
    }
}
