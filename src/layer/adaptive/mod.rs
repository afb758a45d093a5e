//! Adaptive limits: a policy enforced at `limit × factor`, the factor
//! following the health of the service the layer guards.
//!
//! [`Adaptive`](crate::layer::Adaptive) (`limits.rs`) holds the factors and
//! applies them ([`AdaptivePolicies`](crate::layer::AdaptivePolicies));
//! its [`Observer`](crate::layer::Observer) layer (`layer.rs`, `service.rs`,
//! `future.rs`) sees each response; `window.rs` keeps the recent ones,
//! `classify.rs` says which failed, `controller.rs` moves the factor.
//!
//! `window.rs` weighs the window by client, so that no client supplies
//! more than its share of the evidence: the rule and its formula are in
//! [`Adaptive`](crate::layer::Adaptive)'s docs ("Whose evidence").

mod classify;
mod controller;
mod future;
mod layer;
mod limits;
mod service;
mod window;

pub use classify::Classifier;
pub use controller::{AimdLimits, Controller, Steps};
pub use future::ObservedFuture;
pub use layer::Observer;
pub use limits::{Adaptive, AdaptivePolicies, FactorChange};
pub use service::Observed;
pub use window::ServiceHealth;
