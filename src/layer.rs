//! [`RateLimitLayer`]: the policy, the key, the backend, and what to answer.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tower_layer::Layer;

use crate::headers::HeaderStyle;
use crate::key::{ClientIp, KeyExtractor};
use crate::observe::FailureLog;
use crate::resolver::{Cost, PolicyResolver};
use crate::response::LimitedResponse;
use crate::shaping::Shaping;
use crate::{Backend, MemoryBackend, RateLimit};

/// What to do with a request no key can be derived for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnKeyError {
    /// Answer with this status and a JSON body saying what is missing (the
    /// default: 400). Skipping instead would let a client escape the limit
    /// by leaving out its key.
    Reject(StatusCode),
    /// Pass the request on unlimited.
    Skip,
}

impl Default for OnKeyError {
    fn default() -> Self {
        Self::Reject(StatusCode::BAD_REQUEST)
    }
}

/// What to do when the backend cannot decide (unreachable, timed out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnBackendError {
    /// Let the request through, without quota headers (the default):
    /// the limiter never takes the service down with it.
    #[default]
    Allow,
    /// Answer 429 with `Retry-After: 1` and
    /// `{"error":"rate_limit_unavailable"}`.
    Deny,
}

/// Settings every request of a layer shares.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    pub(crate) headers: HeaderStyle,
    pub(crate) limited: LimitedResponse,
    pub(crate) on_key_error: OnKeyError,
    pub(crate) on_backend_error: OnBackendError,
    pub(crate) retry_jitter_us: u64,
    pub(crate) shaping: Option<Shaping>,
    pub(crate) failures: FailureLog,
}

/// Rate-limits requests to the services it wraps.
///
/// Every request is keyed (by default by client IP), given a policy and a
/// cost (by default 1), and checked against the backend (by default a fresh
/// in-memory one). Allowed requests reach the inner service; limited ones
/// get a 429. Every response carries quota headers.
///
/// ```
/// use axum::{routing::get, Router};
/// use tower_ratelimit::key::{ClientIp, KeyExtractor, UserHeader};
/// use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};
///
/// let per_user = Policy::builder()
///     .limit("burst", Algorithm::TokenBucket, "10/s burst 20".parse().unwrap())
///     .limit("sustained", Algorithm::SlidingWindow, Quota::per_minute(100).unwrap())
///     .build()
///     .unwrap();
///
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(per_user).key(UserHeader::new("x-user-id").or(ClientIp::new())));
/// ```
///
/// State is identified by the key and each limit's name, algorithm and
/// quota: two layers with the same key extractor and identical limits on one
/// backend share a budget. Name limits apart (or add [`Endpoint`] to the key)
/// to keep routes apart.
///
/// [`Endpoint`]: crate::key::Endpoint
#[derive(Clone, Debug)]
pub struct RateLimitLayer<K = ClientIp, P = crate::Policy, B = MemoryBackend, C = u32> {
    pub(crate) key: K,
    pub(crate) policy: P,
    pub(crate) backend: B,
    pub(crate) cost: C,
    pub(crate) options: Arc<Options>,
}

impl<P: PolicyResolver> RateLimitLayer<ClientIp, P> {
    /// Limit by `policy` (a [`Policy`](crate::Policy), or any resolver),
    /// per client IP, in memory, with the default responses.
    pub fn new(policy: P) -> Self {
        Self {
            key: ClientIp::new(),
            policy,
            backend: MemoryBackend::new(),
            cost: 1,
            options: Arc::default(),
        }
    }
}

impl<K, P, B, C> RateLimitLayer<K, P, B, C> {
    /// Key requests with `key`.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> RateLimitLayer<K2, P, B, C> {
        RateLimitLayer {
            key,
            policy: self.policy,
            backend: self.backend,
            cost: self.cost,
            options: self.options,
        }
    }

    /// Choose the policy with `policy`.
    pub fn policy<P2: PolicyResolver>(self, policy: P2) -> RateLimitLayer<K, P2, B, C> {
        RateLimitLayer {
            key: self.key,
            policy,
            backend: self.backend,
            cost: self.cost,
            options: self.options,
        }
    }

    /// Keep state in `backend` (share one backend between layers to share state).
    pub fn backend<B2: Backend>(self, backend: B2) -> RateLimitLayer<K, P, B2, C> {
        RateLimitLayer {
            key: self.key,
            policy: self.policy,
            backend,
            cost: self.cost,
            options: self.options,
        }
    }

    /// Weigh each request with `cost` (a constant, or [`cost_fn`](crate::cost_fn)).
    pub fn cost<C2: Cost>(self, cost: C2) -> RateLimitLayer<K, P, B, C2> {
        RateLimitLayer {
            key: self.key,
            policy: self.policy,
            backend: self.backend,
            cost,
            options: self.options,
        }
    }

    /// Which quota headers to send (default: both legacy and IETF).
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.options_mut().headers = style;
        self
    }

    /// How to answer limited requests (default: JSON 429).
    pub fn limited_response(mut self, response: LimitedResponse) -> Self {
        self.options_mut().limited = response;
        self
    }

    /// What to do when no key can be derived (default: reject with 400).
    pub fn on_key_error(mut self, action: OnKeyError) -> Self {
        self.options_mut().on_key_error = action;
        self
    }

    /// What to do when the backend fails (default: allow).
    pub fn on_backend_error(mut self, action: OnBackendError) -> Self {
        self.options_mut().on_backend_error = action;
        self
    }

    /// Add up to `jitter` at random to each `Retry-After`, so throttled
    /// clients do not all come back at the same second.
    pub fn retry_after_jitter(mut self, jitter: Duration) -> Self {
        self.options_mut().retry_jitter_us = jitter.as_micros().min(u128::from(u64::MAX)) as u64;
        self
    }

    /// Delay requests that do not fit yet, by up to `max_wait`, instead of
    /// rejecting them; at most `max_waiting` wait at once (see
    /// [`shaping`](crate::shaping)).
    pub fn shape(mut self, max_wait: Duration, max_waiting: usize) -> Self {
        let max_wait_us = max_wait.as_micros().min(u128::from(u64::MAX)) as u64;
        self.options_mut().shaping = Some(Shaping::new(max_wait_us, max_waiting));
        self
    }

    fn options_mut(&mut self) -> &mut Options {
        // Setters run while building, before clones are shared; a layer
        // configured after cloning gets its own copy.
        Arc::make_mut(&mut self.options)
    }
}

impl<S, K: Clone, P: Clone, B: Clone, C: Clone> Layer<S> for RateLimitLayer<K, P, B, C> {
    type Service = RateLimit<S, K, P, B, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            layer: Arc::new(self.clone()),
        }
    }
}
