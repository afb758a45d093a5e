//! The layer's own cost: one request through `RateLimitLayer` (memory
//! backend, user-header keys, quota headers) against the bare service, for an
//! allowed request and a rejected one.
//!
//! Both the memory backend's future and the inner service are ready at once,
//! so each request is polled to completion with a no-op waker: no runtime
//! in the measurement.
//!
//! Run: `cargo bench -p tower-ratelimit-bench --bench layer`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tower::{ServiceBuilder, ServiceExt};
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::Header;
use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};

#[path = "support/requests.rs"]
mod requests;
use requests::{hello, now, request};

const USERS: usize = 1_000;

fn layer_cost(c: &mut Criterion) {
    let users: Vec<String> = (0..USERS).map(|i| format!("user-{i}")).collect();
    let mut group = c.benchmark_group("layer");

    let bare = hello();
    let mut i = 0;
    group.bench_function("bare_service", |b| {
        b.iter(|| {
            i = (i + 1) % USERS;
            black_box(now(bare.clone().oneshot(request(&users[i]))).unwrap())
        })
    });

    // A million a second per user: never denied at this pace.
    let roomy = Quota::per_second(1_000_000).unwrap();
    let allowed = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(Policy::single(Algorithm::Gcra, roomy).unwrap())
                .key(Header::new("x-user-id")),
        )
        .service(hello());
    group.bench_function("allowed_200", |b| {
        b.iter(|| {
            i = (i + 1) % USERS;
            let res = now(allowed.clone().oneshot(request(&users[i]))).unwrap();
            debug_assert_eq!(res.status(), 200);
            black_box(res)
        })
    });

    // The same, through a Fallback whose primary always answers: what the
    // wrapper itself costs (it keeps the key and policy for a retry).
    let fallback = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(Policy::single(Algorithm::Gcra, roomy).unwrap())
                .key(Header::new("x-user-id"))
                .backend(MemoryBackend::new().or_fallback(MemoryBackend::new())),
        )
        .service(hello());
    group.bench_function("allowed_200_through_fallback", |b| {
        b.iter(|| {
            i = (i + 1) % USERS;
            let res = now(fallback.clone().oneshot(request(&users[i]))).unwrap();
            debug_assert_eq!(res.status(), 200);
            black_box(res)
        })
    });

    let tight = Quota::per_hour(1).unwrap();
    let rejected = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(Policy::single(Algorithm::Gcra, tight).unwrap())
                .key(Header::new("x-user-id")),
        )
        .service(hello());
    for user in &users {
        now(rejected.clone().oneshot(request(user))).unwrap();
    }
    group.bench_function("rejected_429", |b| {
        b.iter(|| {
            i = (i + 1) % USERS;
            let res = now(rejected.clone().oneshot(request(&users[i]))).unwrap();
            debug_assert_eq!(res.status(), 429);
            black_box(res)
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = layer_cost
}
criterion_main!(benches);
