//! Hostile requests through the layer: huge and non-UTF-8 header values,
//! thousands of forwarding entries, spoofed forwarding headers, key bytes
//! that look like structure, address rotation inside one IPv6 /64. No panic,
//! no bypass, no collision, no 5xx; every answer a 200, 400 or 429.

use std::time::{Duration, Instant};

use http::HeaderValue;
use tower::{ServiceBuilder, ServiceExt};
use tower_ratelimit::key::{ClientIp, Header, KeyExtractor};
use tower_ratelimit::{Policy, RateLimitLayer};

use crate::support::http::{ok, statuses};
use crate::support::request;

#[tokio::test]
async fn a_megabyte_header_is_no_key_and_no_trouble() {
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("2/min".parse::<Policy>().unwrap()).key(Header::new("x-user-id")),
        )
        .service(ok());
    let huge = vec![b'a'; 1 << 20];
    let started = Instant::now();
    assert_eq!(
        statuses(&svc, || request("192.0.2.1:1", &[("x-user-id", &huge)]), 3).await,
        [400, 400, 400]
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // Falling back to the client IP instead: limited like anyone else.
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("2/min".parse::<Policy>().unwrap())
                .key(Header::new("x-user-id").or(ClientIp::new())),
        )
        .service(ok());
    assert_eq!(
        statuses(&svc, || request("192.0.2.1:1", &[("x-user-id", &huge)]), 3).await,
        [200, 200, 429]
    );
}

#[tokio::test]
async fn non_utf8_and_structure_like_user_ids_each_get_their_own_budget() {
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("1/min".parse::<Policy>().unwrap()).key(Header::new("x-user-id")),
        )
        .service(ok());
    let ids: [&[u8]; 9] = [
        b"alice",
        b"alice\xff",
        b"\xff\xfe",
        b"{alice}",
        b"alice}:{",
        b"a:b",
        b"a\tb",
        b"\x80",
        b"caf\xe9",
    ];
    for id in ids {
        let make = || request("192.0.2.1:1", &[("x-user-id", id)]);
        assert_eq!(
            statuses(&svc, make, 2).await,
            [200, 429],
            "{:?}",
            id.escape_ascii().to_string()
        );
    }
    // A newline, NUL or other control byte cannot be in a header value at
    // all: http refuses to build one, so it never reaches the layer.
    for bad in [&b"a\nb"[..], b"a\0b", b"\x01", b"\x7f"] {
        assert!(HeaderValue::from_bytes(bad).is_err());
    }
}

#[tokio::test]
async fn ten_thousand_forwarding_entries_cost_bounded_work() {
    let ip = ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()]);
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new("2/min".parse::<Policy>().unwrap()).key(ip.clone()))
        .service(ok());
    // A client claims 10,000 addresses; our proxy appended the real one.
    let mut chain = (0..10_000)
        .map(|i| format!("198.51.{}.{}", i / 256 % 256, i % 256))
        .collect::<Vec<_>>()
        .join(", ");
    chain.push_str(", 203.0.113.9");
    let make = || request("10.0.0.1:443", &[("x-forwarded-for", chain.as_bytes())]);
    let started = Instant::now();
    assert_eq!(statuses(&svc, make, 3).await, [200, 200, 429]);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // The client is the address our proxy appended, not any it claimed.
    let key = ip
        .extract(&tower_ratelimit::key::RequestHead::from(&make()))
        .unwrap();
    assert_eq!(key.value(), [203, 0, 113, 9]);
}

#[tokio::test]
async fn spoofed_forwarding_headers_from_an_untrusted_peer_change_nothing() {
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("2/min".parse::<Policy>().unwrap())
                .key(ClientIp::new().trust_networks(["10.0.0.0/8".parse().unwrap()])),
        )
        .service(ok());
    // The same peer, claiming a new address each time: one budget.
    let mut seen = Vec::new();
    for i in 0..4 {
        let claim = format!("198.51.100.{i}");
        let forwarded = format!("for={claim}");
        let req = request(
            "192.0.2.50:1",
            &[
                ("x-forwarded-for", claim.as_bytes()),
                ("forwarded", forwarded.as_bytes()),
            ],
        );
        seen.push(svc.clone().oneshot(req).await.unwrap().status().as_u16());
    }
    assert_eq!(seen, [200, 200, 429, 429]);
}

#[tokio::test]
async fn rotating_ipv6_addresses_inside_one_slash_64_share_one_budget() {
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new("3/min".parse::<Policy>().unwrap()))
        .service(ok());
    let mut seen = Vec::new();
    for i in 0..6u16 {
        let peer = format!("[2001:db8:1:2:{i:x}:{:x}::1]:443", i * 7919);
        seen.push(
            svc.clone()
                .oneshot(request(&peer, &[]))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(seen, [200, 200, 200, 429, 429, 429]);
    // The next /64 is someone else.
    let other = request("[2001:db8:1:3::1]:443", &[]);
    assert_eq!(svc.clone().oneshot(other).await.unwrap().status(), 200);
}
