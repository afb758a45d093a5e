//! [`PolicyBuilder`]: a policy's limits and settings, checked when built.

use std::sync::Arc;

use super::error::PolicyError;
use super::limit::Limit;
use super::policy::{Policy, Settings};
use crate::algorithm::Algorithm;
use crate::policy::penalty::PenaltyBox;
use crate::quota::quota::Quota;

/// Builds a [`Policy`]; every problem is reported by [`PolicyBuilder::build`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct PolicyBuilder {
    pub(super) limits: Vec<Result<Limit, PolicyError>>,
    pub(super) settings: Settings,
}

impl PolicyBuilder {
    /// Add a limit named `name` enforcing `quota` with `algorithm`.
    pub fn limit(mut self, name: impl Into<Arc<str>>, algorithm: Algorithm, quota: Quota) -> Self {
        self.limits.push(Limit::new(name, algorithm, quota));
        self
    }

    /// Add `limit` as it is (a [`Limit::concurrent`], say).
    pub fn with(mut self, limit: Limit) -> Self {
        self.limits.push(Ok(limit));
        self
    }

    /// Whether denied requests count against every limit (default: no).
    ///
    /// When they do, a client that keeps sending while denied stays denied: a
    /// denied request is counted as if admitted, but never past a limit's
    /// capacity, so a client that stops is free again after at most one
    /// window (or one full refill).
    pub fn count_denied(mut self, count: bool) -> Self {
        self.settings.count_denied = count;
        self
    }

    /// Shadow mode (a dry run): requests are decided, counted and reported
    /// (metrics, logs, optionally headers) as usual, but a request the
    /// policy denies is let through, never delayed. Its limits consume only
    /// what an enforced policy would have admitted, so the reports show what
    /// enforcing would do. Roll a new limit out this way, then turn shadow
    /// off (with [`Policy::to_builder`]) without losing its state.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.settings.shadow = shadow;
        self
    }

    /// Allow sliding logs (and limits of requests in flight) of up to
    /// `max` entries per window instead of
    /// [`MAX_LOG_ENTRIES`](super::MAX_LOG_ENTRIES): memory a key may take,
    /// about 16 bytes an entry.
    pub fn max_log_entries(mut self, max: u32) -> Self {
        self.settings.max_log_entries = Some(max);
        self
    }

    /// Ban clients this policy denies too often (see [`PenaltyBox`](crate::policy::PenaltyBox)).
    pub fn penalty(mut self, penalty: PenaltyBox) -> Self {
        self.settings.penalty = Some(penalty);
        self
    }

    /// The policy, or the first problem: no limits, more than [`MAX_LIMITS`](super::MAX_LIMITS),
    /// a repeated name, or an invalid limit.
    pub fn build(self) -> Result<Policy, PolicyError> {
        let limits = self.limits.into_iter().collect::<Result<Vec<_>, _>>()?;
        Policy::build_from(limits, self.settings)
    }
}
