//! A target for HTTP load tests of the layer's cost: the same handler bare,
//! behind a limit it never reaches, and behind a limit it always exceeds.
//!
//! ```sh
//! cargo run --release --example load &
//! wrk -t1 -c32 -d8s http://127.0.0.1:3001/bare
//! wrk -t1 -c32 -d8s http://127.0.0.1:3001/allowed
//! wrk -t1 -c32 -d8s http://127.0.0.1:3001/rejected
//! ```

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tower_ratelimit::key::ClientIp;
use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let roomy = Policy::single(Algorithm::Gcra, Quota::per_second(1_000_000)?);
    let tight = Policy::single(Algorithm::Gcra, Quota::per_hour(1)?);
    let app = Router::new()
        .route("/bare", get(|| async { "ok" }))
        .route(
            "/allowed",
            get(|| async { "ok" }).layer(RateLimitLayer::new(roomy).key(ClientIp::new())),
        )
        .route(
            "/rejected",
            get(|| async { "ok" }).layer(RateLimitLayer::new(tight).key(ClientIp::new())),
        );
    let addr: SocketAddr = std::env::var("ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3001".to_owned())
        .parse()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("load target on http://{addr}: /bare, /allowed, /rejected");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
