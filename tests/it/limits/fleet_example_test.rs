//! `examples/fleet.rs` as two servers on one Redis: each claim of its docs.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use tower_ratelimit::config::LimitsFile;

use crate::support::{send, RedisServer};

async fn serve(url: &str) -> SocketAddr {
    let file = LimitsFile::parse(crate::fleet_example::LIMITS).unwrap();
    let app = crate::fleet_example::app(url, 2, file, Some("s3cret".into()))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = tower_ratelimit::serve::ConnectionLimits::default();
    tokio::spawn(tower_ratelimit::serve::serve(listener, app, limits).into_future());
    addr
}

#[tokio::test]
async fn two_servers_share_one_budget_and_one_limits_file() {
    let redis = RedisServer::start();
    let servers = [serve(&redis.url()).await, serve(&redis.url()).await];
    let search = |server: SocketAddr, user: &'static str| async move {
        send(
            server,
            Method::GET,
            "/api/search",
            &[("x-user-id", user)],
            "",
        )
        .await
    };

    // 10 a minute per user across both servers.
    let mut seen = Vec::new();
    for n in 0..11 {
        seen.push(search(servers[n % 2], "ann").await.0);
    }
    assert_eq!(seen[..10], [StatusCode::OK; 10]);
    assert_eq!(seen[10], StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        search(servers[1], "ann").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );

    // A change is the operator's, and reaches the other server.
    let set = |auth: &'static str| async move {
        let headers = [("authorization", auth)];
        send(servers[0], Method::PUT, "/admin/search", &headers, "3").await
    };
    assert_eq!(set("Bearer guess").await.0, StatusCode::UNAUTHORIZED);
    let (status, _, body) = set("Bearer s3cret").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let started = Instant::now();
    loop {
        let (_, headers, _) = search(servers[1], "bob").await;
        if headers.get("x-ratelimit-limit").is_some_and(|v| v == "3") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never reached the other server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "the change ran on the other server after {:?}",
        started.elapsed()
    );
}
