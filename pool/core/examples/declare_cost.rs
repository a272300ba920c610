//! What a declare costs an app's client core with many CDOs alive: a producer that keeps
//! hundreds of thousands of offers until it withdraws them all at the end (the event-driven
//! stream of `maestro bench pool --events` does) declares each into a table that keeps
//! growing. No manager is asked: the declares stay queued in the core.
//!
//!     cargo run --release -p pool-core --features sim --example declare_cost [CDOS]
//!
//! Prints nanoseconds per declare with CDOS CDOs declared one after the other (default
//! 200,000), the best of five runs, each a fresh app.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cdos: usize = std::env::args().nth(1).map_or(Ok(200_000), |a| a.parse())?;
    if cdos == 0 || cdos > 1 << 24 {
        return Err("CDOS: give 1 to 16777216 CDOs".into());
    }
    let names: Vec<String> = (0..cdos).map(|i| format!("field/{i}")).collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let mut world = pool_core::sim::World::new();
        let producer = world.join("producer", true);
        let core = world.core(producer);
        let started = Instant::now();
        for name in &names {
            core.declare(name)?;
        }
        best = best.min(started.elapsed().as_secs_f64() * 1e9 / cdos as f64);
    }
    println!("{cdos} CDOs declared one after the other: {best:.0} ns per declare (best of 5)");
    Ok(())
}
