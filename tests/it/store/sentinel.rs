//! Redis Sentinel: one primary, one replica and three sentinels started by
//! the test; the primary killed under load. The backend follows the master
//! the sentinels name: decisions come from the promoted replica within a
//! second of its promotion, its scripts loaded unseen, and what the failover
//! cost in exactness is measured.
#![cfg(feature = "redis-sentinel")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::sentinel::Sentinels;
use tower_ratelimit::backend::{Backend, MemoryBackend, RedisBackend};
use tower_ratelimit::decision::Origin;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_is_followed_through_a_failover() {
    let mut setup = tokio::task::spawn_blocking(Sentinels::start).await.unwrap();
    let timeout = Duration::from_millis(50);
    let redis = RedisBackend::builder(&setup.url())
        .timeout(timeout)
        .connect()
        .await
        .unwrap();
    let backend = redis
        .clone()
        .with_breaker()
        .or_fallback(MemoryBackend::new());

    // Load: four clients deciding all along, every decision timed.
    let load: Policy = "100000/min".parse().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<(Instant, Origin, Duration)>>> = Arc::default();
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (backend, load, stop, seen) =
                (backend.clone(), load.clone(), stop.clone(), seen.clone());
            tokio::spawn(async move {
                let key = Key::new("user", format!("load-{i}"));
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let decision = backend.check(&key, &load, 1).await.unwrap();
                    seen.lock()
                        .unwrap()
                        .push((started, decision.origin(), started.elapsed()));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();

    // Exactness: one key under a fixed window of 400 a day, 200 admitted
    // by the primary just before it dies.
    let hot = Policy::single(Algorithm::FixedWindow, Quota::per_day(400).unwrap()).unwrap();
    let hot_key = Key::new("user", "hot");
    for _ in 0..200 {
        assert!(redis.check(&hot_key, &hot, 1).await.unwrap().is_allowed());
    }
    // Killed at once: what the replica had not received yet is lost.
    setup.primary.kill();
    let killed = Instant::now();
    let setup = setup.promotion().await;
    let promoted = Instant::now();
    // Decisions come from Redis again (the promoted replica) within 1 s.
    loop {
        let last = seen.lock().unwrap().last().map(|s| (s.0, s.1));
        if let Some((_, Origin::Primary)) = last.filter(|(at, _)| *at > promoted) {
            break;
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(1),
            "still not on the new primary"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let back = promoted.elapsed();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }

    // No decision waited longer than the timeout; after the promotion and
    // the move, every one came from Redis (no NOSCRIPT seen).
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let slowest = seen.iter().map(|s| s.2).max().unwrap();
    assert!(slowest < timeout + Duration::from_millis(30), "{slowest:?}");
    let waited = seen
        .iter()
        .filter(|s| s.2 >= Duration::from_millis(5))
        .count();

    // What the failover lost: the rest of the day's 400 on the new primary.
    let mut after = 0;
    for _ in 0..400 {
        after += usize::from(redis.check(&hot_key, &hot, 1).await.unwrap().is_allowed());
    }
    let admitted = 200 + after;
    assert!(admitted >= 400, "{admitted}");
    assert!(admitted <= 400 + 200, "{admitted}");
    eprintln!(
        "sentinel failover: promoted {:?} after the kill; deciding on the new primary {back:?} \
         after its promotion; {waited} of {} decisions waited 5 ms or more, slowest {slowest:?}; \
         one key admitted {admitted} against a limit of 400",
        promoted - killed,
        seen.len()
    );
    drop(setup);
}
