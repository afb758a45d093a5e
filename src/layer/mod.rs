//! The tower middleware, in tower-http's shape: a layer that builds a
//! service, whose future runs one request through the limiter.
//!
//! [`RateLimitLayer`](crate::RateLimitLayer) (at the crate's root) is where
//! you start; here are its parts, for when a key and a policy are not all you
//! configure:
//!
//! * which policy a request gets: [`RoutePolicies`] (per route template),
//!   [`policy_fn`], [`KeyPolicies`] (a key's own policy), or any
//!   [`PolicyResolver`] — and what a request that gets none does
//!   ([`NoPolicy`]);
//! * what a request costs: [`Cost`], [`cost_fn`];
//! * what is sent back: [`HeaderStyle`] (quota headers), [`LimitedResponse`]
//!   (the 429), [`OnKeyError`] (a request with no key);
//! * delaying instead of refusing: [`Shaping`]; settling by the response:
//!   [`ResponseHead`]; a dry run: [`Shadow`];
//! * who is never or always limited: [`AccessLists`]; who is refused most:
//!   [`TopOffenders`];
//! * the service and its future: [`RateLimit`], [`ResponseFuture`],
//!   [`ResponseBody`] (or axum's own body: [`BodyKind`]).
//!
//! Beside it, a module per middleware, each but the first behind a feature
//! of its own: `lookup` (a tenant's policy from your store), `adaptive`
//! (limits that follow the service's health), `concurrency` (a limit of
//! requests in flight found from latency, feature `adaptive-concurrency`),
//! `fair_share` (one capacity divided among tenants by weight, critical
//! requests first, `fair-share`) and `content_bytes` (the bytes of
//! bodies).
//!
//! Metrics (feature `metrics`), through the `metrics` facade:
//! `ratelimit_requests_total{outcome, route, limit}`,
//! `ratelimit_near_limit_total{route, limit}` and
//! `ratelimit_decision_seconds{backend}`; label values come from
//! configuration, never from clients. Log events (feature `tracing`): one per
//! decision, throttled warnings for backend failures.
//!
//! ```
//! use std::time::Duration;
//! use tower_ratelimit::key::{ClientIp, Header, KeyExtractor};
//! use tower_ratelimit::layer::{HeaderStyle, RoutePolicies, Shaping};
//! use tower_ratelimit::RateLimitLayer;
//!
//! let layer = RateLimitLayer::new(
//!     RoutePolicies::new()
//!         .route("/api/search", "10/min".parse()?)
//!         .fallback("600/min".parse()?),
//! )
//! .key(Header::new("x-user-id").or(ClientIp::new()))
//! .headers(HeaderStyle::Both)
//! .shape(Shaping::wait_up_to(Duration::from_millis(500)));
//! # drop(layer);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "adaptive")]
#[cfg_attr(docsrs, doc(cfg(feature = "adaptive")))]
pub mod adaptive;
mod answer;
mod callee;
#[cfg(any(
    feature = "adaptive",
    feature = "adaptive-concurrency",
    feature = "fair-share"
))]
mod class;
#[cfg(feature = "adaptive-concurrency")]
#[cfg_attr(docsrs, doc(cfg(feature = "adaptive-concurrency")))]
pub mod concurrency;
#[cfg(feature = "content-bytes")]
#[cfg_attr(docsrs, doc(cfg(feature = "content-bytes")))]
pub mod content_bytes;
#[cfg(feature = "fair-share")]
#[cfg_attr(docsrs, doc(cfg(feature = "fair-share")))]
pub mod fair_share;
pub mod lookup;
pub(crate) mod rate_limit;

// Who is refused first when a capacity shared by all is short
// (`fair_share`, `concurrency`, `adaptive`).
#[cfg(any(
    feature = "adaptive",
    feature = "adaptive-concurrency",
    feature = "fair-share"
))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        feature = "adaptive",
        feature = "adaptive-concurrency",
        feature = "fair-share"
    )))
)]
pub use class::{Class, Reserves, ReservesError};

// The mark on a response any of them refused.
pub use answer::RefusedByLimit;

// RateLimitLayer's parts (the layer itself is at the crate's root).
#[cfg(feature = "axum")]
pub use rate_limit::AxumBody;
pub use rate_limit::{
    cost_fn, policy_fn, AccessLists, BodyKind, Cost, CostFn, Delayed, HeaderStyle, KeyPolicies,
    LimitedFn, LimitedResponse, NoPolicy, Offender, OnKeyError, OwnBody, Peek, PolicyFn,
    PolicyResolver, RateLimit, Refused, ResponseBody, ResponseFuture, ResponseHead, RoutePolicies,
    Shadow, Shaping, SoftShed, TopOffenders,
};
