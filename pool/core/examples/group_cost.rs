//! What one member of a demanded group costs each side, with no IO: the pool manager
//! ([`Manager`]) from the group's demand to its last member's ticket, the wire (encoding and
//! decoding those messages) and the consumer's protocol core ([`ClientCore`]) from those
//! messages to every member's bytes in hand. The ceiling of `maestro bench pool --group`:
//! both processes share the machine's cores, so a drained member costs at least what the
//! manager and the client each spend on it.
//!
//!     cargo run --release -p pool-core --features sim --example group_cost [MEMBERS] [BYTES]
//!
//! Prints microseconds per member for each side, the median of five groups (defaults:
//! 10,000 members of 8 bytes, small enough to travel inline with their tickets).

use std::time::{Duration, Instant};

use fabric_types::RemoteRegion;
use pool_core::attr::{self, AttrValue, Attributes};
use pool_core::client::{ClientCore, Event};
use pool_core::proto::{self, FromPm, OfferExtras, ToPm};
use pool_core::sim::{self, Plain};
use pool_core::{ConnId, Manager};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let members: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let bytes: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    if members == 0 || members > 1 << 16 {
        return Err("MEMBERS: give 1 to 65536".into());
    }
    if bytes == 0 || bytes > 4096 {
        return Err("BYTES: give 1 to 4096 (members that travel inline)".into());
    }
    let t0 = Instant::now();
    let mut m = sim::manager(t0);
    let producer = 1;
    sim::join_app(&mut m, producer, "producer")?;
    let consumer = 2;
    let app = sim::join_app(&mut m, consumer, "consumer")?;
    let names: Vec<String> = (0..members).map(|i| format!("member/{i}")).collect();
    let offered = names.iter().map(String::as_str).chain(["group"]);
    for (cdo, name) in (*proto::cdo_ids(1).start()..).zip(offered) {
        let group = name == "group";
        let attributes = if group {
            attr::group_attributes(&names)
        } else {
            Attributes::from([(".user.step".to_string(), AttrValue::Int(1))])
        };
        let len = if group { 0 } else { bytes };
        let extras = OfferExtras::new(Vec::new(), None).with_inline(vec![7u8; len]);
        m.handle(
            t0,
            producer,
            ToPm::Declare {
                cdo,
                name: name.into(),
            },
        );
        let region = RemoteRegion {
            addr: 0,
            key: 0,
            len: len as u64,
        };
        let offer = ToPm::SealOffer {
            cdo,
            attributes,
            region,
            extras,
        };
        m.handle(t0, producer, offer);
    }
    while m.poll_output().is_some() {}
    let mut core: ClientCore<Plain> = ClientCore::new(app, Duration::from_secs(60));
    let mut times = Vec::new();
    for _ in 0..5 {
        times.push(drain(&mut m, consumer, &mut core, (members, bytes))?);
    }
    times.sort_by_key(|t| t.0);
    let (pm, wire, client) = times[2];
    let per = |d: Duration| d.as_secs_f64() * 1e6 / members as f64;
    println!(
        "{members} members of {bytes} B, per member: manager {:.2} us, encode+decode {:.2} us, client core {:.2} us",
        per(pm),
        per(wire),
        per(client)
    );
    Ok(())
}

/// One group demanded and drained; the time the manager, the wire and the client core took.
fn drain(
    m: &mut Manager,
    consumer: ConnId,
    core: &mut ClientCore<Plain>,
    (members, bytes): (usize, usize),
) -> Result<(Duration, Duration, Duration), Box<dyn std::error::Error>> {
    let group = core.declare("group")?;
    let (first, _) = core.demand_group(Instant::now(), group, 0)?;
    let asked: Vec<ToPm> = std::iter::from_fn(|| core.poll_transmit().map(|t| t.msg)).collect();
    let start = Instant::now();
    for msg in asked {
        m.handle(start, consumer, msg);
    }
    while m.work(start) {}
    let out: Vec<FromPm> = std::iter::from_fn(|| m.poll_output())
        .filter(|(c, _)| *c == consumer)
        .map(|(_, msg)| msg)
        .collect();
    let pm = start.elapsed();
    let start = Instant::now();
    let mut frame = proto::encode(&out)?;
    let mut received = Vec::with_capacity(out.len());
    proto::drain_frames::<FromPm>(&mut frame, |msg| received.push(msg))?;
    let wire = start.elapsed();
    let start = Instant::now();
    let mut answered = false;
    for msg in received {
        core.handle(start, msg);
        while let Some(e) = core.poll_event() {
            match e {
                Event::Fetch(f) => {
                    return Err(format!("member {} was not inline: {:?}", f.cdo, f.source).into());
                }
                Event::Answer { result, .. } => answered = result.is_ok(),
                _ => {}
            }
        }
    }
    let here = core
        .take_group(group)
        .filter(|_| answered)
        .ok_or("the group's demand was not answered")?;
    let got = here
        .members
        .iter()
        .filter(|m| m.data.len() == bytes)
        .count();
    let client = start.elapsed();
    if got != members {
        return Err(format!("{got} of {members} members arrived").into());
    }
    // Leave the pool as it was: the members and the group disposed.
    for cdo in (first..first + members as u64).chain([group]) {
        core.dispose(Instant::now(), cdo, 0)?;
    }
    for msg in std::iter::from_fn(|| core.poll_transmit().map(|t| t.msg)) {
        m.handle(Instant::now(), consumer, msg);
    }
    while m.poll_output().is_some() {}
    Ok((pm, wire, client))
}
