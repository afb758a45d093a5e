//! Shaping: delayed instead of rejected, within bounds, never past the limit.

use std::convert::Infallible;
use std::future::ready;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tokio::task::JoinSet;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_ratelimit::key::Global;
use tower_ratelimit::layer::Shaping;
use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};

/// 10 per second, one every 100 ms, no burst beyond one.
fn ten_per_second() -> Policy {
    let quota = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    Policy::single(Algorithm::Gcra, quota).unwrap()
}

/// Send `n` requests at once; the status and latency of each.
async fn burst(layer: RateLimitLayer<Global>, n: usize) -> Vec<(StatusCode, Duration)> {
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_: Request<()>| {
            ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
                "ok",
            )))))
        }));
    let mut set = JoinSet::new();
    for _ in 0..n {
        let svc = svc.clone();
        set.spawn(async move {
            let start = Instant::now();
            let res = svc.oneshot(Request::new(())).await.unwrap();
            (res.status(), start.elapsed())
        });
    }
    let mut out: Vec<_> = set.join_all().await;
    out.sort_by_key(|(_, latency)| *latency);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_smoothed_to_the_rate_instead_of_rejected() {
    let layer = RateLimitLayer::new(ten_per_second())
        .key(Global)
        .shape(Shaping::wait_up_to(Duration::from_secs(2)).max_waiting(100));
    let started = Instant::now();
    let results = burst(layer, 5).await;
    let took = started.elapsed();
    assert!(
        results.iter().all(|(s, _)| *s == StatusCode::OK),
        "{results:?}"
    );
    // One at once, the others one per 100 ms: the last after about 400 ms,
    // never sooner (that would exceed the rate).
    assert!(results[0].1 < Duration::from_millis(250), "{results:?}");
    assert!(results[4].1 >= Duration::from_millis(390), "{results:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_would_wait_too_long_is_rejected_at_once() {
    let layer = RateLimitLayer::new(ten_per_second())
        .key(Global)
        .shape(Shaping::wait_up_to(Duration::from_millis(50)).max_waiting(100));
    let results = burst(layer, 3).await;
    let mut statuses: Vec<u16> = results.iter().map(|(s, _)| s.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 429, 429]);
    assert!(
        results
            .iter()
            .all(|(_, latency)| *latency < Duration::from_millis(250)),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_room_is_bounded() {
    let layer = RateLimitLayer::new(ten_per_second())
        .key(Global)
        .shape(Shaping::wait_up_to(Duration::from_secs(5)).max_waiting(2));
    let results = burst(layer, 6).await;
    let ok = results.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let rejected: Vec<_> = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    // One at once, two that waited; three found the room full.
    assert_eq!((ok, rejected.len()), (3, 3), "{results:?}");
    assert!(
        rejected
            .iter()
            .all(|(_, latency)| *latency < Duration::from_millis(250)),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_gives_its_place_back() {
    let layer = RateLimitLayer::new(ten_per_second())
        .key(Global)
        .shape(Shaping::wait_up_to(Duration::from_secs(5)).max_waiting(1));
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_: Request<()>| {
            ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
                "ok",
            )))))
        }));
    assert_eq!(
        svc.clone()
            .oneshot(Request::new(()))
            .await
            .unwrap()
            .status(),
        200
    );
    // This one waits; the client gives up after 20 ms.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(20),
        svc.clone().oneshot(Request::new(())),
    )
    .await;
    assert!(gave_up.is_err());
    // Its place is free again: the next request waits instead of being rejected.
    let start = Instant::now();
    let res = svc.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        start.elapsed() >= Duration::from_millis(50),
        "it waited for its turn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shaping_never_admits_more_than_the_limit() {
    // 40 requests at once with a generous wait, sliding log 5 per 200 ms.
    // Admission times are taken where the inner service is called (in the
    // same poll as the limiter's decision), not where clients see answers,
    // which only ever arrive later.
    let quota = Quota::new(5, Duration::from_millis(200)).unwrap();
    let layer = RateLimitLayer::new(Policy::single(Algorithm::SlidingLog, quota).unwrap())
        .key(Global)
        .shape(Shaping::wait_up_to(Duration::from_millis(700)).max_waiting(100));
    let admitted_at = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let record = admitted_at.clone();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(move |_: Request<()>| {
            record.lock().unwrap().push(started.elapsed());
            ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
                "ok",
            )))))
        }));
    let mut set = JoinSet::new();
    for _ in 0..40 {
        let svc = svc.clone();
        set.spawn(async move { svc.oneshot(Request::new(())).await.unwrap().status() });
    }
    let statuses = set.join_all().await;
    let took = started.elapsed();
    let mut admitted = admitted_at.lock().unwrap().clone();
    admitted.sort_unstable();
    assert_eq!(
        admitted.len(),
        statuses.iter().filter(|s| **s == StatusCode::OK).count()
    );
    // In any 200 ms at most 5 were let through, less 20 ms of slack: the
    // limiter reads its clock and this test its own in one poll, but a
    // loaded machine can preempt the thread between the two.
    for (i, t) in admitted.iter().enumerate() {
        let within = admitted[i..]
            .iter()
            .filter(|u| **u < *t + Duration::from_millis(180))
            .count();
        assert!(within <= 5, "{within} within 180 ms of {t:?}: {admitted:?}");
    }
    // And shaping did let more than one window's worth through, over time.
    assert!(
        admitted.len() > 5 && admitted.len() <= 5 * (1 + took.as_millis() as usize / 200),
        "{}",
        admitted.len()
    );
}
