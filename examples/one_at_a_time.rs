//! one_at_a_time: what one CDO's whole life costs a blocking producer that handles its CDOs
//! one at a time, as most real producers do (no pipelining): declare, a fresh buffer,
//! `seal_and_offer`, `withdraw`, the buffer dropped, `dispose`, against a bare round trip
//! to the PM (declare and `require` of a CDO nobody offers). A pool manager runs in this
//! process (its own thread), the client joins it over its Unix socket, through
//! shared-memory rings unless `--no-rings`.
//!
//!     one_at_a_time [--cdos N] [--size BYTES] [--no-rings]
//!
//! Prints microseconds per CDO for each.

use std::time::{Duration, Instant};

use clap::Parser;
use pool::{Client, JoinOptions, PmConfig, PoolManager};

/// Times a CDO's life one at a time against a bare round trip.
#[derive(Parser)]
struct Args {
    /// CDOs per measure.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    cdos: u32,
    /// Bytes per CDO.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=(64 << 20)))]
    size: u32,
    /// Keep the control connection on the PM's Unix socket (no shared-memory rings).
    #[arg(long)]
    no_rings: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let secret = pool::bootstrap::new_secret()?;
    let listen = vec![std::net::SocketAddr::from(([127, 0, 0, 1], 0))];
    let pm = PoolManager::start(PmConfig::new("one-at-a-time", &secret, listen))?;
    let c = Client::join(
        pm.info(),
        JoinOptions::new("producer", 0)
            .rings(!args.no_rings)
            .timeout(Duration::from_secs(60)),
    )?;
    let n = args.cdos as usize;
    let per = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let t = Instant::now();
    for i in 0..n {
        let cdo = c.declare(&format!("unoffered/{i}"))?;
        c.require(cdo)?;
    }
    println!("declare + require (a bare round trip): {:.1} us", per(t));
    let bytes = vec![1u8; args.size as usize];
    let t = Instant::now();
    for i in 0..n {
        let cdo = c.declare(&format!("field/{i}"))?;
        c.seal_and_offer(cdo, Default::default(), fabric::Buffer::from_slice(&bytes)?)?;
        drop(c.withdraw(cdo)?);
        c.dispose(cdo)?;
    }
    println!(
        "{} B: declare, a fresh buffer, seal_and_offer, withdraw, the buffer dropped, dispose: {:.1} us",
        args.size,
        per(t)
    );
    c.leave()?;
    Ok(())
}
