//! What copying a group's members out of another process's memory can reach on this
//! machine, without the pool: `COUNT` members of `SIZE` bytes copied with
//! `process_vm_readv` ([`fabric::cma::read_many`], batches of 256 as a drained group's
//! slices) from distinct buffers into distinct buffers (a drained group: every member lands
//! in memory of its own and is kept), and the same number of copies cycling through 16
//! buffers each side (a ping-pong benchmark with 16 messages in flight: the buffers stay in
//! the caches). Plain `memcpy` of the distinct buffers for comparison.
//!
//!     cargo run --release -p fabric --example copy_ceiling [SIZE] [COUNT]
//!
//! Defaults: 65536 bytes, 10,000 members. Prints GB/s for each, the best of three.

use std::time::Instant;

/// Members per `read_many` call, as the manager's slices of a group.
const BATCH: usize = 256;
/// Buffers each side when cycling (messages in flight).
const IN_FLIGHT: usize = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().map_or(Ok(65536), |a| a.parse())?;
    let count: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    if size == 0 || count < IN_FLIGHT || size.saturating_mul(count) > 4 << 30 {
        return Err("give SIZE > 0 and COUNT >= 16 with SIZE x COUNT <= 4 GiB".into());
    }
    let me = std::process::id();
    // Touched, so that no page fault is timed.
    let sources: Vec<Vec<u8>> = (0..count).map(|i| vec![i as u8; size]).collect();
    let mut dsts: Vec<Vec<u8>> = (0..count).map(|_| vec![1u8; size]).collect();
    let bytes = (size * count) as f64;
    let best = |f: &mut dyn FnMut() -> Result<(), fabric::cma::CmaError>| {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            f()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok::<f64, fabric::cma::CmaError>(bytes / best / 1e9)
    };

    let distinct = best(&mut || {
        for (src, dst) in sources.chunks(BATCH).zip(dsts.chunks_mut(BATCH)) {
            copy(me, src, dst)?;
        }
        Ok(())
    })?;
    let cycling = best(&mut || {
        for _ in 0..count / IN_FLIGHT {
            copy(me, &sources[..IN_FLIGHT], &mut dsts[..IN_FLIGHT])?;
        }
        Ok(())
    })?;
    let memcpy = best(&mut || {
        for (s, d) in sources.iter().zip(dsts.iter_mut()) {
            d.copy_from_slice(s);
        }
        Ok(())
    })?;
    if dsts.iter().zip(&sources).any(|(d, s)| d != s) {
        return Err("a copy differs from its source".into());
    }
    println!(
        "{count} members of {size} B: process_vm_readv distinct {distinct:.2} GB/s, \
         cycling through {IN_FLIGHT} {cycling:.2} GB/s; memcpy distinct {memcpy:.2} GB/s"
    );
    Ok(())
}

/// Copies each of `src` into its `dst` with one `read_many` (from this process `me`).
fn copy(me: u32, src: &[Vec<u8>], dst: &mut [Vec<u8>]) -> Result<(), fabric::cma::CmaError> {
    let mut ranges: Vec<(u64, &mut [u8])> = src
        .iter()
        .zip(dst.iter_mut())
        .map(|(s, d)| (s.as_ptr() as u64, d.as_mut_slice()))
        .collect();
    fabric::cma::read_many(me, &mut ranges)
}
