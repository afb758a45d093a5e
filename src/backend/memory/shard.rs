//! The states of the keys behind one lock, and the steps a decision takes
//! on them: check a limit, count or give back units, keep a penalty box's
//! strikes and bans, find room for a new key.
//!
//! A shard is generic over where its entries live: the memory backend's
//! bounded tables ([`Table`]), or one key's few entries that an outside
//! store keeps ([`KeyStates`](crate::backend::KeyStates)). The decision
//! code (`decide.rs`) runs on either, so both decide exactly alike.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use super::bucket::Tat;
use super::table::{Expires, Table, KEPT};
use crate::algorithm::{Form, SlidingLog, SlidingLogState, State};
use crate::policy::penalty::PenaltyState;
use crate::{algorithm::Outcome, clock::Micros, Limit};

/// Entries by a 64-bit fingerprint (never 0): what a shard needs of the
/// place its states live.
pub(crate) trait Entries<V> {
    /// The slot holding `fp`; valid until the next insertion.
    fn find(&self, fp: u64) -> Option<usize>;
    /// The value in `slot`.
    fn at(&self, slot: usize) -> &V;
    /// The value in `slot`, to change.
    fn at_mut(&mut self, slot: usize) -> &mut V;
    /// Insert `fp`, which must be absent.
    fn insert(&mut self, fp: u64, value: V, now: Micros) -> &mut V;
    /// Whether `needed` new entries, the first at `fp`, fit.
    fn has_room(&mut self, fp: u64, needed: usize, now: Micros) -> bool;
    /// When an entry near `fp` is likely to make room.
    fn soonest_expiry_near(&self, fp: u64) -> Micros;
    /// Drop expired entries among the next `slots` (moves entries).
    fn reclaim(&mut self, _now: Micros, _slots: usize) {}
    /// Drop `fp`'s entry, if there is one (moves entries).
    fn remove(&mut self, fp: u64);
    /// Mark the entry in `slot` to be evicted last (a ban, strikes, a
    /// state that denied).
    fn keep(&mut self, slot: usize);
}

impl<V: Expires> Entries<V> for Table<V> {
    #[inline]
    fn find(&self, fp: u64) -> Option<usize> {
        Table::find(self, fp)
    }
    #[inline]
    fn at(&self, slot: usize) -> &V {
        Table::at(self, slot)
    }
    #[inline]
    fn at_mut(&mut self, slot: usize) -> &mut V {
        Table::at_mut(self, slot)
    }
    #[inline]
    fn insert(&mut self, fp: u64, value: V, now: Micros) -> &mut V {
        Table::insert(self, fp, value, now)
    }
    fn has_room(&mut self, fp: u64, needed: usize, now: Micros) -> bool {
        Table::has_room(self, fp, needed, now)
    }
    fn soonest_expiry_near(&self, fp: u64) -> Micros {
        Table::soonest_expiry_near(self, fp)
    }
    fn reclaim(&mut self, now: Micros, slots: usize) {
        Table::reclaim_step(self, now, slots);
    }
    fn remove(&mut self, fp: u64) {
        Table::remove(self, fp);
    }
    #[inline]
    fn keep(&mut self, slot: usize) {
        Table::keep(self, slot);
    }
}

/// Fixed-size states, buckets' words and sliding logs, by fingerprint.
///
/// `repr(C)`, buckets first: the lock-free path reads the shard's lock and
/// the buckets' table from one cache line.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Shard<S = Table<State>, L = Table<TimedLog>, B = Table<Tat>> {
    /// The buckets' states, one word each (16-byte slots), apart from the
    /// windows' two words: denser, and changed in place by the lock-free
    /// path (`bucket.rs`).
    pub(crate) buckets: B,
    pub(crate) states: S,
    pub(crate) logs: L,
    /// What this shard's logs may take of the backend's log bytes (`None`:
    /// unbounded but by each log's own limit, as in an outside store).
    pub(crate) log_bytes: Option<Arc<LogBytes>>,
}

/// The heap bytes a backend's sliding logs hold, across every key, and the
/// most they may: a log that must grow past it does not.
#[derive(Debug)]
pub(crate) struct LogBytes {
    held: AtomicUsize,
    max: usize,
}

impl LogBytes {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            held: AtomicUsize::new(0),
            max,
        }
    }

    pub(crate) fn held(&self) -> usize {
        self.held.load(Relaxed)
    }

    fn fits(&self, more: usize) -> bool {
        more == 0 || self.held().saturating_add(more) <= self.max
    }
}

/// A sliding log with the time it empties, so the table can reclaim it
/// without knowing its window, and the byte count its heap is charged to.
/// Every change to its entries goes through [`change`](Self::change), and
/// dropping it (expired, evicted, replaced) gives its bytes back.
#[derive(Default)]
pub(crate) struct TimedLog {
    pub(crate) expires_at: Micros,
    log: SlidingLogState,
    bytes: Option<Arc<LogBytes>>,
}

impl TimedLog {
    fn new(bytes: Option<Arc<LogBytes>>) -> Self {
        Self {
            expires_at: Micros::ZERO,
            log: SlidingLogState::default(),
            bytes,
        }
    }

    pub(crate) fn log(&self) -> &SlidingLogState {
        &self.log
    }

    /// Whether one more entry fits under the backend's log bytes.
    fn can_grow(&self) -> bool {
        self.bytes
            .as_ref()
            .is_none_or(|bytes| bytes.fits(self.log.growth_bytes()))
    }

    /// Change the log under `rule`, keeping its expiry and its bytes' count.
    pub(crate) fn change<T>(
        &mut self,
        rule: &SlidingLog,
        change: impl FnOnce(&SlidingLog, &mut SlidingLogState) -> T,
    ) -> T {
        let before = self.log.heap_bytes();
        let out = change(rule, &mut self.log);
        self.log.shrink_if_sparse();
        let after = self.log.heap_bytes();
        if let Some(bytes) = &self.bytes {
            if after > before {
                bytes.held.fetch_add(after - before, Relaxed);
            } else if before > after {
                bytes.held.fetch_sub(before - after, Relaxed);
            }
        }
        self.expires_at = self.log.expires_at(rule.window());
        out
    }
}

impl Drop for TimedLog {
    fn drop(&mut self) {
        if let Some(bytes) = &self.bytes {
            bytes.held.fetch_sub(self.log.heap_bytes(), Relaxed);
        }
    }
}

impl Expires for TimedLog {
    fn expires_at(&self) -> Micros {
        self.expires_at
    }
}

impl<S: Entries<State>, L: Entries<TimedLog>, B: Entries<Tat>> Shard<S, L, B> {
    /// What `limit` says about `cost` for fingerprint `fp`, and the slot
    /// holding its state if there is one.
    #[inline]
    pub(crate) fn check(
        &mut self,
        limit: &Limit,
        fp: u64,
        now: Micros,
        cost: u32,
    ) -> (Outcome, Option<usize>) {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                let slot = self.states.find(fp);
                let state = slot.map_or_else(State::default, |i| *self.states.at(i));
                (rule.check(state, now, cost), slot)
            }
            Form::Bucket(rule) => {
                let slot = self.buckets.find(fp);
                let state = slot.map_or_else(State::default, |i| self.buckets.at(i).get());
                (rule.check(state, now, cost), slot)
            }
            Form::Log(log) => {
                let slot = self.logs.find(fp);
                let outcome = match slot {
                    Some(i) => self
                        .logs
                        .at_mut(i)
                        .change(log, |log, s| log.check(s, now, cost)),
                    None => log.check(&mut SlidingLogState::default(), now, cost),
                };
                (outcome, slot)
            }
        }
    }

    /// Forget `limit`'s state at `fp`.
    pub(crate) fn forget(&mut self, limit: &Limit, fp: u64) {
        match limit.rule().form() {
            Form::Fixed(_) => self.states.remove(fp),
            Form::Bucket(_) => self.buckets.remove(fp),
            Form::Log(_) => self.logs.remove(fp),
        }
    }

    /// Forget a key's strikes and bans under a penalty box.
    pub(crate) fn forget_penalty(&mut self, base: u64, id: u64) {
        for fp in penalty_fingerprints(base, id) {
            self.states.remove(fp);
        }
    }

    /// A key's state under a penalty box (fresh if there is none).
    pub(crate) fn penalty(&self, base: u64, id: u64) -> PenaltyState {
        let [strikes, bans] = penalty_fingerprints(base, id);
        let state = |fp| {
            self.states
                .find(fp)
                .map_or_else(State::default, |i| *self.states.at(i))
        };
        PenaltyState {
            strikes: state(strikes),
            bans: state(bans),
        }
    }

    /// Keep a key's strikes and bans, marked to be evicted last: the state
    /// an attacker most wants gone.
    pub(crate) fn set_penalty(&mut self, base: u64, id: u64, state: PenaltyState, now: Micros) {
        let [strikes, bans] = penalty_fingerprints(base, id);
        for (fp, value) in [(strikes, state.strikes), (bans, state.bans)] {
            match self.states.find(fp) {
                Some(i) => *self.states.at_mut(i) = value,
                None if !value.is_expired(now) => *self.states.insert(fp, value, now) = value,
                None => continue,
            }
            if let Some(i) = self.states.find(fp) {
                self.states.keep(i);
            }
        }
    }

    /// Mark `limit`'s state at `fp`, which denied a request, to be evicted
    /// last: evicting it would give a client held back a fresh budget.
    pub(crate) fn keep_denying(&mut self, limit: &Limit, fp: u64) {
        match limit.rule().form() {
            Form::Fixed(_) => {
                if let Some(i) = self.states.find(fp) {
                    self.states.keep(i);
                }
            }
            Form::Bucket(_) => {
                if let Some(i) = self.buckets.find(fp) {
                    self.buckets.keep(i);
                }
            }
            Form::Log(_) => {
                if let Some(i) = self.logs.find(fp) {
                    self.logs.keep(i);
                }
            }
        }
    }

    /// Give back `units` of `limit`'s state at `fp`, if it has one.
    pub(crate) fn refund(&mut self, limit: &Limit, fp: u64, now: Micros, units: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                if let Some(slot) = self.states.find(fp) {
                    let state = self.states.at_mut(slot);
                    *state = rule.refund(*state, now, units);
                }
            }
            Form::Bucket(rule) => {
                if let Some(slot) = self.buckets.find(fp) {
                    let tat = self.buckets.at_mut(slot);
                    tat.set(rule.refund(tat.get(), now, units));
                }
            }
            Form::Log(log) => {
                if let Some(slot) = self.logs.find(fp) {
                    let timed = self.logs.at_mut(slot);
                    timed.change(log, |log, s| log.refund(s, now, units));
                }
            }
        }
    }

    /// Charge `units` used beyond a reservation to `limit`'s state at `fp`,
    /// past the limit if need be (a debt).
    pub(crate) fn charge(&mut self, limit: &Limit, fp: u64, now: Micros, units: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => match self.states.find(fp) {
                Some(slot) => {
                    let state = self.states.at_mut(slot);
                    *state = rule.charge(*state, now, units);
                }
                None => {
                    let state = rule.charge(State::default(), now, units);
                    self.states.insert(fp, state, now);
                }
            },
            Form::Bucket(rule) => match self.buckets.find(fp) {
                Some(slot) => {
                    let tat = self.buckets.at_mut(slot);
                    tat.set(rule.charge(tat.get(), now, units));
                }
                None => {
                    let state = rule.charge(State::default(), now, units);
                    self.buckets.insert(fp, Tat::new(state), now);
                }
            },
            Form::Log(log) => {
                let timed = match self.logs.find(fp) {
                    Some(slot) => self.logs.at_mut(slot),
                    None => self
                        .logs
                        .insert(fp, TimedLog::new(self.log_bytes.clone()), now),
                };
                // The work is done, so a debt is never forgiven: past the
                // log bytes it joins the newest entry instead of a new one.
                let room = timed.can_grow();
                timed.change(log, |log, s| {
                    if room || !s.merge_into_newest(now, units) {
                        log.charge(s, now, units);
                    }
                });
            }
        }
    }

    /// Count `cost` in the state at `slot`.
    #[inline]
    pub(crate) fn consume_at(&mut self, limit: &Limit, slot: usize, now: Micros, cost: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                let state = self.states.at_mut(slot);
                *state = rule.consume(*state, now, cost);
            }
            Form::Bucket(rule) => {
                let tat = self.buckets.at_mut(slot);
                tat.set(rule.consume(tat.get(), now, cost));
            }
            Form::Log(log) => {
                let timed = self.logs.at_mut(slot);
                timed.change(log, |log, s| log.consume(s, now, cost));
            }
        }
    }

    /// Count `cost` for a key `limit` holds no state for yet.
    pub(crate) fn consume_new(&mut self, limit: &Limit, fp: u64, now: Micros, cost: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                let state = rule.consume(State::default(), now, cost);
                self.states.insert(fp, state, now);
            }
            Form::Bucket(rule) => {
                let state = rule.consume(State::default(), now, cost);
                self.buckets.insert(fp, Tat::new(state), now);
            }
            Form::Log(log) => {
                let timed = self
                    .logs
                    .insert(fp, TimedLog::new(self.log_bytes.clone()), now);
                timed.change(log, |log, s| log.consume(s, now, cost));
            }
        }
    }

    /// The first sliding log among `limits` that would have to grow past
    /// the backend's log bytes to count a request, and when room is likely
    /// (its window ahead: by then this key's own entries have left).
    ///
    /// When one does not fit, the expired logs among the next few slots are
    /// dropped first (their bytes are dead weight) and it is asked again:
    /// this moves entries, so slots found before are stale after a `Some`.
    pub(crate) fn lacks_log_bytes(
        &mut self,
        limits: &[Limit],
        found: &mut [(u64, Option<usize>)],
        now: Micros,
    ) -> Option<(usize, Micros)> {
        let lacking = |shard: &Self, found: &[(u64, Option<usize>)]| {
            let bytes = shard.log_bytes.as_ref()?;
            limits
                .iter()
                .zip(found)
                .enumerate()
                .find_map(|(i, (limit, &(_, slot)))| {
                    let Form::Log(log) = limit.rule().form() else {
                        return None;
                    };
                    let fits = match slot {
                        Some(slot) => shard.logs.at(slot).can_grow(),
                        None => bytes.fits(SlidingLogState::default().growth_bytes()),
                    };
                    (!fits).then(|| (i, now.saturating_add(log.window())))
                })
        };
        lacking(self, found)?;
        self.logs.reclaim(now, RECLAIM_FOR_BYTES);
        self.refind(limits, found);
        lacking(self, found)
    }

    /// Find each limit's slot again, after entries may have moved.
    pub(crate) fn refind(&self, limits: &[Limit], found: &mut [(u64, Option<usize>)]) {
        for ((fp, slot), limit) in found.iter_mut().zip(limits) {
            *slot = match limit.rule().form() {
                Form::Fixed(_) => self.states.find(*fp),
                Form::Bucket(_) => self.buckets.find(*fp),
                Form::Log(_) => self.logs.find(*fp),
            };
        }
    }

    /// For [`AtCapacity::Deny`]: the first limit whose new state finds no
    /// room, and when room is likely.
    pub(crate) fn lacks_room(
        &mut self,
        limits: &[Limit],
        found: &[(u64, Option<usize>)],
        now: Micros,
    ) -> Option<(usize, Micros)> {
        // (count of new entries, first new one) for each table.
        let mut new_states = (0, None);
        let mut new_buckets = (0, None);
        let mut new_logs = (0, None);
        for (i, (limit, &(fp, slot))) in limits.iter().zip(found).enumerate() {
            let counter = match limit.rule().form() {
                Form::Fixed(_) => &mut new_states,
                Form::Bucket(_) => &mut new_buckets,
                Form::Log(_) => &mut new_logs,
            };
            if slot.is_none() {
                counter.0 += 1;
                counter.1 = counter.1.or(Some((i, fp)));
            }
        }
        if let (n, Some((i, fp))) = new_states {
            if !self.states.has_room(fp, n, now) {
                return Some((i, self.states.soonest_expiry_near(fp)));
            }
        }
        if let (n, Some((i, fp))) = new_buckets {
            if !self.buckets.has_room(fp, n, now) {
                return Some((i, self.buckets.soonest_expiry_near(fp)));
            }
        }
        if let (n, Some((i, fp))) = new_logs {
            if !self.logs.has_room(fp, n, now) {
                return Some((i, self.logs.soonest_expiry_near(fp)));
            }
        }
        None
    }
}

/// Slots of the logs' table looked at for expired logs when the log bytes
/// are short: bounded work per request, like the cap's own reclaiming.
const RECLAIM_FOR_BYTES: usize = 64;

/// A limit's own fingerprint of a key: the key's base hash (keyed
/// SipHash, so nobody can aim one key at another's) told apart by the
/// limit's identity (itself a hash), even (the low bit is [`KEPT`]'s) and
/// never 0 (0 marks an empty slot). A table places it by its high bits,
/// which the shard's choice (the low bits) leaves uniform.
#[inline]
pub(crate) fn fingerprint(base: u64, limit_id: u64) -> u64 {
    ((base ^ limit_id) & !KEPT).max(2)
}

/// Where a penalty box keeps a key's strikes and bans: two more
/// fingerprints in the states table, apart from the limits' as theirs are
/// from each other.
#[inline]
pub(crate) fn penalty_fingerprints(base: u64, penalty_id: u64) -> [u64; 2] {
    [
        fingerprint(base, penalty_id),
        fingerprint(base, penalty_id ^ 0x9e37_79b9_7f4a_7c15),
    ]
}
