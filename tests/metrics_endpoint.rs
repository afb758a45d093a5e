//! The example server's `/metrics` over real HTTP, in a process of its own:
//! the Prometheus recorder is global, and no other test may count into it.
#![cfg(feature = "metrics")]

#[allow(dead_code)]
#[path = "../examples/server/main.rs"]
mod server;
#[path = "it/support/mod.rs"]
mod support;

use std::net::SocketAddr;

use http::Method;
use support::send;

/// The value of the sample `name{labels}` in Prometheus text.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

#[tokio::test]
async fn metrics_count_exactly_what_was_sent() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = server::app(
        &server::Config::default(),
        tower_ratelimit::backend::MemoryBackend::new(),
    )
    .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // 10/min per user per endpoint: 10 allowed, then 7 limited.
    let (allowed, limited) = (10, 7);
    for user in ["u1", "u2"] {
        for _ in 0..allowed + limited {
            send(addr, Method::GET, "/api/search", &[("x-user-id", user)], "").await;
        }
    }
    // Unlimited routes count nothing.
    send(addr, Method::GET, "/health", &[], "").await;

    let (status, headers, text) = send(addr, Method::GET, "/metrics", &[], "").await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let route = r#"route="/api/search",limit="search""#;
    let count = |outcome: &str| {
        sample(
            &text,
            &format!(r#"ratelimit_requests_total{{outcome="{outcome}",{route}}}"#),
        )
    };
    assert_eq!(count("allowed"), Some(2.0 * allowed as f64), "{text}");
    assert_eq!(count("limited"), Some(2.0 * limited as f64), "{text}");
    // Below 20% of 10 left: the admissions leaving 1 and 0, per user.
    assert_eq!(
        sample(&text, &format!("ratelimit_near_limit_total{{{route}}}")),
        Some(4.0)
    );
    // Every request also passes IDS_PER_IP in front (200 a second per
    // address: none refused here), so each is decided twice.
    let sent = 2.0 * (allowed + limited) as f64;
    assert_eq!(
        sample(
            &text,
            r#"ratelimit_requests_total{outcome="allowed",route="/api/search",limit="ids-per-ip"}"#
        ),
        Some(sent),
        "{text}"
    );
    let decisions = sample(
        &text,
        r#"ratelimit_decision_seconds_count{backend="memory"}"#,
    );
    assert_eq!(decisions, Some(2.0 * sent), "{text}");
    assert!(
        !text.contains("u1") && !text.contains("u2"),
        "no keys in labels"
    );
}
