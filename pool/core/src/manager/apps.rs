//! Connections and applications: the JOIN handshake, LEAVE/BYE, and what goes when an
//! app leaves or its connection is lost.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::admission::Peer;
use super::{ConnId, Manager, State, Want, observe, traffic};
use crate::Subnet;
use crate::auth;
use crate::events::EventKind;
use crate::proto::{
    self, AppId, CdoId, FabricEndpoint, FromPm, InlineBytes, Op, ProcessMemory, Refusal, ToPm,
    TransferId,
};

/// CDOs of apps gone removed per step of [`Manager::work`] (see `reaping`): at about
/// 1.5 µs a CDO in a release build (200,000 took 0.3 s in one step), a slice holds the
/// manager under 2 ms, not the whole leave's time.
pub const REAP_SLICE: usize = 1024;

/// What the driver found out about who sends a JOIN, besides the proof of the workflow
/// secret the JOIN itself carries (see the trust model in docs/operations/security.md,
/// "Who may join"): the kernel's word on a local peer's user, a PMIx credential the PM's
/// PMIx host validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// No evidence beyond the secret: a peer on another host whose credential (if any)
    /// the PM's PMIx host cannot check.
    Unproven,
    /// Evidence that the peer runs as the PM's user; what it was (logged at debug level).
    Proven(String),
    /// Evidence against it: another user's process, or a credential the PM's PMIx host
    /// calls forged or expired; why (sent back in the refusal).
    Refused(String),
}

#[derive(Debug)]
pub(super) enum Conn {
    /// Challenged, not joined yet; with the peer's process id where the driver verified
    /// it (a Unix socket's `SO_PEERCRED`).
    Challenged([u8; 32], Peer),
    /// Joined as this app.
    Joined(AppId),
    /// A read-only observer (see [`crate::view`]).
    Observer,
}

#[derive(Debug)]
pub(super) struct App {
    pub(super) conn: ConnId,
    pub(super) component: String,
    pub(super) index: i64,
    pub(super) host: String,
    pub(super) process: u64,
    /// The job it runs in, as its launcher names it (for the views).
    pub(super) job: String,
    pub(super) endpoint: Option<Arc<FabricEndpoint>>,
    /// Its endpoints on other networks, best first.
    pub(super) alternates: Vec<Arc<FabricEndpoint>>,
    /// The network of each endpoint (the first, then the alternates), where known.
    pub(super) networks: Vec<Option<Subnet>>,
    /// Where same-host consumers may copy its offers from its memory.
    pub(super) memory: Option<ProcessMemory>,
    /// A copy out of another app's memory failed for it (its kernel refuses them, say):
    /// no more are planned for it.
    pub(super) copies_refused: bool,
    pub(super) leaving: bool,
    /// `component:index`, which tickets of its offers carry.
    pub(super) label: Arc<str>,
    /// Bytes it makes the PM hold, as [`Policy::max_app_bytes`](super::policy::Policy::max_app_bytes) counts them.
    pub(super) held: usize,
    /// Bytes of its offers' data the PM holds (part of `held`; at most
    /// [`policy::inline_share`] of the PM-wide budget).
    pub(super) inline_held: usize,
    /// Its subscriptions.
    pub(super) subscriptions: usize,
    /// When it joined.
    pub(super) joined: Instant,
    /// Its endpoints' NICs and why the first.
    pub(super) nics: proto::Nics,
    /// The GFS directory it announced (see [`super::spill`]).
    pub(super) gfs: Option<Arc<str>>,
    /// Its offers, demands and bytes, for observers.
    pub(super) counters: observe::AppCounters,
    /// Its traffic per endpoint and pseudo-NIC, for observers.
    pub(super) traffic: traffic::Slots,
    /// How many CDO ids it has used (the last it declared is `cdo_ids(app).start() +
    /// last_declared - 1`, from the start of this shard's part of them): observers list
    /// its CDOs in id order up to there.
    pub(super) last_declared: u64,
    /// Where it connected from (see [`super::policy::Policy::max_apps_per_peer`]).
    pub(super) peer: Peer,
    /// It reclaims what it held with the manager that is gone and replays what that
    /// manager confirmed, until its [`ToPm::Replayed`] (or the grace period's end): its
    /// operations raise no events meanwhile (see `grace`).
    pub(super) replaying: bool,
}

/// Which process first announced a (host, pid) for same-host copies, and how many live apps
/// announce it now.
#[derive(Debug)]
pub(super) struct Claim {
    /// The announcing process's random `Join::process` token.
    pub(super) process: u64,
    pub(super) apps: usize,
}

impl Manager {
    pub(super) fn join(
        &mut self,
        conn: ConnId,
        (nonce, peer): ([u8; 32], Peer),
        msg: ToPm,
        identity: Identity,
    ) {
        let peer_pid = match peer {
            Peer::Local(pid) => pid,
            Peer::Tcp(_) => None,
        };
        self.admitted(conn);
        let ToPm::Join(join) = msg else {
            return;
        };
        let crate::proto::Join {
            workflow,
            component,
            index,
            host,
            process,
            job,
            endpoint,
            alternates,
            networks,
            memory,
            credential: _,
            nics,
            gfs,
            role,
            proof,
            reclaim,
            member,
        } = *join;
        if let Identity::Proven(how) = &identity {
            tracing::debug!("{component}:{index} on {host} is the PM's user: {how}");
        }
        let why = self.join_refusal(&workflow, (&component, index), (&nonce, &proof), identity);
        let why = match why {
            None if role == proto::Role::Observer => {
                let standby = (component == proto::STANDBY).then_some(host.as_str());
                return self.observe(conn, &format!("{component}:{index} on {host}"), standby);
            }
            None => self.peer_has_room(peer).err(),
            why => why,
        };
        let id = match why.map_or_else(|| self.joined_id(reclaim, member), Err) {
            Ok(id) => id,
            Err(why) => return self.refuse_join(conn, why),
        };
        if let Some(r) = reclaim {
            // Serials only grow: the new manager's come after those its apps heard.
            self.events.heard(r.last_serial);
        }
        let label: Arc<str> = format!("{component}:{index}").into();
        let traffic = traffic::Slots::new(usize::from(endpoint.is_some()) + alternates.len());
        let app = self.admit(
            (peer_pid, id),
            App {
                conn,
                component,
                index,
                host,
                process,
                job,
                endpoint: endpoint.map(Arc::new),
                alternates: alternates.into_iter().map(Arc::new).collect(),
                networks,
                memory: None,
                copies_refused: false,
                leaving: false,
                label,
                held: 0,
                inline_held: 0,
                subscriptions: 0,
                joined: self.events.now(),
                nics,
                gfs: gfs.map(Arc::from),
                counters: observe::AppCounters::default(),
                traffic,
                last_declared: 0,
                peer,
                replaying: reclaim.is_some(),
            },
            memory,
        );
        self.app_joined(peer);
        let (pool, keep) = (self.instance, self.keep_dir());
        let lease_grace = self.policy.lease_grace;
        let welcome = FromPm::Welcome {
            app,
            pool,
            keep,
            lease_grace,
        };
        self.out.push(conn, welcome);
        if self.shard.numbers_apps() {
            self.notify(EventKind::AppJoin, app, None, || "joined".into());
        }
    }

    /// Why a JOIN of `component:index` to `workflow` is refused, if it is: another
    /// workflow, a wrong proof of the secret for `nonce`, evidence that the peer is not
    /// the PM's user, or no app id left. The secret is always needed; `identity` can
    /// only refuse, never stand in for it.
    fn join_refusal(
        &self,
        workflow: &str,
        (component, index): (&str, i64),
        (nonce, proof): (&[u8; 32], &[u8]),
        identity: Identity,
    ) -> Option<Refusal> {
        if workflow != self.workflow {
            Some(Refusal::WrongWorkflow)
        } else if !auth::verify(&self.secret, nonce, workflow, component, index, proof) {
            Some(Refusal::BadProof)
        } else if let Identity::Refused(why) = identity {
            Some(Refusal::NotTheUser(why))
        } else if self.next_app > proto::MAX_APP {
            Some(Refusal::TooManyApps)
        } else {
            None
        }
    }

    /// Admits `a` (its JOIN accepted): gives it the app id it reclaims (`id`) or the next
    /// one (later apps are numbered above every id given), accepts its process memory
    /// announcement as [`Manager::claim_memory`] allows (`peer_pid`: the process the
    /// driver verified, if any) and logs it.
    fn admit(
        &mut self,
        (peer_pid, id): (Option<u32>, Option<AppId>),
        mut a: App,
        memory: Option<ProcessMemory>,
    ) -> AppId {
        let app = id.unwrap_or(self.next_app);
        self.next_app = self.next_app.max(app + 1);
        self.conns.insert(a.conn, Conn::Joined(app));
        a.memory = self.claim_memory(app, (&a.host, a.process, peer_pid), memory);
        let (label, host) = (&a.label, &a.host);
        match &a.endpoint {
            Some(e) => tracing::info!(
                "app {label} joined (app {app}, host {host}, fabric {} at {})",
                e.provider,
                e.address
                    .ip()
                    .map_or_else(|| "a non-IP address".to_string(), |ip| ip.to_string())
            ),
            None => tracing::info!(
                "app {label} joined (app {app}, host {host}, no fabric endpoint: data by stream)"
            ),
        }
        self.apps.insert(app, a);
        app
    }

    pub(super) fn leave(&mut self, app: AppId) {
        if let Some(a) = self.apps.get_mut(&app) {
            a.leaving = true;
        }
        self.pin_transfers_from(|from| proto::cdo_owner(from) == app);
        let cdos: Vec<CdoId> = self.cdos.ids_of(app).collect();
        for offer in cdos {
            self.revoke_leases(offer);
        }
        self.try_bye(app);
    }

    /// True if a consumer still needs one of `app`'s offers: a transfer reads from it, or a
    /// consumer requires its name and no other app offers it.
    pub(super) fn needed(&self, app: AppId) -> bool {
        if !self.apps.contains_key(&app) {
            return false;
        }
        self.cdos.ids_of(app).any(|o| {
            let Some(c) = self.cdos.get(&o) else {
                return false;
            };
            match &c.state {
                State::Offered(_) | State::Withdrawing(_) => {
                    self.transfers.reading(o)
                        || (!self.cdos.waiting(&c.name).is_empty()
                            && !self
                                .cdos
                                .offers(&c.name)
                                .iter()
                                .any(|x| proto::cdo_owner(x) != app && self.alive(x)))
                }
                State::Withdrawn => self.answer_held(o),
                _ => false,
            }
        })
    }

    pub(super) fn try_bye(&mut self, app: AppId) {
        let Some(leaving) = self.apps.get(&app).map(|a| a.leaving) else {
            return;
        };
        if !leaving || self.needed(app) {
            return;
        }
        if let Some(a) = self.apps.get(&app) {
            let conn = a.conn;
            tracing::info!("app {} left (app {app})", a.label);
            self.out.push(conn, FromPm::Bye);
            self.out.close(conn);
        }
        if self.shard.numbers_apps() {
            self.notify(EventKind::AppLeave, app, None, || "left".into());
        }
        self.remove_app(app, false);
    }

    pub(super) fn retry_byes(&mut self) {
        let leaving: Vec<AppId> = self
            .apps
            .iter()
            .filter(|(_, a)| a.leaving)
            .map(|(&id, _)| id)
            .collect();
        for app in leaving {
            self.try_bye(app);
        }
    }

    /// Forgets `conn`, gone for `why` (subscribers of app leaves are told why).
    pub(super) fn lost(&mut self, conn: ConnId, why: &str) {
        if let Some(Conn::Joined(app)) = self.conns.get(&conn) {
            let app = *app;
            if let Some(a) = self.apps.get(&app) {
                tracing::info!("app {} gone (app {app}): {why}", a.label);
            }
            if self.shard.numbers_apps() {
                self.notify(EventKind::AppLeave, app, None, || why.to_string());
            }
            self.remove_app(app, true);
        }
        self.stats.forget_observer(conn);
        self.conns.remove(&conn);
        self.admitted(conn);
    }

    pub(super) fn remove_app(&mut self, app: AppId, died: bool) {
        let Some(a) = self.apps.remove(&app) else {
            return;
        };
        self.app_gone(a.peer, a.held);
        self.retire_traffic(app, &a);
        self.conns.remove(&a.conn);
        self.release_memory_claim(&a);
        self.forget_app_events(app, a.conn);
        self.forget_leases_of(app);
        self.forget_keep_refused(app);
        let mine: Vec<CdoId> = self.cdos.ids_of(app).collect();
        for &offer in &mine {
            self.revoke_leases(offer);
        }
        // Its CDOs go a slice per step of `work` (`reap`): from now on nothing is ticketed
        // to or from them. Names whose demands lost their last provider with its offers
        // are failed as those are removed; those whose transfers from it failed, below.
        self.reaping.extend(mine.into_iter().map(|c| (c, died)));
        // Its CDOs are the ids of its range (a group's members declared for it too).
        let its = |cdo: CdoId| proto::cdo_owner(cdo) == app;
        let mut names = BTreeSet::new();
        // Transfers from its offers fail; transfers to its CDOs just end.
        let lost: Vec<TransferId> = self
            .transfers
            .iter()
            .filter(|(_, t)| its(t.from) || its(t.to))
            .map(|(&id, _)| id)
            .collect();
        for id in lost {
            let why = match self.transfers.get(&id) {
                Some(t) if its(t.from) && died => "the provider is gone",
                Some(t) if its(t.from) => "the provider left",
                _ => "the consumer left before it completed",
            };
            let Some(t) = self.end_transfer(id, traffic::Outcome::Failed(why)) else {
                continue;
            };
            if its(t.from) {
                if let Some(c) = self.cdos.get(&t.to).filter(|_| died) {
                    names.insert(Arc::clone(&c.name));
                }
                self.retry_elsewhere(t.to, t.from);
            } else if its(t.to) {
                self.source_released(t.from);
            }
        }
        if died {
            for name in names {
                self.fail_orphaned_demands(&name);
            }
        }
        self.retry_byes();
    }

    /// Whether the app of CDO `cdo` is here (a gone app's CDOs wait to be reaped, and
    /// nothing is ticketed to or from them).
    pub(super) fn alive(&self, cdo: CdoId) -> bool {
        let owner = proto::cdo_owner(cdo);
        owner == super::kept::POOL || self.apps.contains_key(&owner)
    }

    /// Removes [`REAP_SLICE`] CDOs of apps gone; an offer of an app that died fails the
    /// demands it alone could serve.
    pub(super) fn reap(&mut self) {
        for _ in 0..REAP_SLICE {
            let Some((id, died)) = self.reaping.pop_front() else {
                break;
            };
            let Some(c) = self.cdos.remove(&id) else {
                continue;
            };
            self.forget_spill(id);
            let freed = c.extras.inline().map_or(0, InlineBytes::len);
            self.inline_held = self.inline_held.saturating_sub(freed);
            let offer = matches!(c.state, State::Offered(_) | State::Withdrawing(_));
            if died && offer && !self.cdos.waiting(&c.name).is_empty() {
                self.fail_orphaned_demands(&c.name);
            }
        }
        if self.reaping.is_empty() {
            self.cdos.give_back();
        }
    }

    /// Fails demands of `name` that no offer can serve any more.
    pub(super) fn fail_orphaned_demands(&mut self, name: &str) {
        let usable = |m: &Self, w: &Want| {
            m.cdos
                .offers(name)
                .iter()
                .any(|o| !w.failed.contains(&o) && m.alive(o))
        };
        let orphaned: Vec<CdoId> = self
            .cdos
            .waiting(name)
            .iter()
            .filter(|c| matches!(self.cdos.get(c).map(|c| &c.state), Some(State::Required(w)) if w.demanded && !usable(self, w)))
            .collect();
        for cdo in orphaned {
            self.fail_demand(cdo, name, Refusal::NoProvider);
        }
    }

    /// Fails the demand of `cdo` (waiting for `name`) with `why`: it is declared again,
    /// as before the demand, and its app told.
    pub(super) fn fail_demand(&mut self, cdo: CdoId, name: &str, why: Refusal) {
        self.cdos.stop_waiting(name, cdo);
        let Some(mut c) = self.cdos.get_mut(&cdo) else {
            return;
        };
        c.state = State::Declared;
        let app = c.app();
        drop(c);
        if let Some(conn) = self.apps.get(&app).map(|a| a.conn) {
            self.refuse(conn, Op::Demand, Some(cdo), why);
        }
    }
}
