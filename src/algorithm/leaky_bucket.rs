//! Leaky bucket, as a meter.

use super::{Gcra, State};
use crate::{algorithm::Outcome, clock::Micros, Quota};

/// A bucket of capacity `N` (the burst, or the limit) that each request fills
/// by its cost and that drains one unit every `T = window / limit`. A request
/// that would overflow the bucket is denied (this is the *meter*; delaying
/// requests until they fit is the layer's shaping mode).
///
/// The state is the time the bucket is empty again, `empty_at`, from which
/// `level(now) = ⌈(empty_at − now) / T⌉`. Adding `c` moves `empty_at` to
/// `max(empty_at, now) + c·T`. That is [`Gcra`]'s theoretical arrival time
/// under another name (ITU-T I.371 proves the continuous-state leaky bucket
/// and GCRA equivalent), so the arithmetic lives there.
///
/// ```
/// use tower_ratelimit::algorithm::{LeakyBucket, State};
/// use tower_ratelimit::Quota;
/// use tower_ratelimit::clock::Micros;
///
/// // Holds 5, drains 1 per second.
/// let lb = LeakyBucket::new(Quota::per_second(1).unwrap().with_burst(5).unwrap());
/// let s = lb.consume(State::default(), Micros::ZERO, 5);
/// assert_eq!(lb.level(s, Micros::ZERO), 5);
/// assert_eq!(lb.level(s, Micros::from_secs(2)), 3);
/// assert!(!lb.check(s, Micros::ZERO, 1).is_allowed());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeakyBucket(Gcra);

impl LeakyBucket {
    /// Capacity `burst` (or `limit`), draining `limit` per window.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Self(Gcra::new(quota))
    }

    /// How full the bucket is at `now`, in units.
    pub fn level(&self, state: State, now: Micros) -> u64 {
        self.0.units(self.0.in_use(state, now))
    }

    /// What a request of `cost` at `now` would get.
    #[inline]
    pub fn check(&self, state: State, now: Micros, cost: u32) -> Outcome {
        self.0.check(state, now, cost)
    }

    /// Give back `units` a request took (its actual cost was lower).
    #[inline]
    pub fn refund(&self, state: State, now: Micros, units: u32) -> State {
        self.0.refund(state, now, units)
    }

    /// The state after pouring in `cost` at `now` (the bucket never overflows).
    #[inline]
    pub fn consume(&self, state: State, now: Micros, cost: u32) -> State {
        self.0.consume(state, now, cost)
    }

    /// Charge `units` used beyond a reservation, past empty if need be (a
    /// debt; see [`Gcra::charge`]).
    #[inline]
    pub fn charge(&self, state: State, now: Micros, units: u32) -> State {
        self.0.charge(state, now, units)
    }

    #[inline]
    pub(crate) fn as_gcra(&self) -> &Gcra {
        &self.0
    }
}
