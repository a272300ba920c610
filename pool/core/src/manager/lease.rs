//! Leases: a demand's ticket granted with an offer event, before any demand (see
//! [`crate::proto::Grant`]). A subscriber told of an offer learns where the bytes are (or
//! gets them, for a small CDO); its demand of a CDO of that name is then served at once
//! from the lease, and the PM hears of it afterwards ([`crate::proto::ToPm::UseLease`]).
//!
//! What the manager decides here, and why no consumer ever reads bytes that are no longer
//! offered:
//! - **Who gets one**: an application (not the offer's own) whose subscription is told of
//!   the offer after the fact, while it holds fewer than [`Policy::max_leases`]; only
//!   where it reads the bytes itself (inline, same process, RMA or a same-host copy: never
//!   a stream the PM relays), and never while a subscription hears of demands before they
//!   happen (a lease's demand is carried out before the PM hears of it: it could be
//!   neither announced nor held). A subscriber that hears of the offer before it happens
//!   (signal-before) is told before the offer exists: no lease.
//! - **What a lease of memory keeps**: its offer, as a transfer in flight does. A withdraw,
//!   or the provider's leave, revokes every lease of the offer ([`FromPm::Revoke`]) and
//!   completes once each holder used it and finished, or released it. A holder that does
//!   neither within [`Policy::lease_grace`] loses it (an honest client answers a
//!   revocation at once: one that keeps every lease it is given must not hold each
//!   withdraw for the transfer timeout); one that used it holds the offer as a transfer
//!   does, up to [`Policy::transfer_timeout`]. A lease of inline bytes keeps nothing: the
//!   holder has them.
//! - **What the holder relies on** (`pool_core::client` leases): it uses a lease of
//!   memory only within half the grace (`Welcome` says it) of the last instant it had
//!   handled everything the PM had written to it, and a take keeps its copy only if it
//!   ended within that half too. A revocation written before that instant took the lease
//!   out of its table; one written after it lets the offer go a whole grace later. That
//!   holds while the PM writes a revocation within the other half of the grace of
//!   revoking (its connection's writer is a task of its own, writing what the round
//!   queued at once) and a use reaches the PM within it: a holder stalled or behind stops
//!   using leases of memory on its own.
//! - **A take** ([`crate::proto::ToPm::Took`], a batch fetch that keeps no CDO): told
//!   after the copy, not before as a demand's use is, so nothing holds the offer for it;
//!   the holder's rule above makes the offer there throughout. A take of a lease the PM
//!   abandoned is refused.
//! - **A provider that is gone**: its leases are revoked; a holder that used one already
//!   finds its transfer failed and the demand ticketed elsewhere, as any transfer's.
//! - **Two consumers**: each gets its own lease and uses it or not, as two tickets.
//! - **A holder that is gone**: its leases are released.
//!
//! [`Policy::max_leases`]: super::Policy::max_leases
//! [`Policy::transfer_timeout`]: super::Policy::transfer_timeout
//! [`Policy::lease_grace`]: super::Policy::lease_grace

use std::sync::Arc;

use super::transfer::{Leased, Transfer};
use super::{ConnId, Manager, State, Want, traffic};
use crate::events::EventKind;
use crate::proto::{
    AppId, CdoId, Direct, FromPm, Grant, MAX_RELEASE, Op, Refusal, Source, TransferId,
};

impl Manager {
    /// Grants `holder` a lease of `offer`, to send with the offer's event, if it may have
    /// one (see the module's documentation).
    pub(super) fn grant_lease(&mut self, offer: CdoId, holder: AppId) -> Option<Grant> {
        if self.events.demands_held()
            || self.transfers.held_count(holder) >= self.policy.max_leases
            || self.apps.get(&holder).is_none_or(|a| a.leaving)
        {
            return None;
        }
        let f = self.cdos.get(&offer)?;
        let (State::Offered(region), provider) = (&f.state, f.app()) else {
            return None;
        };
        if provider == holder || !self.alive(offer) {
            return None;
        }
        let region = *region;
        let name = Arc::clone(&f.name);
        let (source, _, route) = self.plan((holder, false), provider, offer, region);
        if matches!(source, Source::Stream { .. }) {
            return None;
        }
        let lease = self.id();
        let leased = Leased {
            from: offer,
            holder,
            name,
            len: region.len,
            route,
            inline: matches!(source, Source::Inline { .. }),
            kind: source.kind(),
            revoked: false,
        };
        self.transfers.grant(lease, leased);
        Some(Grant { lease, source })
    }

    /// `UseLease`: `app`'s CDO `cdo` is demanded and served by `lease`. A lease of memory
    /// becomes the transfer (ended by the holder's `TransferDone`); one of inline bytes is
    /// done, the CDO local. Refused, and the lease released, unless the lease is the app's
    /// and the CDO is the app's, declared (neither required nor demanded) with the
    /// offer's name.
    pub(super) fn use_lease(&mut self, conn: ConnId, app: AppId, cdo: CdoId, lease: TransferId) {
        let Some(l) = self.transfers.lease(lease).filter(|l| l.holder == app) else {
            return self.refuse(conn, Op::Demand, Some(cdo), Refusal::UnknownTransfer);
        };
        let fits = match self.cdos.get(&cdo).filter(|c| c.app() == app) {
            None => Err(Refusal::UnknownCdo),
            Some(c) if c.state != State::Declared => Err(Self::wrong(Op::Demand, &c.state)),
            Some(c) if c.name != l.name => Err(Refusal::BadName),
            Some(_) => Ok(()),
        };
        if let Err(why) = fits {
            self.give_back(lease);
            return self.refuse(conn, Op::Demand, Some(cdo), why);
        }
        let Some(l) = self.transfers.end_lease(lease) else {
            return;
        };
        self.with_cdo(conn, app, Op::Demand, cdo, |m, c| {
            m.cdo(c).state = State::Required(Want {
                demanded: true,
                transfer: (!l.inline).then_some(lease),
                local: l.inline,
                ..Want::default()
            });
            let record = m.leased_demand(app, &l, c);
            m.notify(EventKind::TransportStarted, app, Some(l.from), || {
                format!(
                    "transfer {lease} by a lease ({}) granted with the offer's event",
                    l.kind
                )
            });
            if l.inline {
                let done = traffic::Outcome::Done(None);
                m.transfer_finished(lease, &record, done);
                m.transfer_ended(conn, app, (lease, record), None, None);
            } else {
                m.transfers.start(lease, record);
                // A lease used after its revocation keeps the withdrawn offer as long as
                // a transfer may.
                let withdrawing = matches!(
                    m.cdos.get(&l.from).map(|f| &f.state),
                    Some(State::Withdrawing(_))
                );
                if withdrawing {
                    m.pin_transfers_from(|from| from == l.from);
                }
            }
        });
    }

    /// `Took`, when nobody hears of its operations (else [`Manager::cdo_op`] runs it as
    /// them): `app` used lease `lease` (took its inline bytes, or copied its memory,
    /// `direct` saying how) and keeps no CDO of it, so none is made. What stays of the
    /// operations is what they leave behind: the lease ended, the app's demand counted,
    /// the traffic recorded, a withdraw the lease held up let through. Refused, and the
    /// lease released, unless the lease is the app's and `cdo` an id the app could
    /// declare.
    pub(super) fn took(
        &mut self,
        conn: ConnId,
        app: AppId,
        (cdo, lease): (CdoId, TransferId),
        direct: Option<Direct>,
    ) {
        match self.takeable(app, cdo, lease) {
            Ok(_) => {}
            Err(Refusal::UnknownTransfer) => {
                return self.refuse(conn, Op::Demand, Some(cdo), Refusal::UnknownTransfer);
            }
            Err(why) => {
                self.give_back(lease);
                return self.refuse(conn, Op::Demand, Some(cdo), why);
            }
        }
        let Some(l) = self.transfers.end_lease(lease) else {
            return;
        };
        let record = self.leased_demand(app, &l, cdo);
        let direct = direct.filter(|_| !l.inline);
        self.transfer_finished(lease, &record, traffic::Outcome::Done(direct));
        self.source_released(l.from);
    }

    /// The lease `app`'s take of `lease` as `cdo` uses, if it may: `UnknownTransfer` when
    /// the lease is not the app's, why `cdo` may not be declared under the lease's name.
    pub(super) fn takeable(
        &self,
        app: AppId,
        cdo: CdoId,
        lease: TransferId,
    ) -> Result<&Leased, Refusal> {
        let l = (self.transfers.lease(lease).filter(|l| l.holder == app))
            .ok_or(Refusal::UnknownTransfer)?;
        self.declarable(app, cdo, &l.name)?;
        Ok(l)
    }

    /// `app`'s demand served by lease `l` for its CDO `to` (one it keeps, or the id of a
    /// take), counted: the transfer it is.
    fn leased_demand(&mut self, app: AppId, l: &Leased, to: CdoId) -> Transfer {
        if let Some(a) = self.apps.get_mut(&app) {
            a.counters.demanded += 1;
        }
        Transfer {
            from: l.from,
            to,
            started: self.events.now(),
            stream: None,
            completes_demand: true,
            len: l.len,
            route: l.route,
        }
    }

    /// `Release`: `app` gives these leases back (those not its own are ignored: they may
    /// have been abandoned meanwhile). More than [`MAX_RELEASE`] at once is refused.
    pub(super) fn release_leases(&mut self, conn: ConnId, app: AppId, leases: &[TransferId]) {
        if leases.len() > MAX_RELEASE {
            let why = Refusal::Quota(format!(
                "a release of {} leases, more than the {MAX_RELEASE} one message may give back",
                leases.len()
            ));
            return self.refuse(conn, Op::Release, None, why);
        }
        for &lease in leases {
            if self.transfers.lease(lease).is_some_and(|l| l.holder == app) {
                self.give_back(lease);
            }
        }
    }

    /// Ends lease `lease`: its offer is released from it (a withdraw or a leave may
    /// complete).
    pub(super) fn give_back(&mut self, lease: TransferId) {
        if let Some(l) = self.transfers.end_lease(lease) {
            self.source_released(l.from);
        }
    }

    /// Asks the holders of `offer`'s leases to give them back (a withdraw, the provider's
    /// leave or loss); those of memory are abandoned if neither used nor given back within
    /// the lease grace.
    pub(super) fn revoke_leases(&mut self, offer: CdoId) {
        let now = self.events.now();
        let grace = self.policy.lease_grace;
        for (lease, holder) in self.transfers.revoke_on(offer, now, grace) {
            if let Some(conn) = self.apps.get(&holder).map(|a| a.conn) {
                self.out.push(conn, FromPm::Revoke { lease });
            }
        }
    }

    /// Revokes every lease: from now on a subscription hears of demands before they
    /// happen, which a lease's demand could not be.
    pub(super) fn revoke_all_leases(&mut self) {
        for offer in self.transfers.leased_offers() {
            self.revoke_leases(offer);
        }
    }

    /// `holder` is gone: its leases are released.
    pub(super) fn forget_leases_of(&mut self, holder: AppId) {
        for lease in self.transfers.held_by(holder) {
            self.give_back(lease);
        }
    }
}
