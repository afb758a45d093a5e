//! Fair shares of one capacity under overload: [`FairShare`] divides a
//! rate among the tenants asking for it, by weight, and refuses
//! sheddable requests first and critical ones last.
//!
//! ```
//! use tower_ratelimit::key::Header;
//! use tower_ratelimit::layer::fair_share::FairShare;
//! use tower_ratelimit::layer::Reserves;
//!
//! let shared = FairShare::new("200/s".parse()?)?
//!     .named("api")?
//!     .tenant(Header::new("x-user-id"))
//!     .weight(|req| match req.headers.get("x-plan").map(|v| v.as_bytes()) {
//!         Some(b"pro") => 4,
//!         _ => 1,
//!     })
//!     .class_header("x-priority")
//!     .reserves(Reserves::new(20, 10)?);
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .layer(shared);
//! # drop(app);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `layer.rs` builds the capacity, `config.rs` holds it as built and
//! decides on it, `place.rs` is a place in flight, `service.rs` asks it
//! before each call, `observe.rs` reports it (the classes are `layer::Class`); the decision itself is
//! `algorithm/fair_share.rs` (memory) and `backend/redis/lua/fair_share.lua`
//! (Redis), step for step the same.

mod config;
#[cfg(feature = "test-hooks")]
mod hooks;
mod layer;
mod observe;
mod place;
#[cfg(feature = "redis")]
mod redis_store;
mod service;

pub use layer::{FairShare, FairShareError};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use place::Place;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis_store::RedisStore;
pub use service::{FairShareFuture, FairShared};
