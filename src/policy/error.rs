//! [`PolicyError`]: why a policy or limit was rejected.

use std::fmt;

use super::MAX_LIMITS;
use crate::algorithm::Algorithm;
use crate::quota::QuotaError;

/// Why a policy or limit was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// The policy has no limits.
    Empty,
    /// More than [`MAX_LIMITS`] limits.
    TooManyLimits(usize),
    /// Two limits share a name.
    DuplicateName(String),
    /// A name that cannot appear in a header.
    InvalidName(String),
    /// A burst on an algorithm without one (fixed window, sliding log, sliding window).
    BurstNotSupported {
        /// The limit's name.
        limit: String,
        /// Its algorithm.
        algorithm: Algorithm,
    },
    /// A quota in the text was invalid.
    Quota(QuotaError),
    /// Denied requests cannot count against a limit of requests in flight:
    /// a refused request is never in flight.
    CountDeniedInFlight(String),
    /// A sliding log (or a limit of requests in flight) longer than the
    /// policy allows ([`MAX_LOG_ENTRIES`](super::MAX_LOG_ENTRIES) unless
    /// raised).
    LogTooLong {
        /// The limit's name.
        limit: String,
        /// The entries its window may hold.
        entries: u32,
        /// The most allowed.
        max: u32,
    },
    /// A lease was given to a limit of requests made; only a limit of
    /// requests in flight ([`Limit::concurrent`](crate::Limit::concurrent)) holds leases.
    LeaseNotInFlight(String),
    /// A calendar quota (`/week`, `/month`, `/year`) under another
    /// algorithm than the fixed window, whose windows its periods are.
    CalendarNeedsFixedWindow {
        /// The limit's name.
        limit: String,
        /// The algorithm asked for.
        algorithm: Algorithm,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("invalid policy: it has no limits"),
            Self::TooManyLimits(n) => write!(
                f,
                "invalid policy: {n} limits, more than the maximum of {MAX_LIMITS}"
            ),
            Self::DuplicateName(name) => {
                write!(f, "invalid policy: two limits are named {name:?}")
            }
            Self::InvalidName(name) => write!(
                f,
                "invalid limit name {name:?}: use 1 to 64 printable ASCII characters without '\"' or '\\'"
            ),
            Self::BurstNotSupported { limit, algorithm } => write!(
                f,
                "invalid limit {limit:?}: {algorithm} has no burst; use token-bucket, leaky-bucket or gcra"
            ),
            Self::Quota(e) => e.fmt(f),
            Self::CountDeniedInFlight(limit) => write!(
                f,
                "invalid policy: it counts denied requests, but {limit:?} counts requests in flight, which a refused request never is"
            ),
            Self::LogTooLong { limit, entries, max } => write!(
                f,
                "invalid limit {limit:?}: a sliding log of {entries} entries a window is longer than {max} (memory grows with each entry); use sliding-window, which keeps 16 bytes a key, or raise PolicyBuilder::max_log_entries"
            ),
            Self::LeaseNotInFlight(limit) => write!(
                f,
                "invalid limit {limit:?}: only a limit of requests in flight (Limit::concurrent) takes a lease"
            ),
            Self::CalendarNeedsFixedWindow { limit, algorithm } => write!(
                f,
                "invalid limit {limit:?}: a calendar quota's windows are its weeks, months or years, so it is a fixed window, not {algorithm}"
            ),
        }
    }
}

impl std::error::Error for PolicyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Quota(e) => Some(e),
            _ => None,
        }
    }
}

impl From<QuotaError> for PolicyError {
    fn from(e: QuotaError) -> Self {
        Self::Quota(e)
    }
}
