//! CDO groups (Maestro's `mstro_group_*`): CDOs offered, demanded and withdrawn together
//! under one name.
//!
//! A producer declares a group, adds CDOs it declared (`group_add`, before seal), may fix
//! the size it expects (`group_size_set`), seals and offers it: every member not sealed yet
//! is sealed with its staged attributes, and all members and the group travel in one burst
//! (`pool`'s `offer_group`, all or nothing). A consumer declares a group of the same name
//! and demands it: the members arrive together, as CDO handles the group owns, which
//! `group_next` hands out in the producer's order (NULL at the end) and `group_dispose`
//! disposes. Members are ordinary CDOs: selectors and events see each of them.
//!
//! Bad uses are [`Status::Invstate`] or [`Status::Invarg`] with what to do: adding after
//! seal, adding a CDO twice or one offered already, sealing an empty group or one whose
//! size differs from the size set, offering before seal, demanding twice, disposing an
//! offered group.

use pool::CallError;
use std::sync::{Arc, Mutex};

use crate::cdo;
use crate::cells::{GroupCell, GroupState, Phase};
use crate::handles::{Cdo, Group};
use crate::instance::{Instance, instance};
use crate::status::{Error, Result, Status};

fn with_group<T>(
    group: Group,
    op: &str,
    f: impl FnOnce(&pool::Client, &mut GroupState) -> Result<T>,
) -> Result<T> {
    let inst = instance()?;
    let cell = inst.groups.get(group.0)?;
    let session = inst.session()?;
    let mut st = cell.lock();
    f(session.client(), &mut st).map_err(|e| e.context(format!("{op} of group {:?}", cell.name)))
}

/// Whether the group's CDO is on offer, as the client core knows it.
fn offered(client: &pool::Client, st: &GroupState) -> bool {
    client.phase(st.id) == Some(pool::CdoPhase::Offered)
}

/// The group's state for messages: offered (the core's word), else its phase here.
fn state(client: &pool::Client, st: &GroupState) -> String {
    if offered(client, st) {
        "offered".into()
    } else {
        format!("{:?}", st.phase).to_lowercase()
    }
}

fn wrong(client: &pool::Client, st: &GroupState, what: &str) -> Error {
    Error::new(
        Status::Invstate,
        format!("the group is {}: {what}", state(client, st)),
    )
}

/// Declares a group named `name` (`mstro_group_declare`).
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invarg`] for an empty or over-long name; joining errors.
pub fn group_declare(name: &str) -> Result<Group> {
    let inst: Arc<Instance> = instance()?;
    if name.is_empty() || name.len() > pool::MAX_NAME {
        return Err(Error::invarg(format!(
            "a group name has 1 to {} bytes, not {}",
            pool::MAX_NAME,
            name.len()
        )));
    }
    let id = inst
        .session()?
        .client()
        .declare(name)
        .map_err(|e| Error::from(e).context(format!("declaring group {name:?}")))?;
    let cell = GroupCell {
        name: name.to_string(),
        state: Mutex::new(GroupState {
            id,
            phase: Phase::Declared,
            members: Vec::new(),
            expected: None,
            cursor: 0,
        }),
    };
    Ok(Group(inst.groups.insert(cell)))
}

/// Adds the CDO `member` (declared by this process, not offered) to the group
/// (`mstro_group_add`), before its seal.
///
/// # Errors
/// [`Status::Invstate`] after seal; [`Status::Invarg`] for a bad handle or a CDO added
/// already.
pub fn group_add(group: Group, member: Cdo) -> Result<()> {
    // A live CDO handle of this instance.
    cdo::cdo_name(member)?;
    with_group(group, "add", |client, st| {
        if st.phase != Phase::Declared {
            return Err(wrong(client, st, "members are added before seal"));
        }
        if st.members.contains(&member) {
            return Err(Error::invarg("that CDO is a member already"));
        }
        st.members.push(member);
        Ok(())
    })
}

/// Says how many members the group will have (`mstro_group_size_set`): its seal then
/// checks it.
///
/// # Errors
/// [`Status::Invstate`] after seal.
pub fn group_size_set(group: Group, size: usize) -> Result<()> {
    with_group(group, "size_set", |client, st| {
        if st.phase != Phase::Declared {
            return Err(wrong(client, st, "the size is set before seal"));
        }
        st.expected = Some(size);
        Ok(())
    })
}

/// The group's size (`mstro_group_size_get`): its members once sealed or demanded; before,
/// the size set, else the members added so far.
///
/// # Errors
/// [`Status::Invarg`] for a bad handle.
pub fn group_size_get(group: Group) -> Result<usize> {
    with_group(group, "size_get", |_, st| {
        Ok(match st.phase {
            Phase::Declared | Phase::Required => st.expected.unwrap_or(st.members.len()),
            _ => st.members.len(),
        })
    })
}

/// Seals the group (`mstro_group_seal`): its members are fixed.
///
/// # Errors
/// [`Status::Invstate`] unless declared; [`Status::Invarg`] for a group without members or
/// whose members differ in number from the size set.
pub fn group_seal(group: Group) -> Result<()> {
    with_group(group, "seal", |client, st| {
        if st.phase != Phase::Declared {
            return Err(wrong(client, st, "a group is sealed once"));
        }
        if st.members.is_empty() {
            return Err(Error::invarg(
                "the group has no members: add CDOs (mstro_group_add) before seal",
            ));
        }
        if let Some(n) = st.expected.filter(|&n| n != st.members.len()) {
            return Err(Error::invarg(format!(
                "{} members were added but the size was set to {n}",
                st.members.len()
            )));
        }
        st.phase = Phase::Sealed;
        Ok(())
    })
}

/// Offers the group (`mstro_group_offer`): members not sealed yet are sealed with their
/// staged attributes, and all of them and the group go in one burst, all or nothing.
///
/// # Errors
/// [`Status::Invstate`] unless sealed, or for a member offered or demanded already;
/// a member's seal or offer errors (then nothing stays offered).
pub fn group_offer(group: Group) -> Result<()> {
    with_group(group, "offer", |client, st| {
        if offered(client, st) {
            return Err(wrong(client, st, "it is offered already"));
        }
        if st.phase != Phase::Sealed {
            return Err(wrong(client, st, "seal it before offer"));
        }
        let parts = st
            .members
            .iter()
            .map(|&m| cdo::group_offer_part(m))
            .collect::<Result<Vec<_>>>()?;
        client.offer_group(st.id, parts)?;
        Ok(())
    })
}

/// Declares the intent to demand the group (`mstro_group_require`): the pool manager may
/// move the group's own record early; its members move at the demand.
///
/// # Errors
/// [`Status::Invstate`] unless declared and without members; connection errors.
pub fn group_require(group: Group) -> Result<()> {
    with_group(group, "require", |client, st| {
        if st.phase != Phase::Declared || !st.members.is_empty() {
            return Err(wrong(
                client,
                st,
                "a consumer's group (declared, no members added) is required",
            ));
        }
        client.require(st.id)?;
        st.phase = Phase::Required;
        Ok(())
    })
}

/// Waits until the group and all its members are here (`mstro_group_demand`); then
/// `group_next` hands out the members.
///
/// # Errors
/// [`Status::Invstate`] when demanded already or the program added members (a producer's
/// group); [`Status::Timeout`], [`Status::Noent`] and connection errors as for a CDO's
/// demand; [`Status::Invarg`] when the CDO of that name is no group.
pub fn group_demand(group: Group) -> Result<()> {
    with_group(group, "demand", |client, st| {
        if !matches!(st.phase, Phase::Declared | Phase::Required) || !st.members.is_empty() {
            return Err(wrong(
                client,
                st,
                "a consumer's group (declared, no members added) is demanded once",
            ));
        }
        let (members, _) = client.demand_group(st.id).map_err(|e| match e {
            pool::ClientError::Call(CallError::Protocol(why)) => Error::invarg(why),
            other => Error::from(other),
        })?;
        st.members = members
            .into_iter()
            .map(|m| cdo::adopt_demanded(&m.name, m.cdo, m.data, m.attributes))
            .collect::<Result<Vec<_>>>()?;
        st.phase = Phase::Demanded;
        Ok(())
    })
}

/// The next member (`mstro_group_next`), in the producer's order; `None` after the last
/// (and from the first again at the next call).
///
/// # Errors
/// [`Status::Invstate`] for a consumer's group not demanded yet.
pub fn group_next(group: Group) -> Result<Option<Cdo>> {
    with_group(group, "next", |client, st| {
        if st.members.is_empty() && matches!(st.phase, Phase::Declared | Phase::Required) {
            return Err(wrong(
                client,
                st,
                "demand it first; then its members are here",
            ));
        }
        match st.members.get(st.cursor).copied() {
            Some(m) => {
                st.cursor += 1;
                Ok(Some(m))
            }
            None => {
                st.cursor = 0;
                Ok(None)
            }
        }
    })
}

/// Takes back an offered group and its members (`mstro_group_withdraw`).
///
/// # Errors
/// [`Status::Invstate`] unless offered; connection errors.
pub fn group_withdraw(group: Group) -> Result<()> {
    with_group(group, "withdraw", |client, st| {
        if !offered(client, st) {
            return Err(wrong(client, st, "only an offered group is withdrawn"));
        }
        let ids = st
            .members
            .iter()
            .map(|&m| cdo::cdo_id(m))
            .collect::<Result<Vec<_>>>()?;
        client.withdraw_group(st.id, &ids)?;
        Ok(())
    })
}

/// Cancels a group's require (`mstro_group_retract`).
///
/// # Errors
/// [`Status::Invstate`] unless required; connection errors.
pub fn group_retract(group: Group) -> Result<()> {
    with_group(group, "retract", |client, st| {
        if st.phase != Phase::Required {
            return Err(wrong(client, st, "only a required group is retracted"));
        }
        client.retract(st.id)?;
        st.phase = Phase::Declared;
        Ok(())
    })
}

/// The group's members now (the producer's added CDOs, or those its demand brought).
///
/// # Errors
/// [`Status::Invarg`] for a bad handle.
pub fn group_members(group: Group) -> Result<Vec<Cdo>> {
    with_group(group, "members", |_, st| Ok(st.members.clone()))
}

/// Forgets the group (`mstro_group_dispose`), and the members its demand brought (a
/// producer's members stay the program's); returns the member handles it disposed.
///
/// # Errors
/// [`Status::Invstate`] while offered (withdraw first); connection errors.
pub fn group_dispose(group: Group) -> Result<Vec<Cdo>> {
    let inst = instance()?;
    let owned = with_group(group, "dispose", |client, st| {
        if offered(client, st) {
            return Err(wrong(client, st, "withdraw it before dispose"));
        }
        client.dispose(st.id)?;
        Ok(if st.phase == Phase::Demanded {
            std::mem::take(&mut st.members)
        } else {
            Vec::new()
        })
    })?;
    for &m in &owned {
        cdo::cdo_dispose(m)?;
    }
    inst.groups.remove(group.0)?;
    Ok(owned)
}
