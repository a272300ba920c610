//! A read-only observer's side of the protocol (see [`crate::view`]): once joined as
//! [`crate::proto::Role::Observer`] (the handshake of [`ClientCore::connect`](super::ClientCore::connect)),
//! it asks one [`Query`] at a time and reads its [`View`]. Tools that ask, print and wait
//! drive it (`maestro pool`, the launcher's PMIx queries).

use super::{CallError, CallResult};
use crate::proto::{FromPm, ToPm};
use crate::view::{Query, View};

/// The questions of an observer connection: each is numbered, and only the answer to
/// the one asked last is taken.
#[derive(Debug)]
pub struct ObserverCore {
    next: u64,
    asked: Option<u64>,
}

impl Default for ObserverCore {
    fn default() -> Self {
        ObserverCore {
            next: 1,
            asked: None,
        }
    }
}

impl ObserverCore {
    /// The message that asks `query`; its answer is the PM's next message
    /// ([`ObserverCore::answer`]).
    pub fn ask(&mut self, query: Query) -> ToPm {
        let id = self.next;
        self.next += 1;
        self.asked = Some(id);
        ToPm::Query { id, query }
    }

    /// The PM's answer to the question asked last.
    ///
    /// # Errors
    /// [`CallError::Refused`] with the PM's reason (not an observer connection, a query it
    /// refuses); [`CallError::Protocol`] for an answer to another question, or when none
    /// was asked.
    pub fn answer(&mut self, msg: FromPm) -> CallResult<View> {
        let Some(id) = self.asked.take() else {
            return Err(CallError::Protocol(format!(
                "{msg:?} when no query was asked"
            )));
        };
        match msg {
            FromPm::View { id: got, view } if got == id => Ok(*view),
            FromPm::Refused { op, why, .. } => Err(CallError::Refused { op, why }),
            other => Err(CallError::Protocol(format!(
                "{other:?} instead of the answer to query {id}"
            ))),
        }
    }
}
