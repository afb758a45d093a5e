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

/// What a handle measures, by its labels. Strings are compared by address:
/// outcomes are `'static`, routes and names are `Arc`s kept alive by the key
/// itself, so an address is never reused for another value while it is here.
#[derive(Clone)]
enum Labels {
    Requests {
        outcome: &'static str,
        route: Option<Arc<str>>,
        limit: Option<Arc<str>>,
        penalty_box: bool,
    },
    NearLimit {
        route: Option<Arc<str>>,
        limit: Arc<str>,
    },
    Latency {
        backend: &'static str,
    },
}

fn address<T: ?Sized>(value: Option<&Arc<T>>) -> usize {
    value.map_or(0, |v| Arc::as_ptr(v) as *const u8 as usize)
}

impl Labels {
    fn parts(&self) -> [usize; 4] {
        match self {
            Labels::Requests {
                outcome,
                route,
                limit,
                penalty_box,
            } => [
                outcome.as_ptr() as usize,
                address(route.as_ref()),
                address(limit.as_ref()),
                usize::from(*penalty_box),
            ],
            Labels::NearLimit { route, limit } => {
                [1, address(route.as_ref()), address(Some(limit)), 2]
            }
            Labels::Latency { backend } => [backend.as_ptr() as usize, backend.len(), 0, 3],
        }
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Labels {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for part in self.parts() {
            state.write_usize(part);
        }
    }
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

type Map = HashMap<Labels, Handle, BuildHasherDefault<WordHasher>>;

/// A layer's handles. A copy starts empty.
#[derive(Default)]
pub(crate) struct Meters(ArcSwap<Map>);

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

    fn handle(&self, labels: Labels, register: impl FnOnce(&Labels) -> Handle) -> Handle {
        if let Some(handle) = self.0.load().get(&labels) {
            return handle.clone();
        }
        let handle = register(&labels);
        if self.0.load().len() < Self::MAX_HANDLES {
            self.0.rcu(|map| {
                let mut map = Map::clone(map);
                map.insert(labels.clone(), handle.clone());
                map
            });
        }
        handle
    }

    /// `ratelimit_requests_total{outcome, route, limit}` += 1.
    pub(super) fn request(
        &self,
        outcome: &'static str,
        route: Option<&Arc<str>>,
        limit: Limit<'_>,
    ) {
        let labels = Labels::Requests {
            outcome,
            route: route.cloned(),
            limit: match limit {
                Limit::Name(name) => Some(name.clone()),
                Limit::None | Limit::PenaltyBox => None,
            },
            penalty_box: matches!(limit, Limit::PenaltyBox),
        };
        let handle = self.handle(labels, |_| {
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
        });
        if let Handle::Counter(counter) = handle {
            counter.increment(1);
        }
    }

    /// `ratelimit_near_limit_total{route, limit}` += 1.
    pub(super) fn near_limit(&self, route: Option<&Arc<str>>, limit: &Arc<str>) {
        let labels = Labels::NearLimit {
            route: route.cloned(),
            limit: limit.clone(),
        };
        let handle = self.handle(labels, |_| {
            Handle::Counter(metrics::counter!(
                "ratelimit_near_limit_total",
                "route" => shared(route),
                "limit" => SharedString::from(limit.clone())
            ))
        });
        if let Handle::Counter(counter) = handle {
            counter.increment(1);
        }
    }

    /// `ratelimit_decision_seconds{backend}` records `seconds`.
    pub(super) fn latency(&self, backend: &'static str, seconds: f64) {
        let handle = self.handle(Labels::Latency { backend }, |_| {
            Handle::Histogram(
                metrics::histogram!("ratelimit_decision_seconds", "backend" => backend),
            )
        });
        if let Handle::Histogram(histogram) = handle {
            histogram.record(seconds);
        }
    }
}

fn shared(route: Option<&Arc<str>>) -> SharedString {
    route.map_or(SharedString::const_str(""), |r| {
        SharedString::from(r.clone())
    })
}
