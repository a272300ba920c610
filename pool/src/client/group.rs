//! CDO groups (Maestro's `mstro_group_*`): a named set of CDOs offered, demanded and
//! withdrawn together.
//!
//! A group travels as a CDO of its own, named as the group, of 0 bytes, with
//! [`attr::IS_GROUP`] set and [`attr::GROUP_MEMBERS`] listing its members' names (a JSON
//! array); its members are ordinary CDOs. So events and selectors see every member as they
//! see any CDO, a group's offer is an event like any other, and the pool manager needs
//! nothing more than it has.
//!
//! A producer's [`AsyncClient::offer_group`] sends every member's seal and offer, then the
//! group's, in one burst (the pool manager answers them in one), and is all or nothing: if
//! one is refused, those offered are withdrawn. A consumer's [`AsyncClient::demand_group`]
//! sends one message: the pool manager declares the members for it, names them and tickets
//! each, a slice at a time while the consumer copies the slices before (small ones come
//! with their tickets, members on the same host are copied straight out of the provider's
//! memory, many at once), all in flight at once; the call wakes once, when the last member
//! is here, and takes them all in one step.

use crate::CallError;
use fabric::Buffer;
use futures::future::join_all;

use crate::attr::{self, Attributes};
use crate::proto::{CdoId, Op, Refusal};
use pool_core::client::Route;

use super::{AsyncClient, CdoData, ClientError, Result};

/// A member of a demanded group: its CDO in this app (declared by
/// [`AsyncClient::demand_group`]; dispose it when done), name, bytes and attributes.
pub type GroupMember = pool_core::client::GroupMember<CdoData>;

impl AsyncClient {
    /// Offers `members` (CDOs this app declared: each with the attributes to seal it with,
    /// or `None` when it is sealed already, and its bytes) and then the group CDO `group`
    /// (declared with the group's name) listing them in this order, in one burst. All or
    /// nothing: when one offer is refused, those that went through are withdrawn.
    ///
    /// In a sharded pool whose members live at other shards than the group, the members
    /// are offered first and the group once they are: a consumer that hears of the group
    /// finds every member offered, as with one manager.
    ///
    /// # Errors
    /// [`CallError::Refused`](crate::CallError::Refused) with `UnknownCdo` for a member this app did not declare; the first
    /// refusal of a member or of the group; registration and connection errors.
    pub async fn offer_group(
        &self,
        group: CdoId,
        members: Vec<(CdoId, Option<Attributes>, Buffer)>,
    ) -> Result<()> {
        let names = {
            let core = self.shared.core();
            members
                .iter()
                .map(|(cdo, ..)| {
                    core.name(*cdo)
                        .map(ToString::to_string)
                        .ok_or(ClientError::Call(CallError::Refused {
                            op: Op::Offer,
                            why: Refusal::UnknownCdo,
                        }))
                })
                .collect::<Result<Vec<String>>>()?
        };
        let one_home = self.shared.core().one_home(group, &names);
        let group_attributes = attr::group_attributes(&names);
        let ids: Vec<CdoId> = members.iter().map(|(cdo, ..)| *cdo).collect();
        let offers = members
            .into_iter()
            .map(|(cdo, attributes, data)| async move {
                match attributes {
                    Some(a) => self.seal_and_offer(cdo, a, data).await,
                    None => self.offer(cdo, data).await,
                }
            });
        // The members' messages go first (each offer sends when first polled), then the
        // group's: the PM handles them in order, so a consumer that sees the group finds
        // every member offered.
        let group_offer = async {
            let buffer = Buffer::new(0)?;
            self.seal_and_offer(group, group_attributes, buffer).await
        };
        // The group's offer: `None` when it was not made (a member's failed first).
        let (results, group_result) = if one_home {
            let (results, group) = tokio::join!(join_all(offers), group_offer);
            (results, Some(group))
        } else {
            // Members at other shards than the group: on other connections, so the
            // group waits for their offers.
            let results = join_all(offers).await;
            let all = results.iter().all(Result::is_ok);
            (results, if all { Some(group_offer.await) } else { None })
        };
        if results.iter().all(Result::is_ok) && matches!(group_result, Some(Ok(()))) {
            return Ok(());
        }
        // All or nothing: take back what went through.
        let offered = results
            .iter()
            .zip(&ids)
            .filter(|(r, _)| r.is_ok())
            .map(|(_, &cdo)| cdo)
            .chain(matches!(group_result, Some(Ok(()))).then_some(group));
        for r in join_all(offered.map(|cdo| self.withdraw(cdo))).await {
            if let Err(e) = r {
                tracing::warn!("withdrawing part of a group whose offer failed: {e}");
            }
        }
        results
            .into_iter()
            .chain(group_result)
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// Demands the group CDO `group` (declared with the group's name) and all its members
    /// in one message ([`crate::proto::ToPm::DemandGroup`]): the PM declares the members
    /// with ids this call reserves ([`GROUP_IDS`](crate::GROUP_IDS) of them), names them, and tickets each;
    /// returns them in the order the producer listed them, and the group's attributes.
    ///
    /// # Errors
    /// As [`AsyncClient::demand`] for the group and each member (the first error; members
    /// that arrived are disposed); [`CallError::Protocol`](crate::CallError::Protocol) when the CDO of that name is
    /// no group; `Quota` for a group of more than [`GROUP_IDS`](crate::GROUP_IDS) members.
    pub async fn demand_group(&self, group: CdoId) -> Result<(Vec<GroupMember>, Attributes)> {
        let shared = &self.shared;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let now = std::time::Instant::now();
        let (shard, (_, call)) = shared.with_core(|c| {
            let demanded = c.demand_group(now, group, tx)?;
            Ok((c.shard_of(Route::Cdo(group)), demanded))
        })?;
        // Answered once every member is here (or one failed): one wake-up for the group.
        let answered = super::answer(shared, (Op::Demand, group), Some((shard, call)), rx).await;
        let here = shared.core().take_group(group);
        if let Err(e) = answered {
            // Whatever of the group arrived (or is on its way) is this app's to dispose.
            if let Some(here) = here {
                for r in join_all(here.ids.into_iter().map(|cdo| self.dispose(cdo))).await {
                    if let Err(e) = r {
                        tracing::debug!("disposing a member of a failed group: {e}");
                    }
                }
            }
            return Err(match e {
                ClientError::Call(CallError::Refused {
                    why: Refusal::NotAllowed(why),
                    ..
                }) => ClientError::Call(CallError::Protocol(why)),
                e => e,
            });
        }
        let here = here.ok_or(ClientError::Call(CallError::Protocol(
            "the pool manager answered the group's demand without its members".into(),
        )))?;
        if here.members.len() != here.ids.len() {
            return Err(ClientError::Call(CallError::Protocol(format!(
                "the group's demand was answered with {} of its {} members here",
                here.members.len(),
                here.ids.len()
            ))));
        }
        Ok((here.members, here.attributes))
    }

    /// Withdraws `members` and the group CDO `group` together (the group first, so no
    /// consumer starts on it meanwhile); returns the members' buffers in order.
    ///
    /// # Errors
    /// The first refusal (`WrongState` unless offered); connection errors.
    pub async fn withdraw_group(&self, group: CdoId, members: &[CdoId]) -> Result<Vec<Buffer>> {
        self.withdraw(group).await?;
        join_all(members.iter().map(|&cdo| self.withdraw(cdo)))
            .await
            .into_iter()
            .collect()
    }
}
