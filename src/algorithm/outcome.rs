//! What one limit says about one request: [`Outcome`] and its [`Verdict`].

use std::num::NonZeroU64;
use std::time::Duration;

use crate::clock::Micros;

/// What one limit says about one request.
///
/// Algorithms produce these; so does a [`Backend`](crate::backend::Backend)
/// of your own, with [`Outcome::allowed`], [`Outcome::denied`] and
/// [`Outcome::never`], before [`Decision::from_outcomes`](crate::Decision::from_outcomes) combines them.
///
/// ```
/// use tower_ratelimit::clock::Micros;
/// use tower_ratelimit::algorithm::{Outcome, Verdict};
///
/// let denied = Outcome::denied(10, 0, Micros::from_secs(60), Micros::from_secs(6));
/// assert_eq!(denied.verdict(), Verdict::RetryAfter(Micros::from_secs(6)));
/// assert_eq!(denied.remaining(), 0);
///
/// // A retry-after of zero would tell a denied client to come back at once.
/// let soon = Outcome::denied(10, 0, Micros::ZERO, Micros::ZERO);
/// assert_eq!(soon.retry_after_micros(), Some(Micros::new(1)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The verdict in one word ([`ALLOWED`], [`NEVER`], or the retry-after
    /// in µs plus one), rather than a [`Verdict`], so that a decision holding
    /// outcomes stays small on the request path. Never zero: that spare
    /// value lets a `Decision` tell its two inline outcomes from its boxed
    /// ones without a tag of its own.
    wait: NonZeroU64,
    pub(crate) reset_after: Micros,
    limit: u32,
    remaining: u32,
}

const ALLOWED: NonZeroU64 = NonZeroU64::MIN;
const NEVER: NonZeroU64 = NonZeroU64::MAX;

/// The longest retry-after an outcome holds (half a million years): one
/// below what would read as [`NEVER`].
const LONGEST_RETRY: u64 = u64::MAX - 2;

/// Allowed, or denied with when to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The request fits.
    Allowed,
    /// The request does not fit now; the same request fits after this long
    /// (never zero).
    RetryAfter(Micros),
    /// The request can never fit: its cost is above the limit's capacity.
    Never,
}

impl Verdict {
    /// How long until the same request fits: only for a denial that ever can.
    #[inline]
    pub fn retry_after(self) -> Option<Micros> {
        match self {
            Verdict::RetryAfter(after) => Some(after),
            Verdict::Allowed | Verdict::Never => None,
        }
    }
}

impl Outcome {
    /// The request fits, leaving `remaining` units (capped at `limit`); the
    /// limit is whole again after `reset_after`.
    #[inline]
    pub fn allowed(limit: u32, remaining: u64, reset_after: Micros) -> Self {
        Self::new(ALLOWED, limit, remaining, reset_after)
    }

    /// The request does not fit now; it would after `retry_after` (raised to
    /// one microsecond if zero: a denied request is never told to retry at
    /// once).
    #[inline]
    pub fn denied(limit: u32, remaining: u64, reset_after: Micros, retry_after: Micros) -> Self {
        Self::new(
            retry_word(retry_after.as_u64()),
            limit,
            remaining,
            reset_after,
        )
    }

    /// The request can never fit (its cost exceeds the limit's capacity).
    #[inline]
    pub fn never(limit: u32, remaining: u64, reset_after: Micros) -> Self {
        Self::new(NEVER, limit, remaining, reset_after)
    }

    #[inline]
    fn new(wait: NonZeroU64, limit: u32, remaining: u64, reset_after: Micros) -> Self {
        Self {
            wait,
            reset_after,
            limit,
            // Remaining never exceeds the limit, which is a u32.
            remaining: remaining.min(u64::from(limit)) as u32,
        }
    }

    /// This outcome's state with `other`'s verdict.
    #[inline]
    pub(crate) fn with_verdict_of(self, other: Outcome) -> Self {
        Self {
            wait: other.wait,
            ..self
        }
    }

    /// The same outcome `elapsed` later: its reset and its retry-after
    /// shorter by that much (a denial's never below 1 µs).
    #[inline]
    pub(crate) fn aged(self, elapsed: Micros) -> Self {
        let wait = match self.verdict() {
            Verdict::RetryAfter(after) => {
                retry_word(after.as_u64().saturating_sub(elapsed.as_u64()))
            }
            Verdict::Allowed | Verdict::Never => self.wait,
        };
        Self {
            wait,
            reset_after: self.reset_after.saturating_sub(elapsed),
            ..self
        }
    }

    /// Allowed or denied, and when to retry.
    #[inline]
    pub fn verdict(&self) -> Verdict {
        match self.wait {
            ALLOWED => Verdict::Allowed,
            NEVER => Verdict::Never,
            wait => Verdict::RetryAfter(Micros::new(wait.get() - 1)),
        }
    }

    /// Whether the request fits.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.wait == ALLOWED
    }

    /// The limit's capacity: requests per window, or the bucket size.
    #[inline]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Units left after this request (if allowed) or now (if denied).
    #[inline]
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Time until the limit is whole again (zero if it is).
    #[inline]
    pub fn reset_after(&self) -> Duration {
        self.reset_after.into()
    }

    /// [`reset_after`](Self::reset_after) in the core's time.
    #[inline]
    pub fn reset_after_micros(&self) -> Micros {
        self.reset_after
    }

    /// Time after which the same request fits; `None` if it is allowed now
    /// or can never fit.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_micros().map(Duration::from)
    }

    /// [`retry_after`](Self::retry_after) in the core's time.
    #[inline]
    pub fn retry_after_micros(&self) -> Option<Micros> {
        self.verdict().retry_after()
    }
}

/// The word of a denial that can succeed after `retry_us` (at least 1 µs:
/// a denied client is never told to come back at once).
#[inline]
fn retry_word(retry_us: u64) -> NonZeroU64 {
    NonZeroU64::MIN.saturating_add(retry_us.clamp(1, LONGEST_RETRY))
}
