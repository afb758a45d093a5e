//! Token bucket.

use super::{Gcra, State};
use crate::{algorithm::Outcome, clock::Micros, Quota};

/// A bucket of `B` tokens (the burst, or the limit) that starts full and
/// refills one token every `T = window / limit`; a request of cost `c` takes
/// `c` tokens or is denied.
///
/// The state is the time the bucket is full again, `full_at`, from which
/// `tokens(now) = B − ⌈(full_at − now) / T⌉`. Taking `c` tokens moves
/// `full_at` to `max(full_at, now) + c·T`. That is exactly [`Gcra`] with the
/// same rate and burst — `full_at` is GCRA's theoretical arrival time — so the
/// arithmetic lives there and both admit the same requests.
///
/// ```
/// use tower_ratelimit::algorithm::{State, TokenBucket};
/// use tower_ratelimit::Quota;
/// use tower_ratelimit::clock::Micros;
///
/// // Capacity 100, refilling 100 per minute: one token per 600 ms.
/// let tb = TokenBucket::new(Quota::per_minute(100).unwrap());
/// let mut s = State::default();
/// s = tb.consume(s, Micros::ZERO, 100); // empty
/// assert_eq!(tb.check(s, Micros::new(1_799_999), 1).remaining(), 1); // two back, one taken
/// assert_eq!(tb.tokens(s, Micros::from_millis(1_800)), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket(Gcra);

impl TokenBucket {
    /// Capacity `burst` (or `limit`), refilling `limit` tokens per window.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Self(Gcra::new(quota))
    }

    /// Tokens in the bucket at `now`.
    pub fn tokens(&self, state: State, now: Micros) -> u32 {
        self.0.check(state, now, 0).remaining()
    }

    /// What a request taking `cost` tokens at `now` would get.
    #[inline]
    pub fn check(&self, state: State, now: Micros, cost: u32) -> Outcome {
        self.0.check(state, now, cost)
    }

    /// Give back `units` a request took (its actual cost was lower).
    #[inline]
    pub fn refund(&self, state: State, now: Micros, units: u32) -> State {
        self.0.refund(state, now, units)
    }

    /// The state after taking `cost` tokens at `now` (the bucket never goes below empty).
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
