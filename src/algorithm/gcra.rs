//! Generic cell rate algorithm (GCRA).

use super::State;
use crate::{algorithm::Outcome, clock::Micros, Quota};

/// GCRA: each key holds one time, the *theoretical arrival time* (TAT) —
/// when the key would be idle again if requests kept coming at the rate.
/// With emission interval `T = window / limit` and capacity `B` (the burst,
/// or the limit), a request of cost `c` fits when
/// `max(TAT, now) + c·T − now ≤ B·T`, and then moves TAT to
/// `max(TAT, now) + c·T`.
///
/// `T` is rounded up to a whole microsecond, so the limiter is never more
/// generous than its quota. State: `expires_at` is the TAT; `value` is unused.
///
/// ```
/// use tower_ratelimit::algorithm::{Gcra, State};
/// use tower_ratelimit::Quota;
/// use tower_ratelimit::clock::Micros;
///
/// // 10/s burst 3: three at once, then one every 100 ms.
/// let gcra = Gcra::new(Quota::per_second(10).unwrap().with_burst(3).unwrap());
/// let mut s = State::default();
/// for _ in 0..3 {
///     s = gcra.consume(s, Micros::ZERO, 1);
/// }
/// assert_eq!(gcra.check(s, Micros::ZERO, 1).retry_after_micros(), Some(Micros::from_millis(100)));
/// assert!(gcra.check(s, Micros::from_millis(100), 1).is_allowed());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gcra {
    capacity: u32,
    interval: Micros,
}

impl Gcra {
    /// GCRA for `quota`: rate `limit / window`, capacity `burst` (or `limit`).
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Self {
            capacity: quota.capacity(),
            interval: quota.emission_interval(),
        }
    }

    /// The capacity in use at `now`, as time (`TAT − now`, at least 0).
    #[inline]
    pub(crate) fn in_use(&self, state: State, now: Micros) -> Micros {
        state.expires_at.saturating_sub(now)
    }

    /// Whole units free when `in_use` microseconds of capacity are taken.
    #[inline]
    fn free(&self, in_use: Micros) -> u64 {
        // `in_use` can exceed the capacity by a moment when `now` is a
        // little behind the state (another thread read the clock first and
        // took the lock second): nothing is free then.
        u64::from(self.capacity).saturating_sub(self.units(in_use))
    }

    /// Whole units that `span` of capacity holds, rounded up.
    #[inline]
    pub(crate) fn units(&self, span: Micros) -> u64 {
        span.as_u64().div_ceil(self.interval.as_u64())
    }

    /// The time `cost` units take: `c·T`.
    #[inline]
    fn time_of(&self, cost: u32) -> Micros {
        Micros::new(u64::from(cost) * self.interval.as_u64())
    }

    /// What a request of `cost` at `now` would get.
    #[inline]
    pub fn check(&self, state: State, now: Micros, cost: u32) -> Outcome {
        let in_use = self.in_use(state, now);
        if cost > self.capacity {
            return Outcome::never(self.capacity, self.free(in_use), in_use);
        }
        let after = in_use + self.time_of(cost);
        let span = self.time_of(self.capacity);
        if after <= span {
            Outcome::allowed(self.capacity, self.free(after), after)
        } else {
            Outcome::denied(
                self.capacity,
                self.free(in_use),
                in_use,
                after.saturating_sub(span),
            )
        }
    }

    /// Give back `units` a request took (its actual cost was lower): the
    /// bucket holds that much more, never more than full.
    #[inline]
    pub fn refund(&self, state: State, now: Micros, units: u32) -> State {
        let in_use = self.in_use(state, now).saturating_sub(self.time_of(units));
        State {
            expires_at: now + in_use,
            value: 0,
        }
    }

    /// The state after counting `cost` at `now`, never past the capacity.
    #[inline]
    pub fn consume(&self, state: State, now: Micros, cost: u32) -> State {
        let in_use = self.in_use(state, now) + self.time_of(cost);
        State {
            expires_at: now + in_use.min(self.time_of(self.capacity)),
            value: 0,
        }
    }

    /// The state after charging `units` a request used beyond what it
    /// reserved, at `now`: past the capacity if need be, as a debt that
    /// later requests wait out (the work is done).
    #[inline]
    pub fn charge(&self, state: State, now: Micros, units: u32) -> State {
        let charged = u64::from(units).saturating_mul(self.interval.as_u64());
        let in_use = self.in_use(state, now).saturating_add(Micros::new(charged));
        State {
            expires_at: now.saturating_add(in_use),
            value: 0,
        }
    }

    /// The capacity `B`.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The emission interval `T`.
    pub fn interval(&self) -> Micros {
        self.interval
    }
}
