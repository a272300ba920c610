//! Many CDOs in one call: [`AsyncClient::offer_many`] declares, seals and offers a batch
//! of CDOs, [`AsyncClient::fetch_many`] takes the bytes of a batch of names (from the
//! leases their offers' events brought, with no CDO kept; the others declared, demanded
//! and disposed).
//!
//! Why: a producer with many small CDOs at once (the fields of a time step) and a
//! consumer told of many offers at once (what its subscription's queue holds) paid, per
//! CDO, for what each call costs besides its messages: the client's lock taken three or
//! four times, a future and an answer's hand-over. Here one step of the core declares the
//! whole batch, one offers (or demands) it, and their messages leave in one write. The
//! PM sees the messages of the calls one by one (a lease used with no CDO kept is one
//! message where a demand is three or four, `pool_core::client::Taken`), so the semantics
//! are theirs: each CDO succeeds or fails on its own, and says which in its place of the
//! result.

use std::time::Instant;

use fabric::Buffer;
use futures::future::join_all;
use pool_core::client::{CallError, CallId, CallResult, Demand, LeaseCopy, Route, Taken};
use tokio::sync::oneshot;

use super::offer::{Ready, forget};
use super::shared::{Core, answer};
use super::transport::{self, Pace};
use super::{AsyncClient, CdoData, ClientError, Result};
use crate::attr::Attributes;
use crate::proto::{self, CdoId, Op, Source};

/// The most CDOs one step of the core takes in a batch call: a longer batch goes in
/// steps of this many, so that the client's lock is never held for long (its connection's
/// reader waits for it meanwhile).
pub const BATCH_STEP: usize = 1024;

/// A new CDO for [`AsyncClient::offer_many`]: its name, the attributes it is sealed with,
/// and its bytes.
pub type NewOffer = (String, Attributes, Buffer);

impl AsyncClient {
    /// Declares, seals and offers each of `offers` (name, attributes, bytes), as
    /// [`AsyncClient::declare`] and [`AsyncClient::seal_and_offer`] would one by one, in
    /// one step of the client for up to [`BATCH_STEP`] of them: their messages leave
    /// together and the PM answers them together. Returns, in the order given, each
    /// CDO's id once its offer is accepted, or why it was not; a CDO whose offer failed
    /// is disposed again (its bytes are dropped, as for a refused `seal_and_offer`).
    ///
    /// # Errors
    /// The whole call fails, with nothing declared, when a name is bad (empty or over
    /// [`proto::MAX_NAME`] bytes: `BadName`, refused); and when the connection is
    /// closed. Each offer fails on its own as `seal_and_offer` does: attributes the
    /// schemas refuse, a transport that is none, a registration, the PM's refusal.
    pub async fn offer_many(&self, offers: Vec<NewOffer>) -> Result<Vec<Result<CdoId>>> {
        check_names(offers.iter().map(|(name, ..)| name.as_str()))?;
        let mut out = Vec::with_capacity(offers.len());
        let mut offers = offers.into_iter().peekable();
        while offers.peek().is_some() {
            let step: Vec<NewOffer> = offers.by_ref().take(BATCH_STEP).collect();
            out.extend(self.offer_step(step).await?);
        }
        Ok(out)
    }

    /// [`AsyncClient::offer_many`] of at most [`BATCH_STEP`] offers.
    async fn offer_step(&self, offers: Vec<NewOffer>) -> Result<Vec<Result<CdoId>>> {
        let now = Instant::now();
        // Declared, with how each one's bytes go: to a file, carried to the PM, or
        // registered with the fabric.
        let planned = self.shared.with_core(|c| {
            let mut planned = Vec::with_capacity(offers.len());
            for (name, attributes, data) in &offers {
                let cdo = c.declare(now, name)?;
                let how = c
                    .transport(cdo, Some(attributes))
                    .map(|t| (t, c.carries(data.len())));
                planned.push((cdo, how));
            }
            Ok(planned)
        })?;
        let mut results: Vec<(CdoId, Result<()>)> = Vec::with_capacity(offers.len());
        let mut ready = Vec::with_capacity(offers.len());
        for ((_, attributes, data), (cdo, how)) in offers.into_iter().zip(planned) {
            let made = match how {
                Err(e) => Err(ClientError::from(e)),
                Ok((transport, carries)) => {
                    let gfs = self.gfs_of(transport);
                    let carried = gfs.is_none() && carries;
                    Ready::make(&self.shared, cdo, data, (gfs, carried)).await
                }
            };
            match made {
                Ok(r) => {
                    ready.push((results.len(), cdo, r, attributes));
                    results.push((cdo, Ok(())));
                }
                Err(e) => results.push((cdo, Err(e))),
            }
        }
        let calls = self.shared.with_core(|c| {
            let mut calls = Vec::with_capacity(ready.len());
            for (i, cdo, r, attributes) in ready {
                let (tx, rx) = oneshot::channel();
                let call = r.offer(c, now, Some(attributes), tx);
                let call = call.map(|call| (c.shard_of(Route::Cdo(cdo)), call));
                calls.push((i, cdo, call, rx));
            }
            Ok(calls)
        });
        let calls = calls.inspect_err(|_| {
            // The connection is gone: the bytes kept for the offers made ready are let go.
            for (cdo, _) in results.iter().filter(|(_, r)| r.is_ok()) {
                forget(&self.shared, *cdo);
            }
        })?;
        let shared = &self.shared;
        let answers = join_all(calls.into_iter().map(|(i, cdo, call, rx)| async move {
            let r = match call {
                Ok(call) => answer(shared, (Op::Offer, cdo), Some(call), rx).await,
                Err(e) => Err(e.into()),
            };
            (i, r)
        }))
        .await;
        for (i, r) in answers {
            results[i].1 = r.map(drop);
        }
        let mut out = Vec::with_capacity(results.len());
        for (cdo, r) in results {
            if let Err(e) = r {
                forget(&self.shared, cdo);
                self.let_go(cdo).await;
                out.push(Err(e));
            } else {
                out.push(Ok(cdo));
            }
        }
        Ok(out)
    }

    /// The bytes of a CDO of each of `names`, as [`AsyncClient::declare`],
    /// [`AsyncClient::demand`] and [`AsyncClient::dispose`] would take them one by one
    /// (the app keeps no CDO), in one step of the client for up to [`BATCH_STEP`] of them.
    /// A name the PM granted a lease of (an offer event of a subscription: see
    /// `docs/guide/events.md`) is served from it at once (one that carried the bytes
    /// with no CDO at all, in one message: [`crate::proto::ToPm::Took`]); the others wait for their
    /// offers together, each until the client's timeout. Returns, in the order given,
    /// each name's bytes and the attributes they were sealed with, or why there are none.
    ///
    /// # Errors
    /// The whole call fails, with nothing declared, when a name is bad (`BadName`,
    /// refused); and when the connection is closed. Each name fails on its own as
    /// `demand` does: [`CallError::Timeout`] when nobody offers it in time, `NoProvider`
    /// when its providers vanished (the demand is retracted then).
    pub async fn fetch_many(&self, names: &[&str]) -> Result<Vec<Result<Fetched>>> {
        check_names(names.iter().copied())?;
        let mut out = Vec::with_capacity(names.len());
        for step in names.chunks(BATCH_STEP) {
            out.extend(self.fetch_step(step).await?);
        }
        Ok(out)
    }

    /// [`AsyncClient::fetch_many`] of at most [`BATCH_STEP`] names: those with a lease
    /// are taken from it with no CDO kept (see `pool_core::client::Taken`), the others
    /// demanded, and so are those whose lease failed them.
    async fn fetch_step(&self, names: &[&str]) -> Result<Vec<Result<Fetched>>> {
        let now = Instant::now();
        let mut out = Vec::with_capacity(names.len());
        let mut copies = Vec::new();
        // Leases serve them: the core is told how current its lease table is.
        let mut waiting = self.shared.with_core_current(now, |c| {
            let mut demands = Vec::new();
            for (i, name) in names.iter().enumerate() {
                match c.take_leased(now, name)? {
                    Some(Taken::Here(data, attributes)) => out.push(Ok((data, attributes))),
                    Some(Taken::Copy(copy, source)) => {
                        copies.push((i, copy, source));
                        out.push(Err(unanswered()));
                    }
                    None => {
                        demands.push(i);
                        out.push(Err(unanswered()));
                    }
                }
            }
            demand_each(c, now, (names, &demands), &mut out)
        })?;
        let failed = self.copy_leased(copies, &mut out).await?;
        if !failed.is_empty() {
            let more = self
                .shared
                .with_core(|c| demand_each(c, now, (names, &failed), &mut out))?;
            waiting.extend(more);
        }
        let shared = &self.shared;
        let arrived = join_all(waiting.into_iter().map(|(i, cdo, call, rx)| async move {
            let r = answer(shared, (Op::Demand, cdo), Some(call), rx).await;
            let r = r.and_then(|_| Ok(shared.core().take_arrived(cdo)?));
            (i, cdo, r)
        }))
        .await;
        for (i, cdo, r) in arrived {
            if r.is_err() {
                // A demand that stays (no offer in time) is retracted first.
                if let Err(e) = self.retract(cdo).await {
                    tracing::debug!("fetch of CDO {cdo} failed; its retract: {e}");
                }
            }
            self.let_go(cdo).await;
            out[i] = r;
        }
        Ok(out)
    }

    /// Copies the bytes of each lease of memory in `copies` (the name's place in the
    /// batch, the lease, where the bytes are) and keeps in `out` those copied in time,
    /// telling the PM in one step. Returns the places of the names whose copy failed or
    /// came too late to keep (see `pool_core::client::Taken`): they are to be demanded.
    async fn copy_leased(
        &self,
        copies: Vec<(usize, LeaseCopy, Source)>,
        out: &mut [Result<Fetched>],
    ) -> Result<Vec<usize>> {
        if copies.is_empty() {
            return Ok(Vec::new());
        }
        let shared = &self.shared;
        // Small same-host copies here, one after the other; the others started together.
        let mut got = Vec::with_capacity(copies.len());
        let mut later = Vec::new();
        for (i, copy, source) in copies {
            match transport::get_now(shared, &source, Pace::Batch) {
                Some(here) => got.push((i, copy, Ok(here))),
                None => later.push((i, copy, source)),
            }
        }
        got.extend(
            join_all(later.into_iter().map(|(i, copy, source)| async move {
                let transfer = (copy.shard, copy.lease);
                let got = transport::get(shared, transfer, source, (None, Pace::Batch)).await;
                (i, copy, got)
            }))
            .await,
        );
        let now = Instant::now();
        shared.with_core(|c| {
            let mut failed = Vec::new();
            for (i, copy, got) in got {
                let kept = match got {
                    Ok(got) => c.took_copy(now, copy, got)?,
                    Err(e) => {
                        tracing::debug!("lease {} of shard {}: {e}", copy.lease, copy.shard);
                        c.give_back(copy);
                        None
                    }
                };
                match kept {
                    Some(here) => out[i] = Ok(here),
                    None => failed.push(i),
                }
            }
            Ok(failed)
        })
    }

    /// Disposes `cdo`, which a batch call declared and no longer needs; a failure is only
    /// logged (the CDO stays declared until the app leaves).
    async fn let_go(&self, cdo: CdoId) {
        if let Err(e) = self.dispose(cdo).await {
            tracing::debug!("a batch call could not dispose CDO {cdo}: {e}");
        }
    }
}

/// A fetched CDO: its bytes and the attributes they were sealed with.
type Fetched = (CdoData, Attributes);

/// A demand waiting for its answer: the name's place in the batch, the CDO, the call (its
/// shard's core and id) and where the answer comes.
type Waiting = (
    usize,
    CdoId,
    (usize, CallId),
    oneshot::Receiver<CallResult<u64>>,
);

/// A place in a batch's result whose answer is still to come (replaced before the call
/// returns).
fn unanswered() -> ClientError {
    ClientError::Call(CallError::Closed)
}

/// Declares and demands the names at `places` of `names`, each the app's for no longer
/// than its fetch: those here at once go to their place in `out` (disposed); the others
/// wait, returned.
///
/// # Errors
/// The core's, for a declare or a demand it cannot send (the connection is closed).
fn demand_each(
    c: &mut Core,
    now: Instant,
    (names, places): (&[&str], &[usize]),
    out: &mut [Result<Fetched>],
) -> std::result::Result<Vec<Waiting>, CallError> {
    let mut waiting = Vec::new();
    for &i in places {
        let cdo = c.declare(now, names[i])?;
        let (tx, rx) = oneshot::channel();
        match c.demand(now, cdo, tx)? {
            Demand::Here(data, attributes) => {
                // Demanded and here: the PM accepts the dispose without an answer.
                let (tx, _) = oneshot::channel();
                c.dispose(now, cdo, tx)?;
                out[i] = Ok((data, attributes));
            }
            Demand::Waiting(call) => {
                waiting.push((i, cdo, (c.shard_of(Route::Cdo(cdo)), call), rx));
            }
        }
    }
    Ok(waiting)
}

/// Checks every name of a batch before anything is declared.
///
/// # Errors
/// `BadName` (refused, as a declare) for the first empty or over-long name.
fn check_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    for name in names {
        proto::check_name(name).map_err(|why| CallError::Refused {
            op: Op::Declare,
            why,
        })?;
    }
    Ok(())
}
