//! Backends: where per-key state lives and is updated atomically.
//!
//! A [`Backend`] takes a key, a policy and a cost, applies every limit of the
//! policy to that key's state at once (all-or-nothing), and answers with a
//! [`Decision`]. The in-memory backend ([`MemoryBackend`]) answers at once
//! with a ready future; a networked backend answers later.
//!
//! ```
//! use tower_ratelimit::{Backend, Key, MemoryBackend, Policy};
//!
//! let backend = MemoryBackend::new();
//! let policy: Policy = "2/min".parse().unwrap();
//! let check = backend.check(&Key::new("ip", "192.0.2.7"), &policy, 1);
//! // The memory backend's future is `std::future::Ready`.
//! let decision = check.into_inner().unwrap();
//! assert!(decision.is_allowed());
//! ```

pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

use std::fmt;
use std::future::Future;

use crate::{Decision, Key, Policy};

#[cfg(feature = "redis")]
pub use self::redis::{RedisBackend, RedisBackendBuilder};
pub use memory::{AtCapacity, MemoryBackend, MemoryBackendBuilder};

/// Stores per-key state and decides requests against a policy.
pub trait Backend: Clone + Send + Sync + 'static {
    /// The decision, when it is known.
    type Future: Future<Output = Result<Decision, BackendError>> + Send + 'static;

    /// Count a request of `cost` for `key` under every limit of `policy`.
    /// A cost of 0 only reports the state.
    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future;

    /// Decide with `fallback` whenever this backend fails: typically Redis
    /// first and, while it is down, each server's own memory — every server
    /// then enforces the whole limit on its own, so the service stays both
    /// up and limited.
    ///
    /// ```
    /// use tower_ratelimit::{Backend, MemoryBackend};
    /// # let shared = MemoryBackend::new(); // stands in for a RedisBackend
    /// let backend = shared.or_fallback(MemoryBackend::new());
    /// ```
    fn or_fallback<F: Backend>(self, fallback: F) -> Fallback<Self, F>
    where
        Self: Sized,
    {
        Fallback {
            primary: self,
            fallback,
        }
    }
}

/// A backend that falls back to another when it fails; see [`Backend::or_fallback`].
#[derive(Clone, Debug)]
pub struct Fallback<P, F> {
    primary: P,
    fallback: F,
}

impl<P: Backend, F: Backend> Backend for Fallback<P, F> {
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Decision, BackendError>> + Send>>;

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        let primary = self.primary.check(key, policy, cost);
        let (fallback, key, policy) = (self.fallback.clone(), key.clone(), policy.clone());
        Box::pin(async move {
            match primary.await {
                Ok(decision) => Ok(decision),
                Err(_) => fallback.check(&key, &policy, cost).await,
            }
        })
    }
}

/// A backend could not decide (unreachable, timed out, answered nonsense).
#[derive(Debug)]
pub struct BackendError {
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl BackendError {
    /// Wrap the underlying error.
    pub fn new(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            source: source.into(),
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limit backend failed: {}", self.source)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
