//! `maestro bench copy`: what a same-host consumer pays per CDO to take bytes out of a
//! provider's memory, by each way there is, between two processes: an owner process
//! (`fabric-peer owner --shareable`) keeps a region in a memory file, and this process
//! copies it in ranges of each size, walking the whole region (memory not in its caches):
//!
//! - **one call per range**: `process_vm_readv` of one range, as a demand copies today;
//! - **`--batch` ranges per call**: one `process_vm_readv` of several ranges;
//! - **a view**: the owner's memory file mapped once ([`fabric::cma::map`], its pages
//!   populated then), each range copied out of it with `memcpy`, no system call; the map's
//!   cost shared by the ranges, and a second walk over the same view (its pages mapped
//!   already: a consumer that keeps a producer's memory mapped and copies again).
//!
//! Each way's bytes are checked against the owner's pattern.

use std::time::{Duration, Instant};

use fabric::cma;
use serde::Serialize;

use crate::pattern;
use crate::peer::{OwnerProcess, PeerError, Remote, SEED, Serving};

/// The command line of `maestro bench copy`.
#[derive(Clone, Debug, clap::Args)]
pub struct CopyArgs {
    /// Range sizes (K, M, G = powers of 1024).
    #[arg(long, default_value = "4K,64K,1M", value_parser = pool_tools::cli::parse_sizes)]
    sizes: std::vec::Vec<usize>,
    /// The owner's region, walked once per way and size (at least the largest size).
    #[arg(long, default_value = "256M", value_parser = pool_tools::cli::parse_size)]
    volume: usize,
    /// Ranges per call of the batched way (1 to 1024, the kernel's most).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    batch: u16,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One size's figures: microseconds per range by each way.
#[derive(Debug, Serialize)]
struct Row {
    size: usize,
    ranges: usize,
    one_per_call_us: f64,
    batched_us: f64,
    map_us: f64,
    view_us: f64,
    view_again_us: f64,
}

/// Runs `maestro bench copy` and prints its table (or JSON).
///
/// # Errors
/// [`PeerError::Usage`] for bad options; the owner process's; [`PeerError::Cma`] for a
/// copy or view the kernel refuses (cross-memory access needs the same user and a Yama
/// `ptrace_scope` of 0); [`PeerError::Corrupt`] for bytes that are not the owner's.
pub fn main(args: &CopyArgs) -> Result<(), PeerError> {
    let largest = args.sizes.iter().copied().max().unwrap_or(0);
    if args.sizes.contains(&0) || args.volume < largest {
        return Err(PeerError::Usage(format!(
            "--sizes must be above 0 and --volume ({}) at least the largest size ({largest})",
            args.volume
        )));
    }
    let owner = OwnerProcess::spawn(
        "shm",
        (args.volume, true),
        Serving::Ours(fabric::ProgressMode::Block),
        &Remote::default(),
    )?;
    let rows = args
        .sizes
        .iter()
        .map(|&size| measure(&owner, size, usize::from(args.batch)))
        .collect::<Result<Vec<_>, _>>()?;
    if args.json {
        let json = serde_json::json!({ "volume": args.volume, "batch": args.batch, "rows": rows });
        println!("{json}");
    } else {
        print!("{}", table(args, &rows));
    }
    Ok(())
}

/// The figures of `size`: the owner's region walked in ranges of it by each way.
fn measure(owner: &OwnerProcess, size: usize, batch: usize) -> Result<Row, PeerError> {
    let info = &owner.info;
    let ranges = usize::try_from(info.region.len).unwrap_or(usize::MAX) / size;
    let at = |i: usize| info.addr + (i * size) as u64;
    let mut dst = vec![0u8; size * batch];

    let start = Instant::now();
    for i in 0..ranges {
        cma::read(info.pid, at(i), &mut dst[..size])?;
    }
    let one = per_range(start.elapsed(), ranges);
    check(size, (ranges - 1) * size, &dst[..size])?;

    let start = Instant::now();
    for first in (0..ranges).step_by(batch) {
        let mut calls: Vec<(u64, &mut [u8])> = dst
            .chunks_mut(size)
            .enumerate()
            .take(ranges - first)
            .map(|(j, d)| (at(first + j), d))
            .collect();
        cma::read_many(info.pid, &mut calls)?;
    }
    let batched = per_range(start.elapsed(), ranges);
    // The first slot holds the last call's first range.
    check(size, (ranges - 1) / batch * batch * size, &dst[..size])?;

    let file = info
        .file
        .ok_or_else(|| PeerError::Usage("the owner announced no memory file to map".into()))?;
    let start = Instant::now();
    let view = cma::map(info.pid, file, ranges * size)?;
    let map = per_range(start.elapsed(), ranges);
    let walk = |dst: &mut [u8]| {
        let start = Instant::now();
        for range in view.as_slice().chunks_exact(size) {
            dst.copy_from_slice(range);
            std::hint::black_box(&mut *dst);
        }
        per_range(start.elapsed(), ranges)
    };
    let view_us = walk(&mut dst[..size]);
    let again = walk(&mut dst[..size]);
    check(size, (ranges - 1) * size, &dst[..size])?;
    Ok(Row {
        size,
        ranges,
        one_per_call_us: one,
        batched_us: batched,
        map_us: map,
        view_us,
        view_again_us: again,
    })
}

fn per_range(d: Duration, ranges: usize) -> f64 {
    d.as_secs_f64() * 1e6 / ranges.max(1) as f64
}

/// Whether `got` is the owner's pattern at `offset` (a multiple of 8): the pattern is
/// made again for the range and compared.
fn check(size: usize, offset: usize, got: &[u8]) -> Result<(), PeerError> {
    let mut want = vec![0u8; size];
    pattern::fill_from(&mut want, SEED, (offset / 8) as u64);
    if want == got {
        return Ok(());
    }
    Err(PeerError::Corrupt {
        len: size,
        got: pattern::checksum(got),
        expected: pattern::checksum(&want),
    })
}

fn table(args: &CopyArgs, rows: &[Row]) -> String {
    let mut out = format!(
        "same-host copies out of another process's memory ({} MiB region, µs per range)\n\
         | size | ranges | process_vm_readv, 1 per call | {} per call | view: map, per range | copy from the view | again |\n\
         |---|---|---|---|---|---|---|\n",
        args.volume >> 20,
        args.batch
    );
    for r in rows {
        out += &format!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
            crate::human(r.size),
            r.ranges,
            r.one_per_call_us,
            r.batched_us,
            r.map_us,
            r.view_us,
            r.view_again_us
        );
    }
    out
}
