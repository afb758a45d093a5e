//! What the layer counts (feature `metrics`): every outcome, by limit.
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::ready;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::Broken;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_ratelimit::backend::OnBackendError;
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::{Global, Header};
use tower_ratelimit::layer::{OnKeyError, Shadow};
use tower_ratelimit::{Policy, RateLimitLayer};

/// Counters by name and labels, e.g. `ratelimit_requests_total{limit=1/min,outcome=allowed}`.
#[derive(Default)]
struct Captured(Mutex<BTreeMap<String, Arc<AtomicU64>>>);

struct Cell(Arc<AtomicU64>);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl Recorder for Captured {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let cell = self.0.lock().unwrap().entry(name).or_default().clone();
        Counter::from_arc(Arc::new(Cell(cell)))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn ok(
) -> impl tower::Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone
{
    service_fn(|_: Request<()>| {
        ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
            "ok",
        )))))
    })
}

#[test]
fn every_outcome_is_counted_by_limit() {
    let counts = counts_of(|| async {
        let policy: Policy = "minute = 2/min".parse().unwrap();
        let svc = ServiceBuilder::new()
            .layer(RateLimitLayer::new(policy.clone()).key(Header::new("x-user-id")))
            .service(ok());
        for _ in 0..5 {
            let req = Request::get("/").header("x-user-id", "u").body(()).unwrap();
            svc.clone().oneshot(req).await.unwrap();
        }
        svc.clone().oneshot(Request::new(())).await.unwrap(); // no key: rejected
        let skipping = ServiceBuilder::new()
            .layer(
                RateLimitLayer::new(policy.clone())
                    .key(Header::new("x-user-id"))
                    .on_key_error(OnKeyError::Skip),
            )
            .service(ok());
        skipping.oneshot(Request::new(())).await.unwrap();
        for action in [OnBackendError::Allow, OnBackendError::Deny] {
            let broken = ServiceBuilder::new()
                .layer(
                    RateLimitLayer::new(policy.clone())
                        .key(Global)
                        .backend(Broken)
                        .on_backend_error(action),
                )
                .service(ok());
            broken.oneshot(Request::new(())).await.unwrap();
        }
        // Redis down, each server's memory deciding: counted apart.
        let local = ServiceBuilder::new()
            .layer(
                RateLimitLayer::new(policy.clone())
                    .key(Global)
                    .backend(Broken.or_fallback(MemoryBackend::new())),
            )
            .service(ok());
        for _ in 0..3 {
            local.clone().oneshot(Request::new(())).await.unwrap();
        }
    });
    // Outside axum a request has no route template: the label is empty.
    let expected = [
        (
            "ratelimit_requests_total{limit=minute,outcome=allowed,route=}",
            2,
        ),
        (
            "ratelimit_requests_total{limit=minute,outcome=limited,route=}",
            3,
        ),
        ("ratelimit_requests_total{outcome=key_rejected,route=}", 1),
        ("ratelimit_requests_total{outcome=key_skipped,route=}", 1),
        (
            "ratelimit_requests_total{outcome=backend_error_allowed,route=}",
            1,
        ),
        (
            "ratelimit_requests_total{outcome=backend_error_denied,route=}",
            1,
        ),
        (
            "ratelimit_requests_total{limit=minute,outcome=fallback_allowed,route=}",
            2,
        ),
        (
            "ratelimit_requests_total{limit=minute,outcome=fallback_limited,route=}",
            1,
        ),
        // The second admission of each budget leaves 0 of 2 (< 20%).
        ("ratelimit_near_limit_total{limit=minute,route=}", 2),
    ];
    assert_eq!(counts, owned(&expected));
}

/// What `scenario` counts, run on a recorder of its own.
pub(super) fn counts_of<F: std::future::Future<Output = ()>>(
    scenario: impl FnOnce() -> F,
) -> BTreeMap<String, u64> {
    let recorder = Captured::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || rt.block_on(scenario()));
    let counters = recorder.0.lock().unwrap();
    counters
        .iter()
        .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
        .collect()
}

/// Soft shedding's delayed admissions are an outcome of their own.
#[test]
fn delayed_admissions_are_counted_as_delayed() {
    use std::time::Duration;
    use tower_ratelimit::layer::SoftShed;
    let counts = counts_of(|| async {
        let svc = ServiceBuilder::new()
            .layer(
                RateLimitLayer::new("soft = 5/min".parse::<Policy>().unwrap())
                    .key(Global)
                    .soft_shed(SoftShed::new(Duration::from_millis(20))),
            )
            .service(ok());
        for _ in 0..6 {
            svc.clone().oneshot(Request::new(())).await.unwrap();
        }
    });
    let expected = [
        ("ratelimit_near_limit_total{limit=soft,route=}", 1),
        (
            "ratelimit_requests_total{limit=soft,outcome=allowed,route=}",
            4,
        ),
        (
            "ratelimit_requests_total{limit=soft,outcome=delayed,route=}",
            1,
        ),
        (
            "ratelimit_requests_total{limit=soft,outcome=limited,route=}",
            1,
        ),
    ];
    assert_eq!(counts, owned(&expected));
}

fn owned(expected: &[(&str, u64)]) -> BTreeMap<String, u64> {
    expected.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Shadow mode, lists and bans, counted by route template and limit.
#[test]
fn shadow_lists_and_bans_are_counted_by_route() {
    use axum::routing::get;
    use std::net::SocketAddr;
    use std::time::Duration;
    use tower_ratelimit::layer::AccessLists;
    use tower_ratelimit::policy::PenaltyBox;

    let counts = counts_of(|| async {
        let banning = PenaltyBox::new(2, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
        let lists = AccessLists::new()
            .deny_network("203.0.113.0/24".parse().unwrap())
            .allow_network("10.0.0.0/8".parse().unwrap());
        let app = axum::Router::new()
            .route(
                "/shadow/{id}",
                get(|| async { "ok" }).layer(
                    RateLimitLayer::new("s = 1/min".parse::<Policy>().unwrap())
                        .key(Global)
                        .shadow(Shadow::DryRun),
                ),
            )
            .route(
                "/banned",
                get(|| async { "ok" }).layer(
                    RateLimitLayer::new(
                        "b = 1/min"
                            .parse::<Policy>()
                            .unwrap()
                            .to_builder()
                            .penalty(banning)
                            .build()
                            .unwrap(),
                    )
                    .key(Global)
                    .lists(lists),
                ),
            );
        let from = |path: &str, ip: [u8; 4]| {
            let mut req = Request::get(path).body(axum::body::Body::empty()).unwrap();
            let peer = SocketAddr::from((ip, 4000));
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            req
        };
        let status = |app: axum::Router, req: Request<axum::body::Body>| async move {
            app.oneshot(req).await.unwrap().status().as_u16()
        };
        // Three to two different ids of one route: one template label.
        for (i, path) in ["/shadow/1", "/shadow/2", "/shadow/2"].iter().enumerate() {
            assert_eq!(
                status(app.clone(), from(path, [192, 0, 2, i as u8])).await,
                200
            );
        }
        // 1 allowed, 2 limited (the strikes), then banned: 2 more.
        let got: Vec<u16> = {
            let mut got = Vec::new();
            for _ in 0..5 {
                got.push(status(app.clone(), from("/banned", [192, 0, 2, 1])).await);
            }
            got
        };
        assert_eq!(got, [200, 429, 429, 429, 429]);
        assert_eq!(
            status(app.clone(), from("/banned", [203, 0, 113, 9])).await,
            403
        );
        assert_eq!(
            status(app.clone(), from("/banned", [10, 1, 2, 3])).await,
            200
        );
    });
    let expected = [
        (
            "ratelimit_requests_total{limit=s,outcome=allowed,route=/shadow/{id}}",
            1,
        ),
        (
            "ratelimit_requests_total{limit=s,outcome=shadow_limited,route=/shadow/{id}}",
            2,
        ),
        ("ratelimit_near_limit_total{limit=s,route=/shadow/{id}}", 1),
        (
            "ratelimit_requests_total{limit=b,outcome=allowed,route=/banned}",
            1,
        ),
        ("ratelimit_near_limit_total{limit=b,route=/banned}", 1),
        (
            "ratelimit_requests_total{limit=b,outcome=limited,route=/banned}",
            1,
        ),
        (
            "ratelimit_requests_total{limit=penalty-box,outcome=banned,route=/banned}",
            3,
        ),
        (
            "ratelimit_requests_total{outcome=deny_listed,route=/banned}",
            1,
        ),
        (
            "ratelimit_requests_total{outcome=allow_listed,route=/banned}",
            1,
        ),
    ];
    assert_eq!(counts, owned(&expected));
}

/// Requests without a policy: counted, refused or passed as the layer says.
#[test]
fn requests_without_a_policy_are_counted_by_what_became_of_them() {
    use tower_ratelimit::layer::{policy_fn, NoPolicy};

    let counts = counts_of(|| async {
        let none = policy_fn(|_| None);
        let refusing = RateLimitLayer::new(none.clone()).key(Global);
        let passing = RateLimitLayer::new(none)
            .key(Global)
            .on_no_policy(NoPolicy::Unlimited);
        for (layer, expected) in [(refusing, 500), (passing, 200)] {
            let app = axum::Router::new()
                .route("/", axum::routing::get(|| async { "ok" }))
                .layer(layer);
            for _ in 0..2 {
                let req = Request::get("/").body(axum::body::Body::empty()).unwrap();
                assert_eq!(app.clone().oneshot(req).await.unwrap().status(), expected);
            }
        }
    });
    let expected = [
        (
            "ratelimit_requests_total{outcome=no_policy_refused,route=/}",
            2,
        ),
        (
            "ratelimit_requests_total{outcome=no_policy_unlimited,route=/}",
            2,
        ),
    ];
    assert_eq!(counts, owned(&expected));
}
