//! The layer's own cost: one request through `RateLimitLayer` (memory
//! backend, user-header keys, quota headers) against the bare service, for an
//! allowed request and a rejected one; and an allowed one on two threads at
//! once through one layer, against the bare service and a layer of each
//! thread's own (over one backend, and over one each).
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

    // Two threads at once, each with its own users, through clones of one
    // layer as axum clones a route's service per request: what the
    // reference counts and locks that requests share cost when two cores
    // write them. Wall time per request of each thread, against the bare
    // service on two threads.
    let two_threads = |b: &mut criterion::Bencher<'_>, serve: &(dyn Fn(usize, &str) + Sync)| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for thread in 0..2 {
                    let users = &users;
                    s.spawn(move || {
                        for n in 0..iters as usize {
                            serve(thread, &users[(2 * n + thread) % USERS]);
                        }
                    });
                }
            });
            start.elapsed()
        })
    };
    group.bench_function("bare_service_two_threads", |b| {
        two_threads(b, &|_, user| {
            black_box(now(bare.clone().oneshot(request(user))).unwrap());
        })
    });
    group.bench_function("allowed_200_two_threads", |b| {
        two_threads(b, &|_, user| {
            black_box(now(allowed.clone().oneshot(request(user))).unwrap());
        })
    });
    // A layer of each thread's own, over one backend (the store shared,
    // the layer not) or over one each (nothing shared).
    let layer_over = |backend: MemoryBackend| {
        ServiceBuilder::new()
            .layer(
                RateLimitLayer::new(Policy::single(Algorithm::Gcra, roomy).unwrap())
                    .key(Header::new("x-user-id"))
                    .backend(backend),
            )
            .service(hello())
    };
    let one_backend = MemoryBackend::new();
    let store_shared = [(); 2].map(|_| layer_over(one_backend.clone()));
    let nothing_shared = [(); 2].map(|_| layer_over(MemoryBackend::new()));
    group.bench_function("allowed_200_two_threads_store_shared", |b| {
        two_threads(b, &|thread, user| {
            black_box(now(store_shared[thread].clone().oneshot(request(user))).unwrap());
        })
    });
    group.bench_function("allowed_200_two_threads_nothing_shared", |b| {
        two_threads(b, &|thread, user| {
            black_box(now(nothing_shared[thread].clone().oneshot(request(user))).unwrap());
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
