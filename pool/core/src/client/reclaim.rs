//! What an app that lost its pool manager tells the next one of the workflow, in its grace
//! period (see docs/developers/failover.md): who it was ([`ClientCore::reclaim`], for the
//! JOIN) and the operations that rebuild what it holds ([`ClientCore::replay`]), built
//! from the core's own state: the pool's real state lives in its apps.

use super::{ClientCore, Driver};
use crate::proto::{Op, Reclaim, ToPm};

impl<T: Driver> ClientCore<T> {
    /// What this app's JOIN names to the next manager when its own is gone: its app id
    /// and its manager's generation. `None` before the welcome of a first manager.
    pub fn reclaim(&self) -> Option<Reclaim> {
        match self.joined {
            Some(Ok((app, generation))) if app != 0 => Some(Reclaim { app, generation }),
            _ => None,
        }
    }

    /// The operations that rebuild what this app holds with a manager in its grace
    /// period: its subscriptions, asked again (each keeps its queue and gets its new id
    /// from the new manager's answer); then CDO by CDO in id order: its declare; the seal
    /// it asked for, or its seal and offer (where consumers read it, as the offer said)
    /// while offered, and the withdraw it waits for; the require or demand that waits for
    /// its bytes. What the old manager had confirmed and what it had not answered yet are
    /// replayed alike: the new one answers the calls still waiting.
    pub fn replay(&mut self) -> Vec<ToPm> {
        let mut out = self.subs.replay();
        let mut ids: Vec<_> = self.cdos.keys().copied().collect();
        ids.sort_unstable();
        out.reserve(ids.len());
        for cdo in ids {
            let m = &self.cdos[&cdo];
            out.push(ToPm::Declare {
                cdo,
                name: m.name.to_string(),
            });
            if let Some(attributes) = &m.sealed {
                out.push(ToPm::Seal {
                    cdo,
                    attributes: attributes.clone(),
                });
            }
            if let Some(o) = &m.offered {
                out.push(ToPm::Offer {
                    cdo,
                    region: o.region,
                    extras: o.extras.clone(),
                });
                if o.withdrawing() {
                    out.push(ToPm::Withdraw { cdo, keep: None });
                }
            }
            match m.wanted {
                Some(Op::Require) => out.push(ToPm::Require { cdo }),
                Some(Op::Demand) => out.push(ToPm::Demand { cdo }),
                _ => {}
            }
        }
        out
    }
}
