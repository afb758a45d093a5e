//! What a live change keeps, on the memory backend and on Redis alike: a
//! named limit whose algorithm and window stay the same keeps every
//! client's count when its number changes, and a penalty box's bans survive
//! a change of its policy's quotas.

use std::time::Duration;

use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::policy::PenaltyBox;
use tower_ratelimit::{Algorithm, Policy};

async fn admitted<B: Backend>(backend: &B, key: &Key, policy: &Policy, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        if backend.check(key, policy, 1).await.unwrap().is_allowed() {
            admitted += 1;
        }
    }
    admitted
}

/// Tightening 100/min to 20/min after a client spent 30 never hands it 20
/// fresh requests: the windows and the log keep the count (30 of 20: none
/// left); the buckets keep the time their tokens take to come back (30 at
/// 100/min is 18 s, which at 20/min is 6 tokens: 14 left). Loosening back
/// to 100/min gives what was left of the 100.
async fn a_tighter_quota_keeps_the_count<B: Backend>(backend: B) {
    for algorithm in Algorithm::ALL {
        let key = Key::new("user", format!("spender-{algorithm}"));
        let at = |quota: &str| Policy::parse_with(&format!("api = {quota}"), algorithm).unwrap();
        assert_eq!(
            admitted(&backend, &key, &at("100/min"), 30).await,
            30,
            "{algorithm}"
        );
        let expected = if algorithm.takes_burst() { 14 } else { 0 };
        let tighter = admitted(&backend, &key, &at("20/min"), 20).await;
        assert_eq!(tighter, expected, "{algorithm}: 20/min after 30 of 100/min");
        let spent = 30
            + if algorithm.takes_burst() {
                tighter * 5
            } else {
                0
            };
        let left = admitted(&backend, &key, &at("100/min"), 100).await;
        // A little may have refilled meanwhile.
        assert!(
            (100 - spent..=100 - spent + 2).contains(&left),
            "{algorithm}: {left} left of 100 after {spent}"
        );
    }
}

/// A client banned under 1/min stays banned when the limit becomes 2/min.
async fn a_ban_survives_a_quota_change<B: Backend>(backend: B) {
    let penalty = PenaltyBox::new(2, Duration::from_secs(60), Duration::from_secs(300)).unwrap();
    let at = |quota: &str| {
        Policy::builder()
            .limit("ip", Algorithm::SlidingWindow, quota.parse().unwrap())
            .penalty(penalty)
            .build()
            .unwrap()
    };
    let key = Key::new("ip", "198.51.100.7");
    let before = at("1/min");
    for _ in 0..3 {
        let _ = backend.check(&key, &before, 1).await.unwrap();
    }
    assert!(backend.check(&key, &before, 1).await.unwrap().is_banned());
    let after = backend.check(&key, &at("2/min"), 1).await.unwrap();
    assert!(after.is_banned(), "the ban outlives the change");
}

#[tokio::test]
async fn on_memory_a_quota_change_keeps_counts_and_bans() {
    a_tighter_quota_keeps_the_count(MemoryBackend::new()).await;
    a_ban_survives_a_quota_change(MemoryBackend::new()).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_quota_change_keeps_counts_and_bans() {
    let server = crate::support::RedisServer::start();
    let redis = server.backend().await;
    a_tighter_quota_keeps_the_count(redis.clone()).await;
    a_ban_survives_a_quota_change(redis).await;
}
