//! Stream transfers this app fetches through the pool manager: a window of pieces asked
//! for at a time, each accepted once and only at the offset and length asked, the next
//! asked as one arrives; a stream that makes no progress for the call timeout fails.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{CallError, CallResult, ClientCore, Driver, Event, Piece};
use crate::HashMap;
use crate::proto::{MAX_CHUNK, Op, ToPm, TransferId};

/// Pieces are asked for in this size ...
pub const STREAM_PIECE: u64 = if MAX_CHUNK < 1 << 20 {
    MAX_CHUNK
} else {
    1 << 20
};
/// ... this many at a time.
pub const STREAM_WINDOW: usize = 4;

/// One stream being fetched.
pub(super) struct Stream<S> {
    /// Where its pieces go.
    route: S,
    len: u64,
    /// The offset of the next piece to ask for.
    next: u64,
    /// Pieces asked for and not yet here: offset, length.
    asked: BTreeMap<u64, u64>,
    /// When it fails unless a piece comes first.
    pub(super) deadline: Option<Instant>,
}

/// The streams being fetched, by transfer.
pub(super) struct Streams<S>(HashMap<TransferId, Stream<S>>);

impl<S> Default for Streams<S> {
    fn default() -> Self {
        Streams(HashMap::default())
    }
}

impl<S> Streams<S> {
    /// The earliest deadline of a stream.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.0.values().filter_map(|s| s.deadline).min()
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// Takes out the streams `which` picks: their routes.
    pub(super) fn take(&mut self, which: impl Fn(&Stream<S>) -> bool) -> Vec<S> {
        let picked: Vec<TransferId> = (self.0.iter())
            .filter(|(_, s)| which(s))
            .map(|(&t, _)| t)
            .collect();
        (picked.into_iter())
            .filter_map(|t| self.0.remove(&t).map(|s| s.route))
            .collect()
    }
}

impl<T: Driver> ClientCore<T> {
    /// Fetches the `len` bytes of stream transfer `transfer`: asks for the first window of
    /// pieces now and each next one as a piece arrives; the pieces go to `route` as
    /// [`Event::Piece`], each exactly once, until all `len` bytes came or one
    /// [`Event::Piece`] carries the error that ended the fetch (`Refused` by the PM,
    /// `Protocol` for bytes not asked for, `Timeout(Fetch)` when no piece came within the
    /// call timeout). [`ClientCore::unroute`] gives it up.
    ///
    /// # Errors
    /// [`CallError::Closed`].
    pub fn stream(
        &mut self,
        now: Instant,
        transfer: TransferId,
        len: u64,
        route: T::Stream,
    ) -> CallResult<()> {
        self.open()?;
        let stream = Stream {
            route,
            len,
            next: 0,
            asked: BTreeMap::new(),
            deadline: now.checked_add(self.call_timeout),
        };
        self.streams.0.insert(transfer, stream);
        for _ in 0..STREAM_WINDOW {
            self.ask_next(transfer);
        }
        Ok(())
    }

    /// Asks for the next piece of `transfer`, if any is left.
    fn ask_next(&mut self, transfer: TransferId) {
        let Some(s) = self.streams.0.get_mut(&transfer) else {
            return;
        };
        if s.next >= s.len {
            return;
        }
        let (offset, len) = (s.next, STREAM_PIECE.min(s.len - s.next));
        s.asked.insert(offset, len);
        s.next += len;
        self.queue(ToPm::Fetch {
            transfer,
            offset,
            len,
        });
    }

    /// A piece of stream transfer `transfer` (or the PM's refusal of it) came at `now`.
    pub(super) fn piece(&mut self, now: Instant, transfer: TransferId, piece: Piece) {
        let Some(s) = self.streams.0.get_mut(&transfer) else {
            return;
        };
        let piece = piece.and_then(|(offset, bytes)| {
            if s.asked.get(&offset) != Some(&(bytes.len() as u64)) {
                return Err(CallError::Protocol(format!(
                    "stream transfer {transfer}: {} bytes at {offset} were not asked for",
                    bytes.len()
                )));
            }
            s.asked.remove(&offset);
            Ok((offset, bytes))
        });
        let route = s.route.clone();
        let ended = piece.is_err() || (s.asked.is_empty() && s.next >= s.len);
        if ended {
            self.streams.0.remove(&transfer);
        } else {
            s.deadline = now.checked_add(self.call_timeout);
            self.ask_next(transfer);
        }
        self.events.push_back(Event::Piece {
            stream: route,
            piece,
        });
    }

    /// Fails the streams that made no progress until `now`.
    pub(super) fn streams_timed_out(&mut self, now: Instant) {
        let late = |s: &Stream<T::Stream>| s.deadline.is_some_and(|at| at <= now);
        self.end_streams(late, &CallError::Timeout(Op::Fetch));
    }

    /// Gives up stream transfer `transfer`: its pieces are dropped from now on.
    pub fn unroute(&mut self, transfer: TransferId) {
        self.streams.0.remove(&transfer);
    }
}
