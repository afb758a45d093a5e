//! The in-memory backend under concurrency, key floods and expiry.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use tower_ratelimit::backend::{AtCapacity, MemoryBackend};
use tower_ratelimit::clock::ManualClock;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::policy::PenaltyBox;
use tower_ratelimit::{Algorithm, Policy, Quota};

const SEC: u64 = 1_000_000;

#[test]
fn two_threads_on_one_key_admit_exactly_the_limit() {
    for algorithm in Algorithm::ALL {
        let policy = Policy::single(algorithm, Quota::per_hour(5_000).unwrap()).unwrap();
        let backend = MemoryBackend::new();
        let admitted = AtomicUsize::new(0);
        thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let key = Key::new("user", "hot");
                    for _ in 0..10_000 {
                        if backend
                            .check_at(&key, &policy, 1, Micros::new(0))
                            .is_allowed()
                        {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 5_000, "{algorithm}");
    }
}

/// A known key under a lone bucket is decided under the shard's read lock
/// with one compare-and-swap; new keys take the write lock and may move
/// every slot (the table grows). Exact all the same: a hot key hammered by
/// two threads while a third fills its shard admits exactly its limit.
#[test]
fn a_hot_bucket_stays_exact_while_its_shard_grows_around_it() {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ] {
        let policy = Policy::single(algorithm, Quota::per_hour(20_000).unwrap()).unwrap();
        let backend = MemoryBackend::builder()
            .shards(1)
            .max_keys(1_000_000)
            .build();
        let hot = Key::new("user", "hot");
        let admitted = AtomicUsize::new(0);
        thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        if backend
                            .check_at(&hot, &policy, 1, Micros::new(0))
                            .is_allowed()
                        {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            s.spawn(|| {
                for i in 0..200_000u32 {
                    let key = Key::new("user", i.to_be_bytes());
                    assert!(backend
                        .check_at(&key, &policy, 1, Micros::new(0))
                        .is_allowed());
                }
            });
        });
        assert_eq!(admitted.into_inner(), 20_000, "{algorithm}");
        assert_eq!(backend.len(), 200_001, "{algorithm}: every key kept");
        // What the hot key has left is what a single thread would see.
        let last = backend.check_at(&hot, &policy, 1, Micros::new(0));
        assert!(!last.is_allowed());
        assert_eq!(last.deciding().remaining(), 0);
    }
}

#[test]
fn a_million_keys_from_two_threads_are_each_counted_once() {
    let policy = Policy::single(Algorithm::Gcra, Quota::per_hour(1).unwrap()).unwrap();
    let backend = MemoryBackend::builder().max_keys(2_000_000).build();
    let keys = 1_000_000u32;
    let admitted = AtomicUsize::new(0);
    thread::scope(|s| {
        for offset in [0, keys / 2] {
            let (backend, policy, admitted) = (&backend, &policy, &admitted);
            s.spawn(move || {
                // Both threads visit every key, starting at different places.
                for i in 0..keys {
                    let key = Key::new("ip", ((i + offset) % keys).to_be_bytes());
                    if backend
                        .check_at(&key, policy, 1, Micros::new(0))
                        .is_allowed()
                    {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(admitted.into_inner(), keys as usize);
    assert_eq!(backend.len(), keys as usize);
}

#[test]
fn a_key_flood_never_grows_past_the_cap_and_evicts_what_expires_soonest() {
    let clock = ManualClock::new(Micros::new(0));
    // 64 shards of 64 states: the cap is split per shard, so the loyal
    // clients below (8 per shard on average) must fit in any one shard.
    let backend = MemoryBackend::builder()
        .max_keys(4_096)
        .clock(clock.clone())
        .build();
    assert_eq!(backend.max_keys(), 4_096);
    let minute: Policy =
        Policy::single(Algorithm::FixedWindow, Quota::per_minute(1).unwrap()).unwrap();
    let hour: Policy = Policy::single(Algorithm::FixedWindow, Quota::per_hour(1).unwrap()).unwrap();

    // 512 clients under an hourly limit, then a flood of 100,000 spoofed
    // clients under a per-minute limit.
    let loyal = |i: u32| Key::new("user", i.to_be_bytes());
    for i in 0..512 {
        assert!(backend.check_now(&loyal(i), &hour, 1).is_allowed());
    }
    let mut high_water = 0;
    for i in 0..100_000u32 {
        let d = backend.check_now(&Key::new("ip", i.to_be_bytes()), &minute, 1);
        assert!(d.is_allowed(), "evicting: new keys are never turned away");
        high_water = high_water.max(backend.len());
    }
    assert!(high_water <= backend.max_keys(), "{high_water}");
    assert_eq!(backend.len(), backend.max_keys());
    // The flood's states expire within the minute, the loyal ones' within the
    // hour, so eviction took the flood's own states: the loyal clients are
    // still counted (their one request this hour is spent).
    let still_limited = (0..512)
        .filter(|&i| !backend.check_now(&loyal(i), &hour, 1).is_allowed())
        .count();
    assert_eq!(still_limited, 512, "a loyal client's state was evicted");
    // Memory stays where the cap put it.
    assert!(
        backend.memory_bytes() <= 4_096 * 48,
        "{}",
        backend.memory_bytes()
    );
}

#[test]
fn at_capacity_deny_turns_new_keys_away_until_state_expires() {
    let clock = ManualClock::new(Micros::new(0));
    let backend = MemoryBackend::builder()
        .max_keys(256)
        .at_capacity(AtCapacity::Deny)
        .clock(clock.clone())
        .build();
    let policy = Policy::single(Algorithm::SlidingWindow, Quota::per_minute(2).unwrap()).unwrap();
    let key = |i: u32| Key::new("ip", i.to_be_bytes());

    let mut admitted = 0;
    let mut turned_away = 0;
    for i in 0..10_000 {
        let d = backend.check_now(&key(i), &policy, 1);
        if d.is_allowed() {
            admitted += 1;
        } else {
            assert!(d.is_capacity_exhausted());
            assert!(d.retry_after().unwrap() <= Duration::from_secs(120));
            turned_away += 1;
        }
    }
    assert_eq!(admitted, backend.len());
    assert!(admitted <= backend.max_keys() && admitted > backend.max_keys() / 2);
    assert_eq!(admitted + turned_away, 10_000);
    // Known keys are still decided by their limit: one more fits, then none.
    let known = (0..10_000).find(|&i| {
        backend
            .check_now(&key(i), &policy, 0)
            .deciding()
            .remaining()
            == 1
    });
    let known = known.expect("an admitted key");
    assert!(backend.check_now(&key(known), &policy, 1).is_allowed());
    let d = backend.check_now(&key(known), &policy, 1);
    assert!(!d.is_allowed() && !d.is_capacity_exhausted());
    // Two minutes on, every state has expired: new keys get in again. (50
    // keys over 16 shards of 16: no shard receives more than it holds.)
    clock.advance(Duration::from_secs(121));
    let fresh = (20_000..20_050)
        .filter(|&i| backend.check_now(&key(i), &policy, 1).is_allowed())
        .count();
    assert_eq!(fresh, 50);
}

#[test]
fn expired_state_is_reclaimed_without_timers() {
    let clock = ManualClock::new(Micros::new(0));
    let backend = MemoryBackend::builder().clock(clock.clone()).build();
    let policy = Policy::single(Algorithm::Gcra, Quota::per_second(10).unwrap()).unwrap();
    for i in 0..100_000u32 {
        backend.check_now(&Key::new("ip", i.to_be_bytes()), &policy, 1);
    }
    assert_eq!(backend.len(), 100_000);
    let bytes = backend.memory_bytes();
    // A second later all of that has expired; a new crowd arrives.
    clock.advance(Duration::from_secs(1));
    for i in 100_000..200_000u32 {
        backend.check_now(&Key::new("ip", i.to_be_bytes()), &policy, 1);
    }
    assert_eq!(backend.len(), 100_000, "the first crowd was reclaimed");
    // Shards get a different share of the new crowd, so a few may grow; two
    // crowds' worth would be about twice the memory.
    assert!(
        backend.memory_bytes() < bytes * 3 / 2,
        "{} vs {bytes}",
        backend.memory_bytes()
    );
}

#[test]
fn sliding_logs_are_bounded_by_their_limit() {
    let backend = MemoryBackend::new();
    let policy = Policy::single(Algorithm::SlidingLog, Quota::per_minute(50).unwrap()).unwrap();
    let key = Key::new("user", "logger");
    for i in 0..10_000u64 {
        backend.check_at(&key, &policy, 1, Micros::new(i * 1_000));
    }
    // 50 entries at most (in room for 64), 16 bytes each, plus the slot
    // table (16 slots of 64 bytes).
    assert!(
        backend.memory_bytes() <= 64 * 16 + 16 * 64,
        "{}",
        backend.memory_bytes()
    );
}

#[test]
fn keys_of_different_kinds_never_share_state() {
    let backend = MemoryBackend::new();
    let policy = Policy::single(Algorithm::FixedWindow, Quota::per_minute(1).unwrap()).unwrap();
    let keys = [
        Key::new("user", "1"),
        Key::new("ip", "1"),
        Key::new("us", "er1"),
        Key::new("user", "1\0"),
        Key::new("user", ""),
        Key::new("user", vec![0xff; 1 << 20]),
        Key::new("user", vec![0xff; (1 << 20) - 1]),
    ];
    for key in &keys {
        assert!(
            backend
                .check_at(key, &policy, 1, Micros::new(SEC))
                .is_allowed(),
            "{key:?}"
        );
    }
    for key in &keys {
        assert!(
            !backend
                .check_at(key, &policy, 1, Micros::new(SEC))
                .is_allowed(),
            "{key:?}"
        );
    }
}

#[test]
fn memory_comes_back_after_a_flood_subsides() {
    let clock = ManualClock::new(Micros::new(0));
    let backend = MemoryBackend::builder().clock(clock.clone()).build();
    let policy = Policy::single(Algorithm::Gcra, Quota::per_second(10).unwrap()).unwrap();
    let mut next = 0u32;
    let mut arrive = |n: u32| {
        for _ in 0..n {
            backend.check_now(&Key::new("ip", next.to_be_bytes()), &policy, 1);
            next += 1;
        }
    };
    arrive(100_000);
    let peak = backend.memory_bytes();
    // The flood is over; for a few seconds, 20,000 new clients a second.
    // Each new key moves the reclaiming cursor, and a table that a full pass
    // finds under a quarter full is rebuilt half full.
    for _ in 0..4 {
        clock.advance(Duration::from_secs(2));
        arrive(20_000);
    }
    let after = backend.memory_bytes();
    // 20,000 live keys need 20,000 × 24 bytes at half to three quarters full.
    assert!(
        after <= 20_000 * 48 * 5 / 4,
        "{after} bytes after, {peak} at the peak"
    );
    assert!(after < peak / 3, "{after} bytes after, {peak} at the peak");
}

#[tokio::test]
async fn either_backend_decides_exactly_as_the_backend_it_holds() {
    use tower_ratelimit::backend::{Backend, Either};
    let policy: Policy = "2/min".parse().unwrap();
    let key = Key::new("user", "alice");
    let left: Either<MemoryBackend, MemoryBackend> = Either::Left(MemoryBackend::new());
    let right: Either<MemoryBackend, MemoryBackend> = Either::Right(MemoryBackend::new());
    for backend in [left, right] {
        let mut admitted = Vec::new();
        for _ in 0..3 {
            admitted.push(backend.check(&key, &policy, 1).await.unwrap().is_allowed());
        }
        assert_eq!(admitted, [true, true, false]);
        assert_eq!(backend.name(), "memory");
    }
}

/// The hostile client's attack on an admin-set `4000000/h` sliding log: one
/// key cannot make the logs hold more than the backend's log bytes, other
/// keys' logs with room keep deciding, and the bytes come back when the
/// entries leave the window.
#[test]
fn sliding_logs_together_hold_at_most_the_log_bytes() {
    const CAP: usize = 1 << 20;
    let clock = ManualClock::new(Micros::new(0));
    let backend = MemoryBackend::builder()
        .clock(clock.clone())
        .max_log_bytes(CAP)
        .build();
    let huge = Policy::builder()
        .max_log_entries(4_000_000)
        .limit(
            "huge",
            Algorithm::SlidingLog,
            Quota::per_hour(4_000_000).unwrap(),
        )
        .build()
        .unwrap();
    let small = Policy::single(Algorithm::SlidingLog, Quota::per_minute(3).unwrap()).unwrap();
    let neighbour = Key::new("user", "neighbour");
    assert!(backend.check_now(&neighbour, &small, 1).is_allowed());

    let attacker = Key::new("user", "attacker");
    let (mut admitted, mut exhausted) = (0u32, 0u32);
    for _ in 0..200_000 {
        clock.advance(Duration::from_micros(10));
        let decision = backend.check_now(&attacker, &huge, 1);
        admitted += u32::from(decision.is_allowed());
        exhausted += u32::from(decision.is_capacity_exhausted());
        assert!(backend.log_bytes() <= CAP, "{}", backend.log_bytes());
    }
    // 16 bytes an entry, doubling: between half the cap and the cap of them.
    assert!(
        (CAP / 32..=CAP / 16).contains(&(admitted as usize)),
        "{admitted}"
    );
    assert_eq!(admitted + exhausted, 200_000);
    assert!(backend.memory_bytes() < CAP + 64 * 1024);

    assert!(exhausted > 0, "the attacker's own log stops at the cap");

    // New keys take what is left, 64 bytes each (room for four entries),
    // until a new log finds no bytes: refused as capacity, not its limit.
    let left = CAP - backend.log_bytes();
    let newcomers = (0u32..)
        .take_while(|i| {
            let d = backend.check_now(&Key::new("ip", i.to_be_bytes()), &small, 1);
            assert!(d.is_allowed() || d.is_capacity_exhausted());
            d.is_allowed()
        })
        .count();
    assert_eq!(newcomers, left / 64);
    assert!(backend.log_bytes() <= CAP);
    let newcomer = backend.check_now(&Key::new("user", "newcomer"), &small, 1);
    assert!(newcomer.is_capacity_exhausted() && !newcomer.is_allowed());
    // The neighbour's log has room in its allocation: it decides as before.
    assert!(backend.check_now(&neighbour, &small, 1).is_allowed());

    // An hour later the attacker's entries have left the window; its next
    // request gives their bytes back, and the newcomer gets in.
    clock.advance(Duration::from_secs(3_601));
    let before = backend.log_bytes();
    assert!(backend.check_now(&attacker, &huge, 1).is_allowed());
    assert!(
        backend.log_bytes() < before - CAP / 3,
        "{before} -> {}",
        backend.log_bytes()
    );
    assert!(backend
        .check_now(&Key::new("user", "newcomer"), &small, 1)
        .is_allowed());
}

/// Expired logs hold bytes until they are reclaimed: at the cap, a new log
/// first reclaims expired ones near it instead of being refused.
#[test]
fn expired_logs_make_room_under_the_log_bytes() {
    let clock = ManualClock::new(Micros::new(0));
    let backend = MemoryBackend::builder()
        .clock(clock.clone())
        .shards(1)
        .max_log_bytes(64 * 100)
        .build();
    let policy = Policy::single(Algorithm::SlidingLog, Quota::per_minute(3).unwrap()).unwrap();
    let key = |i: u32| Key::new("ip", i.to_be_bytes());
    let admitted = (0..200)
        .filter(|&i| backend.check_now(&key(i), &policy, 1).is_allowed())
        .count();
    assert_eq!(admitted, 100);
    assert!(backend
        .check_now(&key(1_000), &policy, 1)
        .is_capacity_exhausted());
    clock.advance(Duration::from_secs(61));
    let admitted = (1_000..1_100)
        .filter(|&i| backend.check_now(&key(i), &policy, 1).is_allowed())
        .count();
    assert_eq!(admitted, 100);
    assert!(backend.log_bytes() <= 64 * 100);
}

/// Bans, strikes and budgets that are denying are what an attacker wants
/// evicted: a flood of made-up ids (each under an hourly limit, so each
/// state outlives the ban) evicts one another and never them, for every
/// algorithm. Under `AtCapacity::Deny` nothing is ever evicted.
#[test]
fn a_flood_of_made_up_ids_evicts_no_ban_and_no_exhausted_budget() {
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(Micros::new(0));
        let backend = MemoryBackend::builder()
            .max_keys(256)
            .shards(1)
            .clock(clock.clone())
            .build();
        // 2 a minute, then 2 denials within a minute: banned 5 minutes.
        let penalty =
            PenaltyBox::new(2, Duration::from_secs(60), Duration::from_secs(300)).unwrap();
        let banning = Policy::builder()
            .limit("ip", algorithm, Quota::per_minute(2).unwrap())
            .penalty(penalty)
            .build()
            .unwrap();
        // 5 failed logins a minute, all spent: a lockout.
        let login = Policy::single(algorithm, Quota::per_minute(5).unwrap()).unwrap();
        let burst = Policy::builder()
            .limit("s", algorithm, Quota::per_second(10).unwrap())
            .limit("h", algorithm, Quota::per_hour(1000).unwrap())
            .build()
            .unwrap();
        let attacker = Key::new("ip", "203.0.113.7");
        let victim = Key::new("login", "203.0.113.7 ann");
        for _ in 0..5 {
            backend.check_now(&attacker, &banning, 1);
        }
        let banned = backend.check_now(&attacker, &banning, 1);
        assert!(banned.is_banned(), "{algorithm}: not banned");
        for _ in 0..6 {
            backend.check_now(&victim, &login, 1);
        }
        assert!(!backend.check_now(&victim, &login, 1).is_allowed());
        for i in 0..50_000u32 {
            clock.advance(Duration::from_micros(200));
            backend.check_now(&Key::new("user", i.to_be_bytes()), &burst, 1);
        }
        // 10 s have passed: the ban and the lockout still stand.
        let after = backend.check_now(&attacker, &banning, 1);
        assert!(after.is_banned(), "{algorithm}: the ban was evicted");
        assert!(
            !backend.check_now(&victim, &login, 1).is_allowed(),
            "{algorithm}: the lockout was evicted"
        );
        assert!(backend.len() <= 256 * 3, "{}", backend.len());
    }
}
