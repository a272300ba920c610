//! The JOIN handshake of a client core ([`ClientCore::connect`], and a lost core's
//! [`ClientCore::rejoin`]): the PM's challenge is answered with the JOIN carrying the
//! proof of the workflow secret, and its welcome joins (or welcomes a lost core back).

use std::time::{Duration, Instant};

use super::{CallError, CallResult, ClientCore, Driver, Transmit};
use crate::proto::{FromPm, ToPm};

/// Where a JOIN handshake stands: waiting for the PM's challenge (the JOIN and the secret
/// it proves knowledge of, kept until then), then for its welcome; either until `deadline`.
pub(super) enum Handshake {
    Challenge {
        join: Box<crate::proto::Join>,
        secret: Vec<u8>,
        deadline: Instant,
    },
    Welcome {
        deadline: Instant,
    },
}

impl Handshake {
    pub(super) fn deadline(&self) -> Instant {
        match self {
            Handshake::Challenge { deadline, .. } | Handshake::Welcome { deadline } => *deadline,
        }
    }
}

impl<T: Driver> ClientCore<T> {
    /// This core's manager is shard `place` of a sharded pool (docs/developers/shards.md):
    /// the core numbers its CDOs in that shard's part of the app's ids
    /// ([`Place::cdo_ids`](crate::shards::Place::cdo_ids)). Set it before the welcome, or
    /// before the first declare of a core made joined ([`ClientCore::new`]).
    pub fn set_shard(&mut self, place: crate::shards::Place) {
        self.shard = place;
        if self.app != 0 {
            let ids = place.cdo_ids(self.app);
            (self.next_cdo, self.last_cdo) = (*ids.start(), *ids.end());
        }
    }

    /// The core of a connection that is to join: sends `join` (its proof made from the
    /// PM's challenge and `secret`) once the challenge comes, and is joined at the PM's
    /// welcome ([`ClientCore::joined`]). The handshake, and then each call, waits at most
    /// `call_timeout`; no call may be made before the welcome.
    pub fn connect(
        now: Instant,
        join: crate::proto::Join,
        secret: &[u8],
        call_timeout: Duration,
    ) -> ClientCore<T> {
        let mut core = ClientCore::new(0, call_timeout);
        core.joined = None;
        core.handshake = Some(Handshake::Challenge {
            join: Box::new(join),
            secret: secret.to_vec(),
            deadline: now.checked_add(call_timeout).unwrap_or(now),
        });
        core
    }

    /// The core of a connection to shard `place` of a sharded pool (see
    /// docs/developers/shards.md) for app `app`, which shard 0 numbered: joins as `join`
    /// naming that id ([`Join::member`](crate::proto::Join)); calls may be made at once,
    /// their messages follow the JOIN once the welcome came (a welcome as another app is
    /// a protocol error, and the core closes).
    pub fn connect_member(
        now: Instant,
        mut join: crate::proto::Join,
        secret: &[u8],
        call_timeout: Duration,
        (app, place): (crate::proto::AppId, crate::shards::Place),
    ) -> ClientCore<T> {
        join.member = Some(app);
        let mut core = ClientCore::connect(now, join, secret, call_timeout);
        core.app = app;
        core.set_shard(place);
        core
    }

    /// How the JOIN handshake ended: the app's id and the PM's instance, or why it failed
    /// (`Refused` with the PM's reason, `Timeout(Join)`, `Closed`, `Protocol`); `None`
    /// while it runs. A core made by [`ClientCore::new`] is joined from the start.
    pub fn joined(&self) -> Option<&CallResult<(crate::proto::AppId, u64)>> {
        self.joined.as_ref()
    }

    /// A message of the PM during the handshake: the challenge is answered with the JOIN,
    /// the welcome joins, anything else ends the connection.
    pub(super) fn handshake(&mut self, now: Instant, step: Handshake, msg: FromPm) {
        let failed = match (step, msg) {
            (
                Handshake::Challenge {
                    mut join,
                    secret,
                    deadline,
                },
                FromPm::Challenge { nonce },
            ) => {
                join.proof = crate::auth::prove(
                    &secret,
                    &nonce,
                    &join.workflow,
                    &join.component,
                    join.index,
                );
                self.transmit.push_back(Transmit {
                    msg: ToPm::Join(join),
                    deferred: false,
                });
                self.handshake = Some(Handshake::Welcome { deadline });
                return;
            }
            (
                Handshake::Welcome { .. },
                FromPm::Welcome {
                    app,
                    pool,
                    keep,
                    lease_grace,
                },
            ) => {
                self.leases.set_grace(lease_grace);
                if self.reclaiming.lost.is_some() {
                    return self.rejoined(now, (app, pool), keep);
                }
                if self.app != 0 && app != self.app {
                    self.joined = Some(Err(CallError::Protocol(format!(
                        "the pool manager welcomed app {} as app {app}",
                        self.app
                    ))));
                    return self.close();
                }
                // A member core numbers its CDOs from the start (its calls may have).
                if self.app == 0 {
                    let ids = self.shard.cdo_ids(app);
                    (self.next_cdo, self.last_cdo) = (*ids.start(), *ids.end());
                    self.app = app;
                }
                self.reclaiming.generation = pool;
                self.keep_dir = keep;
                self.joined = Some(Ok((app, pool)));
                let early = std::mem::take(&mut self.early);
                self.transmit.extend(early);
                return;
            }
            (_, FromPm::Refused { op, why, .. }) => CallError::Refused { op, why },
            (Handshake::Challenge { .. }, other) => {
                CallError::Protocol(format!("{other:?} instead of a challenge"))
            }
            (Handshake::Welcome { .. }, other) => {
                CallError::Protocol(format!("{other:?} instead of a welcome"))
            }
        };
        self.joined = Some(Err(failed));
        if self.reclaiming.lost.is_none() {
            self.close();
        }
    }
}
