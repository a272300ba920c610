//! A shard's control connection, from its opening (for shard 0, by the join; for another,
//! when the app first needs it) through the loss of its manager (see
//! docs/developers/failover.md): a client whose connection ends without the manager's
//! BYE keeps what it holds there and its waiting calls (the core's
//! [`lost`](pool_core::client::Sharded::lost)), looks for the manager that takes over
//! that shard (where it found the first, see [`ReclaimOptions::find`], and the endpoints
//! the PM info lists for the shard), joins it under its old app id and replays what it
//! holds (the core's [`rejoin`](pool_core::client::Sharded::rejoin)), all within
//! [`ReclaimOptions::timeout`]. The application's calls only wait meanwhile; the other
//! shards serve on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::{self, FrameReader};
use super::{ClientError, Shared};
use crate::CallError;
use crate::bootstrap::PmInfo;
use crate::proto::{self, Op, Refusal};

/// Where a client looks for the manager that takes over: a blocking look-up (a PMIx
/// lookup of the workflow's name, the PM info file read again) giving the PM info found
/// now, if any. Called again and again until the client rejoined or its timeout passed.
pub type Finder = Arc<dyn Fn() -> Option<PmInfo> + Send + Sync>;

/// How a client rides out the loss of its pool manager ([`super::JoinOptions::reclaim`]).
#[derive(Clone)]
pub struct ReclaimOptions {
    /// How long it waits for a manager to take over (`MSTRO_PM_RECLAIM_TIMEOUT`); then
    /// every waiting call fails as if the connection had closed.
    pub timeout: Duration,
    /// Where it looks besides the endpoints of the PM info it joined with (a standby's
    /// among them); `None`: those endpoints only.
    pub find: Option<Finder>,
}

impl std::fmt::Debug for ReclaimOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReclaimOptions")
            .field("timeout", &self.timeout)
            .field("find", &self.find.is_some())
            .finish()
    }
}

/// What a client needs to join a manager again: its JOIN (where it found the last
/// manager is [`Shared::pm_info`], how it reaches one [`Shared::route`]).
pub(crate) struct Rejoin {
    pub(crate) options: ReclaimOptions,
    pub(crate) join: proto::Join,
}

/// How long the reader goes on once writing to the PM failed: what the PM sent before the
/// connection ended is there to read at once (in the socket's buffer or the ring), and
/// the end follows it.
const READ_AFTER_WRITE_FAILED: Duration = Duration::from_secs(1);

/// Longest pause between two looks for the next manager.
const MOST_PAUSE: Duration = Duration::from_millis(250);

/// How one attempt to join the next manager failed.
enum Attempt {
    /// Nobody there yet (nothing listens, the connection ended, no answer in time):
    /// look again.
    Again(String),
    /// The next manager will not take this app back (its grace period is over, the
    /// workflow or secret differ): give up.
    Never(String),
}

/// Starts the driver's task for the control connection of shard `shard`, connected
/// already (`reader`: shard 0's, by the join) or opened now: the writer (what the socket
/// did not take when a caller sent it) and the reader (each message of the PM to the
/// protocol's core, which says what to do with it). When either ends, the client rejoins
/// a manager that takes over where it may (see `reclaim`) and goes on with that
/// connection, or closes.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    shard: usize,
    reader: Option<FrameReader>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = match reader {
            Some(r) => r,
            None => match open(&shared, shard).await {
                Some(r) => r,
                None => return driver::close(&shared, shard),
            },
        };
        loop {
            let written = tokio::select! {
                () = shared.outs[shard].drain() => true,
                () = driver::read_loop(&mut reader, &shared, shard) => false,
            };
            if written {
                // The writing failed: what the PM sent before the end (its BYE to a
                // leave, say) is still read, as long as it keeps coming.
                let rest = driver::read_loop(&mut reader, &shared, shard);
                let _ = tokio::time::timeout(READ_AFTER_WRITE_FAILED, rest).await;
            }
            match after_loss(&shared, shard).await {
                Some(next) => reader = next,
                None => return driver::close(&shared, shard),
            }
        }
    })
}

/// Opens the connection to shard `shard`'s manager, which the app needs now: what its
/// core sent meanwhile (its JOIN first) is written then. When the endpoints the app knows
/// do not answer and it rides out a manager's loss, the shard's manager may be gone with
/// another taking over: it is looked for as after a loss (`look`), within the reclaim
/// timeout. `None` when no manager of the shard answered in time (the core is closed
/// then: its calls fail).
async fn open(shared: &Arc<Shared>, shard: usize) -> Option<FrameReader> {
    let info = shared.pm_info();
    let endpoints = info.shard(shard).unwrap_or_default();
    let mut last = match driver::connect(endpoints, shared.timeout, &shared.route).await {
        Ok(c) => return Some(attached(shared, shard, c)),
        Err(e) => e.to_string(),
    };
    if let Some(rejoin) = shared.rejoin.as_ref() {
        let until = Instant::now() + rejoin.options.timeout;
        let mut pause = Duration::from_millis(20);
        while Instant::now() < until && !shard_closed(shared, shard) {
            let info = look(shared, rejoin).await;
            let left = until.saturating_duration_since(Instant::now());
            if info.workflow == rejoin.join.workflow
                && let Some(endpoints) = info.shard(shard)
            {
                match driver::connect(endpoints, left.min(shared.timeout), &shared.route).await {
                    Ok(c) => {
                        shared.set_pm_info(info);
                        return Some(attached(shared, shard, c));
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(MOST_PAUSE);
        }
    }
    tracing::error!(
        "pool client: no connection to shard {shard} of the pool: {last}; the calls on its names fail"
    );
    shared.outs[shard].close();
    None
}

/// The connection `c` to shard `shard` carries what its core sends from now on; its
/// reader.
fn attached(shared: &Shared, shard: usize, c: driver::Connected) -> FrameReader {
    shared.outs[shard].attach(c.writer);
    c.reader
}

/// The connection to shard `shard` ended: with reclaim on and a loss to reclaim from,
/// finds the manager that takes over that shard and rejoins it; the reader of its
/// connection, or `None` when the shard's core is closed (no reclaim, the manager said
/// BYE, the app left, or no manager took it back in time: every call waiting there has
/// failed then).
pub(crate) async fn after_loss(shared: &Arc<Shared>, shard: usize) -> Option<FrameReader> {
    shared.outs[shard].close();
    let rejoin = shared.rejoin.as_ref()?;
    // Ended before the welcome (the shard's manager died as the app first met it): the
    // core joins afresh where the shard's manager is now.
    let fresh = shared.with_core(|c| Ok(c.join_again(Instant::now(), shard)));
    if matches!(fresh, Ok(true)) {
        return open(shared, shard).await;
    }
    let until = Instant::now() + rejoin.options.timeout;
    let lost = shared.with_core(|c| {
        c.lost(Instant::now(), shard, until);
        Ok(c.core(shard).is_some_and(|c| c.is_lost()))
    });
    if !matches!(lost, Ok(true)) {
        return None;
    }
    tracing::warn!(
        "pool client: lost the pool manager (shard {shard}); waiting up to {:.1} s for one to take over (MSTRO_PM_RECLAIM_TIMEOUT)",
        rejoin.options.timeout.as_secs_f64()
    );
    let started = Instant::now();
    let mut pause = Duration::from_millis(20);
    let mut last = String::new();
    while Instant::now() < until && !shard_closed(shared, shard) {
        let info = look(shared, rejoin).await;
        match attempt(shared, rejoin, &info, until, shard).await {
            Ok(reader) => {
                tracing::warn!(
                    "pool client: rejoined the pool manager that took over after {:.2} s; what this app holds is offered again",
                    started.elapsed().as_secs_f64()
                );
                shared.set_pm_info(info);
                return Some(reader);
            }
            Err(Attempt::Never(why)) => {
                tracing::error!("pool client: no pool manager takes this app back: {why}");
                break;
            }
            Err(Attempt::Again(why)) => {
                tracing::debug!("pool client: no pool manager to rejoin yet: {why}");
                last = why;
            }
        }
        shared.outs[shard].close();
        let left = until.saturating_duration_since(Instant::now());
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(MOST_PAUSE);
    }
    if !last.is_empty() {
        tracing::error!(
            "pool client: no pool manager took over within {:.1} s (last: {last}); the calls waiting fail",
            rejoin.options.timeout.as_secs_f64()
        );
    }
    None
}

/// Whether the core of shard `shard` closed (or is none).
fn shard_closed(shared: &Shared, shard: usize) -> bool {
    shared.core().core(shard).is_none_or(|c| c.is_closed())
}

/// Where to look now: what the finder finds, else the PM info last joined.
async fn look(shared: &Shared, rejoin: &Rejoin) -> PmInfo {
    match found(rejoin.options.find.as_ref()).await {
        Some(info) => info,
        None => shared.pm_info(),
    }
}

/// What `find` finds now, if anything (on a blocking thread: it may wait on PMIx or a
/// file system).
pub(crate) async fn found(find: Option<&Finder>) -> Option<PmInfo> {
    let find = Arc::clone(find?);
    tokio::task::spawn_blocking(move || find())
        .await
        .ok()
        .flatten()
}

/// Connects to the endpoints `info` lists for shard `shard` and runs the rejoin's
/// handshake; the new connection's reader once the manager welcomed the app back and its
/// replay is written.
async fn attempt(
    shared: &Arc<Shared>,
    rejoin: &Rejoin,
    info: &PmInfo,
    until: Instant,
    shard: usize,
) -> Result<FrameReader, Attempt> {
    if info.workflow != rejoin.join.workflow {
        return Err(Attempt::Never(format!(
            "the PM info found is of workflow {:?}, not {:?}",
            info.workflow, rejoin.join.workflow
        )));
    }
    let Some(endpoints) = info.shard(shard) else {
        return Err(Attempt::Never(format!(
            "the PM info found lists {} shards, not shard {shard}",
            info.shards().count()
        )));
    };
    let limit = until.saturating_duration_since(Instant::now());
    let connected = driver::connect(endpoints, limit, &shared.route)
        .await
        .map_err(|e| Attempt::Again(e.to_string()))?;
    let mut reader = attached(shared, shard, connected);
    let _ = shared.with_core(|c| {
        c.rejoin(Instant::now(), shard, &info.secret);
        Ok(())
    });
    loop {
        let joined = shared.core().core(shard).and_then(|c| c.joined().cloned());
        match joined {
            Some(Ok(_)) => return Ok(reader),
            Some(Err(e)) => return Err(judge(e)),
            None => {}
        }
        let limit = until.saturating_duration_since(Instant::now());
        let got = reader.expect(Op::Join, limit.min(shared.timeout)).await;
        let handled = shared.with_core(|c| {
            match got {
                Ok(m) => c.handle(Instant::now(), shard, m),
                // The handshake ended: lost again (the earlier deadline stands).
                Err(_) => c.lost(Instant::now(), shard, until),
            }
            // Welcomed back at shard 0: this app's offers are filed under the new
            // manager's instance before its replay goes out, and so before any ticket
            // names them.
            if shard == 0
                && let Some(Ok((_, generation))) = c.joined()
            {
                shared.rejoined(*generation);
            }
            Ok(())
        });
        if let Err(e) = handled {
            return Err(Attempt::Again(e.to_string()));
        }
    }
}

/// Whether a failed rejoin is worth another try.
fn judge(e: CallError) -> Attempt {
    match e {
        CallError::Refused {
            why:
                why @ (Refusal::NotReclaimed(_)
                | Refusal::BadProof
                | Refusal::WrongWorkflow
                | Refusal::NotTheUser(_)),
            ..
        } => Attempt::Never(why.to_string()),
        other => Attempt::Again(ClientError::Call(other).to_string()),
    }
}
