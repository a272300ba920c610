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

/// The default of [`crate::policy::Policy::max_bytes`] on this node: a quarter of its
/// memory (`MemTotal` of `/proc/meminfo`), at least
/// 256 MiB; [`crate::policy::MAX_BYTES`] where `/proc` does not tell.
pub fn default_max_bytes() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| quarter_of_memory(&m))
        .unwrap_or(crate::policy::MAX_BYTES)
}

/// A quarter of the `MemTotal` that `meminfo` (the text of `/proc/meminfo`) gives, at
/// least 256 MiB.
fn quarter_of_memory(meminfo: &str) -> Option<usize> {
    let kib: usize = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some((kib.saturating_mul(1024) / 4).max(256 << 20))
}

/// The process figures every Prometheus client exports (`process_*`), read from `/proc`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Virtual memory size in bytes.
    pub virtual_bytes: u64,
    /// Resident memory in bytes.
    pub resident_bytes: u64,
    /// Descriptors open now.
    pub open_fds: u64,
    /// The soft limit of open descriptors.
    pub max_fds: u64,
}

impl ProcessStats {
    /// This process's figures; `None` where `/proc` does not tell (not Linux).
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        // SAFETY: sysconf has no preconditions.
        let (tick, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let mut s = ProcessStats::parse(
            &stat,
            &boot,
            u64::try_from(tick).ok()?,
            u64::try_from(page).ok()?,
        )?;
        s.open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct passed.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            s.max_fds = lim.rlim_cur;
        }
        Some(s)
    }

    /// The figures in `/proc/self/stat`'s line `stat` with `/proc/stat`'s `boot` (its
    /// `btime`), `tick` clock ticks per second and `page` bytes per page; `None` for a line
    /// not of that form (descriptors are not counted here).
    pub fn parse(stat: &str, boot: &str, tick: u64, page: u64) -> Option<ProcessStats> {
        if tick == 0 {
            return None;
        }
        // The command name (field 2) is in parentheses and may hold spaces and ')': the
        // fields counted from 3 follow the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let field = |n: usize| -> Option<u64> { rest.split_whitespace().nth(n - 3)?.parse().ok() };
        let btime: u64 = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        let ticks = |t: u64| t as f64 / tick as f64;
        Some(ProcessStats {
            cpu_seconds: ticks(field(14)? + field(15)?),
            start_time_seconds: btime as f64 + ticks(field(22)?),
            virtual_bytes: field(23)?,
            resident_bytes: field(24)?.checked_mul(page)?,
            open_fds: 0,
            max_fds: 0,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_the_nodes_memory_is_the_pools_budget() {
        let meminfo = "MemTotal:       24554312 kB\nMemFree:        1 kB\n";
        assert_eq!(quarter_of_memory(meminfo), Some(24_554_312 * 1024 / 4));
        assert_eq!(quarter_of_memory("MemTotal: 1024 kB\n"), Some(256 << 20));
        assert_eq!(quarter_of_memory("garbage"), None);
        assert!(default_max_bytes() >= 256 << 20);
    }

    #[test]
    fn process_figures_come_from_the_stat_line_after_the_command_name() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 3 0 \
                    1000 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
        let s = ProcessStats::parse(stat, boot, 100, 4096).expect("parses");
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_bytes, 104_857_600);
        assert_eq!(s.resident_bytes, 2560 * 4096);
        for (stat, boot) in [
            ("4242 (x) S 1", boot),
            ("no parenthesis", boot),
            (stat, "cpu 1 2 3\n"),
        ] {
            assert_eq!(
                ProcessStats::parse(stat, boot, 100, 4096),
                None,
                "{stat:?} {boot:?}"
            );
        }
        assert_eq!(ProcessStats::parse(stat, boot, 0, 4096), None);
    }

    #[test]
    fn this_process_has_figures() {
        let s = ProcessStats::read().expect("/proc is there");
        assert!(
            s.resident_bytes > 0 && s.virtual_bytes >= s.resident_bytes,
            "{s:?}"
        );
        assert!(s.open_fds >= 3 && s.max_fds >= s.open_fds, "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        assert!(
            s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86_400.0 * 365.0,
            "{s:?}"
        );
    }
}
