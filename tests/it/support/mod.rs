//! What several test files share: real Redis servers (`redis.rs`), requests
//! in process and over HTTP (`http.rs`), a backend that answers on a later
//! poll (`later.rs`), a link to slow down or cut (`proxy.rs`), an inner
//! service that checks readiness (`strict.rs`), and a backend that always
//! fails.

#![allow(dead_code, unused_imports)]

pub mod conformance;
pub mod example;
pub mod http;
pub mod later;
pub mod proxy;
pub mod redis;
pub mod reference;
pub mod sentinel;
pub mod store;
pub mod strict;
pub mod tls;

pub use self::http::{request, send, send_from};
pub use self::redis::{available, state_parts, RedisCluster, RedisServer, AGREE};

/// A backend that always fails, as an unreachable Redis would.
#[derive(Clone)]
pub struct Broken;

impl tower_ratelimit::backend::Backend for Broken {
    type Future = std::future::Ready<
        Result<tower_ratelimit::Decision, tower_ratelimit::backend::BackendError>,
    >;
    fn check(
        &self,
        _: &tower_ratelimit::key::Key,
        _: &tower_ratelimit::Policy,
        _: u32,
    ) -> Self::Future {
        std::future::ready(Err(tower_ratelimit::backend::BackendError::new(
            "connection refused",
        )))
    }
}

/// µs since the epoch: a clock every caller of a test shares, for
/// backends told the time.
pub fn epoch_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// `prefix` and a number no other call in this process returned: a name
/// of its own for a case sharing a store with others.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}{n}")
}

/// Waits, if need be, until at least 10 s are left in the clock's current
/// minute: a test of a `/min` sliding window counter that crossed into the
/// next minute would see the last one's count weigh less.
pub async fn with_a_minute_to_spare() {
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 60_000;
    if into_minute > 50_000 {
        let wait = 60_100 - into_minute as u64;
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    }
}

/// A `valkey-server` of the test's own, when Valkey is installed (or the
/// run opts out of the Valkey tests: see [`needed`]).
pub fn valkey() -> Option<RedisServer> {
    needed(
        "valkey",
        "valkey-server",
        "apt-get install -t bookworm-backports valkey-server",
    )
    .then(|| RedisServer::start_with("valkey-server", &[]))
}

/// Whether `program` is here for the test `name` needs it for. A missing
/// program fails the test with how to install it, unless the run opts out
/// of it by name (`SKIP_TESTS=valkey,prometheus`): then the test says it
/// skipped, and `scripts/test` lists it on its last line.
pub fn needed(name: &str, program: &str, install: &str) -> bool {
    if available(program) {
        return true;
    }
    let skipped = std::env::var("SKIP_TESTS").unwrap_or_default();
    if skipped.split(',').any(|skip| skip.trim() == name) {
        eprintln!("skipped ({name}): {program} is not installed ({install})");
        return false;
    }
    panic!(
        "{program} is not installed: {install} (scripts/test does under CI=true or INSTALL_DEPS=1), \
         or opt out of this test with SKIP_TESTS={name}"
    );
}
