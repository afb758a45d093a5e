//! Rate limiting for tower and axum services.
//!
//! `tower-ratelimit` decides, for each request, whether it fits a policy of
//! one or more limits, keyed by who sent it, and answers 429 — or passes it
//! on — with quota headers on every response.
//!
//! The root holds the everyday types; everything else lives in a module
//! named for its concept:
//!
//! | where | what | when you need it |
//! |---|---|---|
//! | [`RateLimitLayer`] | the tower middleware | always |
//! | [`Policy`], [`Limit`], [`Quota`], [`Algorithm`] | what is enforced: validated rates (`"10/s burst 20"`) in named, all-or-nothing sets | always |
//! | [`Decision`] | what a policy says about one request | reading a decision yourself |
//! | [`Limiter`] | a policy for code that is not an HTTP service | WebSocket messages, queue consumers |
//! | [`Live`] | a setting replaced at runtime, read lock-free | changing limits without a restart |
//! | [`layer`] | the layer's parts: per-route policies, costs, headers, refusals, lists, offenders | configuring the layer beyond a key and a policy |
//! | [`key`] | who a request is counted against: client IP, a header, an API key, the endpoint, your closure | choosing the key |
//! | [`policy`] | the policy builder, errors, penalty boxes | building policies in code |
//! | [`backend`] | where state lives: memory (default), Redis, a fallback, a breaker, a store of your own | sharing limits across servers |
//! | [`decision`] | each limit's outcome, where a decision came from | reading decisions in a handler or a test |
//! | [`algorithm`] | the six algorithms as pure state transitions | studying or replaying the math |
//! | [`clock`] | the time the memory backend reads ([`clock::Micros`]) | tests that move time by hand |
//! | [`client`] | a layer that makes an HTTP client wait for its turn | calling a rate-limited API |
//! | `config` (feature `config`) | limits from a file: routes, keys, tiers, overrides, lists; reloaded, shared by a fleet | keeping limits out of code |
//! | [`guide`] | the manual: a chapter a topic, every example tested | learning what the crate does beyond a first layer |
//!
//! # Guide
//!
//! ## In memory, per client IP
//!
//! The default backend keeps state in this process, bounded in memory; the
//! default key is the client's IP (serve with `ConnectInfo`).
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use tower_ratelimit::{Policy, RateLimitLayer};
//!
//! let policy: Policy = "100/min".parse()?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(policy));
//! let service = app.into_make_service_with_connect_info::<SocketAddr>();
//! # drop(service);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## On Redis, shared by every server
//!
//! With the `redis` feature, one limit holds across any number of servers;
//! while Redis is down, each server decides from its own memory.
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use tower_ratelimit::backend::{Backend, MemoryBackend, RedisBackend};
//! use tower_ratelimit::key::Header;
//! use tower_ratelimit::{Policy, RateLimitLayer};
//!
//! let redis = RedisBackend::builder("redis://127.0.0.1:6379").connect().await?;
//! let layer = RateLimitLayer::new("1000/h".parse::<Policy>()?)
//!     .key(Header::new("x-api-client"))
//!     .backend(redis.with_breaker().or_fallback(MemoryBackend::new()));
//! # drop(layer);
//! # Ok(())
//! # }
//! ```
//!
//! ## A policy per route
//!
//! [`RoutePolicies`](layer::RoutePolicies) gives each route template its own
//! policy (feature `axum`); every route keeps its own budget. Tiers — free,
//! pro, enterprise, by what your authentication established — are
//! [`policy_fn`](layer::policy_fn) reading it (`guide::policies`, "Tiers").
//!
//! ```
//! use axum::{routing::{get, post}, Router};
//! use tower_ratelimit::layer::RoutePolicies;
//! use tower_ratelimit::{Algorithm, Policy, RateLimitLayer};
//!
//! let routes = RoutePolicies::new()
//!     .route("/api/search", "10/min".parse()?)
//!     .route("/api/login", Policy::parse_with("5/15min", Algorithm::SlidingLog)?)
//!     .fallback("600/min".parse()?);
//! let app: Router = Router::new()
//!     .route("/api/search", get(|| async { "results" }))
//!     .route("/api/login", post(|| async { "welcome" }))
//!     .layer(RateLimitLayer::new(routes));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Without HTTP
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
//! # Feature flags
//!
//! | feature | default | turns on |
//! |---|---|---|
//! | `axum` | yes | route templates (`MatchedPath`) for endpoint keys, per-route policies and metric labels; the peer address from `ConnectInfo` |
//! | `serve` | yes | `serve`: an accept loop that bounds connections in all, per client and per network, and a request's headers in time and bytes, with graceful shutdown |
//! | `tracing` | no | log events through `tracing`: each decision, backend failures (throttled), setups that cannot work |
//! | `metrics` | no | counters and histograms through the `metrics` facade (`ratelimit_requests_total`, …; see [`layer`]) |
//! | `redis` | no | `backend::RedisBackend`: standalone Redis and Valkey |
//! | `redis-cluster` | no | the Redis backend on Redis Cluster (implies `redis`) |
//! | `redis-sentinel` | no | the Redis backend on the master Redis Sentinel names, followed through failovers (implies `redis`) |
//! | `redis-tls` | no | `rediss://` for the Redis backend, through rustls: the system's roots or a CA you name, client certificates (implies `redis`) |
//! | `config` | no | `config`: limits from a TOML file, validated, reloaded when it changes, and with `redis` shared by a fleet (`config::Fleet`) |
//! | `adaptive` | no | `layer::adaptive`: limits that follow the guarded service's health |
//! | `adaptive-concurrency` | no | `layer::concurrency`: a limit of requests in flight found from latency |
//! | `fair-share` | no | `layer::fair_share`: one capacity shared by tenants by weight, critical requests first (on Redis with `redis`) |
//! | `content-bytes` | no | `layer::content_bytes`: limits on the bytes of request and response bodies |
//! | `test-hooks` | no | entry points for this crate's own tests, benchmarks and fuzzing (decisions at a given time, a script's text); not part of the API, hidden from these docs, no stability promised |
//!
//! The map of the source — which file holds what, the invariants, and where
//! each kind of change goes — is `ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![warn(clippy::wildcard_imports)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The core. Nothing here knows HTTP but `key::RequestHead`, the request view
// that key extractors read (ARCHITECTURE.md has the map).
pub mod algorithm;
pub mod clock;
pub mod decision;
pub mod key;
pub mod policy;
pub mod quota;

// Where state lives.
pub mod backend;

// The tower middleware, the same limits for code that is not HTTP, and
// throttling on the client's side.
pub mod client;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;
pub mod guide;
pub mod layer;
mod limiter;
#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub mod serve;

pub use algorithm::kind::Algorithm;
pub use decision::decision::Decision;
pub use layer::rate_limit::RateLimitLayer;
pub use limiter::{Admission, Limiter};
pub use policy::limit::Limit;
pub use policy::live::Live;
pub use policy::policy::Policy;
pub use quota::quota::Quota;

/// README.md's code blocks, compiled as doctests: a snippet that stops
/// compiling fails the tests. They are whole programs, as a user copies
/// them with the second install block's features (hidden lines would show
/// on GitHub), so they are compiled where those features are on.
#[cfg(all(doctest, feature = "redis", feature = "config", feature = "metrics"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
