//! The in-memory backend: the embedded default.
//!
//! State lives in shards, each a mutex around a compact table. A key's base
//! hash is a SipHash keyed with a random secret per backend (so clients
//! cannot aim collisions), it picks the shard, and each limit's state is
//! found by a 64-bit fingerprint of (key, limit). All limits of one key are
//! in one shard, so a multi-limit decision takes one lock and is atomic.
//!
//! Memory is bounded: each fixed-size state takes one 24-byte slot, tables
//! stay at most 3/4 full, and the backend never holds more than
//! [`max_keys`](MemoryBackendBuilder::max_keys) states of each kind. Expired
//! state is reclaimed without timers or background tasks: a cursor in each
//! shard removes a few expired entries whenever a new key arrives, a growing
//! table drops everything expired before it decides to grow, and a new key
//! reuses an expired slot in its path. When the cursor's pass finds a table
//! under a quarter full (a flood has passed), the table is rebuilt smaller:
//! memory comes back as new clients arrive.
//!
//! ## At the cap
//!
//! When a shard holds as many states as it may and a new key arrives, it
//! first reclaims expired state. If none has expired, [`AtCapacity`] decides:
//!
//! * [`AtCapacity::EvictSoonestExpiring`] (default): the new key replaces the
//!   nearby entry whose state would have expired first — the state whose
//!   loss admits the least extra traffic. A flood of new keys cannot grow
//!   memory, and new clients are never turned away; the price is that an
//!   evicted client starts again with a full quota.
//! * [`AtCapacity::Deny`]: requests from new keys are denied (the decision
//!   says [`is_capacity_exhausted`](crate::Decision::is_capacity_exhausted))
//!   until state expires; known keys are unaffected. No state is ever lost,
//!   but a flood locks out new clients.
//!
//! ```
//! use tower_ratelimit::backend::{AtCapacity, MemoryBackend};
//! use tower_ratelimit::key::Key;
//! use tower_ratelimit::Policy;
//!
//! let backend = MemoryBackend::builder()
//!     .max_keys(100_000)
//!     .at_capacity(AtCapacity::EvictSoonestExpiring)
//!     .build();
//! let policy: Policy = "3/s".parse().unwrap();
//! let key = Key::new("user", "alice");
//! let admitted = (0..5).filter(|_| backend.check_now(&key, &policy, 1).is_allowed()).count();
//! assert_eq!(admitted, 3);
//! ```

mod table;

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::future::{ready, Ready};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use self::table::{Expires, Table};
use super::{Backend, BackendError};
use crate::algorithm::{Form, SlidingLog, SlidingLogState, State};
use crate::clock::{Clock, MonotonicClock};
use crate::key::Key;
use crate::penalty::PenaltyState;
use crate::policy::MAX_LIMITS;
use crate::{Decision, Limit, Micros, Outcome, Policy};

/// What a full backend does with a key it does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtCapacity {
    /// Evict the nearby state that expires soonest (see the module docs).
    #[default]
    EvictSoonestExpiring,
    /// Deny requests from new keys until state expires.
    Deny,
}

const DEFAULT_SHARDS: usize = 64;

/// Rate-limit state in this process's memory.
///
/// Cheap to clone; clones share state. Generic over the [`Clock`] so tests
/// can drive time by hand.
pub struct MemoryBackend<C = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    store: Store,
    clock: C,
}

/// Everything but the clock. Not generic, so the whole decision is compiled
/// (and inlined) here rather than in each crate that names a clock type.
struct Store {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    shard_mask: u64,
    hasher: RandomState,
    at_capacity: AtCapacity,
    max_keys: usize,
    /// Enforce `1 / servers` of each limit (see [`MemoryBackendBuilder::servers`]).
    share: Option<Share>,
}

/// Each policy's share among `servers`, made once per policy.
struct Share {
    servers: u32,
    /// By the policy's address: the policy itself (kept alive, so that the
    /// address is not reused) and its share.
    policies: Mutex<HashMap<usize, (Policy, Policy)>>,
}

impl Share {
    /// Policies a layer resolves are few and long-lived; a resolver that
    /// builds one per request would only refill this.
    const MAX_POLICIES: usize = 1_024;

    fn of(&self, policy: &Policy) -> Policy {
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, share)) = policies.get(&policy.address()) {
            return share.clone();
        }
        if policies.len() >= Self::MAX_POLICIES {
            policies.clear();
        }
        let share = policy.share(self.servers);
        policies.insert(policy.address(), (policy.clone(), share.clone()));
        share
    }
}

/// Keeps each shard's lock on its own cache lines.
#[repr(align(128))]
struct CachePadded<T>(T);

struct Shard {
    states: Table<State>,
    logs: Table<TimedLog>,
}

/// A sliding log with the time it empties, so the table can reclaim it
/// without knowing its window.
#[derive(Default)]
struct TimedLog {
    expires_at: Micros,
    log: SlidingLogState,
}

impl Expires for TimedLog {
    fn expires_at(&self) -> Micros {
        self.expires_at
    }
}

impl MemoryBackend {
    /// The default cap on states of each kind.
    pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

    /// A backend with the defaults: the monotonic clock, at most
    /// [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS) states of each kind,
    /// evicting at the cap.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Configure a backend.
    pub fn builder() -> MemoryBackendBuilder {
        MemoryBackendBuilder {
            clock: MonotonicClock::new(),
            max_keys: Self::DEFAULT_MAX_KEYS,
            shards: DEFAULT_SHARDS,
            at_capacity: AtCapacity::default(),
            servers: 1,
        }
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> MemoryBackend<C> {
    /// Decide a request of `cost` for `key` under `policy`, now.
    pub fn check_now(&self, key: &Key, policy: &Policy, cost: u32) -> Decision {
        self.check_at(key, policy, cost, self.inner.clock.now())
    }

    /// Decide a request of `cost` for `key` under `policy` at `now` (on this
    /// backend's clock): for replaying a trace of your own. Time should not
    /// go backwards for a key; the clock guarantees that for
    /// [`check_now`](Self::check_now), and a small step back (threads
    /// racing for a shard) changes nothing.
    ///
    /// Not part of the public API (hidden from the docs): the conformance
    /// suite's hook. Replay a trace of your own with a
    /// [`ManualClock`](crate::clock::ManualClock) and `check_now`.
    #[doc(hidden)]
    pub fn check_at(&self, key: &Key, policy: &Policy, cost: u32, now: Micros) -> Decision {
        self.inner.store.check(key, policy, cost, now)
    }

    /// Correct a request counted at `reserved` to its `actual` cost, at
    /// `now`: see [`Backend::settle`].
    ///
    /// Not part of the public API (hidden from the docs): the conformance
    /// suite's hook. Replay a trace of your own with a
    /// [`ManualClock`](crate::clock::ManualClock) and `check_now`.
    #[doc(hidden)]
    pub fn settle_at(
        &self,
        key: &Key,
        policy: &Policy,
        reserved: u32,
        actual: u32,
        now: Micros,
    ) -> Decision {
        self.inner.store.settle(key, policy, reserved, actual, now)
    }

    /// Give back (`renew`: false) or renew a permit at `now`: see
    /// [`Backend::release`] and [`Backend::renew`].
    ///
    /// Not part of the public API (hidden from the docs): the conformance
    /// suite's hook. Replay a trace of your own with a
    /// [`ManualClock`](crate::clock::ManualClock) and `check_now`.
    #[doc(hidden)]
    pub fn permit_at(
        &self,
        key: &Key,
        policy: &Policy,
        permit: Micros,
        cost: u32,
        renew: bool,
        now: Micros,
    ) -> Decision {
        self.inner
            .store
            .permit(key, policy, permit, cost, renew, now)
    }

    /// States held (fixed-size states plus sliding logs).
    pub fn len(&self) -> usize {
        self.inner
            .store
            .shards
            .iter()
            .map(|s| {
                let shard = lock(&s.0);
                shard.states.len() + shard.logs.len()
            })
            .sum()
    }

    /// Whether no state is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of memory the state occupies: table slots plus sliding logs'
    /// entries (the heap allocator's own overhead is not counted).
    pub fn memory_bytes(&self) -> usize {
        self.inner
            .store
            .shards
            .iter()
            .map(|s| {
                let shard = lock(&s.0);
                let log_entries: usize = shard.logs.values().map(|l| l.log.heap_bytes()).sum();
                shard.states.slot_bytes() + shard.logs.slot_bytes() + log_entries
            })
            .sum()
    }

    /// The cap on states of each kind.
    pub fn max_keys(&self) -> usize {
        self.inner.store.max_keys
    }
}

impl Store {
    /// `policy` as this backend enforces it: whole, or its share.
    fn local<'a>(&self, policy: &'a Policy) -> Cow<'a, Policy> {
        match &self.share {
            None => Cow::Borrowed(policy),
            Some(share) => Cow::Owned(share.of(policy)),
        }
    }

    fn check(&self, key: &Key, policy: &Policy, cost: u32, now: Micros) -> Decision {
        let policy = self.local(policy);
        let policy = &*policy;
        let base = self.hasher.hash_one(OneWrite(key.as_bytes()));
        let limits = policy.limits();
        let mut shard = self.shard(base);
        if let Some(outcome) = self.check_one(&mut shard, policy, base, cost, now) {
            // The decision is made once the lock is let go.
            drop(shard);
            let mut decision = Decision::empty();
            decision.push(outcome);
            decision.decide();
            return decision;
        }
        // Each limit's fingerprint, and its slot if the key is known.
        let mut found = [(0u64, None); MAX_LIMITS];
        for (f, limit) in found.iter_mut().zip(limits) {
            f.0 = fingerprint(base, limit.id());
        }
        let found = &mut found[..limits.len()];

        let penalty = policy.penalty().zip(policy.penalty_id());
        if let Some((penalty, id)) = penalty {
            if let Some(until) = shard.penalty(base, id).banned_until(penalty, now) {
                return Decision::banned(policy, until.saturating_sub(now));
            }
        }
        let mut decision = Decision::empty();
        for (f, limit) in found.iter_mut().zip(limits) {
            let (outcome, slot) = shard.check(limit, f.0, now, cost);
            f.1 = slot;
            decision.push(outcome);
        }
        decision.decide();

        // One exit, so the decision is built where the caller wants it.
        let mut committed = false;
        if cost > 0 && (decision.is_allowed() || policy.counts_denied()) {
            let lacking = match self.at_capacity {
                AtCapacity::Deny => shard.lacks_room(limits, found, now),
                AtCapacity::EvictSoonestExpiring => None,
            };
            if let Some((index, retry_at)) = lacking {
                decision.exhaust_capacity(index, retry_at.saturating_sub(now));
            } else {
                // Known keys first, by slot; then new ones, whose insertion
                // may move other entries.
                for (&(_, slot), limit) in found.iter().zip(limits) {
                    if let Some(slot) = slot {
                        shard.consume_at(limit, slot, now, cost);
                    }
                }
                for (&(fp, slot), limit) in found.iter().zip(limits) {
                    if slot.is_none() {
                        shard.consume_new(limit, fp, now, cost);
                    }
                }
                committed = true;
                if limits.iter().any(Limit::is_concurrent) {
                    decision = decision.with_permit(now);
                }
            }
        }
        if !decision.is_allowed() {
            // Report what each limit holds now. A limit that denied already
            // reports that, unless the denial was counted; a limit that would
            // have allowed reported the state after a consumption that did
            // not happen.
            for (i, (&(fp, _), limit)) in found.iter().zip(limits).enumerate() {
                let reported = decision.outcome(i).is_some_and(|o| o.is_allowed());
                if reported || committed {
                    decision.report_state(i, shard.check(limit, fp, now, 0).0);
                }
            }
            // A strike is the client's own denial: not a peek, not a full table.
            let struck = cost > 0 && !decision.is_capacity_exhausted();
            if let Some((penalty, id)) = penalty.filter(|_| struck) {
                let mut state = shard.penalty(base, id);
                if let Some(ban) = state.strike(penalty, now) {
                    decision.ban(ban);
                }
                shard.set_penalty(base, id, state, now);
            }
        }
        decision
    }

    /// The common case on its own path: one limit (not of requests in
    /// flight), no penalty box, denials not counted. The same shard steps as
    /// the general path below, without its per-limit arrays and reports; the
    /// same outcome (`None`: a full table, left to that path).
    fn check_one(
        &self,
        shard: &mut Shard,
        policy: &Policy,
        base: u64,
        cost: u32,
        now: Micros,
    ) -> Option<Outcome> {
        let ([limit], None, false) = (policy.limits(), policy.penalty(), policy.counts_denied())
        else {
            return None;
        };
        if limit.is_concurrent() {
            return None; // its admissions carry a permit
        }
        let fp = fingerprint(base, limit.id());
        let (outcome, slot) = shard.check(limit, fp, now, cost);
        if cost > 0 && outcome.is_allowed() {
            match slot {
                Some(slot) => shard.consume_at(limit, slot, now, cost),
                None if matches!(self.at_capacity, AtCapacity::Deny)
                    && shard
                        .lacks_room(policy.limits(), &[(fp, None)], now)
                        .is_some() =>
                {
                    return None
                }
                None => shard.consume_new(limit, fp, now, cost),
            }
        }
        Some(outcome)
    }

    fn settle(
        &self,
        key: &Key,
        policy: &Policy,
        reserved: u32,
        actual: u32,
        now: Micros,
    ) -> Decision {
        self.after_each(key, policy, now, |shard, limit, fp| {
            if limit.is_concurrent() {
                // A permit is given back when the request ends, not settled.
            } else if actual < reserved {
                shard.refund(limit, fp, now, reserved - actual);
            } else if actual > reserved {
                // Charged whatever the limit says, up to its capacity: the
                // work is done.
                match shard.check(limit, fp, now, 0).1 {
                    Some(slot) => shard.consume_at(limit, slot, now, actual - reserved),
                    None => shard.consume_new(limit, fp, now, actual - reserved),
                }
            }
        })
    }

    /// Give back (`renew`: false) or renew the permit taken at `permit` on
    /// each limit of requests in flight.
    fn permit(
        &self,
        key: &Key,
        policy: &Policy,
        permit: Micros,
        cost: u32,
        renew: bool,
        now: Micros,
    ) -> Decision {
        let mut held = true;
        let decision = self.after_each(key, policy, now, |shard, limit, fp| {
            let (true, Form::Log(log)) = (limit.is_concurrent(), limit.rule().form()) else {
                return;
            };
            let found = shard.logs.find(fp).is_some_and(|i| {
                let timed = shard.logs.at_mut(i);
                let found = log.release(&mut timed.log, now, permit, cost);
                if found && renew {
                    log.consume(&mut timed.log, now, cost);
                }
                timed.expires_at = timed.log.expires_at(log.window());
                found
            });
            held &= found;
        });
        if renew && held {
            decision.with_permit(now)
        } else {
            decision
        }
    }

    /// Run `change` on each limit's state of `key` under one lock, then
    /// report what each limit holds.
    fn after_each(
        &self,
        key: &Key,
        policy: &Policy,
        now: Micros,
        mut change: impl FnMut(&mut Shard, &Limit, u64),
    ) -> Decision {
        let policy = self.local(policy);
        let policy = &*policy;
        let base = self.hasher.hash_one(OneWrite(key.as_bytes()));
        let mut shard = self.shard(base);
        let mut decision = Decision::empty();
        for limit in policy.limits() {
            let fp = fingerprint(base, limit.id());
            change(&mut shard, limit, fp);
            decision.push(shard.check(limit, fp, now, 0).0);
        }
        decision.decide();
        decision
    }

    #[inline]
    fn shard(&self, base: u64) -> MutexGuard<'_, Shard> {
        // The high bits pick the shard; fingerprints mix all bits anew.
        lock(&self.shards[((base >> 40) & self.shard_mask) as usize].0)
    }
}

/// Our critical sections cannot panic half-way, so a poisoned lock still
/// guards consistent state.
#[inline]
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hashes bytes in one write. `[u8]`'s own `Hash` also writes a length
/// prefix, which only matters when several values share one hasher; SipHash
/// folds the total length into the result anyway.
struct OneWrite<'a>(&'a [u8]);

impl Hash for OneWrite<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0);
    }
}

/// A limit's own fingerprint of a key: a bijective mix of the key's base
/// hash with the limit's identity, never 0 (0 marks an empty slot).
#[inline]
fn fingerprint(base: u64, limit_id: u64) -> u64 {
    let mut x = base ^ limit_id;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x.max(1)
}

/// Where a penalty box keeps a key's strikes and bans: two more
/// fingerprints in the states table, apart from the limits' as theirs are
/// from each other.
#[inline]
fn penalty_fingerprints(base: u64, penalty_id: u64) -> [u64; 2] {
    [
        fingerprint(base, penalty_id),
        fingerprint(base, penalty_id ^ 0x9e37_79b9_7f4a_7c15),
    ]
}

impl Shard {
    /// What `limit` says about `cost` for fingerprint `fp`, and the slot
    /// holding its state if there is one.
    #[inline]
    fn check(
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
            Form::Log(log) => {
                let slot = self.logs.find(fp);
                let outcome = match slot {
                    Some(i) => log.check(&mut self.logs.at_mut(i).log, now, cost),
                    None => log.check(&mut SlidingLogState::default(), now, cost),
                };
                (outcome, slot)
            }
        }
    }

    /// A key's state under a penalty box (fresh if there is none).
    fn penalty(&self, base: u64, id: u64) -> PenaltyState {
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

    fn set_penalty(&mut self, base: u64, id: u64, state: PenaltyState, now: Micros) {
        let [strikes, bans] = penalty_fingerprints(base, id);
        for (fp, value) in [(strikes, state.strikes), (bans, state.bans)] {
            match self.states.find(fp) {
                Some(i) => *self.states.at_mut(i) = value,
                None if !value.is_expired(now) => *self.states.insert(fp, value, now) = value,
                None => {}
            }
        }
    }

    /// Give back `units` of `limit`'s state at `fp`, if it has one.
    fn refund(&mut self, limit: &Limit, fp: u64, now: Micros, units: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                if let Some(slot) = self.states.find(fp) {
                    let state = self.states.at_mut(slot);
                    *state = rule.refund(*state, now, units);
                }
            }
            Form::Log(log) => {
                if let Some(slot) = self.logs.find(fp) {
                    let timed = self.logs.at_mut(slot);
                    log.refund(&mut timed.log, now, units);
                    timed.expires_at = timed.log.expires_at(log.window());
                }
            }
        }
    }

    /// Count `cost` in the state at `slot`.
    #[inline]
    fn consume_at(&mut self, limit: &Limit, slot: usize, now: Micros, cost: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                let state = self.states.at_mut(slot);
                *state = rule.consume(*state, now, cost);
            }
            Form::Log(log) => consume_log(log, self.logs.at_mut(slot), now, cost),
        }
    }

    /// Count `cost` for a key `limit` holds no state for yet.
    fn consume_new(&mut self, limit: &Limit, fp: u64, now: Micros, cost: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                let state = rule.consume(State::default(), now, cost);
                self.states.insert(fp, state, now);
            }
            Form::Log(log) => {
                let timed = self.logs.insert(fp, TimedLog::default(), now);
                consume_log(log, timed, now, cost);
            }
        }
    }

    /// For [`AtCapacity::Deny`]: the first limit whose new state finds no
    /// room, and when room is likely.
    fn lacks_room(
        &mut self,
        limits: &[Limit],
        found: &[(u64, Option<usize>)],
        now: Micros,
    ) -> Option<(usize, Micros)> {
        // (count of new entries, first new one) for states and for logs.
        let mut new_states = (0, None);
        let mut new_logs = (0, None);
        for (i, (limit, &(fp, slot))) in limits.iter().zip(found).enumerate() {
            let counter = match limit.rule().form() {
                Form::Fixed(_) => &mut new_states,
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
        if let (n, Some((i, fp))) = new_logs {
            if !self.logs.has_room(fp, n, now) {
                return Some((i, self.logs.soonest_expiry_near(fp)));
            }
        }
        None
    }
}

fn consume_log(log: &SlidingLog, timed: &mut TimedLog, now: Micros, cost: u32) {
    log.consume(&mut timed.log, now, cost);
    timed.expires_at = timed.log.expires_at(log.window());
}

impl<C> Clone for MemoryBackend<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for MemoryBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("shards", &self.inner.store.shards.len())
            .field("max_keys", &self.inner.store.max_keys)
            .field("at_capacity", &self.inner.store.at_capacity)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Backend for MemoryBackend<C> {
    type Future = Ready<Result<Decision, BackendError>>;

    fn name(&self) -> &'static str {
        "memory"
    }

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        ready(Ok(self.check_now(key, policy, cost)))
    }

    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        let now = self.inner.clock.now();
        ready(Ok(self.settle_at(key, policy, reserved, actual, now)))
    }

    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        let now = self.inner.clock.now();
        ready(Ok(self.permit_at(key, policy, permit, cost, false, now)))
    }

    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        let now = self.inner.clock.now();
        ready(Ok(self.permit_at(key, policy, permit, cost, true, now)))
    }
}

/// Configures a [`MemoryBackend`].
#[derive(Debug)]
#[must_use]
pub struct MemoryBackendBuilder<C = MonotonicClock> {
    clock: C,
    max_keys: usize,
    shards: usize,
    at_capacity: AtCapacity,
    servers: u32,
}

impl<C: Clock> MemoryBackendBuilder<C> {
    /// Hold at most this many fixed-size states, and at most this many
    /// sliding logs (one per key per limit). Default
    /// [`MemoryBackend::DEFAULT_MAX_KEYS`].
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// What to do with a new key when full. Default: evict.
    pub fn at_capacity(mut self, at_capacity: AtCapacity) -> Self {
        self.at_capacity = at_capacity;
        self
    }

    /// Number of independently locked shards, rounded up to a power of two
    /// (default 64, fewer for caps under 1,024 so that each holds at least
    /// 16). The cap is split evenly between them: a shard is full at
    /// `max_keys / shards`. Keys spread over shards by a keyed hash, so at
    /// realistic caps shards fill within a few percent of each other.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(1, 1 << 16).next_power_of_two();
        self
    }

    /// Enforce `1 / servers` of each limit (rounded up, at least 1; bursts
    /// too): each server's share of a limit it would otherwise share with
    /// `servers − 1` others. For a local [fallback](crate::backend::Fallback)
    /// behind Redis: while Redis is down, the servers together admit about
    /// what the limit says, not `servers` times it. Default 1: the whole
    /// limit. Decisions and headers report the share.
    ///
    /// ```
    /// use tower_ratelimit::backend::MemoryBackend;
    /// use tower_ratelimit::key::Key;
    /// use tower_ratelimit::Policy;
    ///
    /// let local = MemoryBackend::builder().servers(10).build();
    /// let policy: Policy = "100/min".parse().unwrap();
    /// let key = Key::new("user", "alice");
    /// let admitted = (0..20).filter(|_| local.check_now(&key, &policy, 1).is_allowed()).count();
    /// assert_eq!(admitted, 10);
    /// ```
    pub fn servers(mut self, servers: u32) -> Self {
        self.servers = servers.max(1);
        self
    }

    /// Read time from `clock` (a [`ManualClock`](crate::clock::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> MemoryBackendBuilder<C2> {
        MemoryBackendBuilder {
            clock,
            max_keys: self.max_keys,
            shards: self.shards,
            at_capacity: self.at_capacity,
            servers: self.servers,
        }
    }

    /// The backend.
    pub fn build(self) -> MemoryBackend<C> {
        // At least 16 states per shard, so a small cap is not split to nothing.
        let most_shards = ((self.max_keys / 16).max(1) + 1).next_power_of_two() / 2;
        let shards = self.shards.min(most_shards.max(1));
        let per_shard = self.max_keys / shards;
        let shards_vec = (0..shards)
            .map(|_| {
                CachePadded(Mutex::new(Shard {
                    states: Table::new(per_shard),
                    logs: Table::new(per_shard),
                }))
            })
            .collect();
        MemoryBackend {
            inner: Arc::new(Inner {
                store: Store {
                    shards: shards_vec,
                    shard_mask: shards as u64 - 1,
                    hasher: RandomState::new(),
                    at_capacity: self.at_capacity,
                    max_keys: per_shard * shards,
                    share: (self.servers > 1).then(|| Share {
                        servers: self.servers,
                        policies: Mutex::default(),
                    }),
                },
                clock: self.clock,
            }),
        }
    }
}
