//! [`StateStore`]: a store of your own, and [`StoreBackend`], which makes it
//! a whole backend with the memory backend's decision code.

use std::fmt;
use std::future::{ready, Ready};
use std::sync::Arc;

use super::memory::bucket::Tat;
use super::memory::decide::{self, PermitChange, Settlement};
use super::memory::shard::{Entries, Shard, TimedLog};
use super::memory::table::{Expires, KEPT};
use super::{AtCapacity, Backend, BackendError, Reset};
use crate::algorithm::State;
use crate::clock::{Clock, MonotonicClock};
use crate::key::Key;
use crate::{clock::Micros, Decision, Policy};

/// A store of your own: [`StateStore`] keeps each key's state, and
/// [`StoreBackend`] makes it a whole [`Backend`] with exactly the memory
/// backend's decision code — the six algorithms, all or nothing, counted
/// denials, penalty boxes, permits, settling, and a cap on keys.
///
/// A store only has to do what governor's state stores do: read, change and
/// write back one key's states atomically. The states are opaque
/// ([`KeyStates`]); the store keeps them as they are (in memory, or in a
/// map shared by threads) and may drop a key whose states are
/// [empty](KeyStates::is_empty).
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use tower_ratelimit::backend::{KeyStates, StateStore, StoreBackend};
/// use tower_ratelimit::key::Key;
/// use tower_ratelimit::Policy;
///
/// #[derive(Clone, Default)]
/// struct Map(Arc<Mutex<HashMap<Key, KeyStates>>>);
///
/// impl StateStore for Map {
///     fn update<R>(&self, key: &Key, change: impl FnOnce(&mut KeyStates) -> R) -> R {
///         let mut map = self.0.lock().unwrap();
///         let states = map.entry(key.clone()).or_default();
///         let answer = change(states);
///         if states.is_empty() {
///             map.remove(key);
///         }
///         answer
///     }
///
///     fn keys(&self) -> usize {
///         self.0.lock().unwrap().len()
///     }
/// }
///
/// let backend = StoreBackend::new(Map::default());
/// let policy: Policy = "2/min".parse()?;
/// let alice = Key::new("user", "alice");
/// let admitted = (0..3).filter(|_| backend.check_now(&alice, &policy, 1).is_allowed()).count();
/// assert_eq!(admitted, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait StateStore: Clone + Send + Sync + 'static {
    /// Run `change` on `key`'s states (empty for a key the store does not
    /// hold) and keep what it leaves, atomically: no other call reads or
    /// writes this key's states meanwhile. A key whose states are left
    /// [empty](KeyStates::is_empty) may be dropped.
    fn update<R>(&self, key: &Key, change: impl FnOnce(&mut KeyStates) -> R) -> R;

    /// How many keys the store holds: with
    /// [`max_keys`](StoreBackend::max_keys), what keeps a flood of new keys
    /// from growing it without end.
    fn keys(&self) -> usize;
}

/// One key's states, for every limit (and penalty box) that key was
/// decided under: opaque, kept by a [`StateStore`] as they are. Expired
/// states are dropped at each decision.
#[derive(Default)]
pub struct KeyStates {
    shard: Shard<Few<State>, Few<TimedLog>, Few<Tat>>,
}

impl KeyStates {
    /// Whether nothing is held: the store may forget the key.
    pub fn is_empty(&self) -> bool {
        self.shard.states.entries.is_empty()
            && self.shard.buckets.entries.is_empty()
            && self.shard.logs.entries.is_empty()
    }

    /// Whether these states hold something an attacker would most like
    /// gone — a ban, strikes, or a budget that denied a request — so that a
    /// store that must evict keys (an LRU, a cache) evicts this key last.
    pub fn is_kept(&self) -> bool {
        let kept = |fp: &u64| fp & KEPT != 0;
        self.shard.states.entries.iter().any(|(f, _)| kept(f))
            || self.shard.buckets.entries.iter().any(|(f, _)| kept(f))
            || self.shard.logs.entries.iter().any(|(f, _)| kept(f))
    }

    /// When the last state expires (on the backend's clock, which counts
    /// from the Unix epoch by default): for a store with expiring entries.
    pub fn expires_at(&self) -> Micros {
        let states = self.shard.states.entries.iter().map(|(_, s)| s.expires_at);
        let buckets = self
            .shard
            .buckets
            .entries
            .iter()
            .map(|(_, b)| b.expires_at());
        let logs = self.shard.logs.entries.iter().map(|(_, l)| l.expires_at);
        states
            .chain(buckets)
            .chain(logs)
            .max()
            .unwrap_or(Micros::ZERO)
    }

    /// Before a decision: whether a new entry may be added (a key the store
    /// holds always may; a new one while the store is full may not).
    fn open(&mut self, full: bool, now: Micros) {
        let room = !full || !self.is_empty();
        // A full store frees room when some key expires; a second is a hint.
        let retry_at = now.saturating_add(Micros::from_secs(1));
        let limits = [
            &mut self.shard.states.limits,
            &mut self.shard.buckets.limits,
            &mut self.shard.logs.limits,
        ];
        for few in limits {
            *few = Room { room, retry_at };
        }
    }

    /// After a decision: drop what has expired.
    fn close(&mut self, now: Micros) {
        self.shard
            .states
            .entries
            .retain(|(_, s)| s.expires_at > now);
        self.shard
            .buckets
            .entries
            .retain(|(_, b)| b.expires_at() > now);
        self.shard.logs.entries.retain(|(_, l)| l.expires_at > now);
    }
}

impl fmt::Debug for KeyStates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyStates")
            .field("states", &self.shard.states.entries.len())
            .field("buckets", &self.shard.buckets.entries.len())
            .field("logs", &self.shard.logs.entries.len())
            .finish()
    }
}

/// A key's few entries, by fingerprint.
struct Few<V> {
    entries: Vec<(u64, V)>,
    limits: Room,
}

/// Whether a new entry may be added, and when room is likely if not.
#[derive(Clone, Copy)]
struct Room {
    room: bool,
    retry_at: Micros,
}

impl<V> Default for Few<V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            limits: Room {
                room: true,
                retry_at: Micros::ZERO,
            },
        }
    }
}

impl<V> Entries<V> for Few<V> {
    fn find(&self, fp: u64) -> Option<usize> {
        self.entries.iter().position(|(f, _)| f & !KEPT == fp)
    }
    fn at(&self, slot: usize) -> &V {
        &self.entries[slot].1
    }
    fn at_mut(&mut self, slot: usize) -> &mut V {
        &mut self.entries[slot].1
    }
    fn insert(&mut self, fp: u64, value: V, _: Micros) -> &mut V {
        self.entries.push((fp, value));
        let last = self.entries.len() - 1;
        &mut self.entries[last].1
    }
    fn remove(&mut self, fp: u64) {
        self.entries.retain(|(f, _)| f & !KEPT != fp);
    }
    fn keep(&mut self, slot: usize) {
        self.entries[slot].0 |= KEPT;
    }
    fn has_room(&mut self, _: u64, _: usize, _: Micros) -> bool {
        self.limits.room
    }
    fn soonest_expiry_near(&self, _: u64) -> Micros {
        self.limits.retry_at
    }
}

/// A [`StateStore`] as a [`Backend`]: the memory backend's decisions, on
/// state the store keeps. See [`StateStore`].
pub struct StoreBackend<S, C = MonotonicClock> {
    store: S,
    clock: Arc<C>,
    max_keys: usize,
}

impl<S: StateStore> StoreBackend<S> {
    /// Decide on `store`'s states, reading the monotonic clock, holding at
    /// most [`MemoryBackend::DEFAULT_MAX_KEYS`](super::MemoryBackend::DEFAULT_MAX_KEYS) keys.
    pub fn new(store: S) -> Self {
        Self {
            store,
            clock: Arc::new(MonotonicClock::new()),
            max_keys: super::MemoryBackend::DEFAULT_MAX_KEYS,
        }
    }
}

impl<S: StateStore, C: Clock> StoreBackend<S, C> {
    /// Refuse requests of new keys while the store holds `max_keys` (their
    /// decisions say [`is_capacity_exhausted`](Decision::is_capacity_exhausted));
    /// known keys are unaffected. The count is read just before each
    /// decision, so new keys decided at the same instant on other threads
    /// can pass it by at most their number.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// Read time from `clock` (a [`ManualClock`](crate::clock::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> StoreBackend<S, C2> {
        StoreBackend {
            store: self.store,
            clock: Arc::new(clock),
            max_keys: self.max_keys,
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Decide a request of `cost` for `key` under `policy`, now.
    pub fn check_now(&self, key: &Key, policy: &Policy, cost: u32) -> Decision {
        self.decide(key, |shard, now| {
            decide::check(shard, policy, 0, cost, now, AtCapacity::Deny)
        })
    }

    /// One decision on `key`'s states, at the clock's time. Each key's
    /// states are its own, so every limit's fingerprint is seeded alike.
    fn decide(
        &self,
        key: &Key,
        run: impl FnOnce(&mut Shard<Few<State>, Few<TimedLog>, Few<Tat>>, Micros) -> Decision,
    ) -> Decision {
        let now = self.clock.now();
        let full = self.store.keys() >= self.max_keys;
        self.store.update(key, |states| {
            states.open(full, now);
            let decision = run(&mut states.shard, now);
            states.close(now);
            decision
        })
    }
}

impl<S: Clone, C> Clone for StoreBackend<S, C> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            clock: Arc::clone(&self.clock),
            max_keys: self.max_keys,
        }
    }
}

impl<S, C> fmt::Debug for StoreBackend<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreBackend")
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl<S: StateStore, C: Clock> Backend for StoreBackend<S, C> {
    type Future = Ready<Result<Decision, BackendError>>;

    fn answer_now(future: &mut Self::Future) -> Option<Result<Decision, BackendError>> {
        super::ready_answer(future)
    }

    fn name(&self) -> &'static str {
        "store"
    }

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        ready(Ok(self.check_now(key, policy, cost)))
    }

    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        let amounts = Settlement { reserved, actual };
        ready(Ok(self.decide(key, |shard, now| {
            decide::settle(shard, policy, 0, amounts, now)
        })))
    }

    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        ready(Ok(self.decide(key, |shard, now| {
            let release = PermitChange {
                taken: permit,
                cost,
                renew: false,
            };
            decide::permit(shard, policy, 0, release, now)
        })))
    }

    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        ready(Ok(self.decide(key, |shard, now| {
            let renewal = PermitChange {
                taken: permit,
                cost,
                renew: true,
            };
            decide::permit(shard, policy, 0, renewal, now)
        })))
    }

    fn reset(&self, key: &Key, policy: &Policy) -> Reset {
        self.decide(key, |shard, _| {
            decide::reset(shard, policy, 0);
            Decision::empty()
        });
        Box::pin(ready(Ok(())))
    }
}
