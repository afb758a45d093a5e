//! [`Limiter`]: a policy on a backend, for code that is not an HTTP
//! service — WebSocket messages, queue consumers, outbound calls.
//!
//! ```
//! use std::time::Duration;
//! use tower_ratelimit::key::Key;
//! use tower_ratelimit::{Limiter, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // 2 messages a second per connection.
//! let limiter = Limiter::new("2/s".parse::<Policy>().unwrap());
//! let connection = Key::new("ws-connection", "42");
//! assert!(limiter.check(&connection, 1).await.is_allowed());
//! assert!(limiter.check(&connection, 1).await.is_allowed());
//! let third = limiter.check(&connection, 1).await;
//! assert!(!third.is_allowed());
//! // The default algorithm, a sliding window, frees room within two windows.
//! assert!(third.retry_after().unwrap() <= Duration::from_secs(2));
//!
//! // Or wait until it fits, for at most two seconds.
//! assert!(limiter.until_ready(&connection, 1, Duration::from_secs(2)).await.is_allowed());
//! # }
//! ```
//!
//! The same policy on the same backend is the same budget as in a
//! [`RateLimitLayer`](crate::RateLimitLayer): a user's HTTP requests and
//! WebSocket messages can share one named limit.

use std::time::Duration;

use crate::backend::OnBackendError;
use crate::backend::{Backend, BackendError, FailureLog, MemoryBackend};
use crate::key::Key;
use crate::{algorithm::Verdict, Decision, Policy};

/// A policy enforced on a backend, called from any code. Cheap to clone;
/// clones share the backend (and so the budgets).
#[derive(Clone, Debug)]
pub struct Limiter<B = MemoryBackend> {
    policy: Policy,
    backend: B,
    on_error: OnBackendError,
    failures: std::sync::Arc<FailureLog>,
}

/// What a [`Limiter`] answered.
#[derive(Debug)]
#[non_exhaustive]
pub enum Admission {
    /// It fits (and was counted).
    Allowed(Decision),
    /// It does not fit (and was not counted, unless the policy counts
    /// denials); the decision says when it would.
    Denied(Decision),
    /// The backend could not decide; the limiter's
    /// [`OnBackendError`] said whether to go ahead.
    Unavailable {
        /// Go ahead ([`OnBackendError::Allow`]) or not.
        allowed: bool,
        /// What failed.
        error: BackendError,
    },
}

impl Admission {
    /// Whether to go ahead.
    pub fn is_allowed(&self) -> bool {
        match self {
            Admission::Allowed(_) => true,
            Admission::Denied(_) => false,
            Admission::Unavailable { allowed, .. } => *allowed,
        }
    }

    /// The decision, if the backend made one.
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Admission::Allowed(d) | Admission::Denied(d) => Some(d),
            Admission::Unavailable { .. } => None,
        }
    }

    /// For a denial that can ever fit: how long until it would.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Admission::Denied(d) => d.retry_after(),
            _ => None,
        }
    }
}

impl Limiter {
    /// `policy` in a fresh in-memory backend; when it fails (it cannot),
    /// go ahead.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            backend: MemoryBackend::new(),
            on_error: OnBackendError::Allow,
            failures: Default::default(),
        }
    }
}

impl<B: Backend> Limiter<B> {
    /// Keep the state in `backend` (a `RedisBackend` for one budget across
    /// servers, the same backend as a layer's to share its budgets).
    pub fn backend<B2: Backend>(self, backend: B2) -> Limiter<B2> {
        Limiter {
            policy: self.policy,
            backend,
            on_error: self.on_error,
            failures: self.failures,
        }
    }

    /// What to do when the backend cannot decide (default: go ahead). A
    /// `Fallback` backend decides instead where one is set.
    pub fn on_backend_error(mut self, action: OnBackendError) -> Self {
        self.on_error = action;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Count `cost` for `key` if it fits now.
    pub async fn check(&self, key: &Key, cost: u32) -> Admission {
        match self.backend.check(key, &self.policy, cost).await {
            Ok(decision) if decision.is_allowed() => Admission::Allowed(decision),
            Ok(decision) => Admission::Denied(decision),
            Err(error) => {
                let allowed = self.on_error == OnBackendError::Allow;
                self.failures
                    .warn(if allowed { "allow" } else { "deny" }, &error);
                Admission::Unavailable { allowed, error }
            }
        }
    }

    /// Count `cost` for `key` as soon as it fits, waiting at most
    /// `max_wait`; a denial that would take longer (or can never fit) is
    /// answered at once. Nothing is reserved while waiting, so a cancelled
    /// wait leaves nothing behind.
    pub async fn until_ready(&self, key: &Key, cost: u32, max_wait: Duration) -> Admission {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let admission = self.check(key, cost).await;
            let Admission::Denied(decision) = &admission else {
                return admission;
            };
            let Verdict::RetryAfter(after) = decision.verdict() else {
                return admission;
            };
            let wake = tokio::time::Instant::now() + Duration::from(after);
            if wake > deadline || decision.is_capacity_exhausted() {
                return admission;
            }
            tokio::time::sleep_until(wake).await;
        }
    }
}
