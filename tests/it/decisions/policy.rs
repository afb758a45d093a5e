//! Policies: all-or-nothing across limits, counting denied requests, and
//! which limit decides.

use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::policy::PolicyError;
use tower_ratelimit::{Algorithm, Policy, Quota};

const SEC: u64 = 1_000_000;

fn three_limits(count_denied: bool) -> Policy {
    Policy::builder()
        .limit(
            "minute",
            Algorithm::FixedWindow,
            Quota::per_minute(5).unwrap(),
        )
        .limit("burst", Algorithm::Gcra, Quota::per_minute(3).unwrap())
        .limit("log", Algorithm::SlidingLog, Quota::per_minute(10).unwrap())
        .count_denied(count_denied)
        .build()
        .unwrap()
}

#[test]
fn a_request_denied_by_one_limit_consumes_from_none() {
    let policy = three_limits(false);
    let backend = MemoryBackend::new();
    let key = Key::new("user", "all-or-nothing");
    for _ in 0..3 {
        assert!(backend
            .check_at(&key, &policy, 1, Micros::new(0))
            .is_allowed());
    }
    // "burst" (3/min) is empty; the other two would allow.
    for _ in 0..5 {
        let denied = backend.check_at(&key, &policy, 1, Micros::new(0));
        assert!(!denied.is_allowed());
        assert_eq!(denied.decided_by(), 1);
        let remaining: Vec<u32> = denied.outcomes().map(|o| o.remaining()).collect();
        assert_eq!(remaining, [2, 0, 7], "nothing taken from minute or log");
        assert!(denied.outcome(0).unwrap().is_allowed());
        assert!(!denied.outcome(1).unwrap().is_allowed());
    }
    // 20 s later one GCRA token is back (60 s / 3): one more passes, and it
    // is the fourth the other two limits have counted.
    let d = backend.check_at(&key, &policy, 1, Micros::new(20 * SEC));
    assert!(d.is_allowed());
    let remaining: Vec<u32> = d.outcomes().map(|o| o.remaining()).collect();
    assert_eq!(remaining, [1, 0, 6]);
}

#[test]
fn the_most_restrictive_limit_decides_an_admission() {
    let policy = three_limits(false);
    let backend = MemoryBackend::new();
    let key = Key::new("user", "restrictive");
    let d = backend.check_at(&key, &policy, 1, Micros::new(0));
    // Remaining 4, 2 and 9: "burst" binds.
    assert_eq!(d.decided_by(), 1);
    assert_eq!(d.deciding().remaining(), 2);
}

#[test]
fn the_longest_wait_decides_a_denial() {
    let policy = Policy::builder()
        .limit(
            "second",
            Algorithm::FixedWindow,
            Quota::per_second(1).unwrap(),
        )
        .limit(
            "minute",
            Algorithm::FixedWindow,
            Quota::per_minute(1).unwrap(),
        )
        .build()
        .unwrap();
    let backend = MemoryBackend::new();
    let key = Key::new("user", "longest");
    assert!(backend
        .check_at(&key, &policy, 1, Micros::new(0))
        .is_allowed());
    let d = backend.check_at(&key, &policy, 1, Micros::new(0));
    assert_eq!(d.decided_by(), 1, "the minute window waits longer");
    assert_eq!(d.retry_after().unwrap().as_secs(), 60);
}

#[test]
fn counted_denials_keep_a_hammering_client_out_but_stop_at_capacity() {
    let backend = MemoryBackend::new();
    let lenient = Policy::single(Algorithm::SlidingLog, Quota::per_minute(3).unwrap()).unwrap();
    let strict = Policy::builder()
        .limit(
            "3/min",
            Algorithm::SlidingLog,
            Quota::per_minute(3).unwrap(),
        )
        .count_denied(true)
        .build()
        .unwrap();
    assert!(strict.counts_denied() && !lenient.counts_denied());
    // Both: three at 0:00, then one attempt every 10 s until 1:30.
    for (policy, name) in [(&lenient, "lenient"), (&strict, "strict")] {
        let key = Key::new(name, "hammer");
        for _ in 0..3 {
            assert!(backend
                .check_at(&key, policy, 1, Micros::new(0))
                .is_allowed());
        }
        let admitted: Vec<u64> = (1..=9)
            .map(|i| i * 10 * SEC)
            .filter(|&t| {
                backend
                    .check_at(&key, policy, 1, Micros::new(t))
                    .is_allowed()
            })
            .collect();
        match name {
            // The three from 0:00 leave at 1:00, making room for 1:00, 1:10, 1:20.
            "lenient" => assert_eq!(admitted, [60 * SEC, 70 * SEC, 80 * SEC]),
            // Every attempt is counted, so the log stays full: shut out.
            _ => assert!(admitted.is_empty(), "{admitted:?}"),
        }
    }
    // A client that stops is free again one window after its last attempt.
    let key_strict = Key::new("strict", "hammer");
    assert!(backend
        .check_at(&key_strict, &strict, 1, Micros::new(150 * SEC))
        .is_allowed());
}

#[test]
fn counted_denials_count_against_every_limit() {
    let policy = three_limits(true);
    let backend = MemoryBackend::new();
    let key = Key::new("user", "counted");
    for _ in 0..3 {
        assert!(backend
            .check_at(&key, &policy, 1, Micros::new(0))
            .is_allowed());
    }
    let denied = backend.check_at(&key, &policy, 1, Micros::new(0));
    assert!(!denied.is_allowed());
    let remaining: Vec<u32> = denied.outcomes().map(|o| o.remaining()).collect();
    assert_eq!(remaining, [1, 0, 6], "the denied request was counted");
}

#[test]
fn invalid_policies_name_their_problem() {
    let q = Quota::per_second(1).unwrap();
    let err = |b: tower_ratelimit::policy::PolicyBuilder| b.build().unwrap_err();

    assert_eq!(err(Policy::builder()), PolicyError::Empty);
    let dup =
        Policy::builder()
            .limit("a", Algorithm::Gcra, q)
            .limit("a", Algorithm::FixedWindow, q);
    assert_eq!(
        err(dup).to_string(),
        "invalid policy: two limits are named \"a\""
    );
    let many = (0..9).fold(Policy::builder(), |b, i| {
        b.limit(format!("l{i}"), Algorithm::Gcra, q)
    });
    assert!(err(many)
        .to_string()
        .contains("9 limits, more than the maximum of 8"));
    let quote = Policy::builder().limit("a\"b", Algorithm::Gcra, q);
    assert!(err(quote)
        .to_string()
        .starts_with("invalid limit name \"a\\\"b\""));
    let empty = Policy::builder().limit("", Algorithm::Gcra, q);
    assert!(matches!(err(empty), PolicyError::InvalidName(_)));
    let burst = Policy::builder().limit("w", Algorithm::FixedWindow, q.with_burst(5).unwrap());
    assert!(err(burst).to_string().contains("fixed-window has no burst"));
    // Any quota is fine for the sliding window, however large.
    let huge = Policy::builder().limit(
        "d",
        Algorithm::SlidingWindow,
        Quota::per_day(u32::MAX).unwrap(),
    );
    assert!(huge.build().is_ok());
}

#[test]
fn policies_parse_from_lists() {
    let p: Policy = "10/s; 100/min; 1000/h".parse().unwrap();
    let names: Vec<&str> = p.limits().iter().map(|l| l.name()).collect();
    assert_eq!(names, ["10/s", "100/min", "1000/h"]);
    assert!(p
        .limits()
        .iter()
        .all(|l| l.algorithm() == Algorithm::SlidingWindow));

    let p = Policy::parse_with(
        "burst = 10/s burst 20 ; daily=5000/day",
        Algorithm::TokenBucket,
    )
    .unwrap();
    assert_eq!(p.limits()[0].name(), "burst");
    assert_eq!(p.limits()[0].capacity(), 20);
    assert_eq!(p.limits()[1].quota(), Quota::per_day(5000).unwrap());

    let err = "10/s; 100/fortnight".parse::<Policy>().unwrap_err();
    assert!(err.to_string().contains("\"fortnight\""), "{err}");
    let err = "10/s;".parse::<Policy>().unwrap_err();
    assert!(err.to_string().contains("expected a limit"), "{err}");
}

/// One key at an admin-set `4000000/h` sliding log grew the process by
/// 56 MB in 30 s: a log keeps an entry per admitted request. Logs longer
/// than 100,000 entries a window are refused when built, unless raised.
#[test]
fn a_sliding_log_longer_than_the_maximum_is_refused_when_built() {
    use tower_ratelimit::policy::{PolicyBuilder, MAX_LOG_ENTRIES};
    let err = Policy::parse_with("4000000/h", Algorithm::SlidingLog).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("4000000") && text.contains("sliding-window"),
        "{text}"
    );
    assert!(Policy::parse_with("100000/h", Algorithm::SlidingLog).is_ok());
    assert_eq!(MAX_LOG_ENTRIES, 100_000);
    // The counter has no such limit; a builder may raise the maximum.
    assert!(Policy::parse_with("4000000/h", Algorithm::SlidingWindow).is_ok());
    let raised: Result<Policy, _> = PolicyBuilder::default()
        .limit("big", Algorithm::SlidingLog, "4000000/h".parse().unwrap())
        .max_log_entries(4_000_000)
        .build();
    assert!(raised.is_ok());
}
