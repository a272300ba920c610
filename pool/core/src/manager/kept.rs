//! CDOs the pool keeps after their producer let them go (data that outlives its
//! producer): an offer whose bytes went to a file on the global file system may be
//! withdrawn with the file handed over to the pool (the producer links it into the PM's
//! directory and names it in its [`ToPm::Withdraw`](crate::proto::ToPm::Withdraw)); the
//! pool then offers it in the producer's stead, under an id of its own (the ids of app
//! [`POOL`], which no app is given), until its lifetime (`.maestro.core.cdo.lifetime`,
//! seconds from the hand-over) ends, an app discards its name
//! ([`ToPm::Discard`](crate::proto::ToPm::Discard): the archiver is done with it) or the
//! workflow ends. A file an earlier workflow persisted, or a pool manager that is gone
//! kept, is offered again the same way once the driver adopts it ([`Manager::adopt`]).
//! The driver describes each kept file beside it once it checked it
//! ([`Manager::take_kept_checks`]: what a manager taking over adopts), removes the file
//! once no transfer reads it ([`Manager::take_discarded`]) and, at the end, removes the
//! rest or keeps those marked `.maestro.core.cdo.persist` ([`Manager::kept_files`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric_types::RemoteRegion;

use super::{Cdo, ConnId, Manager, State, later, policy};
use crate::attr::{self, AttrValue, Attributes};
use crate::proto::{self, AppId, CdoId, FromPm, GfsFile, OfferExtras, Op, Refusal};

/// The app id of the pool itself: the owner of kept CDOs (apps are numbered from 1).
pub(super) const POOL: AppId = 0;

/// The kept CDOs and where their files live.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// The PM's directory of kept files (as apps see it), if it keeps any.
    dir: Option<Arc<str>>,
    /// Each kept CDO, by its id (in order: observers list them first).
    by_id: BTreeMap<CdoId, KeptCdo>,
    /// Lifetimes' ends.
    deadlines: BTreeSet<(Instant, CdoId)>,
    /// Kept CDOs whose end came and whose file the driver removes next.
    discarded: Vec<KeptFile>,
    /// Files kept since the driver last looked, to check and describe (see [`KeptCheck`]).
    to_check: Vec<KeptCheck>,
    /// The withdraws that handed a file over and wait for it to be checked and described
    /// before they are answered, so that a producer told its CDO is kept may rely on a
    /// manager taking over adopting it: the producer's offer by the kept CDO's id.
    unchecked: HashMap<CdoId, CdoId>,
    /// The producers' offers of `unchecked`, each with why the file it handed over was
    /// refused once it was (see [`Manager::answer_withdraw`]).
    answer_held: BTreeMap<CdoId, Option<String>>,
    /// Offers whose withdraw was refused [`Refusal::NotKept`] after the check: the
    /// producer's withdraw without the file that follows is answered at once.
    keep_refused: BTreeSet<CdoId>,
    /// Bytes the kept CDOs make the PM hold (see [`policy::Policy::max_kept_bytes`]).
    held: usize,
    /// How many of them are being discarded (read by transfers still).
    discarding: usize,
    /// Sequence number of the next kept CDO (within `cdo_ids(POOL)`).
    next: u64,
}

#[derive(Debug)]
struct KeptCdo {
    /// Whose bytes they are (`component:index` of the producer that handed it over).
    provider: Arc<str>,
    file: KeptFile,
    expires: Option<Instant>,
    cost: usize,
}

/// A kept CDO's file, as the driver removes or keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptFile {
    /// The file (in the PM's directory of kept files).
    pub path: Arc<str>,
    /// The CDO's name.
    pub name: Arc<str>,
    /// What the file holds (JSON: the CDO's name, size, checksum, provider and
    /// attributes), written beside it (`PATH.maestro.json`) while kept, so that a pool
    /// manager taking over adopts it ([`Adopted::described`]), and beside a persisted
    /// file, so that whoever finds it knows what it holds.
    pub description: Arc<str>,
    /// `.maestro.core.cdo.persist` was set: keep the file after the workflow.
    pub persist: bool,
}

/// A file the pool keeps from now on, for the driver to check and describe off the
/// manager's thread. A file a producer handed over (`offered`) is checked first: the pool
/// keeps only a regular file of its own user that is the producer's offered file (the
/// same inode, its only other name) or has one name, never a second name of some other
/// file linked into its directory; a file that fails is discarded
/// ([`Manager::kept_checked`]). A file that passed, or one adopted, is described beside
/// it, `PATH.maestro.json` ([`KeptFile::description`]): a pool manager that takes over
/// from this one adopts what is described, and only that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptCheck {
    /// The kept CDO.
    pub id: CdoId,
    /// Its file in the pool's directory.
    pub path: Arc<str>,
    /// The producer's file the offer named (gone once its withdraw completed); `None`
    /// for a file adopted (checked as it was adopted).
    pub offered: Option<Arc<str>>,
    /// What to write beside it.
    pub description: Arc<str>,
}

/// What a kept file's description says (see [`KeptFile::description`]): for people,
/// the attributes as plain JSON values; for a pool that adopts the file again
/// ([`Manager::adopt`]), `typed` too, each value with its type.
#[derive(serde::Serialize)]
struct Described<'a> {
    name: &'a str,
    size: u64,
    checksum: u64,
    provider: &'a str,
    #[serde(with = "attr::plain")]
    attributes: Attributes,
    typed: Attributes,
}

/// A file the pool is to offer as a kept CDO ([`Manager::adopt`]): where it is (in the
/// pool's directory), the CDO's name, size and checksum, whose bytes they are, and the
/// attributes it was sealed with.
#[derive(Clone, Debug, PartialEq)]
pub struct Adopted {
    /// The file, in the pool's directory of kept files.
    pub path: String,
    /// The CDO's name.
    pub name: String,
    /// Its size in bytes (the file's).
    pub len: u64,
    /// XXH3-64 of the bytes, which consumers check.
    pub checksum: u64,
    /// Whose bytes they are (`component:index`).
    pub provider: String,
    /// The attributes it was sealed with.
    pub attributes: Attributes,
}

/// What the pool counts for a kept CDO (see [`policy::Policy::max_kept_bytes`]), besides
/// its description.
fn kept_cost(name: &str, path: &str, provider: &str, attributes: &Attributes) -> usize {
    policy::CDO_COST
        + name.len()
        + path.len()
        + provider.len()
        + policy::attribute_bytes(attributes)
}

/// The rest of `path` under the directory `dir`: a non-empty relative path without `.`,
/// `..` or empty components; `None` for a path anywhere else.
pub(super) fn under<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    path.strip_prefix(dir)
        .and_then(|rest| rest.strip_prefix('/'))
        .filter(|rest| {
            !rest.is_empty()
                && rest
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != "..")
        })
}

impl Adopted {
    fn cost(&self) -> usize {
        kept_cost(&self.name, &self.path, &self.provider, &self.attributes)
    }

    /// The CDO a kept or persisted file's description (`NAME.maestro.json`, see
    /// [`KeptFile::description`]) says the file at `path` holds.
    ///
    /// # Errors
    /// What is wrong with the description (not JSON, a field missing or of another type).
    pub fn described(description: &str, path: String) -> Result<Adopted, String> {
        #[derive(serde::Deserialize)]
        struct Read {
            name: String,
            size: u64,
            checksum: u64,
            provider: String,
            typed: Attributes,
        }
        let r: Read = serde_json::from_str(description).map_err(|e| e.to_string())?;
        Ok(Adopted {
            path,
            name: r.name,
            len: r.size,
            checksum: r.checksum,
            provider: r.provider,
            attributes: r.typed,
        })
    }
}

impl Kept {
    /// How many CDOs are kept (not being discarded) and the bytes they make the PM hold.
    pub(super) fn totals(&self) -> (u64, u64) {
        let live = self.by_id.len() - self.discarding;
        (live as u64, self.held as u64)
    }

    /// Kept ids from `start` on, in order.
    pub(super) fn ids_from(&self, start: CdoId) -> impl Iterator<Item = CdoId> + '_ {
        self.by_id.range(start..).map(|(&id, _)| id)
    }
}

impl Manager {
    /// Has the pool keep GFS offers withdrawn with their file handed over, in `dir` (the
    /// PM's own directory on the global file system, as apps see it; the driver creates
    /// it and removes what is in it, see [`Manager::take_discarded`]); `None`: keep none
    /// (the default: such withdraws are refused with [`Refusal::NotKept`]).
    pub fn set_keep_dir(&mut self, dir: Option<&str>) {
        self.kept.dir = dir.map(Arc::from);
    }

    /// The directory kept files go to, which apps are told in `Welcome`.
    pub(super) fn keep_dir(&self) -> Option<Arc<str>> {
        self.kept.dir.clone()
    }

    /// Files of kept CDOs whose end came (lifetime over, discarded) and that no transfer
    /// reads any more: the driver removes them (and their descriptions), or moves those
    /// with [`KeptFile::persist`] among the persisted files.
    pub fn take_discarded(&mut self) -> Vec<KeptFile> {
        std::mem::take(&mut self.kept.discarded)
    }

    /// Bytes the kept CDOs make the PM hold.
    pub(super) fn kept_held(&self) -> usize {
        self.kept.held
    }

    /// Files kept since the last call, for the driver to check and describe (see
    /// [`KeptCheck`]).
    pub fn take_kept_checks(&mut self) -> Vec<KeptCheck> {
        std::mem::take(&mut self.kept.to_check)
    }

    /// The driver checked kept CDO `id`'s file and described it beside it (`Ok`), or
    /// found it is not one the pool keeps (`Err(why)`): then it is no longer offered, and
    /// its name in the pool's directory goes once no transfer reads it (the file it
    /// names, someone else's, is left alone). Either way the withdraw that handed it over
    /// is answered now, not before: a producer told its CDO is kept may rely on a manager
    /// taking over adopting it.
    pub fn kept_checked(&mut self, now: Instant, id: CdoId, outcome: Result<(), &str>) {
        self.advance(now);
        if let Err(why) = outcome
            && self.kept.by_id.contains_key(&id)
        {
            tracing::warn!("kept CDO {id} refused: {why}");
            self.discard_kept(id, why);
        }
        let Some(offer) = self.kept.unchecked.remove(&id) else {
            return;
        };
        // The producer's offer: withdrawn (its answer due now), still read by transfers
        // (answered when they end), or gone with its app (nobody to answer).
        let withdrawn = (self.cdos.get(&offer)).map(|c| matches!(c.state, State::Withdrawn));
        match (outcome, withdrawn) {
            (Err(why), Some(_)) => {
                self.kept.answer_held.insert(offer, Some(why.to_string()));
            }
            _ => {
                self.kept.answer_held.remove(&offer);
            }
        }
        if withdrawn == Some(true) {
            self.answer_withdraw(offer);
        }
        self.try_bye(proto::cdo_owner(offer));
    }

    /// Whether the answer to the withdraw of `offer` waits for the file it handed over to
    /// be checked ([`Manager::kept_checked`]).
    pub(super) fn answer_held(&self, offer: CdoId) -> bool {
        matches!(self.kept.answer_held.get(&offer), Some(None))
    }

    /// Answers the withdraw of `offer`, which no transfer reads any more, unless the file
    /// it handed over is still being checked: done, or, for a file refused, refused
    /// [`Refusal::NotKept`] saying why (the producer's core withdraws again without it,
    /// and that withdraw is done at once: [`Manager::withdrawn_unkept`]).
    pub(super) fn answer_withdraw(&mut self, offer: CdoId) {
        if self.answer_held(offer) {
            return;
        }
        let refused = self.kept.answer_held.remove(&offer).flatten();
        let Some(conn) = self.apps.get(&proto::cdo_owner(offer)).map(|a| a.conn) else {
            return;
        };
        match refused {
            None => self.done(conn, Op::Withdraw, offer),
            Some(why) => {
                self.kept.keep_refused.insert(offer);
                let why = format!("the file handed over is not one the pool keeps: {why}");
                self.refuse(conn, Op::Withdraw, Some(offer), Refusal::NotKept(why));
            }
        }
    }

    /// `app` withdraws `offer` again without a file after the pool refused the one it
    /// handed over ([`Manager::answer_withdraw`]): the offer is withdrawn already, so the
    /// withdraw is done at once. False when this is not such a withdraw.
    pub(super) fn withdrawn_unkept(&mut self, conn: ConnId, app: AppId, offer: CdoId) -> bool {
        if proto::cdo_owner(offer) != app || !self.kept.keep_refused.remove(&offer) {
            return false;
        }
        self.done(conn, Op::Withdraw, offer);
        true
    }

    /// Forgets the withdraws of `app` whose answers wait for a check or that were refused
    /// a file (it is gone).
    pub(super) fn forget_keep_refused(&mut self, app: AppId) {
        let others = |&o: &CdoId| proto::cdo_owner(o) != app;
        (self.kept.keep_refused).retain(others);
        (self.kept.answer_held).retain(|o, _| others(o));
    }

    /// The files of the CDOs kept now: what the driver removes (or keeps, with
    /// [`KeptFile::persist`]) when the workflow ends.
    pub fn kept_files(&self) -> Vec<KeptFile> {
        self.kept.by_id.values().map(|k| k.file.clone()).collect()
    }

    /// Whether `app` may hand `cdo`'s file over as `path`: the pool keeps files, `path` is
    /// the file of that CDO in its directory, the CDO is an offer of `app` written to the
    /// global file system, and the pool has room for it.
    pub(super) fn keepable(&self, app: AppId, cdo: CdoId, path: &str) -> Result<(), Refusal> {
        let Some(dir) = &self.kept.dir else {
            return Err(Refusal::NotKept(
                "this pool manager keeps no files: start it with the GFS directory (maestro pm --gfs-dir DIR, or MSTRO_TRANSPORT_GFS_DIR for maestro run and mstro_pm_start)".into(),
            ));
        };
        if path != format!("{dir}/{cdo}") {
            return Err(Refusal::NotKept(format!(
                "the file {path} is not CDO {cdo}'s in the pool's directory {dir}"
            )));
        }
        let c = self.cdos.get(&cdo).filter(|c| c.app() == app);
        let Some(c) = c.filter(|c| matches!(c.state, State::Offered(_))) else {
            return Err(Refusal::UnknownCdo);
        };
        if c.extras.gfs().is_none() {
            return Err(Refusal::NotKept(
                "the offer was not written to the global file system (MSTRO_TRANSPORT_DEFAULT=GFS)"
                    .into(),
            ));
        }
        let provider = self.provider_label(cdo);
        self.room_for(kept_cost(&c.name, path, &provider, &c.attributes))
    }

    /// Whether the pool holds room for another kept CDO of `cost` bytes.
    fn room_for(&self, cost: usize) -> Result<(), Refusal> {
        if self.kept.held.saturating_add(cost) > self.policy.max_kept_bytes {
            return Err(Refusal::NotKept(format!(
                "the pool keeps at most {} bytes of kept CDOs' metadata (maestro pm --max-kept-bytes)",
                self.policy.max_kept_bytes
            )));
        }
        Ok(())
    }

    /// Offers `cdo`'s file at `path` in the pool's name from now on (checked by
    /// [`Manager::keepable`]); its producer's withdraw follows.
    pub(super) fn keep(&mut self, cdo: CdoId, path: &str) {
        let Some(c) = self.cdos.get(&cdo) else {
            return;
        };
        let State::Offered(region) = c.state else {
            return;
        };
        let file = Adopted {
            path: path.to_string(),
            name: c.name.to_string(),
            len: region.len,
            checksum: c.extras.gfs().map_or(0, |f| f.checksum),
            provider: self.provider_label(cdo).to_string(),
            attributes: c.attributes.clone(),
        };
        tracing::info!("CDO {} kept by the pool (from CDO {cdo})", file.name);
        let offered = c.extras.gfs().map(|f| Arc::clone(&f.path));
        let id = self.add_kept(file, offered);
        self.kept.unchecked.insert(id, cdo);
        self.kept.answer_held.insert(cdo, None);
    }

    /// Offers `file` as a kept CDO from `now` on: a file the driver found and moved into
    /// its directory, one an earlier workflow persisted or a pool manager that is gone
    /// kept (see [`KeptFile::description`]). Its lifetime counts from now.
    ///
    /// # Errors
    /// [`Refusal::NotKept`] when the pool keeps no files, the file is not one of its
    /// directory, or the pool holds [`policy::Policy::max_kept_bytes`] already;
    /// [`Refusal::BadName`] for a name that is none; [`Refusal::Shard`] for a name whose
    /// home is another shard (that one adopts it).
    pub fn adopt(&mut self, now: Instant, file: Adopted) -> Result<CdoId, Refusal> {
        self.advance(now);
        proto::check_name(&file.name)?;
        if !self.is_home(&file.name) {
            return Err(Refusal::Shard(format!(
                "CDO {} lives at shard {} of the pool, not at this one",
                file.name,
                self.shard.of().home(&file.name)
            )));
        }
        let Some(dir) = &self.kept.dir else {
            return Err(Refusal::NotKept("this pool manager keeps no files".into()));
        };
        if under(&file.path, dir).is_none_or(|rest| rest.contains('/')) {
            return Err(Refusal::NotKept(format!(
                "the file {} is not one of the pool's directory {dir}",
                file.path
            )));
        }
        self.room_for(file.cost())?;
        tracing::info!("CDO {} adopted by the pool ({})", file.name, file.path);
        Ok(self.add_kept(file, None))
    }

    /// Offers `file` in the pool's name from now on (handed over from `offered`, or
    /// adopted): its id. The driver checks and describes it next.
    fn add_kept(&mut self, file: Adopted, offered: Option<Arc<str>>) -> CdoId {
        let cost = file.cost();
        let Adopted {
            path,
            name,
            len,
            checksum,
            provider,
            mut attributes,
        } = file;
        attr::strip_derived(&mut attributes);
        let lifetime = match attributes.get(attr::LIFETIME) {
            Some(AttrValue::Uint(s)) if *s > 0 => Some(Duration::from_secs(*s)),
            _ => None,
        };
        let persist = matches!(attributes.get(attr::PERSIST), Some(AttrValue::Bool(true)));
        let mut published = attributes.clone();
        published.insert(attr::NAME.into(), AttrValue::Str(name.clone()));
        published.insert(attr::LOCAL_SIZE.into(), AttrValue::Uint(len));
        let described = Described {
            name: &name,
            size: len,
            checksum,
            provider: &provider,
            attributes: published,
            typed: attributes.clone(),
        };
        // Plain values always encode.
        let description: Arc<str> = serde_json::to_string_pretty(&described)
            .unwrap_or_default()
            .into();
        let (name, path, provider): (Arc<str>, Arc<str>, Arc<str>) =
            (name.into(), path.into(), provider.into());
        let cost = cost + description.len();
        self.kept.next += 1;
        let id = proto::cdo_ids(POOL).start() + self.kept.next - 1;
        self.cdos.insert(
            id,
            Cdo {
                // The pool's own: `POOL`.
                owner: 0,
                born: self.seconds_since_origin(),
                name: Arc::clone(&name),
                attributes,
                state: State::Offered(RemoteRegion {
                    addr: 0,
                    key: 0,
                    len,
                }),
                extras: OfferExtras::default().with_gfs(GfsFile {
                    path: Arc::clone(&path),
                    checksum,
                }),
            },
        );
        let expires = lifetime.map(|d| later(self.events.now(), d));
        if let Some(at) = expires {
            self.kept.deadlines.insert((at, id));
        }
        self.kept.held += cost;
        self.kept.by_id.insert(
            id,
            KeptCdo {
                provider,
                file: KeptFile {
                    path: Arc::clone(&path),
                    name: Arc::clone(&name),
                    description: Arc::clone(&description),
                    persist,
                },
                expires,
                cost,
            },
        );
        self.kept.to_check.push(KeptCheck {
            id,
            path,
            offered,
            description,
        });
        self.cdos.offered(&name, id);
        for w in self.cdos.waiting(&name).to_vec() {
            self.ticket(w);
        }
        id
    }

    /// Whose bytes kept CDO `id` holds, if it is one.
    pub(super) fn kept_provider(&self, id: CdoId) -> Option<Arc<str>> {
        self.kept.by_id.get(&id).map(|k| Arc::clone(&k.provider))
    }

    /// When the next kept CDO's lifetime ends.
    pub(super) fn next_kept_deadline(&self) -> Option<Instant> {
        self.kept.deadlines.first().map(|(at, _)| *at)
    }

    /// Ends the kept CDOs whose lifetime is over by `now`.
    pub(super) fn expire_kept(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.kept.deadlines.first().filter(|(at, _)| *at <= now) {
            self.kept.deadlines.remove(&(at, id));
            self.discard_kept(id, "its lifetime ended");
        }
    }

    /// `app` asks to end the kept CDOs of `name` (see [`ToPm::Discard`](crate::proto::ToPm::Discard)).
    pub(super) fn discard(&mut self, conn: ConnId, app: AppId, local: u64, name: &str) {
        if let Err(why) = self.owns(app, name) {
            return self.refuse(conn, Op::Discard, Some(local), why);
        }
        let kept: Vec<CdoId> = self
            .cdos
            .offers(name)
            .iter()
            .filter(|&o| proto::cdo_owner(o) == POOL)
            .collect();
        let who = self.apps.get(&app).map(|a| Arc::clone(&a.label));
        let why = format!("discarded by {}", who.as_deref().unwrap_or("an app"));
        for &id in &kept {
            self.discard_kept(id, &why);
        }
        let count = kept.len() as u64;
        self.out.push(conn, FromPm::Discarded { local, count });
    }

    /// Stops offering kept CDO `id` (`why`, for the log); its file goes once no transfer
    /// reads it (those that do are held to the transfer deadline, as any withdrawn
    /// offer's).
    fn discard_kept(&mut self, id: CdoId, why: &str) {
        if let Some(at) = self.kept.by_id.get(&id).and_then(|k| k.expires) {
            self.kept.deadlines.remove(&(at, id));
        }
        let Some(mut c) = self.cdos.get_mut(&id) else {
            return;
        };
        let State::Offered(region) = c.state else {
            return;
        };
        c.state = State::Withdrawing(region);
        let name = Arc::clone(&c.name);
        drop(c);
        self.kept.discarding += 1;
        tracing::info!("kept CDO {name} ({id}) ends: {why}");
        self.cdos.not_offered(&name, id);
        self.pin_transfers_from(|from| from == id);
        self.revoke_leases(id);
        self.source_released(id);
    }

    /// Kept CDO `id`, discarded, is read by no transfer any more: it goes, and its file is
    /// the driver's to remove.
    pub(super) fn forget_kept(&mut self, id: CdoId) {
        self.cdos.remove(&id);
        if let Some(k) = self.kept.by_id.remove(&id) {
            self.kept.discarding = self.kept.discarding.saturating_sub(1);
            self.kept.held = self.kept.held.saturating_sub(k.cost);
            if let Some(at) = k.expires {
                self.kept.deadlines.remove(&(at, id));
            }
            self.kept.discarded.push(k.file);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_is_under_a_directory_only_without_dot_dot_or_empty_parts() {
        for (path, ok) in [
            ("/gfs/maestro-gfs-n1_7-ab/42", true),
            ("/gfs/42", true),
            ("/gfs", false),
            ("/gfs/", false),
            ("/gfsx/42", false),
            ("/gfs/../etc/passwd", false),
            ("/gfs//42", false),
            ("/other/42", false),
        ] {
            assert_eq!(super::under(path, "/gfs").is_some(), ok, "{path}");
        }
    }
}
