//! The Redis backend against real `redis-server` processes the tests start.
#![cfg(feature = "redis")]

use std::num::NonZeroU16;
use std::time::{Duration, Instant};

use crate::support::conformance::{limit_strategy, observed, penalty, penalty_strategy, policy};
use crate::support::{state_parts, RedisServer, AGREE};
use proptest::prelude::*;
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::backend::{KeyFormat, MemoryBackend};
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// A Redis server of the test's own, a runtime, a backend on that server
/// (as an ACL user with the least privilege), and a memory backend to
/// compare it with.
fn both() -> (
    RedisServer,
    tokio::runtime::Runtime,
    RedisBackend,
    MemoryBackend,
) {
    both_in(KeyFormat::default())
}

/// [`both`], the Redis backend writing keys in `format`.
fn both_in(
    format: KeyFormat,
) -> (
    RedisServer,
    tokio::runtime::Runtime,
    RedisBackend,
    MemoryBackend,
) {
    let server = RedisServer::start();
    let rt = runtime();
    // As the least-privileged user README shows: the whole suite passes
    // with only the keys and commands it grants.
    let redis = connect_in(&rt, &server.limiter_url(), format);
    (server, rt, redis, MemoryBackend::new())
}

/// A backend on `url` writing keys in `format`.
fn connect_in(rt: &tokio::runtime::Runtime, url: &str, format: KeyFormat) -> RedisBackend {
    rt.block_on(
        RedisBackend::builder(url)
            .key_format(format)
            .timeout(AGREE)
            .connect(),
    )
    .unwrap()
}

/// The packed format over one shard: every client's state in one hash.
const ONE_HASH: KeyFormat = KeyFormat::Packed {
    shards: NonZeroU16::MIN,
};

/// The compact format (the default), or the packed one over one shard
/// (every client in one hash) or a few.
fn formats() -> impl Strategy<Value = KeyFormat> {
    prop_oneof![
        Just(KeyFormat::Compact),
        Just(ONE_HASH),
        Just(KeyFormat::PACKED),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Replay `trace` (gap, cost) from `start` through both backends under
/// `policy`, Redis keys written in `format`, requiring the same decision at
/// every step.
fn replay_agrees(
    format: KeyFormat,
    policy: &Policy,
    trace: &[(u64, u32)],
    start: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let (_server, rt, redis, memory) = both_in(format);
    let key = Key::new("user", "conformance");
    let mut now = start;
    for (i, &(gap, cost)) in trace.iter().enumerate() {
        now += gap;
        let expected = memory.check_at(&key, policy, cost, Micros::new(now));
        let actual = rt
            .block_on(redis.check_at(&key, policy, cost, Micros::new(now)))
            .unwrap();
        prop_assert_eq!(
            observed(&actual),
            observed(&expected),
            "request {} at {} cost {} under {:?}",
            i,
            now,
            cost,
            policy
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The same trace through the memory backend and the Redis script gives
    /// identical decisions, request by request, for every algorithm and mix
    /// of limits: the math has one meaning in both languages.
    #[test]
    fn redis_decides_exactly_as_memory_does(
        format in formats(),
        limits in prop::collection::vec(limit_strategy(), 1..=3),
        count_denied in any::<bool>(),
        penalized in penalty_strategy(),
        trace in prop::collection::vec((prop_oneof![Just(0u64), 0u64..400_000, 0u64..90_000_000], 0u32..=14), 1..60),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let mut policy = policy(&limits, count_denied);
        if let Some(p) = penalized {
            policy = policy.to_builder().penalty(penalty(p)).build().unwrap();
        }
        replay_agrees(format, &policy, &trace, start)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// An adaptive limit's checks at scaled capacities: the same policy,
    /// its numbers scaled by a factor that moves between requests (the
    /// identities kept), decides the same on both backends, for every
    /// algorithm and mix of limits.
    #[test]
    fn checks_at_scaled_capacities_agree_too(
        format in formats(),
        limits in prop::collection::vec(limit_strategy(), 1..=3),
        trace in prop::collection::vec((prop_oneof![Just(0u64), 0u64..400_000, 0u64..30_000_000], 0u32..=6, 0usize..5), 1..60),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let base = policy(&limits, false);
        let factors = [1.0, 0.75, 0.5, 0.25, 0.1];
        let (_server, rt, redis, memory) = both_in(format);
        let key = Key::new("user", "scaled");
        let mut now = start;
        for (i, &(gap, cost, f)) in trace.iter().enumerate() {
            now += gap;
            let scaled = base.scaled(factors[f]);
            for (a, b) in scaled.limits().iter().zip(base.limits()) {
                prop_assert_eq!(a.identity(), b.identity());
            }
            let expected = memory.check_at(&key, &scaled, cost, Micros::new(now));
            let actual = rt.block_on(redis.check_at(&key, &scaled, cost, Micros::new(now))).unwrap();
            prop_assert_eq!(observed(&actual), observed(&expected), "request {} at factor {}", i, factors[f]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Calendar quotas — weeks, months from any day (31 included: the last
    /// day of shorter months), years, at offsets east and west of UTC —
    /// beside a plain limit: both backends end each period at the same
    /// microsecond, over traces that cross many month, leap-day and year
    /// ends.
    #[test]
    fn calendar_windows_agree_too(
        format in formats(),
        period in 0usize..3,
        day in prop_oneof![Just(1u8), 28u8..=31, 1u8..=31],
        offset in prop_oneof![Just(0i16), -1439i16..=1439],
        limit in 1u32..=8,
        with_plain in any::<bool>(),
        trace in prop::collection::vec((prop_oneof![Just(0u64), 0u64..3_600_000_000, 0u64..40 * 86_400_000_000], 0u32..=4), 1..60),
        start in 1_700_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let mut quota = [Quota::per_week, Quota::per_month, Quota::per_year][period](limit).unwrap();
        if period == 1 {
            quota = quota.starting_on_day(day).unwrap();
        }
        quota = quota.utc_offset(offset).unwrap();
        let mut builder = Policy::builder().limit("calendar", Algorithm::FixedWindow, quota);
        if with_plain {
            builder = builder.limit("plain", Algorithm::FixedWindow, Quota::per_day(limit + 2).unwrap());
        }
        replay_agrees(format, &builder.build().unwrap(), &trace, start)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Settling — giving back what an admitted request did not use, or
    /// charging what it used beyond its reservation — means the same on both
    /// backends, for every algorithm: refunds from the newest entries of a
    /// log, the current window (then the previous one) of a counter, the
    /// fill of a bucket; charges past the limit up to its capacity.
    #[test]
    fn settling_agrees_too(
        format in formats(),
        limits in prop::collection::vec(limit_strategy(), 1..=3),
        trace in prop::collection::vec(
            (prop_oneof![Just(0u64), 0u64..400_000, 0u64..90_000_000], 0u32..=6, prop::option::of(0u32..=8)),
            1..50,
        ),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let (_server, rt, redis, memory) = both_in(format);
        let policy = policy(&limits, false);
        let key = Key::new("user", "settling");
        let mut now = start;
        for (i, &(gap, cost, settle)) in trace.iter().enumerate() {
            now += gap;
            let at = Micros::new(now);
            let expected = memory.check_at(&key, &policy, cost, at);
            let actual = rt.block_on(redis.check_at(&key, &policy, cost, at)).unwrap();
            prop_assert_eq!(observed(&actual), observed(&expected), "check {} at {}", i, now);
            if let (Some(used), true) = (settle, expected.is_allowed()) {
                now += gap / 3;
                let later = Micros::new(now);
                let expected = memory.settle_at(&key, &policy, cost, used, later);
                let actual = rt.block_on(redis.settle_at(&key, &policy, cost, used, later)).unwrap();
                prop_assert_eq!(observed(&actual), observed(&expected), "settle {} of {} to {} under {:?}", i, cost, used, policy);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The common case — one limit, no penalty box, denials not counted —
    /// has a lean script of its own (`check_one.lua`): it too decides as the
    /// memory backend does, for every algorithm.
    #[test]
    fn one_limit_decides_as_memory_does(
        format in formats(),
        limit in limit_strategy(),
        trace in prop::collection::vec((prop_oneof![Just(0u64), 0u64..400_000, 0u64..90_000_000], 0u32..=14), 1..60),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        replay_agrees(format, &policy(&[limit], false), &trace, start)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Taking a lease — give units back, then take `want` units at once if
    /// they fit, else only the request's cost — decides as the memory
    /// backend does when given back the same units (a settlement to 0) and
    /// asked for `want`, then for the cost.
    #[test]
    fn leases_agree_too(
        format in formats(),
        limits in prop::collection::vec(limit_strategy(), 1..=3),
        trace in prop::collection::vec(
            (prop_oneof![Just(0u64), 0u64..400_000, 0u64..90_000_000], 1u32..=4, 0u32..=12, 0u32..=6),
            1..40,
        ),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let (_server, rt, redis, memory) = both_in(format);
        let policy = policy(&limits, false);
        let key = Key::new("user", "leasing");
        let mut now = start;
        for (i, &(gap, cost, want, back)) in trace.iter().enumerate() {
            now += gap;
            let at = Micros::new(now);
            if back > 0 {
                memory.settle_at(&key, &policy, back, 0, at);
            }
            let whole = (want > cost)
                .then(|| memory.check_at(&key, &policy, want, at))
                .filter(|d| d.is_allowed());
            let (expected, taken) = match whole {
                Some(d) => (d, want),
                None => {
                    let d = memory.check_at(&key, &policy, cost, at);
                    let taken = if d.is_allowed() { cost } else { 0 };
                    (d, taken)
                }
            };
            let (actual, granted) =
                rt.block_on(redis.lease_at(&key, &policy, cost, want, back, at)).unwrap();
            prop_assert_eq!(observed(&actual), observed(&expected), "lease {} at {}", i, now);
            prop_assert_eq!(granted, u64::from(taken), "units taken, lease {}", i);
        }
    }
}

/// What a trace does with permits of requests in flight.
#[derive(Clone, Debug)]
enum PermitOp {
    /// A request of this cost asks for a permit.
    Acquire(u32),
    /// The n-th permit held (modulo) is given back.
    Release(usize),
    /// The n-th permit held is renewed.
    Renew(usize),
}

fn permit_op() -> impl Strategy<Value = PermitOp> {
    prop_oneof![
        (1u32..=3).prop_map(PermitOp::Acquire),
        any::<usize>().prop_map(PermitOp::Release),
        any::<usize>().prop_map(PermitOp::Renew),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Permits of requests in flight — taken all or nothing beside a rate
    /// limit, given back, renewed, lost when their lease ends — mean the
    /// same on both backends.
    #[test]
    fn permits_agree_too(
        permits in 1u32..=4,
        lease in prop_oneof![Just(1u64), Just(5)],
        rate in prop::option::of(limit_strategy()),
        trace in prop::collection::vec((prop_oneof![Just(0u64), 0u64..700_000, 0u64..3_000_000], permit_op()), 1..50),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
        format in formats(),
    ) {
        let (_server, rt, redis, memory) = both_in(format);
        let mut builder = Policy::builder()
            .with(tower_ratelimit::Limit::concurrent("flight", permits).and_then(|l| l.lease(Duration::from_secs(lease))).unwrap());
        if let Some((alg, limit, secs, _)) = rate {
            builder = builder.limit("rate", Algorithm::ALL[alg], Quota::new(limit, Duration::from_secs(secs)).unwrap());
        }
        let policy = builder.build().unwrap();
        let key = Key::new("user", "in-flight");
        let mut held: Vec<(Micros, u32)> = Vec::new();
        let mut now = start;
        for (i, (gap, op)) in trace.iter().enumerate() {
            now += gap;
            let at = Micros::new(now);
            let (expected, actual) = match *op {
                PermitOp::Acquire(cost) => (
                    memory.check_at(&key, &policy, cost, at),
                    rt.block_on(redis.check_at(&key, &policy, cost, at)).unwrap(),
                ),
                PermitOp::Release(n) | PermitOp::Renew(n) if !held.is_empty() => {
                    let renew = matches!(op, PermitOp::Renew(_));
                    let (permit, cost) = held.remove(n % held.len());
                    let expected = memory.permit_at(&key, &policy, permit, cost, renew, at);
                    let actual = rt.block_on(redis.permit_at(&key, &policy, permit, cost, renew, at)).unwrap();
                    if let (true, Some(renewed)) = (renew, expected.permit()) {
                        held.push((renewed, cost));
                    }
                    (expected, actual)
                }
                _ => continue,
            };
            prop_assert_eq!(observed(&actual), observed(&expected), "step {} ({:?}) at {} under {:?}", i, op, now, policy);
            if let (PermitOp::Acquire(cost), Some(permit)) = (op, expected.permit()) {
                held.push((permit, *cost));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Sliding windows with huge limits and long windows, where
    /// `previous × overlap` is far beyond the 2^53 that Lua's doubles hold
    /// exactly: the script's exact arithmetic still agrees with Rust's u128.
    #[test]
    fn huge_sliding_windows_agree_too(
        limit in prop_oneof![Just(u32::MAX), 1_000_000u32..=u32::MAX],
        days in prop_oneof![Just(1u64), Just(30), Just(366)],
        trace in prop::collection::vec((0u64..=3, 0u32..=u32::MAX), 1..25),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let (_server, rt, redis, memory) = both();
        let quota = Quota::new(limit, Duration::from_secs(days * 86_400)).unwrap();
        let policy = Policy::single(Algorithm::SlidingWindow, quota).unwrap();
        let key = Key::new("user", "huge");
        let window = days * 86_400_000_000;
        let mut now = start;
        for (i, &(quarters, cost)) in trace.iter().enumerate() {
            // Steps of a quarter window plus an odd microsecond count.
            now += quarters * (window / 4) + 7_919;
            let expected = memory.check_at(&key, &policy, cost, Micros::new(now));
            let actual = rt.block_on(redis.check_at(&key, &policy, cost, Micros::new(now))).unwrap();
            prop_assert_eq!(observed(&actual), observed(&expected), "request {} at {} cost {}", i, now, cost);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// A window's state is one integer while its counts stay below 1,000
    /// and its end is a whole millisecond, and text otherwise (common.lua,
    /// lean_fixed_window.lua): decisions cross those edges both ways as
    /// memory's do, in the lean scripts (one limit) and the general one
    /// (beside a second limit).
    #[test]
    fn windows_agree_across_a_thousand_requests(
        format in formats(),
        sliding in any::<bool>(),
        beside_another in any::<bool>(),
        limit in 980u32..=2_100,
        window in prop_oneof![Just(10_000_000u64), Just(2_000_500)],
        trace in prop::collection::vec((prop_oneof![Just(0u64), 0u64..300_000, 0u64..25_000_000], 0u32..=150), 1..80),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let algorithm = [Algorithm::FixedWindow, Algorithm::SlidingWindow][usize::from(sliding)];
        let quota = Quota::new(limit, Duration::from_micros(window)).unwrap();
        let mut policy = Policy::builder().limit("w", algorithm, quota);
        if beside_another {
            policy = policy.limit("g", Algorithm::Gcra, Quota::per_second(1_000_000).unwrap());
        }
        replay_agrees(format, &policy.build().unwrap(), &trace, start)?;
    }
}

/// A crafted case where doing the sliding window's arithmetic in doubles
/// would admit a request it must deny: the previous window's weight,
/// 4,294,967,071 × 77,820,484,831 / 86,400,000,000, is just above an
/// integer, and a double rounds the product down past it.
#[test]
fn where_doubles_would_be_wrong_the_script_is_exact() {
    let (_server, rt, redis, memory) = both();
    let policy =
        Policy::single(Algorithm::SlidingWindow, Quota::per_day(u32::MAX).unwrap()).unwrap();
    let key = Key::new("user", "precision");
    let day = 86_400_000_000u64;
    let start = 19_000 * day; // a window boundary
    let later = start + day + 8_579_515_169; // overlap 77,820,484,831 µs
                                             // Exactly the weight (3,868,477,082) plus this cost is one over the limit.
    let cost = u32::MAX - 3_868_477_082 + 1;
    for (t, c, allowed) in [
        (start, 4_294_967_071, true),
        (later, cost, false),
        (later, cost - 1, true),
    ] {
        let expected = memory.check_at(&key, &policy, c, Micros::new(t));
        let actual = rt
            .block_on(redis.check_at(&key, &policy, c, Micros::new(t)))
            .unwrap();
        assert_eq!(expected.is_allowed(), allowed, "memory at {t} cost {c}");
        assert_eq!(
            observed(&actual),
            observed(&expected),
            "redis at {t} cost {c}"
        );
    }
}

#[test]
fn one_server_many_keys_many_algorithms() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = rt.block_on(server.backend());
    for algorithm in Algorithm::ALL {
        let policy = Policy::single(algorithm, Quota::per_minute(5).unwrap()).unwrap();
        for user in ["a", "b"] {
            let key = Key::new("user", user);
            let admitted = (0..8)
                .filter(|_| {
                    rt.block_on(redis.check_at(
                        &key,
                        &policy,
                        1,
                        Micros::new(1_700_000_000_000_000),
                    ))
                    .unwrap()
                    .is_allowed()
                })
                .count();
            assert_eq!(admitted, 5, "{algorithm} {user}");
        }
    }
}

/// `peek_many` reads each key's state under its policy, in order, as a
/// check of cost 0 would: on Redis in one pipeline, on memory one by one;
/// the two agree, and nothing is consumed.
#[test]
fn many_keys_read_at_once_agree_with_memory() {
    use tower_ratelimit::backend::Backend;
    let (_server, rt, redis, memory) = both();
    let mut asks = Vec::new();
    for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        let policy = Policy::parse_with("a = 5/min; b = 20/h", algorithm).unwrap();
        let key = Key::new("user", format!("peek-{i}"));
        for _ in 0..i {
            rt.block_on(redis.check(&key, &policy, 1)).unwrap();
            memory.check_now(&key, &policy, 1);
        }
        asks.push((key, policy));
    }
    let remaining = |decisions: Vec<tower_ratelimit::Decision>| -> Vec<Vec<u32>> {
        decisions
            .iter()
            .map(|d| d.outcomes().map(|o| o.remaining()).collect())
            .collect()
    };
    let on_redis = remaining(rt.block_on(redis.peek_many(asks.clone())).unwrap());
    let on_memory = remaining(rt.block_on(memory.peek_many(asks.clone())).unwrap());
    assert_eq!(on_redis, on_memory);
    assert_eq!(on_redis[3], [2, 17], "{on_redis:?}");
    // A read consumes nothing.
    assert_eq!(
        remaining(rt.block_on(redis.peek_many(asks)).unwrap()),
        on_redis
    );
}

/// A client or connection manager the user built carries the decisions,
/// and a URL the builder cannot use is an error that says why.
#[test]
fn a_client_of_your_own_and_the_url_forms() {
    use tower_ratelimit::backend::Backend;
    let server = RedisServer::start();
    let rt = runtime();
    let policy: Policy = "3/min".parse().unwrap();
    let admitted = |backend: &RedisBackend, user: &str| {
        let key = Key::new("user", user);
        (0..5)
            .filter(|_| {
                rt.block_on(backend.check(&key, &policy, 1))
                    .unwrap()
                    .is_allowed()
            })
            .count()
    };
    let client = redis::Client::open(server.url()).unwrap();
    let from_client = rt
        .block_on(
            RedisBackend::builder_from_client(client.clone())
                .timeout(AGREE)
                .connect(),
        )
        .unwrap();
    assert_eq!(admitted(&from_client, "client"), 3);
    let manager = rt
        .block_on(redis::aio::ConnectionManager::new(client))
        .unwrap();
    let from_manager = rt
        .block_on(
            RedisBackend::builder_from_connection(manager)
                .timeout(AGREE)
                .connect(),
        )
        .unwrap();
    assert_eq!(admitted(&from_manager, "manager"), 3);
    // The same limits, whichever way they were reached.
    assert_eq!(admitted(&from_manager, "client"), 0);

    for (url, says) in [
        ("redis+sentinel://127.0.0.1:1", "master's name"),
        ("127.0.0.1:6379", "not a Redis URL"),
    ] {
        let err = rt
            .block_on(RedisBackend::builder(url).timeout(AGREE).connect())
            .unwrap_err();
        assert!(err.to_string().contains(says), "{url}: {err}");
    }
}

/// Each way of failing to reach Redis is told by its cause, once when it
/// starts, again when it changes, and when Redis decides again — not as a
/// timeout on every request.
#[test]
fn causes_are_told_when_they_start_change_and_clear() {
    use std::sync::{Arc, Mutex};
    use tower_ratelimit::backend::{Backend, Cause, StoreHealth};
    let rt = runtime();
    let _runtime = rt.enter();
    let (key, policy) = (
        Key::new("user", "causes"),
        "5/min".parse::<Policy>().unwrap(),
    );
    let cause_of = |backend: &RedisBackend| {
        let started = Instant::now();
        let err = rt.block_on(backend.check(&key, &policy, 1)).unwrap_err();
        // Told at once, not after the 2 s timeout.
        assert!(started.elapsed() < Duration::from_millis(1_500), "{err}");
        err.cause()
    };
    let lazy = |url: &str, told: &Arc<Mutex<Vec<StoreHealth>>>| {
        let told = Arc::clone(told);
        RedisBackend::builder(url)
            .timeout(Duration::from_secs(2))
            .on_health_change(move |h| told.lock().unwrap().push(h.clone()))
            .connect_lazy()
            .unwrap()
    };

    // Nothing listens: refused. Then a server starts there: deciding.
    let port = RedisServer::unused_port();
    let told = Arc::default();
    let backend = lazy(&format!("redis://127.0.0.1:{port}"), &told);
    assert_eq!(backend.health(), StoreHealth::Unknown);
    for _ in 0..5 {
        assert_eq!(cause_of(&backend), Cause::Refused);
    }
    let server = RedisServer::start_on_port(port);
    assert!(rt.block_on(backend.check(&key, &policy, 1)).is_ok());
    let causes: Vec<_> = told
        .lock()
        .unwrap()
        .iter()
        .map(|h| match h {
            StoreHealth::Failing { cause, .. } => Some(*cause),
            _ => None,
        })
        .collect();
    assert_eq!(causes, [Some(Cause::Refused), None], "told once each");
    assert_eq!(backend.health(), StoreHealth::Deciding);

    // A wrong password; a user that may not run the scripts.
    let url = server.limiter_url();
    let wrong = lazy(&url.replace("limiter-secret", "guess"), &Arc::default());
    assert_eq!(cause_of(&wrong), Cause::Authentication);
    assert!(matches!(
        wrong.health(),
        StoreHealth::Failing {
            cause: Cause::Authentication,
            ..
        }
    ));
    assert_eq!(server.cli(&["ACL", "SETUSER", "limiter", "-evalsha"]), "OK");
    assert_eq!(cause_of(&lazy(&url, &Arc::default())), Cause::Permission);

    // A host name that does not resolve (`.invalid` never does).
    let nowhere = lazy("redis://no-such-host.invalid:6379", &Arc::default());
    assert_eq!(cause_of(&nowhere), Cause::UnknownHost);
}

/// A wrong password or a missing permission is an error that says so, at
/// once: not a hang, not "no answer within the timeout".
#[test]
fn a_wrong_password_or_a_missing_permission_says_so_at_once() {
    use tower_ratelimit::backend::Backend;
    let server = RedisServer::start();
    let rt = runtime();
    let url = server.limiter_url();
    let wrong = url.replace("limiter-secret", "guess");
    let (key, policy) = (Key::new("user", "acl"), "5/min".parse::<Policy>().unwrap());

    let started = Instant::now();
    let err = rt
        .block_on(RedisBackend::builder(&wrong).timeout(AGREE).connect())
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(err.to_string().contains("authentication failed"), "{err}");

    // Connected lazily (a service that starts while Redis is down): the
    // first decision fails with the cause, well within its 2 s timeout.
    let lazy = {
        let _runtime = rt.enter();
        RedisBackend::builder(&wrong)
            .timeout(Duration::from_secs(2))
            .connect_lazy()
            .unwrap()
    };
    let started = Instant::now();
    let err = rt.block_on(lazy.check(&key, &policy, 1)).unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(500), "{err}");
    assert!(err.to_string().contains("authentication failed"), "{err}");

    // A user that may not run the scripts: the error names the permission.
    assert_eq!(server.cli(&["ACL", "SETUSER", "limiter", "-evalsha"]), "OK");
    let backend = rt
        .block_on(RedisBackend::builder(&url).timeout(AGREE).connect())
        .unwrap();
    let err = rt.block_on(backend.check(&key, &policy, 1)).unwrap_err();
    assert!(
        err.to_string()
            .contains("no permissions to run the 'evalsha' command"),
        "{err}"
    );
}

#[test]
fn server_time_decides_and_keys_expire_with_their_state() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = rt.block_on(server.backend());
    let key = Key::new("user", "ttl");
    for algorithm in Algorithm::ALL {
        // 2 per second: state matters for at most a second or two.
        let policy = Policy::single(algorithm, Quota::per_second(2).unwrap()).unwrap();
        assert!(rt
            .block_on(redis.check(&key, &policy, 1))
            .unwrap()
            .is_allowed());
        assert!(rt
            .block_on(redis.check(&key, &policy, 1))
            .unwrap()
            .is_allowed());
        assert!(
            !rt.block_on(redis.check(&key, &policy, 1))
                .unwrap()
                .is_allowed(),
            "{algorithm}"
        );
        for redis_key in redis.redis_keys(&key, &policy.limits()[0]) {
            let ttl: i64 = server.cli(&["PTTL", &redis_key]).parse().unwrap();
            // Sliding window: the count matters until the end of the next
            // window. Never without a TTL (-1); a window that ended just now
            // leaves under a millisecond (0) or no key at all (-2).
            assert!(
                ttl == -2 || (0..=2_000).contains(&ttl),
                "{algorithm}: {redis_key} PTTL {ttl}"
            );
        }
    }
    // Two and a half seconds later every key is gone: idle keys vanish.
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(server.cli(&["DBSIZE"]), "0");
}

use tower_ratelimit::backend::Backend;

#[test]
fn the_script_is_reloaded_after_a_flush_or_a_restart() {
    let mut server = RedisServer::start();
    let rt = runtime();
    let redis = rt
        .block_on(
            RedisBackend::builder(&server.url())
                .timeout(Duration::from_secs(2))
                .connect(),
        )
        .unwrap();
    let policy: Policy = "3/min".parse().unwrap();
    let key = Key::new("user", "noscript");
    assert!(rt
        .block_on(redis.check(&key, &policy, 1))
        .unwrap()
        .is_allowed());
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    let d = rt.block_on(redis.check(&key, &policy, 1)).unwrap();
    assert_eq!(
        d.deciding().remaining(),
        1,
        "state survived, script reloaded"
    );
    // A restart loses scripts and data; the connection comes back by itself.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(5);
    let d = loop {
        match rt.block_on(redis.check(&key, &policy, 1)) {
            Ok(d) => break d,
            Err(e) => {
                assert!(Instant::now() < deadline, "never reconnected: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert_eq!(d.deciding().remaining(), 2);
}

#[test]
fn a_dead_server_fails_fast_instead_of_waiting() {
    let mut server = RedisServer::start();
    let rt = runtime();
    let redis = rt
        .block_on(
            RedisBackend::builder(&server.url())
                .timeout(Duration::from_millis(200))
                .connect(),
        )
        .unwrap();
    let policy: Policy = "3/min".parse().unwrap();
    server.kill();
    let start = Instant::now();
    let result = rt.block_on(redis.check(&Key::new("user", "x"), &policy, 1));
    assert!(result.is_err());
    assert!(
        start.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn hostile_identities_get_their_own_keys_in_one_slot() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = rt.block_on(server.backend());
    let policy = Policy::builder()
        .limit("a", Algorithm::Gcra, Quota::per_minute(1).unwrap())
        .limit("b", Algorithm::SlidingLog, Quota::per_minute(1).unwrap())
        .limit("c", Algorithm::FixedWindow, Quota::per_minute(1).unwrap())
        .build()
        .unwrap();
    let hostile: Vec<Vec<u8>> = vec![
        b"x".to_vec(),
        b"x}:a:gcra:1/min".to_vec(),
        b"{x}".to_vec(),
        b"x\n".to_vec(),
        b"x\0".to_vec(),
        b"}{".to_vec(),
        vec![b'x'; 1 << 20],
        vec![b'x'; (1 << 20) + 1],
    ];
    let mut seen = std::collections::HashSet::new();
    for value in &hostile {
        let key = Key::new("user", value);
        let d = rt.block_on(redis.check(&key, &policy, 1)).unwrap();
        assert!(
            d.is_allowed(),
            "a fresh identity for {:?}",
            String::from_utf8_lossy(&value[..value.len().min(20)])
        );
        for limit in policy.limits() {
            for k in redis.redis_keys(&key, limit) {
                assert!(k.len() < 60, "keys stay short: {k}");
                // One hash tag, the first braces, holding 90 bits of
                // URL-safe base64: nothing a client sent.
                let tag = &k[k.find('{').unwrap() + 1..k.find('}').unwrap()];
                assert!(
                    tag.len() == 15
                        && tag
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                    "{k}"
                );
                // A window's state of its own version (it may be one
                // integer, which servers before it would misread).
                let version = match limit.algorithm() {
                    Algorithm::FixedWindow => "rl:5{",
                    _ => "rl:3{",
                };
                assert!(k.starts_with(version), "the format's version: {k}");
                assert!(seen.insert(k));
            }
        }
        assert!(!rt
            .block_on(redis.check(&key, &policy, 1))
            .unwrap()
            .is_allowed());
    }
}

#[test]
fn valkey_too_when_it_is_installed() {
    let Some(server) = crate::support::valkey() else {
        return;
    };
    let rt = runtime();
    for format in [KeyFormat::Compact, ONE_HASH] {
        let redis = connect_in(&rt, &server.url(), format);
        let memory = MemoryBackend::new();
        for algorithm in Algorithm::ALL {
            let policy = Policy::single(algorithm, Quota::per_minute(7).unwrap()).unwrap();
            // Several clients, so packed ones share a hash.
            for client in 0..3 {
                let key = Key::new("user", format!("{algorithm}-{client}"));
                for t in 0..20u64 {
                    let now = 1_700_000_000_000_000 + t * 3_000_000;
                    let expected = memory.check_at(&key, &policy, 1, Micros::new(now));
                    let actual = rt
                        .block_on(redis.check_at(&key, &policy, 1, Micros::new(now)))
                        .unwrap();
                    assert_eq!(
                        observed(&actual),
                        observed(&expected),
                        "{algorithm} at {t} in {format:?}"
                    );
                }
            }
        }
    }
}

/// The status of one request through `svc`.
async fn status<S, B>(svc: &S) -> u16
where
    S: tower::Service<http::Request<()>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    svc.clone()
        .oneshot(http::Request::new(()))
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// What happens when Redis is down: the layer allows, denies, or decides
/// with each server's own memory — as configured, and without waiting past
/// the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_redis_is_down_the_layer_does_what_it_was_told() {
    use std::convert::Infallible;
    use tower::{service_fn, ServiceBuilder};
    use tower_ratelimit::backend::OnBackendError;
    use tower_ratelimit::key::Global;
    use tower_ratelimit::RateLimitLayer;

    let mut server = RedisServer::start();
    // No denial cache: each decision below asks Redis (the cache would keep
    // a denial made before the outage, as Redis would; tested apart).
    let connect = || {
        RedisBackend::builder(&server.url())
            .timeout(Duration::from_millis(100))
            .cache_denials(0)
            .connect()
    };
    let (open, closed, local) = (
        connect().await.unwrap(),
        connect().await.unwrap(),
        connect().await.unwrap(),
    );
    let policy: Policy = "2/min".parse().unwrap();
    let ok = || {
        service_fn(|_: http::Request<()>| async {
            Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from("ok"),
            )))
        })
    };
    let fail_open = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(policy.clone())
                .key(Global)
                .backend(open),
        )
        .service(ok());
    let fail_closed = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(policy.clone())
                .key(Global)
                .backend(closed)
                .on_backend_error(OnBackendError::Deny),
        )
        .service(ok());
    let fall_back = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(policy.clone())
                .key(Global)
                .backend(local.or_fallback(MemoryBackend::new())),
        )
        .service(ok());
    // Up: all three limit through Redis, sharing one budget.
    assert_eq!(status(&fail_open).await, 200);
    assert_eq!(status(&fail_closed).await, 200);
    assert_eq!(status(&fall_back).await, 429);

    server.kill();
    let start = Instant::now();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push((
            status(&fail_open).await,
            status(&fail_closed).await,
            status(&fall_back).await,
        ));
    }
    // Down: open lets everything through, closed lets nothing through (503:
    // the service is short of a part), and the fallback limits locally (2
    // per minute on this server).
    assert_eq!(seen, [(200, 503, 200), (200, 503, 200), (200, 503, 429)]);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

/// A service can start while Redis is down: decisions fail fast until a
/// server appears, then succeed without anyone reconnecting by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_built_while_redis_is_down_works_once_it_is_up() {
    let port = RedisServer::unused_port();
    let redis = RedisBackend::builder(&format!("redis://127.0.0.1:{port}"))
        .timeout(Duration::from_millis(100))
        .connect_lazy()
        .unwrap();
    let policy: Policy = "5/min".parse().unwrap();
    let key = Key::new("user", "early");
    let start = Instant::now();
    assert!(redis.check(&key, &policy, 1).await.is_err());
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );

    let _server = RedisServer::start_on_port(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    let decision = loop {
        match redis.check(&key, &policy, 1).await {
            Ok(d) => break d,
            Err(e) => {
                assert!(Instant::now() < deadline, "never connected: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(decision.is_allowed());
    assert_eq!(decision.deciding().remaining(), 4);
}

#[tokio::test]
async fn a_denied_key_is_denied_locally_until_its_retry_after() {
    use tower_ratelimit::backend::Backend;
    use tower_ratelimit::decision::Origin;
    let server = RedisServer::start();
    let redis = server.backend().await;
    // 2 at once, then one every 500 ms.
    let policy = Policy::single(Algorithm::Gcra, Quota::per_second(2).unwrap()).unwrap();
    let (alice, bob) = (Key::new("user", "alice"), Key::new("user", "bob"));
    for _ in 0..2 {
        assert!(redis.check(&alice, &policy, 1).await.unwrap().is_allowed());
    }
    let denied = redis.check(&alice, &policy, 1).await.unwrap();
    assert_eq!(denied.origin(), Origin::Primary);
    let retry = denied.retry_after().unwrap();

    let calls = server.evalsha_calls();
    for _ in 0..50 {
        let again = redis.check(&alice, &policy, 1).await.unwrap();
        assert!(!again.is_allowed());
        assert_eq!(again.origin(), Origin::Cached);
        // The wait shrinks as time passes, never past the real one.
        assert!(again.retry_after().unwrap() <= retry);
    }
    assert_eq!(
        server.evalsha_calls(),
        calls,
        "no round trip for a known denial"
    );
    assert_eq!(redis.cached_denials(), 1);

    // Another key, a peek, or a cost the denial does not cover: Redis decides.
    assert!(redis.check(&bob, &policy, 1).await.unwrap().is_allowed());
    assert_eq!(
        redis.check(&alice, &policy, 0).await.unwrap().origin(),
        Origin::Primary
    );
    assert_eq!(server.evalsha_calls(), calls + 2);

    // Once the retry-after has passed, Redis decides again, and admits.
    tokio::time::sleep(retry + Duration::from_millis(20)).await;
    let later = redis.check(&alice, &policy, 1).await.unwrap();
    assert!(later.is_allowed());
    assert_eq!(later.origin(), Origin::Primary);
}

#[tokio::test]
async fn denials_that_count_are_never_cached_and_the_cache_is_bounded() {
    use tower_ratelimit::backend::Backend;
    let server = RedisServer::start();
    let redis = RedisBackend::builder(&server.url())
        .cache_denials(32)
        .timeout(AGREE)
        .connect()
        .await
        .unwrap();
    let counting = Policy::builder()
        .limit(
            "strict",
            Algorithm::FixedWindow,
            Quota::per_hour(1).unwrap(),
        )
        .count_denied(true)
        .build()
        .unwrap();
    let key = Key::new("user", "hammer");
    redis.check(&key, &counting, 1).await.unwrap();
    let calls = server.evalsha_calls();
    for _ in 0..10 {
        assert!(!redis.check(&key, &counting, 1).await.unwrap().is_allowed());
    }
    assert_eq!(
        server.evalsha_calls(),
        calls + 10,
        "each denial is counted by Redis"
    );
    assert_eq!(redis.cached_denials(), 0);

    // A flood of denied keys: the cache stays within its size.
    let hourly = Policy::single(Algorithm::FixedWindow, Quota::per_hour(1).unwrap()).unwrap();
    for i in 0..500u32 {
        let key = Key::new("ip", i.to_be_bytes());
        redis.check(&key, &hourly, 1).await.unwrap();
        assert!(!redis.check(&key, &hourly, 1).await.unwrap().is_allowed());
    }
    assert!(redis.cached_denials() <= 32, "{}", redis.cached_denials());
    assert!(redis.cached_denials() > 0);
}

#[tokio::test]
async fn a_denial_made_before_an_outage_holds_through_it() {
    use tower_ratelimit::backend::Backend;
    use tower_ratelimit::decision::Origin;
    let mut server = RedisServer::start();
    let redis = RedisBackend::builder(&server.url())
        .timeout(Duration::from_millis(100))
        .connect()
        .await
        .unwrap()
        .or_fallback(MemoryBackend::new());
    let policy: Policy = "1/min".parse().unwrap();
    let key = Key::new("user", "alice");
    assert!(redis.check(&key, &policy, 1).await.unwrap().is_allowed());
    assert!(!redis.check(&key, &policy, 1).await.unwrap().is_allowed());
    server.kill();
    // Redis said no until the window ends: so does the cache, though Redis
    // is gone and the local fallback has never seen this key.
    let during = redis.check(&key, &policy, 1).await.unwrap();
    assert!(!during.is_allowed());
    assert_eq!(during.origin(), Origin::Cached);
    // A key Redis never denied falls to the fallback.
    let other = redis
        .check(&Key::new("user", "bob"), &policy, 1)
        .await
        .unwrap();
    assert!(other.is_allowed());
    assert_eq!(other.origin(), Origin::Fallback);
}

/// The example server, started with a mistyped password, says why Redis is
/// not deciding on its output (and decides by its failure rule meanwhile).
#[test]
fn the_example_server_prints_why_redis_is_not_deciding() {
    let server = RedisServer::start();
    let url = server.limiter_url().replace("limiter-secret", "typo");
    let mut example = crate::support::example::ExampleServer::start(&[("REDIS_URL", &url)]);
    // One request asks Redis.
    let response = example.get("/api/user", &[]);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let told = example.line_starting("redis: ");
    let told = told.expect("no line about Redis within 10 s");
    assert!(
        told.starts_with("redis: failing (authentication):"),
        "{told}"
    );
}

/// The example server with `REDIS_KEY_FORMAT=packed:8` keeps its clients'
/// states as fields of eight hashes a limit; a value it does not know stops
/// it with one that names the variable and what it takes.
#[test]
fn the_example_server_packs_keys_when_told() {
    let server = RedisServer::start();
    let url = server.url();
    let example = crate::support::example::ExampleServer::start(&[
        ("REDIS_URL", &url),
        ("REDIS_KEY_FORMAT", "packed:8"),
    ]);
    for user in 0..40 {
        let response = example.get("/api/user", &[("x-user-id", &format!("user-{user}"))]);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }
    let keys = server.cli(&["KEYS", "*"]);
    let keys: Vec<&str> = keys.lines().filter(|k| k.starts_with("rl:")).collect();
    assert!(!keys.is_empty() && keys.len() <= 8, "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("rl:6{")), "{keys:?}");
    let fields: usize = keys
        .iter()
        .map(|k| server.cli(&["HLEN", k]).trim().parse::<usize>().unwrap())
        .sum();
    assert_eq!(fields, 40, "one field a client");

    let said =
        crate::support::example::refusal(&[("REDIS_URL", &url), ("REDIS_KEY_FORMAT", "packed:0")]);
    assert!(
        said.contains("REDIS_KEY_FORMAT") && said.contains("packed:<shards>"),
        "{said}"
    );
}

/// Rolling deploys that change the key format: servers writing compact
/// keys and packed ones on one Redis. Neither reads the other's state —
/// never misread as its own — so a client moving between the two has two
/// budgets while both serve: here 10/min lets 20 through. The old keys
/// expire by themselves once their state stops mattering.
#[test]
fn a_rolling_deploy_of_the_key_format_keeps_two_budgets_for_a_window() {
    let server = RedisServer::start();
    let rt = runtime();
    let compact = rt.block_on(server.backend());
    let packed = connect_in(&rt, &server.url(), ONE_HASH);
    let policy: Policy = "limit = 10/min".parse().unwrap();
    let key = Key::new("user", "moving");
    let admitted = |backend: &RedisBackend| {
        (0..15)
            .filter(|_| {
                rt.block_on(backend.check(&key, &policy, 1))
                    .unwrap()
                    .is_allowed()
            })
            .count()
    };
    assert_eq!(admitted(&compact), 10);
    assert_eq!(
        admitted(&packed),
        10,
        "the packed format knows nothing of the compact one"
    );
    assert_eq!(admitted(&compact), 0);
    assert_eq!(admitted(&packed), 0);
    // Under the packed format the sliding window's state is the client's
    // field in a flat hash, which lives as long as its state matters and
    // then to the next whole ten seconds (packed_write.lua), and a
    // millisecond for rounding.
    let hash = &packed.redis_keys(&key, &policy.limits()[0])[0];
    let field = packed.redis_field(&key).unwrap();
    assert!(hash.starts_with("rl:6{0}"), "{hash}");
    assert_eq!(compact.redis_field(&key), None);
    assert_eq!(server.cli(&["OBJECT", "ENCODING", hash]).trim(), "listpack");
    let state = server.cli(&["HGET", hash, &field]);
    let (_, _, count) = state_parts(&state).expect(&state);
    assert_eq!(count, 10, "the window's count: {state}");
    let ttl: i64 = server.cli(&["PTTL", hash]).trim().parse().unwrap();
    assert!((1..=131_001).contains(&ttl), "{ttl}");
    let key_name = &compact.redis_keys(&key, &policy.limits()[0])[0];
    assert!(key_name.starts_with("rl:5{"), "{key_name}");
    // 30 bytes whatever the client's key and the limit's name: the most
    // that fits Redis's smallest allocation of a key's name.
    assert_eq!(key_name.len(), 30, "{key_name}");
    // The compact key expires by itself once its state stops mattering:
    // two windows for the sliding window counter.
    let ttl: i64 = server.cli(&["PTTL", key_name]).trim().parse().unwrap();
    assert!((1..=121_000).contains(&ttl), "{ttl}");
    // A window's state below 1,000 requests is one integer, as Redis keeps
    // it: no text of its own (32 bytes less a key).
    assert_eq!(server.cli(&["OBJECT", "ENCODING", key_name]).trim(), "int");
    assert_eq!(state_parts(&server.cli(&["GET", key_name])).unwrap().2, 10);

    // A GCRA state is one number, kept bare: Redis keeps it as an integer.
    let gcra = Policy::single(Algorithm::Gcra, Quota::per_minute(10).unwrap()).unwrap();
    assert!(rt
        .block_on(compact.check(&key, &gcra, 1))
        .unwrap()
        .is_allowed());
    let name = &compact.redis_keys(&key, &gcra.limits()[0])[0];
    assert_eq!(
        server.cli(&["OBJECT", "ENCODING", name]).trim(),
        "int",
        "{name}"
    );
    let bytes: u64 = server
        .cli(&["MEMORY", "USAGE", name])
        .trim()
        .parse()
        .unwrap();
    // Redis's own count, allocator and all: 72 bytes with Debian's
    // redis-server 7.0 (jemalloc).
    println!("MEMORY USAGE of a GCRA key: {bytes} B");
    assert!(bytes <= 80, "{bytes} B");
}

/// A packed hash, many clients' states as its fields, never loses a state
/// that still matters, and keeps no more than about twice the clients
/// whose states do: here ten rounds of 100 new clients, each round's gone
/// by the next, leave about 110 fields, not 1,000; whether a state is a
/// bare number (GCRA) or a window's counts in one integer.
#[test]
fn packed_keys_forget_clients_gone() {
    // One GCRA token a second: a client's state matters for a second; one
    // request a sliding window of a second: for two.
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow] {
        let policy = Policy::single(algorithm, Quota::per_second(1).unwrap()).unwrap();
        forgets_clients_gone(&policy);
    }
}

fn forgets_clients_gone(policy: &Policy) {
    let server = RedisServer::start();
    let rt = runtime();
    let packed = connect_in(&rt, &server.url(), ONE_HASH);
    let key = Key::new("user", "any");
    let hash = &packed.redis_keys(&key, &policy.limits()[0])[0];
    let start = 1_700_000_000_000_000u64;
    let mut sizes = Vec::new();
    for round in 0..10u64 {
        let at = Micros::new(start + round * 2_000_000);
        let clients: Vec<Key> = (0..100)
            .map(|i| Key::new("user", format!("{round}-{i}")))
            .collect();
        for client in &clients {
            let decision = rt.block_on(packed.check_at(client, policy, 1, at)).unwrap();
            assert!(decision.is_allowed());
        }
        // This round's states all matter still: none was deleted.
        for client in &clients {
            let field = packed.redis_field(client).unwrap();
            assert_ne!(
                server.cli(&["HEXISTS", hash, &field]).trim(),
                "0",
                "round {round}"
            );
            let again = rt.block_on(packed.check_at(client, policy, 1, at)).unwrap();
            assert!(!again.is_allowed(), "round {round}: its budget is spent");
        }
        let fields: u64 = server.cli(&["HLEN", hash]).trim().parse().unwrap();
        sizes.push(fields);
    }
    let bytes: u64 = server
        .cli(&["MEMORY", "USAGE", hash])
        .trim()
        .parse()
        .unwrap();
    let last = *sizes.last().unwrap();
    println!(
        "{policy:?}: fields after each round: {sizes:?}; {} B a field by MEMORY USAGE",
        bytes / last
    );
    assert!(
        sizes.iter().all(|&n| (100..=320).contains(&n)),
        "{policy:?}: {sizes:?}"
    );
}

/// A packed hash's expiry is lengthened only when a state might outlive
/// it, not at every write (packed_write.lua): it still outlives the state
/// of every field in it, whichever algorithm wrote it and however far a
/// client's spending moves its state's end.
#[test]
fn a_packed_hash_outlives_every_state_in_it() {
    use tower_ratelimit::backend::Backend;
    let server = RedisServer::start();
    let rt = runtime();
    let packed = connect_in(&rt, &server.url(), ONE_HASH);
    // 600 a minute: a GCRA unit is 100 ms, so a spend of 300 moves a
    // client's state 30 s on, across the ten-second steps the hash's
    // expiry follows.
    let quota = Quota::per_minute(600).unwrap();
    let policies = [
        Policy::single(Algorithm::Gcra, quota).unwrap(),
        Policy::single(Algorithm::FixedWindow, quota).unwrap(),
        Policy::single(Algorithm::SlidingWindow, quota).unwrap(),
        Policy::builder()
            .limit("a", Algorithm::TokenBucket, quota)
            .limit(
                "b",
                Algorithm::FixedWindow,
                Quota::per_hour(100_000).unwrap(),
            )
            .build()
            .unwrap(),
    ];
    let mut checked = 0;
    for round in 0..4u32 {
        for policy in &policies {
            for client in 0..10u32 {
                let key = Key::new("user", format!("client-{client}"));
                let cost = 1 + (client * 37 + round * 101) % 300;
                rt.block_on(packed.check(&key, policy, cost)).unwrap();
            }
        }
        let keys = server.cli(&["KEYS", "rl:[46]*"]);
        for hash in keys.lines().filter(|k| !k.is_empty()) {
            let ttl_ms: i64 = server.cli(&["PTTL", hash]).trim().parse().unwrap();
            assert!(ttl_ms > 0, "{hash} has an expiry: {ttl_ms}");
            // Redis's time after the PTTL: the expiry is at most then + ttl.
            let time = server.cli(&["TIME"]);
            let mut time = time.lines().map(|n| n.trim().parse::<i64>().unwrap());
            let now_us = time.next().unwrap() * 1_000_000 + time.next().unwrap();
            let fields = server.cli(&["HGETALL", hash]);
            let fields: Vec<&str> = fields.lines().collect();
            for pair in fields.chunks(2) {
                let (ends, _, _) = state_parts(pair[1]).expect(pair[1]);
                let ends = ends as i64;
                assert!(
                    ends <= now_us + (ttl_ms + 1) * 1000,
                    "round {round}: {hash}'s field {} ends {} ms past the hash",
                    pair[0],
                    (ends - now_us) / 1000 - ttl_ms
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 4 * 50, "every client's every state: {checked}");
}

/// The packed format on a server that cannot run its scripts (one older
/// than Redis 7.0, whose PEXPIRE takes no GT; here a server without
/// PEXPIRE) is refused at connect with a message that says why, instead of
/// every decision failing later (and a layer that allows on failure
/// limiting nothing); connected lazily, each decision fails with that
/// message. The compact format, which needs no PEXPIRE, connects and
/// decides.
#[test]
fn the_packed_format_is_refused_by_a_server_that_cannot_run_it() {
    use tower_ratelimit::backend::Cause;
    let server = RedisServer::start_with("redis-server", &["--rename-command", "PEXPIRE", ""]);
    let rt = runtime();
    let builder = |format| {
        RedisBackend::builder(&server.url())
            .key_format(format)
            .timeout(AGREE)
    };
    let connect = |format| rt.block_on(builder(format).connect());
    let refused = connect(KeyFormat::PACKED).unwrap_err();
    assert_eq!(refused.cause(), Cause::UnknownCommand, "{refused}");
    assert!(
        refused.to_string().contains("Redis 7.0") && refused.to_string().contains("PEXPIRE"),
        "{refused}"
    );
    connect(KeyFormat::Compact).unwrap();

    // Connected lazily, the same question is asked before the first call,
    // and every decision fails with its answer (the script's own error
    // would name no command).
    let lazy = |format| {
        let _guard = rt.enter();
        builder(format).connect_lazy().unwrap()
    };
    let policy = Policy::single(Algorithm::Gcra, Quota::per_minute(5).unwrap()).unwrap();
    let alice = Key::new("user", "alice");
    let packed = lazy(KeyFormat::PACKED);
    for _ in 0..2 {
        let failed = rt.block_on(packed.check(&alice, &policy, 1)).unwrap_err();
        assert_eq!(failed.cause(), Cause::UnknownCommand, "{failed}");
        assert!(failed.to_string().contains("PEXPIRE"), "{failed}");
    }
    let decision = rt.block_on(lazy(KeyFormat::Compact).check(&alice, &policy, 1));
    assert_eq!(decision.unwrap().deciding().remaining(), 4);
}

/// On a Redis Cluster a reset is one pipeline to the node of the client's
/// slot: in the packed format, the fields in the shared hashes and the
/// client's own keys (a sliding log, a penalty box) are all forgotten.
#[cfg(feature = "redis-cluster")]
#[test]
fn a_reset_on_a_cluster_forgets_fields_and_keys_alike() {
    use tower_ratelimit::backend::Backend;
    use tower_ratelimit::policy::PenaltyBox;
    let cluster = crate::support::RedisCluster::start();
    let rt = runtime();
    let redis = rt
        .block_on(
            RedisBackend::cluster_builder(cluster.urls())
                .key_format(KeyFormat::PACKED)
                .connect(),
        )
        .unwrap();
    let banning = PenaltyBox::new(2, Duration::from_secs(60), Duration::from_secs(600)).unwrap();
    let policy = Policy::builder()
        .limit("a", Algorithm::Gcra, Quota::per_minute(3).unwrap())
        .limit("b", Algorithm::SlidingLog, Quota::per_hour(5).unwrap())
        .penalty(banning)
        .build()
        .unwrap();
    let alice = Key::new("user", "alice");
    for _ in 0..6 {
        rt.block_on(redis.check(&alice, &policy, 1)).unwrap();
    }
    assert!(rt
        .block_on(redis.check(&alice, &policy, 0))
        .unwrap()
        .is_banned());
    rt.block_on(redis.reset(&alice, &policy)).unwrap();
    let after = rt.block_on(redis.check(&alice, &policy, 0)).unwrap();
    assert!(after.is_allowed() && !after.is_banned());
    let remaining: Vec<u32> = after.outcomes().map(|o| o.remaining()).collect();
    assert_eq!(remaining, [3, 5]);
}

/// A reset forgets one key's state under one policy — every limit, and its
/// penalty box's strikes and bans — on memory and Redis alike; other keys
/// and other policies keep theirs. A backend that cannot reset says so.
#[test]
fn a_reset_key_starts_afresh_on_both_backends() {
    use tower_ratelimit::backend::Backend;
    type Decide<'a> = &'a dyn Fn(&Key, &Policy, u32) -> tower_ratelimit::Decision;
    use tower_ratelimit::policy::PenaltyBox;
    // Packed over one shard: alice's and bob's states share hashes.
    for format in [KeyFormat::Compact, ONE_HASH] {
        let (_server, rt, redis, memory) = both_in(format);
        for algorithm in Algorithm::ALL {
            let banning =
                PenaltyBox::new(2, Duration::from_secs(60), Duration::from_secs(600)).unwrap();
            let policy = Policy::parse_with("a = 3/min; b = 5/h", algorithm)
                .unwrap()
                .to_builder()
                .penalty(banning)
                .build()
                .unwrap();
            let other: Policy = Policy::parse_with("c = 2/min", algorithm).unwrap();
            let (alice, bob) = (
                Key::new("user", format!("alice-{algorithm}")),
                Key::new("user", format!("bob-{algorithm}")),
            );
            let remaining = |backend: Decide<'_>, key: &Key, policy: &Policy| {
                let d = backend(key, policy, 0);
                (
                    d.is_allowed(),
                    d.is_banned(),
                    d.outcomes().map(|o| o.remaining()).collect::<Vec<_>>(),
                )
            };
            let on_redis = |k: &Key, p: &Policy, c: u32| rt.block_on(redis.check(k, p, c)).unwrap();
            let on_memory = |k: &Key, p: &Policy, c: u32| memory.check_now(k, p, c);
            let backends: [(Decide<'_>, &str); 2] = [(&on_redis, "redis"), (&on_memory, "memory")];
            let mut seen = Vec::new();
            for (decide, name) in backends {
                // Spent, denied twice, banned; bob and alice's other policy used too.
                for _ in 0..6 {
                    decide(&alice, &policy, 1);
                }
                decide(&bob, &policy, 1);
                decide(&alice, &other, 1);
                assert!(
                    decide(&alice, &policy, 0).is_banned(),
                    "{algorithm} {name} {format:?}"
                );
                let reset = match name {
                    "redis" => rt.block_on(redis.reset(&alice, &policy)),
                    _ => rt.block_on(memory.reset(&alice, &policy)),
                };
                reset.unwrap();
                let after = remaining(decide, &alice, &policy);
                assert_eq!(
                    after,
                    (true, false, vec![3, 5]),
                    "{algorithm} {name} {format:?}"
                );
                assert_eq!(
                    remaining(decide, &bob, &policy).2,
                    [2, 4],
                    "{algorithm} {name}"
                );
                assert_eq!(
                    remaining(decide, &alice, &other).2,
                    [1],
                    "{algorithm} {name}"
                );
                assert!(
                    decide(&alice, &policy, 1).is_allowed(),
                    "{algorithm} {name}"
                );
                seen.push(after);
            }
            assert_eq!(seen[0], seen[1], "{algorithm} {format:?}");
        }
    }
    let err = runtime()
        .block_on(crate::support::Broken.reset(
            &Key::new("user", "x"),
            &Policy::single(Algorithm::Gcra, Quota::per_minute(1).unwrap()).unwrap(),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("cannot reset"), "{err}");
}
