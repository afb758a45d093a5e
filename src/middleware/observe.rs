//! What the layer tells the logs (feature `tracing`) and the metrics
//! (feature `metrics`).
//!
//! Metrics: one counter, `ratelimit_requests_total`, labelled `outcome` —
//! `allowed`, `limited`, `fallback_allowed`, `fallback_limited` (decided by
//! a [`Fallback`](crate::backend::Fallback)'s second backend), `key_rejected`,
//! `key_skipped`, `backend_error_allowed`, `backend_error_denied` — and, for
//! the decided ones, `limit`: the deciding limit's name. Label values come
//! from configuration, never from clients.
//!
//! Logs:
//! * a backend failure: `warn`, with the action taken (`allow`, `deny`, or
//!   `fallback` from a `Fallback`) — at most once a second per layer, with
//!   how many were not logged since;
//! * a server set up so that no request can have a key (no peer address):
//!   `error`, once per layer, saying how to fix it;
//! * a limited request: `debug`, with the key's namespace and the deciding
//!   limit (never the key itself);
//! * a request with no key: `debug`, with what was missing.
//!
//! Without the features these are no-ops. [`Decided`] is always there: in
//! the extensions of each request the inner service gets, and of each
//! response the limiter makes.

use super::config::Config;
use crate::backend::BackendError;
use crate::key::{Key, KeyError};
use crate::{Decision, Limit, Origin, Policy};

/// How the limiter decided a request: put in the extensions of the request
/// the inner service gets (allowed, or let through because no decision could
/// be had) and of each response the limiter makes itself (429, 503).
///
/// ```
/// use tower_ratelimit::Decided;
///
/// async fn handler(req: axum::extract::Request) -> &'static str {
///     match req.extensions().get::<Decided>() {
///         Some(Decided::Store) => "limited by the shared store",
///         Some(Decided::Fallback | Decided::BreakerOpen) => "limited locally: the store is down",
///         Some(Decided::FailedOpen { .. }) => "not limited: the store is down",
///         _ => "not limited",
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decided {
    /// The backend decided.
    Store,
    /// A denial the backend made earlier, remembered until its retry-after
    /// (no round trip).
    Cached,
    /// A [`Fallback`](crate::backend::Fallback)'s second backend decided:
    /// the first failed.
    Fallback,
    /// A fallback decided without asking the first backend: its
    /// [`Breaker`](crate::backend::Breaker) is open.
    BreakerOpen,
    /// No decision could be had, and the request was let through
    /// ([`OnBackendError::Allow`](crate::OnBackendError::Allow)).
    FailedOpen {
        /// The backend was not asked: its breaker is open.
        breaker_open: bool,
    },
    /// No decision could be had, and the request was refused with 503
    /// ([`OnBackendError::Deny`](crate::OnBackendError::Deny)).
    FailedClosed {
        /// The backend was not asked: its breaker is open.
        breaker_open: bool,
    },
}

impl From<Origin> for Decided {
    fn from(origin: Origin) -> Self {
        match origin {
            Origin::Fallback => Decided::Fallback,
            Origin::BreakerOpen => Decided::BreakerOpen,
            Origin::Cached => Decided::Cached,
            _ => Decided::Store,
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
pub(super) fn allowed(policy: &Policy, decision: &Decision) {
    let outcome = by_origin(decision, "allowed", "fallback_allowed");
    count(outcome, deciding(policy, decision));
}

/// `store`, or `fallback` when a fallback decided.
fn by_origin(decision: &Decision, store: &'static str, fallback: &'static str) -> &'static str {
    match decision.origin() {
        Origin::Fallback | Origin::BreakerOpen => fallback,
        _ => store,
    }
}

/// A request was limited.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(super) fn limited(key: &Key, policy: &Policy, decision: &Decision) {
    let outcome = by_origin(decision, "limited", "fallback_limited");
    count(outcome, deciding(policy, decision));
    #[cfg(feature = "tracing")]
    tracing::debug!(
        key_kind = key.namespace(),
        limit = deciding(policy, decision).map_or("", |l| l.name()),
        retry_after_ms = decision.retry_after().map(|d| d.as_millis() as u64),
        capacity_exhausted = decision.is_capacity_exhausted(),
        origin = ?decision.origin(),
        "request limited"
    );
}

/// The backend failed and the layer did `action` (`allow` or `deny`).
pub(super) fn backend_failed(config: &Config, action: &'static str, error: &BackendError) {
    count(
        if action == "deny" {
            "backend_error_denied"
        } else {
            "backend_error_allowed"
        },
        None,
    );
    config.failures.warn(action, error);
}

/// A request had no key.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(super) fn key_missing(config: &Config, error: &KeyError, rejected: bool) {
    count(
        if rejected {
            "key_rejected"
        } else {
            "key_skipped"
        },
        None,
    );
    #[cfg(feature = "tracing")]
    if error.is_misconfiguration() && config.misconfiguration_logged.first() {
        tracing::error!(%error, rejected, "no request can have a rate limit key");
    } else {
        tracing::debug!(%error, rejected, "no rate limit key");
    }
}
