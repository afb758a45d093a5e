//! One shard's table: open addressing with Robin Hood probing, keyed by a
//! 64-bit fingerprint, bounded in entries, reclaiming expired state as it
//! goes.
//!
//! Why not `HashMap`: the table must cost at most 4/3 of a slot per entry
//! at ten million keys, never hold more than its cap, and reclaim
//! expired entries a few at a time on the request path. Open addressing
//! over a flat slice gives all three: a cursor walks the slice reclaiming
//! what has expired, deletion shifts entries back instead of leaving
//! tombstones, and at the cap a new key can replace the entry near it that
//! expires soonest.
//!
//! Why Robin Hood: an entry inserted takes the slot of any entry nearer its
//! own home, so every entry sits within a few slots of its home even 15/16
//! full, and a lookup stops as soon as it meets an entry nearer home than
//! the one it seeks. Linear probing alone needs a quarter of the slots
//! empty to keep misses short; this runs between 3/4 and 15/16 full, so a
//! slot of S bytes costs S to 4S/3 bytes a key.

use crate::algorithm::State;
use crate::clock::Micros;

/// State that knows from when it is no longer needed.
pub(crate) trait Expires: Default {
    /// Microseconds from which the entry equals no entry.
    fn expires_at(&self) -> Micros;
}

impl Expires for State {
    fn expires_at(&self) -> Micros {
        self.expires_at
    }
}

/// Slots tried when choosing an entry to evict at the cap.
const EVICTION_NEIGHBOURHOOD: usize = 64;
/// Slots the reclaiming cursor examines per insertion or per full-table check.
const SWEEP_STEP: usize = 8;
/// The smallest table, allocated on first insertion.
const MIN_SLOTS: usize = 16;
/// The fullest a table gets, in sixteenths: then it grows by a quarter, to
/// 3/4 full.
const MAX_LOAD_16THS: usize = 15;

/// The bit of a stored fingerprint that marks an entry to keep: a ban or
/// strikes, or a state that denied a request. Fingerprints are even (see
/// `shard::fingerprint`); the table compares and places them without it.
pub(crate) const KEPT: u64 = 1;

#[derive(Default)]
struct Slot<V> {
    /// 0 marks an empty slot; fingerprints are never 0. May carry [`KEPT`].
    fp: u64,
    value: V,
}

pub(crate) struct Table<V> {
    /// Empty, or at most `max_slots` long.
    slots: Box<[Slot<V>]>,
    len: usize,
    max_len: usize,
    max_slots: usize,
    cursor: usize,
}

impl<V: Expires> Table<V> {
    /// A table that will hold at most `max_len` entries (at least 1).
    pub(crate) fn new(max_len: usize) -> Self {
        let max_len = max_len.max(1);
        // Keep the load at or below 15/16 even when full, so probes stay
        // short and every probe sequence ends at an empty slot.
        let max_slots = (max_len + 1)
            .saturating_mul(16)
            .div_ceil(MAX_LOAD_16THS)
            .max(MIN_SLOTS);
        Self {
            slots: Box::new([]),
            len: 0,
            max_len,
            max_slots,
            cursor: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes held by the slots (not counting what values own on the heap).
    pub(crate) fn slot_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<V>>()
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter(|s| s.fp != 0).map(|s| &s.value)
    }

    /// Where `fp`'s probe starts: the fingerprint scaled to the table's
    /// length ("fastrange"), so a table can have any length and grow by
    /// half rather than double.
    #[inline]
    fn home(&self, fp: u64) -> usize {
        ((u128::from(fp & !KEPT) * self.slots.len() as u128) >> 64) as usize
    }

    /// How far slot `i` lies past `fp`'s home, wrapping around.
    #[inline]
    fn distance(&self, fp: u64, i: usize) -> usize {
        let home = self.home(fp);
        if i >= home {
            i - home
        } else {
            i + self.slots.len() - home
        }
    }

    /// The slot after `i`, wrapping around.
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// The slot holding `fp`. Valid until the next insertion.
    #[inline]
    pub(crate) fn find(&self, fp: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let (mut i, mut d) = (self.home(fp), 0);
        loop {
            match self.slots[i].fp {
                f if f & !KEPT == fp => return Some(i),
                0 => return None,
                // An entry nearer its home than `fp` would be here: `fp`
                // would have taken its place.
                f if self.distance(f, i) < d => return None,
                _ => (i, d) = (self.next(i), d + 1),
            }
        }
    }

    /// The value in slot `index` (from [`find`](Self::find)).
    #[inline]
    pub(crate) fn at(&self, index: usize) -> &V {
        &self.slots[index].value
    }

    /// The value in slot `index` (from [`find`](Self::find)), to change.
    #[inline]
    pub(crate) fn at_mut(&mut self, index: usize) -> &mut V {
        &mut self.slots[index].value
    }

    #[cfg(test)]
    fn get(&self, fp: u64) -> Option<&V> {
        self.find(fp).map(|i| &self.slots[i].value)
    }

    /// Whether `needed` new entries, the first at `fp`, fit without
    /// evicting. A full table first reclaims expired entries at the cursor
    /// and around `fp`: bounded work, so a flood of new keys cannot make each
    /// request scan the table.
    pub(crate) fn has_room(&mut self, fp: u64, needed: usize, now: Micros) -> bool {
        if self.len + needed > self.max_len {
            self.reclaim_step(now, EVICTION_NEIGHBOURHOOD * needed);
        }
        while self.len + needed > self.max_len {
            let expired = self
                .neighbourhood(fp)
                .find(|&i| self.slots[i].value.expires_at() <= now);
            match expired {
                Some(i) => self.remove_at(i),
                None => break,
            }
        }
        self.len + needed <= self.max_len
    }

    /// Mark the entry in slot `index` as one to evict last.
    #[inline]
    pub(crate) fn keep(&mut self, index: usize) {
        self.slots[index].fp |= KEPT;
    }

    /// The soonest time an entry near `fp` expires: when a full table is
    /// likely to have room for `fp`.
    pub(crate) fn soonest_expiry_near(&self, fp: u64) -> Micros {
        self.neighbourhood(fp)
            .map(|i| self.slots[i].value.expires_at())
            .min()
            .unwrap_or(Micros::ZERO)
    }

    /// Insert `fp`, which must be absent. At the cap, the entry near `fp`
    /// that expires soonest (an expired one if any) makes way, one not
    /// [kept](Self::keep) before any that is: a flood of new keys evicts
    /// each other, not a ban or an exhausted budget, while it can.
    pub(crate) fn insert(&mut self, fp: u64, value: V, now: Micros) -> &mut V {
        debug_assert!(fp != 0 && self.find(fp).is_none());
        if self.len >= self.max_len {
            self.reclaim_step(now, SWEEP_STEP);
        }
        if self.len >= self.max_len {
            // Near `fp` if anything is there (it usually is), else the next
            // entry after the cursor: either way the cap holds.
            let victim = self
                .neighbourhood(fp)
                .min_by_key(|&i| {
                    let slot = &self.slots[i];
                    (slot.fp & KEPT, slot.value.expires_at())
                })
                .or_else(|| {
                    (0..self.slots.len())
                        .map(|k| (self.cursor + k) % self.slots.len())
                        .find(|&i| self.slots[i].fp != 0)
                });
            if let Some(victim) = victim {
                self.remove_at(victim);
            }
        }
        self.grow_if_needed(now);
        self.reclaim_step(now, SWEEP_STEP);
        let at = self.place(Slot { fp, value });
        self.len += 1;
        &mut self.slots[at].value
    }

    /// Put `slot` where Robin Hood puts it (the table has an empty slot):
    /// past every entry at least as far from its home, taking the place of
    /// the first that is nearer and carrying that one on. Where `slot` went.
    fn place(&mut self, slot: Slot<V>) -> usize {
        let mut carried = slot;
        let (mut i, mut d) = (self.home(carried.fp), 0);
        let mut placed = None;
        loop {
            let here = self.slots[i].fp;
            if here == 0 {
                self.slots[i] = carried;
                return placed.unwrap_or(i);
            }
            let theirs = self.distance(here, i);
            if theirs < d {
                std::mem::swap(&mut self.slots[i], &mut carried);
                placed.get_or_insert(i);
                d = theirs;
            }
            (i, d) = (self.next(i), d + 1);
        }
    }

    /// Drop `fp`'s entry, if it has one.
    pub(crate) fn remove(&mut self, fp: u64) {
        if let Some(slot) = self.find(fp) {
            self.remove_at(slot);
        }
    }

    /// Occupied slots among the few that follow `fp`'s home.
    fn neighbourhood(&self, fp: u64) -> impl Iterator<Item = usize> + '_ {
        let len = self.slots.len();
        let home = if len == 0 { 0 } else { self.home(fp) };
        (0..EVICTION_NEIGHBOURHOOD.min(len))
            .map(move |k| (home + k) % len)
            .filter(|&i| self.slots[i].fp != 0)
    }

    /// Grow the table by a quarter when one more entry would take it past
    /// 15/16 full (so it is at least 3/4 full after growing), unless
    /// dropping what has expired frees a sixteenth of it: then it is
    /// rebuilt at its size, and the next rebuild is a sixteenth of its
    /// slots of insertions away.
    fn grow_if_needed(&mut self, now: Micros) {
        if self.slots.is_empty() {
            self.rebuild(MIN_SLOTS.min(self.max_slots), now);
            return;
        }
        let size = self.slots.len();
        if (self.len + 1) * 16 <= size * MAX_LOAD_16THS {
            return;
        }
        let live = self
            .slots
            .iter()
            .filter(|s| s.fp != 0 && s.value.expires_at() > now)
            .count();
        let crowded = (live + 1) * 16 > size * (MAX_LOAD_16THS - 1);
        let size = if crowded && size < self.max_slots {
            (size + size.div_ceil(4)).min(self.max_slots)
        } else {
            size
        };
        self.rebuild(size, now);
    }

    /// Move the live entries into a fresh table of `size` slots.
    fn rebuild(&mut self, size: usize, now: Micros) {
        let old = std::mem::replace(
            &mut self.slots,
            (0..size).map(|_| Slot::default()).collect(),
        );
        self.len = 0;
        self.cursor = 0;
        for slot in old.into_vec() {
            if slot.fp == 0 || slot.value.expires_at() <= now {
                continue;
            }
            self.place(slot);
            self.len += 1;
        }
    }

    /// Examine up to `budget` slots at the cursor, removing expired entries.
    pub(crate) fn reclaim_step(&mut self, now: Micros, budget: usize) {
        if self.slots.is_empty() {
            return;
        }
        for _ in 0..budget {
            let i = self.cursor;
            let slot = &self.slots[i];
            if slot.fp != 0 && slot.value.expires_at() <= now {
                // An entry from further on may shift into `i`: look again.
                self.remove_at(i);
            } else {
                self.cursor = self.next(i);
                if self.cursor == 0 {
                    self.shrink_if_sparse(now);
                    return;
                }
            }
        }
    }

    /// After a full pass of the cursor, give back what a past flood left:
    /// a table under a quarter full is rebuilt half full. One rebuild per
    /// pass, and a pass takes `slots / SWEEP_STEP` insertions, so the cost
    /// per insertion stays constant.
    fn shrink_if_sparse(&mut self, now: Micros) {
        let size = self.slots.len();
        if size > MIN_SLOTS && self.len * 4 < size {
            self.rebuild((self.len * 2).max(MIN_SLOTS), now);
        }
    }

    /// Remove the entry at `hole`, shifting the entries after it one slot
    /// back, nearer their homes, up to the first empty slot or entry at
    /// home: no tombstones, and the Robin Hood order kept.
    fn remove_at(&mut self, mut hole: usize) {
        loop {
            let next = self.next(hole);
            let fp = self.slots[next].fp;
            if fp == 0 || self.distance(fp, next) == 0 {
                break;
            }
            self.slots.swap(hole, next);
            hole = next;
        }
        self.slots[hole] = Slot::default();
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(expires_at: u64) -> State {
        State {
            expires_at: Micros::new(expires_at),
            value: expires_at,
        }
    }

    /// Fingerprints spread over the table, one per `k`.
    fn fp(k: u64) -> u64 {
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15) & !KEPT | 2
    }

    /// Fingerprints that all share one home slot, to exercise probe runs.
    fn clustered(n: u64) -> impl Iterator<Item = u64> {
        (1..=n).map(|k| k << 32 | 4)
    }

    #[test]
    fn finds_what_it_holds_through_growth() {
        let mut t = Table::new(10_000);
        for k in 1..=5_000u64 {
            t.insert(fp(k), state(1_000), Micros::ZERO);
        }
        assert_eq!(t.len(), 5_000);
        for k in 1..=5_000u64 {
            assert!(t.get(fp(k)).is_some(), "lost {k}");
        }
    }

    #[test]
    fn removal_keeps_colliding_entries_reachable() {
        let mut t = Table::new(64);
        for fp in clustered(10) {
            t.insert(
                fp,
                state(if fp >> 32 == 3 { 10 } else { 1_000 }),
                Micros::ZERO,
            );
        }
        // Entry 3 expires; the cursor sweeps it out, shifting the run back.
        t.reclaim_step(Micros::new(20), 64);
        assert_eq!(t.len(), 9);
        for fp in clustered(10).filter(|fp| fp >> 32 != 3) {
            assert_eq!(t.get(fp).map(|s| s.value), Some(1_000));
        }
    }

    /// Between 3/4 and 15/16 full once past its first sizes, every entry
    /// still found, and what was removed no longer.
    #[test]
    fn runs_full_and_finds_everything() {
        let mut t = Table::new(1_000_000);
        for k in 1..=100_000u64 {
            t.insert(fp(k), state(1_000), Micros::ZERO);
            let slots = t.slots.len();
            assert!(t.len() * 16 <= slots * 15, "{} in {slots}", t.len());
            if k > 1_000 {
                assert!(t.len() * 4 >= slots * 3 - 4, "{} in {slots}", t.len());
            }
        }
        for k in (1..=100_000u64).step_by(3) {
            t.remove(fp(k));
        }
        for k in 1..=100_000u64 {
            assert_eq!(t.get(fp(k)).is_some(), (k - 1) % 3 != 0, "key {k}");
        }
        // A miss in a crowded table ends early, and is a miss.
        assert!((200_000..210_000u64).all(|k| t.get(fp(k)).is_none()));
    }

    /// A table that fills up with state that has since expired is rebuilt
    /// at its size, not grown: the flood's memory is reused.
    #[test]
    fn expired_entries_make_room_before_it_grows() {
        let mut t = Table::new(1_000_000);
        for k in 1..=10_000u64 {
            t.insert(fp(k), state(10), Micros::ZERO);
        }
        let slots = t.slots.len();
        for k in 10_001..=20_000u64 {
            t.insert(fp(k), state(1_000), Micros::new(20));
        }
        assert_eq!(t.slots.len(), slots, "grown to {}", t.slots.len());
        assert!((10_001..=20_000u64).all(|k| t.get(fp(k)).is_some()));
    }

    #[test]
    fn never_holds_more_than_its_cap() {
        let mut t = Table::new(100);
        for k in 1..=10_000u64 {
            t.insert(fp(k), state(k), Micros::ZERO);
            assert!(t.len() <= 100);
        }
        assert_eq!(t.len(), 100);
    }
}
