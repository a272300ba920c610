//! The client's table of what it waits for: answers to calls (by operation and CDO, first
//! come first served), transfers' results not yet demanded, its CDOs with whether a
//! dispose must wait, memory lent for transfers, stream pieces, subscriptions' queues and
//! groups whose members the PM is naming.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use fabric::Buffer;
use tokio::sync::{mpsc, oneshot};

use super::subscription::EventQueue;
use super::{CdoData, ClientError, Result, driver};
use crate::attr::{self, AttrValue, Attributes};
use crate::events::SubId;
use crate::proto::{self, CdoId, FromPm, Op};

/// Waiters for answers, keyed by operation and CDO (declare: the app's handle; leave: 0),
/// first come first served; plus transfers' results not yet demanded.
#[derive(Default)]
pub(crate) struct Pending {
    pub(super) waiters: HashMap<(Op, u64), VecDeque<oneshot::Sender<Result<u64>>>>,
    pub(super) arrived: HashMap<CdoId, (CdoData, Attributes)>,
    /// This client's CDOs, from declare to dispose.
    pub(super) mine: HashMap<CdoId, Mine>,
    /// Memory the application lent for a CDO's next transfer ([`AsyncClient::demand_into`](super::AsyncClient::demand_into)).
    pub(crate) destinations: HashMap<CdoId, Buffer>,
    /// Where the reader routes pieces of stream transfers in progress.
    pub(crate) streams: HashMap<proto::TransferId, mpsc::UnboundedSender<driver::Piece>>,
    /// Event queues of subscriptions, by id.
    pub(crate) subscriptions: HashMap<SubId, Arc<EventQueue>>,
    /// Event queues of subscriptions asked for, by the app's handle, until `Subscribed`.
    pub(crate) new_subscriptions: HashMap<u64, Arc<EventQueue>>,
    /// Groups demanded with their members' ids reserved (the first, how many), until the
    /// PM names the members.
    pub(super) groups_wanted: HashMap<CdoId, (CdoId, u32)>,
    /// Groups the PM named the members of: their names and the group's attributes.
    pub(super) groups: HashMap<CdoId, (Vec<String>, Attributes)>,
    /// Set when the connection ended: every later call fails at once.
    pub(super) closed: bool,
}

/// What a client knows of one of its CDOs.
pub(super) struct Mine {
    /// Its name (tickets leave it out).
    pub(super) name: Arc<str>,
    /// An operation is under way after which the PM may refuse a dispose (an offer not yet
    /// withdrawn, a require or demand whose transfer may be in flight): a dispose then waits
    /// for the PM's answer. Otherwise the PM accepts it, and the client does not wait.
    pub(super) busy: bool,
}

impl Pending {
    /// An answer of the PM to waiting calls: done (one or many), ready, goodbye, refused
    /// (a stream piece's refusal goes to its stream), or a group's members named.
    pub(super) fn answered(&mut self, m: FromPm) {
        match m {
            FromPm::Done { op, cdo } => {
                self.resolve((op, cdo), Ok(cdo));
            }
            FromPm::DoneMany { op, cdos } => {
                for cdo in cdos {
                    self.resolve((op, cdo), Ok(cdo));
                }
            }
            FromPm::Ready { cdo } => {
                self.resolve((Op::Demand, cdo), Ok(cdo));
            }
            FromPm::Bye => {
                self.resolve((Op::Leave, 0), Ok(0));
            }
            FromPm::Refused {
                op: Op::Fetch,
                cdo: Some(transfer),
                why,
            } => {
                if let Some(tx) = self.streams.get(&transfer) {
                    let _ = tx.send(Err(why));
                }
            }
            FromPm::Refused { op, cdo, why } => {
                let key = (op, cdo.unwrap_or(0));
                let text = why.to_string();
                if !self.resolve(key, Err(ClientError::Refused { op, why })) {
                    tracing::warn!("pool manager refused {op} ({text})");
                }
            }
            FromPm::GroupMembers {
                group,
                names,
                attributes,
            } => self.group_arrived(group, names, attributes),
            other => tracing::error!("not an answer to a call: {other:?}"),
        }
    }

    /// Marks `cdo` busy or settled (see [`Mine::busy`]).
    pub(super) fn set_busy(&mut self, cdo: CdoId, busy: bool) {
        if let Some(m) = self.mine.get_mut(&cdo) {
            m.busy = busy;
        }
    }

    /// Hands `result` to the oldest waiter for `key` that still waits; false if nobody
    /// does. Waiters that gave up (a timeout, an interrupted or dropped future) are passed
    /// over, so that the answer reaches the call that asked again.
    pub(crate) fn resolve(&mut self, key: (Op, u64), result: Result<u64>) -> bool {
        let Some(q) = self.waiters.get_mut(&key) else {
            return false;
        };
        while q.front().is_some_and(oneshot::Sender::is_closed) {
            q.pop_front();
        }
        let Some(tx) = q.pop_front() else {
            self.waiters.remove(&key);
            return false;
        };
        if q.is_empty() {
            self.waiters.remove(&key);
        }
        // One that gives up right now just misses its answer.
        let _ = tx.send(result);
        true
    }

    /// The PM named the members of `group` (see [`ToPm::DemandGroup`](crate::proto::ToPm::DemandGroup)): they are this
    /// app's CDOs from the first id reserved on, each demanded; the group's demand is
    /// answered.
    pub(crate) fn group_arrived(&mut self, group: CdoId, names: Vec<String>, attrs: Attributes) {
        let Some((first, capacity)) = self.groups_wanted.remove(&group) else {
            tracing::warn!(
                "pool manager named the members of group {group}, which is not demanded"
            );
            return;
        };
        if names.len() > capacity as usize {
            tracing::warn!("pool manager named more members than ids reserved for group {group}");
            return;
        }
        for (i, name) in names.iter().enumerate() {
            let mine = Mine {
                name: name.as_str().into(),
                busy: true,
            };
            self.mine.insert(first + i as u64, mine);
        }
        self.groups.insert(group, (names, attrs));
        self.resolve((Op::Demand, group), Ok(group));
    }

    /// Stores a finished transfer's bytes until the CDO is demanded, with the offer's
    /// attributes and the built-in name, size and provider, which tickets leave out.
    pub(crate) fn arrive(
        &mut self,
        cdo: CdoId,
        data: CdoData,
        (mut attributes, provider): (Attributes, &str),
    ) {
        if let Some(m) = self.mine.get(&cdo) {
            attributes.insert(attr::NAME.into(), AttrValue::Str(m.name.to_string()));
        }
        attributes.insert(attr::PROVIDER.into(), AttrValue::Str(provider.to_string()));
        let len = AttrValue::Uint(data.len() as u64);
        attributes.insert(attr::LOCAL_SIZE.into(), len);
        self.arrived.insert(cdo, (data, attributes));
    }

    /// The connection ended: fail everyone waiting (their senders drop).
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.waiters.clear();
        self.streams.clear();
        for q in self.subscriptions.values() {
            q.close();
        }
    }
}
