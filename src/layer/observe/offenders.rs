//! [`TopOffenders`]: the keys denied most, in fixed memory.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::key::Key;

/// The keys a layer denied most often, in fixed memory however many keys
/// there are: the *space-saving* algorithm over `capacity` counters.
///
/// Every key denied more than `1 / capacity` of all denials is in the list;
/// each count is at most `error` above the key's true number of denials
/// (a key that took over a counter inherits its count). Keys are shown
/// redacted ([`Key::redacted`]): enough to tell them apart and recognise
/// one, never a whole IP address or user name.
///
/// Give one to any number of layers ([`RateLimitLayer::top_offenders`]);
/// read it from anywhere:
///
/// ```
/// use tower_ratelimit::{Policy, RateLimitLayer};
/// use tower_ratelimit::layer::TopOffenders;
///
/// let top = TopOffenders::new(100);
/// let layer = RateLimitLayer::new("10/min".parse::<Policy>().unwrap()).top_offenders(top.clone());
/// // Later, from an admin route:
/// for offender in top.top(10) {
///     println!("{} denied {} times", offender.key, offender.count);
/// }
/// ```
///
/// [`RateLimitLayer::top_offenders`]: crate::RateLimitLayer::top_offenders
#[derive(Clone)]
pub struct TopOffenders {
    counters: Arc<Mutex<Counters>>,
}

/// One key in [`TopOffenders::top`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offender {
    /// The key, redacted.
    pub key: String,
    /// Denials counted for it: at most `error` more than the true number.
    pub count: u64,
    /// How much of `count` may belong to keys it replaced.
    pub error: u64,
}

struct Counters {
    capacity: usize,
    entries: Vec<Offender>,
    /// Each entry's key hash, and the entry index by key hash.
    ids: Vec<u64>,
    index: HashMap<u64, usize>,
}

impl TopOffenders {
    /// Track up to `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            counters: Arc::new(Mutex::new(Counters {
                capacity,
                entries: Vec::with_capacity(capacity),
                ids: Vec::with_capacity(capacity),
                index: HashMap::with_capacity(capacity),
            })),
        }
    }

    /// Count one denial of `key`.
    pub fn record(&self, key: &Key) {
        let id = key.digest();
        let mut counters = self.lock();
        let counters = &mut *counters;
        if let Some(&i) = counters.index.get(&id) {
            counters.entries[i].count += 1;
            return;
        }
        let entry = Offender {
            key: key.redacted(),
            count: 1,
            error: 0,
        };
        if counters.entries.len() < counters.capacity {
            counters.index.insert(id, counters.entries.len());
            counters.entries.push(entry);
            counters.ids.push(id);
            return;
        }
        // Full: the least counted key makes way, and its count is inherited.
        let Some((i, least)) = counters
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.count)
        else {
            return;
        };
        let floor = least.count;
        counters.index.remove(&counters.ids[i]);
        counters.index.insert(id, i);
        counters.ids[i] = id;
        counters.entries[i] = Offender {
            count: floor + 1,
            error: floor,
            ..entry
        };
    }

    /// The `n` most denied keys, most denied first.
    pub fn top(&self, n: usize) -> Vec<Offender> {
        let mut entries = self.lock().entries.clone();
        entries.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        entries.truncate(n);
        entries
    }

    /// Forget every count.
    pub fn clear(&self) {
        let mut counters = self.lock();
        counters.entries.clear();
        counters.ids.clear();
        counters.index.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // Updates cannot panic half-way, so a poisoned lock is still consistent.
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for TopOffenders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counters = self.lock();
        f.debug_struct("TopOffenders")
            .field("capacity", &counters.capacity)
            .field("tracked", &counters.entries.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_hitters_survive_a_flood_of_one_off_keys_in_fixed_memory() {
        let top = TopOffenders::new(10);
        for round in 0..1_000u32 {
            for heavy in 0..3 {
                top.record(&Key::new("ip", format!("10.0.0.{heavy}")));
            }
            // Two new keys per round: 2,000 in all, 10 counters. Every key
            // above 1/10 of all denials (500) is guaranteed a counter.
            for one_off in 0..2 {
                top.record(&Key::new("ip", format!("one-off {round} {one_off}")));
            }
        }
        let listed = top.top(3);
        assert_eq!(top.lock().entries.len(), 10);
        for offender in &listed {
            assert!(offender.key.starts_with("ip:10.0…#"), "{offender:?}");
            // The true count is 1,000: within [count - error, count].
            assert!(offender.count - offender.error <= 1_000 && offender.count >= 1_000);
        }
        let mut keys: Vec<_> = listed.iter().map(|o| o.key.clone()).collect();
        keys.dedup();
        assert_eq!(keys.len(), 3);
    }
}
