//! Which responses of the guarded service count as failures.

use std::time::Duration;

use http::{HeaderMap, StatusCode};

/// Decides whether a response of the guarded service is a failure: by
/// default a 5xx status (a 429 of its own, and every 4xx, is the client's
/// doing, not the service's health); optionally gRPC status codes (read
/// from a trailers-only response's `grpc-status`) and a latency target, past
/// which a response counts as a failure whatever its status.
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::layer::adaptive::Classifier;
///
/// let classify = Classifier::default()
///     .grpc_codes([4, 8, 14]) // DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNAVAILABLE
///     .latency_target(Duration::from_millis(500));
/// ```
#[derive(Clone, Debug)]
pub struct Classifier {
    statuses: Vec<StatusCode>,
    server_errors: bool,
    grpc_codes: Vec<u32>,
    latency_target: Option<Duration>,
}

impl Default for Classifier {
    /// 5xx statuses are failures; no latency target.
    fn default() -> Self {
        Self {
            statuses: Vec::new(),
            server_errors: true,
            grpc_codes: Vec::new(),
            latency_target: None,
        }
    }
}

impl Classifier {
    /// Only these statuses are failures (not every 5xx).
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self.server_errors = false;
        self
    }

    /// These gRPC status codes are failures too.
    pub fn grpc_codes(mut self, codes: impl IntoIterator<Item = u32>) -> Self {
        self.grpc_codes = codes.into_iter().collect();
        self
    }

    /// A response slower than `target` is a failure (a timeout, as the
    /// guarded service's clients see it); so is a call dropped after it.
    pub fn latency_target(mut self, target: Duration) -> Self {
        self.latency_target = Some(target);
        self
    }

    /// Whether a response with `status` and `headers`, `latency` after its
    /// request, is a failure.
    pub fn is_failure(&self, status: StatusCode, headers: &HeaderMap, latency: Duration) -> bool {
        if self.is_too_slow(latency) {
            return true;
        }
        let by_status = if self.server_errors {
            status.is_server_error()
        } else {
            self.statuses.contains(&status)
        };
        by_status
            || (!self.grpc_codes.is_empty()
                && headers
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok()?.parse::<u32>().ok())
                    .is_some_and(|code| self.grpc_codes.contains(&code)))
    }

    /// Whether `latency` is past the target (never, without one).
    pub(super) fn is_too_slow(&self, latency: Duration) -> bool {
        self.latency_target.is_some_and(|target| latency > target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_timeouts_and_grpc_codes_fail() {
        let none = HeaderMap::new();
        let fast = Duration::from_millis(10);
        let default = Classifier::default();
        assert!(default.is_failure(StatusCode::SERVICE_UNAVAILABLE, &none, fast));
        assert!(!default.is_failure(StatusCode::TOO_MANY_REQUESTS, &none, fast));
        assert!(!default.is_failure(StatusCode::OK, &none, Duration::from_secs(60)));
        let strict = Classifier::default()
            .statuses([StatusCode::BAD_GATEWAY])
            .grpc_codes([14])
            .latency_target(Duration::from_millis(100));
        assert!(!strict.is_failure(StatusCode::INTERNAL_SERVER_ERROR, &none, fast));
        assert!(strict.is_failure(StatusCode::BAD_GATEWAY, &none, fast));
        assert!(strict.is_failure(StatusCode::OK, &none, Duration::from_millis(101)));
        let mut grpc = HeaderMap::new();
        grpc.insert("grpc-status", "14".parse().unwrap());
        assert!(strict.is_failure(StatusCode::OK, &grpc, fast));
        grpc.insert("grpc-status", "5".parse().unwrap());
        assert!(!strict.is_failure(StatusCode::OK, &grpc, fast));
    }
}
