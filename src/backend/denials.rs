//! Denials a networked backend made, remembered until their retry-after, so
//! that a client that keeps sending while denied costs no round trip.
//!
//! Exact: a denial at `t` with retry-after `r` says the request cannot fit
//! before `t + r` even if nothing else is counted; other requests only count
//! more. So until then the backend would deny the same request (or a
//! costlier one) again, and answering from here changes no decision. Not
//! remembered: denials of policies that [count denied
//! requests](crate::Policy::counts_denied) (the backend must count each),
//! requests that can never fit, and peeks (cost 0), which ask for the state.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::key::Key;
use crate::{clock::Micros, decision::Origin, Decision, Policy};

const SHARDS: usize = 16;

/// A full shard is swept for expired entries at most this often; between
/// sweeps, new denials are not remembered (a flood of denied keys cannot
/// make every request pay for a sweep).
const SWEEP_EVERY: Duration = Duration::from_millis(100);

pub(crate) struct Denials {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<u64, Entry>,
    last_sweep: Option<Instant>,
}

struct Entry {
    // The whole key and the policy's limits: a hash match alone never
    // denies another client.
    key: Key,
    limits: Box<[u64]>,
    cost: u32,
    decision: Decision,
    at: Instant,
    until: Instant,
}

impl Denials {
    /// Room for about `max` denials (0: remember none).
    pub(crate) fn new(max: usize) -> Option<Self> {
        (max > 0).then(|| Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: max.div_ceil(SHARDS),
            hasher: RandomState::new(),
        })
    }

    fn slot(&self, key: &Key, policy: &Policy) -> (u64, &Mutex<Shard>) {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(key.as_bytes());
        for id in ids(policy) {
            hasher.write_u64(id);
        }
        let hash = hasher.finish();
        (hash, &self.shards[(hash >> 59) as usize % SHARDS])
    }

    /// The remembered denial of this request, aged to now, if it still holds.
    pub(crate) fn get(&self, key: &Key, policy: &Policy, cost: u32) -> Option<Decision> {
        if cost == 0 || policy.counts_denied() {
            return None;
        }
        let (hash, shard) = self.slot(key, policy);
        let now = Instant::now();
        let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = shard.entries.get(&hash)?;
        let same =
            entry.key == *key && cost >= entry.cost && ids(policy).eq(entry.limits.iter().copied());
        (same && now < entry.until).then(|| {
            entry
                .decision
                .clone()
                .aged(Micros::from(now - entry.at))
                .with_origin(Origin::Cached)
        })
    }

    /// Remember `decision` (made just now) if it is a denial worth keeping.
    pub(crate) fn remember(&self, key: &Key, policy: &Policy, cost: u32, decision: &Decision) {
        let Some(retry) = decision.retry_after() else {
            return; // allowed, or can never fit
        };
        if cost == 0 || policy.counts_denied() || decision.is_capacity_exhausted() {
            return;
        }
        // Under a penalty box every denial must reach the store as a strike;
        // only a ban, which counts nothing, is remembered.
        if policy.penalty().is_some() && !decision.is_banned() {
            return;
        }
        let (hash, shard) = self.slot(key, policy);
        let now = Instant::now();
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if shard.entries.len() >= self.per_shard && !shard.entries.contains_key(&hash) {
            if shard.last_sweep.is_some_and(|t| now - t < SWEEP_EVERY) {
                return;
            }
            shard.last_sweep = Some(now);
            shard.entries.retain(|_, e| e.until > now);
            if shard.entries.len() >= self.per_shard {
                return;
            }
        }
        shard.entries.insert(
            hash,
            Entry {
                key: key.clone(),
                limits: ids(policy).collect(),
                cost,
                decision: decision.clone(),
                at: now,
                until: now + retry,
            },
        );
    }

    /// Forget the denial remembered for `key` under `policy`, if any.
    pub(crate) fn forget(&self, key: &Key, policy: &Policy) {
        let (hash, shard) = self.slot(key, policy);
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        shard.entries.remove(&hash);
    }

    /// Denials held (expired ones included until swept).
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entries
                    .len()
            })
            .sum()
    }
}

/// What a remembered denial was decided under: each limit, and the penalty
/// box.
fn ids(policy: &Policy) -> impl Iterator<Item = u64> + '_ {
    let limits = policy.limits().iter().map(|l| l.terms());
    limits.chain(policy.penalty_id())
}
