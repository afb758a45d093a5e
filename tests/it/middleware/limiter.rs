//! `Limiter`: the same policies for code that is not an HTTP service.

use std::time::{Duration, Instant};

use crate::support::Broken;
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::backend::OnBackendError;
use tower_ratelimit::key::Key;
use tower_ratelimit::Admission;
use tower_ratelimit::{Limiter, Policy};

async fn admitted<B: tower_ratelimit::backend::Backend>(
    limiter: &Limiter<B>,
    key: &Key,
    n: usize,
) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += usize::from(limiter.check(key, 1).await.is_allowed());
    }
    admitted
}

#[tokio::test]
async fn counts_per_key_and_says_when_to_retry() {
    let limiter = Limiter::new("5/min".parse::<Policy>().unwrap());
    let (a, b) = (Key::new("ws", "a"), Key::new("ws", "b"));
    assert_eq!(admitted(&limiter, &a, 8).await, 5);
    assert_eq!(admitted(&limiter, &b, 2).await, 2);
    let denied = limiter.check(&a, 1).await;
    assert!(matches!(denied, Admission::Denied(_)));
    assert!(denied.retry_after().unwrap() > Duration::from_secs(1));
    // A cost above the capacity never fits: answered at once, even when
    // told to wait.
    let started = Instant::now();
    assert!(!limiter
        .until_ready(&b, 6, Duration::from_secs(5))
        .await
        .is_allowed());
    // At once: nowhere near the 5 s it was allowed to wait.
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[tokio::test]
async fn until_ready_waits_as_long_as_it_takes_within_its_bound() {
    let limiter = Limiter::new("10/s".parse::<Policy>().unwrap());
    let key = Key::new("queue", "consumer-1");
    assert_eq!(admitted(&limiter, &key, 10).await, 10);
    let started = Instant::now();
    assert!(limiter
        .until_ready(&key, 1, Duration::from_secs(2))
        .await
        .is_allowed());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(50) && waited < Duration::from_millis(1_500),
        "{waited:?}"
    );
    // Too short a bound: answered at once, denied.
    let started = Instant::now();
    assert!(!limiter
        .until_ready(&key, 1, Duration::from_millis(1))
        .await
        .is_allowed());
    // At once: not the 100 ms the next unit takes to come.
    assert!(started.elapsed() < Duration::from_millis(90));
}

#[tokio::test]
async fn a_failing_backend_is_answered_by_the_failure_policy() {
    let key = Key::new("ws", "a");
    let open = Limiter::new("1/min".parse::<Policy>().unwrap()).backend(Broken);
    assert!(matches!(
        open.check(&key, 1).await,
        Admission::Unavailable { allowed: true, .. }
    ));
    let closed = open.clone().on_backend_error(OnBackendError::Deny);
    assert!(!closed.check(&key, 1).await.is_allowed());
    // With a fallback, the fallback decides.
    use tower_ratelimit::backend::Backend;
    let local = closed.backend(Broken.or_fallback(MemoryBackend::new()));
    assert_eq!(admitted(&local, &key, 3).await, 1);
}

/// A named limit is one budget for a layer's requests and a limiter's
/// messages on the same backend: on Redis, across processes.
#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_limiter_and_a_layer_share_a_named_limit() {
    use tower::ServiceExt;
    use tower_ratelimit::key::Header;
    use tower_ratelimit::RateLimitLayer;

    let server = crate::support::RedisServer::start();
    let policy: Policy = "chat = 4/min".parse().unwrap();
    let redis = server.backend().await;
    let limiter = Limiter::new(policy.clone()).backend(redis.clone());
    let user = Key::new("header:x-user-id", "alice");
    assert_eq!(admitted(&limiter, &user, 3).await, 3);

    let other_process = server.backend().await;
    let http = axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(
            RateLimitLayer::new(policy)
                .key(Header::new("x-user-id"))
                .backend(other_process),
        );
    let send = || {
        let req = http::Request::get("/")
            .header("x-user-id", "alice")
            .body(axum::body::Body::empty())
            .unwrap();
        http.clone().oneshot(req)
    };
    assert_eq!(send().await.unwrap().status(), 200, "the fourth of four");
    assert_eq!(send().await.unwrap().status(), 429);
    assert!(!limiter.check(&user, 1).await.is_allowed());
}
