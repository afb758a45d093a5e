//! Adaptive concurrency against a synthetic service whose latency grows
//! once more than C requests are in flight: the limit settles within 20%
//! of C within 200 of the service's round trips (10 s at its 50 ms),
//! admitted requests keep under twice the unloaded latency, and goodput
//! stays at 90% of the service's capacity or more — the round trip, the
//! latency and the capacity measured on the service alone, C clients.
//!
//! These run on tokio's paused clock: the service's latency is exactly
//! its curve, and the controllers see what such a service shows them,
//! whatever else the machine is doing. (On the real clock a busy machine
//! adds its own jitter to every response: AIMD's default tolerance of
//! 1.1 takes jitter over 10% for overload, and beside a load average of
//! 8 on 2 cores it held 27–37 places where the service has 40.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use http::{Request, Response, StatusCode};
use tower::{service_fn, Layer, ServiceExt};
use tower_ratelimit::layer::concurrency::{
    AdaptiveConcurrency, AimdConcurrency, Gradient, LatencyController,
};

/// The service's concurrency: past it, every request is slower in proportion.
const C: usize = 40;
const BASE: Duration = Duration::from_millis(50);
const CLIENTS: usize = 120;
/// The controllers learn from round trips: they settle within this many.
const ROUND_TRIPS: u32 = 200;

struct Run {
    /// (time since start, limit), every 100 ms.
    limits: Vec<(Duration, usize)>,
    /// Each admitted request: (when it ended, its latency).
    admitted: Vec<(Duration, Duration)>,
}

/// The service: `BASE` per request up to C in flight, slower in proportion
/// past it.
fn service() -> impl tower::Service<
    Request<()>,
    Response = Response<String>,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone
       + Send
       + 'static {
    let in_service = Arc::new(AtomicUsize::new(0));
    service_fn(move |_: Request<()>| {
        let in_service = in_service.clone();
        async move {
            let n = in_service.fetch_add(1, Ordering::SeqCst) + 1;
            let slower = (n as f64 / C as f64).max(1.0);
            tokio::time::sleep(BASE.mul_f64(slower)).await;
            in_service.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }
    })
}

/// The service alone, C clients asking as fast as it answers for 2 s: its
/// p99 latency unloaded and its capacity (answers a second).
async fn baseline() -> (Duration, f64) {
    let svc = service();
    let start = Instant::now();
    let run = Duration::from_secs(2);
    let mut clients = Vec::new();
    for _ in 0..C {
        let svc = svc.clone();
        clients.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while start.elapsed() < run {
                let sent = Instant::now();
                svc.clone().oneshot(Request::new(())).await.unwrap();
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.unwrap());
    }
    let per_second = latencies.len() as f64 / start.elapsed().as_secs_f64();
    latencies.sort();
    (latencies[latencies.len() * 99 / 100], per_second)
}

/// How long a run lasts: time to settle, then 5 s settled (15 s at the
/// service's 50 ms).
fn run_for(unloaded: Duration) -> Duration {
    unloaded * ROUND_TRIPS + Duration::from_secs(5)
}

async fn run(controller: impl LatencyController, run_for: Duration) -> Run {
    let limiter = AdaptiveConcurrency::new(controller).bounds(5, 1000);
    let svc = limiter.layer(service());
    let start = Instant::now();
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (svc, admitted) = (svc.clone(), admitted.clone());
        clients.push(tokio::spawn(async move {
            while start.elapsed() < run_for {
                let sent = Instant::now();
                let res = svc.clone().oneshot(Request::new(())).await.unwrap();
                if res.status() == StatusCode::OK {
                    admitted
                        .lock()
                        .unwrap()
                        .push((start.elapsed(), sent.elapsed()));
                } else {
                    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
                    assert_eq!(res.headers()["retry-after"], "1");
                    // A polite client pauses (briefly, to keep the load on).
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }));
    }
    let mut limits = Vec::new();
    while start.elapsed() < run_for {
        limits.push((start.elapsed(), limiter.limit()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for client in clients {
        client.await.unwrap();
    }
    let admitted = std::mem::take(&mut *admitted.lock().unwrap());
    Run { limits, admitted }
}

/// A run of `controller` checked against the service alone.
async fn converges<K: LatencyController>(name: &str, controller: K) {
    let alone = baseline().await;
    let run = run(controller, run_for(alone.0)).await;
    assert_converges(name, &run, alone);
}

fn assert_converges(name: &str, run: &Run, (unloaded, capacity): (Duration, f64)) {
    let run_for = run_for(unloaded);
    let within = |limit: usize| (C * 8 / 10..=C * 12 / 10).contains(&limit);
    // The first moment from which the limit stays within 20% of C.
    let settled = run
        .limits
        .iter()
        .rposition(|(_, l)| !within(*l))
        .map_or(Duration::ZERO, |i| {
            run.limits.get(i + 1).map_or(run_for, |(t, _)| *t)
        });
    let trace: Vec<usize> = run.limits.iter().step_by(10).map(|(_, l)| *l).collect();
    // The service's p99 alone is its 50 ms round trip: the bound is 10 s.
    assert!(
        settled < unloaded * ROUND_TRIPS,
        "{name}: settled at {settled:?}, not within {ROUND_TRIPS} round trips of {unloaded:?}: {trace:?}"
    );

    let mut latencies: Vec<Duration> = run.admitted.iter().map(|(_, l)| *l).collect();
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    assert!(
        p99 < unloaded * 2,
        "{name}: p99 {p99:?}, unloaded {unloaded:?}"
    );

    // Goodput over the last 5 s against the service's capacity (C / BASE),
    // measured alone.
    let tail = run
        .admitted
        .iter()
        .filter(|(t, _)| *t >= run_for - Duration::from_secs(5))
        .count();
    let goodput = tail as f64 / 5.0;
    assert!(
        goodput >= 0.9 * capacity,
        "{name}: {goodput:.0}/s of {capacity:.0}/s"
    );
    println!(
        "{name}: settled at {settled:?}, limit {trace:?}, p99 {p99:?} (unloaded {unloaded:?}), goodput {:.0}% of capacity ({capacity:.0}/s)",
        100.0 * goodput / capacity
    );
}

#[tokio::test(start_paused = true)]
async fn the_gradient_finds_the_services_concurrency() {
    converges("gradient", Gradient::default()).await;
}

#[tokio::test(start_paused = true)]
async fn aimd_finds_the_services_concurrency() {
    converges("aimd", AimdConcurrency::default()).await;
}

/// Over the limit with a queue: a request waits for a place (up to the
/// bound) instead of a 503, and the queue's length is bounded.
#[tokio::test]
async fn a_queue_holds_requests_over_the_limit_briefly() {
    let limiter = AdaptiveConcurrency::new(AimdConcurrency::default())
        .bounds(1, 1)
        .queue(1, Duration::from_millis(500));
    let svc = limiter.layer(service_fn(|_: Request<()>| async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, std::convert::Infallible>(Response::new(String::new()))
    }));
    let call = || svc.clone().oneshot(Request::new(()));
    let (a, b, c) = tokio::join!(call(), call(), async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        call().await
    });
    let statuses = [
        a.unwrap().status(),
        b.unwrap().status(),
        c.unwrap().status(),
    ];
    // One in flight, one queued (served after it), the third refused.
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(statuses[2], StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(limiter.in_flight(), 0);
}

/// With classes, a limit of 10 in flight (held by a service that answers
/// only when told): sheddable requests fill at most 7 places, default ones
/// 8, critical ones all 10 — the standard reserves — and a request past
/// its class's part is answered 503 at once, while a more important one
/// still gets in.
#[tokio::test]
async fn classes_fill_their_part_of_the_limit_and_no_more() {
    use tower_ratelimit::layer::{Class, Reserves};
    let limiter = AdaptiveConcurrency::new(Gradient::default())
        .bounds(10, 10)
        .classes(
            |req| {
                req.headers
                    .get("x-priority")
                    .map_or(Class::Default, |v| Class::from_header(v.as_bytes()))
            },
            Reserves::STANDARD,
        );
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let service = {
        let release = release.clone();
        service_fn(move |_: Request<()>| {
            let release = release.clone();
            async move {
                release.acquire().await.unwrap().forget();
                Ok::<_, std::convert::Infallible>(Response::new(String::new()))
            }
        })
    };
    let svc = limiter.layer(service);
    let request = |class: &str| {
        Request::builder()
            .header("x-priority", class)
            .body(())
            .unwrap()
    };
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for class in ["sheddable"; 8]
        .into_iter()
        .chain(["default"; 3])
        .chain(["critical"; 2])
    {
        let task = tokio::spawn(svc.clone().oneshot(request(class)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        if task.is_finished() {
            let status = task.await.unwrap().unwrap().status();
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{class}");
            refused.push(class);
        } else {
            held.push(task);
        }
    }
    // 7 sheddable, the 8th refused; 1 default (8), 2 refused; 2 critical (10).
    assert_eq!(refused, ["sheddable", "default", "default"]);
    assert_eq!(limiter.in_flight(), 10);
    release.add_permits(10);
    for task in held {
        assert_eq!(task.await.unwrap().unwrap().status(), StatusCode::OK);
    }
}
