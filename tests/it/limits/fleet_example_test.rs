//! `examples/fleet.rs` as two servers on one Redis: each claim of its docs.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use tower_ratelimit::config::LimitsFile;

use crate::support::{send, send_from, RedisServer};

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

    // A number no quota holds is the caller's mistake: 400, nothing changed.
    for bad in ["0", "4294967295", "-1", "many"] {
        let headers = [("authorization", "Bearer s3cret")];
        let (status, _, body) = send(servers[0], Method::PUT, "/admin/search", &headers, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    // One address inventing users gets the address's 30 searches a minute
    // across both servers, not 10 per name (300 of 300 without it).
    let mut admitted = 0;
    for n in 0..300 {
        let user = format!("made-up-{n}");
        let headers = [("x-user-id", user.as_str())];
        let (status, _, _) =
            send_from(20, servers[n % 2], Method::GET, "/api/search", &headers, "").await;
        if status == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 30,
        "searches of 300 made-up users from one address"
    );
    // Another address is its own.
    let headers = [("x-user-id", "made-up-0")];
    let (status, _, _) = send_from(21, servers[0], Method::GET, "/api/search", &headers, "").await;
    assert_eq!(status, StatusCode::OK);
    // Wrong admin tokens: 10 a minute from one address across both
    // servers, then none, not even the right one; another address is its
    // own.
    let admin = |client: u8, server: SocketAddr, auth: &'static str| async move {
        let headers = [("authorization", auth)];
        send_from(client, server, Method::PUT, "/admin/search", &headers, "3").await
    };
    for n in 0..10 {
        let (status, _, body) = admin(22, servers[n % 2], "Bearer guess").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {n}: {body}");
    }
    for server in servers {
        let (status, _, body) = admin(22, server, "Bearer s3cret").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    }
    let (status, _, body) = admin(23, servers[1], "Bearer s3cret").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A path no route matches is not found, not a server error.
    for path in ["/", "/favicon.ico", "/api/search/", "/API/SEARCH"] {
        let (status, _, body) = send(servers[0], Method::GET, path, &headers, "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
}
