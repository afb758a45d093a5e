//! The first layer: 10 per second with bursts of 20, and 100 a minute, per
//! user (the `x-user-id` header) or else per client IP.
//!
//! `cargo run --example basic`, then `curl -i localhost:3000/` (`ADDR` picks
//! another address).

use axum::{routing::get, Router};
use tower_ratelimit::key::{ClientIp, Header, KeyExtractor};
use tower_ratelimit::serve::{serve, ConnectionLimits};
use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};

pub fn app() -> Result<Router, Box<dyn std::error::Error>> {
    let per_user = Policy::builder()
        .limit("burst", Algorithm::TokenBucket, "10/s burst 20".parse()?)
        .limit(
            "sustained",
            Algorithm::SlidingWindow,
            Quota::per_minute(100)?,
        )
        .build()?;
    Ok(Router::new().route("/", get(|| async { "hello" })).layer(
        RateLimitLayer::new(per_user)
            .key(Header::new("x-user-id").or(ClientIp::new()))
            .axum_body(), // axum's own body: nothing boxed again
    ))
}

#[allow(dead_code)] // run by `cargo run`, not by the test that reads `app`
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    // Bounded connections: at most 3/4 of `ulimit -n`, 1/8 of those per
    // client address, headers within 10 s and 64 KiB (`guide::production`).
    serve(listener, app()?, ConnectionLimits::default()).await;
    Ok(())
}
