//! `ThrottleLayer` and `examples/client.rs` against the example server over
//! real HTTP: paced by the server's quota headers, no 429 at all.

use std::net::SocketAddr;
use std::time::Duration;

async fn start() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = crate::server::app(
        &Default::default(),
        tower_ratelimit::backend::MemoryBackend::new(),
    )
    .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test]
async fn the_client_example_never_gets_a_429_from_api_burst() {
    let addr = start().await;
    // /api/burst allows 10 a second: 25 take two waits of about a second.
    let summary = crate::client_example::run(&format!("http://{addr}/api/burst"), 25, "pacer")
        .await
        .unwrap();
    assert_eq!(summary.refused, 0, "{:?}", summary.statuses);
    assert_eq!(summary.statuses, [200; 25]);
    assert!(summary.elapsed >= Duration::from_secs(2), "{summary}");
    assert!(summary.elapsed < Duration::from_secs(8), "{summary}");
    assert!(summary.to_string().starts_with("sent 25, 429s 0, elapsed "));
}

#[tokio::test]
async fn without_quota_headers_only_the_first_429_is_seen() {
    use axum::response::IntoResponse;
    use http_body_util::Empty;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use tower::{Service, ServiceBuilder, ServiceExt};
    use tower_ratelimit::client::{ThrottleError, ThrottleLayer};

    // A server that says nothing of its quota but Retry-After: 1 on every
    // 429, admitting 3 requests per window of one second.
    let served = Arc::new(AtomicU32::new(0));
    let window_start = Arc::new(std::sync::Mutex::new(std::time::Instant::now()));
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let (served, window_start) = (served.clone(), window_start.clone());
            async move {
                let mut start = window_start.lock().unwrap();
                if start.elapsed() >= Duration::from_secs(1) {
                    *start = std::time::Instant::now();
                    served.store(0, Ordering::Relaxed);
                }
                if served.fetch_add(1, Ordering::Relaxed) < 3 {
                    "ok".into_response()
                } else {
                    (http::StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")]).into_response()
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let http = http_client();
    let mut client = ServiceBuilder::new()
        .layer(ThrottleLayer::new().max_wait(Duration::from_secs(5)))
        .service(http);
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(get_root(&mut client, addr).await.as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        1,
        "{statuses:?}"
    );

    // A wait beyond the maximum fails at once, saying how long it would be.
    let mut impatient = ServiceBuilder::new()
        .layer(ThrottleLayer::new().max_wait(Duration::from_millis(10)))
        .service(http_client());
    let mut outcome = Vec::new();
    for _ in 0..6 {
        let req = http::Request::get(format!("http://{addr}/"))
            .body(Empty::new())
            .unwrap();
        outcome.push(match impatient.ready().await.unwrap().call(req).await {
            Ok(res) => res.status().as_u16(),
            Err(ThrottleError::WouldWait { wait }) => {
                assert!(wait > Duration::from_millis(10) && wait <= Duration::from_secs(1));
                0
            }
            Err(e) => panic!("{e}"),
        });
    }
    assert!(
        outcome.contains(&429) && outcome.last() == Some(&0),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_policy_of_its_own_paces_the_client_per_server() {
    use std::time::Instant;
    use tower::ServiceBuilder;
    use tower_ratelimit::client::ThrottleLayer;
    use tower_ratelimit::Policy;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let http = http_client();
    let mut client = ServiceBuilder::new()
        .layer(ThrottleLayer::new().policy(
            Policy::parse_with("4/s burst 4", tower_ratelimit::Algorithm::TokenBucket).unwrap(),
        ))
        .service(http);
    let started = Instant::now();
    for _ in 0..8 {
        assert_eq!(get_root(&mut client, addr).await, 200);
    }
    // 4 at once, then one every 250 ms.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// A plain HTTP/1 client, for the throttle to wrap.
fn http_client() -> hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
> {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// `GET /` at `addr` through `client`: the status.
async fn get_root<S, B>(client: &mut S, addr: SocketAddr) -> http::StatusCode
where
    S: tower::Service<
        http::Request<http_body_util::Empty<bytes::Bytes>>,
        Response = http::Response<B>,
    >,
    S::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    let req = http::Request::get(format!("http://{addr}/"))
        .body(http_body_util::Empty::new())
        .unwrap();
    client
        .ready()
        .await
        .unwrap()
        .call(req)
        .await
        .unwrap()
        .status()
}
