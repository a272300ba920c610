//! Which pool manager of a sharded pool is a CDO name's home (see
//! docs/developers/shards.md): the names are hashed into [`SLOTS`] slots (XXH3-64 of the
//! name's bytes), and the slots split into `K` contiguous runs, one per shard, in the
//! order the PM info lists the shards. Every client computes the same home without
//! asking; a pool of one shard (`K = 1`, the default) is every name's home.
//!
//! Slots rather than the name's hash modulo `K`: a name keeps its slot whatever `K` is,
//! so a pool that grows or shrinks moves whole runs of slots, never rehashes a name.

use crate::ids::{AppId, CDO_SEQ_BITS, CdoId};

/// How many slots the names hash into (as Redis Cluster's 16,384).
pub const SLOTS: u16 = 16_384;

/// The most shards one pool has (each slot run holds at least one slot; far more
/// processes than any pool manager needs).
pub const MAX_SHARDS: u16 = 1024;

/// The shards of one pool: how many there are (`K`); shard 0 is the first the PM info
/// lists (it numbers the apps, see docs/developers/shards.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shards {
    count: u16,
}

/// Why a shard count is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a pool has 1 to {MAX_SHARDS} shards, not {0}: give the number of pool managers that share its names"
)]
pub struct BadShardCount(pub usize);

impl Default for Shards {
    /// One shard: every name's home is the one pool manager.
    fn default() -> Shards {
        Shards { count: 1 }
    }
}

impl Shards {
    /// `count` shards.
    ///
    /// # Errors
    /// [`BadShardCount`] for none, or more than [`MAX_SHARDS`].
    pub fn new(count: usize) -> Result<Shards, BadShardCount> {
        match u16::try_from(count) {
            Ok(c) if (1..=MAX_SHARDS).contains(&c) => Ok(Shards { count: c }),
            _ => Err(BadShardCount(count)),
        }
    }

    /// How many shards there are.
    pub fn count(self) -> usize {
        usize::from(self.count)
    }

    /// The slot of `name` (the same for every shard count).
    pub fn slot(name: &str) -> u16 {
        // SLOTS is a power of two: the low bits of the hash.
        (xxhash_rust::xxh3::xxh3_64(name.as_bytes()) % u64::from(SLOTS)) as u16
    }

    /// The shard that is `name`'s home: the one whose run of slots holds its slot.
    pub fn home(self, name: &str) -> usize {
        // One shard: no hash to compute.
        if self.count == 1 {
            return 0;
        }
        self.of_slot(Shards::slot(name))
    }

    /// The shard whose run of slots holds `slot`: shard `s` holds the slots from
    /// `s * SLOTS / K` up to (not including) `(s + 1) * SLOTS / K`.
    pub fn of_slot(self, slot: u16) -> usize {
        (usize::from(slot) * self.count()) / usize::from(SLOTS)
    }

    /// The slots shard `shard` holds (empty for a shard that is none).
    pub fn slots_of(self, shard: usize) -> std::ops::Range<u16> {
        let k = self.count();
        if shard >= k {
            return 0..0;
        }
        let start = |s: usize| (s * usize::from(SLOTS)).div_ceil(k) as u16;
        start(shard)..if shard + 1 == k {
            SLOTS
        } else {
            start(shard + 1)
        }
    }
}

/// One manager's place among the shards of its pool: which shard it is, of how many.
/// Shard 0 numbers the apps (see docs/developers/shards.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    index: u16,
    of: Shards,
}

impl Shards {
    /// Shard `index` of these; `None` for an index the pool does not have.
    pub fn place(self, index: usize) -> Option<Place> {
        let index = u16::try_from(index).ok().filter(|&i| i < self.count)?;
        Some(Place { index, of: self })
    }
}

impl Place {
    /// Which shard it is (0 numbers the apps).
    pub fn index(self) -> usize {
        usize::from(self.index)
    }

    /// The shards of its pool.
    pub fn of(self) -> Shards {
        self.of
    }

    /// Whether this shard numbers the apps (and tells their joins and leaves): shard 0.
    pub fn numbers_apps(self) -> bool {
        self.index == 0
    }

    /// The ids a client numbers app `app`'s CDOs with at this shard: shard `s` of `K` has
    /// the `s`-th of `K` contiguous parts of the app's ids ([`cdo_ids`](crate::ids::cdo_ids);
    /// contiguous, so that a group's members are numbered in a row), and the id alone
    /// says the shard ([`Shards::of_cdo`]). One shard: all of them.
    pub fn cdo_ids(self, app: AppId) -> std::ops::RangeInclusive<CdoId> {
        let all = crate::ids::cdo_ids(app);
        let base = all.start() - 1;
        let k = u64::from(self.of.count);
        let at = |s: u64| (s << CDO_SEQ_BITS).div_ceil(k);
        let first = at(u64::from(self.index)).max(1);
        let end = at(u64::from(self.index) + 1) - 1;
        base + first..=base + end
    }
}

/// Bits of an event serial below the shard that raised it (see [`Place::first_serial`]).
const SERIAL_BITS: u32 = 48;

impl Place {
    /// The first serial of this shard's events: shard `s` numbers them from `s * 2^48`
    /// (shard 0 from 1), so that a serial names the shard that raised it
    /// ([`Shards::of_serial`]) and an acknowledgement finds its way back.
    pub fn first_serial(self) -> u64 {
        (u64::from(self.index) << SERIAL_BITS).max(1)
    }
}

impl Shards {
    /// The shard that raised the event of `serial` (see [`Place::first_serial`]).
    pub fn of_serial(self, serial: u64) -> usize {
        usize::try_from(serial >> SERIAL_BITS).map_or(0, |s| s.min(self.count() - 1))
    }

    /// The shard at which a client numbered `cdo` (see [`Place::cdo_ids`]).
    pub fn of_cdo(self, cdo: CdoId) -> usize {
        let seq = cdo & ((1 << CDO_SEQ_BITS) - 1);
        ((seq * u64::from(self.count)) >> CDO_SEQ_BITS) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shard_is_every_names_home() {
        let one = Shards::default();
        for name in ["", "t2m/step-6", "é", &"x".repeat(1000)] {
            assert_eq!(one.home(name), 0);
        }
    }

    #[test]
    fn each_slot_has_one_shard_and_the_runs_cover_every_slot_in_order() {
        for k in [1, 2, 3, 4, 7, 64, 1000, 1024] {
            let shards = Shards::new(k).expect("count");
            let mut next = 0u16;
            for s in 0..k {
                let run = shards.slots_of(s);
                assert_eq!(
                    run.start,
                    next,
                    "K = {k}, shard {s} starts where {} ends",
                    s.max(1) - 1
                );
                assert!(!run.is_empty(), "K = {k}, shard {s} holds a slot");
                for slot in [run.start, run.end - 1] {
                    assert_eq!(shards.of_slot(slot), s, "K = {k}, slot {slot}");
                }
                next = run.end;
            }
            assert_eq!(next, SLOTS, "K = {k}: every slot");
            assert!(shards.slots_of(k).is_empty());
        }
    }

    #[test]
    fn names_spread_evenly_and_keep_their_slot_whatever_the_count() {
        let shards = Shards::new(4).expect("count");
        let mut per = [0usize; 4];
        for i in 0..40_000 {
            let name = format!("t2m/step-{i}/level-{}", i % 137);
            per[shards.home(&name)] += 1;
            assert_eq!(Shards::slot(&name), Shards::slot(&name.clone()));
        }
        for n in per {
            assert!((9_000..11_000).contains(&n), "{per:?}");
        }
        // The home is a pure function of the name, the same in every client and every
        // version: these values are part of the protocol.
        let slots: Vec<u16> = ["", "a", "t2m/step-6"].map(Shards::slot).to_vec();
        assert_eq!(slots, [5314, 3615, 16272]);
        let four = Shards::new(4).expect("4");
        assert_eq!(["", "a", "t2m/step-6"].map(|n| four.home(n)), [1, 0, 3]);
    }

    #[test]
    fn a_place_is_one_of_the_pools_shards() {
        let four = Shards::new(4).expect("4");
        assert_eq!(four.place(3).map(Place::index), Some(3));
        assert_eq!(four.place(4), None);
        assert!(four.place(0).is_some_and(Place::numbers_apps));
        assert!(!four.place(1).is_some_and(Place::numbers_apps));
        assert_eq!(Place::default().of(), Shards::default());
    }

    #[test]
    fn each_shard_numbers_a_contiguous_part_of_an_apps_cdo_ids_that_names_it() {
        assert_eq!(Place::default().cdo_ids(3), crate::ids::cdo_ids(3));
        for k in [2, 3, 4, 1000, 1024] {
            let shards = Shards::new(k).expect("count");
            let mut next = *crate::ids::cdo_ids(5).start();
            for s in 0..k {
                let ids = shards.place(s).expect("place").cdo_ids(5);
                assert_eq!(*ids.start(), next, "K = {k}, shard {s}");
                for id in [*ids.start(), *ids.end()] {
                    assert_eq!(crate::ids::cdo_owner(id), 5);
                    assert_eq!(shards.of_cdo(id), s, "K = {k}, id {id:x}");
                }
                assert!(ids.end() - ids.start() > 1 << 29, "room for a billion CDOs");
                next = ids.end() + 1;
            }
            assert_eq!(next - 1, *crate::ids::cdo_ids(5).end(), "K = {k}: every id");
        }
    }

    #[test]
    fn a_serial_names_the_shard_that_raised_it() {
        let four = Shards::new(4).expect("4");
        for s in 0..4 {
            let first = four.place(s).expect("place").first_serial();
            assert_eq!(four.of_serial(first), s);
            assert_eq!(four.of_serial(first + 1_000_000), s);
        }
        assert_eq!(Place::default().first_serial(), 1, "one shard: as before");
    }

    #[test]
    fn a_count_that_is_none_is_refused_saying_what_to_give() {
        for bad in [0, 1025, 70_000] {
            let e = Shards::new(bad).expect_err("refused");
            assert!(e.to_string().contains("1 to 1024 shards"), "{e}");
        }
    }
}
