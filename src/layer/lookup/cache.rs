//! Tenants' entries, bounded.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::watch;

use crate::key::Key;
use crate::Policy;

/// Tenants' entries, in shards so that requests of different tenants do
/// not wait on one lock; at most `per_shard` in each.
pub(super) struct Cache {
    pub(super) shards: Box<[Mutex<HashMap<Key, Entry>>]>,
    pub(super) per_shard: usize,
    pub(super) hasher: RandomState,
}

/// Shards of the cache.
const SHARDS: usize = 16;

pub(super) struct Entry {
    /// The last policy the lookup gave (none: it has not answered yet, or
    /// said the tenant has none).
    pub(super) policy: Option<Policy>,
    /// Until when `policy` is fresh (a failure: when to ask again).
    pub(super) fresh_until: Instant,
    /// The lookup under way: its answer arrives here.
    pub(super) running: Option<watch::Receiver<bool>>,
}

impl Cache {
    /// At most `max` tenants (at least one per shard, so 16 for a smaller `max`).
    pub(super) fn new(max: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: (max / SHARDS).max(1),
            hasher: RandomState::new(),
        }
    }

    /// The shard that holds `tenant`, locked.
    pub(super) fn lock(&self, tenant: &Key) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        let shard = self.hasher.hash_one(tenant.as_bytes()) as usize % SHARDS;
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
