//! Exact expected values for each algorithm, derived from its definition.
//!
//! Every trace runs through a fresh single-limit policy on the memory backend
//! at explicit times (microseconds), so the numbers are the algorithm's own.

use tower_ratelimit::algorithm::Verdict;
use tower_ratelimit::algorithm::{SlidingLog, SlidingLogState, SlidingWindow, State};
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

const SEC: u64 = 1_000_000;

/// How many requests of `trace` (times in µs, cost 1 each) `algorithm`
/// admits under `quota`.
fn admitted(algorithm: Algorithm, quota: &str, trace: &[u64]) -> usize {
    let policy = Policy::single(algorithm, quota.parse().unwrap()).unwrap();
    let backend = MemoryBackend::new();
    let key = Key::new("user", "trace");
    trace
        .iter()
        .filter(|&&t| {
            backend
                .check_at(&key, &policy, 1, Micros::new(t))
                .is_allowed()
        })
        .count()
}

fn repeat(t: u64, n: usize) -> Vec<u64> {
    vec![t; n]
}

#[test]
fn boundary_burst_100_at_0_59_and_100_at_1_01() {
    let mut trace = repeat(59 * SEC, 100);
    trace.extend(repeat(61 * SEC, 100));
    let run = |a| admitted(a, "100/min", &trace);

    // Two windows, [0:00, 1:00) and [1:00, 2:00): each admits its 100.
    assert_eq!(run(Algorithm::FixedWindow), 200);
    // The 100 at 0:59 are still in every window that contains 1:01.
    assert_eq!(run(Algorithm::SlidingLog), 100);
    // At 1:01 the previous minute's 100 weigh 100·59/60 = 98.33; one more
    // request makes 99.33 ≤ 100, a second 100.33 > 100.
    assert_eq!(run(Algorithm::SlidingWindow), 101);
    // B = 100 tokens, one back every 600 ms: 100 at 0:59, then the 2 s until
    // 1:01 refill ⌊2000/600⌋ = 3 tokens.
    assert_eq!(run(Algorithm::TokenBucket), 103);
    // The leaky bucket and GCRA are the token bucket read differently.
    assert_eq!(run(Algorithm::LeakyBucket), 103);
    assert_eq!(run(Algorithm::Gcra), 103);
}

/// The seeds' simulation: 140 requests spread evenly over 60 s plus a burst of
/// 10 at t = 58 s, 150 in all, against 100/min, starting at `start`.
fn seeds_trace(start: u64) -> Vec<u64> {
    let mut trace: Vec<u64> = (0..140).map(|i| start + i * 60 * SEC / 140).collect();
    trace.extend(repeat(start + 58 * SEC, 10));
    trace.sort_unstable();
    trace
}

#[test]
fn seeds_simulation_within_one_window() {
    let trace = seeds_trace(0);
    let run = |a| admitted(a, "100/min", &trace);
    // All 150 fall in the window [0:00, 1:00): the first 100 pass, the burst
    // at 0:58 and everything after the 100th request are denied.
    assert_eq!(run(Algorithm::FixedWindow), 100);
    // All 150 lie within 60 s of each other: exactly 100.
    assert_eq!(run(Algorithm::SlidingLog), 100);
    // The previous window is empty, so it behaves as the fixed window.
    assert_eq!(run(Algorithm::SlidingWindow), 100);
    // Requests arrive every 428.6 ms and a token returns every 600 ms, so the
    // bucket (starting full, 100) never runs dry: by 0:58, 136 requests have
    // taken 136 and 96 have come back, leaving 60 for the burst of 10.
    assert_eq!(run(Algorithm::TokenBucket), 150);
    assert_eq!(run(Algorithm::LeakyBucket), 150);
    assert_eq!(run(Algorithm::Gcra), 150);
}

#[test]
fn seeds_simulation_across_a_window_boundary() {
    let trace = seeds_trace(30 * SEC);
    let run = |a| admitted(a, "100/min", &trace);
    // 70 requests fall in [0:30, 1:00) and 80 (70 + the burst at 1:28) in
    // [1:00, 2:00): neither window reaches 100.
    assert_eq!(run(Algorithm::FixedWindow), 150);
    // All 150 lie within 60 s of each other.
    assert_eq!(run(Algorithm::SlidingLog), 100);
    // Window one admits its 70. In window two those 70 weigh 70·(60−e)/60 at
    // e seconds in; arrivals (2⅓/s) outrun that decay (1⅙/s), so the estimate
    // reaches the limit at e ≈ 24.9 s, and from then on only what the decay
    // frees is admitted: 64 in window two, none of the burst. 70 + 64 = 134.
    assert_eq!(run(Algorithm::SlidingWindow), 134);
    // The same arrivals relative to a full bucket as above.
    assert_eq!(run(Algorithm::TokenBucket), 150);
    assert_eq!(run(Algorithm::LeakyBucket), 150);
    assert_eq!(run(Algorithm::Gcra), 150);
}

#[test]
fn weighted_costs_take_their_weight() {
    let backend = MemoryBackend::new();
    let key = Key::new("user", "weighted");
    for algorithm in Algorithm::ALL {
        let policy = Policy::single(algorithm, Quota::per_minute(100).unwrap()).unwrap();
        let check = |cost| backend.check_at(&key, &policy, cost, Micros::new(0));
        for expected_remaining in [70, 40, 10] {
            let d = check(30);
            assert!(d.is_allowed(), "{algorithm}");
            assert_eq!(d.deciding().remaining(), expected_remaining, "{algorithm}");
        }
        let denied = check(30);
        assert!(!denied.is_allowed(), "{algorithm}: 30 does not fit in 10");
        assert_eq!(
            denied.deciding().remaining(),
            10,
            "{algorithm}: nothing taken"
        );
        assert!(check(10).is_allowed(), "{algorithm}: but 10 does");
        assert!(!check(1).is_allowed(), "{algorithm}: and then it is empty");
        // Different algorithms, same key: each limit keeps its own state.
    }
}

#[test]
fn token_bucket_retry_after_is_the_time_for_the_missing_tokens() {
    let policy = Policy::single(Algorithm::TokenBucket, "10/s burst 10".parse().unwrap()).unwrap();
    let backend = MemoryBackend::new();
    let key = Key::new("user", "retry");
    assert!(backend
        .check_at(&key, &policy, 8, Micros::new(0))
        .is_allowed());
    // 2 left; 5 needs 3 more tokens at one per 100 ms.
    let denied = backend.check_at(&key, &policy, 5, Micros::new(0));
    assert_eq!(
        denied.deciding().retry_after_micros().map(Micros::as_u64),
        Some(300_000)
    );
    assert!(!backend
        .check_at(&key, &policy, 5, Micros::new(299_999))
        .is_allowed());
    assert!(backend
        .check_at(&key, &policy, 5, Micros::new(300_000))
        .is_allowed());
}

#[test]
fn cost_above_capacity_is_never_allowed_and_says_so() {
    let backend = MemoryBackend::new();
    let key = Key::new("user", "huge");
    for algorithm in Algorithm::ALL {
        let quota: Quota = if algorithm.takes_burst() {
            "10/s burst 20".parse().unwrap()
        } else {
            "20/s".parse().unwrap()
        };
        let policy = Policy::single(algorithm, quota).unwrap();
        let d = backend.check_at(&key, &policy, 21, Micros::new(0));
        assert_eq!(d.verdict(), Verdict::Never, "{algorithm}");
        assert_eq!(d.retry_after(), None, "{algorithm}");
        assert_eq!(d.deciding().remaining(), 20, "{algorithm}: nothing taken");
        // Even a whole window later it cannot fit.
        let later = backend.check_at(&key, &policy, 21, Micros::new(3600 * SEC));
        assert_eq!(later.verdict(), Verdict::Never, "{algorithm}");
        // Exactly the capacity fits.
        assert!(
            backend
                .check_at(&key, &policy, 20, Micros::new(3600 * SEC))
                .is_allowed(),
            "{algorithm}"
        );
    }
}

#[test]
fn cost_zero_peeks_without_consuming() {
    let backend = MemoryBackend::new();
    let key = Key::new("user", "peek");
    for algorithm in Algorithm::ALL {
        let policy = Policy::single(algorithm, Quota::per_minute(5).unwrap()).unwrap();
        let held = backend.len();
        let fresh = backend.check_at(&key, &policy, 0, Micros::new(0));
        assert!(fresh.is_allowed());
        assert_eq!(backend.len(), held, "{algorithm}: a peek stores nothing");
        assert_eq!(fresh.deciding().remaining(), 5, "{algorithm}");
        assert_eq!(
            fresh.deciding().reset_after_micros().as_u64(),
            0,
            "{algorithm}"
        );
        assert!(backend
            .check_at(&key, &policy, 2, Micros::new(0))
            .is_allowed());
        for _ in 0..3 {
            let peek = backend.check_at(&key, &policy, 0, Micros::new(SEC));
            assert_eq!(peek.deciding().remaining(), 3, "{algorithm}");
            assert!(
                peek.deciding().reset_after_micros().as_u64() > 0,
                "{algorithm}"
            );
        }
    }
    assert_eq!(
        backend.len(),
        6,
        "one state per algorithm, none for the peeks"
    );
}

#[test]
fn reset_after_tells_when_the_limit_is_whole_again() {
    let backend = MemoryBackend::new();
    let key = Key::new("user", "reset");
    let at = 10 * SEC; // 10 s into a minute window
    let cases = [
        // The window ends at 1:00: 50 s away.
        (Algorithm::FixedWindow, 50 * SEC),
        // The request leaves the log a full window later.
        (Algorithm::SlidingLog, 60 * SEC),
        // The current minute's count is forgotten at the end of the next one.
        (Algorithm::SlidingWindow, 110 * SEC),
        // One token takes 60 s / 10 = 6 s to come back.
        (Algorithm::TokenBucket, 6 * SEC),
        (Algorithm::LeakyBucket, 6 * SEC),
        (Algorithm::Gcra, 6 * SEC),
    ];
    for (algorithm, reset) in cases {
        let policy = Policy::single(algorithm, Quota::per_minute(10).unwrap()).unwrap();
        let d = backend.check_at(&key, &policy, 1, Micros::new(at));
        assert_eq!(
            d.deciding().reset_after_micros().as_u64(),
            reset,
            "{algorithm}"
        );
    }
}

#[test]
fn a_denied_request_is_never_told_to_retry_at_once() {
    // One per microsecond leaves no time to round down to zero.
    let policy = Policy::single(Algorithm::Gcra, Quota::per_second(1_000_000).unwrap()).unwrap();
    let backend = MemoryBackend::new();
    let key = Key::new("user", "fast");
    let mut denied = 0;
    for _ in 0..2_000_000 {
        let d = backend.check_at(&key, &policy, 1, Micros::new(5));
        if let Some(retry) = d.retry_after() {
            assert!(!retry.is_zero());
            denied += 1;
        }
    }
    assert_eq!(denied, 1_000_000);
}

/// Two threads read the clock, then take the lock in the other order: the
/// second sees a `now` a microsecond behind the state. That must count in the
/// state's window, never erase it.
#[test]
fn a_clock_read_a_moment_earlier_never_erases_state() {
    let minute = Quota::per_minute(2).unwrap();
    let sw = SlidingWindow::new(minute);
    let full = sw.consume(State::default(), Micros::new(60 * SEC), 2); // minute 1 is full
    let late = 60 * SEC - 1; // read just before minute 1 began
    assert!(!sw.check(full, Micros::new(late), 1).is_allowed());
    let counted = sw.consume(full, Micros::new(late), 1);
    assert!(!sw.check(counted, Micros::new(60 * SEC), 1).is_allowed());
    assert!(!sw.check(counted, Micros::new(119 * SEC), 1).is_allowed());

    let log = SlidingLog::new(minute);
    let mut s = SlidingLogState::default();
    log.consume(&mut s, Micros::new(60 * SEC), 1);
    log.consume(&mut s, Micros::new(late), 1);
    assert!(!log.check(&mut s, Micros::new(60 * SEC), 1).is_allowed());
    // Both entries leave the window together, a minute after the newest.
    assert_eq!(
        log.check(&mut s, Micros::new(60 * SEC), 1)
            .retry_after_micros()
            .map(Micros::as_u64),
        Some(60 * SEC)
    );
}
