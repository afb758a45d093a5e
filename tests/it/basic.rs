//! `examples/basic.rs`, the README's first layer, over real HTTP.

use std::net::SocketAddr;

use http::{HeaderMap, Method, StatusCode};

use crate::support::send;

async fn get(addr: SocketAddr, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap) {
    let (status, headers, _) = send(addr, Method::GET, "/", headers, "").await;
    (status, headers)
}

#[tokio::test]
async fn the_first_layer_allows_the_burst_per_user_then_refuses() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = crate::basic_example::app()
        .unwrap()
        .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mut alice = Vec::new();
    for _ in 0..21 {
        alice.push(get(addr, &[("x-user-id", "alice")]).await);
    }
    let statuses: Vec<u16> = alice.iter().map(|(s, _)| s.as_u16()).collect();
    assert_eq!(statuses[..20], [200; 20], "the burst of 20");
    assert_eq!(statuses[20], 429);
    assert!(alice[20].1.contains_key("retry-after"));
    assert_eq!(alice[0].1["x-ratelimit-limit"], "20");

    // Another user, and a client without the header (keyed by its IP),
    // have budgets of their own.
    assert_eq!(get(addr, &[("x-user-id", "bob")]).await.0, 200);
    assert_eq!(get(addr, &[]).await.0, 200);
}
