//! Observers of the pool manager, in memory: what they see is exactly what the apps did,
//! they may change nothing, and every answer is bounded.

mod support;

use pool_core::attr::{AttrValue, Attributes};
use pool_core::proto::{CdoId, FromPm, Nics, Op, Refusal, Role, ToPm};
use pool_core::selector::Selector;
use pool_core::view::{self, CdoPage, Ls, Query, Transport, View};
use pool_core::{ConnId, schema::Schemas};
use support::*;

impl Pm {
    /// Joins as an observer (with the workflow secret unless `secret` says otherwise).
    fn observer_with(&mut self, secret: &[u8]) -> (ConnId, Vec<(ConnId, FromPm)>) {
        self.join_sending("maestro-pool", secret, |j| {
            j.role = Role::Observer;
            j.endpoint = None;
            j.memory = None;
        })
    }

    fn observer(&mut self) -> ConnId {
        let (conn, out) = self.observer_with(SECRET);
        assert_eq!(
            out,
            [(
                conn,
                FromPm::Welcome {
                    app: 0,
                    pool: 77,
                    keep: None,
                    lease_grace: pool_core::policy::Policy::default().lease_grace,
                }
            )]
        );
        conn
    }

    /// Asks `query` on `conn` and returns the answer.
    fn ask(&mut self, conn: ConnId, query: Query) -> View {
        match self.feed(conn, ToPm::Query { id: 9, query }).as_slice() {
            [(c, FromPm::View { id: 9, view })] if *c == conn => (**view).clone(),
            other => panic!("query: {other:?}"),
        }
    }

    fn status(&mut self, conn: ConnId) -> view::Status {
        match self.ask(conn, Query::Status) {
            View::Status(s) => s,
            other => panic!("{other:?}"),
        }
    }

    fn page(&mut self, conn: ConnId, ls: Ls) -> CdoPage {
        match self.ask(conn, Query::Ls(ls)) {
            View::Cdos(p) => p,
            other => panic!("{other:?}"),
        }
    }

    /// Joins `component` on node1 with an shm endpoint on NIC `nic`.
    fn join_on_nic(&mut self, component: &str, nic: &str) -> (ConnId, u64) {
        let process = self.next;
        self.join_with(component, |j| {
            j.process = process;
            j.nics = Nics {
                names: vec![nic.into()],
                reason: Some(format!("{nic}, chosen by the test")),
            };
        })
    }

    fn demand(&mut self, conn: ConnId, name: &str) -> (CdoId, Vec<(ConnId, FromPm)>) {
        let cdo = self.declare(conn, name);
        (cdo, self.feed(conn, ToPm::Demand { cdo }))
    }
}

fn ls(after: Option<CdoId>, limit: u32) -> Ls {
    Ls {
        selector: None,
        after,
        limit,
        attributes: false,
    }
}

#[test]
fn an_observer_sees_exactly_what_the_apps_did_and_is_no_app() {
    let mut pm = Pm::new();
    let (p, _) = pm.join_on_nic("producer", "hfi1_0");
    let (c, _) = pm.join_on_nic("consumer", "mlx5_0");
    let o = pm.observer();
    assert_eq!(pm.m.app_count(), 2, "an observer is not an app");
    assert_eq!(pm.m.observer_count(), 1);
    assert!(pm.m.is_joined(o), "the driver serves it on");

    pm.offer(p, "a", 1000);
    pm.offer(p, "b", 2000);
    let (_, out) = pm.demand(c, "a");
    let (_, transfer, _, len) = ticket_of(&out);
    assert_eq!(len, 1000);
    let inflight = match pm.ask(o, Query::Transfers) {
        View::Transfers(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(inflight.in_flight_total, 1);
    let t = &inflight.in_flight[0];
    assert_eq!(
        (t.name.as_str(), t.from.as_str(), t.to.as_str(), t.bytes),
        ("a", "producer:0", "consumer:0", 1000)
    );
    assert_eq!(
        (t.transport, t.nic.as_deref(), t.provider.as_deref()),
        (Transport::Rma, Some("hfi1_0"), Some("shm"))
    );
    pm.feed(c, transferred(transfer));
    let (waiting, _) = pm.demand(c, "z");

    let s = pm.status(o);
    assert_eq!(
        (s.workflow.as_str(), s.app_count, s.observer_count),
        ("wf", 2, 1)
    );
    let states: Vec<(&str, u64)> = s
        .cdos
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(states, [("local", 1), ("offered", 2), ("required", 1)]);
    assert_eq!(s.cdos.len(), 9, "every state, 0 included: {:?}", s.cdos);
    assert_eq!((s.operations["offer"], s.operations["demand"]), (2, 2));
    assert_eq!(s.transfers_in_flight, 0);
    let [producer, consumer] = s.apps.as_slice() else {
        panic!("{:?}", s.apps);
    };
    assert_eq!(
        (producer.offered, producer.bytes_sent, producer.cdos),
        (2, 1000, 2)
    );
    assert_eq!(
        (consumer.demanded, consumer.bytes_received, consumer.cdos),
        (2, 1000, 2)
    );
    assert_eq!(consumer.nic.as_deref(), Some("mlx5_0"));
    assert_eq!(
        consumer.nic_reason.as_deref(),
        Some("mlx5_0, chosen by the test")
    );

    // The waiting demand shows as waiting on its CDO.
    let all = pm.page(o, ls(None, 100));
    assert_eq!(all.total, 4);
    let z = all.cdos.iter().find(|v| v.id == waiting).expect("z listed");
    assert_eq!(
        (z.state.as_str(), z.app.as_str()),
        ("required", "consumer:0")
    );
    let a = all
        .cdos
        .iter()
        .find(|v| v.name == "a" && v.state == "offered")
        .expect("a");
    assert_eq!(
        (a.size, a.providers.as_slice()),
        (Some(1000), &["producer:0".to_string()][..])
    );

    // The traffic report: bytes per NIC equal what moved.
    let f = match pm.ask(o, Query::Fabric) {
        View::Fabric(f) => f,
        other => panic!("{other:?}"),
    };
    let nics: Vec<(&str, &str, u64, u64)> = f
        .nics
        .iter()
        .map(|n| (n.nic.as_str(), n.provider.as_str(), n.bytes_out, n.bytes_in))
        .collect();
    assert_eq!(
        nics,
        [("hfi1_0", "shm", 1000, 0), ("mlx5_0", "shm", 0, 1000)]
    );
    assert_eq!(f.transports["rma"].bytes, 1000);
    assert_eq!(f.apps.len(), 2);
    assert_eq!(f.apps[0].nics, ["hfi1_0"]);

    // Apps that go leave their traffic in the report.
    pm.m.disconnected(pm.now, p);
    pm.m.disconnected(pm.now, c);
    let after = match pm.ask(o, Query::Fabric) {
        View::Fabric(f) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(after.nics, f.nics);
    assert!(after.apps.is_empty());
}

#[test]
fn an_observer_may_change_nothing_and_needs_the_secret() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (cdo, _) = pm.offer(p, "a", 10);
    let o = pm.observer();
    let read_only = |op: Op, cdo: Option<CdoId>| {
        [(
            o,
            refused(
                op,
                cdo,
                Refusal::NotAllowed(
                    "an observer connection is read-only: it may only query the pool".into(),
                ),
            ),
        )]
    };
    let out = pm.feed(
        o,
        ToPm::Declare {
            cdo: 5,
            name: "x".into(),
        },
    );
    assert_eq!(out, read_only(Op::Declare, Some(5)));
    for (msg, op) in [
        (ToPm::Demand { cdo }, Op::Demand),
        (ToPm::Withdraw { cdo, keep: None }, Op::Withdraw),
        (ToPm::Require { cdo }, Op::Require),
    ] {
        assert_eq!(pm.feed(o, msg), read_only(op, Some(cdo)));
    }
    assert_eq!(pm.m.cdo_count(), 1, "nothing changed");
    // An app may not query.
    let out = pm.feed(
        p,
        ToPm::Query {
            id: 1,
            query: Query::Status,
        },
    );
    assert!(
        matches!(out.as_slice(), [(c, FromPm::Refused { op: Op::Query, why: Refusal::NotAllowed(_), .. })] if *c == p),
        "{out:?}"
    );
    // A wrong secret is refused and the connection closed.
    let (bad, out) = pm.observer_with(b"guess");
    assert_eq!(out, [(bad, refused(Op::Join, None, Refusal::BadProof))]);
    assert_eq!(pm.m.take_closing(), [bad]);
    // LEAVE says goodbye.
    assert_eq!(pm.feed(o, ToPm::Leave), [(o, FromPm::Bye)]);
    assert_eq!(pm.m.take_closing(), [o]);
}

#[test]
fn observers_are_bounded_and_a_newcomer_takes_the_place_of_the_longest_idle() {
    let mut pm = Pm::new();
    let mut all = Vec::new();
    for _ in 0..64 {
        pm.now += std::time::Duration::from_millis(1);
        all.push(pm.observer());
    }
    // The first asks something: the second is now the one idle longest.
    pm.now += std::time::Duration::from_millis(1);
    pm.status(all[0]);
    let (c, out) = pm.observer_with(SECRET);
    assert!(
        matches!(out.as_slice(), [
            (x, FromPm::Refused { op: Op::Query, why: Refusal::Quota(w), .. }),
            (y, FromPm::Welcome { .. }),
        ] if *x == all[1] && *y == c && w.contains("made room")),
        "{out:?}"
    );
    assert_eq!(pm.m.take_closing(), [all[1]]);
    assert_eq!(pm.m.observer_count(), 64);
    // The newcomer and the active one are served.
    pm.status(c);
    pm.status(all[0]);
    // One goes: there is room again without closing anyone.
    pm.m.disconnected(pm.now, all[5]);
    assert_eq!(pm.m.observer_count(), 63);
    pm.observer();
    assert!(pm.m.take_closing().is_empty());
}

#[test]
fn listing_pages_through_every_matching_cdo_once() {
    let mut pm = Pm::new();
    let (a, _) = pm.join("a");
    let (b, _) = pm.join("b");
    let o = pm.observer();
    let mut odd = Vec::new();
    for i in 0..1500i64 {
        for conn in [a, b] {
            let cdo = pm.declare(conn, &format!("cdo-{i}"));
            let attributes = Attributes::from([(".user.step".to_string(), AttrValue::Int(i % 2))]);
            pm.feed(conn, ToPm::Seal { cdo, attributes });
            if i % 2 == 1 {
                odd.push(cdo);
            }
        }
    }
    // All 3000, in pages of at most MAX_PAGE.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = pm.page(o, ls(after, 5000));
        assert!(page.cdos.len() <= view::MAX_PAGE as usize);
        assert_eq!(page.total, 3000);
        seen.extend(page.cdos.iter().map(|c| c.id));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!((seen.len(), sorted.len()), (3000, 3000));
    assert_eq!(seen, sorted, "in id order");

    // With a selector and attributes.
    let selector = Selector::parse("(= step 1)", ".user.", &Schemas::builtin())
        .expect("selector")
        .expr()
        .clone();
    let mut matched = Vec::new();
    let mut after = None;
    loop {
        let page = pm.page(
            o,
            Ls {
                selector: Some(Box::new(selector.clone())),
                after,
                limit: 700,
                attributes: true,
            },
        );
        for c in &page.cdos {
            assert_eq!(c.attributes.get(".user.step"), Some(&AttrValue::Int(1)));
            assert!(c.attributes.contains_key(pool_core::attr::NAME));
        }
        matched.extend(page.cdos.iter().map(|c| c.id));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    odd.sort_unstable();
    assert_eq!(matched, odd);
}

#[test]
fn one_listing_looks_at_a_bounded_number_of_ids() {
    let mut pm = Pm::new();
    let (a, _) = pm.join("a");
    let o = pm.observer();
    let n = view::MAX_SCAN + 10;
    let mut last = 0;
    for i in 0..n {
        let cdo = pm.declare(a, &format!("c{i}"));
        if i + 3 < n {
            pm.feed(a, ToPm::Dispose { cdo, answer: false });
        }
        last = cdo;
    }
    let first = pm.page(o, ls(None, 10));
    assert!(first.cdos.is_empty(), "the first MAX_SCAN ids are disposed");
    let next = first.next.expect("a page cut short says where to go on");
    let second = pm.page(o, ls(Some(next), 10));
    assert_eq!(second.cdos.len(), 3);
    assert_eq!(second.cdos.last().map(|c| c.id), Some(last));
    assert_eq!(second.next, None);
}

#[test]
fn a_failed_transfer_shows_with_its_reason() {
    let mut pm = Pm::new();
    let (p, _) = pm.join_on_nic("producer", "eth0");
    let (c, _) = pm.join_on_nic("consumer", "eth1");
    let o = pm.observer();
    pm.offer(p, "a", 64);
    let (_, out) = pm.demand(c, "a");
    let (_, transfer, _, _) = ticket_of(&out);
    pm.feed(
        c,
        ToPm::TransferDone {
            transfer,
            error: Some("fi_read: Connection refused".into()),
            direct: None,
        },
    );
    let t = match pm.ask(o, Query::Transfers) {
        View::Transfers(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!((t.completed, t.failed), (0, 1));
    let last = t.recent.last().expect("recent");
    assert_eq!(
        (last.ok, last.error.as_deref()),
        (Some(false), Some("fi_read: Connection refused"))
    );
    let f = match pm.ask(o, Query::Fabric) {
        View::Fabric(f) => f,
        other => panic!("{other:?}"),
    };
    let failures: Vec<(&str, u64)> = f
        .nics
        .iter()
        .map(|n| (n.nic.as_str(), n.failures))
        .collect();
    assert_eq!(failures, [("eth0", 1), ("eth1", 1)]);
    assert_eq!(f.transports["rma"].failures, 1);
}

use pool_core::events::{EventKind, EventKinds, SubscribeOptions};

#[test]
fn a_late_subscriber_asking_for_the_current_state_misses_nothing() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let declared = pm.declare(p, "a");
    let sealed = pm.sealed(p, "b", 1);
    let offered = pm.sealed(p, "c", 1);
    pm.feed(p, offer_msg(offered, 10));
    let other = pm.sealed(p, "d", 2);
    pm.feed(p, offer_msg(other, 10));
    let (waiting, _) = pm.demand(c, "x");
    let (t, _) = pm.join("tracer");
    let replay = SubscribeOptions {
        replay: true,
        ..SubscribeOptions::default()
    };
    // Everything, one event per CDO in id order, of the kind its state stands for.
    let (sub, out) = pm.subscribe_seeing(t, EventKinds::all(), "", replay);
    let seen: Vec<(EventKind, Option<String>, &str)> = events_to(&out, t)
        .iter()
        .filter(|e| e.kind != EventKind::AppJoin)
        .map(|e| {
            (
                e.kind,
                e.cdo.clone(),
                if e.detail.is_empty() { "" } else { "said" },
            )
        })
        .collect();
    let said = |k, n: &str| (k, Some(n.to_string()), "said");
    assert_eq!(
        seen,
        [
            said(EventKind::Declare, "a"),
            said(EventKind::Seal, "b"),
            said(EventKind::Offer, "c"),
            said(EventKind::Offer, "d"),
            said(EventKind::Demand, "x"),
        ],
        "{declared} {sealed} {waiting} {sub}"
    );
    assert!(
        events_to(&out, t)
            .iter()
            .filter(|e| e.kind == EventKind::Offer)
            .all(|e| e.detail == "before this subscription" && e.component == "producer")
    );
    // Only the kinds and the CDOs it selects.
    let (_, out) = pm.subscribe_seeing(t, EventKind::Offer, "(= step 1)", replay);
    let names: Vec<Option<String>> = events_to(&out, t).into_iter().map(|e| e.cdo).collect();
    assert_eq!(names, [Some("c".to_string())]);
    // A late archiver holding each new offer (signal-before, require-ack) hears of the
    // past ones too, as they were: after the fact, nothing to acknowledge.
    let holding = SubscribeOptions {
        signal_before: true,
        require_ack: true,
        ..replay
    };
    let (_, out) = pm.subscribe_seeing(t, EventKind::Offer, "", holding);
    let past = events_to(&out, t);
    let names: Vec<Option<String>> = past.iter().map(|e| e.cdo.clone()).collect();
    assert_eq!(names, [Some("c".to_string()), Some("d".to_string())]);
    assert!(past.iter().all(|e| !e.before && !e.needs_ack), "{past:?}");
    // Without the option: nothing from before.
    let (_, out) = pm.subscribe_seeing(t, EventKind::Offer, "", SubscribeOptions::default());
    assert!(events_to(&out, t).is_empty());
}

#[test]
fn an_observers_core_numbers_its_questions_and_takes_only_the_answer_to_the_last() {
    use pool_core::client::{CallError, ObserverCore};
    use pool_core::sim::{self, Plain};
    let now = std::time::Instant::now();
    let mut m = sim::manager(now);
    let mut join = sim::join_message("maestro-pool");
    (join.role, join.endpoint, join.memory) = (Role::Observer, None, None);
    let (core, _) = sim::join::<Plain>(
        &mut m,
        (now, 1, [1; 32]),
        join,
        sim::SECRET,
        sim::CALL_TIMEOUT,
    );
    assert!(matches!(core.joined(), Some(Ok(_))), "{:?}", core.joined());
    let mut observer = ObserverCore::default();
    let ask = |m: &mut pool_core::Manager, observer: &mut ObserverCore, query| {
        let asked = observer.ask(query);
        m.handle(now, 1, asked);
        let (to, answer) = m.poll_output().expect("answered");
        assert_eq!(to, 1);
        observer.answer(answer)
    };
    let Ok(View::Status(s)) = ask(&mut m, &mut observer, Query::Status) else {
        panic!("no status");
    };
    assert!(s.apps.is_empty(), "an observer is no app");
    // Asked twice: the answer to the first is not the second's.
    let first = observer.ask(Query::Status);
    m.handle(now, 1, first);
    let stale = m.poll_output().expect("answered").1;
    let _second = observer.ask(Query::Status);
    let e = observer.answer(stale).expect_err("stale");
    assert!(
        matches!(&e, CallError::Protocol(t) if t.contains("instead of the answer to query 3")),
        "{e}"
    );
    // An answer nobody asked for.
    let e = observer.answer(FromPm::Bye).expect_err("unasked");
    assert!(e.to_string().contains("when no query was asked"), "{e}");
    // An app's connection is refused every query, and the core says so.
    let (app, _) = sim::join::<Plain>(
        &mut m,
        (now, 2, [2; 32]),
        sim::join_message("app"),
        sim::SECRET,
        sim::CALL_TIMEOUT,
    );
    assert!(matches!(app.joined(), Some(Ok(_))));
    m.handle(now, 2, observer.ask(Query::Status));
    let refused = observer.answer(m.poll_output().expect("answered").1);
    assert!(
        matches!(refused, Err(CallError::Refused { op: Op::Query, .. })),
        "{refused:?}"
    );
}
