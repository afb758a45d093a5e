//! Rate limiting for tower and axum services.
//!
//! `tower-ratelimit` decides, for each request, whether it fits a policy of
//! one or more limits, keyed by who sent it, and answers 429 — or passes it
//! on — with quota headers on every response.
//!
//! * [`RateLimitLayer`] — the tower layer: [`key`] extractors, per-route and
//!   per-tier [policies](PolicyResolver), costs, [`headers`], [`response`]s,
//!   [`shaping`];
//! * [`algorithm`] — six algorithms as pure state transitions in integer
//!   microseconds: fixed window, sliding log, sliding window counter, token
//!   bucket, leaky bucket and GCRA;
//! * [`Quota`] and [`Policy`] — validated quotas (`"10/s burst 20"`) and named,
//!   all-or-nothing sets of limits;
//! * [`MemoryBackend`] — the embedded backend: sharded, bounded in memory,
//!   reclaiming expired state without timers; and (feature `redis`)
//!   `backend::RedisBackend`, one limit across any number of servers;
//! * [`Decision`] — what a policy says about one request.
//!
//! ```
//! use tower_ratelimit::{Algorithm, Key, MemoryBackend, Policy, Quota};
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
#![deny(missing_docs, unsafe_code)]
#![warn(rust_2018_idioms, unreachable_pub)]

pub mod algorithm;
pub mod backend;
mod body;
pub mod clock;
mod decision;
mod future;
mod head;
pub mod headers;
pub mod key;
mod layer;
mod observe;
pub mod policy;
pub mod quota;
mod render;
mod resolver;
pub mod response;
mod service;
pub mod shaping;

pub use algorithm::{Algorithm, Outcome, Verdict};
pub use backend::{AtCapacity, Backend, BackendError, Fallback, MemoryBackend};
pub use body::ResponseBody;
pub use decision::Decision;
pub use future::ResponseFuture;
pub use head::RequestHead;
pub use key::Key;
pub use layer::{OnBackendError, OnKeyError, RateLimitLayer};
pub use policy::{Limit, Policy, PolicyError};
pub use quota::{Quota, QuotaError};
pub use resolver::{cost_fn, policy_fn, Cost, CostFn, PolicyFn, PolicyResolver, RoutePolicies};
pub use response::LimitedResponse;
pub use service::RateLimit;
