//! A read-only observer of a running pool (see [`pool_core::view`]): joins with the
//! workflow secret as [`Role::Observer`], asks [`Query`]s and reads [`View`]s. It is not
//! an app: the PM does not count it, raises no events for it and refuses it every
//! operation but a query. `maestro pool` and the launcher's PMIx queries use it.
//!
//! It is blocking, with a single-threaded tokio runtime of its own: observers are tools
//! that ask, print and wait, not parts of an app's hot path. Of a sharded pool it asks
//! every shard and merges their answers into the view of one pool
//! ([`View::merge`](pool_core::view::View::merge)).

use std::time::Duration;

use crate::bootstrap::PmInfo;
use crate::proto::{self, Op, Role};
use crate::view::{Query, View};
use pool_core::client::ObserverCore;

use super::driver::{self, Connected};
use super::{Endpoints, Result};

/// How the PM's connection to an observer ended ([`Observer::wait_end`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The PM said BYE: it stopped (the workflow ended).
    Stopped,
    /// The connection ended without a BYE: the PM died, or the network between broke.
    Lost,
}

/// A connection to the PM that may only look.
///
/// # Panics
/// Its calls block the thread: called from within a tokio runtime, they panic.
pub struct Observer {
    rt: tokio::runtime::Runtime,
    /// A connection per shard of the pool, each with its questions.
    conns: Vec<(Connected, ObserverCore)>,
    timeout: Duration,
}

impl Observer {
    /// Connects to the PM named by `info` (its endpoints in order; each shard's, of a
    /// sharded pool) and joins as an observer named `who` (shown in the PM's log).
    ///
    /// # Errors
    /// [`ClientError::Unreachable`](super::ClientError::Unreachable) when no endpoint answers; [`CallError::Refused`](crate::CallError::Refused) with
    /// `BadProof` or `WrongWorkflow` (the PM info is not this workflow's, or is stale),
    /// `Quota` (too many observers); timeouts after `timeout`; [`ClientError::Io`](super::ClientError::Io) when no
    /// runtime can be started.
    pub fn connect(info: &PmInfo, who: &str, timeout: Duration) -> Result<Observer> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let conns = rt.block_on(async {
            let mut conns = Vec::new();
            for shard in 0..info.shards().count() {
                let endpoints = info.shard(shard).unwrap_or_default();
                let mut conn =
                    driver::connect(endpoints, timeout, &driver::Route::default()).await?;
                let join = super::join_message(
                    info,
                    (who, 0, ""),
                    Endpoints::default(),
                    None,
                    true,
                    Role::Observer,
                );
                driver::handshake(&mut conn, join, info, timeout).await?;
                conns.push((conn, ObserverCore::default()));
            }
            Result::Ok(conns)
        })?;
        Ok(Observer { rt, conns, timeout })
    }

    /// Waits up to `limit` for the PM to end this connection (a standby pool manager
    /// watching the active one: see `maestro pm --standby-for`); `None`: it did not.
    /// Messages other than BYE meanwhile are dropped (an observer is sent nothing
    /// unasked).
    pub fn wait_end(&mut self, limit: Duration) -> Option<Ended> {
        let reader = &mut self.conns.first_mut()?.0.reader;
        self.rt.block_on(async {
            let until = tokio::time::Instant::now() + limit;
            loop {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                match reader.expect(Op::Query, left).await {
                    Ok(proto::FromPm::Bye) => return Some(Ended::Stopped),
                    Ok(_) => {}
                    Err(super::ClientError::Call(crate::CallError::Timeout(_))) => return None,
                    Err(_) => return Some(Ended::Lost),
                }
            }
        })
    }

    /// Asks `query` and waits for its answer (every shard's, merged).
    ///
    /// # Errors
    /// [`CallError::Refused`](crate::CallError::Refused) (not an observer connection), [`CallError::Closed`](crate::CallError::Closed),
    /// [`CallError::Timeout`](crate::CallError::Timeout) after the connection's timeout, [`CallError::Protocol`](crate::CallError::Protocol)
    /// for an answer to another question.
    pub fn query(&mut self, query: Query) -> Result<View> {
        let (conns, timeout) = (&mut self.conns, self.timeout);
        let views = self.rt.block_on(async {
            // Asked of every shard before any answer is read: they answer meanwhile.
            for (conn, core) in conns.iter_mut() {
                let frame = proto::encode(&[core.ask(query.clone())])?;
                conn.writer.write_all(&frame).await?;
            }
            let mut views = Vec::with_capacity(conns.len());
            for (conn, core) in conns.iter_mut() {
                let answer = conn.reader.expect(Op::Query, timeout).await?;
                views.push(core.answer(answer)?);
            }
            Result::Ok(views)
        })?;
        let mut views = views;
        if views.len() == 1
            && let Some(view) = views.pop()
        {
            return Ok(view);
        }
        View::merge(&query, views).ok_or_else(|| {
            crate::CallError::Protocol(format!("the shards' answers to {query:?} differ in kind"))
                .into()
        })
    }
}
