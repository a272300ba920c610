//! Where the event-driven stream's CPU goes: the CPU time the consumer, the pool manager
//! and the provider spent over the stream, per CDO. The consumer and the PM share the
//! benchmark's process (the PM on its own thread, [`PoolManager::cpu_time`]); the
//! provider says its own process's time when asked (`cpu`, answered `cpu NANOSECONDS`),
//! on this node or another. CPU time counts what threads spend polling too (a waiting
//! thread's spin in `Client::block_on`, a progress thread's): a party that waits on a
//! busy machine shows more than its work.

use std::time::Duration;

use pool::PoolManager;

use super::{PoolBenchError, ProviderProcess};

/// The CPU time of this process so far, all its threads (`CLOCK_PROCESS_CPUTIME_ID`,
/// which Linux always has; zero if it could not be read).
pub(crate) fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: reads this process's CPU clock into `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// The CPU times of the stream's three parties at one moment.
pub(super) struct Sample {
    /// The benchmark's process: the consumer and the PM.
    ours: Duration,
    /// The PM's thread; `None` where its CPU clock cannot be read (then neither its share
    /// nor the consumer's is known).
    pm: Option<Duration>,
    provider: Duration,
}

/// CPU per CDO of the stream, µs: the consumer's (the benchmark's process less the PM's
/// thread), the PM's and the provider's process's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct PerCdo {
    pub(super) consumer_us: Option<f64>,
    pub(super) pm_us: Option<f64>,
    pub(super) provider_us: f64,
}

impl Sample {
    /// The three CPU times now (the provider asked and answering).
    ///
    /// # Errors
    /// The provider did not answer, or not with a number.
    pub(super) fn take(
        pm: &PoolManager,
        provider: &mut ProviderProcess,
    ) -> Result<Sample, PoolBenchError> {
        provider.tell("cpu")?;
        let said = provider.answer("cpu", Duration::from_secs(600))?;
        let nanos = said.parse::<u64>().map_err(|_| {
            PoolBenchError::Provider(format!("its CPU time {said:?} is not a number"))
        })?;
        Ok(Sample {
            ours: process_cpu(),
            pm: pm.cpu_time(),
            provider: Duration::from_nanos(nanos),
        })
    }

    /// The CPU each party spent from `self` to `later`, per CDO of `cdos`.
    pub(super) fn per_cdo(&self, later: &Sample, cdos: usize) -> PerCdo {
        let us = |d: Duration| d.as_secs_f64() * 1e6 / cdos.max(1) as f64;
        let pm = later.pm.zip(self.pm).map(|(l, s)| l.saturating_sub(s));
        let ours = later.ours.saturating_sub(self.ours);
        PerCdo {
            consumer_us: pm.map(|pm| us(ours.saturating_sub(pm))),
            pm_us: pm.map(us),
            provider_us: us(later.provider.saturating_sub(self.provider)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_party_gets_its_own_time_and_the_consumer_the_process_less_the_pm() {
        let ms = Duration::from_millis;
        let before = Sample {
            ours: ms(100),
            pm: Some(ms(40)),
            provider: ms(7),
        };
        let mut after = Sample {
            ours: ms(400),
            pm: Some(ms(140)),
            provider: ms(207),
        };
        // 300 ms of the process, 100 of them the PM's, over 100,000 CDOs.
        let per = before.per_cdo(&after, 100_000);
        assert_eq!(
            per,
            PerCdo {
                consumer_us: Some(2.0),
                pm_us: Some(1.0),
                provider_us: 2.0
            }
        );
        // Without the PM's clock neither its share nor the consumer's is known.
        after.pm = None;
        let per = before.per_cdo(&after, 100_000);
        assert_eq!((per.consumer_us, per.pm_us), (None, None));
    }

    #[test]
    fn the_process_clock_moves_with_work() {
        let before = process_cpu();
        let mut x = 0u64;
        while process_cpu() - before < Duration::from_millis(5) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(x > 0);
    }
}
