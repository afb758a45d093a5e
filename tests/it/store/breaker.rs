//! The circuit breaker: it opens after failures in a row, answers at once
//! while open, lets one probe through at a time, and closes when a probe
//! succeeds — with a backend of our own, and with a real Redis paused.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tower_ratelimit::backend::{Backend, BackendError, MemoryBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Decision, Policy};

/// A backend that fails while told to, and takes `delay` to answer.
#[derive(Clone, Default)]
struct Flaky {
    failing: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
    delay: Duration,
    memory: MemoryBackend,
}

impl Flaky {
    /// Failing from the start.
    fn down() -> Self {
        let flaky = Self::default();
        flaky.failing.store(true, Ordering::SeqCst);
        flaky
    }
}

impl Backend for Flaky {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, BackendError>> + Send>>;

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let failing = self.failing.load(Ordering::SeqCst);
        let decision = self.memory.check_now(key, policy, cost);
        let delay = self.delay;
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if failing {
                Err(BackendError::new("connection refused"))
            } else {
                Ok(decision)
            }
        })
    }
}

fn policy() -> Policy {
    "1000/s".parse().unwrap()
}

fn key() -> Key {
    Key::new("user", "alice")
}

#[tokio::test]
async fn it_opens_after_failures_in_a_row_and_then_answers_without_asking() {
    let flaky = Flaky::down();
    let breaker = flaky
        .clone()
        .with_breaker()
        .failures_to_open(3)
        .open_for(Duration::from_secs(60));
    for _ in 0..3 {
        let err = breaker.check(&key(), &policy(), 1).await.unwrap_err();
        assert!(!err.is_breaker_open());
    }
    assert!(breaker.is_open());
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 3);
    for _ in 0..100 {
        let err = breaker.check(&key(), &policy(), 1).await.unwrap_err();
        assert!(err.is_breaker_open(), "{err}");
    }
    // Not asked once while open.
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_success_resets_the_count() {
    let flaky = Flaky::default();
    let breaker = flaky.clone().with_breaker().failures_to_open(3);
    for round in 0..5 {
        flaky.failing.store(true, Ordering::SeqCst);
        for _ in 0..2 {
            assert!(breaker.check(&key(), &policy(), 1).await.is_err());
        }
        flaky.failing.store(false, Ordering::SeqCst);
        assert!(breaker.check(&key(), &policy(), 1).await.is_ok(), "{round}");
        assert!(!breaker.is_open());
    }
}

#[tokio::test]
async fn one_probe_at_a_time_no_request_waits_for_it_and_a_good_one_closes_the_breaker() {
    let flaky = Flaky {
        delay: Duration::from_millis(300),
        ..Flaky::down()
    };
    let breaker = flaky
        .clone()
        .with_breaker()
        .failures_to_open(1)
        .open_for(Duration::from_millis(100));
    assert!(breaker.check(&key(), &policy(), 1).await.is_err());
    assert!(breaker.is_open());
    let remaining = || {
        flaky
            .memory
            .check_now(&key(), &policy(), 0)
            .deciding()
            .remaining()
    };
    let left = remaining();

    // The backend is back; once the breaker is due, 20 decisions arrive at once.
    flaky.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(120)).await;
    let before = flaky.calls.load(Ordering::SeqCst);
    let started = Instant::now();
    let checks: Vec<_> = (0..20)
        .map(|_| breaker.check(&key(), &policy(), 1))
        .collect();
    let results = futures_all(checks).await;
    // All answered at once, the one that started the probe too: it runs
    // on its own task (and takes the backend 300 ms).
    assert!(started.elapsed() < Duration::from_millis(150));
    assert_eq!(flaky.calls.load(Ordering::SeqCst) - before, 1, "one probe");
    assert!(results
        .iter()
        .all(|r| r.as_ref().unwrap_err().is_breaker_open()));

    // The probe succeeded: closed, every decision asks the backend again.
    let probing = Instant::now();
    while breaker.is_open() {
        assert!(
            probing.elapsed() < Duration::from_secs(3),
            "the probe never closed it"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(remaining(), left, "a probe consumes nothing");
    for _ in 0..5 {
        assert!(breaker.check(&key(), &policy(), 1).await.is_ok());
    }
    assert_eq!(flaky.calls.load(Ordering::SeqCst) - before, 6);
}

#[tokio::test]
async fn a_failed_probe_opens_it_twice_as_long() {
    let flaky = Flaky::down();
    let breaker = flaky
        .clone()
        .with_breaker()
        .failures_to_open(1)
        .open_for(Duration::from_millis(100))
        .max_open_for(Duration::from_millis(150));
    assert!(breaker.check(&key(), &policy(), 1).await.is_err());
    let probes = || flaky.calls.load(Ordering::SeqCst) - 1;
    let refused = |result: Result<Decision, BackendError>| result.unwrap_err().is_breaker_open();

    // Due after 100 ms: the probe fails, reopening for 150 ms (2 × 100, capped).
    tokio::time::sleep(Duration::from_millis(110)).await;
    assert!(refused(breaker.check(&key(), &policy(), 1).await));
    assert_eq!(probes(), 1);
    tokio::time::sleep(Duration::from_millis(110)).await;
    assert!(refused(breaker.check(&key(), &policy(), 1).await));
    assert_eq!(probes(), 1, "not due yet: it opened for longer");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(refused(breaker.check(&key(), &policy(), 1).await));
    assert_eq!(probes(), 2);
}

#[tokio::test]
async fn a_probe_outlives_the_decision_that_started_it() {
    let flaky = Flaky {
        delay: Duration::from_millis(50),
        ..Flaky::down()
    };
    let breaker = flaky
        .clone()
        .with_breaker()
        .failures_to_open(1)
        .open_for(Duration::from_millis(10));
    assert!(breaker.check(&key(), &policy(), 1).await.is_err());
    tokio::time::sleep(Duration::from_millis(15)).await;

    // A decision starts the probe, and its client goes away at once.
    drop(breaker.check(&key(), &policy(), 1));
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 2);
    // While the probe is out, others are refused without asking.
    tokio::time::sleep(Duration::from_millis(15)).await;
    let refused = breaker.check(&key(), &policy(), 1).await.unwrap_err();
    assert!(refused.is_breaker_open());
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 2);

    // The probe failed (after 50 ms) and reopened the breaker for 20 ms;
    // then the next decision starts another.
    tokio::time::sleep(Duration::from_millis(70)).await;
    let _ = breaker.check(&key(), &policy(), 1).await;
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 3);
}

/// Outside a runtime there is no task to probe on: the decision probes.
#[test]
fn outside_a_runtime_the_decision_is_the_probe() {
    let flaky = Flaky::down();
    let breaker = flaky
        .clone()
        .with_breaker()
        .failures_to_open(1)
        .open_for(Duration::from_millis(10));
    let block = |f| futures_lite_block_on(f);
    assert!(block(breaker.check(&key(), &policy(), 1)).is_err());
    std::thread::sleep(Duration::from_millis(15));
    flaky.failing.store(false, Ordering::SeqCst);
    assert!(block(breaker.check(&key(), &policy(), 1)).is_ok());
    assert!(!breaker.is_open());
}

/// Poll a future that never needs a runtime's timer to completion.
fn futures_lite_block_on<F: Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

/// Await every future, concurrently, in order.
async fn futures_all<F: Future + Send + 'static>(futures: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_costs_the_timeout_until_the_breaker_opens_then_microseconds() {
    use tower_ratelimit::backend::RedisBackend;
    use tower_ratelimit::decision::Origin;
    let redis = crate::support::RedisServer::start();
    // Long enough that a wait for Redis stands out from scheduling under
    // load; every bound below is well under twice it.
    let timeout = Duration::from_millis(200);
    let backend = RedisBackend::builder(&redis.url())
        .timeout(timeout)
        .connect()
        .await
        .unwrap()
        .with_breaker()
        .failures_to_open(3)
        .open_for(Duration::from_millis(300))
        .or_fallback(MemoryBackend::new());
    let policy = policy();
    let decide = || {
        let backend = backend.clone();
        let policy = policy.clone();
        async move {
            let started = Instant::now();
            let decision = backend.check(&key(), &policy, 1).await.unwrap();
            (decision.origin(), started.elapsed())
        }
    };
    assert_eq!(decide().await.0, Origin::Primary);

    redis.pause();
    let mut slow = 0;
    let mut fast = Vec::new();
    for _ in 0..50 {
        let (origin, took) = decide().await;
        // Every wait is bounded by the timeout (plus scheduling).
        assert!(took < timeout + Duration::from_millis(100), "{took:?}");
        if took >= timeout {
            // Redis was asked, timed out, and the fallback decided.
            assert_eq!(origin, Origin::Fallback);
            slow += 1;
        } else {
            // The breaker is open: Redis was not asked.
            assert_eq!(origin, Origin::BreakerOpen);
            fast.push(took);
        }
    }
    assert_eq!(slow, 3, "only the failures that opened the breaker waited");
    fast.sort();
    let median = fast[fast.len() / 2];
    // Redis not asked: a tenth of the timeout at most, even under load.
    assert!(median < Duration::from_millis(20), "median {median:?}");

    // Redis answers again: within a second (a probe is due after 300 ms),
    // decisions come from it.
    redis.resume();
    let back = Instant::now();
    loop {
        if decide().await.0 == Origin::Primary {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "still on the fallback"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Recovery must not take as long as the outage did: Redis killed for 30 s
/// (`RECOVERY_OUTAGE_SECS` to try other lengths) under steady decisions,
/// then started again empty. While it is down, once the breaker is open,
/// no decision waits; within a second of it answering again, decisions
/// come from it (the probe's backoff stops at 400 ms).
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_outage_redis_decides_again_within_a_second() {
    use tower_ratelimit::backend::RedisBackend;
    use tower_ratelimit::decision::Origin;
    let outage = std::env::var("RECOVERY_OUTAGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_secs);
    let mut redis = crate::support::RedisServer::start();
    // Long enough that a wait for Redis stands out from scheduling under
    // load; every bound below is well under twice it.
    let timeout = Duration::from_millis(200);
    let backend = RedisBackend::builder(&redis.url())
        .timeout(timeout)
        .connect_lazy()
        .unwrap()
        .with_breaker()
        .or_fallback(MemoryBackend::new());
    let policy = policy();
    let decide = || {
        let (backend, policy) = (backend.clone(), policy.clone());
        async move {
            let started = Instant::now();
            let decision = backend.check(&key(), &policy, 1).await.unwrap();
            (decision.origin(), started.elapsed())
        }
    };
    assert_eq!(decide().await.0, Origin::Primary);

    redis.kill();
    let (mut waited, mut decisions) = (0, 0);
    let until = Instant::now() + outage;
    while Instant::now() < until {
        let (origin, took) = decide().await;
        assert_ne!(origin, Origin::Primary);
        assert!(took < timeout + Duration::from_millis(100), "{took:?}");
        waited += usize::from(took >= timeout / 2);
        decisions += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(decisions > 100);
    assert!(waited <= 5, "{waited} of {decisions} decisions waited");

    let mut redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .unwrap();
    let back = Instant::now();
    while decide().await.0 != Origin::Primary {
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "still on the fallback"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "after {outage:?} down: deciding on Redis {:?} after it answered; {waited} of {decisions} decisions waited",
        back.elapsed()
    );
    redis.kill();
}

/// `connect_with_fallback(3)`: the usual backend in one call. With Redis
/// down at start it serves at once from this server's memory, each limit
/// its third (34 of 100); once Redis answers, Redis decides, the whole
/// limit.
#[cfg(feature = "redis")]
#[tokio::test]
async fn the_usual_backend_in_one_call_serves_before_redis_and_shares_the_limit() {
    use tower_ratelimit::backend::{Backend, RedisBackend};
    use tower_ratelimit::decision::Origin;
    use tower_ratelimit::key::Key;
    use tower_ratelimit::Policy;

    let port = crate::support::RedisServer::unused_port();
    let backend = RedisBackend::builder(&format!("redis://127.0.0.1:{port}"))
        .connect_with_fallback(3)
        .unwrap();
    let policy: Policy = "100/h".parse().unwrap();
    let key = Key::new("user", "ann");
    let mut admitted = 0;
    for _ in 0..40 {
        let decision = backend.check(&key, &policy, 1).await.unwrap();
        assert_ne!(decision.origin(), Origin::Primary);
        admitted += u32::from(decision.is_allowed());
    }
    assert_eq!(admitted, 34, "a third of 100, rounded up");

    let _redis = crate::support::RedisServer::start_on_port(port);
    let started = std::time::Instant::now();
    let other = Key::new("user", "bob");
    while backend.check(&other, &policy, 1).await.unwrap().origin() != Origin::Primary {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "Redis never decided"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let decision = backend.check(&other, &policy, 1).await.unwrap();
    assert_eq!(decision.origin(), Origin::Primary);
    assert_eq!(
        decision.deciding().remaining(),
        98,
        "Redis decides on the whole limit (bob's second request)"
    );
}
