//! Serving a hostile internet: connections bounded before any request
//! reaches a limiter (feature `serve`).
//!
//! A rate limit counts requests; a client that holds connections without
//! finishing one is never counted. `axum::serve` sets no timer and no cap,
//! so half a request line, an idle kept-alive connection, headers trickled
//! a byte at a time or padded to megabytes, or connections opened until the
//! process runs out of file descriptors hold the server for ever. [`serve`]
//! is the accept loop that bounds them, as nginx's `limit_conn` bounds what
//! `limit_req` cannot see:
//!
//! * **connections in all**, below the process's limit on open files, so
//!   that the store, files and logs keep theirs;
//! * **per client** (an IPv4 address, an IPv6 /64), so that one client
//!   cannot hold every connection, and optionally **per network** (a /24,
//!   a /48) for clients that rotate addresses within one they hold;
//! * **a request's headers in time and bytes**: they must arrive within
//!   the header timeout of the connection's opening or, kept alive, of the
//!   response before (so an idle connection is closed too), and within the
//!   header bytes (one more is 431);
//! * **graceful shutdown**: no new connection, the idle ones closed, each
//!   request under way answered within a grace.
//!
//! Where a cap is reached, the new connection takes the place of the
//! connection under that cap that has gone longest with no request under
//! way (still sending its first headers, or idle between requests); where
//! every one has a request under way, the new connection is closed at once.
//! A client's requests in flight are never cut to make room, and a client
//! trickling headers loses its connection to the next one that arrives.
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{routing::get, Router};
//! use tower_ratelimit::serve::{serve, ConnectionLimits};
//! use tower_ratelimit::{Policy, RateLimitLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Keyed by the client's address (the default key): `serve` gives each
//! // request its peer address.
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new("100/min".parse::<Policy>()?));
//!
//! let limits = ConnectionLimits::builder()
//!     .max_connections(1_000)
//!     .max_per_client(16)
//!     .header_timeout(Duration::from_secs(5))
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! serve(listener, app, limits)
//!     .with_graceful_shutdown(shutdown_requested())
//!     .await;
//! # Ok(())
//! # }
//! # async fn shutdown_requested() {}
//! ```
//!
//! `ConnectionLimits::default()` serves the open internet as it is (the
//! figures are on [`ConnectionLimits`]); the
//! [production chapter](crate::guide::production) says what it takes to
//! hold every connection at them, and how to choose others.
//!
//! Only HTTP/1.1 is served (with upgrades, for WebSockets): put HTTP/2 and
//! TLS on the proxy in front. An upgraded connection keeps its place until
//! its socket closes and is never closed to make room.
//!
//! Metrics (feature `metrics`): `ratelimit_connections_refused_total{reason}`
//! (`connections`, `client`, `network`: the cap that was full),
//! `ratelimit_connections_closed_total{reason}` (`made_room`: an idle
//! connection closed for a new one; `header_timeout`) and the gauge
//! `ratelimit_connections_open`.

mod connection;
mod limits;
mod server;
mod table;

pub use limits::{ConnectionLimits, ConnectionLimitsBuilder, ConnectionLimitsError};
pub use server::{serve, Serve, WithGracefulShutdown};
