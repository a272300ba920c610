//! What a declare + seal + offer costs the pool manager with no IO: the work of `maestro
//! bench pm` (producers pipelining `Declare` and `SealOffer` in batches, offers pointing
//! at no memory) done by the manager's state machine ([`Manager`]) alone, and the wire's
//! share (decoding those frames, encoding the answers). The ceiling of `maestro bench pm`:
//! what its driver adds (sockets, tasks, channels) is the difference.
//!
//!     cargo run --release -p pool-core --features sim --example offer_cost [CDOS] [BATCH]
//!
//! Prints microseconds per declare+seal+offer for the manager and the wire, the median of
//! five runs, each a fresh manager with two producers taking turns by batch (defaults:
//! 200,000 CDOs per producer, batches of 1000 operations).

use std::time::{Duration, Instant};

use fabric_types::RemoteRegion;
use pool_core::ConnId;
use pool_core::proto::{self, FromPm, ToPm};
use pool_core::sim;

/// The region of an offer as `maestro bench pm` makes them: no bytes, pointing nowhere.
const NOWHERE: RemoteRegion = RemoteRegion {
    addr: 0,
    key: 0,
    len: 0,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let cdos: usize = args.next().map_or(Ok(200_000), |a| a.parse())?;
    let batch: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    if cdos == 0 || cdos > 1 << 24 {
        return Err("CDOS: give 1 to 16777216 CDOs per producer".into());
    }
    if !(2..=100_000).contains(&batch) {
        return Err("BATCH: give 2 to 100000 operations per frame".into());
    }
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(run(cdos, batch)?);
    }
    runs.sort();
    let (pm, wire) = runs[2];
    let per = |d: Duration| d.as_secs_f64() * 1e6 / (2 * cdos) as f64;
    println!(
        "2 producers x {cdos} CDOs, batches of {batch}, per declare+seal+offer: manager {:.3} us, decode+encode {:.3} us",
        per(pm),
        per(wire),
    );
    Ok(())
}

/// One run: a fresh manager, two producers offering `cdos` each; the time the manager and
/// the wire took.
fn run(cdos: usize, batch: usize) -> Result<(Duration, Duration), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let mut m = sim::manager(t0);
    let producers = [
        (1, sim::join_app(&mut m, 1, "producer")?),
        (2, sim::join_app(&mut m, 2, "producer")?),
    ];
    // The frames each producer sends, encoded as an injector of `maestro bench pm` does.
    let mut frames: Vec<Vec<(ConnId, Vec<u8>)>> = vec![Vec::new(); 2];
    for (frames, &(conn, app)) in frames.iter_mut().zip(&producers) {
        let ids: Vec<_> = proto::cdo_ids(app).take(cdos).collect();
        for (n, chunk) in ids.chunks(batch / 2).enumerate() {
            let ops: Vec<ToPm> = chunk
                .iter()
                .enumerate()
                .flat_map(|(i, &cdo)| {
                    let name = format!("bench/{conn}/{}", n * batch / 2 + i);
                    let region = RemoteRegion {
                        key: cdo,
                        ..NOWHERE
                    };
                    let attributes = Default::default();
                    let extras = Default::default();
                    [
                        ToPm::Declare { cdo, name },
                        ToPm::SealOffer {
                            cdo,
                            attributes,
                            region,
                            extras,
                        },
                    ]
                })
                .collect();
            frames.push((conn, proto::encode(&ops)?));
        }
    }
    let (mut pm, mut wire) = (Duration::ZERO, Duration::ZERO);
    let mut answered = 0;
    let (a, b) = (frames.swap_remove(0), frames.swap_remove(0));
    for (conn, mut frame) in a.into_iter().zip(b).flat_map(|(x, y)| [x, y]) {
        let start = Instant::now();
        let mut msgs = Vec::with_capacity(batch);
        proto::drain_frames::<ToPm>(&mut frame, |msg| msgs.push(msg))?;
        wire += start.elapsed();
        let start = Instant::now();
        for msg in msgs {
            m.handle(start, conn, msg);
        }
        let mut out: Vec<FromPm> = std::iter::from_fn(|| m.poll_output())
            .map(|(_, msg)| msg)
            .collect();
        proto::pack_done(&mut out);
        pm += start.elapsed();
        let start = Instant::now();
        let answer = proto::encode(&out)?;
        wire += start.elapsed();
        answered += answer.len().min(1);
    }
    if answered == 0 {
        return Err("the manager answered no batch".into());
    }
    let live = m.cdo_count();
    if live != 2 * cdos {
        return Err(format!("{live} CDOs live after offering {}", 2 * cdos).into());
    }
    Ok((pm, wire))
}
