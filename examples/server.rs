//! The core, exercised: three limits on one user, in memory.
//!
//! The HTTP server (routes, key extractors, headers) arrives with the layer;
//! until then this shows what the layer will ask the backend.
//!
//! Run with `cargo run --example server`.

use tower_ratelimit::{Algorithm, Key, MemoryBackend, Policy, Quota};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policy = Policy::builder()
        .limit("burst", Algorithm::TokenBucket, "10/s burst 20".parse()?)
        .limit(
            "sustained",
            Algorithm::SlidingWindow,
            Quota::per_minute(100)?,
        )
        .limit("hourly", Algorithm::FixedWindow, Quota::per_hour(1000)?)
        .build()?;
    let backend = MemoryBackend::new();
    let alice = Key::new("user", "alice");

    println!("policy: {policy:?}");
    for i in 1..=25 {
        let d = backend.check_now(&alice, &policy, 1);
        let limit = &policy.limits()[d.decided_by()];
        match d.retry_after() {
            None => println!(
                "request {i:>2}: allowed, {} left on {:?}",
                d.deciding().remaining(),
                limit.name()
            ),
            Some(wait) => println!(
                "request {i:>2}: denied by {:?}, retry after {wait:?}",
                limit.name()
            ),
        }
    }
    Ok(())
}
