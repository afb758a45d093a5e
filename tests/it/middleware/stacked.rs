//! Layers stacked on one route: a refusal's quota headers describe the
//! limit that refused it — remaining 0, its reset, its policy — whatever
//! the layers around it would write.

use http::HeaderMap;
use tower::{ServiceBuilder, ServiceExt};
use tower_ratelimit::layer::fair_share::FairShare;
use tower_ratelimit::layer::HeaderStyle;
use tower_ratelimit::{Policy, Quota, RateLimitLayer};

use crate::support::http::ok;
use crate::support::request;

/// Each header's values, joined, of those a client reads its quota from.
fn quota(headers: &HeaderMap) -> Vec<(String, String)> {
    [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "ratelimit-policy",
        "ratelimit",
    ]
    .into_iter()
    .map(|name| {
        let values: Vec<_> = headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        (name.to_owned(), values.join(", "))
    })
    .collect()
}

/// A plan limit of 6000 a minute around a shared capacity of 1 a second:
/// the capacity's refusal carried the plan's `remaining: 6000` and its
/// `ratelimit` item; now only the capacity's own.
#[tokio::test]
async fn a_fair_share_refusal_behind_a_plan_limit_says_the_share_refused() {
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("enterprise = 6000/min".parse::<Policy>().unwrap())
                .headers(HeaderStyle::Both),
        )
        .layer(FairShare::new("1/s".parse::<Quota>().unwrap()).unwrap())
        .service(ok());
    // The capacity's depth (20 at once) first, then a refusal.
    let mut refused = None;
    for _ in 0..50 {
        let response = svc
            .clone()
            .oneshot(request("192.0.2.1:1", &[]))
            .await
            .unwrap();
        if response.status() == 429 {
            refused = Some(response);
            break;
        }
    }
    let refused = refused.expect("the capacity refused nothing");
    assert_eq!(refused.status(), 429);
    let seen = quota(refused.headers());
    assert_eq!(
        seen[0],
        ("x-ratelimit-limit".into(), "1".into()),
        "{seen:?}"
    );
    assert_eq!(
        seen[1],
        ("x-ratelimit-remaining".into(), "0".into()),
        "{seen:?}"
    );
    assert!(seen[2].1.starts_with("\"shared\";q=1"), "{seen:?}");
    assert!(!seen[2].1.contains("enterprise"), "{seen:?}");
    assert!(seen[3].1.starts_with("\"shared\";r=0;t="), "{seen:?}");
    assert!(!seen[3].1.contains("enterprise"), "{seen:?}");
}

/// A per-address limit in front of a per-route one: the route's refusal
/// keeps the route's headers (the example's `/api/shared` said
/// `remaining: 999994` from the layer in front).
#[tokio::test]
async fn an_inner_refusal_keeps_its_own_headers_under_an_outer_layer() {
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("per-address = 1000000/min".parse::<Policy>().unwrap())
                .headers(HeaderStyle::Both),
        )
        .layer(
            RateLimitLayer::new("route = 1/min".parse::<Policy>().unwrap())
                .headers(HeaderStyle::Both),
        )
        .service(ok());
    let admitted = svc
        .clone()
        .oneshot(request("192.0.2.1:1", &[]))
        .await
        .unwrap();
    assert_eq!(admitted.status(), 200);
    let refused = svc
        .clone()
        .oneshot(request("192.0.2.1:1", &[]))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let seen = quota(refused.headers());
    assert_eq!(
        seen[0],
        ("x-ratelimit-limit".into(), "1".into()),
        "{seen:?}"
    );
    assert_eq!(
        seen[1],
        ("x-ratelimit-remaining".into(), "0".into()),
        "{seen:?}"
    );
    assert_eq!(seen[2].1, "\"route\";q=1;w=60", "{seen:?}");
    assert!(seen[3].1.starts_with("\"route\";r=0;t="), "{seen:?}");
    assert!(!seen[3].1.contains("per-address"), "{seen:?}");
}
