//! What changing a CDO's layout costs against the copy every transfer makes anyway: a
//! row-major matrix of `BYTES` (default 1 GiB) of `ELEMENT`-byte elements (default 8, a
//! `double`) transposed to column-major with [`pool_core::layout::transform`], against a
//! plain copy of the same bytes into fresh memory. Both write memory touched before the
//! clock starts, so neither times page faults.
//!
//!     cargo run --release -p pool-core --example layout_cost [BYTES] [ELEMENT] [DIMS]
//!
//! DIMS (default 2) shapes the array as a cube of that many equal dimensions. Prints GB/s
//! of each, the median of five runs, and the ratio.

use std::time::{Duration, Instant};

use pool_core::layout::{Layout, Order, transform};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bytes: u64 = args.next().map_or(Ok(1 << 30), |a| a.parse())?;
    let element: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    let ndims: u32 = args.next().map_or(Ok(2), |a| a.parse())?;
    if !(1..=16).contains(&element) || !(1..=6).contains(&ndims) {
        return Err("ELEMENT: 1 to 16 bytes; DIMS: 1 to 6".into());
    }
    let elements = bytes / element as u64;
    let side = (elements as f64).powf(1.0 / f64::from(ndims)).floor() as u64;
    if side == 0 {
        return Err("BYTES: too few for one element".into());
    }
    let dims = vec![side; ndims as usize];
    let from = Layout {
        order: Order::RowMajor,
        element_size: element,
        dims: dims.clone(),
    };
    let to = Layout {
        order: Order::ColumnMajor,
        ..from.clone()
    };
    let len = usize::try_from(from.bytes().ok_or("too large")?)?;
    let src: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut dst = vec![1u8; len];
    let mut copy_times = Vec::new();
    let mut transform_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        copy_times.push(t.elapsed());
        std::hint::black_box(&dst);
        let t = Instant::now();
        transform(&src, &from, &to, &mut dst)?;
        transform_times.push(t.elapsed());
        std::hint::black_box(&dst);
    }
    let gbps = |mut v: Vec<Duration>| {
        v.sort();
        len as f64 / v[v.len() / 2].as_secs_f64() / 1e9
    };
    let (copy, transposed) = (gbps(copy_times), gbps(transform_times));
    println!(
        "{from} -> column-major ({len} bytes): copy {copy:.2} GB/s, layout change {transposed:.2} GB/s, {:.2}x the copy's time",
        copy / transposed
    );
    Ok(())
}
