//! A tenant's policy from a store of its own (`PolicyLookup`): one lookup
//! at a time per tenant, a bounded wait answered by the default, stale
//! answers refreshed in the background, failures retried later, other
//! tenants never held up, and a bounded cache — checked through the limiter
//! the policy drives.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tower::{Layer, Service, ServiceExt};
use tower_ratelimit::key::{Header, Key};
use tower_ratelimit::layer::lookup::PolicyLookup;
use tower_ratelimit::{Policy, RateLimitLayer};

use crate::support::request;

/// What the store answers for one tenant.
type Answer =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Option<Policy>, String>> + Send>>;

/// A store of contracts: `per_minute` for every tenant (0: it fails),
/// answering after `delay` (`slow-` tenants after a second), counting calls.
#[derive(Clone, Default)]
struct Contracts {
    per_minute: Arc<AtomicU32>,
    delay: Duration,
    calls: Arc<AtomicUsize>,
}

impl Contracts {
    fn new(per_minute: u32, delay: Duration) -> Self {
        let contracts = Self {
            delay,
            ..Self::default()
        };
        contracts.per_minute.store(per_minute, Ordering::SeqCst);
        contracts
    }

    fn lookup(&self) -> impl Fn(Key) -> Answer + Clone + Send + Sync + 'static {
        let this = self.clone();
        move |tenant: Key| {
            let this = this.clone();
            Box::pin(async move {
                this.calls.fetch_add(1, Ordering::SeqCst);
                let slow = String::from_utf8_lossy(tenant.as_bytes()).contains("slow-");
                tokio::time::sleep(if slow {
                    Duration::from_secs(1)
                } else {
                    this.delay
                })
                .await;
                match this.per_minute.load(Ordering::SeqCst) {
                    0 => Err("the contracts database is down".to_owned()),
                    n => Ok(Some(format!("{n}/min").parse().unwrap())),
                }
            })
        }
    }
}

/// The limit the limiter applied to a request of `tenant` (from its
/// `X-RateLimit-Limit`), and how long the answer took.
async fn limit_for<S>(svc: &S, tenant: &str) -> (u32, Duration)
where
    S: Service<
            http::Request<()>,
            Response = http::Response<
                tower_ratelimit::layer::ResponseBody<http_body_util::Full<bytes::Bytes>>,
            >,
        > + Clone,
    S::Error: std::fmt::Debug,
{
    let started = Instant::now();
    let res = svc
        .clone()
        .oneshot(request("10.0.0.1:1", &[("x-tenant", tenant.as_bytes())]))
        .await
        .unwrap();
    let limit = res.headers()["x-ratelimit-limit"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (limit, started.elapsed())
}

fn stack(
    lookup: PolicyLookup<Header, impl Fn(Key) -> Answer + Send + Sync + 'static>,
) -> impl Service<
    http::Request<()>,
    Response = http::Response<
        tower_ratelimit::layer::ResponseBody<http_body_util::Full<bytes::Bytes>>,
    >,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    let limiter = RateLimitLayer::new(lookup.resolver()).key(Header::new("x-tenant"));
    let ok = tower::service_fn(|_: http::Request<()>| {
        std::future::ready(Ok(http::Response::new(http_body_util::Full::from("ok"))))
    });
    lookup.layer(limiter.layer(ok))
}

const DEFAULT: &str = "2/min";

#[tokio::test]
async fn many_requests_of_a_new_tenant_make_one_lookup_and_use_its_answer() {
    let contracts = Contracts::new(5, Duration::from_millis(30));
    let svc = stack(PolicyLookup::new(
        Header::new("x-tenant"),
        contracts.lookup(),
        DEFAULT.parse().unwrap(),
    ));
    let answers: Vec<_> = (0..50)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move { limit_for(&svc, "acme").await.0 })
        })
        .collect();
    for answer in answers {
        assert_eq!(answer.await.unwrap(), 5);
    }
    assert_eq!(contracts.calls.load(Ordering::SeqCst), 1, "no stampede");
}

#[tokio::test]
async fn a_slow_lookup_is_answered_by_the_default_within_the_bound() {
    let contracts = Contracts::new(5, Duration::from_millis(400));
    let lookup = PolicyLookup::new(
        Header::new("x-tenant"),
        contracts.lookup(),
        DEFAULT.parse().unwrap(),
    )
    .wait_up_to(Duration::from_millis(50));
    let svc = stack(lookup);
    let (limit, took) = limit_for(&svc, "acme").await;
    assert_eq!(limit, 2, "the default");
    assert!(took < Duration::from_millis(200), "{took:?}");
    // The lookup went on; its answer (due at 400 ms) serves the next
    // requests: waited for, not slept on.
    let waiting = std::time::Instant::now();
    while limit_for(&svc, "acme").await.0 != 5 {
        assert!(
            waiting.elapsed() < Duration::from_secs(5),
            "the lookup's answer never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(contracts.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn other_tenants_never_wait_for_one_tenants_lookup() {
    let contracts = Contracts::new(5, Duration::ZERO);
    let lookup = PolicyLookup::new(
        Header::new("x-tenant"),
        contracts.lookup(),
        DEFAULT.parse().unwrap(),
    )
    .wait_up_to(Duration::from_secs(5));
    let svc = stack(lookup);
    let slow = {
        let svc = svc.clone();
        tokio::spawn(async move { limit_for(&svc, "slow-co").await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (limit, took) = limit_for(&svc, "quick-co").await;
    assert_eq!(limit, 5);
    assert!(took < Duration::from_millis(200), "{took:?}");
    // The slow tenant waited for its own answer (within its bound).
    assert_eq!(slow.await.unwrap().0, 5);
}

#[tokio::test]
async fn a_failing_store_gives_the_default_and_is_asked_again_later() {
    let contracts = Contracts::new(0, Duration::ZERO);
    let lookup = PolicyLookup::new(
        Header::new("x-tenant"),
        contracts.lookup(),
        DEFAULT.parse().unwrap(),
    )
    .retry_after(Duration::from_millis(200));
    let svc = stack(lookup);
    for _ in 0..5 {
        assert_eq!(limit_for(&svc, "acme").await.0, 2);
    }
    assert_eq!(
        contracts.calls.load(Ordering::SeqCst),
        1,
        "not asked again at once"
    );
    // The store is back; after the retry delay the tenant's contract applies.
    contracts.per_minute.store(7, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(250)).await;
    limit_for(&svc, "acme").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(limit_for(&svc, "acme").await.0, 7);
}

#[tokio::test]
async fn a_changed_contract_applies_after_its_ttl_without_a_wait() {
    let contracts = Contracts::new(5, Duration::from_millis(300));
    let lookup = PolicyLookup::new(
        Header::new("x-tenant"),
        contracts.lookup(),
        DEFAULT.parse().unwrap(),
    )
    .ttl(Duration::from_millis(200))
    .wait_up_to(Duration::from_secs(1));
    let svc = stack(lookup);
    assert_eq!(limit_for(&svc, "acme").await.0, 5);
    contracts.per_minute.store(7, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(250)).await;
    // Stale: answered at once with the old contract while it is refreshed
    // (which takes 300 ms).
    let (limit, took) = limit_for(&svc, "acme").await;
    assert_eq!(limit, 5);
    assert!(took < Duration::from_millis(150), "{took:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(limit_for(&svc, "acme").await.0, 7);
}

#[tokio::test]
async fn the_cache_holds_at_most_its_entries() {
    let contracts = Contracts::new(5, Duration::ZERO);
    let lookup = PolicyLookup::new(
        Header::new("x-tenant"),
        contracts.lookup(),
        DEFAULT.parse().unwrap(),
    )
    .max_entries(100);
    let svc = stack(lookup.clone());
    for i in 0..1_000 {
        limit_for(&svc, &format!("tenant-{i}")).await;
        assert!(lookup.len() <= 100, "{}", lookup.len());
    }
}
