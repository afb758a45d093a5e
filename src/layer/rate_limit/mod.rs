//! `RateLimitLayer`: each request keyed, checked against its policy by a
//! backend, and answered 429 or passed on, with quota headers.
//!
//! `layer.rs` is the builder and the settings it shares with every request;
//! `service.rs` picks the policy, key and cost, or knows at once what to do
//! (a listed client, no policy, no key), a [`Start`](service::Start), and
//! takes the request to its first state; `future.rs` polls it through the
//! states `state.rs` defines, with every step between them (the backend's
//! answer is turned into an `Action` by `decide.rs`), to its quota headers
//! and the body that holds a permit.
//! The rest are the settings a request meets on the way: who is listed
//! (`lists.rs`), which policy (`select.rs`), what it costs (`cost.rs`),
//! waiting (`shaping.rs`), soft shedding (`soft_shed.rs`), settling by the
//! response (`settle.rs`), and what is reported (`observe/`).

mod cost;
mod decide;
mod future;
mod layer;
mod lists;
mod observe;
pub(crate) mod select;
mod service;
mod settle;
mod shaping;
mod soft_shed;
mod state;

#[cfg(feature = "axum")]
pub use super::answer::AxumBody;
pub use super::answer::{
    BodyKind, HeaderStyle, LimitedFn, LimitedResponse, OwnBody, Refused, ResponseBody,
};
pub use cost::{cost_fn, Cost, CostFn};
pub use future::ResponseFuture;
pub use layer::{OnKeyError, RateLimitLayer, Shadow};
pub use lists::AccessLists;
pub use observe::offenders::{Offender, TopOffenders};
pub use select::{policy_fn, KeyPolicies, NoPolicy, PolicyFn, PolicyResolver, RoutePolicies};
pub use service::{Peek, RateLimit};
pub use settle::ResponseHead;
pub use shaping::Shaping;
pub use soft_shed::{Delayed, SoftShed};
