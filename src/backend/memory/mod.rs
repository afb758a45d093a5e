//! The in-memory backend: the embedded default.
//!
//! State lives in shards, each a read-write lock around compact tables. A
//! key's base hash is a SipHash keyed with a random secret per backend (so
//! clients cannot aim collisions), it picks the shard, and each limit's
//! state is found by a 64-bit fingerprint of (key, limit). All limits of one
//! key are in one shard, so a multi-limit decision takes one lock and is
//! atomic. A known key under a lone bucket limit (token bucket, leaky
//! bucket, GCRA: the commonest policy) takes only the read lock and one
//! compare-and-swap on its state (`bucket.rs`), so threads on one hot key
//! never queue behind each other's arithmetic.
//!
//! Memory is bounded: a bucket's state takes one 16-byte slot, a window's
//! one 24-byte slot, tables (Robin Hood probing) run between 3/4 and 15/16
//! full (17 to 22 bytes a bucket, 26 to 32 a window), and the backend never
//! holds more than [`max_keys`](MemoryBackendBuilder::max_keys) states of
//! each kind. Expired state is reclaimed without timers or background
//! tasks: a cursor in each shard removes a few expired entries whenever a
//! new key arrives, and a growing table drops everything expired before it
//! decides to grow (and keeps its size when that frees a sixteenth). When
//! the cursor's pass finds a table under a quarter full (a flood has
//! passed), the table is rebuilt smaller: memory comes back as new clients
//! arrive.
//!
//! ## At the cap
//!
//! When a shard holds as many states as it may and a new key arrives, it
//! first reclaims expired state. If none has expired, [`AtCapacity`] decides:
//!
//! * [`AtCapacity::EvictSoonestExpiring`] (default): the new key replaces the
//!   nearby entry whose state would have expired first — the state whose
//!   loss admits the least extra traffic — among those not *kept*. Kept
//!   are a penalty box's strikes and bans, and a window's or log's state
//!   that denied a request: what an attacker flooding made-up ids would
//!   most like gone. They go only when every nearby entry is kept (a flood
//!   that must exhaust a limit for each id it makes up), soonest expiring
//!   first. A bucket's state needs no mark: its expiry is how much of the
//!   budget it holds, so an exhausted bucket outlives a new id's under the
//!   same limit. A flood of new keys cannot grow memory, and new clients
//!   are never turned away; the price is that an evicted client starts
//!   again with a full quota.
//! * [`AtCapacity::Deny`]: requests from new keys are denied (the decision
//!   says [`is_capacity_exhausted`](crate::Decision::is_capacity_exhausted))
//!   until state expires; known keys are unaffected. No state is ever lost,
//!   but a flood locks out new clients.
//!
//! ## Sliding logs' bytes
//!
//! A sliding log keeps an entry per admitted request in its window (at most
//! 100,000 a window unless the policy raises it), so the cap on keys alone
//! does not bound its memory. Every log's entries are counted against one
//! byte cap per backend ([`max_log_bytes`](MemoryBackendBuilder::max_log_bytes),
//! 64 MiB by default); [`log_bytes`](MemoryBackend::log_bytes) reads it.
//! At the cap, a request that would make a log grow is denied (the decision
//! says [`is_capacity_exhausted`](crate::Decision::is_capacity_exhausted),
//! retry after the limit's window), under either [`AtCapacity`]: state is
//! never lost to make room, and a log with room left in its allocation
//! decides as before. A debt charged by settling is never refused: past the
//! cap it joins the log's newest entry (which then leaves the window later:
//! stricter, never looser).
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

mod at_capacity;
pub(crate) mod bucket;
mod builder;
pub(crate) mod decide;
mod key_hash;
pub(crate) mod shard;
pub(crate) mod table;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::future::{ready, Ready};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use self::decide::{PermitChange, Settlement};
use self::key_hash::KeyHash;
use self::shard::{LogBytes, Shard};
use super::{Backend, BackendError, Reset};
use crate::algorithm::{Form, Gcra};
use crate::clock::{Clock, MonotonicClock};
use crate::key::Key;
use crate::{clock::Micros, Decision, Policy};

pub use at_capacity::AtCapacity;
pub use builder::MemoryBackendBuilder;

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
    shards: Box<[CachePadded<RwLock<Shard>>]>,
    shard_mask: u64,
    hasher: KeyHash,
    at_capacity: AtCapacity,
    max_keys: usize,
    /// The sliding logs' bytes, shared by every shard.
    log_bytes: Arc<LogBytes>,
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

impl MemoryBackend {
    /// The default cap on states of each kind.
    pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

    /// The default cap on the bytes of sliding-log entries, across keys:
    /// 64 MiB, four million entries.
    pub const DEFAULT_MAX_LOG_BYTES: usize = 64 << 20;

    /// A backend with the defaults: the monotonic clock, at most
    /// [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS) states of each kind,
    /// evicting at the cap.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// How many servers its limits are shared by (see
    /// [`MemoryBackendBuilder::servers`]; 1 by default).
    #[cfg_attr(not(all(feature = "redis", feature = "fair-share")), allow(dead_code))]
    pub(crate) fn servers(&self) -> u32 {
        self.inner
            .store
            .share
            .as_ref()
            .map_or(1, |share| share.servers)
    }

    /// Configure a backend.
    pub fn builder() -> MemoryBackendBuilder {
        MemoryBackendBuilder {
            clock: MonotonicClock::new(),
            max_keys: Self::DEFAULT_MAX_KEYS,
            shards: builder::DEFAULT_SHARDS,
            at_capacity: AtCapacity::default(),
            servers: 1,
            max_log_bytes: Self::DEFAULT_MAX_LOG_BYTES,
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
    #[inline]
    pub fn check_now(&self, key: &Key, policy: &Policy, cost: u32) -> Decision {
        self.inner
            .store
            .check(key, policy, cost, self.inner.clock.now())
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
    #[cfg(feature = "test-hooks")]
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
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn settle_at(
        &self,
        key: &Key,
        policy: &Policy,
        reserved: u32,
        actual: u32,
        now: Micros,
    ) -> Decision {
        self.inner
            .store
            .settle(key, policy, Settlement { reserved, actual }, now)
    }

    /// Give back (`renew`: false) or renew a permit at `now`: see
    /// [`Backend::release`] and [`Backend::renew`].
    ///
    /// Not part of the public API (hidden from the docs): the conformance
    /// suite's hook. Replay a trace of your own with a
    /// [`ManualClock`](crate::clock::ManualClock) and `check_now`.
    #[cfg(feature = "test-hooks")]
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
        self.inner.store.permit(
            key,
            policy,
            PermitChange {
                taken: permit,
                cost,
                renew,
            },
            now,
        )
    }

    /// States held (fixed-size states plus sliding logs).
    pub fn len(&self) -> usize {
        self.inner
            .store
            .shards
            .iter()
            .map(|s| {
                let shard = read(&s.0);
                shard.states.len() + shard.buckets.len() + shard.logs.len()
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
                let shard = read(&s.0);
                let log_entries: usize = shard.logs.values().map(|l| l.log().heap_bytes()).sum();
                let slots = shard.states.slot_bytes()
                    + shard.buckets.slot_bytes()
                    + shard.logs.slot_bytes();
                slots + log_entries
            })
            .sum()
    }

    /// The cap on states of each kind.
    pub fn max_keys(&self) -> usize {
        self.inner.store.max_keys
    }

    /// Heap bytes the sliding logs' entries hold now, across every key
    /// (at most [`max_log_bytes`](MemoryBackendBuilder::max_log_bytes)).
    pub fn log_bytes(&self) -> usize {
        self.inner.store.log_bytes.held()
    }
}

impl Store {
    /// `policy` as this backend enforces it: whole, or its share.
    #[inline]
    fn local<'a>(&self, policy: &'a Policy) -> Cow<'a, Policy> {
        match &self.share {
            None => Cow::Borrowed(policy),
            Some(share) => Cow::Owned(share.of(policy)),
        }
    }

    /// The key's base hash (which picks its shard and seeds each limit's
    /// fingerprint) and its shard's lock.
    #[inline]
    fn locate(&self, key: &Key) -> (u64, &RwLock<Shard>) {
        let base = self.hasher.of(key.as_bytes());
        // The low bits pick the shard; a shard's table places keys by
        // the high bits.
        (base, &self.shards[(base & self.shard_mask) as usize].0)
    }

    /// Decides, each decision marked as it is made: built where it is
    /// returned (marking it after a call made a copy of it on every
    /// request, a tenth of a hot key's time).
    fn check(&self, key: &Key, policy: &Policy, cost: u32, now: Micros) -> Decision {
        let policy = self.local(policy);
        let policy = &*policy;
        let (base, lock) = self.locate(key);
        if let Some((gcra, limit_id)) = lone_bucket(policy) {
            // A known key under a lone bucket: one swap under the read lock.
            let shard = read(lock);
            if let Some(slot) = shard.buckets.find(shard::fingerprint(base, limit_id)) {
                let outcome = shard.buckets.at(slot).check_and_consume(gcra, now, cost);
                drop(shard);
                return self.marked(Decision::one(outcome));
            }
        }
        let mut shard = write(lock);
        let at_capacity = self.at_capacity;
        if let Some(outcome) = decide::check_one(&mut shard, policy, base, cost, now, at_capacity) {
            // The decision is made once the lock is let go.
            drop(shard);
            return self.marked(Decision::one(outcome));
        }
        self.marked(decide::check(
            &mut shard,
            policy,
            base,
            cost,
            now,
            at_capacity,
        ))
    }

    /// `decision`, marked with the number of servers whose share it was
    /// decided on (its headers then report the share).
    #[inline]
    fn marked(&self, decision: Decision) -> Decision {
        match &self.share {
            None => decision,
            Some(share) => decision.shared_by(share.servers),
        }
    }

    fn settle(&self, key: &Key, policy: &Policy, amounts: Settlement, now: Micros) -> Decision {
        let policy = self.local(policy);
        let (base, lock) = self.locate(key);
        self.marked(decide::settle(
            &mut write(lock),
            &policy,
            base,
            amounts,
            now,
        ))
    }

    fn permit(&self, key: &Key, policy: &Policy, permit: PermitChange, now: Micros) -> Decision {
        let policy = self.local(policy);
        let (base, lock) = self.locate(key);
        self.marked(decide::permit(&mut write(lock), &policy, base, permit, now))
    }

    fn reset(&self, key: &Key, policy: &Policy) {
        let policy = self.local(policy);
        let (base, lock) = self.locate(key);
        decide::reset(&mut write(lock), &policy, base);
    }
}

/// The one limit of `policy` when it is a bucket with nothing else to
/// keep ([`decide::lone_limit`]): the lock-free case.
#[inline]
fn lone_bucket(policy: &Policy) -> Option<(&Gcra, u64)> {
    let limit = decide::lone_limit(policy)?;
    match limit.rule().form() {
        Form::Bucket(gcra) => Some((gcra, limit.id())),
        Form::Fixed(_) | Form::Log(_) => None,
    }
}

// Our critical sections cannot panic half-way, so a poisoned lock still
// guards consistent state.

#[inline]
fn read(lock: &RwLock<Shard>) -> RwLockReadGuard<'_, Shard> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

#[inline]
fn write(lock: &RwLock<Shard>) -> RwLockWriteGuard<'_, Shard> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
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

    fn answer_now(future: &mut Self::Future) -> Option<Result<Decision, BackendError>> {
        super::ready_answer(future)
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    // Inlined into the layer's call, where its answer is taken at once:
    // the decision is then not wrapped and unwrapped across a call.
    #[inline]
    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        ready(Ok(self.check_now(key, policy, cost)))
    }

    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        let now = self.inner.clock.now();
        ready(Ok(self.inner.store.settle(
            key,
            policy,
            Settlement { reserved, actual },
            now,
        )))
    }

    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        let now = self.inner.clock.now();
        ready(Ok(self.inner.store.permit(
            key,
            policy,
            PermitChange {
                taken: permit,
                cost,
                renew: false,
            },
            now,
        )))
    }

    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        let now = self.inner.clock.now();
        ready(Ok(self.inner.store.permit(
            key,
            policy,
            PermitChange {
                taken: permit,
                cost,
                renew: true,
            },
            now,
        )))
    }

    fn reset(&self, key: &Key, policy: &Policy) -> Reset {
        self.inner.store.reset(key, policy);
        Box::pin(ready(Ok(())))
    }

    /// Everything this backend holds is this process's own.
    fn forget_local(&self, key: &Key, policy: &Policy) {
        self.inner.store.reset(key, policy);
    }
}
