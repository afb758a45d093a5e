//! Rate limiting for tower and axum services.
//!
//! `tower-ratelimit` decides, for each request, whether it fits a policy of
//! one or more limits, keyed by who sent it, and answers 429 — or passes it
//! on — with quota headers on every response.
//!
//! * [`RateLimitLayer`] — the tower middleware: a [`key`] per request, a
//!   policy per request ([`PolicyResolver`], [`RoutePolicies`]), a [`Cost`],
//!   quota headers ([`HeaderStyle`]), the answer to a limited request
//!   ([`LimitedResponse`]), shaping ([`RateLimitLayer::shape`]);
//! * [`Quota`], [`Limit`] and [`Policy`] — validated rates (`"10/s burst
//!   20"`), each enforced by an [`Algorithm`], in named, all-or-nothing sets;
//! * [`algorithm`] — the six algorithms as pure state transitions in integer
//!   microseconds ([`Micros`]): fixed window, sliding log, sliding window
//!   counter, token bucket, leaky bucket and GCRA;
//! * [`backend`] — where state lives: [`MemoryBackend`](backend::MemoryBackend)
//!   (embedded, bounded), `RedisBackend` (feature `redis`: one limit across
//!   any number of servers), [`Fallback`](backend::Fallback), or a
//!   [`Backend`](backend::Backend) of your own;
//! * [`Decision`] and [`Outcome`] — what a policy and each of its limits say
//!   about one request;
//! * [`clock`] — where the in-memory backend reads the time;
//! * [`Limiter`] — a policy for code that is not an HTTP service; [`client`]
//!   — a layer that makes an HTTP client wait for its turn.
//!
//! ```
//! use tower_ratelimit::backend::MemoryBackend;
//! use tower_ratelimit::key::Key;
//! use tower_ratelimit::{Algorithm, Policy, Quota};
//!
//! // 10 per second with bursts of 20, and 100 per minute, per user.
//! let policy = Policy::builder()
//!     .limit("burst", Algorithm::TokenBucket, "10/s burst 20".parse()?)
//!     .limit("sustained", Algorithm::SlidingWindow, Quota::per_minute(100)?)
//!     .build()?;
//! let backend = MemoryBackend::new();
//! let alice = Key::new("user", "alice");
//!
//! let admitted = (0..25)
//!     .filter(|_| backend.check_now(&alice, &policy, 1).is_allowed())
//!     .count();
//! assert_eq!(admitted, 20); // the burst, then the bucket is empty
//!
//! let denied = backend.check_now(&alice, &policy, 1);
//! assert_eq!(policy.limits()[denied.decided_by()].name(), "burst");
//! assert!(denied.retry_after().is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The map of the source — which file holds what, the invariants, and where
//! each kind of change goes — is `ARCHITECTURE.md` in the repository.
#![deny(missing_docs, unsafe_code)]
#![warn(rust_2018_idioms, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The core. Nothing here knows HTTP but `head`, the request view that key
// extractors read (ARCHITECTURE.md has the map).
pub mod algorithm;
pub mod clock;
mod decision;
mod head;
pub mod key;
pub mod live;
pub mod penalty;
mod policy;
mod quota;
mod time;

// Where state lives.
pub mod backend;

// The tower middleware, the same limits for code that is not HTTP, and
// throttling on the client's side.
pub mod client;
mod limiter;
mod middleware;

pub use algorithm::kind::{Algorithm, UnknownAlgorithm};
pub use backend::OnBackendError;
pub use decision::{Decision, Origin, Outcome, OutcomeCountMismatch, Verdict};
pub use head::RequestHead;
pub use limiter::{Admission, Limiter};
pub use live::Live;
pub use middleware::{
    cost_fn, policy_fn, AccessLists, Cost, CostFn, Decided, HeaderStyle, KeyPolicies, LimitedFn,
    LimitedResponse, Offender, OnKeyError, PolicyFn, PolicyResolver, RateLimit, RateLimitLayer,
    ResponseBody, ResponseFuture, ResponseHead, RoutePolicies, TopOffenders,
};
pub use penalty::{PenaltyBox, PenaltyError};
pub use policy::{Limit, Policy, PolicyBuilder, PolicyError, MAX_LIMITS};
pub use quota::{Quota, QuotaError, MAX_WINDOW};
pub use time::Micros;
