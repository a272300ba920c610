//! Cross-memory attach: copying bytes straight out of another process's memory on this
//! host (`process_vm_readv`), as MPI libraries do between ranks of a node.
//!
//! Between processes of one host, an RMA read over the shared-memory provider needs the
//! target's progress (its progress thread copies the bytes, or hands the reader a
//! descriptor), and with `block` progress that thread may be asleep. Here the reader copies
//! alone, once, with no work for the other process. The kernel allows it where it allows
//! `ptrace` reads: same user, and not forbidden by Yama's `ptrace_scope` or a hardened
//! container; [`CmaError::Denied`] says so, and callers fall back to the fabric.

use std::io;

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
    /// Any other OS error.
    #[error("process {pid}: process_vm_readv: {source}")]
    Os {
        /// The process.
        pid: u32,
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
                _ => CmaError::Os { pid, source },
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
}
