//! Soft shedding: past 80% of a limit, admitted requests wait before their
//! handler, longer as the key nears the limit; at it, 429 as before. Each
//! delayed request is counted once, on memory and Redis alike.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::Global;
use tower_ratelimit::layer::{Delayed, SoftShed};
use tower_ratelimit::{Policy, RateLimitLayer};

/// Ten requests of a 10/min limit and two more, through a layer that soft
/// sheds from 80% with up to 200 ms: each answer's status and the delay its
/// handler was told.
async fn twelve(backend: impl Backend) -> Vec<(StatusCode, Option<Duration>)> {
    crate::support::with_a_minute_to_spare().await;
    let told = Arc::new(Mutex::new(None));
    let seen = told.clone();
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("soft = 10/min".parse::<Policy>().unwrap())
                .key(Global)
                .backend(backend)
                .soft_shed(SoftShed::new(Duration::from_millis(200))),
        )
        .service(service_fn(move |req: Request<()>| {
            *seen.lock().unwrap() = req.extensions().get::<Delayed>().map(|d| d.0);
            async { Ok::<_, std::convert::Infallible>(Response::new(String::new())) }
        }));
    let mut out = Vec::new();
    for _ in 0..12 {
        *told.lock().unwrap() = None;
        let status = svc
            .clone()
            .oneshot(Request::new(()))
            .await
            .unwrap()
            .status();
        out.push((status, *told.lock().unwrap()));
    }
    out
}

fn expected() -> Vec<(StatusCode, Option<Duration>)> {
    let ok = |d: Option<u64>| (StatusCode::OK, d.map(Duration::from_millis));
    let mut all: Vec<_> = (0..8).map(|_| ok(None)).collect();
    // 9 of 10 used: halfway from 80% to the limit; 10 of 10: the whole 200 ms.
    all.extend([ok(Some(100)), ok(Some(200))]);
    all.extend([(StatusCode::TOO_MANY_REQUESTS, None); 2]);
    all
}

#[tokio::test]
async fn past_eighty_percent_requests_wait_longer_then_are_refused() {
    let start = std::time::Instant::now();
    assert_eq!(twelve(MemoryBackend::new()).await, expected());
    // The delays were slept before the handlers ran.
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_sheds_and_counts_the_same() {
    let server = crate::support::RedisServer::start();
    let redis = server.backend().await;
    let start = std::time::Instant::now();
    assert_eq!(twelve(redis).await, expected());
    assert!(start.elapsed() >= Duration::from_millis(300));
}
