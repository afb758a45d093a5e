//! [`MemoryBackendBuilder`]: the cap, what to do at it, the shards, a
//! server's share, the clock.

use std::sync::{Arc, Mutex, RwLock};

use super::key_hash::KeyHash;
use super::shard::{LogBytes, Shard};
use super::table::Table;
use super::AtCapacity;
use super::{CachePadded, Inner, MemoryBackend, Share, Store};
use crate::clock::{Clock, MonotonicClock};

pub(super) const DEFAULT_SHARDS: usize = 64;

/// Configures a [`MemoryBackend`].
#[derive(Debug)]
#[must_use]
pub struct MemoryBackendBuilder<C = MonotonicClock> {
    pub(super) clock: C,
    pub(super) max_keys: usize,
    pub(super) shards: usize,
    pub(super) at_capacity: AtCapacity,
    pub(super) servers: u32,
    pub(super) max_log_bytes: usize,
}

impl<C: Clock> MemoryBackendBuilder<C> {
    /// Hold at most this many fixed-size states, and at most this many
    /// sliding logs (one per key per limit). Default
    /// [`MemoryBackend::DEFAULT_MAX_KEYS`].
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// Hold at most this many bytes of sliding-log entries, across every
    /// key (default [`MemoryBackend::DEFAULT_MAX_LOG_BYTES`], 64 MiB). The
    /// cap on keys bounds how many logs there are; this bounds what they
    /// hold together, whatever their limits. A log grows by doubling, so
    /// the bytes held stay at most this (see the module docs for what is
    /// refused at it).
    pub fn max_log_bytes(mut self, bytes: usize) -> Self {
        self.max_log_bytes = bytes;
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
            max_log_bytes: self.max_log_bytes,
        }
    }

    /// The backend.
    pub fn build(self) -> MemoryBackend<C> {
        // At least 16 states per shard, so a small cap is not split to nothing.
        let most_shards = ((self.max_keys / 16).max(1) + 1).next_power_of_two() / 2;
        let shards = self.shards.min(most_shards.max(1));
        let per_shard = self.max_keys / shards;
        let log_bytes = Arc::new(LogBytes::new(self.max_log_bytes));
        let shards_vec = (0..shards)
            .map(|_| {
                CachePadded(RwLock::new(Shard {
                    states: Table::new(per_shard),
                    logs: Table::new(per_shard),
                    buckets: Table::new(per_shard),
                    log_bytes: Some(Arc::clone(&log_bytes)),
                }))
            })
            .collect();
        MemoryBackend {
            inner: Arc::new(Inner {
                store: Store {
                    shards: shards_vec,
                    shard_mask: shards as u64 - 1,
                    hasher: KeyHash::new(),
                    at_capacity: self.at_capacity,
                    max_keys: per_shard * shards,
                    log_bytes,
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
