//! What the layer tells the logs (feature `tracing`) and the metrics
//! (feature `metrics`).
//!
//! Metrics: one counter, `ratelimit_requests_total`, labelled `outcome` —
//! `allowed`, `limited`, `key_rejected`, `key_skipped`,
//! `backend_error_allowed`, `backend_error_denied` — and, for `allowed` and
//! `limited`, `limit`: the deciding limit's name. Label values come from
//! configuration, never from clients.
//!
//! Logs:
//! * a backend failure: `warn`, with the action taken (`allow` or `deny`) —
//!   at most once a second per layer, with how many were not logged since,
//!   so an outage does not flood the logs;
//! * a limited request: `debug`, with the key's namespace and the deciding
//!   limit (never the key itself);
//! * a request with no key: `debug`, with what was missing.
//!
//! Without the features these are no-ops.

#[cfg(feature = "tracing")]
use std::sync::atomic::{AtomicU64, Ordering};

use crate::key::KeyError;
use crate::{BackendError, Decision, Key, Limit, Policy};

/// Throttles backend-failure warnings to one a second.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    #[cfg(feature = "tracing")]
    last_second: AtomicU64,
    #[cfg(feature = "tracing")]
    suppressed: AtomicU64,
}

/// A copy starts its own count.
impl Clone for FailureLog {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl FailureLog {
    /// The backend failed and the layer did `action` (`allow` or `deny`).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn backend_failed(&self, action: &'static str, error: &BackendError) {
        count(
            if action == "deny" {
                "backend_error_denied"
            } else {
                "backend_error_allowed"
            },
            None,
        );
        #[cfg(feature = "tracing")]
        {
            let second = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let last = self.last_second.load(Ordering::Relaxed);
            let first_this_second = second > last
                && self
                    .last_second
                    .compare_exchange(last, second, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok();
            if first_this_second {
                let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
                tracing::warn!(%error, action, suppressed, "rate limit backend failed");
            } else {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Count one request's outcome (feature `metrics`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn count(outcome: &'static str, limit: Option<&Limit>) {
    #[cfg(feature = "metrics")]
    match limit {
        // The shared name: a reference count, not a copy, per request.
        Some(limit) => metrics::counter!(
            "ratelimit_requests_total",
            "outcome" => outcome,
            "limit" => limit.shared_name().clone()
        )
        .increment(1),
        None => metrics::counter!("ratelimit_requests_total", "outcome" => outcome).increment(1),
    }
}

fn deciding<'a>(policy: &'a Policy, decision: &Decision) -> Option<&'a Limit> {
    policy.limits().get(decision.decided_by())
}

/// A request was allowed.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn allowed(policy: &Policy, decision: &Decision) {
    count("allowed", deciding(policy, decision));
}

/// A request was limited.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn limited(key: &Key, policy: &Policy, decision: &Decision) {
    count("limited", deciding(policy, decision));
    #[cfg(feature = "tracing")]
    tracing::debug!(
        key_kind = key.namespace(),
        limit = policy
            .limits()
            .get(decision.decided_by())
            .map_or("", |l| l.name()),
        retry_after_ms = decision.retry_after().map(|d| d.as_millis() as u64),
        capacity_exhausted = decision.is_capacity_exhausted(),
        "request limited"
    );
}

/// A request had no key.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn key_missing(error: &KeyError, rejected: bool) {
    count(
        if rejected {
            "key_rejected"
        } else {
            "key_skipped"
        },
        None,
    );
    #[cfg(feature = "tracing")]
    tracing::debug!(%error, rejected, "no rate limit key");
}
