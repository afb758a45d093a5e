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

    // Until the first refusal: the burst of 20, and what refilled meanwhile
    // (one every 100 ms: a loaded machine may take that long).
    let started = std::time::Instant::now();
    let mut alice = Vec::new();
    while alice
        .last()
        .is_none_or(|(s, _): &(StatusCode, _)| *s == StatusCode::OK)
    {
        alice.push(get(addr, &[("x-user-id", "alice")]).await);
        assert!(alice.len() <= 100, "no refusal in 100 requests");
    }
    let refilled = (started.elapsed().as_millis() / 100) as usize;
    let admitted = alice.len() - 1;
    assert!(
        (20..=20 + refilled).contains(&admitted),
        "{admitted} admitted, {refilled} refilled"
    );
    assert!(alice[admitted].1.contains_key("retry-after"));
    assert_eq!(alice[0].1["x-ratelimit-limit"], "20");

    // Another user, and a client without the header (keyed by its IP),
    // have budgets of their own.
    assert_eq!(get(addr, &[("x-user-id", "bob")]).await.0, 200);
    assert_eq!(get(addr, &[]).await.0, 200);
}
