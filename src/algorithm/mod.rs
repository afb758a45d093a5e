//! The six rate-limiting algorithms as pure state transitions.
//!
//! Each algorithm is a small value built from a [`Quota`] and two pure
//! functions over a key's state: `check(state, now, cost)` says what a request
//! of `cost` would get, and `consume(state, now, cost)` returns the state after
//! it is counted. No clock reads, no I/O, no locks: time is an argument, in
//! integer microseconds, so every decision is exact and repeatable — and the
//! Redis scripts can mirror it to the microsecond.
//!
//! ```
//! use tower_ratelimit::algorithm::{Gcra, State};
//! use tower_ratelimit::Quota;
//!
//! // 2 per second, burst 2: the third request at t=0 waits half a second.
//! let gcra = Gcra::new(Quota::per_second(2).unwrap());
//! let mut state = State::default();
//! for _ in 0..2 {
//!     assert!(gcra.check(state, 0, 1).is_allowed());
//!     state = gcra.consume(state, 0, 1);
//! }
//! let denied = gcra.check(state, 0, 1);
//! assert!(!denied.is_allowed());
//! assert_eq!(denied.retry_after_us(), Some(500_000));
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

mod fixed_window;
mod gcra;
mod leaky_bucket;
mod sliding_log;
mod sliding_window;
mod token_bucket;

pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use leaky_bucket::LeakyBucket;
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::SlidingWindow;
pub use token_bucket::TokenBucket;

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use crate::Quota;

/// One key's state under one fixed-size algorithm: two words.
///
/// `expires_at` is the time (µs) from which the state means the same as no
/// state at all — the window has ended, the bucket is full again. Backends use
/// it to reclaim state without knowing which algorithm wrote it. What `value`
/// holds is the algorithm's own business.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct State {
    /// Microseconds from which this state equals a fresh one.
    pub expires_at: u64,
    /// Algorithm-specific payload.
    pub value: u64,
}

impl State {
    /// Whether the state has nothing left to say at `now`.
    pub fn is_expired(&self, now: u64) -> bool {
        self.expires_at <= now
    }
}

/// What a limit says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// 0: allowed; `u64::MAX`: never; else the retry-after in µs. Kept as
    /// one word (rather than a [`Verdict`]) so that a decision holding eight
    /// outcomes stays small on the request path.
    retry_us: u64,
    reset_after_us: u64,
    limit: u32,
    remaining: u32,
}

const NEVER: u64 = u64::MAX;

/// Allowed, or denied with when to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The request fits.
    Allowed,
    /// The request does not fit now; the same request fits after this many
    /// microseconds (never zero).
    RetryAfter(NonZeroU64),
    /// The request can never fit: its cost is above the limit's capacity.
    Never,
}

impl Outcome {
    #[inline]
    pub(crate) fn allowed(limit: u32, remaining: u64, reset_after_us: u64) -> Self {
        Self::new(0, limit, remaining, reset_after_us)
    }

    /// A denial; `retry_after_us` of zero is raised to one (a denied request
    /// must never be told to retry at once).
    #[inline]
    pub(crate) fn denied(
        retry_after_us: u64,
        limit: u32,
        remaining: u64,
        reset_after_us: u64,
    ) -> Self {
        let retry = retry_after_us.clamp(1, NEVER - 1);
        Self::new(retry, limit, remaining, reset_after_us)
    }

    #[inline]
    pub(crate) fn never(limit: u32, remaining: u64, reset_after_us: u64) -> Self {
        Self::new(NEVER, limit, remaining, reset_after_us)
    }

    #[inline]
    fn new(retry_us: u64, limit: u32, remaining: u64, reset_after_us: u64) -> Self {
        Self {
            retry_us,
            reset_after_us,
            limit,
            // Remaining never exceeds the limit, which is a u32.
            remaining: remaining.min(u64::from(limit)) as u32,
        }
    }

    #[inline]
    pub(crate) fn with_verdict_of(self, other: Outcome) -> Self {
        Self {
            retry_us: other.retry_us,
            ..self
        }
    }

    /// Allowed or denied, and when to retry.
    #[inline]
    pub fn verdict(&self) -> Verdict {
        match self.retry_us {
            NEVER => Verdict::Never,
            us => NonZeroU64::new(us).map_or(Verdict::Allowed, Verdict::RetryAfter),
        }
    }

    /// Whether the request fits.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.retry_us == 0
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

    /// Microseconds until the limit is fully available again (0 if it is).
    #[inline]
    pub fn reset_after_us(&self) -> u64 {
        self.reset_after_us
    }

    /// Time until the limit is fully available again.
    pub fn reset_after(&self) -> Duration {
        Duration::from_micros(self.reset_after_us)
    }

    /// Microseconds after which the same request fits; `None` if it is allowed
    /// now or can never fit.
    pub fn retry_after_us(&self) -> Option<u64> {
        match self.retry_us {
            0 | NEVER => None,
            us => Some(us),
        }
    }

    /// Time after which the same request fits (see [`Outcome::retry_after_us`]).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_us().map(Duration::from_micros)
    }
}

/// The six algorithms, by name. Parses from and prints as `fixed-window`,
/// `sliding-log`, `sliding-window`, `token-bucket`, `leaky-bucket`, `gcra`.
///
/// ```
/// use tower_ratelimit::Algorithm;
/// assert_eq!("gcra".parse::<Algorithm>().unwrap(), Algorithm::Gcra);
/// assert_eq!(Algorithm::SlidingWindow.to_string(), "sliding-window");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Counts per aligned window; resets at each boundary.
    FixedWindow,
    /// Remembers each admitted request for one window: exact.
    SlidingLog,
    /// Current window's count plus the previous window's, weighted by overlap.
    #[default]
    SlidingWindow,
    /// Tokens refill at the rate up to the burst; each request takes some.
    TokenBucket,
    /// A meter that fills with each request and drains at the rate.
    LeakyBucket,
    /// Generic cell rate algorithm: one theoretical arrival time per key.
    Gcra,
}

impl Algorithm {
    /// All six, in the order of the documentation.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ];

    /// The name it parses from.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::SlidingWindow => "sliding-window",
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::LeakyBucket => "leaky-bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether a quota's burst means something to this algorithm.
    pub fn takes_burst(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

/// A name that is none of the six algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown algorithm {:?} (expected one of fixed-window, sliding-log, \
             sliding-window, token-bucket, leaky-bucket, gcra)",
            self.0
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}

/// An algorithm bound to its quota, ready to apply: what a [`Limit`](crate::Limit) runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingWindow(SlidingWindow),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    Gcra(Gcra),
}

impl Rule {
    #[inline]
    pub(crate) fn new(algorithm: Algorithm, quota: Quota) -> Self {
        match algorithm {
            Algorithm::FixedWindow => Rule::FixedWindow(FixedWindow::new(quota)),
            Algorithm::SlidingLog => Rule::SlidingLog(SlidingLog::new(quota)),
            Algorithm::SlidingWindow => Rule::SlidingWindow(SlidingWindow::new(quota)),
            Algorithm::TokenBucket => Rule::TokenBucket(TokenBucket::new(quota)),
            Algorithm::LeakyBucket => Rule::LeakyBucket(LeakyBucket::new(quota)),
            Algorithm::Gcra => Rule::Gcra(Gcra::new(quota)),
        }
    }

    /// How its state is kept.
    #[inline]
    pub(crate) fn form(&self) -> Form<'_> {
        match self {
            Rule::FixedWindow(a) => Form::Fixed(FixedRule::FixedWindow(a)),
            Rule::SlidingWindow(a) => Form::Fixed(FixedRule::SlidingWindow(a)),
            Rule::TokenBucket(a) => Form::Fixed(FixedRule::Gcra(a.as_gcra())),
            Rule::LeakyBucket(a) => Form::Fixed(FixedRule::Gcra(a.as_gcra())),
            Rule::Gcra(a) => Form::Fixed(FixedRule::Gcra(a)),
            Rule::SlidingLog(a) => Form::Log(a),
        }
    }
}

/// A rule by the shape of its state.
#[derive(Clone, Copy)]
pub(crate) enum Form<'a> {
    /// One [`State`] per key.
    Fixed(FixedRule<'a>),
    /// A [`SlidingLogState`] per key.
    Log(&'a SlidingLog),
}

/// The algorithms whose state is one [`State`].
#[derive(Clone, Copy)]
pub(crate) enum FixedRule<'a> {
    FixedWindow(&'a FixedWindow),
    SlidingWindow(&'a SlidingWindow),
    Gcra(&'a Gcra),
}

impl FixedRule<'_> {
    #[inline]
    pub(crate) fn check(self, state: State, now: u64, cost: u32) -> Outcome {
        match self {
            FixedRule::FixedWindow(a) => a.check(state, now, cost),
            FixedRule::SlidingWindow(a) => a.check(state, now, cost),
            FixedRule::Gcra(a) => a.check(state, now, cost),
        }
    }

    #[inline]
    pub(crate) fn consume(self, state: State, now: u64, cost: u32) -> State {
        match self {
            FixedRule::FixedWindow(a) => a.consume(state, now, cost),
            FixedRule::SlidingWindow(a) => a.consume(state, now, cost),
            FixedRule::Gcra(a) => a.consume(state, now, cost),
        }
    }
}
