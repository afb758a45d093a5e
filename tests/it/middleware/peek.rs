//! `RateLimitLayer::peek`: a quota endpoint reads what the layer would
//! check, from the layer's own resolver and key, and spends nothing.

use axum::body::Body;
use axum::extract::Request;
use axum::routing::get;
use axum::Router;
use tower::ServiceExt;
use tower_ratelimit::key::{Header, RequestHead};
use tower_ratelimit::layer::policy_fn;
use tower_ratelimit::{Policy, RateLimitLayer};

fn get_as(path: &str, user: &str) -> Request {
    Request::get(path)
        .header("x-user-id", user)
        .body(Body::empty())
        .unwrap()
}

/// Plans by header, `/api` behind them, `/quota` beside them: reading the
/// quota spends none of the plan (it did, and a user at its limit got 429
/// instead of its quota), and reads the plan the layer itself resolves.
#[tokio::test]
async fn a_quota_endpoint_reads_the_plan_without_spending_it() {
    let (free, pro): (Policy, Policy) = (
        "free = 3/min".parse().unwrap(),
        "pro = 100/min".parse().unwrap(),
    );
    let plans = RateLimitLayer::new(policy_fn(move |req| {
        match req.headers.get("x-plan").map(|v| v.as_bytes()) {
            Some(b"pro") => Some(pro.clone()),
            _ => Some(free.clone()),
        }
    }))
    .key(Header::new("x-user-id"));
    let reader = plans.clone();
    let app = Router::new()
        .route("/api", get(|| async { "data" }))
        .layer(plans)
        .route(
            "/quota",
            get(move |req: Request| {
                let reader = reader.clone();
                async move {
                    match reader.peek(&RequestHead::from(&req)).await {
                        Ok(Some((policy, now))) => format!(
                            "{} {}",
                            policy.limits()[now.decided_by()].name(),
                            now.deciding().remaining()
                        ),
                        Ok(None) => "unlimited".to_owned(),
                        Err(e) => format!("error: {e}"),
                    }
                }
            }),
        );
    let body = |response: axum::response::Response| async move {
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    let quota = |user: &'static str| {
        let app = app.clone();
        async move { body(app.oneshot(get_as("/quota", user)).await.unwrap()).await }
    };
    assert_eq!(quota("ann").await, "free 3");
    for _ in 0..3 {
        assert_eq!(
            app.clone()
                .oneshot(get_as("/api", "ann"))
                .await
                .unwrap()
                .status(),
            200
        );
    }
    assert_eq!(
        app.clone()
            .oneshot(get_as("/api", "ann"))
            .await
            .unwrap()
            .status(),
        429
    );
    // At its limit, ann still reads its quota, as often as it likes.
    for _ in 0..5 {
        assert_eq!(quota("ann").await, "free 0");
    }
    // Another plan, as the layer resolves it.
    let pro = Request::get("/quota")
        .header("x-user-id", "bob")
        .header("x-plan", "pro")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        body(app.clone().oneshot(pro).await.unwrap()).await,
        "pro 100"
    );
    // No key: the layer would not check it.
    let nobody = Request::get("/quota").body(Body::empty()).unwrap();
    assert_eq!(
        body(app.clone().oneshot(nobody).await.unwrap()).await,
        "unlimited"
    );
}
