//! The CDO table's entries by id, kept where an app's next CDO is close to its last.
//!
//! Apps number their CDOs one after the other (see [`cdo_ids`](crate::proto::cdo_ids)),
//! and a pipelining producer declares, seals and offers them in that order. A hash map
//! by id scatters such a run over the whole table: with a few hundred thousand CDOs
//! every declare is a cache miss, and the table's growth moves every entry again. Here
//! the entries themselves sit in one array in the order they came (holes refilled, the
//! array compacted when most of it is holes), and an app's ids find their entry through
//! pages of [`PAGE`] consecutive ids: a run of declares touches one page and the end of
//! the array. An app whose ids are sparse (a shard sees only the names it is home for)
//! costs at most a page per CDO, as a hash map's entry would.

use super::{GiveBack, HashMap};
use crate::proto::{AppId, CDO_SEQ_BITS, CdoId};

/// Bits of an id that pick its place in a page.
const PAGE_BITS: u32 = 4;
/// Consecutive ids per page.
const PAGE: usize = 1 << PAGE_BITS;

/// One page: for each of its ids, the place of its entry in the array plus one (0 for
/// no entry).
type Page = [usize; PAGE];

/// Entries by CDO id (see the module's documentation).
#[derive(Debug)]
pub(super) struct IdStore<T> {
    /// Each app's pages (by the app in an id's high bits).
    apps: HashMap<AppId, Pages>,
    /// The entries, in the order they came; `None` where one went.
    entries: Vec<Option<T>>,
    /// The places of `entries` that are `None`, reused first.
    free: Vec<usize>,
}

/// An app's pages, by the page's number (its ids' sequence number divided by [`PAGE`]).
#[derive(Debug, Default)]
struct Pages {
    pages: HashMap<u64, Page>,
    /// Entries the app has.
    live: usize,
}

impl<T> Default for IdStore<T> {
    fn default() -> Self {
        IdStore {
            apps: HashMap::default(),
            entries: Vec::new(),
            free: Vec::new(),
        }
    }
}

/// An id's app, page number and place in its page.
fn locate(id: CdoId) -> (AppId, u64, usize) {
    let seq = id & ((1 << CDO_SEQ_BITS) - 1);
    (
        id >> CDO_SEQ_BITS,
        seq >> PAGE_BITS,
        (seq as usize) & (PAGE - 1),
    )
}

/// The id at place `slot` of page `page` of `app`.
fn id_of(app: AppId, page: u64, slot: usize) -> CdoId {
    (app << CDO_SEQ_BITS) | (page << PAGE_BITS) | slot as u64
}

impl<T> IdStore<T> {
    /// Where `id`'s entry is in `entries`.
    fn place(&self, id: CdoId) -> Option<usize> {
        let (app, page, slot) = locate(id);
        self.apps.get(&app)?.pages.get(&page)?[slot].checked_sub(1)
    }

    pub(super) fn get(&self, id: CdoId) -> Option<&T> {
        self.entries.get(self.place(id)?)?.as_ref()
    }

    pub(super) fn get_mut(&mut self, id: CdoId) -> Option<&mut T> {
        let at = self.place(id)?;
        self.entries.get_mut(at)?.as_mut()
    }

    pub(super) fn contains(&self, id: CdoId) -> bool {
        self.place(id).is_some()
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Entries of ids of `app`.
    pub(super) fn app_len(&self, app: AppId) -> usize {
        self.apps.get(&app).map_or(0, |p| p.live)
    }

    /// Adds the entry `make` makes as `id`, unless `id` has one (one look for both): the
    /// new entry, `None` if `id` had one.
    pub(super) fn insert_new(&mut self, id: CdoId, make: impl FnOnce() -> T) -> Option<&mut T> {
        let (app, page, slot) = locate(id);
        let pages = self.apps.entry(app).or_default();
        let at = &mut pages.pages.entry(page).or_insert([0; PAGE])[slot];
        if *at != 0 {
            return None;
        }
        let place = match self.free.pop() {
            Some(place) => {
                self.entries[place] = Some(make());
                place
            }
            None => {
                self.entries.push(Some(make()));
                self.entries.len() - 1
            }
        };
        *at = place + 1;
        pages.live += 1;
        self.entries[place].as_mut()
    }

    /// Sets `id`'s entry to `value`: the entry it replaced, if any.
    pub(super) fn insert(&mut self, id: CdoId, value: T) -> Option<T> {
        if let Some(old) = self.get_mut(id) {
            return Some(std::mem::replace(old, value));
        }
        self.insert_new(id, || value);
        None
    }

    /// Takes `id`'s entry out.
    pub(super) fn remove(&mut self, id: CdoId) -> Option<T> {
        let (app, page, slot) = locate(id);
        let pages = self.apps.get_mut(&app)?;
        let p = pages.pages.get_mut(&page)?;
        let place = std::mem::take(&mut p[slot]).checked_sub(1)?;
        if p.iter().all(|&at| at == 0) {
            pages.pages.remove(&page);
            pages.pages.give_back();
        }
        pages.live -= 1;
        if pages.live == 0 {
            self.apps.remove(&app);
        }
        let value = self.entries[place].take();
        self.free.push(place);
        value
    }

    /// Gives memory back once most entries went: the entries are packed again (in the
    /// order of the pages) when fewer than a quarter of the array's places hold one.
    pub(super) fn give_back(&mut self) {
        self.apps.give_back();
        let len = self.len();
        if self.entries.len() <= 1024 || len * 4 >= self.entries.len() {
            return;
        }
        let mut packed = Vec::with_capacity(len);
        for pages in self.apps.values_mut() {
            for page in pages.pages.values_mut() {
                for at in page.iter_mut().filter(|at| **at != 0) {
                    packed.push(self.entries[*at - 1].take());
                    *at = packed.len();
                }
            }
        }
        self.entries = packed;
        self.free = Vec::new();
    }

    /// The ids of `app`'s entries, in no particular order.
    pub(super) fn ids_of(&self, app: AppId) -> impl Iterator<Item = CdoId> + '_ {
        let pages = self.apps.get(&app).map(|p| &p.pages);
        pages.into_iter().flatten().flat_map(move |(&page, slots)| {
            (0..PAGE)
                .filter(|&slot| slots[slot] != 0)
                .map(move |slot| id_of(app, page, slot))
        })
    }

    /// Every entry with its id, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (CdoId, &T)> {
        self.apps.iter().flat_map(move |(&app, pages)| {
            pages.pages.iter().flat_map(move |(&page, slots)| {
                slots.iter().enumerate().filter_map(move |(slot, &at)| {
                    let value = self.entries.get(at.checked_sub(1)?)?.as_ref()?;
                    Some((id_of(app, page, slot), value))
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::cdo_ids;

    #[test]
    fn an_entry_is_found_by_its_id_until_it_is_removed() {
        let mut s = IdStore::default();
        let ids: Vec<CdoId> = cdo_ids(3).take(40).collect();
        for &id in &ids {
            assert!(s.insert_new(id, || id * 10).is_some());
        }
        assert_eq!(s.len(), 40);
        assert_eq!(s.app_len(3), 40);
        assert_eq!(s.app_len(4), 0);
        assert_eq!(s.get(ids[17]), Some(&(ids[17] * 10)));
        assert!(s.insert_new(ids[17], || 0).is_none(), "in use");
        assert_eq!(s.get(ids[17]), Some(&(ids[17] * 10)), "not replaced");
        assert_eq!(s.remove(ids[17]), Some(ids[17] * 10));
        assert_eq!(s.remove(ids[17]), None);
        assert!(!s.contains(ids[17]));
        assert_eq!(s.len(), 39);
        // Another app's id with the same sequence number is another CDO.
        let other = *cdo_ids(4).start() + (ids[17] - *cdo_ids(3).start());
        assert!(!s.contains(other));
    }

    #[test]
    fn removed_places_are_reused_and_the_array_is_packed_when_mostly_empty() {
        let mut s = IdStore::default();
        let ids: Vec<CdoId> = cdo_ids(1).take(4000).collect();
        for &id in &ids {
            s.insert_new(id, || id);
        }
        for &id in &ids[..100] {
            s.remove(id);
        }
        let again = *cdo_ids(2).start();
        s.insert_new(again, || again);
        assert_eq!(s.entries.len(), 4000, "a place that went is used again");
        for &id in &ids[100..3500] {
            s.remove(id);
        }
        s.give_back();
        assert_eq!(s.entries.len(), 501, "packed: only what is left");
        assert!(s.free.is_empty());
        for &id in ids[3500..].iter().chain([&again]) {
            assert_eq!(s.get(id), Some(&id), "{id} moved with its entry");
        }
        let mut listed: Vec<CdoId> = s
            .iter()
            .map(|(id, &v)| {
                assert_eq!(id, v);
                id
            })
            .collect();
        listed.sort_unstable();
        let mut expected: Vec<CdoId> = ids[3500..].to_vec();
        expected.push(again);
        assert_eq!(listed, expected);
    }

    #[test]
    fn sparse_ids_and_the_last_ids_of_a_page_and_of_an_app_are_kept_apart() {
        let mut s = IdStore::default();
        let range = cdo_ids(5);
        let ids = [
            *range.start(),
            *range.start() + PAGE as u64 - 1,
            *range.start() + PAGE as u64,
            *range.start() + (1 << 30),
            *range.end(),
            *cdo_ids(6).start(),
        ];
        for &id in &ids {
            s.insert_new(id, || id);
        }
        for &id in &ids {
            assert_eq!(s.get(id), Some(&id));
        }
        assert_eq!(s.app_len(5), 5);
        assert_eq!(s.insert(ids[3], 7), Some(ids[3]));
        assert_eq!(s.get(ids[3]), Some(&7));
        for &id in &ids {
            s.remove(id);
        }
        assert_eq!(s.len(), 0);
        assert!(s.apps.is_empty(), "an app with no entry keeps no pages");
    }
}
