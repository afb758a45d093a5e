//! One decision on the memory backend, for each algorithm, against governor
//! (GCRA, in-memory, keyed by a DashMap) on the same workloads in the same run.
//!
//! Workloads: one hot key from one thread; one hot key from two threads (the
//! figure is wall time per decision, both threads together); 100,000 keys
//! round-robin from one thread. Keys are strings for both (`user-<n>`).
//!
//! Run: `cargo bench -p tower-ratelimit-bench --bench memory_backend`

use std::hint::black_box;
use std::num::NonZeroU32;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::{Quota as GovernorQuota, RateLimiter};
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// A million per second: high enough that the hot key is mostly admitted.
const RATE: u32 = 1_000_000;
const KEYS: usize = 100_000;

fn policy(algorithm: Algorithm) -> Policy {
    let quota = Quota::per_second(RATE).unwrap();
    // The sliding log keeps an entry per request: a million a window is
    // past its default cap.
    Policy::builder()
        .limit("hot", algorithm, quota)
        .max_log_entries(RATE)
        .build()
        .unwrap()
}

fn governor_quota() -> GovernorQuota {
    GovernorQuota::per_second(NonZeroU32::new(RATE).unwrap())
}

/// Time `iters` calls of `f` split over two threads, start to last finish.
fn two_threads(iters: u64, f: impl Fn() + Sync) -> Duration {
    let start = Instant::now();
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..iters / 2 {
                    f();
                }
            });
        }
    });
    start.elapsed()
}

fn hot_key(c: &mut Criterion) {
    let mut one = c.benchmark_group("hot_key_1_thread");
    for algorithm in Algorithm::ALL {
        let (backend, policy, key) = (
            MemoryBackend::new(),
            policy(algorithm),
            Key::new("user", "42"),
        );
        one.bench_function(BenchmarkId::from_parameter(algorithm), |b| {
            b.iter(|| black_box(backend.check_now(black_box(&key), &policy, 1)))
        });
    }
    let governor = RateLimiter::keyed(governor_quota());
    let key = "user-42".to_owned();
    one.bench_function(BenchmarkId::from_parameter("governor"), |b| {
        b.iter(|| black_box(governor.check_key(black_box(&key))))
    });
    one.finish();

    let mut two = c.benchmark_group("hot_key_2_threads");
    for algorithm in Algorithm::ALL {
        let (backend, policy, key) = (
            MemoryBackend::new(),
            policy(algorithm),
            Key::new("user", "42"),
        );
        two.bench_function(BenchmarkId::from_parameter(algorithm), |b| {
            b.iter_custom(|iters| {
                two_threads(iters, || {
                    black_box(backend.check_now(&key, &policy, 1));
                })
            })
        });
    }
    let governor = RateLimiter::keyed(governor_quota());
    two.bench_function(BenchmarkId::from_parameter("governor"), |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(governor.check_key(&key));
            })
        })
    });
    two.finish();
}

fn many_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("100k_keys_round_robin");
    let keys: Vec<Key> = (0..KEYS).map(|i| Key::new("user", i.to_string())).collect();
    for algorithm in Algorithm::ALL {
        let (backend, policy) = (MemoryBackend::new(), policy(algorithm));
        let mut i = 0;
        group.bench_function(BenchmarkId::from_parameter(algorithm), |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                black_box(backend.check_now(&keys[i], &policy, 1))
            })
        });
    }
    let governor = RateLimiter::keyed(governor_quota());
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user-{i}")).collect();
    let mut i = 0;
    group.bench_function(BenchmarkId::from_parameter("governor"), |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(governor.check_key(&keys[i]))
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = hot_key, many_keys
}
criterion_main!(benches);
