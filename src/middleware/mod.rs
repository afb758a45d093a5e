//! The tower middleware, in tower-http's shape: a layer that builds a
//! service, whose future runs one request through the limiter.
//!
//! * `layer.rs` — [`RateLimitLayer`], the builder;
//! * `config.rs` — what every request of a layer shares;
//! * `service.rs` — [`RateLimit`]: key, policy and cost for a request;
//! * `future.rs` — [`ResponseFuture`]: the state machine (decide, wait, call);
//! * `lists.rs` — [`AccessLists`]: allowed and denied clients, first of all;
//! * `select.rs`, `cost.rs` — the policy (by route, by key: [`KeyPolicies`])
//!   and the cost of a request;
//! * `shaping.rs` — delaying instead of refusing; `settle.rs` — settling a
//!   request by its response (count only failures, charge the actual cost);
//! * `response.rs` — refusals (429, 400, 403, the backend-failure answer);
//!   `grpc.rs` — the same as gRPC statuses for gRPC calls;
//! * `headers.rs`, `rendered.rs` — quota headers, and the text rendered once
//!   per policy;
//! * `body.rs` — [`ResponseBody`]; `permit.rs` — a permit of a limit of
//!   requests in flight, held until the body ends (renewed meanwhile);
//! * `observe.rs` — metrics and logs; `offenders.rs` — [`TopOffenders`].

mod body;
mod config;
mod cost;
mod future;
mod grpc;
mod headers;
mod layer;
mod lists;
#[cfg(feature = "metrics")]
mod meters;
mod observe;
mod offenders;
mod permit;
mod rendered;
mod response;
mod select;
mod service;
mod settle;
mod shaping;

pub use body::ResponseBody;
pub use config::OnKeyError;
pub use cost::{cost_fn, Cost, CostFn};
pub use future::ResponseFuture;
pub use headers::HeaderStyle;
pub use layer::RateLimitLayer;
pub use lists::AccessLists;
pub use observe::Decided;
pub use offenders::{Offender, TopOffenders};
pub use response::{LimitedFn, LimitedResponse};
pub use select::{policy_fn, KeyPolicies, PolicyFn, PolicyResolver, RoutePolicies};
pub use service::RateLimit;
pub use settle::ResponseHead;
