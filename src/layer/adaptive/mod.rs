//! Adaptive limits (feature `adaptive`): a policy enforced at
//! `limit × factor`, the factor following the health of the service the
//! layer guards, weighed so that no one client chooses it.
//!
//! [`Adaptive`] holds the factor and applies it to a resolver's policies
//! ([`Adaptive::policies`], an [`AdaptivePolicies`]); its [`Observer`]
//! layer, inside the rate limit, shows it each response; a [`Classifier`]
//! says which failed, a [`HealthController`] ([`Steps`] by default, or
//! [`AimdLimits`]) moves the factor, and [`ServiceHealth`] is what a window
//! saw. `Adaptive`'s page has the whole app and the rules.
//!
//! ```
//! use tower_ratelimit::layer::adaptive::{Adaptive, Steps};
//! use tower_ratelimit::{Policy, RateLimitLayer};
//!
//! let adaptive = Adaptive::new(Steps::default());
//! let limiter = RateLimitLayer::new(adaptive.policies("60/min".parse::<Policy>()?));
//! let observer = adaptive.observer(); // around the guarded service, inside `limiter`
//! # drop((limiter, observer));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod classify;
mod controller;
mod future;
mod layer;
mod limits;
mod service;
mod window;

pub use classify::Classifier;
pub use controller::{AimdLimits, HealthController, Steps};
pub use future::ObservedFuture;
pub use layer::Observer;
pub use limits::{Adaptive, AdaptivePolicies, FactorChange};
pub use service::Observed;
pub use window::ServiceHealth;
