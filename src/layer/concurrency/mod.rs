//! Adaptive concurrency: one limit of requests in flight to the guarded
//! service, for all clients together, found at run time from its latency.
//!
//! ```
//! use std::time::Duration;
//! use axum::{routing::get, Router};
//! use tower_ratelimit::layer::concurrency::{AdaptiveConcurrency, Gradient};
//!
//! let limit = AdaptiveConcurrency::new(Gradient::default())
//!     .bounds(4, 500)
//!     .queue(100, Duration::from_millis(50));
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(limit.clone());
//! // How many it lets in now:
//! let now = limit.limit();
//! ```
//!
//! `layer.rs` holds the limit and its queue, `service.rs` takes a place
//! for each call, `controller.rs` moves the limit.

mod controller;
mod layer;
mod service;

pub use controller::{AimdConcurrency, Gradient, LatencyController};
pub use layer::AdaptiveConcurrency;
pub use service::{ConcurrencyFuture, ConcurrencyLimited};
