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
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::{Global, UserHeader};
use tower_ratelimit::{OnBackendError, OnKeyError, Policy, RateLimitLayer};

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
    let recorder = Captured::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let policy: Policy = "minute = 2/min".parse().unwrap();
            let svc = ServiceBuilder::new()
                .layer(RateLimitLayer::new(policy.clone()).key(UserHeader::new("x-user-id")))
                .service(ok());
            for _ in 0..5 {
                let req = Request::get("/").header("x-user-id", "u").body(()).unwrap();
                svc.clone().oneshot(req).await.unwrap();
            }
            svc.clone().oneshot(Request::new(())).await.unwrap(); // no key: rejected
            let skipping = ServiceBuilder::new()
                .layer(
                    RateLimitLayer::new(policy.clone())
                        .key(UserHeader::new("x-user-id"))
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
        })
    });
    let counts: BTreeMap<String, u64> = recorder
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
        .collect();
    let expected: BTreeMap<String, u64> = [
        ("ratelimit_requests_total{limit=minute,outcome=allowed}", 2),
        ("ratelimit_requests_total{limit=minute,outcome=limited}", 3),
        ("ratelimit_requests_total{outcome=key_rejected}", 1),
        ("ratelimit_requests_total{outcome=key_skipped}", 1),
        ("ratelimit_requests_total{outcome=backend_error_allowed}", 1),
        ("ratelimit_requests_total{outcome=backend_error_denied}", 1),
        (
            "ratelimit_requests_total{limit=minute,outcome=fallback_allowed}",
            2,
        ),
        (
            "ratelimit_requests_total{limit=minute,outcome=fallback_limited}",
            1,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(counts, expected);
}
