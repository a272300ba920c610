//! The CDO table's entries and their state machine: what each state allows, and the
//! operations apps perform on their CDOs (declare, seal, offer, require/demand, retract,
//! withdraw, dispose).

use std::collections::BTreeSet;
use std::sync::Arc;

use fabric_types::RemoteRegion;

use super::store::IdStore;
use super::{ConnId, GiveBack, HashMap, Manager, policy};
use crate::attr::{self, AttrValue, Attributes};
use crate::events::EventKind;
use crate::proto::{self, AppId, CdoId, FromPm, InlineBytes, OfferExtras, Op, Refusal, TransferId};

/// CDO ids by name (offers, waiting consumers), in the order they came: usually one or a
/// few per name, kept as a short list; a name with many (an app may demand one name
/// 200,000 times) switches to an ordered map, so that adding and removing one stays
/// O(log n) instead of a scan of the list. A name's entry goes when it empties, so the
/// index never outgrows the live CDOs.
#[derive(Debug, Default)]
struct NameIndex(HashMap<Arc<str>, Ids>);

/// Most ids a name keeps as a plain list.
const FEW: usize = 32;

/// The ids of one name, in arrival order.
/// A name's ids: most names have one (no allocation), some a few, and a name many CDOs
/// share (the same field offered by every member of an ensemble) an ordered index.
#[derive(Debug)]
enum Ids {
    One(CdoId),
    Few(smallvec::SmallVec<[CdoId; 4]>),
    Many(Box<ManyIds>),
}

/// Many ids of one name: by arrival number, and each id's number.
#[derive(Debug, Default)]
struct ManyIds {
    order: std::collections::BTreeMap<u64, CdoId>,
    number: HashMap<CdoId, u64>,
    next: u64,
}

impl ManyIds {
    fn push(&mut self, cdo: CdoId) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.number.entry(cdo) {
            e.insert(self.next);
            self.order.insert(self.next, cdo);
            self.next += 1;
        }
    }
}

impl Ids {
    fn insert(&mut self, cdo: CdoId) {
        match self {
            Ids::One(one) if *one == cdo => {}
            // An offer and a consumer's CDO of its name, mostly: no allocation.
            Ids::One(one) => *self = Ids::Few(smallvec::smallvec![*one, cdo]),
            Ids::Few(ids) if ids.contains(&cdo) => {}
            Ids::Few(ids) if ids.len() < FEW => ids.push(cdo),
            Ids::Few(ids) => {
                let mut many = ManyIds::default();
                for &id in ids.iter() {
                    many.push(id);
                }
                many.push(cdo);
                *self = Ids::Many(Box::new(many));
            }
            Ids::Many(many) => many.push(cdo),
        }
    }

    /// Removes `cdo`; true when none is left.
    fn remove(&mut self, cdo: CdoId) -> bool {
        match self {
            Ids::One(one) => *one == cdo,
            Ids::Few(ids) => {
                if let Some(i) = ids.iter().position(|&c| c == cdo) {
                    ids.remove(i);
                }
                ids.is_empty()
            }
            Ids::Many(many) => {
                if let Some(n) = many.number.remove(&cdo) {
                    many.order.remove(&n);
                }
                many.order.is_empty()
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Ids::One(_) => 1,
            Ids::Few(ids) => ids.len(),
            Ids::Many(many) => many.order.len(),
        }
    }

    /// The ids in arrival order, with no allocation (a look at a name's offers is on
    /// every demand's path).
    fn iter(&self) -> IdsIter<'_> {
        match self {
            Ids::One(one) => IdsIter::Few(std::slice::from_ref(one).iter()),
            Ids::Few(ids) => IdsIter::Few(ids.iter()),
            Ids::Many(many) => IdsIter::Many(many.order.values()),
        }
    }
}

/// [`Ids::iter`].
enum IdsIter<'a> {
    Few(std::slice::Iter<'a, CdoId>),
    Many(std::collections::btree_map::Values<'a, u64, CdoId>),
}

impl Iterator for IdsIter<'_> {
    type Item = CdoId;

    fn next(&mut self) -> Option<CdoId> {
        match self {
            IdsIter::Few(ids) => ids.next().copied(),
            IdsIter::Many(ids) => ids.next().copied(),
        }
    }
}

/// The ids of a name as [`CdoTable::offers`] and [`CdoTable::waiting`] give them: in
/// arrival order, none for an unknown name.
#[derive(Clone, Copy)]
pub(super) struct NameIds<'a>(Option<&'a Ids>);

impl<'a> NameIds<'a> {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(super) fn len(&self) -> usize {
        self.0.map_or(0, Ids::len)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = CdoId> + 'a {
        self.0.into_iter().flat_map(Ids::iter)
    }

    pub(super) fn to_vec(self) -> Vec<CdoId> {
        self.iter().collect()
    }
}

impl NameIndex {
    fn insert(&mut self, name: &Arc<str>, cdo: CdoId) {
        // One look at the table (a clone of the name's `Arc` costs no allocation).
        match self.0.entry(Arc::clone(name)) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().insert(cdo),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Ids::One(cdo));
            }
        }
    }

    fn remove(&mut self, name: &str, cdo: CdoId) {
        if let Some(ids) = self.0.get_mut(name)
            && ids.remove(cdo)
        {
            self.0.remove(name);
            self.0.give_back();
        }
    }

    fn get(&self, name: &str) -> NameIds<'_> {
        NameIds(self.0.get(name))
    }
}

/// The CDO table: every live CDO by id, with the two name indexes the manager matches by
/// (offers a consumer may be ticketed from, consumers waiting for a ticket) and the count
/// of CDOs in each state. It keeps them in step: a CDO it removes leaves both indexes, and
/// they give memory back as they empty; every change of a CDO goes through [`CdoMut`],
/// which moves it from one state's count to the other's, so observers get the counts
/// without a walk over a million CDOs.
#[derive(Debug, Default)]
pub(super) struct CdoTable {
    cdos: IdStore<Cdo>,
    offers: NameIndex,
    waiting: NameIndex,
    counts: [u64; State::KINDS],
}

/// A CDO of the table lent for a change; its state's count follows the change when the
/// loan ends.
pub(super) struct CdoMut<'a> {
    cdo: &'a mut Cdo,
    counts: &'a mut [u64; State::KINDS],
    before: usize,
}

impl std::ops::Deref for CdoMut<'_> {
    type Target = Cdo;
    fn deref(&self) -> &Cdo {
        self.cdo
    }
}

impl std::ops::DerefMut for CdoMut<'_> {
    fn deref_mut(&mut self) -> &mut Cdo {
        self.cdo
    }
}

impl Drop for CdoMut<'_> {
    fn drop(&mut self) {
        let after = self.cdo.state.kind();
        if after != self.before {
            self.counts[self.before] -= 1;
            self.counts[after] += 1;
        }
    }
}

impl CdoTable {
    pub(super) fn get(&self, id: &CdoId) -> Option<&Cdo> {
        self.cdos.get(*id)
    }

    pub(super) fn get_mut(&mut self, id: &CdoId) -> Option<CdoMut<'_>> {
        let cdo = self.cdos.get_mut(*id)?;
        let before = cdo.state.kind();
        Some(CdoMut {
            cdo,
            counts: &mut self.counts,
            before,
        })
    }

    pub(super) fn contains_key(&self, id: &CdoId) -> bool {
        self.cdos.contains(*id)
    }

    /// Inserts the CDO `cdo` makes as `id`, unless `id` is in use (one look at the table
    /// for both); whether it did.
    pub(super) fn insert_new(&mut self, id: CdoId, cdo: impl FnOnce() -> Cdo) -> bool {
        let Some(c) = self.cdos.insert_new(id, cdo) else {
            return false;
        };
        self.counts[c.state.kind()] += 1;
        true
    }

    /// Sets `id`'s CDO to `cdo` (replacing any).
    pub(super) fn insert(&mut self, id: CdoId, cdo: Cdo) {
        let kind = cdo.state.kind();
        if let Some(old) = self.cdos.insert(id, cdo) {
            self.counts[old.state.kind()] -= 1;
        }
        self.counts[kind] += 1;
    }

    /// Removes `id`, from the indexes and counts too.
    pub(super) fn remove(&mut self, id: &CdoId) -> Option<Cdo> {
        let c = self.cdos.remove(*id)?;
        self.counts[c.state.kind()] -= 1;
        // Only an offer is ticketed from, and only a consumer waits: a consumer's CDO
        // leaves the offers of its name alone (a look at them is a cache miss per
        // dispose, the name's offer being cold by then).
        match c.state {
            State::Offered(_) | State::Withdrawing(_) => self.offers.remove(&c.name, *id),
            _ => debug_assert!(!self.offers.get(&c.name).iter().any(|x| x == *id)),
        }
        match c.state {
            State::Required(_) => self.waiting.remove(&c.name, *id),
            _ => debug_assert!(!self.waiting.get(&c.name).iter().any(|x| x == *id)),
        }
        Some(c)
    }

    /// Live CDOs by state name, every state (0 included: a series that vanishes at zero
    /// breaks a monitor's graph).
    pub(super) fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        State::NAMES
            .iter()
            .zip(self.counts)
            .map(|(name, n)| (*name, n))
    }

    /// Gives memory back once many CDOs went (see [`GiveBack`]).
    pub(super) fn give_back(&mut self) {
        self.cdos.give_back();
    }

    pub(super) fn len(&self) -> usize {
        self.cdos.len()
    }

    /// The CDOs `app` declared (those a group's demand declared for it too).
    pub(super) fn ids_of(&self, app: AppId) -> impl Iterator<Item = CdoId> + '_ {
        self.cdos.ids_of(app)
    }

    /// How many CDOs `app` declared (see [`CdoTable::ids_of`]).
    pub(super) fn count_of(&self, app: AppId) -> usize {
        self.cdos.app_len(app)
    }

    /// Every CDO with its id, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (CdoId, &Cdo)> {
        self.cdos.iter()
    }

    /// The offers of `name` a consumer may be ticketed from.
    pub(super) fn offers(&self, name: &str) -> NameIds<'_> {
        self.offers.get(name)
    }

    /// `id` (named `name`) may be ticketed from now on.
    pub(super) fn offered(&mut self, name: &Arc<str>, id: CdoId) {
        self.offers.insert(name, id);
    }

    /// `id` (named `name`) is no longer ticketed from (it is being withdrawn).
    pub(super) fn not_offered(&mut self, name: &str, id: CdoId) {
        self.offers.remove(name, id);
    }

    /// The consumers of `name` waiting for a ticket.
    pub(super) fn waiting(&self, name: &str) -> NameIds<'_> {
        self.waiting.get(name)
    }

    /// The names consumers wait for a ticket of.
    pub(super) fn waited_names(&self) -> Vec<Arc<str>> {
        self.waiting.0.keys().cloned().collect()
    }

    /// Consumer `id` (of `name`) waits for a ticket.
    pub(super) fn wait(&mut self, name: &Arc<str>, id: CdoId) {
        self.waiting.insert(name, id);
    }

    /// Consumer `id` (of `name`) no longer waits (ticketed, retracted, refused).
    pub(super) fn stop_waiting(&mut self, name: &str, id: CdoId) {
        self.waiting.remove(name, id);
    }
}

/// Where a CDO is in its life.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum State {
    Declared,
    Sealed,
    Offered(RemoteRegion),
    Withdrawing(RemoteRegion),
    Withdrawn,
    Required(Want),
}

/// A consumer's wish.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Want {
    pub(super) demanded: bool,
    pub(super) transfer: Option<TransferId>,
    pub(super) local: bool,
    /// Offers whose transfer failed; not ticketed again.
    pub(super) failed: Failed,
    /// A group's demand: the ids reserved for its members (first, how many), out of line
    /// as few CDOs are groups.
    pub(super) group: Option<Box<(CdoId, u32)>>,
    /// A group's member (declared by the group's demand): it moves in bulk with the others
    /// (see [`super::plan::GROUP_INLINE_MAX`]).
    pub(super) member: bool,
}

/// The offers whose transfer to a consumer failed: none for almost every consumer, so the
/// set is kept out of line and a CDO's entry in the table stays small.
#[derive(Clone, Debug, Default, PartialEq)]
#[expect(
    clippy::box_collection,
    reason = "one pointer in every consumer's entry instead of a set's three words"
)]
pub(super) struct Failed(Option<Box<BTreeSet<CdoId>>>);

impl Failed {
    pub(super) fn contains(&self, offer: &CdoId) -> bool {
        self.0.as_ref().is_some_and(|f| f.contains(offer))
    }

    pub(super) fn insert(&mut self, offer: CdoId) {
        self.0.get_or_insert_default().insert(offer);
    }
}

impl State {
    /// Whether `op` is allowed on a CDO in this state (the single place that decides,
    /// used before an operation's before-event and by the operation itself).
    pub(super) fn allows(&self, op: Op) -> bool {
        match (op, self) {
            (Op::Seal, State::Declared) => true,
            (Op::Offer, State::Sealed) => true,
            (Op::Require, State::Declared) => true,
            (Op::Demand, State::Declared) => true,
            (Op::Demand, State::Required(w)) => !w.demanded,
            (Op::Retract, State::Required(w)) => w.transfer.is_none(),
            (Op::Withdraw, State::Offered(_)) => true,
            (Op::Dispose, State::Offered(_) | State::Withdrawing(_)) => false,
            (Op::Dispose, State::Required(w)) => w.transfer.is_none(),
            (Op::Dispose, _) => true,
            _ => false,
        }
    }

    /// How many kinds [`State::kind`] tells apart.
    pub(super) const KINDS: usize = 8;

    /// Each kind's name, as refusals and observers give it.
    const NAMES: [&'static str; State::KINDS] = [
        "declared",
        "sealed",
        "offered",
        "being withdrawn",
        "withdrawn",
        "local",
        "in transfer",
        "required",
    ];

    /// The kind of state, an index of [`State::NAMES`] (what observers count).
    pub(super) fn kind(&self) -> usize {
        match self {
            State::Declared => 0,
            State::Sealed => 1,
            State::Offered(_) => 2,
            State::Withdrawing(_) => 3,
            State::Withdrawn => 4,
            State::Required(w) if w.local => 5,
            State::Required(w) if w.transfer.is_some() => 6,
            State::Required(_) => 7,
        }
    }

    /// The state as refusals and observers name it.
    pub(super) fn name(&self) -> &'static str {
        State::NAMES[self.kind()]
    }
}

#[derive(Debug)]
pub(super) struct Cdo {
    /// The app that declared it (an [`AppId`] fits 32 bits: at most [`proto::MAX_APP`]);
    /// beside `born`, the two take the 8 bytes one `AppId` would.
    pub(super) owner: u32,
    /// When it was declared, in seconds since the manager's clock origin (for observers).
    pub(super) born: u32,
    pub(super) name: Arc<str>,
    pub(super) attributes: Attributes,
    pub(super) state: State,
    /// While offered: its bytes as registered with each of the app's alternate endpoints,
    /// and the memory file holding them.
    pub(super) extras: OfferExtras,
}

impl Cdo {
    /// The app that declared it.
    pub(super) fn app(&self) -> AppId {
        AppId::from(self.owner)
    }
}

// The app id of a CDO is kept in 32 bits.
const _: () = assert!(proto::MAX_APP <= u32::MAX as u64);

impl Manager {
    /// Whether `app` may declare `cdo` named `name`: a good name, an id of its own range
    /// not in use.
    pub(super) fn declarable(&self, app: AppId, cdo: CdoId, name: &str) -> Result<(), Refusal> {
        Self::nameable(app, cdo, name)?;
        if self.cdos.contains_key(&cdo) {
            return Err(Refusal::BadCdoId);
        }
        Ok(())
    }

    /// [`Manager::declarable`] but for the id in use, which [`CdoTable::insert_new`]
    /// finds in the same look at the table as it inserts.
    fn nameable(app: AppId, cdo: CdoId, name: &str) -> Result<(), Refusal> {
        proto::check_name(name)?;
        if !proto::cdo_ids(app).contains(&cdo) {
            return Err(Refusal::BadCdoId);
        }
        Ok(())
    }

    /// Now, in seconds since the manager's clock origin (a CDO's `born`).
    pub(super) fn seconds_since_origin(&self) -> u32 {
        let since = self
            .events
            .now()
            .saturating_duration_since(self.events.clock().origin);
        u32::try_from(since.as_secs()).unwrap_or(u32::MAX)
    }

    pub(super) fn declare(&mut self, conn: ConnId, app: AppId, cdo: CdoId, name: String) {
        let cost = policy::CDO_COST + name.len();
        if let Err(why) = Self::nameable(app, cdo, &name).and_then(|()| self.affordable(app, cost))
        {
            return self.refuse(conn, Op::Declare, Some(cdo), why);
        }
        let born = self.seconds_since_origin();
        let declared = self.cdos.insert_new(cdo, || Cdo {
            owner: u32::try_from(app).unwrap_or(u32::MAX),
            name: name.into(),
            attributes: Attributes::new(),
            state: State::Declared,
            extras: OfferExtras::default(),
            born,
        });
        if !declared {
            return self.refuse(conn, Op::Declare, Some(cdo), Refusal::BadCdoId);
        }
        self.account(app, cost, false);
        if let Some(a) = self.apps.get_mut(&app) {
            // Counted from the start of this shard's part of the app's ids (the whole
            // range, in a pool of one manager), where its listing starts.
            let part = self.shard.cdo_ids(app);
            a.last_declared = a.last_declared.max(cdo.saturating_sub(*part.start()) + 1);
        }
        self.op_succeeded(Op::Declare, app, cdo, None);
    }

    /// Runs `f` on `cdo` if `app` owns it and its state allows `op` (else refuses), then
    /// raises the operation's event.
    pub(super) fn with_cdo(
        &mut self,
        conn: ConnId,
        app: AppId,
        op: Op,
        cdo: CdoId,
        f: impl FnOnce(&mut Self, CdoId),
    ) {
        let Some(c) = self.cdos.get(&cdo).filter(|c| c.app() == app) else {
            return self.refuse(conn, op, Some(cdo), Refusal::UnknownCdo);
        };
        if !c.state.allows(op) {
            let why = Self::wrong(op, &c.state);
            return self.refuse(conn, op, Some(cdo), why);
        }
        // A disposed CDO is gone afterwards: its event shows it as it was.
        let heard = op == Op::Dispose && self.events.wants(EventKind::Dispose, false);
        let gone = heard.then(|| self.event_subject(cdo)).flatten();
        f(self, cdo);
        self.op_succeeded(op, app, cdo, gone);
    }

    pub(super) fn cdo(&mut self, cdo: CdoId) -> CdoMut<'_> {
        self.cdos
            .get_mut(&cdo)
            .unwrap_or_else(|| unreachable!("checked by with_cdo"))
    }

    pub(super) fn wrong(op: Op, state: &State) -> Refusal {
        Refusal::WrongState {
            op,
            state: state.name().to_string(),
        }
    }

    pub(super) fn seal(&mut self, cdo: CdoId, attributes: Attributes) {
        let mut c = self.cdo(cdo);
        // The built-in name, size and provider are derived (see `published`), not stored.
        c.attributes = attributes;
        attr::strip_derived(&mut c.attributes);
        c.state = State::Sealed;
        let (app, bytes) = (c.app(), policy::attribute_bytes(&c.attributes));
        drop(c);
        self.account(app, bytes, false);
    }

    /// `SealOffer` without subscribers: seal and offer, one answer (as the offer).
    pub(super) fn seal_offer(
        &mut self,
        conn: ConnId,
        app: AppId,
        cdo: CdoId,
        attributes: Attributes,
        regions: (RemoteRegion, OfferExtras),
    ) {
        match self.cdos.get(&cdo).filter(|c| c.app() == app) {
            None => self.refuse(conn, Op::Offer, Some(cdo), Refusal::UnknownCdo),
            Some(c) if !c.state.allows(Op::Seal) => {
                let why = Self::wrong(Op::Offer, &c.state);
                self.refuse(conn, Op::Offer, Some(cdo), why);
            }
            Some(_) => {
                self.seal(cdo, attributes);
                self.with_cdo(conn, app, Op::Offer, cdo, |m, c| m.offer(conn, c, regions));
            }
        }
    }

    /// `regions`: as registered with the app's first endpoint, and the rest. Bytes the
    /// offer carries are kept while the PM's budget and the app's quota allow (and they
    /// are the offer's: as long as its region); otherwise dropped, the app told so
    /// ([`FromPm::BytesDropped`]), and the CDO moves as any other.
    pub(super) fn offer(
        &mut self,
        conn: ConnId,
        cdo: CdoId,
        (region, mut extras): (RemoteRegion, OfferExtras),
    ) {
        if let Some(len) = extras.inline().map(InlineBytes::len) {
            let app = self.cdo(cdo).app();
            let app_held = self.apps.get(&app).map_or(0, |a| a.inline_held);
            let kept = len as u64 == region.len
                && len <= policy::MAX_INLINE_OFFER
                && app_held.saturating_add(len) <= policy::inline_share(&self.policy)
                && self.inline_held.saturating_add(len) <= self.policy.max_inline_bytes
                && self.affordable(app, len).is_ok();
            if kept {
                self.inline_held += len;
                if let Some(a) = self.apps.get_mut(&app) {
                    a.inline_held += len;
                }
                self.account(app, len, false);
            } else {
                extras.take_inline();
                // So that it stops sending bytes that would be dropped too.
                self.out.push(conn, FromPm::BytesDropped { cdo });
            }
        }
        let mut c = self.cdo(cdo);
        c.state = State::Offered(region);
        c.extras = extras;
        let (app, name) = (c.app(), Arc::clone(&c.name));
        drop(c);
        if let Some(a) = self.apps.get_mut(&app) {
            a.counters.offered += 1;
        }
        self.cdos.offered(&name, cdo);
        self.done(conn, Op::Offer, cdo);
        if !self.cdos.waiting(&name).is_empty() {
            for w in self.cdos.waiting(&name).to_vec() {
                self.ticket(w);
            }
        }
    }

    pub(super) fn require(&mut self, conn: ConnId, cdo: CdoId, demand: bool) {
        let app = self.cdo(cdo).app();
        if let Some(a) = self.apps.get_mut(&app).filter(|_| demand) {
            a.counters.demanded += 1;
        }
        let mut c = self.cdo(cdo);
        match &mut c.state {
            State::Declared => {
                c.state = State::Required(Want {
                    demanded: demand,
                    ..Want::default()
                })
            }
            State::Required(w) => w.demanded = true,
            _ => return, // refused by `with_cdo`
        }
        let (local, name) = match &c.state {
            State::Required(w) => (w.local, Arc::clone(&c.name)),
            _ => unreachable!("just set"),
        };
        drop(c);
        if !demand {
            self.done(conn, Op::Require, cdo);
        }
        if local {
            self.out.push(conn, FromPm::Ready { cdo });
        } else if matches!(&self.cdo(cdo).state, State::Required(w) if w.transfer.is_none()) {
            self.cdos.wait(&name, cdo);
            self.ticket(cdo);
        }
    }

    /// An offer's attributes as consumers see them: the sealed ones plus the built-in name
    /// and size (derived here rather than stored per CDO, to keep the PM small).
    pub(super) fn published(&self, offer: CdoId) -> Attributes {
        let Some(c) = self.cdos.get(&offer) else {
            return Attributes::new();
        };
        let mut a = c.attributes.clone();
        a.insert(attr::NAME.into(), AttrValue::Str(String::from(&*c.name)));
        if let State::Offered(l) | State::Withdrawing(l) = &c.state {
            a.insert(attr::LOCAL_SIZE.into(), AttrValue::Uint(l.len));
        }
        a
    }

    pub(super) fn retract(&mut self, conn: ConnId, cdo: CdoId) {
        let mut c = self.cdo(cdo);
        let name = Arc::clone(&c.name);
        c.state = State::Declared;
        drop(c);
        self.cdos.stop_waiting(&name, cdo);
        self.done(conn, Op::Retract, cdo);
        self.retry_byes();
    }

    pub(super) fn withdraw(&mut self, _conn: ConnId, cdo: CdoId) {
        let mut c = self.cdo(cdo);
        let State::Offered(region) = c.state else {
            return; // refused by `with_cdo`
        };
        c.state = State::Withdrawing(region);
        let (name, app) = (Arc::clone(&c.name), c.app());
        let freed = c.extras.take_inline().map_or(0, |b| b.len());
        drop(c);
        self.inline_held = self.inline_held.saturating_sub(freed);
        if let Some(a) = self.apps.get_mut(&app) {
            a.inline_held = a.inline_held.saturating_sub(freed);
        }
        self.account(app, freed, true);
        self.cdos.not_offered(&name, cdo);
        self.pin_transfers_from(|from| from == cdo);
        self.revoke_leases(cdo);
        self.source_released(cdo);
    }

    pub(super) fn dispose(&mut self, cdo: CdoId) {
        let c = self.cdo(cdo);
        let (app, bytes) = (c.app(), Self::cost(&c));
        drop(c);
        self.account(app, bytes, true);
        self.cdos.remove(&cdo);
        self.forget_spill(cdo);
        self.cdos.give_back();
        self.retry_byes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cdo(state: State) -> Cdo {
        Cdo {
            owner: 1,
            born: 0,
            name: Arc::from("n"),
            attributes: Attributes::new(),
            state,
            extras: OfferExtras::default(),
        }
    }

    #[test]
    fn the_counts_by_state_follow_every_change() {
        let mut t = CdoTable::default();
        let counts = |t: &CdoTable| t.counts().filter(|(_, n)| *n > 0).collect::<Vec<_>>();
        t.insert(1, cdo(State::Declared));
        t.insert(2, cdo(State::Declared));
        t.insert(3, cdo(State::Sealed));
        assert_eq!(counts(&t), [("declared", 2), ("sealed", 1)]);
        // A change through the loan moves the CDO from one count to the other.
        if let Some(mut c) = t.get_mut(&2) {
            c.state = State::Required(Want::default());
        }
        if let Some(mut c) = t.get_mut(&2)
            && let State::Required(w) = &mut c.state
        {
            w.local = true;
        }
        // A loan that changes nothing leaves the counts alone.
        let _ = t.get_mut(&1).map(|c| c.app());
        assert_eq!(counts(&t), [("declared", 1), ("sealed", 1), ("local", 1)]);
        t.insert(3, cdo(State::Withdrawn)); // replaced
        t.remove(&1);
        assert_eq!(counts(&t), [("withdrawn", 1), ("local", 1)]);
        t.remove(&2);
        t.remove(&3);
        assert_eq!(counts(&t), []);
        assert_eq!(t.counts().count(), State::KINDS, "every state, 0 included");
    }

    #[test]
    fn a_names_ids_keep_their_order_and_leave_in_any_order_however_many() {
        let name: Arc<str> = Arc::from("n");
        let mut index = NameIndex::default();
        let n = 200_000u64;
        for id in (1..=n).rev() {
            index.insert(&name, id);
        }
        index.insert(&name, 7); // again: no second entry
        assert_eq!(index.get("n").len(), n as usize);
        assert_eq!(
            index.get("n").iter().take(3).collect::<Vec<_>>(),
            [n, n - 1, n - 2]
        );
        // Every other one leaves, then the rest: the entry goes with the last.
        for id in (1..=n).step_by(2) {
            index.remove("n", id);
        }
        assert_eq!(index.get("n").len(), n as usize / 2);
        assert!(index.get("n").iter().all(|id| id % 2 == 0));
        for id in (2..=n).step_by(2) {
            index.remove("n", id);
        }
        assert!(index.get("n").is_empty());
        assert!(index.0.is_empty());
        // A few stay a list, in order.
        for id in [5, 3, 9] {
            index.insert(&name, id);
        }
        index.remove("n", 3);
        assert_eq!(index.get("n").to_vec(), [5, 9]);
        assert!(matches!(index.0.get("n"), Some(Ids::Few(_))));
    }
}
