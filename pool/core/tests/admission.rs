//! Admission driven in memory on the manager's clock: how long a connection may wait to
//! join, and who goes when too many wait.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use pool_core::ConnId;
use pool_core::admission::{Limits, Peer};
use pool_core::auth::prove;
use pool_core::proto::{FromPm, Op, Refusal};
use support::*;

fn tcp(last: u8) -> Peer {
    Peer::Tcp(IpAddr::from([10, 0, 0, last]))
}

/// Connects `conn` from `peer` now; what the PM sent.
fn arrive(pm: &mut Pm, conn: ConnId, peer: Peer) -> Vec<(ConnId, FromPm)> {
    pm.m.connected_from(pm.now, conn, [conn as u8; 32], peer);
    pm.drain()
}

/// The reason `conn` was refused admission in `out`.
fn not_admitted(out: &[(ConnId, FromPm)], conn: ConnId) -> String {
    out.iter()
        .find_map(|(c, m)| match m {
            FromPm::Refused {
                op: Op::Join,
                cdo: None,
                why: Refusal::NotAdmitted(why),
            } if *c == conn => Some(why.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{conn} was not refused admission: {out:?}"))
}

#[test]
fn a_connection_that_does_not_join_in_time_is_refused_and_closed_at_its_deadline() {
    let mut pm = Pm::new();
    pm.m.set_admission(Limits {
        join_timeout: Duration::from_secs(2),
        ..Limits::default()
    });
    let t0 = pm.now;
    let (late, _) = pm.connect();
    pm.now = t0 + Duration::from_secs(1);
    let (prompt, nonce) = pm.connect();
    assert_eq!(pm.m.poll_timeout(), Some(t0 + Duration::from_secs(2)));

    pm.m.handle_timeout(t0 + Duration::from_millis(1999));
    assert!(pm.drain().is_empty() && pm.m.take_closing().is_empty());

    pm.now = t0 + Duration::from_secs(2);
    pm.m.handle_timeout(pm.now);
    let out = pm.drain();
    let why = not_admitted(&out, late);
    assert!(
        why.contains("did not join within 2s") && why.contains("--join-timeout"),
        "{why}"
    );
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(pm.m.take_closing(), [late]);
    assert_eq!(pm.m.poll_timeout(), Some(t0 + Duration::from_secs(3)));

    // The other joins in time: its deadline goes with it.
    pm.now = t0 + Duration::from_millis(2500);
    let out = pm.feed(prompt, join_msg("p", &prove(SECRET, &nonce, "wf", "p", 0)));
    assert!(matches!(out[..], [(_, FromPm::Welcome { .. })]), "{out:?}");
    assert_eq!(pm.m.poll_timeout(), None);
    // The late one's JOIN, had it come after all, is not even looked at.
    let proof = prove(SECRET, &[late as u8; 32], "wf", "q", 0);
    assert_eq!(
        pm.feed(late, join_msg("q", &proof)),
        [(late, refused(Op::Join, None, Refusal::NotJoined))]
    );
    assert_eq!(pm.m.app_count(), 1);
}

#[test]
fn a_refused_join_or_a_vanished_connection_waits_no_more() {
    let mut pm = Pm::new();
    let (bad, _) = pm.connect();
    let (gone, _) = pm.connect();
    assert!(pm.m.poll_timeout().is_some());
    pm.feed(bad, join_msg("p", b"forged"));
    assert_eq!(pm.m.take_closing(), [bad]);
    pm.m.disconnected(pm.now, gone);
    assert_eq!(pm.m.poll_timeout(), None, "no deadline is left behind");
}

#[test]
fn a_flood_from_one_address_evicts_its_own_oldest_and_honest_newcomers_stay() {
    let mut pm = Pm::new();
    pm.m.set_admission(Limits {
        join_timeout: Duration::from_secs(10),
        max_unjoined: 4,
        max_unjoined_per_peer: 2,
    });
    for conn in 1..=2 {
        assert_eq!(arrive(&mut pm, conn, tcp(66)).len(), 1, "a challenge");
    }
    // The flood's third evicts its first.
    let out = arrive(&mut pm, 3, tcp(66));
    let why = not_admitted(&out, 1);
    assert!(
        why.contains("made room for connection 3") && why.contains("2 per address"),
        "{why}"
    );
    assert_eq!(pm.m.take_closing(), [1]);
    // Honest peers fill the PM; the next newcomer evicts the flood, not them.
    arrive(&mut pm, 4, tcp(1));
    arrive(&mut pm, 5, tcp(2));
    let out = arrive(&mut pm, 6, tcp(3));
    assert!(not_admitted(&out, 2).contains("at most 4 in all"));
    assert_eq!(pm.m.take_closing(), [2]);
    // Local connections are never counted: the PM's user's processes on its host.
    for conn in 7..=20 {
        assert_eq!(
            arrive(&mut pm, conn, Peer::Local(Some(1000 + conn as u32))).len(),
            1
        );
    }
    assert!(pm.m.take_closing().is_empty());
    // Everyone left waiting can still join.
    for conn in [3, 4, 5, 6, 7, 20] {
        let proof = prove(SECRET, &[conn as u8; 32], "wf", "p", conn as i64);
        let mut msg = join_msg("p", &proof);
        if let pool_core::proto::ToPm::Join(j) = &mut msg {
            j.index = conn as i64;
            j.memory = None;
        }
        let out = pm.feed(conn, msg);
        assert!(
            matches!(out[..], [(c, FromPm::Welcome { .. })] if c == conn),
            "{out:?}"
        );
    }
}
