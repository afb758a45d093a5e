//! What the layer tells the logs (feature `tracing`).
//!
//! * a backend failure: `warn`, with the action taken (`allow` or `deny`) —
//!   at most once a second per layer, with how many were not logged since,
//!   so an outage does not flood the logs;
//! * a limited request: `debug`, with the key's namespace and the deciding
//!   limit (never the key itself);
//! * a request with no key: `debug`, with what was missing.
//!
//! Without the feature these are no-ops.

#[cfg(feature = "tracing")]
use std::sync::atomic::{AtomicU64, Ordering};

use crate::key::KeyError;
use crate::{BackendError, Decision, Key, Policy};

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
    /// The backend failed and the layer did `action`.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn backend_failed(&self, action: &'static str, error: &BackendError) {
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

/// A request was limited.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn limited(key: &Key, policy: &Policy, decision: &Decision) {
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
    #[cfg(feature = "tracing")]
    tracing::debug!(%error, rejected, "no rate limit key");
}
