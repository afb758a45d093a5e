//! The six rate-limiting algorithms as pure state transitions.
//!
//! Each algorithm is a small value built from a [`Quota`](crate::Quota) and two pure
//! functions over a key's state: `check(state, now, cost)` says what a request
//! of `cost` would get, and `consume(state, now, cost)` returns the state after
//! it is counted. No clock reads, no I/O, no locks: time is an argument, in
//! integer microseconds ([`Micros`]), so every decision is exact and repeatable — and the
//! Redis scripts can mirror it to the microsecond.
//!
//! ```
//! use tower_ratelimit::algorithm::{Gcra, State};
//! use tower_ratelimit::Quota;
//! use tower_ratelimit::clock::Micros;
//!
//! // 2 per second, burst 2: the third request at t=0 waits half a second.
//! let gcra = Gcra::new(Quota::per_second(2).unwrap());
//! let (mut state, t0) = (State::default(), Micros::ZERO);
//! for _ in 0..2 {
//!     assert!(gcra.check(state, t0, 1).is_allowed());
//!     state = gcra.consume(state, t0, 1);
//! }
//! let denied = gcra.check(state, t0, 1);
//! assert!(!denied.is_allowed());
//! assert_eq!(denied.retry_after_micros(), Some(Micros::from_millis(500)));
//! ```
//!
//! | algorithm | state per key | admits in any window of length W |
//! |---|---|---|
//! | [`FixedWindow`] | 16 bytes | up to 2 × limit across a window boundary |
//! | [`SlidingLog`] | one entry per admitted request, at most `limit` | exactly the limit |
//! | [`SlidingWindow`] | 16 bytes | less than 2 × limit; the limit when traffic is even |
//! | [`TokenBucket`], [`LeakyBucket`], [`Gcra`] | 16 bytes (8 used) | burst + what refills in W |
//!
//! Token bucket, leaky bucket (as a meter) and GCRA are one algorithm seen
//! three ways — the token count, the bucket level and the theoretical arrival
//! time are the same number read differently — so for equal rate and burst
//! they admit exactly the same requests. All three are here because users
//! reason in all three; they share [`Gcra`]'s arithmetic.

#[cfg(feature = "fair-share")]
pub(crate) mod fair_flight;
#[cfg(feature = "fair-share")]
pub(crate) mod fair_share;
mod fixed_window;
mod gcra;
pub(crate) mod kind;
mod leaky_bucket;
pub(crate) mod outcome;
mod rule;
mod sliding_log;
mod sliding_window;
mod token_bucket;

pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use kind::UnknownAlgorithm;
pub use leaky_bucket::LeakyBucket;
pub use outcome::{Outcome, Verdict};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::SlidingWindow;
pub use token_bucket::TokenBucket;

pub(crate) use kind::Algorithm;
#[cfg(feature = "redis")]
pub(crate) use rule::FixedRule;
pub(crate) use rule::{Form, Rule};

use crate::clock::Micros;

/// One key's state under one fixed-size algorithm: two words.
///
/// `expires_at` is the time from which the state means the same as no
/// state at all — the window has ended, the bucket is full again. Backends use
/// it to reclaim state without knowing which algorithm wrote it. What `value`
/// holds is the algorithm's own business.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct State {
    /// The time from which this state equals a fresh one.
    pub expires_at: Micros,
    /// Algorithm-specific payload.
    pub value: u64,
}

impl State {
    /// Whether the state has nothing left to say at `now`.
    pub fn is_expired(&self, now: Micros) -> bool {
        self.expires_at <= now
    }
}
