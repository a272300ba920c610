//! A group's demand in the pool manager, in memory: one message names the group and the
//! ids reserved; the manager declares the members, names them and tickets each; and every
//! way it can be refused.

mod support;

use pool_core::ConnId;
use pool_core::attr;
use pool_core::proto::{CdoId, FromPm, Op, Refusal, ToPm, cdo_ids};
use support::*;

impl Pm {
    /// Offers `members` (names, `len` bytes each) and the group `group` listing them.
    fn offer_group(&mut self, conn: ConnId, group: &str, members: &[&str], len: u64) -> CdoId {
        for m in members {
            self.offer(conn, m, len);
        }
        let g = self.declare(conn, group);
        let attributes = attr::group_attributes(members);
        assert_eq!(
            self.feed(conn, ToPm::Seal { cdo: g, attributes }),
            [(conn, done(Op::Seal, g))]
        );
        self.feed(conn, offer_msg(g, 0));
        g
    }

    /// Sends a group demand of `name` from `conn`, reserving `capacity` ids after its last.
    fn demand_group(
        &mut self,
        conn: ConnId,
        name: &str,
        capacity: u32,
    ) -> (CdoId, CdoId, Vec<(ConnId, FromPm)>) {
        let group = self.declare(conn, name);
        let first = group + 1;
        let msg = ToPm::DemandGroup {
            group,
            first,
            capacity,
        };
        let out = self.feed(conn, msg);
        (group, first, out)
    }
}

fn members_named(out: &[(ConnId, FromPm)]) -> Option<(CdoId, Vec<String>)> {
    out.iter().find_map(|(_, m)| match m {
        FromPm::GroupMembers { group, names, .. } => Some((*group, names.clone())),
        _ => None,
    })
}

fn tickets(out: &[(ConnId, FromPm)]) -> Vec<(CdoId, u64)> {
    out.iter()
        .filter_map(|(_, m)| match m {
            FromPm::Ticket {
                transfer,
                cdo,
                completes_demand: true,
                ..
            } => Some((*cdo, *transfer)),
            _ => None,
        })
        .collect()
}

/// The consumers' CDOs ticketed in `out`, in order.
fn ticketed(out: &[(ConnId, FromPm)]) -> Vec<CdoId> {
    tickets(out).into_iter().map(|(cdo, _)| cdo).collect()
}

#[test]
fn one_message_demands_a_group_and_every_member_is_ticketed() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, consumer) = pm.join("consumer");
    pm.offer_group(p, "fields", &["f/0", "f/1", "f/2"], 100);
    let (group, first, out) = pm.demand_group(c, "fields", 8);
    let (named, names) = members_named(&out).expect("the members are named");
    assert_eq!(
        (named, names.as_slice()),
        (group, &["f/0", "f/1", "f/2"].map(String::from)[..])
    );
    let t = tickets(&out);
    assert_eq!(
        t.iter().map(|(cdo, _)| *cdo).collect::<Vec<_>>(),
        [first, first + 1, first + 2],
        "the members get the ids reserved, in order"
    );
    assert!(cdo_ids(consumer).contains(&first));
    for (_, transfer) in t {
        pm.feed(c, transferred(transfer));
    }
    // The members are the consumer's CDOs: disposed as any.
    for cdo in [first, first + 1, first + 2, group] {
        assert!(
            pm.feed(c, ToPm::Dispose { cdo, answer: true })
                .iter()
                .any(|(_, m)| *m == done(Op::Dispose, cdo)),
            "dispose {cdo}"
        );
    }
}

/// A large group's tickets go out a slice per step of the manager's work, so that the
/// driver sends each slice (and the consumer copies it) while the next is made; a member
/// disposed before its turn is passed over, and the consumer's end drops the rest.
#[test]
fn a_large_group_is_ticketed_a_slice_per_step_of_work() {
    use pool_core::GROUP_SLICE;
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let names: Vec<String> = (0..GROUP_SLICE * 2 + 10)
        .map(|i| format!("big/{i}"))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    pm.offer_group(p, "big", &refs, 64);
    let group = pm.declare(c, "big");
    let first = group + 1;
    let msg = ToPm::DemandGroup {
        group,
        first,
        capacity: names.len() as u32,
    };
    pm.m.handle(pm.now, c, msg);
    let step: Vec<_> = std::iter::from_fn(|| pm.m.poll_output()).collect();
    assert!(members_named(&step).is_some());
    assert_eq!(tickets(&step).len(), GROUP_SLICE, "the first slice at once");
    assert!(pm.m.has_work());
    // The consumer disposes a member before its ticket: it is passed over.
    let gone = first + GROUP_SLICE as u64;
    pm.m.handle(
        pm.now,
        c,
        ToPm::Dispose {
            cdo: gone,
            answer: false,
        },
    );
    assert!(pm.m.work(pm.now), "a third slice is left");
    let step: Vec<_> = std::iter::from_fn(|| pm.m.poll_output()).collect();
    let slice = ticketed(&step);
    assert_eq!(slice.len(), GROUP_SLICE - 1);
    assert!(!slice.contains(&gone));
    // The consumer leaves: what is left is dropped, not ticketed to nobody.
    pm.m.disconnected(pm.now, c);
    assert!(!pm.m.work(pm.now));
    let step: Vec<_> = std::iter::from_fn(|| pm.m.poll_output()).collect();
    assert!(tickets(&step).is_empty(), "{step:?}");
}

/// A member not offered when its slice comes waits for its offer, and is ticketed by it.
#[test]
fn a_member_offered_after_its_group_was_demanded_is_ticketed_when_it_comes() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    pm.offer(p, "late/a", 10);
    let g = pm.declare(p, "late");
    let attributes = attr::group_attributes(&["late/a", "late/b"]);
    pm.feed(p, ToPm::Seal { cdo: g, attributes });
    pm.feed(p, offer_msg(g, 0));
    let (_, first, out) = pm.demand_group(c, "late", 4);
    assert_eq!(ticketed(&out), [first], "only the member offered");
    let (_, out) = pm.offer(p, "late/b", 10);
    assert_eq!(ticketed(&out), [first + 1], "the other, once offered");
}

#[test]
fn a_group_demanded_before_its_offer_waits_for_it() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    let (group, first, out) = pm.demand_group(c, "later", 4);
    assert!(
        members_named(&out).is_none(),
        "nothing offered yet: {out:?}"
    );
    let members = ["a", "b"];
    for m in members {
        pm.offer(p, m, 10);
    }
    let gid = pm.declare(p, "later");
    let attributes = attr::group_attributes(&members);
    pm.feed(
        p,
        ToPm::Seal {
            cdo: gid,
            attributes,
        },
    );
    let out = pm.feed(p, offer_msg(gid, 0));
    assert_eq!(
        members_named(&out).map(|(g, n)| (g, n.len())),
        Some((group, 2))
    );
    assert_eq!(
        tickets(&out).iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        [first, first + 1]
    );
}

#[test]
fn bad_group_demands_are_refused_with_the_reason() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (c, _) = pm.join("consumer");
    pm.offer_group(p, "three", &["x/0", "x/1", "x/2"], 10);
    // Fewer ids reserved than members.
    let (group, _, out) = pm.demand_group(c, "three", 2);
    assert!(
        out.iter().any(|(_, m)| matches!(m, FromPm::Refused { op: Op::Demand, cdo: Some(g), why: Refusal::Quota(_) } if *g == group)),
        "{out:?}"
    );
    // A CDO of that name that is no group.
    pm.offer(p, "plain", 10);
    let (group, _, out) = pm.demand_group(c, "plain", 4);
    assert!(
        out.iter().any(|(_, m)| matches!(m, FromPm::Refused { op: Op::Demand, cdo: Some(g), why: Refusal::NotAllowed(w) } if *g == group && w.contains("not a group"))),
        "{out:?}"
    );
    // Ids that are not the consumer's, or none.
    let group = pm.declare(c, "three");
    for (first, capacity) in [(1u64 << 40, 4), (group + 1, 0)] {
        let out = pm.feed(
            c,
            ToPm::DemandGroup {
                group,
                first,
                capacity,
            },
        );
        assert_eq!(
            out,
            [(c, refused(Op::Demand, Some(group), Refusal::BadCdoId))],
            "first {first}, capacity {capacity}"
        );
    }
    // Reserved ids already in use.
    let used = pm.declare(c, "in-use");
    let out = pm.feed(
        c,
        ToPm::DemandGroup {
            group,
            first: used,
            capacity: 4,
        },
    );
    assert!(
        out.iter().any(|(_, m)| matches!(
            m,
            FromPm::Refused {
                why: Refusal::BadCdoId,
                ..
            }
        )),
        "{out:?}"
    );
}

#[test]
fn a_group_whose_members_are_badly_named_is_refused_at_seal() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    // Issue #36: 340,000 members named "", and a member name past the 4,096 bytes allowed.
    let empty = vec![""; 340_000];
    let long = "x".repeat(5000);
    for (members, why) in [
        (empty, "group member 0 has a name of 0 bytes"),
        (
            vec!["ok", long.as_str()],
            "group member 1 has a name of 5000 bytes",
        ),
    ] {
        let g = pm.declare(p, "bad-group");
        let attributes = attr::group_attributes(&members);
        let out = pm.feed(p, ToPm::Seal { cdo: g, attributes });
        assert!(
            matches!(&out[..], [(_, FromPm::Refused { op: Op::Seal, why: Refusal::NotAllowed(w) | Refusal::Quota(w), .. })] if w.contains(why)),
            "{out:?}"
        );
        pm.feed(
            p,
            ToPm::Dispose {
                cdo: g,
                answer: true,
            },
        );
    }
    // The PM still serves a good group.
    pm.offer_group(p, "good", &["g/0", "g/1"], 4);
}

/// Offers `member` of `len` bytes carrying its bytes (an inline offer), sealed as
/// `Pm::offer` seals.
fn offer_inline(pm: &mut Pm, conn: ConnId, member: &str, len: usize) {
    let cdo = pm.declare(conn, member);
    pm.seal(conn, cdo);
    let extras = pool_core::proto::OfferExtras::new(Vec::new(), Some(memory_file()))
        .with_inline(vec![1u8; len]);
    let out = pm.feed(
        conn,
        ToPm::Offer {
            cdo,
            region: region(len as u64),
            extras,
        },
    );
    assert_eq!(out[0], (conn, done(Op::Offer, cdo)));
}

/// The sources of the tickets in `out`, by kind.
fn kinds(out: &[(ConnId, FromPm)]) -> Vec<&'static str> {
    out.iter()
        .filter_map(|(_, m)| match m {
            FromPm::Ticket { source, .. } => Some(source.kind()),
            _ => None,
        })
        .collect()
}

#[test]
fn members_a_consumer_can_copy_in_bulk_skip_inline_from_the_group_limit() {
    let mut pm = Pm::new();
    let (p, _) = pm.join("producer");
    let (near, _) = pm.join("consumer");
    // Another host: no copy out of the provider's memory there.
    let (far, _) = pm.join_at("far", "node2", 3, Some(tcp("far")));
    offer_inline(&mut pm, p, "g/small", 1536);
    offer_inline(&mut pm, p, "g/large", 1537);
    let g = pm.declare(p, "g");
    let attributes = attr::group_attributes(&["g/small", "g/large"]);
    pm.feed(p, ToPm::Seal { cdo: g, attributes });
    pm.feed(p, offer_msg(g, 0));
    let (_, _, out) = pm.demand_group(near, "g", 8);
    assert_eq!(kinds(&out), ["inline", "rma"], "{out:?}");
    let (_, _, out) = pm.demand_group(far, "g", 8);
    assert_eq!(kinds(&out), ["inline", "inline"], "{out:?}");
    // A single demand of the large one: inline, as every small CDO (after the ids the
    // group's demand reserved).
    for _ in 0..8 {
        pm.next_cdo(near);
    }
    let single = pm.declare(near, "g/large");
    let out = pm.feed(near, ToPm::Demand { cdo: single });
    assert_eq!(kinds(&out), ["inline"], "{out:?}");
}
