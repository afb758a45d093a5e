//! Adaptive limits through the layer: the factor follows the guarded
//! service's failures (and recovers a step a window), scaling keeps
//! clients' state, the brownout switch wins, and changes are told.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use tower::ServiceExt;
use tower_ratelimit::key::Header;
use tower_ratelimit::layer::adaptive::{Adaptive, FactorChange, Steps};
use tower_ratelimit::{Policy, RateLimitLayer};

/// An app whose handler fails `fail_permille` of its requests (spread
/// evenly), behind 60/min per user scaled by `adaptive`.
fn app(adaptive: &Adaptive, fail_permille: Arc<AtomicU32>) -> Router {
    let served = Arc::new(AtomicUsize::new(0));
    let handler = move || {
        let n = served.fetch_add(1, Ordering::SeqCst) as u64;
        let rate = u64::from(fail_permille.load(Ordering::SeqCst));
        // The n-th request fails when the count of failures due grows.
        let fails = (n + 1) * rate / 1000 > n * rate / 1000;
        async move {
            if fails {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            }
        }
    };
    let policy: Policy = "report = 60/min".parse().unwrap();
    Router::new().route(
        "/api/report",
        get(handler)
            .layer::<_, std::convert::Infallible>(adaptive.observer())
            .layer(RateLimitLayer::new(adaptive.policies(policy)).key(Header::new("x-user-id"))),
    )
}

/// The `q` of the response's `RateLimit-Policy`, and its status.
async fn ask(app: &Router, user: &str) -> (StatusCode, u32) {
    let req = Request::get("/api/report")
        .header("x-user-id", user)
        .body(axum::body::Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let policy = res.headers()["ratelimit-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    let q = policy
        .split(";q=")
        .nth(1)
        .and_then(|q| q.split(';').next())
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("{policy}"));
    (res.status(), q)
}

#[tokio::test]
async fn the_limit_halves_under_errors_and_climbs_back_a_step_a_window() {
    let changes = Arc::new(Mutex::new(Vec::<FactorChange>::new()));
    let told = changes.clone();
    let adaptive = Adaptive::new(Steps::default())
        .named("/api/report")
        .window(Duration::from_millis(1_000))
        .min_responses(20)
        .on_change(move |c| told.lock().unwrap().push(c.clone()));
    let failing = Arc::new(AtomicU32::new(200));
    let app = app(&adaptive, failing.clone());

    // 20% errors, spread over many users (each has its own 60/min).
    let mut qs = Vec::new();
    for i in 0..60 {
        qs.push(ask(&app, &format!("user-{i}")).await.1);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(qs[0], 60);
    assert_eq!(*qs.last().unwrap(), 30, "{qs:?}");
    assert_eq!(adaptive.factor(), 0.5);

    // The errors stop: once they have left the window, a step up (45), and
    // a window later the whole limit; never 30 → 60 at once.
    failing.store(0, Ordering::SeqCst);
    let mut seen = Vec::new();
    for i in 0..400 {
        let q = ask(&app, &format!("later-{i}")).await.1;
        if seen.last() != Some(&q) {
            seen.push(q);
        }
        if q == 60 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, [30, 45, 60], "{seen:?}");
    let changes = changes.lock().unwrap();
    let factors: Vec<_> = changes.iter().map(|c| (c.from, c.to)).collect();
    assert_eq!(factors, [(1.0, 0.5), (0.5, 0.75), (0.75, 1.0)]);
    assert!(changes[0].health.failure_rate() > 0.10, "{}", changes[0]);
    assert!(
        changes[0]
            .to_string()
            .contains("/api/report: limits at 0.50"),
        "{}",
        changes[0]
    );
}

/// A window with too few responses never moves the factor.
#[tokio::test]
async fn a_few_failures_are_not_a_window() {
    let adaptive = Adaptive::new(Steps::default())
        .window(Duration::from_millis(500))
        .min_responses(20);
    let app = app(&adaptive, Arc::new(AtomicU32::new(1000)));
    for i in 0..15 {
        ask(&app, &format!("u{i}")).await;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert_eq!(adaptive.factor(), 1.0);
    assert_eq!(adaptive.health().failures, adaptive.health().responses);
}

/// Scaling keeps every client's count: 40 spent of 60 is nothing left at
/// half (40 of 30), and 20 left at the whole limit again. The brownout
/// switch wins over the service's health, and lets go when cleared.
#[tokio::test]
async fn scaling_keeps_state_and_the_brownout_switch_wins() {
    let adaptive = Adaptive::new(Steps::default()).min_factor(0.25);
    let app = app(&adaptive, Arc::new(AtomicU32::new(0)));
    for _ in 0..40 {
        assert_eq!(ask(&app, "ann").await.0, StatusCode::OK);
    }
    adaptive.pin().replace(Some(0.5));
    assert_eq!(ask(&app, "ann").await, (StatusCode::TOO_MANY_REQUESTS, 30));
    assert_eq!(ask(&app, "bob").await, (StatusCode::OK, 30));
    adaptive.pin().replace(Some(0.01));
    assert_eq!(ask(&app, "bob").await.1, 15, "never under min_factor");
    adaptive.pin().replace(None);
    let mut left = 0;
    while ask(&app, "ann").await.0 == StatusCode::OK {
        left += 1;
    }
    assert_eq!(left, 20, "ann's 40 were kept through the scaling");
}

/// Classes under a reduced limit: at half of 60/min a client's sheddable
/// requests stop at 21 (70% of 30), its default ones at 24 and its
/// critical ones at 30, all counted in one state; at the whole limit a
/// sheddable request has all 60.
#[tokio::test]
async fn a_reduced_limit_refuses_sheddable_requests_first() {
    use tower_ratelimit::layer::{Class, Reserves};
    let adaptive =
        Adaptive::new(Steps::default()).classes(Class::by_header("x-priority"), Reserves::STANDARD);
    let app = app(&adaptive, Arc::new(AtomicU32::new(0)));
    let admitted = |user: &'static str, class: &'static str| {
        let app = app.clone();
        async move {
            let mut n = 0;
            loop {
                let req = Request::get("/api/report")
                    .header("x-user-id", user)
                    .header("x-priority", class)
                    .body(axum::body::Body::empty())
                    .unwrap();
                if app.clone().oneshot(req).await.unwrap().status() != StatusCode::OK {
                    return n;
                }
                n += 1;
            }
        }
    };
    adaptive.pin().replace(Some(0.5));
    assert_eq!(admitted("ann", "sheddable").await, 21);
    assert_eq!(admitted("ann", "default").await, 3, "24 in all");
    assert_eq!(admitted("ann", "sheddable").await, 0);
    assert_eq!(admitted("ann", "critical").await, 6, "30 in all");
    adaptive.pin().replace(None);
    assert_eq!(admitted("bob", "sheddable").await, 60, "the whole limit");
    assert_eq!(admitted("ann", "sheddable").await, 30, "ann's 30 were kept");
}

/// The example server's session: `/api/report` at q=60; the report
/// service set failing 20% (`PUT /admin/backend`), q=24 for a default
/// request (80% of half), 30 for a critical one, 21 for a sheddable one;
/// healthy again, back to q=60 by a step. The readers come from 8
/// addresses: the window weighs clients by address.
#[tokio::test]
async fn the_example_report_follows_its_service() {
    use crate::support::{send, send_from};
    use http::Method;
    let config = crate::server::Config {
        admin_token: Some("s3cret".into()),
        adaptive_window: Duration::from_millis(1_000),
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = crate::server::app(&config, tower_ratelimit::backend::MemoryBackend::new())
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let auth = [("authorization", "Bearer s3cret")];
    let set = |body: &'static str| send(addr, Method::PUT, "/admin/backend", &auth, body);
    let q = |i: usize| async move {
        let user = format!("reader-{i}");
        let (status, headers, _) = send_from(
            10 + (i % 8) as u8,
            addr,
            Method::GET,
            "/api/report",
            &[("x-user-id", &user)],
            "",
        )
        .await;
        let policy = headers["ratelimit-policy"].to_str().unwrap().to_owned();
        (status, policy)
    };
    assert_eq!(q(0).await.1, r#""report";q=60;w=60"#);
    assert_eq!(
        send(addr, Method::PUT, "/admin/backend", &[], "error_rate=0.2")
            .await
            .0,
        401
    );
    assert_eq!(set("error_rate=2").await.0, 400);
    assert_eq!(set("latency_ms=5").await.0, 400, "error_rate is required");
    let (_, _, said) = set("error_rate=-0").await;
    assert_eq!(said, "the report service fails 0% of requests, 0 ms each\n");
    let (status, _, said) = set("error_rate=0.2&latency_ms=2").await;
    assert_eq!(status, 200, "{said}");
    let mut statuses = Vec::new();
    for i in 1..=60 {
        statuses.push(q(i).await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let failed = statuses.iter().filter(|(s, _)| *s == 503).count();
    assert!((10..=14).contains(&failed), "{failed} of 60 failed");
    assert_eq!(statuses.last().unwrap().1, r#""report";q=24;w=60"#);
    for (class, policy) in [("critical", "q=30"), ("sheddable", "q=21")] {
        let headers = [("x-user-id", "reader-0"), ("x-priority", class)];
        let (_, headers, _) = send(addr, Method::GET, "/api/report", &headers, "").await;
        let said = headers["ratelimit-policy"].to_str().unwrap();
        assert_eq!(said, format!("\"report\";{policy};w=60"), "{class}");
    }

    set("error_rate=0").await;
    let mut seen: Vec<String> = Vec::new();
    for i in 100..600 {
        let policy = q(i).await.1;
        if seen.last() != Some(&policy) {
            seen.push(policy.clone());
        }
        if policy.contains("q=60") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        seen,
        [
            r#""report";q=24;w=60"#,
            r#""report";q=36;w=60"#,
            r#""report";q=60;w=60"#
        ]
    );
}

/// The example server on a free port, its report service failing
/// `error_rate`, its adaptive window `window_ms`.
async fn example_report(window_ms: u64, error_rate: &str) -> std::net::SocketAddr {
    use crate::support::send;
    let config = crate::server::Config {
        admin_token: Some("s3cret".into()),
        adaptive_window: Duration::from_millis(window_ms),
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = crate::server::app(&config, tower_ratelimit::backend::MemoryBackend::new())
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let auth = [("authorization", "Bearer s3cret")];
    let (status, _, said) = send(
        addr,
        http::Method::PUT,
        "/admin/backend",
        &auth,
        &format!("error_rate={error_rate}"),
    )
    .await;
    assert_eq!(status, 200, "{said}");
    addr
}

/// A `/api/report` request from `127.0.0.<client>` as `user`: its status,
/// and its `RateLimit-Policy`'s `q`.
async fn report_from(addr: std::net::SocketAddr, client: u8, user: &str) -> (u16, String) {
    let (status, headers, _) = crate::support::send_from(
        client,
        addr,
        http::Method::GET,
        "/api/report",
        &[("x-user-id", user)],
        "",
    )
    .await;
    let policy = headers["ratelimit-policy"].to_str().unwrap();
    let q = policy.split(';').find(|p| p.starts_with("q=")).unwrap();
    (status.as_u16(), q.to_owned())
}

/// Issue 48 item 6, through the example server: its report service fails
/// 8% of its responses (every 12th or 13th: under the 10% that halves the
/// limit). A client alone with it counts the responses, and times 26
/// requests so that a window holds the 12th to the 37th: 3 failures in 26
/// (11.5%). That halved everyone's limit: the bystander's quota went from
/// 60 to 24 (80% of the half, for a request of the default class). Now
/// one client (with a bystander or not) is not evidence enough: the
/// limit stays whole.
#[tokio::test]
async fn one_client_timing_its_requests_does_not_halve_everyones_limit() {
    let addr = example_report(1_000, "0.08").await;
    let (attacker, bystander) = (2, 3);
    // The service's response 0.
    assert_eq!(report_from(addr, bystander, "bystander").await.1, "q=60");
    // Responses 1 to 11, then a window for them to leave it.
    for _ in 1..=11 {
        report_from(addr, attacker, "mallory").await;
    }
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    // 12 to 36 (two failures), then past a tenth of the window the 37th
    // (the third), whose response makes the window be weighed.
    let mut failed = 0;
    for _ in 12..=36 {
        failed += usize::from(report_from(addr, attacker, "mallory").await.0 == 503);
    }
    assert_eq!(failed, 2, "the 12th and the 24th");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(report_from(addr, attacker, "mallory").await.0, 503);
    assert_eq!(
        report_from(addr, bystander, "bystander").await.1,
        "q=60",
        "one client chose everyone's limit"
    );
}

/// Many clients seeing the report service fail 20% of the time still
/// halve the limit: the bystander's quota goes to 24.
#[tokio::test]
async fn many_clients_seeing_failures_halve_the_limit() {
    let addr = example_report(1_000, "0.2").await;
    let mut failed = 0;
    for i in 0..60 {
        let client = 10 + (i % 8) as u8;
        let user = format!("reader-{i}");
        failed += usize::from(report_from(addr, client, &user).await.0 == 503);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(failed, 12, "every fifth");
    assert_eq!(report_from(addr, 3, "bystander").await.1, "q=24");
}
