//! Demotion: a key its penalty box banned lives by a stricter policy until
//! the ban ends, instead of being refused outright; on memory and Redis.

use std::time::Duration;

use http::{Request, Response};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::Header;
use tower_ratelimit::policy::PenaltyBox;
use tower_ratelimit::{Policy, RateLimitLayer};

/// 5/min with a box of 3 denials within a minute (banned 5 minutes), and
/// `demoted = 2/min` for the banned. What `user` gets for `n` requests, and
/// the last answer's RateLimit-Policy.
async fn run(backend: impl Backend) -> (Vec<u16>, Vec<u16>, String) {
    crate::support::with_a_minute_to_spare().await;
    let boxed = PenaltyBox::new(3, Duration::from_secs(60), Duration::from_secs(300)).unwrap();
    let policy = "five = 5/min"
        .parse::<Policy>()
        .unwrap()
        .to_builder()
        .penalty(boxed)
        .build()
        .unwrap();
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(policy)
                .key(Header::new("x-user-id"))
                .backend(backend)
                .headers(tower_ratelimit::layer::HeaderStyle::Ietf)
                .demote_banned("demoted = 2/min".parse().unwrap()),
        )
        .service(service_fn(|_: Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
    let send = |user: &'static str| {
        let svc = svc.clone();
        async move {
            let req = Request::get("/")
                .header("x-user-id", user)
                .body(())
                .unwrap();
            let res = svc.oneshot(req).await.unwrap();
            let policy = res
                .headers()
                .get("ratelimit-policy")
                .map(|v| v.to_str().unwrap().to_owned());
            (res.status(), policy.unwrap_or_default())
        }
    };
    let mut offender = Vec::new();
    let mut last = String::new();
    for _ in 0..12 {
        let (status, policy) = send("mallory").await;
        offender.push(status.as_u16());
        last = policy;
    }
    let mut bystander = Vec::new();
    for _ in 0..6 {
        bystander.push(send("alice").await.0.as_u16());
    }
    (offender, bystander, last)
}

fn expected() -> (Vec<u16>, Vec<u16>) {
    // 5 admitted, 2 denials, and the third (which earns the ban) is already
    // asked under demoted = 2/min: 2 more admitted, refused after them.
    let offender = [[200; 5].as_slice(), &[429; 2], &[200; 2], &[429; 3]].concat();
    let bystander = [[200; 5].as_slice(), &[429]].concat();
    (offender, bystander)
}

#[tokio::test]
async fn a_banned_key_lives_by_the_demoted_policy() {
    let (offender, bystander, last) = run(MemoryBackend::new()).await;
    assert_eq!((offender, bystander), expected());
    assert_eq!(last, r#""demoted";q=2;w=60"#);
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_demotes_the_same() {
    let server = crate::support::RedisServer::start();
    let redis = server.backend().await;
    let (offender, bystander, last) = run(redis).await;
    assert_eq!((offender, bystander), expected());
    assert_eq!(last, r#""demoted";q=2;w=60"#);
}
