//! [`Live`]: a setting replaced at runtime, read without a lock.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

/// A value shared by every clone of this handle, replaced at runtime and
/// read lock-free.
///
/// Policies ([`RoutePolicies`](crate::layer::RoutePolicies), a [`Policy`](crate::Policy),
/// any resolver), per-key policies ([`KeyPolicies`](crate::layer::KeyPolicies)) and
/// access lists ([`AccessLists`](crate::layer::AccessLists)) can be given to a layer
/// as a `Live` handle; keep a clone and [`replace`](Live::replace) the value
/// whenever the configuration changes — no restart, no lock on the request
/// path (each request reads the current value with a few atomic operations).
///
/// ## What a change does to clients' state
///
/// A limit's state is kept under its [identity](crate::Limit::identity):
/// name, algorithm and window. So:
///
/// * a named limit whose algorithm and window stay the same keeps every
///   client's state when its number or burst changes, read under the new
///   quota: tightening `100/min` to `20/min` after a client spent 30 leaves
///   it nothing under the windows and the log (30 of 20), and under the
///   buckets what the time its tokens take to come back is worth at the new
///   rate (30 at 100/min is 18 s, 6 tokens at 20/min); never a fresh budget;
/// * a limit whose algorithm or window changes is a new limit: every client
///   starts on it with a full budget, and the old state expires by itself
///   (within its window), so that one algorithm's state is never misread as
///   another's. An anonymous limit is named after its quota, so any change
///   of its quota is a new limit: name a limit to keep its state;
/// * a [penalty box](crate::policy::PenaltyBox)'s bans belong to its
///   policy's limits by identity, so they survive a change of their
///   numbers, and end with a change of their names, algorithms or windows.
///
/// ```
/// use tower_ratelimit::{Live, Policy};
/// use tower_ratelimit::key::RequestHead;
/// use tower_ratelimit::layer::{PolicyResolver, RoutePolicies};
///
/// let routes = Live::new(RoutePolicies::new().route("/api", "100/min".parse::<Policy>().unwrap()));
/// // The layer gets a clone: `RateLimitLayer::new(routes.clone())`.
/// let req = http::Request::get("/api").body(()).unwrap();
/// let limit_of = |live: &Live<RoutePolicies>| {
///     live.resolve(&RequestHead::from(&req)).unwrap().limits()[0].quota().limit()
/// };
/// assert_eq!(limit_of(&routes), 100);
///
/// routes.replace(RoutePolicies::new().route("/api", "20/min".parse().unwrap()));
/// assert_eq!(limit_of(&routes), 20);
/// ```
pub struct Live<T> {
    current: Arc<ArcSwap<T>>,
}

impl<T> Live<T> {
    /// A handle holding `value`.
    pub fn new(value: T) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(value)),
        }
    }

    /// The value now: requests already under way keep the one they read.
    pub fn current(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// Replace the value for every clone of this handle; the old one is
    /// returned.
    pub fn replace(&self, value: T) -> Arc<T> {
        self.current.swap(Arc::new(value))
    }

    /// Replace the value with `change` applied to the current one. Changes
    /// made at once from several threads are all kept: `change` is run again
    /// on whatever value won.
    pub fn update(&self, change: impl Fn(&T) -> T) {
        self.current.rcu(|now| change(now));
    }

    /// The value, for the request path: usually without touching its
    /// reference count.
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<T>> {
        self.current.load()
    }
}

impl<T> Clone for Live<T> {
    fn clone(&self) -> Self {
        Self {
            current: self.current.clone(),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Live<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Live").field(&self.current.load()).finish()
    }
}

impl<T: Default> Default for Live<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> From<T> for Live<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}
