//! One allowed request through a `RateLimitLayer` on Redis, the request
//! `scripts/walk` follows under uftrace through the crate's files. The
//! first request opens the connection and loads the scripts; the second,
//! in `walk`, is the one followed.
//!
//!   walk redis://127.0.0.1:6379

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use tokio::runtime::Runtime;
use tower::{Service, ServiceExt};
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::key::Header;
use tower_ratelimit::{Policy, RateLimitLayer};

fn main() {
    let url = std::env::args().nth(1).expect("a Redis URL");
    // One thread: the connection's own task runs beneath `walk` too.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend = runtime
        .block_on(RedisBackend::builder(&url).connect())
        .expect("Redis answers");
    let policy: Policy = "1000/min".parse().unwrap();
    let layer = RateLimitLayer::new(policy)
        .key(Header::new("x-user-id"))
        .backend(backend);
    let inner = tower::service_fn(|_req: http::Request<String>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
    });
    let mut service = tower::ServiceBuilder::new().layer(layer).service(inner);
    assert_eq!(one(&runtime, &mut service, "walker"), 200);
    assert_eq!(walk(&runtime, &mut service), 200);
}

/// The request followed: an allowed one, of a client Redis has seen.
#[inline(never)]
fn walk<S, B>(runtime: &Runtime, service: &mut S) -> u16
where
    S: Service<http::Request<String>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
{
    one(runtime, service, "walker")
}

fn one<S, B>(runtime: &Runtime, service: &mut S, user: &str) -> u16
where
    S: Service<http::Request<String>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
{
    let req = http::Request::get("/")
        .header("x-user-id", user)
        .body(String::new())
        .unwrap();
    runtime.block_on(async {
        let response = service.ready().await.unwrap().call(req).await.unwrap();
        response.status().as_u16()
    })
}
