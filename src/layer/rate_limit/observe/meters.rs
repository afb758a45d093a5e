//! The layer's metric handles (feature `metrics`), registered once per
//! label set and kept: a request then costs a lock-free lookup and an
//! atomic add, not a registration (a key, its labels and the recorder's own
//! lookup) per metric.
//!
//! Handles are registered with the recorder in force when a label set is
//! first seen by the layer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use arc_swap::ArcSwap;
use metrics::{Counter, Histogram, SharedString};

use super::LimitLabel as Limit;

/// What a handle measures: its labels' addresses. Strings are compared by
/// address: outcomes are `'static`, routes and names are `Arc`s the map
/// keeps alive beside the handle ([`Owners`]), so an address is never
/// reused for another value while it is a key. A lookup builds the key from
/// borrowed labels: no reference count is touched (they are shared by every
/// thread serving the route). The last word says which metric: 0 or 1
/// requests (1: the penalty box's), 2 near the limit, 3 latency.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Address([usize; 4]);

impl Hash for Address {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Word by word: an array of integers would hash as its bytes.
        for word in self.0 {
            state.write_usize(word);
        }
    }
}

/// The route and limit name a key holds the addresses of, kept beside its
/// handle so that neither address is reused while it is a key.
#[derive(Clone)]
#[allow(dead_code)] // Held, never read.
struct Owners(Option<Arc<str>>, Option<Arc<str>>);

fn address<T: ?Sized>(value: Option<&Arc<T>>) -> usize {
    value.map_or(0, |v| Arc::as_ptr(v) as *const u8 as usize)
}

/// Mixes a few words: the keys are addresses, not client input.
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

#[derive(Clone)]
enum Handle {
    Counter(Counter),
    Histogram(Histogram),
}

type Map = HashMap<Address, (Handle, Owners), BuildHasherDefault<WordHasher>>;

/// A layer's handles. A copy starts empty.
#[derive(Default)]
pub(super) struct Meters(ArcSwap<Map>);

impl Clone for Meters {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Meters").field(&self.0.load().len()).finish()
    }
}

impl Meters {
    /// Label sets kept; beyond, handles are registered per use (a policy
    /// resolver that builds a new policy per request would only refill it).
    const MAX_HANDLES: usize = 4_096;

    /// Record with the handle of `address`, registered (and kept, with
    /// the `owners` of its addresses) the first time.
    fn record(
        &self,
        address: Address,
        owners: impl FnOnce() -> Owners,
        register: impl FnOnce() -> Handle,
        record: impl Fn(&Handle),
    ) {
        if let Some((handle, _)) = self.0.load().get(&address) {
            return record(handle);
        }
        let handle = register();
        record(&handle);
        if self.0.load().len() < Self::MAX_HANDLES {
            let owners = owners();
            self.0.rcu(|map| {
                let mut map = Map::clone(map);
                map.insert(address, (handle.clone(), owners.clone()));
                map
            });
        }
    }

    /// `ratelimit_requests_total{outcome, route, limit}` += 1.
    pub(super) fn request(
        &self,
        outcome: &'static str,
        route: Option<&Arc<str>>,
        limit: Limit<'_>,
    ) {
        let name = match limit {
            Limit::Name(name) => Some(name),
            Limit::None | Limit::PenaltyBox => None,
        };
        let penalty_box = matches!(limit, Limit::PenaltyBox);
        self.record(
            Address([
                outcome.as_ptr() as usize,
                address(route),
                address(name),
                usize::from(penalty_box),
            ]),
            || Owners(route.cloned(), name.cloned()),
            || {
                let route = shared(route);
                Handle::Counter(match limit {
                    Limit::Name(name) => metrics::counter!(
                        "ratelimit_requests_total",
                        "outcome" => outcome, "route" => route, "limit" => SharedString::from(name.clone())
                    ),
                    Limit::PenaltyBox => metrics::counter!(
                        "ratelimit_requests_total",
                        "outcome" => outcome, "route" => route, "limit" => "penalty-box"
                    ),
                    Limit::None => metrics::counter!(
                        "ratelimit_requests_total",
                        "outcome" => outcome, "route" => route
                    ),
                })
            },
            increment,
        );
    }

    /// `ratelimit_near_limit_total{route, limit}` += 1.
    pub(super) fn near_limit(&self, route: Option<&Arc<str>>, limit: &Arc<str>) {
        self.record(
            Address([1, address(route), address(Some(limit)), 2]),
            || Owners(route.cloned(), Some(limit.clone())),
            || {
                Handle::Counter(metrics::counter!(
                    "ratelimit_near_limit_total",
                    "route" => shared(route),
                    "limit" => SharedString::from(limit.clone())
                ))
            },
            increment,
        );
    }

    /// `ratelimit_decision_seconds{backend}` records `seconds`.
    pub(super) fn latency(&self, backend: &'static str, seconds: f64) {
        self.record(
            Address([backend.as_ptr() as usize, backend.len(), 0, 3]),
            || Owners(None, None),
            || {
                Handle::Histogram(
                    metrics::histogram!("ratelimit_decision_seconds", "backend" => backend),
                )
            },
            |handle| {
                if let Handle::Histogram(histogram) = handle {
                    histogram.record(seconds);
                }
            },
        );
    }
}

fn increment(handle: &Handle) {
    if let Handle::Counter(counter) = handle {
        counter.increment(1);
    }
}

fn shared(route: Option<&Arc<str>>) -> SharedString {
    route.map_or(SharedString::const_str(""), |r| {
        SharedString::from(r.clone())
    })
}
