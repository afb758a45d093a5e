//! `hot-key <algorithm|two-limits|governor> <n>`: n decisions on one key of
//! the memory backend (one limit of 1,000,000/s, or that as GCRA with
//! 60,000,000/min as a fixed window; string key) or of
//! governor's keyed limiter (GCRA in a `DashMap`), each through
//! `decide`, never inlined.
//!
//! Under `valgrind --tool=callgrind`, the inclusive count of `decide`
//! divided by n is one decision's cost in instructions (`scripts/instructions`
//! does it). Callgrind runs threads one at a time, so the count is the
//! same with two threads; contention is for the criterion bench to time.

use std::hint::black_box;
use std::num::NonZeroU32;

use governor::{Quota as GovernorQuota, RateLimiter};
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

const RATE: u32 = 1_000_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().expect("an algorithm or governor");
    let n: usize = args.next().expect("a number of decisions").parse().unwrap();
    if which == "governor" {
        let limiter = RateLimiter::keyed(GovernorQuota::per_second(NonZeroU32::new(RATE).unwrap()));
        let key = "user-42".to_owned();
        for _ in 0..n {
            black_box(governor_decide(&limiter, &key));
        }
        return;
    }
    let policy = if which == "two-limits" {
        // A policy of two limits: the general path, all or nothing.
        Policy::builder()
            .limit("second", Algorithm::Gcra, Quota::per_second(RATE).unwrap())
            .limit("minute", Algorithm::FixedWindow, Quota::per_minute(60 * RATE).unwrap())
            .build()
            .unwrap()
    } else {
        let algorithm: Algorithm = which.parse().expect("an algorithm");
        Policy::builder()
            .limit("hot", algorithm, Quota::per_second(RATE).unwrap())
            .max_log_entries(RATE)
            .build()
            .unwrap()
    };
    let backend = MemoryBackend::new();
    let key = Key::new("user", "42");
    for _ in 0..n {
        black_box(decide(&backend, &key, &policy));
    }
}

#[inline(never)]
fn decide(backend: &MemoryBackend, key: &Key, policy: &Policy) -> bool {
    backend.check_now(black_box(key), policy, 1).is_allowed()
}

type Keyed = RateLimiter<
    String,
    governor::state::keyed::DefaultKeyedStateStore<String>,
    governor::clock::DefaultClock,
>;

#[inline(never)]
fn governor_decide(limiter: &Keyed, key: &String) -> bool {
    limiter.check_key(black_box(key)).is_ok()
}
