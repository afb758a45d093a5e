//! Settling by the response, on the memory backend and on Redis: failed
//! logins counted alone, costs known after the response.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tower::ServiceExt;
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::Header;
use tower_ratelimit::{Policy, RateLimitLayer};

/// 200 with the right password (`x-password: demo`), else 401.
async fn login(headers: HeaderMap) -> StatusCode {
    match headers.get("x-password") {
        Some(p) if p == "demo" => StatusCode::OK,
        _ => StatusCode::UNAUTHORIZED,
    }
}

/// Reports `x-tokens-used: <x-tokens>` after using them.
async fn tokens(req: Request) -> impl IntoResponse {
    let used = req
        .headers()
        .get("x-tokens")
        .cloned()
        .unwrap_or_else(|| "0".parse().unwrap());
    ([("x-tokens-used", used)], "done")
}

async fn send(app: &Router, headers: &[(&str, &str)]) -> (u16, Option<String>, Option<String>) {
    let mut req = Request::get("/").header("x-user-id", "alice");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let header = |name: &str| {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    (
        res.status().as_u16(),
        header("x-ratelimit-remaining"),
        header("retry-after"),
    )
}

fn logins<B: Backend>(backend: B) -> Router {
    let layer = RateLimitLayer::new("logins = 5/15min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .backend(backend)
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED);
    Router::new().route("/", get(login).layer(layer))
}

fn token_budget<B: Backend>(backend: B) -> Router {
    let layer = RateLimitLayer::new("tokens = 1000/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .backend(backend)
        .cost(100)
        .settle(|res| res.number("x-tokens-used"));
    Router::new().route("/", get(tokens).layer(layer))
}

async fn failed_logins_alone_count<B: Backend>(backend: B) {
    let app = logins(backend);
    let right = [("x-password", "demo")];
    // Successes never count.
    for _ in 0..10 {
        assert_eq!(send(&app, &right).await.0, 200);
    }
    for _ in 0..5 {
        assert_eq!(send(&app, &[("x-password", "guess")]).await.0, 401);
    }
    // The sixth attempt is refused before the handler runs, right password or not.
    let (status, remaining, retry) = send(&app, &right).await;
    assert_eq!((status, remaining.as_deref()), (429, Some("0")));
    let retry: u64 = retry.unwrap().parse().unwrap();
    // Within two windows of the sliding window counter.
    assert!(retry > 60 && retry <= 2 * 15 * 60, "{retry}");
}

async fn costs_are_settled_after_the_response<B: Backend>(backend: B) {
    let app = token_budget(backend);
    // Each reserves 100 and is charged 50: the headers show the state after.
    let (status, remaining, _) = send(&app, &[("x-tokens", "50")]).await;
    assert_eq!((status, remaining.as_deref()), (200, Some("950")));
    let mut admitted = 1;
    while send(&app, &[("x-tokens", "50")]).await.0 == 200 {
        admitted += 1;
    }
    // 19 × 50 = 950 leaves 50: too little for the next reservation of 100.
    assert_eq!(admitted, 19);
    // A request that used more than it reserved is charged all of it, up to
    // the capacity.
    charged_beyond_the_reservation(&app).await;
}

/// A heavy request after a light one: charged beyond its reservation.
async fn charged_beyond_the_reservation(app: &Router) {
    let req = |tokens: &str| {
        Request::get("/")
            .header("x-user-id", "bob")
            .header("x-tokens", tokens)
            .body(Body::empty())
            .unwrap()
    };
    let res = app.clone().oneshot(req("700")).await.unwrap();
    assert_eq!(res.headers()["x-ratelimit-remaining"], "300");
    let res = app.clone().oneshot(req("5000")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(app.clone().oneshot(req("1")).await.unwrap().status(), 429);
}

#[tokio::test]
async fn on_memory_failed_logins_alone_count() {
    failed_logins_alone_count(MemoryBackend::new()).await;
}

#[tokio::test]
async fn on_memory_costs_are_settled_after_the_response() {
    costs_are_settled_after_the_response(MemoryBackend::new()).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_failed_logins_alone_count_and_costs_are_settled() {
    let server = crate::support::RedisServer::start();
    let redis = server.backend().await;
    failed_logins_alone_count(redis.clone()).await;
    costs_are_settled_after_the_response(redis).await;
}

/// Concurrent requests of one key whose cost is known only afterwards:
/// one runs at a time, the others are refused until it is settled, so they
/// never overdraw the budget; a request whose response never comes keeps
/// its reservation (and gives up its key's place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_never_overdraw_and_dropped_ones_keep_their_reservation() {
    let slow = |req: Request| async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokens(req).await
    };
    let layer = RateLimitLayer::new("tokens = 1000/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .cost(100)
        .settle(|res| res.number("x-tokens-used"));
    let app = Router::new().route("/", get(slow).layer(layer));
    let mut all = Vec::new();
    for _ in 0..25 {
        let app = app.clone();
        all.push(tokio::spawn(async move {
            send(&app, &[("x-tokens", "10")]).await.0
        }));
    }
    let mut statuses = Vec::new();
    for task in all {
        statuses.push(task.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429));
    // That one was settled to 10: 90 back.
    let (_, remaining, _) = send(&app, &[("x-tokens", "0")]).await;
    assert_eq!(
        remaining.as_deref(),
        Some("990"),
        "10 used by one, then 0 by this one"
    );

    // A request dropped while its handler runs keeps its 100.
    let req = Request::get("/")
        .header("x-user-id", "carol")
        .header("x-tokens", "1")
        .body(Body::empty())
        .unwrap();
    let dropped = tokio::time::timeout(Duration::from_millis(50), app.clone().oneshot(req)).await;
    assert!(dropped.is_err(), "cut off before the response");
    let req = Request::get("/")
        .header("x-user-id", "carol")
        .header("x-tokens", "0")
        .body(Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), 200, "the dropped request gave up its place");
    assert_eq!(res.headers()["x-ratelimit-remaining"], "900");
}

/// 40 requests of one user at once, each reserving 100 of 1,000 tokens a
/// minute and using 10,000: one is served, the others are refused while
/// it runs (retry after a second), and its debt then refuses the rest of
/// the window: 10,000 tokens served, the budget plus one request's overrun
/// (before, the ten that fit in 1,000 were each charged 10,000). On memory
/// and on Redis alike.
async fn concurrent_overruns_are_one<B: Backend>(backend: B) {
    let slow = |req: Request| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tokens(req).await
    };
    let layer = RateLimitLayer::new("tokens = 1000/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .backend(backend)
        .cost(100)
        .settle(|res| res.number("x-tokens-used"));
    let app = Router::new().route("/", get(slow).layer(layer));
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { send(&app, &[("x-tokens", "10000")]).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let served = answers.iter().filter(|(s, _, _)| *s == 200).count();
    assert_eq!(served, 1, "{answers:?}");
    assert!(answers
        .iter()
        .filter(|(s, _, _)| *s == 429)
        .all(|(_, _, retry)| retry.as_deref() == Some("1")));
    // The debt: 9,000 past the budget, refused for most of the minute.
    let (status, _, retry) = send(&app, &[("x-tokens", "1")]).await;
    assert_eq!(status, 429);
    assert!(retry.unwrap().parse::<u32>().unwrap() > 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_memory_concurrent_overruns_are_one() {
    concurrent_overruns_are_one(MemoryBackend::new()).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_concurrent_overruns_are_one() {
    let server = crate::support::RedisServer::start();
    concurrent_overruns_are_one(server.backend().await).await;
}

/// On Redis, a permit whose holder never gives it back (a server that
/// died) comes back when its lease ends; one given back comes back at once.
#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_permits_of_a_dead_holder_end_with_their_lease() {
    use tower_ratelimit::key::Key;
    use tower_ratelimit::Limit;

    let server = crate::support::RedisServer::start();
    let redis = server.backend().await;
    let policy = Policy::builder()
        .with(
            Limit::concurrent("flight", 1)
                .and_then(|l| l.lease(Duration::from_secs(1)))
                .unwrap(),
        )
        .build()
        .unwrap();
    let key = Key::new("user", "crashy");
    let first = redis.check(&key, &policy, 1).await.unwrap();
    let permit = first.permit().expect("an admission holds a permit");
    assert!(!redis.check(&key, &policy, 1).await.unwrap().is_allowed());
    // Renewed: still held.
    let renewed = redis.renew(&key, &policy, permit, 1).await.unwrap();
    assert!(renewed.permit().is_some());
    assert!(!redis.check(&key, &policy, 1).await.unwrap().is_allowed());
    // Its holder dies: nobody renews or releases; the lease ends.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let after = redis.check(&key, &policy, 1).await.unwrap();
    assert!(after.is_allowed());
    redis
        .release(&key, &policy, after.permit().unwrap(), 1)
        .await
        .unwrap();
    assert!(redis.check(&key, &policy, 1).await.unwrap().is_allowed());
}

/// Through the layer on Redis: a streaming response holds its permit
/// until its body ends.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_streaming_response_holds_its_permit_until_its_body_ends() {
    use http_body_util::BodyExt;
    use tower_ratelimit::Limit;

    let server = crate::support::RedisServer::start();
    let redis = server.backend().await;
    let policy = Policy::builder()
        .with(
            Limit::concurrent("flight", 1)
                .and_then(|l| l.lease(Duration::from_secs(10)))
                .unwrap(),
        )
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy)
        .key(Header::new("x-user-id"))
        .backend(redis);
    let streaming = || async { streamed(3, Duration::from_millis(100)) };
    let app = Router::new().route("/", get(streaming).layer(layer));
    let first = app
        .clone()
        .oneshot(
            Request::get("/")
                .header("x-user-id", "alice")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    // The handler has returned, the body not yet: still in flight.
    let second = send(&app, &[]).await;
    assert_eq!(second.0, 429);
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "xxx");
    // The permit goes back on a task (a Redis round trip): soon after.
    let mut status = 0;
    for _ in 0..50 {
        status = send(&app, &[]).await.0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, 200);
}

/// A response that outlasts its permit's lease keeps the permit: it is
/// renewed every half lease while the body streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_outlasting_its_lease_is_renewed_while_the_body_streams() {
    use http_body_util::BodyExt;
    use tower_ratelimit::Limit;

    let policy = Policy::builder()
        .with(
            Limit::concurrent("flight", 1)
                .and_then(|l| l.lease(Duration::from_millis(1_000)))
                .unwrap(),
        )
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy).key(Header::new("x-user-id"));
    let streaming = || async { streamed(5, Duration::from_millis(500)) };
    let app = Router::new().route("/", get(streaming).layer(layer));
    let req = || {
        Request::get("/")
            .header("x-user-id", "alice")
            .body(Body::empty())
            .unwrap()
    };
    let first = app.clone().oneshot(req()).await.unwrap();
    let reading = tokio::spawn(first.into_body().collect());
    // Past two leases (2 s) into the 2.5 s body: still held.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert_eq!(app.clone().oneshot(req()).await.unwrap().status(), 429);
    assert_eq!(reading.await.unwrap().unwrap().to_bytes(), "xxxxx");
    assert_eq!(app.clone().oneshot(req()).await.unwrap().status(), 200);
}

/// A body of `chunks` chunks ("x"), one every `pause`.
fn streamed(chunks: u32, pause: Duration) -> Body {
    let chunks = futures_util::stream::unfold(0, move |i| async move {
        if i == chunks {
            return None;
        }
        tokio::time::sleep(pause).await;
        Some((
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from("x")),
            i + 1,
        ))
    });
    Body::from_stream(chunks)
}

/// The attack that overdrew a token budget 10–100×: every 0.25 s a request
/// reserving 100 of 1000 tokens a minute reported using 10,000, and the
/// overrun was forgiven past the capacity. Now it is a debt: over three
/// minutes, each algorithm serves at most the budget plus one request's
/// overrun per window (for the buckets, what refills plus one overrun).
#[test]
fn overruns_are_debt_on_every_algorithm() {
    use tower_ratelimit::clock::{ManualClock, Micros};
    use tower_ratelimit::key::Key;
    use tower_ratelimit::Algorithm;

    fn ready<F: std::future::Future>(f: F) -> F::Output {
        futures_util::FutureExt::now_or_never(f).expect("the memory backend is ready at once")
    }
    for algorithm in Algorithm::ALL {
        let policy = Policy::parse_with("tokens = 1000/min", algorithm).unwrap();
        let clock = ManualClock::new(Micros::from_secs(6_000));
        let backend = MemoryBackend::builder().clock(clock.clone()).build();
        let key = Key::new("user", "greedy");
        let mut served_by_minute = [0u64; 3];
        for step in 0..(3 * 60 * 4) {
            clock.set(Micros::from_secs(6_000) + Micros::from_millis(250 * step));
            if backend.check_now(&key, &policy, 100).is_allowed() {
                ready(backend.settle(&key, &policy, 100, 10_000)).unwrap();
                served_by_minute[(step / 240) as usize] += 10_000;
            }
        }
        let total: u64 = served_by_minute.iter().sum();
        for (minute, served) in served_by_minute.iter().enumerate() {
            assert!(
                *served <= 1_000 + 10_000,
                "{algorithm}: minute {minute} served {served} tokens of a 1,000 budget"
            );
        }
        // Before, the bucket algorithms served about 100,000 a minute.
        assert!(total <= 3 * 11_000, "{algorithm}: {total} in three minutes");
        assert!(total >= 10_000, "{algorithm}: the first request is served");
    }
}

/// The memory backend, but a renewal's answer comes only when `gate`
/// opens (the store has renewed already): a renewal under way, as a
/// networked store's is while its answer travels.
#[derive(Clone)]
struct SlowRenewal {
    memory: MemoryBackend,
    gate: Arc<tokio::sync::Semaphore>,
    renewing: Arc<tokio::sync::Notify>,
}

type Answer = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<tower_ratelimit::Decision, tower_ratelimit::backend::BackendError>,
            > + Send,
    >,
>;

impl Backend for SlowRenewal {
    type Future = Answer;
    fn check(&self, key: &tower_ratelimit::key::Key, policy: &Policy, cost: u32) -> Answer {
        Box::pin(self.memory.check(key, policy, cost))
    }
    fn release(
        &self,
        key: &tower_ratelimit::key::Key,
        policy: &Policy,
        permit: tower_ratelimit::clock::Micros,
        cost: u32,
    ) -> Answer {
        Box::pin(self.memory.release(key, policy, permit, cost))
    }
    fn renew(
        &self,
        key: &tower_ratelimit::key::Key,
        policy: &Policy,
        permit: tower_ratelimit::clock::Micros,
        cost: u32,
    ) -> Answer {
        let renewed = self.memory.renew(key, policy, permit, cost);
        let (gate, renewing) = (self.gate.clone(), self.renewing.clone());
        Box::pin(async move {
            renewing.notify_one();
            let _open = gate.acquire().await;
            renewed.await
        })
    }
}

/// A response that ends while its permit's renewal is under way (the
/// store renewed it; the answer, with the permit's new name, not yet
/// back): the renewed permit is given back when that answer comes, not
/// held until its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_under_way_as_the_response_ends_gives_its_permit_back() {
    use tower_ratelimit::Limit;

    let policy = Policy::builder()
        .with(
            Limit::concurrent("flight", 1)
                .and_then(|l| l.lease(Duration::from_secs(2)))
                .unwrap(),
        )
        .build()
        .unwrap();
    let backend = SlowRenewal {
        memory: MemoryBackend::new(),
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
        renewing: Arc::new(tokio::sync::Notify::new()),
    };
    let layer = RateLimitLayer::new(policy)
        .key(Header::new("x-user-id"))
        .backend(backend.clone());
    let streaming = || async { streamed(2, Duration::from_millis(5_000)) };
    let app = Router::new().route("/", get(streaming).layer(layer));
    let req = || {
        Request::get("/")
            .header("x-user-id", "alice")
            .body(Body::empty())
            .unwrap()
    };
    let first = app.clone().oneshot(req()).await.unwrap();
    assert_eq!(first.status(), 200);
    // The first renewal (after half the lease) is under way: end the
    // response, then let its answer come.
    tokio::time::timeout(Duration::from_secs(3), backend.renewing.notified())
        .await
        .expect("a renewal after half the lease");
    drop(first);
    backend.gate.add_permits(1);
    // Well within the renewed lease (2 s).
    let mut status = 0;
    for _ in 0..50 {
        status = app.clone().oneshot(req()).await.unwrap().status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, 200, "the renewed permit was given back");
}
