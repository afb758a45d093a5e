//! The layer through `oneshot`: what a client of the wrapped service sees.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::later::{same_answers, Later};
use crate::support::strict::Strict;
use crate::support::Broken;
use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_ratelimit::backend::{Backend, MemoryBackend, OnBackendError};
use tower_ratelimit::clock::{ManualClock, Micros};
use tower_ratelimit::key::Key;
use tower_ratelimit::key::{key_fn, Endpoint, Global, Header, KeyError, KeyExtractor};
use tower_ratelimit::layer::HeaderStyle;
use tower_ratelimit::layer::{
    cost_fn, policy_fn, LimitedResponse, NoPolicy, OnKeyError, RoutePolicies,
};
use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};

fn policy(text: &str) -> Policy {
    text.parse().unwrap()
}

fn user(id: &str) -> Request<Body> {
    Request::get("/")
        .header("x-user-id", id)
        .body(Body::empty())
        .unwrap()
}

/// Status, headers and body text of a response.
async fn read<B>(res: Response<B>) -> (StatusCode, HeaderMap, String)
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

type Ok200 = Ready<Result<Response<Full<Bytes>>, Infallible>>;

/// A service that counts its calls.
fn counting(
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<Body>, Response = Response<Full<Bytes>>, Error = Infallible, Future = Ok200>
       + Clone {
    service_fn(move |_req: Request<Body>| {
        calls.fetch_add(1, Ordering::SeqCst);
        ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
            "ok",
        )))))
    })
}

#[tokio::test]
async fn a_denied_request_never_reaches_the_inner_service() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::new(policy("3/min")).key(Header::new("x-user-id"));
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(counting(calls.clone()));
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let res = svc.clone().oneshot(user("alice")).await.unwrap();
        statuses.push(res.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Another user has a budget of their own.
    let res = svc.clone().oneshot(user("bob")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn every_response_carries_quota_headers() {
    let two = Policy::builder()
        .limit(
            "burst",
            Algorithm::TokenBucket,
            Quota::per_second(10).unwrap(),
        )
        .limit(
            "sustained",
            Algorithm::SlidingWindow,
            Quota::per_minute(100).unwrap(),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "hi" }))
        .layer(RateLimitLayer::new(two).key(Header::new("x-user-id")));

    let (status, headers, _) = read(app.clone().oneshot(user("u1")).await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["ratelimit-policy"],
        r#""burst";q=10;w=1, "sustained";q=100;w=60"#
    );
    // One request: 9 tokens left, the token back in 0.1 s (rounded up to 1 s);
    // 99 left in the minute, whose count is forgotten by the end of the next.
    let ratelimit = headers["ratelimit"].to_str().unwrap();
    assert!(
        ratelimit.starts_with(r#""burst";r=9;t=1, "sustained";r=99;t="#),
        "{ratelimit}"
    );
    assert_eq!(headers["x-ratelimit-limit"], "10");
    assert_eq!(headers["x-ratelimit-remaining"], "9");
    let reset: u64 = headers["x-ratelimit-reset"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!((now..=now + 2).contains(&reset), "{reset} vs {now}");

    for _ in 0..9 {
        app.clone().oneshot(user("u1")).await.unwrap();
    }
    let (status, headers, body) = read(app.clone().oneshot(user("u1")).await.unwrap()).await;
    assert_eq!(status, 429);
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["content-type"], "application/json");
    assert!(headers["ratelimit"]
        .to_str()
        .unwrap()
        .contains(r#""sustained";r=90;"#));
    assert_eq!(
        body,
        r#"{"error":"rate_limit_exceeded","limit":10,"window":"1s","retry_after_seconds":1}"#
    );
}

#[tokio::test]
async fn header_styles_choose_what_is_sent() {
    for (style, legacy, ietf) in [
        (HeaderStyle::Legacy, true, false),
        (HeaderStyle::Ietf, false, true),
        (HeaderStyle::Both, true, true),
        (HeaderStyle::None, false, false),
    ] {
        let layer = RateLimitLayer::new(policy("1/min"))
            .key(Global)
            .headers(style);
        let svc = ServiceBuilder::new()
            .layer(layer)
            .service(counting(Arc::default()));
        let (_, ok, _) = read(svc.clone().oneshot(user("a")).await.unwrap()).await;
        let (status, denied, _) = read(svc.clone().oneshot(user("a")).await.unwrap()).await;
        assert_eq!(status, 429);
        for headers in [&ok, &denied] {
            assert_eq!(
                headers.contains_key("x-ratelimit-limit"),
                legacy,
                "{style:?}"
            );
            assert_eq!(headers.contains_key("ratelimit"), ietf, "{style:?}");
            assert_eq!(headers.contains_key("ratelimit-policy"), ietf, "{style:?}");
        }
        assert!(denied.contains_key("retry-after"), "{style:?}");
        assert!(!ok.contains_key("retry-after"));
    }
}

#[tokio::test]
async fn retry_after_rounds_up_and_jitter_stays_within_its_bound() {
    // 1 per 90 s: the second request waits 90 s.
    let quota = Quota::new(1, Duration::from_secs(90)).unwrap();
    let layer = RateLimitLayer::new(Policy::single(Algorithm::Gcra, quota).unwrap()).key(Global);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(counting(Arc::default()));
    svc.clone().oneshot(user("a")).await.unwrap();
    let res = svc.clone().oneshot(user("a")).await.unwrap();
    let retry: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((89..=90).contains(&retry), "{retry}");

    let jittered = RateLimitLayer::new(Policy::single(Algorithm::Gcra, quota).unwrap())
        .key(Global)
        .retry_after_jitter(Duration::from_secs(10));
    let svc = ServiceBuilder::new()
        .layer(jittered)
        .service(counting(Arc::default()));
    svc.clone().oneshot(user("a")).await.unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let res = svc.clone().oneshot(user("a")).await.unwrap();
        let retry: u64 = res.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((89..=100).contains(&retry), "{retry}");
        seen.insert(retry);
    }
    assert!(seen.len() > 5, "jitter spreads clients: {seen:?}");
}

#[tokio::test]
async fn problem_json_and_custom_responses() {
    let layer = RateLimitLayer::new(policy("1/min"))
        .key(Global)
        .limited_response(LimitedResponse::ProblemJson);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(counting(Arc::default()));
    svc.clone().oneshot(user("a")).await.unwrap();
    let (status, headers, body) = read(svc.clone().oneshot(user("a")).await.unwrap()).await;
    assert_eq!(status, 429);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(body.starts_with(r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit \"1/min\" exceeded","error":"rate_limit_exceeded","limit":1,"window":"1m","retry_after_seconds":"#), "{body}");

    let custom = LimitedResponse::custom(|refused| {
        let name = refused.limit_name();
        // It sees whom the request was counted against, and the request.
        let who = refused.key.namespace();
        let path = refused.request.uri.path();
        Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .body(Bytes::from(format!("slow down ({name}, {who}, {path})")))
            .unwrap()
    });
    let layer = RateLimitLayer::new(policy("1/min"))
        .key(Global)
        .limited_response(custom);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(counting(Arc::default()));
    svc.clone().oneshot(user("a")).await.unwrap();
    let (status, headers, body) = read(svc.clone().oneshot(user("a")).await.unwrap()).await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::TOO_MANY_REQUESTS,
            "slow down (1/min, global, /)"
        )
    );
    assert!(headers.contains_key("retry-after") && headers.contains_key("ratelimit"));
}

#[tokio::test]
async fn a_cost_that_never_fits_says_so() {
    let layer = RateLimitLayer::new(policy("5/min")).key(Global).cost(6);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(counting(Arc::default()));
    let (status, headers, body) = read(svc.oneshot(user("a")).await.unwrap()).await;
    assert_eq!(status, 429);
    assert!(!headers.contains_key("retry-after"));
    assert_eq!(
        body,
        r#"{"error":"cost_exceeds_limit","limit":5,"window":"1m","retry_after_seconds":null}"#
    );
}

/// Each limit's `t` in a `RateLimit` field, in order.
fn reset_params(field: &str) -> Vec<u64> {
    field
        .split(", ")
        .map(|item| item.rsplit_once(";t=").unwrap().1.parse().unwrap())
        .collect()
}

#[tokio::test]
async fn quota_headers_point_no_further_than_the_next_unit_can_take_and_t_is_the_retry_after() {
    for algorithm in Algorithm::ALL {
        let quota = if algorithm.takes_burst() {
            // A burst refills for two windows; a header still says at most one.
            "5/min burst 10"
        } else {
            "5/min"
        };
        // One window, but for the sliding window counter, whose next unit
        // can take a window and one unit's share (12 s at 5/min); before the
        // change, its t said up to two windows (88 s).
        let horizon = if algorithm == Algorithm::SlidingWindow {
            72
        } else {
            60
        };
        let policy = Policy::builder()
            .limit("minute", algorithm, quota.parse().unwrap())
            .build()
            .unwrap();
        // One second into a minute: where the sliding window's full reset
        // is furthest (119 s) and its retry-after longest (71 s).
        let clock = ManualClock::new(Micros::from_secs(601));
        let backend = MemoryBackend::builder().clock(clock).build();
        let app = Router::new().route("/", get(|| async { "hi" })).layer(
            RateLimitLayer::new(policy)
                .key(Header::new("x-user-id"))
                .backend(backend),
        );
        let mut denied = false;
        for _ in 0..12 {
            let (status, headers, _) = read(app.clone().oneshot(user("u")).await.unwrap()).await;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let t = reset_params(headers["ratelimit"].to_str().unwrap())[0];
            assert!(t <= horizon, "{algorithm}: t={t} past {horizon} s");
            let reset: u64 = headers["x-ratelimit-reset"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                reset <= now + horizon + 1,
                "{algorithm}: reset {reset} past now {now} + {horizon}"
            );
            if status == StatusCode::TOO_MANY_REQUESTS {
                // Retry-After is the exact wait; t says the same.
                let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                assert_eq!(t, retry, "{algorithm}: t is when more quota is available");
                assert!((1..=horizon).contains(&retry), "{algorithm}: {retry}");
                denied = true;
            }
        }
        assert!(denied, "{algorithm}: never denied");
    }
}

#[tokio::test]
async fn a_request_without_a_policy_is_refused_unless_the_layer_says_unlimited() {
    // The trap: a tier an auth layer would set, but the auth layer sits
    // inside the limiter, so no request has it yet.
    #[derive(Clone)]
    struct Tier;
    let free = policy("2/h");
    let by_tier = policy_fn(move |req| req.extensions.get::<Tier>().map(|_| free.clone()));
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(by_tier.clone()).key(Global))
        .service(counting(calls.clone()));
    for _ in 0..3 {
        let (status, _, body) = read(
            svc.clone()
                .oneshot(Request::new(Body::empty()))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("rate_limit_no_policy"), "{body}");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "nothing reached the service"
    );

    // Said explicitly: such requests pass, unlimited and without headers.
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(by_tier)
                .key(Global)
                .on_no_policy(NoPolicy::Unlimited),
        )
        .service(counting(calls.clone()));
    for _ in 0..3 {
        let (status, headers, _) = read(
            svc.clone()
                .oneshot(Request::new(Body::empty()))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(!headers.contains_key("x-ratelimit-limit"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn missing_keys_are_rejected_skipped_or_fall_back() {
    let calls = Arc::new(AtomicUsize::new(0));
    let anonymous = || Request::get("/").body(Body::empty()).unwrap();

    let strict = RateLimitLayer::new(policy("1/min")).key(Header::new("x-user-id"));
    let svc = ServiceBuilder::new()
        .layer(strict)
        .service(counting(calls.clone()));
    let (status, _, body) = read(svc.oneshot(anonymous()).await.unwrap()).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        r#"{"error":"rate_limit_key_missing","detail":"missing header x-user-id"}"#
    );

    let unauthorized = RateLimitLayer::new(policy("1/min"))
        .key(Header::new("x-user-id"))
        .on_key_error(OnKeyError::Reject(StatusCode::UNAUTHORIZED));
    let svc = ServiceBuilder::new()
        .layer(unauthorized)
        .service(counting(calls.clone()));
    assert_eq!(svc.oneshot(anonymous()).await.unwrap().status(), 401);
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let lenient = RateLimitLayer::new(policy("1/min"))
        .key(Header::new("x-user-id"))
        .on_key_error(OnKeyError::Skip);
    let svc = ServiceBuilder::new()
        .layer(lenient)
        .service(counting(calls.clone()));
    for _ in 0..3 {
        let (status, headers, _) = read(svc.clone().oneshot(anonymous()).await.unwrap()).await;
        assert_eq!(status, 200);
        assert!(
            !headers.contains_key("ratelimit"),
            "unlimited requests carry no quota"
        );
    }

    // Without a user id, fall back to one shared anonymous bucket.
    let fallback = key_fn(|_| Ok(Key::new("anonymous", "")));
    let layered = RateLimitLayer::new(policy("1/min")).key(Header::new("x-user-id").or(fallback));
    let svc = ServiceBuilder::new()
        .layer(layered)
        .service(counting(calls.clone()));
    assert_eq!(
        svc.clone().oneshot(anonymous()).await.unwrap().status(),
        200
    );
    assert_eq!(
        svc.clone().oneshot(anonymous()).await.unwrap().status(),
        429
    );
    assert_eq!(
        svc.clone().oneshot(user("carol")).await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn backend_failure_allows_or_denies_as_configured() {
    let calls = Arc::new(AtomicUsize::new(0));
    let open = RateLimitLayer::new(policy("1/min"))
        .key(Global)
        .backend(Broken);
    let svc = ServiceBuilder::new()
        .layer(open)
        .service(counting(calls.clone()));
    for _ in 0..3 {
        let (status, headers, _) = read(svc.clone().oneshot(user("a")).await.unwrap()).await;
        assert_eq!(status, 200);
        assert!(!headers.contains_key("x-ratelimit-remaining"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    let closed = RateLimitLayer::new(policy("1/min"))
        .key(Global)
        .backend(Broken)
        .on_backend_error(OnBackendError::Deny);
    let svc = ServiceBuilder::new()
        .layer(closed)
        .service(counting(calls.clone()));
    let (status, headers, body) = read(svc.oneshot(user("a")).await.unwrap()).await;
    // Fail closed is a 503 with a problem body, not a 429: the client
    // exceeded nothing.
    assert_eq!(status, 503);
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["content-type"], "application/problem+json");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    assert_eq!(body["status"], 503);
    assert_eq!(body["error"], "rate_limit_unavailable");
    assert_eq!(body["retry_after_seconds"], 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn per_route_layers_and_a_route_table() {
    // route_layer: only /search is limited, per user per endpoint.
    let app = Router::new()
        .route("/search", get(|| async { "results" }))
        .route_layer(
            RateLimitLayer::new(policy("search = 2/min")).key((Header::new("x-user-id"), Endpoint)),
        )
        .route("/home", get(|| async { "home" }));
    let request = |path: &str| {
        Request::get(path)
            .header("x-user-id", "u")
            .body(Body::empty())
            .unwrap()
    };
    let search: Vec<u16> = futures_statuses(&app, || request("/search"), 3).await;
    assert_eq!(search, [200, 200, 429]);
    assert_eq!(
        futures_statuses(&app, || request("/home"), 5).await,
        [200; 5]
    );

    // One layer, a policy per route template: /users/1 and /users/2 share
    // the /users/{id} budget.
    let table = RoutePolicies::new()
        .route("/users/{id}", policy("users = 2/min"))
        .fallback(policy("other = 100/min"));
    let app = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/about", get(|| async { "about" }))
        .layer(RateLimitLayer::new(table).key(Header::new("x-user-id")));
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for path in ["/users/1", "/users/2", "/users/3"] {
            v.push(
                app.clone()
                    .oneshot(request(path))
                    .await
                    .unwrap()
                    .status()
                    .as_u16(),
            );
        }
        v
    };
    assert_eq!(statuses, [200, 200, 429]);
    let res = app.clone().oneshot(request("/about")).await.unwrap();
    assert_eq!(res.headers()["x-ratelimit-limit"], "100");
}

async fn futures_statuses(app: &Router, req: impl Fn() -> Request<Body>, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(app.clone().oneshot(req()).await.unwrap().status().as_u16());
    }
    out
}

#[derive(Clone, Copy)]
enum Tier {
    Free,
    Pro,
}

#[tokio::test]
async fn policies_by_tier_and_costs_by_request() {
    let (free, pro) = (policy("tier = 2/hour"), policy("tier = 5/hour"));
    let by_tier = policy_fn(move |req| match req.extensions.get::<Tier>()? {
        Tier::Free => Some(free.clone()),
        Tier::Pro => Some(pro.clone()),
    });
    let layer = RateLimitLayer::new(by_tier).key(Header::new("x-user-id"));
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(counting(Arc::default()));
    let as_tier = |id: &str, tier: Tier| {
        let mut req = user(id);
        req.extensions_mut().insert(tier);
        req
    };
    let mut admitted = [0, 0];
    for _ in 0..10 {
        for (i, (id, tier)) in [("f", Tier::Free), ("p", Tier::Pro)]
            .into_iter()
            .enumerate()
        {
            if svc
                .clone()
                .oneshot(as_tier(id, tier))
                .await
                .unwrap()
                .status()
                == 200
            {
                admitted[i] += 1;
            }
        }
    }
    assert_eq!(admitted, [2, 5]);

    // Cost from a header: one unit per started kilobyte.
    let by_size = cost_fn(|req| {
        let bytes: u32 = req
            .headers
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        bytes.div_ceil(1024).max(1)
    });
    let layer = RateLimitLayer::new(policy("10/min"))
        .key(Global)
        .cost(by_size);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(counting(Arc::default()));
    let upload = |len: u32| {
        Request::post("/")
            .header("content-length", len)
            .body(Body::empty())
            .unwrap()
    };
    let res = svc.clone().oneshot(upload(4000)).await.unwrap();
    assert_eq!(res.headers()["x-ratelimit-remaining"], "6");
    assert_eq!(
        svc.clone()
            .oneshot(upload(7 * 1024))
            .await
            .unwrap()
            .status(),
        429
    );
    assert_eq!(
        svc.clone()
            .oneshot(upload(6 * 1024))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn nested_layers_report_the_tighter_legacy_quota_and_every_ietf_item() {
    let app = Router::new()
        .route("/", get(|| async { "hi" }))
        .route_layer(RateLimitLayer::new(policy("inner = 3/min")).key(Global))
        .layer(RateLimitLayer::new(policy("outer = 100/min")).key(Global));
    let res = app.oneshot(user("a")).await.unwrap();
    assert_eq!(res.headers()["x-ratelimit-remaining"], "2");
    let items: Vec<_> = res.headers().get_all("ratelimit").iter().collect();
    assert_eq!(items.len(), 2);
}

#[tokio::test]
async fn a_custom_refusals_own_legacy_quota_stands_when_it_shows_no_more_remaining() {
    // The rule of nested layers holds for a custom refusal too: it may
    // carry legacy headers of its own, and ours replace them only when
    // they show fewer remaining. (The limiter's own refusal holds none, so
    // it is never searched for them.)
    let custom = |remaining: &'static str| {
        LimitedResponse::custom(move |_| {
            Response::builder()
                .status(StatusCode::TOO_MANY_REQUESTS)
                .header("x-ratelimit-limit", "7")
                .header("x-ratelimit-remaining", remaining)
                .body(Bytes::new())
                .unwrap()
        })
    };
    for (remaining, limit) in [("0", "7"), ("5", "1")] {
        let layer = RateLimitLayer::new(policy("1/min"))
            .key(Global)
            .limited_response(custom(remaining));
        let svc = ServiceBuilder::new()
            .layer(layer)
            .service(counting(Arc::default()));
        svc.clone().oneshot(user("a")).await.unwrap();
        let res = svc.clone().oneshot(user("a")).await.unwrap();
        assert_eq!(res.status(), 429);
        assert_eq!(res.headers()["x-ratelimit-limit"], limit, "{remaining}");
        assert_eq!(res.headers().get_all("x-ratelimit-limit").iter().count(), 1);
    }
}

#[tokio::test]
async fn poll_ready_is_the_inner_services() {
    // An inner service that is never ready keeps the layer not ready, and
    // no quota is reserved meanwhile.
    #[derive(Clone)]
    struct NeverReady;
    impl Service<Request<Body>> for NeverReady {
        type Response = Response<Full<Bytes>>;
        type Error = Infallible;
        type Future = Ready<Result<Self::Response, Infallible>>;
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Infallible>> {
            std::task::Poll::Pending
        }
        fn call(&mut self, _: Request<Body>) -> Self::Future {
            ready(Ok(Response::new(Full::default())))
        }
    }
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(policy("1/min")).key(Global))
        .service(NeverReady);
    let ready = tokio::time::timeout(Duration::from_millis(50), svc.ready()).await;
    assert!(ready.is_err(), "not ready while the inner service is not");
}

/// Five requests through a layer of 3/min on `backend` around a
/// [`Strict`] service: their statuses, then how often the service was
/// called, cloned, and called without `poll_ready` first.
async fn five_requests<B: Backend>(backend: B) -> (Vec<u16>, [usize; 3]) {
    let strict = Strict::default();
    let counts = strict.counts();
    let mut svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(policy("3/min"))
                .key(Global)
                .backend(backend),
        )
        .service(strict);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let ready = ServiceExt::<Request<Body>>::ready(&mut svc).await.unwrap();
        let res = ready.call(Request::new(Body::empty())).await.unwrap();
        statuses.push(res.status().as_u16());
    }
    (statuses, counts())
}

#[tokio::test]
async fn the_inner_service_is_called_ready_and_cloned_only_for_a_decision_still_to_come() {
    // Decided at once (memory): the layer's own ready service is called,
    // nothing is cloned (an axum route's clone is an allocation).
    let (statuses, [calls, clones, unready]) = five_requests(MemoryBackend::new()).await;
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!((calls, unready), (3, 0));
    assert_eq!(clones, 0, "nothing cloned for a decision known at once");

    // Decided later: each request takes the ready service with it and
    // leaves a clone, which is made ready before the next call.
    let later = Later::on(ManualClock::new(Micros::from_secs(1)));
    let (statuses, [calls, clones, unready]) = five_requests(later).await;
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!((calls, unready), (3, 0));
    assert_eq!(clones, 5, "one ready copy taken per request that waited");
}

/// One request of a trace: who sends it (a known user, or any header
/// bytes), what it says it costs, and how long after the previous one.
fn trace() -> impl Strategy<Value = Vec<(Result<u8, Vec<u8>>, u8, u16)>> {
    let who = prop_oneof![4 => (0u8..3).prop_map(Ok), 1 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(Err)];
    proptest::collection::vec((who, 0u8..5, 0u16..3_000), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Acted on within `call` (the memory backend's answer is known at
    /// once) or in the response future (the same backend answering on a
    /// second poll), a trace of requests gets the same answers: statuses,
    /// quota headers, bodies, and calls of the inner service. Hostile key
    /// bytes and client-chosen costs included.
    #[test]
    fn an_answer_known_at_once_and_one_that_comes_later_are_acted_on_alike(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        requests in trace(),
    ) {
        let trace = requests.into_iter().map(|(who, cost, after)| {
            let user = who.map_or_else(|bytes| bytes, |i| format!("user-{i}").into_bytes());
            (Duration::from_millis(u64::from(after)), user, cost.to_string())
        });
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(same_answers::<Body>(algorithm, trace));
    }
}

#[test]
fn the_layer_is_clone_and_debug() {
    fn assert_clone_debug<T: Clone + std::fmt::Debug>(_: &T) {}
    let layer = RateLimitLayer::new(policy("1/min")).key(Header::new("x-user-id").or(Global));
    assert_clone_debug(&layer);
    let debug = format!("{layer:?}");
    assert!(
        debug.contains("RateLimitLayer") && debug.contains("x-user-id"),
        "{debug}"
    );
    // Extractors give clear errors.
    let req = Request::get("/").body(()).unwrap();
    let err = Header::new("x-user-id")
        .extract(&(&req).into())
        .unwrap_err();
    assert_eq!(
        err,
        KeyError::MissingHeader(http::HeaderName::from_static("x-user-id"))
    );
    assert_eq!(err.to_string(), "missing header x-user-id");
}

/// Statuses of `n` requests to `path` from one user.
/// Statuses of `n` requests from alice to `path`.
async fn statuses(app: &Router, path: &str, n: usize) -> Vec<u16> {
    let alice = || {
        Request::get(path)
            .header("x-user-id", "alice")
            .body(Body::empty())
            .unwrap()
    };
    crate::support::http::statuses(app, alice, n).await
}

fn routes_app(layer: RateLimitLayer<Header, RoutePolicies>) -> Router {
    Router::new()
        .route("/a", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .route("/c", get(|| async { "c" }))
        .layer(layer)
}

#[tokio::test]
async fn two_routes_with_equal_policies_keep_their_own_budgets() {
    // Separately parsed, equal anonymous policies on one backend: the trap
    // was one budget of 2 across both routes.
    let table = RoutePolicies::new()
        .route("/a", policy("2/min"))
        .route("/b", policy("2/min"));
    let app = routes_app(RateLimitLayer::new(table).key(Header::new("x-user-id")));
    assert_eq!(statuses(&app, "/a", 3).await, [200, 200, 429]);
    assert_eq!(statuses(&app, "/b", 3).await, [200, 200, 429]);

    // Per method too.
    let table = RoutePolicies::new()
        .route_method(http::Method::GET, "/a", policy("1/min"))
        .route_method(http::Method::POST, "/a", policy("1/min"));
    let app = Router::new()
        .route("/a", get(|| async { "a" }).post(|| async { "a" }))
        .layer(RateLimitLayer::new(table).key(Header::new("x-user-id")));
    let send = |method: http::Method| {
        let app = app.clone();
        async move {
            let req = Request::builder()
                .method(method)
                .uri("/a")
                .header("x-user-id", "alice")
                .body(Body::empty())
                .unwrap();
            app.oneshot(req).await.unwrap().status().as_u16()
        }
    };
    assert_eq!(send(http::Method::GET).await, 200);
    assert_eq!(send(http::Method::POST).await, 200);
    assert_eq!(send(http::Method::GET).await, 429);
    // HEAD is answered by the GET handler, so it spends GET's budget.
    assert_eq!(send(http::Method::HEAD).await, 429);
}

#[tokio::test]
async fn a_limit_named_alike_on_two_routes_is_one_budget() {
    let table = RoutePolicies::new()
        .route("/a", policy("api = 3/min"))
        .route("/b", policy("api = 3/min"))
        .fallback(policy("2/min"));
    let app = routes_app(RateLimitLayer::new(table).key(Header::new("x-user-id")));
    assert_eq!(statuses(&app, "/a", 2).await, [200, 200]);
    assert_eq!(statuses(&app, "/b", 2).await, [200, 429]);
    // The fallback is its own budget, shared by every unmatched route.
    assert_eq!(statuses(&app, "/c", 3).await, [200, 200, 429]);
}

#[tokio::test]
async fn two_layers_on_one_backend_share_only_what_they_are_told_to() {
    let backend = tower_ratelimit::backend::MemoryBackend::new();
    let layer = |p: Policy| {
        RateLimitLayer::new(p)
            .key(Header::new("x-user-id"))
            .backend(backend.clone())
    };
    // Scoped apart: a budget each.
    let app = Router::new()
        .route(
            "/a",
            get(|| async { "a" }).layer(layer(policy("2/min").scoped("a"))),
        )
        .route(
            "/b",
            get(|| async { "b" }).layer(layer(policy("2/min").scoped("b"))),
        );
    assert_eq!(statuses(&app, "/a", 3).await, [200, 200, 429]);
    assert_eq!(statuses(&app, "/b", 3).await, [200, 200, 429]);

    // The same name on both: one budget, as asked.
    let app = Router::new()
        .route(
            "/x",
            get(|| async { "x" }).layer(layer(policy("shared = 3/min"))),
        )
        .route(
            "/y",
            get(|| async { "y" }).layer(layer(policy("shared = 3/min"))),
        );
    assert_eq!(statuses(&app, "/x", 2).await, [200, 200]);
    assert_eq!(statuses(&app, "/y", 2).await, [200, 429]);
}

#[tokio::test]
async fn the_default_key_says_how_to_serve_the_app_when_it_has_no_peer_address() {
    // `RateLimitLayer::new` keys by client IP; served without connect info,
    // no request has a peer address.
    let app = Router::new()
        .route("/", get(|| async { "hi" }))
        .layer(RateLimitLayer::new(policy("10/min")));
    let res = app
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (status, _, body) = read(res).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"], "rate_limit_key_missing");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{detail}"
    );
    assert!(detail.contains("PeerAddr"), "{detail}");
}

#[tokio::test]
async fn the_wrapped_service_can_be_reached_and_taken_back() {
    use tower::Layer;
    let layer = RateLimitLayer::new(policy("1/min")).key(Global);
    let mut svc = layer.layer(String::from("inner"));
    assert_eq!(svc.get_ref(), "inner");
    svc.get_mut().push_str(" service");
    assert_eq!(svc.into_inner(), "inner service");
}

/// One request held open, one refused while it is, one after it ended,
/// then the rate spent: what each answered.
async fn held_open_then_spent<S, B>(svc: S) -> Vec<(StatusCode, HeaderMap, String)>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let open = svc.clone().oneshot(user("a")).await.unwrap();
    let mut seen = vec![read(svc.clone().oneshot(user("a")).await.unwrap()).await];
    seen.push(read(open).await);
    for _ in 0..2 {
        seen.push(read(svc.clone().oneshot(user("a")).await.unwrap()).await);
    }
    seen
}

/// One request in flight and two a minute for each `x-user-id`, in memory,
/// quota headers as `style`.
fn one_in_flight_two_a_minute(style: HeaderStyle) -> RateLimitLayer<Header> {
    let policy = Policy::builder()
        .with(tower_ratelimit::Limit::concurrent("in-flight", 1).unwrap())
        .limit("rate", Algorithm::Gcra, "2/min".parse().unwrap())
        .build()
        .unwrap();
    RateLimitLayer::new(policy)
        .key(Header::new("x-user-id"))
        .headers(style)
}

/// `layer` around [`says_hi`] answering in its own body and in axum's,
/// each with a backend of its own (the same requests meet the same state).
fn own_and_axum_bodies(
    layer: RateLimitLayer<Header>,
) -> (
    impl Service<
            Request<Body>,
            Response = Response<impl http_body::Body<Error: std::fmt::Debug>>,
            Error = Infallible,
        > + Clone,
    impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
) {
    let own = ServiceBuilder::new()
        .layer(layer.clone().backend(MemoryBackend::new()))
        .service(says_hi());
    let axum = ServiceBuilder::new()
        .layer(layer.backend(MemoryBackend::new()).axum_body())
        .service(says_hi());
    (own, axum)
}

/// A route answering "hi" in axum's body.
fn says_hi() -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
    service_fn(|_: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::from("hi"))) })
}

/// With quota headers off, nothing is written on the response, but a
/// permit of requests in flight still rides in its body and goes back
/// when the body ends: in the layer's own body and in axum's.
#[tokio::test]
async fn a_permit_rides_in_the_body_with_quota_headers_off() {
    let layer = one_in_flight_two_a_minute(HeaderStyle::None);
    let (own, axum) = own_and_axum_bodies(layer);
    for seen in [
        held_open_then_spent(own).await,
        held_open_then_spent(axum).await,
    ] {
        let statuses: Vec<u16> = seen.iter().map(|(s, _, _)| s.as_u16()).collect();
        assert_eq!(statuses, [429, 200, 200, 429]);
        assert!(seen
            .iter()
            .all(|(_, headers, _)| !headers.contains_key("ratelimit")));
    }
}

/// `axum_body`: the same answers as the layer's own body — the limiter's
/// refusal, quota headers, a permit of requests in flight held until the
/// body ends — in axum's own `Body`, the route's body passed on as it is.
#[tokio::test]
async fn axum_body_answers_as_the_layers_own_body_does() {
    let layer = one_in_flight_two_a_minute(HeaderStyle::default());
    let (own, axum) = own_and_axum_bodies(layer);

    let typed: Response<Body> = axum.clone().oneshot(user("b")).await.unwrap();
    assert_eq!(typed.status(), 200);
    let (own, axum) = (
        held_open_then_spent(own).await,
        held_open_then_spent(axum).await,
    );
    let statuses: Vec<u16> = axum.iter().map(|(s, _, _)| s.as_u16()).collect();
    assert_eq!(statuses, [429, 200, 200, 429]);
    assert_eq!(axum[1].2, "hi");
    let refused_by = axum[0].1["ratelimit-policy"].to_str().unwrap();
    assert!(refused_by.contains("in-flight"), "{refused_by}");
    // The legacy reset is a wall-clock second: the two runs, one after
    // the other, may fall on either side of one. The rest is equal.
    let resets = |seen: &mut Vec<(StatusCode, HeaderMap, String)>| -> Vec<i64> {
        seen.iter_mut()
            .map(|(_, headers, _)| {
                let reset = headers.remove("x-ratelimit-reset").unwrap();
                reset.to_str().unwrap().parse().unwrap()
            })
            .collect()
    };
    let (mut own, mut axum) = (own, axum);
    let (own_resets, axum_resets) = (resets(&mut own), resets(&mut axum));
    assert!(
        own_resets
            .iter()
            .zip(&axum_resets)
            .all(|(o, a)| (a - o).abs() <= 1),
        "{own_resets:?} {axum_resets:?}"
    );
    assert_eq!(own, axum);
}
