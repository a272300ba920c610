//! What one application may make the pool manager hold and do: the quotas and deadlines
//! that keep a misbehaving member of the workflow (one that knows the secret) from taking
//! the pool manager's memory, pinning another app's offers, stalling every operation, or
//! offering CDOs under names that belong to another component.
//!
//! The threat model: the workflow's user is trusted; an application is trusted with its own
//! CDOs only. Every limit has a documented default and a `maestro pm` option.

use std::time::{Duration, Instant};

use super::admission::Peer;
use super::{App, Cdo, Claim, HashMap, Manager, State};
use crate::ConnId;
use crate::attr::{self, AttrValue, Attributes};
use crate::events::{EventKind, FabricChange};
use crate::proto::{self, AppId, CdoId, Op, ProcessMemory, Refusal, ToPm, TransferId};

/// Default of [`Policy::max_app_bytes`]: 256 MiB.
pub const MAX_APP_BYTES: usize = 256 << 20;
/// Default of [`Policy::max_bytes`]: 4 GiB (`maestro pm` takes a quarter of the node's
/// memory instead).
pub const MAX_BYTES: usize = 4 << 30;
/// Default of [`Policy::max_apps_per_peer`]: 1024 (a node's ranks share its address).
pub const MAX_APPS_PER_PEER: usize = 1024;
/// Default of [`Policy::max_event_bytes`]: 4 MiB (some 20,000 events).
pub const MAX_EVENT_BYTES: usize = 4 << 20;
/// Default of [`Policy::max_attribute_bytes`]: 1 MiB.
pub const MAX_ATTRIBUTE_BYTES: usize = 1 << 20;
/// Default of [`Policy::max_subscriptions`]: 1024.
pub const MAX_SUBSCRIPTIONS: usize = 1024;
/// Most members one group may list (and one group demand reserve ids for).
pub const MAX_GROUP: u32 = 1 << 20;
/// Default of [`Policy::max_inline_bytes`]: 64 MiB.
pub const MAX_INLINE_BYTES: usize = 64 << 20;
/// Most bytes one offer may carry to the PM (larger offers keep their bytes and move as
/// any other): the client carries 4 KiB by default (`MSTRO_INLINE_MAX`).
pub const MAX_INLINE_OFFER: usize = 64 << 10;
/// An app's share of [`Policy::max_inline_bytes`]: one app holds at most this fraction
/// (but never less than one offer's worth, [`MAX_INLINE_OFFER`]), so that one cannot push
/// everyone else's small CDOs off the PM.
pub const INLINE_SHARES: usize = 8;

/// Most bytes of offers' data one app may have the PM hold under `policy`.
pub(super) fn inline_share(policy: &Policy) -> usize {
    (policy.max_inline_bytes / INLINE_SHARES).max(MAX_INLINE_OFFER)
}

/// Default of [`Policy::max_leases`]: 8,192 per application (at most 32 MiB of inline
/// bytes held by a subscriber that never demands, for as long as its client keeps unused
/// leases).
pub const MAX_LEASES: usize = 8192;
/// Default of [`Policy::max_kept_bytes`]: 256 MiB (about 300,000 kept CDOs with short
/// names and a few attributes).
pub const MAX_KEPT_BYTES: usize = 256 << 20;
/// Default of [`Policy::transfer_timeout`]: 120 s.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(120);
/// Default of [`Policy::lease_grace`]: 1 s.
pub const LEASE_GRACE: Duration = Duration::from_secs(1);
/// Default of [`Policy::spill_timeout`]: 30 s.
pub const SPILL_TIMEOUT: Duration = Duration::from_secs(30);
/// What the pool manager counts for a CDO besides its name and attributes (its table
/// entries; measured at 313-320 bytes per live CDO).
pub const CDO_COST: usize = 320;
/// What the pool manager counts for a subscription besides its selector.
pub const SUBSCRIPTION_COST: usize = 1024;

/// What the pool holds for all applications together (see [`Policy::max_bytes`]) and
/// how many apps each peer has joined ([`Policy::max_apps_per_peer`]).
#[derive(Debug, Default)]
pub(super) struct Budget {
    /// The sum of the apps' held bytes.
    held: usize,
    apps_by_peer: HashMap<Peer, usize>,
}

/// `peer` for people: its address, or the process on the Unix socket.
fn peer_name(peer: Peer) -> String {
    match peer {
        Peer::Tcp(ip) => format!("address {ip}"),
        Peer::Local(Some(pid)) => format!("process {pid} on this host"),
        Peer::Local(None) => "this host's Unix socket".into(),
    }
}

/// The limits and bindings a pool manager enforces per application.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Most bytes one application may make the PM hold: per CDO [`CDO_COST`] plus its name
    /// and sealed attributes, per subscription [`SUBSCRIPTION_COST`] plus its selector.
    /// Past it, declares, seals and subscriptions are refused with [`crate::proto::Refusal::Quota`].
    pub max_app_bytes: usize,
    /// Most bytes the PM holds for all applications together: their CDOs, subscriptions
    /// and events queued for them (each app within its own [`Policy::max_app_bytes`]),
    /// with the kept CDOs'. Past it, what would add is refused with
    /// [`crate::proto::Refusal::Quota`] (and a subscriber whose events would pass it is cut
    /// off), so that many apps of one workflow cannot together take the node's memory.
    pub max_bytes: usize,
    /// Most applications joined at once from one peer: one address over TCP, one process
    /// on the PM's Unix socket. Past it a JOIN is refused with
    /// [`crate::proto::Refusal::NotAdmitted`].
    pub max_apps_per_peer: usize,
    /// Most bytes of events the PM makes for one connection and holds unsent (what one
    /// round of operations produces for its subscriptions; each event is also charged to
    /// the subscriber's [`Policy::max_app_bytes`] and to [`Policy::max_bytes`] as it is
    /// made). A connection whose events would pass it is cut off, its app gone, at once:
    /// nothing is built beyond it.
    pub max_event_bytes: usize,
    /// Most bytes of one CDO's attributes (keys and values): every subscriber of its
    /// events gets them, so they must stay metadata.
    pub max_attribute_bytes: usize,
    /// Most subscriptions one application may hold.
    pub max_subscriptions: usize,
    /// Most bytes of small CDOs' data the PM holds for all apps together (offers carry
    /// them, tickets hand them on: [`crate::proto::Source::Inline`]). Past it, offers keep
    /// their bytes at the provider and move as any other; the bytes an app's offers carry
    /// count against its [`Policy::max_app_bytes`] too, until withdrawn. One offer carries
    /// at most [`MAX_INLINE_OFFER`], one app holds at most 1/[`INLINE_SHARES`] of this.
    pub max_inline_bytes: usize,
    /// Most bytes the PM holds for the CDOs it keeps after their producers handed their
    /// files over (per CDO [`CDO_COST`] plus its name, file path, attributes and
    /// description, [`crate::KeptFile::description`]; they are
    /// nobody's quota once their producer is gone). Past it, withdraws asking to keep are
    /// refused with [`crate::proto::Refusal::NotKept`].
    pub max_kept_bytes: usize,
    /// How long a transfer may keep an offer that its provider withdraws (or leaves with)
    /// from being released: past it the transfer is abandoned (the consumer's CDO is
    /// ticketed from another offer or its demand fails) and the withdraw completes. A slow
    /// consumer is not cut short otherwise: transfers from offers nobody withdraws have no
    /// deadline.
    pub transfer_timeout: Duration,
    /// How long the holder of a revoked lease has to use it ([`crate::proto::ToPm::UseLease`])
    /// or give it back: past it, a lease not in use no longer keeps its offer (the
    /// withdraw completes; a late use is refused and the demand goes to the PM). An honest
    /// client answers a revocation at once; a lease in use is a transfer, kept up to
    /// [`Policy::transfer_timeout`].
    pub lease_grace: Duration,
    /// How long the PM waits for a provider it asked to write an offer to the global file
    /// system ([`crate::proto::FromPm::Spill`]); past it the offer's consumers get the
    /// stream as if the provider had said it cannot write (a late answer is refused).
    pub spill_timeout: Duration,
    /// Most leases one application holds ([`crate::proto::Grant`]: an offer's ticket sent
    /// with its event to a subscriber, ahead of a demand); past it, its subscriptions hear
    /// of offers without leases and its demands wait for the PM as any other. 0: no
    /// leases at all.
    pub max_leases: usize,
    /// Names that belong to a component: an offer of a name under one of these prefixes
    /// from any other component is refused (the longest matching prefix decides).
    pub owners: Vec<NameOwner>,
    /// Components whose applications may report any fabric change (a lost node, a link of
    /// another host). Others may report only changes of their own links (networks they
    /// announced at JOIN); the PM's own host reports through the driver, not as an app.
    pub reporters: Vec<String>,
}

impl Policy {
    /// What one shard of a pool of `shards` enforces (docs/developers/shards.md): the
    /// quotas that bound what the pool holds for all its shards together, an app's
    /// ([`Policy::max_app_bytes`], [`Policy::max_leases`]) and the pool's kept and inline
    /// bytes ([`Policy::max_kept_bytes`], [`Policy::max_inline_bytes`]), divided evenly
    /// (a bound above 0 stays above 0), so that the pool's stay what was set, not `K`
    /// times it; the
    /// bounds of one process ([`Policy::max_bytes`], one connection's events) and those
    /// every shard sees whole (subscriptions, apps per peer, attributes) as set. One
    /// shard: the policy as set.
    pub fn share(&self, shards: crate::shards::Shards) -> Policy {
        let k = shards.count();
        let part = |v: usize| if v == 0 { 0 } else { (v / k).max(1) };
        Policy {
            max_app_bytes: part(self.max_app_bytes),
            max_leases: part(self.max_leases),
            max_kept_bytes: part(self.max_kept_bytes),
            max_inline_bytes: part(self.max_inline_bytes),
            ..self.clone()
        }
    }
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            max_app_bytes: MAX_APP_BYTES,
            max_bytes: MAX_BYTES,
            max_apps_per_peer: MAX_APPS_PER_PEER,
            max_event_bytes: MAX_EVENT_BYTES,
            max_attribute_bytes: MAX_ATTRIBUTE_BYTES,
            max_subscriptions: MAX_SUBSCRIPTIONS,
            max_inline_bytes: MAX_INLINE_BYTES,
            max_kept_bytes: MAX_KEPT_BYTES,
            transfer_timeout: TRANSFER_TIMEOUT,
            spill_timeout: SPILL_TIMEOUT,
            lease_grace: LEASE_GRACE,
            max_leases: MAX_LEASES,
            owners: Vec::new(),
            reporters: Vec::new(),
        }
    }
}

impl Policy {
    /// The binding that decides who may offer `name`, if one does.
    pub fn owner_of(&self, name: &str) -> Option<&NameOwner> {
        self.owners
            .iter()
            .filter(|o| name.starts_with(&o.prefix))
            .max_by_key(|o| o.prefix.len())
    }
}

/// A name prefix bound to a component (`PREFIX=COMPONENT`, as `maestro pm --owner` takes
/// it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameOwner {
    /// The name prefix (may be a whole name).
    pub prefix: String,
    /// The component whose applications alone may offer such names.
    pub component: String,
}

/// Why a `PREFIX=COMPONENT` binding was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("name owner {0:?} is not PREFIX=COMPONENT with both non-empty, e.g. field-=producer")]
pub struct NameOwnerError(pub String);

impl std::str::FromStr for NameOwner {
    type Err = NameOwnerError;

    fn from_str(s: &str) -> Result<NameOwner, NameOwnerError> {
        match s.rsplit_once('=') {
            Some((prefix, component)) if !prefix.is_empty() && !component.is_empty() => {
                Ok(NameOwner {
                    prefix: prefix.to_string(),
                    component: component.to_string(),
                })
            }
            _ => Err(NameOwnerError(s.to_string())),
        }
    }
}

/// The bytes attributes take, as the PM counts them: keys and values, plus 16 per entry.
pub fn attribute_bytes(attributes: &Attributes) -> usize {
    attributes
        .iter()
        .map(|(k, v)| {
            16 + k.len()
                + match v {
                    AttrValue::Str(s) => s.len(),
                    AttrValue::Blob(b) => b.len(),
                    _ => 16,
                }
        })
        .sum()
}

/// The members a group's sealed `attributes` list, each checked as any CDO name (1 to
/// [`proto::MAX_NAME`] bytes) and at most [`MAX_GROUP`] of them; `Ok(None)` for a CDO that
/// is no group.
///
/// # Errors
/// A refusal naming the first bad member, or the count.
pub(super) fn checked_members(attributes: &Attributes) -> Result<Option<Vec<String>>, Refusal> {
    let Some(names) = attr::group_members(attributes) else {
        return Ok(None);
    };
    if names.len() > MAX_GROUP as usize {
        return Err(Refusal::Quota(format!(
            "a group of {} members, more than {MAX_GROUP}; split it",
            names.len()
        )));
    }
    if let Some((i, bad)) = names
        .iter()
        .enumerate()
        .find(|(_, n)| proto::check_name(n).is_err())
    {
        return Err(Refusal::NotAllowed(format!(
            "group member {i} has a name of {} bytes: every member is a CDO, named with 1 to {} bytes",
            bad.len(),
            proto::MAX_NAME
        )));
    }
    Ok(Some(names))
}

impl Manager {
    /// Whether `app` may run `msg` as far as its quotas and the name bindings go: the
    /// operation, CDO and reason of a refusal.
    pub(super) fn permitted(&self, app: AppId, msg: &ToPm) -> Result<(), (Op, CdoId, Refusal)> {
        let (op, cdo, attributes) = match msg {
            ToPm::Seal { cdo, attributes } => (Op::Seal, *cdo, Some(attributes)),
            ToPm::SealOffer {
                cdo, attributes, ..
            } => (Op::Offer, *cdo, Some(attributes)),
            ToPm::Offer { cdo, .. } => (Op::Offer, *cdo, None),
            _ => return Ok(()),
        };
        let Some(c) = self.cdos.get(&cdo).filter(|c| c.app() == app) else {
            return Ok(()); // refused as unknown by the operation itself
        };
        if let Some(attributes) = attributes {
            let bytes = attribute_bytes(attributes);
            if bytes > self.policy.max_attribute_bytes {
                return Err((
                    op,
                    cdo,
                    Refusal::Quota(format!(
                        "{bytes} bytes of attributes, more than the {} one CDO may have (maestro pm --max-attributes)",
                        self.policy.max_attribute_bytes
                    )),
                ));
            }
            self.affordable(app, bytes).map_err(|why| (op, cdo, why))?;
            checked_members(attributes).map_err(|why| (op, cdo, why))?;
        }
        if op == Op::Offer
            && let Err(why) = self.owns(app, &c.name)
        {
            return Err((op, cdo, why));
        }
        Ok(())
    }

    /// Whether `app` may offer (and discard) `name`: no component owns it, or `app` is of
    /// the one that does.
    pub(super) fn owns(&self, app: AppId, name: &str) -> Result<(), Refusal> {
        match self.policy.owner_of(name) {
            Some(owner)
                if self
                    .apps
                    .get(&app)
                    .is_none_or(|a| a.component != owner.component) =>
            {
                Err(Refusal::NotAllowed(format!(
                    "names starting with {:?} belong to component {:?} (maestro pm --owner)",
                    owner.prefix, owner.component
                )))
            }
            _ => Ok(()),
        }
    }

    /// Whether `bytes` more fit `app`'s [`Policy::max_app_bytes`] and the pool's
    /// [`Policy::max_bytes`] (nothing is counted: see [`Manager::account`]); the refusal
    /// says by how much they would not.
    pub(super) fn affordable(&self, app: AppId, bytes: usize) -> Result<(), Refusal> {
        let held = self.apps.get(&app).map_or(0, |a| a.held);
        if held.saturating_add(bytes) > self.policy.max_app_bytes {
            let shared = match self.shard.of().count() {
                1 => String::new(),
                k => format!(
                    ", this shard's 1/{k} of the pool's {}",
                    self.pool_policy.max_app_bytes
                ),
            };
            return Err(Refusal::Quota(format!(
                "this application holds {held} bytes of CDOs and subscriptions at the pool manager, {bytes} more would pass its {}{shared} (maestro pm --max-app-bytes); dispose of CDOs it no longer needs",
                self.policy.max_app_bytes
            )));
        }
        let used = self.pool_used();
        if used.saturating_add(bytes) > self.policy.max_bytes {
            return Err(Refusal::Quota(format!(
                "the pool manager holds {used} bytes for all applications, {bytes} more would pass its {} (maestro pm --max-bytes); dispose of CDOs no longer needed",
                self.policy.max_bytes
            )));
        }
        Ok(())
    }

    /// What the PM holds for all applications, as [`Policy::max_bytes`] counts it.
    pub(super) fn pool_used(&self) -> usize {
        self.budget.held + self.kept_held() + self.out.events_total()
    }

    /// Counts `bytes` against `app` (after [`Manager::affordable`] allowed them), or gives
    /// them back (`credit`); the pool's total with it.
    pub(super) fn account(&mut self, app: AppId, bytes: usize, credit: bool) {
        if let Some(a) = self.apps.get_mut(&app) {
            let before = a.held;
            a.held = if credit {
                a.held.saturating_sub(bytes)
            } else {
                a.held.saturating_add(bytes)
            };
            self.budget.held = (self.budget.held + a.held).saturating_sub(before);
        }
    }

    /// Whether one more app may join from `peer` ([`Policy::max_apps_per_peer`]).
    pub(super) fn peer_has_room(&self, peer: Peer) -> Result<(), Refusal> {
        let n = self.budget.apps_by_peer.get(&peer).copied().unwrap_or(0);
        if n >= self.policy.max_apps_per_peer {
            return Err(Refusal::NotAdmitted(format!(
                "{n} applications joined from {} already, the most one peer may have at once (maestro pm --max-apps-per-peer)",
                peer_name(peer)
            )));
        }
        Ok(())
    }

    /// An app of `peer` joined.
    pub(super) fn app_joined(&mut self, peer: Peer) {
        *self.budget.apps_by_peer.entry(peer).or_default() += 1;
    }

    /// An app of `peer` is gone, with the `held` bytes it made the pool hold.
    pub(super) fn app_gone(&mut self, peer: Peer, held: usize) {
        if let Some(n) = self.budget.apps_by_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.budget.apps_by_peer.remove(&peer);
            }
        }
        self.budget.held = self.budget.held.saturating_sub(held);
    }

    /// Whether an event of `bytes` for `conn`, whose app is `app`, fits: the connection's
    /// [`Policy::max_event_bytes`], the app's [`Policy::max_app_bytes`] and the pool's
    /// [`Policy::max_bytes`]. Why not, if it does not.
    pub(super) fn event_room(&self, conn: ConnId, app: AppId, bytes: usize) -> Result<(), String> {
        let queued = self.out.event_bytes(conn) + bytes;
        // This round's operations' events: a new subscription's replay is not counted.
        if queued.saturating_sub(self.replayed_bytes(conn)) > self.policy.max_event_bytes {
            return Err(format!(
                "its subscriptions' events passed {} bytes waiting to be sent (maestro pm --max-event-bytes): subscribe to fewer events, with narrower selectors",
                self.policy.max_event_bytes
            ));
        }
        let held = self.apps.get(&app).map_or(0, |a| a.held);
        if held + queued > self.policy.max_app_bytes {
            return Err(format!(
                "its CDOs, subscriptions and the events waiting for it passed its {} bytes (maestro pm --max-app-bytes)",
                self.policy.max_app_bytes
            ));
        }
        if self.pool_used() + bytes > self.policy.max_bytes {
            return Err(format!(
                "the events waiting for it would pass the {} bytes the pool manager holds for all applications (maestro pm --max-bytes)",
                self.policy.max_bytes
            ));
        }
        Ok(())
    }

    /// What a CDO counts against its app's bytes (with the bytes its offer carries).
    pub(super) fn cost(c: &Cdo) -> usize {
        CDO_COST
            + c.name.len()
            + attribute_bytes(&c.attributes)
            + c.extras.inline().map_or(0, |b| b.len())
    }

    /// Whether `app` may take one more subscription (with a selector of `selector_bytes`),
    /// or why not.
    pub(super) fn may_subscribe(&self, app: AppId, selector_bytes: usize) -> Result<(), Refusal> {
        let subs = self.apps.get(&app).map_or(0, |a| a.subscriptions);
        if subs >= self.policy.max_subscriptions {
            return Err(Refusal::Quota(format!(
                "this application holds {subs} subscriptions, the most it may (maestro pm --max-subscriptions); end those it no longer needs"
            )));
        }
        self.affordable(app, SUBSCRIPTION_COST + selector_bytes)
    }

    /// Accepts a JOIN's process memory announcement if it names the announcing process:
    /// the connection's verified peer (where the driver knows it), and the same process as
    /// the first live app that announced this host and pid. Otherwise it is dropped (the
    /// app's offers then travel by RMA), with a warning.
    pub(super) fn claim_memory(
        &mut self,
        app: AppId,
        (host, process, peer_pid): (&str, u64, Option<u32>),
        memory: Option<ProcessMemory>,
    ) -> Option<ProcessMemory> {
        let m = memory?;
        if peer_pid.is_some_and(|pid| pid != m.pid) {
            tracing::warn!(
                "app {app} announced the memory of process {} but its connection is process {}; ignored",
                m.pid,
                peer_pid.unwrap_or_default()
            );
            return None;
        }
        let claim = self
            .claims
            .entry((host.to_string(), m.pid))
            .or_insert(Claim { process, apps: 0 });
        if claim.process != process {
            tracing::warn!(
                "app {app} announced the memory of process {} on {host}, which another process announced first; ignored",
                m.pid
            );
            return None;
        }
        claim.apps += 1;
        Some(m)
    }

    /// An app is gone: its memory announcement no longer counts.
    pub(super) fn release_memory_claim(&mut self, a: &App) {
        let Some(m) = a.memory else { return };
        let key = (a.host.clone(), m.pid);
        if let Some(c) = self.claims.get_mut(&key) {
            c.apps = c.apps.saturating_sub(1);
            if c.apps == 0 {
                self.claims.remove(&key);
            }
        }
    }

    /// Transfers from the offers `from` selects now keep a withdraw or leave waiting: each
    /// is abandoned [`Policy::transfer_timeout`] after it started.
    pub(super) fn pin_transfers_from(&mut self, from: impl Fn(CdoId) -> bool) {
        self.transfers.pin_from(from, self.policy.transfer_timeout);
    }

    /// Abandons the pinning transfers whose deadline passed: their offers are released (a
    /// withdraw completes, a leave gets its BYE) and their consumers' CDOs are ticketed
    /// from other offers, or their demands fail.
    pub(super) fn abandon_overdue(&mut self, now: Instant) {
        while let Some(id) = self.transfers.overdue(now) {
            self.abandon(id);
        }
    }

    fn abandon(&mut self, id: TransferId) {
        if let Some(holder) = self.transfers.lease(id).map(|l| l.holder) {
            tracing::warn!(
                "lease {id} abandoned: app {holder} did not give it back within {:.0} s of its revocation",
                self.policy.transfer_timeout.as_secs_f64()
            );
            return self.give_back(id);
        }
        let Some(t) = self.end_transfer(
            id,
            super::traffic::Outcome::Failed("abandoned: its provider withdrew the offer"),
        ) else {
            return;
        };
        let (consumer, secs) = (
            self.cdos.get(&t.to).map(|c| c.app()),
            self.policy.transfer_timeout.as_secs_f64(),
        );
        tracing::warn!(
            "transfer {id} abandoned: it kept an offer its provider withdrew busy for {secs:.0} s"
        );
        if let Some(app) = consumer {
            self.notify(EventKind::TransportCompleted, app, Some(t.from), || {
                format!(
                    "transfer {id} abandoned after {secs:.0} s: its provider withdrew the offer (maestro pm --transfer-timeout)"
                )
            });
        }
        if matches!(
            self.cdos.get(&t.to).map(|c| &c.state),
            Some(State::Required(_))
        ) {
            self.retry_elsewhere(t.to, t.from);
            if let Some(name) = self.cdos.get(&t.to).map(|c| std::sync::Arc::clone(&c.name)) {
                self.fail_orphaned_demands(&name);
            }
        }
        self.source_released(t.from);
    }

    /// `Report` from `app`: a fabric change it saw. Components named in
    /// [`Policy::reporters`] may report anything; others only changes of their own links
    /// (the networks they announced at JOIN), so no app can make the PM avoid a healthy
    /// link elsewhere or announce a node lost.
    pub(super) fn report(&mut self, conn: ConnId, app: AppId, change: FabricChange) {
        let Some(a) = self.apps.get(&app) else { return };
        if self.policy.reporters.contains(&a.component) {
            tracing::info!("app {app} reports {change:?}");
            let now = self.events.now();
            return self.fabric_changed(now, change);
        }
        let refused = |why: String| Refusal::NotAllowed(why);
        match change {
            FabricChange::Link {
                name,
                addresses,
                up,
            } => {
                let own: Vec<crate::Subnet> = addresses
                    .into_iter()
                    .filter(|s| a.networks.iter().flatten().any(|n| n == s))
                    .collect();
                if own.is_empty() {
                    let why = refused(format!(
                        "an application reports only its own links (networks it announced at JOIN); link {name} is not one (maestro pm --reporter COMPONENT lets a component report any)"
                    ));
                    return self.refuse(conn, Op::Report, None, why);
                }
                tracing::info!(
                    "app {app} reports link {name} {}",
                    if up { "up" } else { "down" }
                );
                let now = self.events.now();
                self.fabric_changed(
                    now,
                    FabricChange::Link {
                        name,
                        addresses: own,
                        up,
                    },
                );
            }
            FabricChange::Other(what) => {
                let why = refused(format!(
                    "only components named by maestro pm --reporter may report {what:?}"
                ));
                self.refuse(conn, Op::Report, None, why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_owns_a_name() {
        let p = Policy {
            owners: vec![
                "field-=producer".parse().expect("owner"),
                "field-secret=vault".parse().expect("owner"),
            ],
            ..Policy::default()
        };
        assert_eq!(
            p.owner_of("field-1").map(|o| &*o.component),
            Some("producer")
        );
        assert_eq!(
            p.owner_of("field-secret-7").map(|o| &*o.component),
            Some("vault")
        );
        assert_eq!(p.owner_of("other"), None);
    }

    #[test]
    fn bad_bindings_say_what_is_expected() {
        for bad in ["", "=x", "x=", "nothing"] {
            let e = bad.parse::<NameOwner>().expect_err(bad);
            assert!(e.to_string().contains("PREFIX=COMPONENT"), "{e}");
        }
        let o: NameOwner = "a=b=c".parse().expect("the last = splits");
        assert_eq!((o.prefix.as_str(), o.component.as_str()), ("a=b", "c"));
    }

    #[test]
    fn attributes_count_keys_and_values() {
        let a = Attributes::from([
            (".u.s".to_string(), AttrValue::Str("abc".into())),
            (".u.n".to_string(), AttrValue::Int(1)),
            (".u.b".to_string(), AttrValue::Blob(vec![0; 100])),
        ]);
        assert_eq!(
            attribute_bytes(&a),
            (16 + 4 + 3) + (16 + 4 + 16) + (16 + 4 + 100)
        );
    }
}
