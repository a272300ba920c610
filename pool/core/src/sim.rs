//! The protocol's two ends wired together in memory (feature `sim`), for tests and IO-free
//! measurements: a [`Driver`] whose bytes are vectors and whose waiting calls, queues and
//! routes are plain tags ([`Plain`]), and the JOIN of a [`ClientCore`] to a [`Manager`]
//! through the core's own handshake ([`join`]). Time is whatever the caller passes: a
//! harness steps it to the earliest [`Manager::poll_timeout`] or
//! [`ClientCore::poll_timeout`] and asserts exact instants.

use std::time::{Duration, Instant};

use crate::client::{ClientCore, Driver};
use crate::proto::{FromPm, InlineBytes, Join};
use crate::{ConnId, Manager};

/// A driver of plain values: a CDO's bytes are a vector, memory lent for a transfer is a
/// vector (the bytes of an inline ticket are copied into it when they fit, as a real
/// driver does), and a waiting call, a subscription's queue and a stream's route are tags
/// the harness chooses.
#[derive(Debug)]
pub struct Plain;

impl Driver for Plain {
    type Data = Vec<u8>;
    type Waiter = u32;
    type Memory = Vec<u8>;
    type Events = u32;
    type Stream = u64;

    fn inline(bytes: InlineBytes, lent: Option<Vec<u8>>) -> Vec<u8> {
        match lent {
            Some(mut dst) if dst.len() >= bytes.len() => {
                dst[..bytes.len()].copy_from_slice(&bytes.0);
                dst.truncate(bytes.len());
                dst
            }
            _ => bytes.0.to_vec(),
        }
    }
}

/// Connects a new client core to `manager` as connection `conn` at `now` and runs the
/// handshake: the manager challenges with `nonce`, the core answers with `join` and its
/// proof of `secret`, the manager welcomes or refuses. Returns the core (its
/// [`ClientCore::joined`] says how the JOIN ended; its calls wait at most `timeout`) and
/// what the manager sent other connections meanwhile (subscribers hearing of the join).
pub fn join<T: Driver>(
    manager: &mut Manager,
    (now, conn, nonce): (Instant, ConnId, [u8; 32]),
    join: Join,
    secret: &[u8],
    timeout: Duration,
) -> (ClientCore<T>, Vec<(ConnId, FromPm)>) {
    let mut core = ClientCore::connect(now, join, secret, timeout);
    let mut others = Vec::new();
    manager.connected(now, conn, nonce);
    loop {
        let mut moved = false;
        while let Some((to, msg)) = manager.poll_output() {
            moved = true;
            if to == conn {
                core.handle(now, msg);
            } else {
                others.push((to, msg));
            }
        }
        while let Some(t) = core.poll_transmit() {
            moved = true;
            manager.handle(now, conn, t.msg);
        }
        if !moved {
            return (core, others);
        }
    }
}
