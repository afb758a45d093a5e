//! The manual, a chapter a topic; every code block in it is compiled and run
//! as a test.
//!
//! README.md is the short tour: install, a first layer, keys, policies,
//! Redis, a limits file, metrics. These chapters teach the rest:
//!
//! | chapter | what it teaches |
//! |---|---|
//! | [`algorithms`] | the six algorithms, what each admits, and when to choose it |
//! | [`keys`] | who a request is counted against, and which keys a client controls |
//! | [`policies`] | the quota syntax, calendar quotas, policies of several limits, shared budgets, per route, tier, key, tenant and cost |
//! | [`costs`] | costs known after the response, counting by outcome, requests in flight, limits in bytes |
//! | [`adaptive`] | limits that follow the service's health, adaptive concurrency, soft shedding |
//! | [`fairness`] | one capacity divided among tenants by weight, critical requests first |
//! | [`responses`] | the quota headers and the answers the layer gives |
//! | [`backends`] | memory and Redis: Valkey, Cluster, Sentinel, TLS, ACL users, key formats, leases |
//! | [`failures`] | what happens when the store fails |
//! | [`observability`] | metrics, a Prometheus exporter, log events, top offenders |
//! | [`rollouts`] | shadow mode, allow and deny lists, penalty boxes, resetting a key |
//! | [`live_changes`] | `Live`, a limits file (with code beside it), a fleet |
//! | [`beyond_http`] | gRPC, WebSockets, HTTP clients, code that is not HTTP |
//! | [`testing`] | testing your own limits: a clock you move, requests without a server, what to test on Redis |
//! | [`production`] | serving: timeouts and connection caps |
//! | [`example_server`] | the example server's routes, settings and sessions |
//!
//! ## What the common setups need
//!
//! Most apps meet five things: [`RateLimitLayer`](crate::RateLimitLayer), a
//! quota (`"100/min"`), a key (`.key(…)`; the client's address by default),
//! and, as they grow:
//!
//! * several servers on one Redis: `RedisBackend::builder(url)
//!   .connect_with_fallback(n)` (feature `redis`) — one call for what the
//!   [`failures`] chapter takes apart (lazy connection, breaker, fallback,
//!   each server's part);
//! * tiers: [`policy_fn`](crate::layer::policy_fn) reading what your
//!   authentication established ([`policies`], "Tiers");
//! * counting only failures (a login): `.count_if(|res| …)`;
//! * limits outside the code: a limits file, `config::Limits` ([`live_changes`]);
//! * metrics: the feature `metrics` and a Prometheus exporter ([`observability`]).
//!
//! The rest — resolvers of your own, `Live`, leases, fair shares, adaptive
//! limits, shaping — is there when a need asks for it, not before.

#[doc = include_str!("algorithms.md")]
pub mod algorithms {}
#[doc = include_str!("keys.md")]
pub mod keys {}
#[doc = include_str!("policies.md")]
pub mod policies {}
#[doc = include_str!("costs.md")]
pub mod costs {}
#[doc = include_str!("adaptive.md")]
pub mod adaptive {}
#[doc = include_str!("fairness.md")]
pub mod fairness {}
#[doc = include_str!("responses.md")]
pub mod responses {}
#[doc = include_str!("backends.md")]
pub mod backends {}
#[doc = include_str!("failures.md")]
pub mod failures {}
#[doc = include_str!("observability.md")]
pub mod observability {}
#[doc = include_str!("rollouts.md")]
pub mod rollouts {}
#[doc = include_str!("live_changes.md")]
pub mod live_changes {}
#[doc = include_str!("beyond_http.md")]
pub mod beyond_http {}
#[doc = include_str!("testing.md")]
pub mod testing {}
#[doc = include_str!("production.md")]
pub mod production {}
#[doc = include_str!("example_server.md")]
pub mod example_server {}
