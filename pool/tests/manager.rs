//! The pool manager's state machine driven in memory: every transition and every refusal.

use fabric::{Address, RemoteRegion};
use pool::attr::{AttrValue, Attributes, LOCAL_SIZE};
use pool::auth::prove;
use pool::proto::{AppId, CdoId, FromPm, Location, Refusal, ToPm, TransferId};
use pool::{ConnId, Manager};

const SECRET: &[u8] = b"workflow secret";

struct Pm {
    m: Manager,
    next: ConnId,
}

impl Pm {
    fn new() -> Pm {
        Pm {
            m: Manager::new("wf", SECRET),
            next: 1,
        }
    }

    /// Sends and returns everything the PM wants to send.
    fn send(&mut self, conn: ConnId, msg: ToPm) -> Vec<(ConnId, FromPm)> {
        self.m.handle(conn, msg);
        self.drain()
    }

    fn drain(&mut self) -> Vec<(ConnId, FromPm)> {
        std::iter::from_fn(|| self.m.poll_output()).collect()
    }

    fn connect(&mut self) -> (ConnId, [u8; 32]) {
        let conn = self.next;
        self.next += 1;
        let nonce = [conn as u8; 32];
        self.m.connected(conn, nonce);
        assert_eq!(
            self.m.poll_output(),
            Some((conn, FromPm::Challenge { nonce }))
        );
        (conn, nonce)
    }

    fn join(&mut self, component: &str) -> (ConnId, AppId) {
        let (conn, nonce) = self.connect();
        let proof = prove(SECRET, &nonce, "wf", component, 0);
        let out = self.send(conn, join_msg(component, &proof));
        match out.as_slice() {
            [(c, FromPm::Welcome { app })] if *c == conn => (conn, *app),
            other => panic!("join: {other:?}"),
        }
    }

    fn declare(&mut self, conn: ConnId, name: &str) -> CdoId {
        let msg = ToPm::Declare {
            local: 42,
            name: name.into(),
        };
        match self.send(conn, msg).as_slice() {
            [(_, FromPm::Declared { local: 42, cdo })] => *cdo,
            other => panic!("declare: {other:?}"),
        }
    }

    fn seal(&mut self, conn: ConnId, cdo: CdoId) -> Vec<(ConnId, FromPm)> {
        let mut attributes = Attributes::new();
        attributes.insert(".user.step".into(), AttrValue::Int(2));
        self.send(conn, ToPm::Seal { cdo, attributes })
    }

    /// Declares and seals `name`, then offers `len` bytes; returns the CDO and what the
    /// offer produced.
    fn offer(&mut self, conn: ConnId, name: &str, len: u64) -> (CdoId, Vec<(ConnId, FromPm)>) {
        let cdo = self.declare(conn, name);
        assert_eq!(self.seal(conn, cdo), [(conn, done("seal", cdo))]);
        let out = self.send(
            conn,
            ToPm::Offer {
                cdo,
                location: location(len),
            },
        );
        assert_eq!(out[0], (conn, done("offer", cdo)));
        (cdo, out)
    }
}

fn join_msg(component: &str, proof: &[u8]) -> ToPm {
    ToPm::Join {
        workflow: "wf".into(),
        component: component.into(),
        index: 0,
        proof: proof.to_vec(),
    }
}

fn location(len: u64) -> Location {
    Location {
        address: Address(vec![1]),
        provider: "shm".into(),
        region: RemoteRegion {
            addr: 0,
            key: 1,
            len,
        },
    }
}

fn done(op: &str, cdo: CdoId) -> FromPm {
    FromPm::Done { op: op.into(), cdo }
}

fn refused(op: &str, cdo: Option<CdoId>, why: Refusal) -> FromPm {
    FromPm::Refused {
        op: op.into(),
        cdo,
        why,
    }
}

fn wrong(op: &str, state: &str) -> Refusal {
    Refusal::WrongState {
        op: op.into(),
        state: state.into(),
    }
}

/// The (consumer connection, transfer, consumer CDO, length) of the first ticket in `out`.
fn ticket_of(out: &[(ConnId, FromPm)]) -> (ConnId, TransferId, CdoId, u64) {
    out.iter()
        .find_map(|(c, m)| match m {
            FromPm::Ticket {
                transfer,
                cdo,
                location,
                ..
            } => Some((*c, *transfer, *cdo, location.region.len)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ticket in {out:?}"))
}

#[test]
fn join_needs_the_secret_and_the_workflow() {
    let mut pm = Pm::new();
    let (c, _) = pm.connect();
    let early = ToPm::Declare {
        local: 1,
        name: "x".into(),
    };
    assert_eq!(
        pm.send(c, early),
        [(c, refused("declare", None, Refusal::NotJoined))]
    );
    assert_eq!(
        pm.send(c, join_msg("p", b"forged")),
        [(c, refused("join", None, Refusal::BadProof))]
    );
    assert_eq!(pm.m.take_closing(), [c]);
    // Nothing is served after a refused join.
    assert_eq!(
        pm.send(c, ToPm::Leave),
        [(c, refused("leave", None, Refusal::NotJoined))]
    );
    let (c2, _) = pm.connect();
    assert_eq!(
        pm.send(c2, join_msg("p", &[])),
        [(c2, refused("join", None, Refusal::BadProof))]
    );
    let (c3, n3) = pm.connect();
    let other = ToPm::Join {
        workflow: "other".into(),
        component: "p".into(),
        index: 0,
        proof: prove(SECRET, &n3, "other", "p", 0),
    };
    assert_eq!(
        pm.send(c3, other),
        [(c3, refused("join", None, Refusal::WrongWorkflow))]
    );
    // A proof for another nonce is refused too.
    let (c5, _) = pm.connect();
    let replay = prove(SECRET, &n3, "wf", "p", 0);
    assert_eq!(
        pm.send(c5, join_msg("p", &replay)),
        [(c5, refused("join", None, Refusal::BadProof))]
    );
    let (c4, app) = pm.join("p");
    assert_eq!(pm.m.app_identity(app), Some(("p", 0)));
    assert_eq!(
        pm.send(c4, join_msg("p", &[])),
        [(c4, refused("join", None, Refusal::DuplicateJoin))]
    );
    assert_eq!(pm.m.app_count(), 1);
}

#[test]
fn provider_life_and_its_refusals() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (q, _) = pm.join("other");
    let empty = ToPm::Declare {
        local: 1,
        name: String::new(),
    };
    assert_eq!(
        pm.send(p, empty),
        [(p, refused("declare", None, Refusal::BadName))]
    );
    let cdo = pm.declare(p, "t");
    assert_eq!(
        pm.seal(q, cdo),
        [(q, refused("seal", Some(cdo), Refusal::UnknownCdo))]
    );
    let offer = ToPm::Offer {
        cdo,
        location: location(8),
    };
    assert_eq!(
        pm.send(p, offer.clone()),
        [(p, refused("offer", Some(cdo), wrong("offer", "declared")))]
    );
    assert_eq!(
        pm.send(p, ToPm::Withdraw { cdo }),
        [(
            p,
            refused("withdraw", Some(cdo), wrong("withdraw", "declared"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Retract { cdo }),
        [(
            p,
            refused("retract", Some(cdo), wrong("retract", "declared"))
        )]
    );
    assert_eq!(pm.seal(p, cdo), [(p, done("seal", cdo))]);
    assert_eq!(
        pm.seal(p, cdo),
        [(p, refused("seal", Some(cdo), wrong("seal", "sealed")))]
    );
    assert_eq!(pm.send(p, offer), [(p, done("offer", cdo))]);
    assert_eq!(
        pm.send(p, ToPm::Dispose { cdo }),
        [(
            p,
            refused("dispose", Some(cdo), wrong("dispose", "offered"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Require { cdo }),
        [(
            p,
            refused("require", Some(cdo), wrong("require", "offered"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Withdraw { cdo }),
        [(p, done("withdraw", cdo))]
    );
    assert_eq!(
        pm.send(p, ToPm::Withdraw { cdo }),
        [(
            p,
            refused("withdraw", Some(cdo), wrong("withdraw", "withdrawn"))
        )]
    );
    assert_eq!(
        pm.send(p, ToPm::Dispose { cdo }),
        [(p, done("dispose", cdo))]
    );
    assert_eq!(
        pm.send(p, ToPm::Dispose { cdo }),
        [(p, refused("dispose", Some(cdo), Refusal::UnknownCdo))]
    );
    assert_eq!(pm.m.cdo_count(), 0);
}

#[test]
fn a_demand_waits_for_the_offer_then_gets_a_ticket_and_ready() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let want = pm.declare(c, "t");
    assert!(
        pm.send(c, ToPm::Demand { cdo: want }).is_empty(),
        "nothing offered yet"
    );
    let (_, out) = pm.offer(p, "t", 4096);
    let (to, transfer, cdo, len) = ticket_of(&out);
    assert_eq!((to, cdo, len), (c, want, 4096));
    assert_eq!(
        pm.send(c, ToPm::Demand { cdo: want }),
        [(
            c,
            refused("demand", Some(want), wrong("demand", "in transfer"))
        )]
    );
    assert_eq!(
        pm.send(c, ToPm::Dispose { cdo: want }),
        [(
            c,
            refused("dispose", Some(want), wrong("dispose", "in transfer"))
        )]
    );
    let ok = ToPm::TransferDone {
        transfer,
        error: None,
    };
    assert_eq!(pm.send(c, ok.clone()), [(c, FromPm::Ready { cdo: want })]);
    assert_eq!(
        pm.send(c, ok),
        [(c, refused("transfer-done", None, Refusal::UnknownTransfer))]
    );
    assert_eq!(
        pm.send(c, ToPm::Dispose { cdo: want }),
        [(c, done("dispose", want))]
    );
}

#[test]
fn require_moves_data_early_and_demand_then_returns_at_once() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let want = pm.declare(c, "t");
    assert_eq!(
        pm.send(c, ToPm::Require { cdo: want }),
        [(c, done("require", want))]
    );
    assert_eq!(
        pm.send(c, ToPm::Require { cdo: want }),
        [(
            c,
            refused("require", Some(want), wrong("require", "required"))
        )]
    );
    let (_, out) = pm.offer(p, "t", 64);
    let (_, transfer, _, _) = ticket_of(&out);
    assert!(
        pm.send(
            c,
            ToPm::TransferDone {
                transfer,
                error: None
            }
        )
        .is_empty(),
        "not demanded yet"
    );
    assert_eq!(
        pm.send(c, ToPm::Demand { cdo: want }),
        [(c, FromPm::Ready { cdo: want })]
    );
}

#[test]
fn retract_cancels_a_waiting_require() {
    let mut pm = Pm::new();
    let (c, _) = pm.join("consumer");
    let (p, _) = pm.join("producer");
    let want = pm.declare(c, "t");
    pm.send(c, ToPm::Require { cdo: want });
    assert_eq!(
        pm.send(c, ToPm::Retract { cdo: want }),
        [(c, done("retract", want))]
    );
    // A later offer tickets nobody.
    let (_, out) = pm.offer(p, "t", 8);
    assert_eq!(out.len(), 1, "{out:?}");
}

#[test]
fn withdraw_waits_for_the_transfer_in_flight_and_loses_no_demand() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let (offer, _) = pm.offer(p, "t", 1 << 20);
    let want = pm.declare(c, "t");
    let (_, transfer, _, _) = ticket_of(&pm.send(c, ToPm::Demand { cdo: want }));
    assert!(
        pm.send(p, ToPm::Withdraw { cdo: offer }).is_empty(),
        "withdraw must wait"
    );
    assert_eq!(
        pm.send(p, ToPm::Dispose { cdo: offer }),
        [(
            p,
            refused("dispose", Some(offer), wrong("dispose", "being withdrawn"))
        )]
    );
    let out = pm.send(
        c,
        ToPm::TransferDone {
            transfer,
            error: None,
        },
    );
    assert!(out.contains(&(c, FromPm::Ready { cdo: want })), "{out:?}");
    assert!(out.contains(&(p, done("withdraw", offer))), "{out:?}");
}

#[test]
fn several_providers_share_the_load_and_attributes_travel() {
    let mut pm = Pm::new();
    let (p1, _) = pm.join("p1");
    let (p2, _) = pm.join("p2");
    pm.offer(p1, "t", 100);
    pm.offer(p2, "t", 100);
    let (c1, _) = pm.join("c1");
    let (c2, _) = pm.join("c2");
    let w1 = pm.declare(c1, "t");
    let w2 = pm.declare(c2, "t");
    let out1 = pm.send(c1, ToPm::Demand { cdo: w1 });
    let out2 = pm.send(c2, ToPm::Demand { cdo: w2 });
    let (region1, attrs1) = match &out1[0].1 {
        FromPm::Ticket {
            location,
            attributes,
            ..
        } => (location.region, attributes.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(region1.len, 100);
    assert_eq!(attrs1.get(".user.step"), Some(&AttrValue::Int(2)));
    assert_eq!(attrs1.get(LOCAL_SIZE), Some(&AttrValue::Uint(100)));
    let (_, t1, _, _) = ticket_of(&out1);
    let (_, t2, _, _) = ticket_of(&out2);
    assert_ne!(t1, t2);
    assert_eq!(
        pm.send(
            c1,
            ToPm::TransferDone {
                transfer: t1,
                error: None
            }
        ),
        [(c1, FromPm::Ready { cdo: w1 })]
    );
    assert_eq!(
        pm.send(
            c2,
            ToPm::TransferDone {
                transfer: t2,
                error: None
            }
        ),
        [(c2, FromPm::Ready { cdo: w2 })]
    );
}

#[test]
fn zero_length_cdos_synchronise() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("syphon");
    let (c, _) = pm.join("producer");
    let want = pm.declare(c, "READY");
    assert!(pm.send(c, ToPm::Demand { cdo: want }).is_empty());
    let (_, out) = pm.offer(p, "READY", 0);
    let (_, transfer, _, len) = ticket_of(&out);
    assert_eq!(len, 0);
    assert_eq!(
        pm.send(
            c,
            ToPm::TransferDone {
                transfer,
                error: None
            }
        ),
        [(c, FromPm::Ready { cdo: want })]
    );
}

#[test]
fn leave_waits_for_what_consumers_need_then_says_bye() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    pm.offer(p, "t", 8);
    let want = pm.declare(c, "t");
    let (_, transfer, _, _) = ticket_of(&pm.send(c, ToPm::Require { cdo: want }));
    assert!(
        pm.send(p, ToPm::Leave).is_empty(),
        "a transfer still reads from the producer"
    );
    assert_eq!(
        pm.send(
            c,
            ToPm::TransferDone {
                transfer,
                error: None
            }
        ),
        [(p, FromPm::Bye)]
    );
    assert_eq!(pm.m.take_closing(), [p]);
    // A consumer with nothing pending leaves at once.
    assert_eq!(pm.send(c, ToPm::Leave), [(c, FromPm::Bye)]);
    assert_eq!(pm.m.app_count(), 0);
}

#[test]
fn a_dead_provider_is_replaced_or_its_demands_fail() {
    let mut pm = Pm::new();
    let (p1, _) = pm.join("p1");
    let (p2, _) = pm.join("p2");
    pm.offer(p1, "shared", 8);
    pm.offer(p2, "shared", 8);
    pm.offer(p1, "only", 8);
    let (c, _) = pm.join("consumer");
    let shared = pm.declare(c, "shared");
    let demanded = pm.declare(c, "only");
    let required = pm.declare(c, "only");
    ticket_of(&pm.send(c, ToPm::Demand { cdo: shared }));
    ticket_of(&pm.send(c, ToPm::Demand { cdo: demanded }));
    // The require of "only" waits behind nothing: it gets its own ticket from p1 too.
    ticket_of(&pm.send(c, ToPm::Require { cdo: required }));
    pm.m.disconnected(p1);
    let out = pm.drain();
    assert!(
        out.contains(&(c, refused("demand", Some(demanded), Refusal::NoProvider))),
        "{out:?}"
    );
    let reticketed = out
        .iter()
        .any(|(_, m)| matches!(m, FromPm::Ticket { cdo, .. } if *cdo == shared));
    assert!(reticketed, "the shared name is served by p2 now: {out:?}");
    assert!(
        !out.iter()
            .any(|(_, m)| matches!(m, FromPm::Refused { cdo: Some(x), .. } if *x == required)),
        "a require keeps waiting: {out:?}"
    );
    // A new provider serves the waiting require.
    let (p3, _) = pm.join("p3");
    let (_, out) = pm.offer(p3, "only", 8);
    let (to, _, cdo, _) = ticket_of(&out);
    assert_eq!((to, cdo), (c, required));
}

#[test]
fn a_failed_transfer_is_retried_from_another_provider() {
    let mut pm = Pm::new();
    let (p1, _) = pm.join("p1");
    let (p2, _) = pm.join("p2");
    pm.offer(p1, "t", 8);
    pm.offer(p2, "t", 8);
    let (c, _) = pm.join("c");
    let want = pm.declare(c, "t");
    let (_, first, _, _) = ticket_of(&pm.send(c, ToPm::Demand { cdo: want }));
    let failed = ToPm::TransferDone {
        transfer: first,
        error: Some("peer gone".into()),
    };
    let (_, second, _, _) = ticket_of(&pm.send(c, failed));
    assert_ne!(first, second);
    // When every provider failed, the demand waits (no ticket) for another offer.
    let again = ToPm::TransferDone {
        transfer: second,
        error: Some("again".into()),
    };
    assert!(pm.send(c, again).is_empty());
}
