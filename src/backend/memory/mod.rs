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
//! reuses an expired slot in its path.
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
//! use tower_ratelimit::{AtCapacity, Key, MemoryBackend, Policy};
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

use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::{ready, Ready};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use self::table::{Expires, Table};
use super::{Backend, BackendError};
use crate::algorithm::{Form, Outcome, SlidingLogState, State};
use crate::clock::{Clock, MonotonicClock};
use crate::policy::MAX_LIMITS;
use crate::{Decision, Key, Limit, Policy};

/// What a full backend does with a key it does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtCapacity {
    /// Evict the nearby state that expires soonest (see the module docs).
    #[default]
    EvictSoonestExpiring,
    /// Deny requests from new keys until state expires.
    Deny,
}

/// The default cap on states of each kind.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
const DEFAULT_SHARDS: usize = 64;

/// Rate-limit state in this process's memory.
///
/// Cheap to clone; clones share state. Generic over the [`Clock`] so tests
/// can drive time by hand.
pub struct MemoryBackend<C = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    shard_mask: u64,
    hasher: RandomState,
    clock: C,
    at_capacity: AtCapacity,
    max_keys: usize,
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
    expires_at: u64,
    log: SlidingLogState,
}

impl Expires for TimedLog {
    fn expires_at(&self) -> u64 {
        self.expires_at
    }
}

impl MemoryBackend {
    /// A backend with the defaults: the monotonic clock, at most
    /// [`DEFAULT_MAX_KEYS`] states of each kind, evicting at the cap.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Configure a backend.
    pub fn builder() -> MemoryBackendBuilder {
        MemoryBackendBuilder {
            clock: MonotonicClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            shards: DEFAULT_SHARDS,
            at_capacity: AtCapacity::default(),
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
        self.check_at(key, policy, cost, self.inner.clock.now_us())
    }

    /// Decide a request of `cost` for `key` under `policy` at `now_us`
    /// (microseconds on this backend's clock). Time must not go backwards for
    /// a key; the clock guarantees that for [`check_now`](Self::check_now).
    pub fn check_at(&self, key: &Key, policy: &Policy, cost: u32, now_us: u64) -> Decision {
        let base = self.inner.hasher.hash_one(key.as_bytes());
        let mut shard = self.inner.shard(base);
        let limits = policy.limits();
        let mut fps = [0u64; MAX_LIMITS];
        for (fp, limit) in fps.iter_mut().zip(limits) {
            *fp = fingerprint(base, limit.id());
        }
        let fps = &fps[..limits.len()];

        let mut outcomes = [Outcome::allowed(0, 0, 0); MAX_LIMITS];
        for ((outcome, limit), &fp) in outcomes.iter_mut().zip(limits).zip(fps) {
            *outcome = shard.check(limit, fp, now_us, cost);
        }
        let mut decision = Decision::from_outcomes(&outcomes[..limits.len()]);

        let commit = cost > 0 && (decision.is_allowed() || policy.counts_denied());
        if commit {
            if self.inner.at_capacity == AtCapacity::Deny {
                if let Some((index, retry_at)) = shard.lacks_room(limits, fps, now_us) {
                    return decision.capacity_exhausted(index, retry_at.saturating_sub(now_us));
                }
            }
            for (limit, &fp) in limits.iter().zip(fps) {
                shard.consume(limit, fp, now_us, cost);
            }
        }
        if !decision.is_allowed() {
            // What each limit holds now, for headers: nothing was taken from
            // the limits that would have allowed the request (or, when denied
            // requests count, something was taken from all of them).
            for (i, (limit, &fp)) in limits.iter().zip(fps).enumerate() {
                let now = shard.check(limit, fp, now_us, 0);
                decision.report_state(i, now);
            }
        }
        decision
    }

    /// States held (fixed-size states plus sliding logs).
    pub fn len(&self) -> usize {
        self.inner
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
        self.inner.max_keys
    }
}

impl<C> Inner<C> {
    fn shard(&self, base: u64) -> MutexGuard<'_, Shard> {
        // The high bits pick the shard; fingerprints mix all bits anew.
        lock(&self.shards[((base >> 40) & self.shard_mask) as usize].0)
    }
}

/// Our critical sections cannot panic half-way, so a poisoned lock still
/// guards consistent state.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A limit's own fingerprint of a key: a bijective mix of the key's base
/// hash with the limit's identity, never 0 (0 marks an empty slot).
fn fingerprint(base: u64, limit_id: u64) -> u64 {
    let mut x = base ^ limit_id;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x.max(1)
}

impl Shard {
    fn check(&mut self, limit: &Limit, fp: u64, now: u64, cost: u32) -> Outcome {
        match limit.rule().form() {
            Form::Fixed(rule) => {
                let state = self.states.get(fp).copied().unwrap_or_default();
                rule.check(state, now, cost)
            }
            Form::Log(log) => match self.logs.get_mut(fp) {
                Some(timed) => log.check(&mut timed.log, now, cost),
                None => log.check(&mut SlidingLogState::default(), now, cost),
            },
        }
    }

    fn consume(&mut self, limit: &Limit, fp: u64, now: u64, cost: u32) {
        match limit.rule().form() {
            Form::Fixed(rule) => match self.states.get_mut(fp) {
                Some(state) => *state = rule.consume(*state, now, cost),
                None => {
                    let state = rule.consume(State::default(), now, cost);
                    self.states.insert(fp, state, now);
                }
            },
            Form::Log(log) => {
                let timed = match self.logs.get_mut(fp) {
                    Some(timed) => timed,
                    None => self.logs.insert(fp, TimedLog::default(), now),
                };
                log.consume(&mut timed.log, now, cost);
                timed.expires_at = timed.log.expires_at(log.window_us());
            }
        }
    }

    /// For [`AtCapacity::Deny`]: the first limit whose new state finds no
    /// room, and when room is likely.
    fn lacks_room(&mut self, limits: &[Limit], fps: &[u64], now: u64) -> Option<(usize, u64)> {
        // (count of new entries, first new one) for states and for logs.
        let mut new_states = (0, None);
        let mut new_logs = (0, None);
        for (i, (limit, &fp)) in limits.iter().zip(fps).enumerate() {
            let (known, counter) = match limit.rule().form() {
                Form::Fixed(_) => (self.states.get(fp).is_some(), &mut new_states),
                Form::Log(_) => (self.logs.get(fp).is_some(), &mut new_logs),
            };
            if !known {
                counter.0 += 1;
                counter.1 = counter.1.or(Some((i, fp)));
            }
        }
        if let (n, Some((i, fp))) = new_states {
            if !self.states.has_room(n, now) {
                return Some((i, self.states.soonest_expiry_near(fp)));
            }
        }
        if let (n, Some((i, fp))) = new_logs {
            if !self.logs.has_room(n, now) {
                return Some((i, self.logs.soonest_expiry_near(fp)));
            }
        }
        None
    }
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
            .field("shards", &self.inner.shards.len())
            .field("max_keys", &self.inner.max_keys)
            .field("at_capacity", &self.inner.at_capacity)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Backend for MemoryBackend<C> {
    type Future = Ready<Result<Decision, BackendError>>;

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        ready(Ok(self.check_now(key, policy, cost)))
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
}

impl<C: Clock> MemoryBackendBuilder<C> {
    /// Hold at most this many fixed-size states, and at most this many
    /// sliding logs (one per key per limit). Default [`DEFAULT_MAX_KEYS`].
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

    /// Read time from `clock` (a [`ManualClock`](crate::clock::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> MemoryBackendBuilder<C2> {
        MemoryBackendBuilder {
            clock,
            max_keys: self.max_keys,
            shards: self.shards,
            at_capacity: self.at_capacity,
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
                shards: shards_vec,
                shard_mask: shards as u64 - 1,
                hasher: RandomState::new(),
                clock: self.clock,
                at_capacity: self.at_capacity,
                max_keys: per_shard * shards,
            }),
        }
    }
}
