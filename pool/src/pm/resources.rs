//! What the PM asks of its process: the descriptor limit raised, resident memory read
//! (for observers and metrics) and given back to the system after a large pool drained,
//! and the wall clock its manager maps instants to.

use std::time::Instant;

use crate::Clock;

/// This process's resident memory in bytes (`/proc/self/statm`), where Linux tells.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|&p| p > 0)?)
}

/// Gives freed memory back to the OS after the CDO population fell to a quarter of its
/// high-water mark (of at least [`MemoryReturn::MIN_HIGH`] CDOs). The manager shrinks its
/// tables; glibc's allocator keeps the freed chunks mapped until `malloc_trim` (measured: a
/// PM that held a million CDOs stays at 140 MiB after they are withdrawn, 23 MiB after a
/// trim).
#[derive(Default)]
pub(super) struct MemoryReturn {
    pub(super) high: usize,
}

impl MemoryReturn {
    /// Populations below this are not worth a trim.
    const MIN_HIGH: usize = 100_000;

    pub(super) fn after(&mut self, live: usize) {
        self.high = self.high.max(live);
        if self.high >= Self::MIN_HIGH && live * 4 < self.high {
            self.high = live;
            #[cfg(target_env = "gnu")]
            // SAFETY: malloc_trim only returns free memory to the OS.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

/// Raises this process's soft limit of open descriptors to its hard limit: a PM holds a
/// socket per application plus those waiting for admission, more than Linux's default
/// soft limit of 1024.
pub(super) fn raise_descriptor_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::debug!("pool manager: could not raise the descriptor limit");
            }
        }
    }
}

/// The manager's clock: now, on both the monotonic and the wall clock (0 if the wall clock
/// is before the Unix epoch).
pub(super) fn wall_clock() -> Clock {
    Clock {
        origin: Instant::now(),
        origin_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)),
    }
}
