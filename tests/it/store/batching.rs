//! Decisions in flight at the same moment sent to Redis together
//! (`RedisBackendBuilder::max_batch`): each decided exactly as alone, in
//! the order it arrived; a failure fails each decision of a batch by its
//! own timeout and error; batches on a cluster never cross slots.
#![cfg(feature = "redis")]

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::support::conformance::{
    limit_strategy, observed, penalty, penalty_strategy, policy_builder,
};
use crate::support::{state_parts, RedisServer, AGREE};
use proptest::prelude::*;
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::backend::{Backend, BackendError, Cause, KeyFormat, MemoryBackend};
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Decision, Policy, Quota};

type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;
type Answer = Result<Decision, BackendError>;

/// Run `futures` at once, each first polled in the order given (so each
/// joins its lane in that order), and their outputs in that order.
async fn at_once<T>(futures: Vec<Pending<'_, T>>) -> Vec<T> {
    let mut futures: Vec<Option<Pending<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (future, output) in futures.iter_mut().zip(&mut outputs) {
            if let Some(f) = future {
                if let Poll::Ready(out) = f.as_mut().poll(cx) {
                    *output = Some(out);
                    *future = None;
                }
            }
        }
        match futures.iter().all(Option::is_none) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

/// A backend on `url` whose decisions give up after `timeout`.
fn connect_timing_out(rt: &tokio::runtime::Runtime, url: &str, timeout: Duration) -> RedisBackend {
    rt.block_on(RedisBackend::builder(url).timeout(timeout).connect())
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Script calls the server answered so far (EVALSHA, and EVAL: a batch
/// script is sent whole the first time).
fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    ["cmdstat_evalsha:calls=", "cmdstat_eval:calls="]
        .iter()
        .filter_map(|prefix| {
            let rest = stats.lines().find_map(|l| l.strip_prefix(prefix))?;
            rest.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// A policy of the given limits, each named for the policy (`p<n>l<i>`):
/// two policies never share a limit's state, so only the order within
/// one policy matters.
fn named_policy(
    n: usize,
    limits: &[(usize, u32, u64, Option<u32>)],
    banning: Option<(u32, u64, u64, u32)>,
    count_denied: bool,
) -> Policy {
    let builder = policy_builder(&format!("p{n}l"), limits, count_denied);
    match banning {
        Some(banning) => builder.penalty(penalty(banning)),
        None => builder,
    }
    .build()
    .unwrap()
}

/// A round of decisions made at once: (client, policy, cost), or settles
/// (client, policy, reserved, actual); then the microseconds to the next.
#[derive(Clone, Debug)]
enum Round {
    Checks(Vec<(usize, usize, u32)>),
    Settles(Vec<(usize, usize, u32, u32)>),
}

fn rounds() -> impl Strategy<Value = Vec<(Round, u64)>> {
    let checks =
        prop::collection::vec((0usize..8, 0usize..3, 0u32..4), 1..24).prop_map(Round::Checks);
    let settles = prop::collection::vec((0usize..8, 0usize..3, 0u32..4, 0u32..4), 1..12)
        .prop_map(Round::Settles);
    let round = prop_oneof![4 => checks, 1 => settles];
    prop::collection::vec((round, 0u64..3_000_000), 1..12)
}

fn formats() -> impl Strategy<Value = KeyFormat> {
    prop_oneof![Just(KeyFormat::Compact), Just(KeyFormat::PACKED),]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    /// Concurrent callers, batched: every decision is the one the memory
    /// backend makes replaying the same decisions one by one in the order
    /// they arrived, under policies of every shape (one limit or several,
    /// a penalty box, counted denials), checks and settles, in each key
    /// format, as a user that may not send a script whole.
    #[test]
    fn concurrent_callers_batched_decide_as_memory_does(
        format in formats(),
        policies in prop::collection::vec(
            (prop::collection::vec(limit_strategy(), 1..=3), penalty_strategy(), any::<bool>()),
            3,
        ),
        rounds in rounds(),
    ) {
        let server = RedisServer::start();
        let rt = runtime();
        // As the least-privileged user the guide shows (no EVAL).
        let url = server.limiter_url();
        let redis = rt
            .block_on(RedisBackend::builder(&url).key_format(format).timeout(crate::support::AGREE).connect())
            .unwrap();
        let memory = MemoryBackend::new();
        let policies: Vec<Policy> = policies
            .iter()
            .enumerate()
            .map(|(n, (limits, banning, counted))| named_policy(n, limits, *banning, *counted))
            .collect();
        let mut now = 1_700_000_000_000_000u64;
        // The scripts loaded (a first call is refused, then sent again
        // after what came behind it).
        let warm = Key::new("user", "warm");
        for policy in &policies {
            rt.block_on(redis.check_at(&warm, policy, 0, Micros::new(now))).unwrap();
            rt.block_on(redis.settle_at(&warm, policy, 0, 0, Micros::new(now))).unwrap();
        }
        for (n, (round, gap)) in rounds.iter().enumerate() {
            // Four clients seen again and again; the others are new in
            // their round (a batch of new clients claims their states).
            let keys: Vec<Key> = (0..8)
                .map(|i| match i < 4 {
                    true => Key::new("user", format!("client-{i}")),
                    false => Key::new("user", format!("new-{n}-{i}")),
                })
                .collect();
            now += gap;
            let at = Micros::new(now);
            let (expected, actual): (Vec<Decision>, Vec<Result<Decision, BackendError>>) = match round {
                Round::Checks(checks) => (
                    checks.iter().map(|&(k, p, c)| memory.check_at(&keys[k], &policies[p], c, at)).collect(),
                    rt.block_on(at_once(checks.iter().map(|&(k, p, c)| {
                        Box::pin(redis.check_at(&keys[k], &policies[p], c, at)) as Pending<'_, Answer>
                    }).collect())),
                ),
                Round::Settles(settles) => (
                    settles.iter().map(|&(k, p, r, a)| memory.settle_at(&keys[k], &policies[p], r, a, at)).collect(),
                    rt.block_on(at_once(settles.iter().map(|&(k, p, r, a)| {
                        Box::pin(redis.settle_at(&keys[k], &policies[p], r, a, at)) as Pending<'_, Answer>
                    }).collect())),
                ),
            };
            for (i, (expected, actual)) in expected.iter().zip(actual).enumerate() {
                let actual = actual.unwrap();
                prop_assert_eq!(observed(expected), observed(&actual), "decision {} of {:?} at {}", i, round, now);
            }
        }
    }
}

/// A batch's decisions, the same decisions made one by one (a backend
/// that sends each alone, on keys of another prefix of the same server):
/// the same answers, and the same states left in Redis. 200 decisions at
/// once take a handful of calls.
#[test]
fn a_batch_decides_as_the_same_decisions_one_by_one() {
    let server = RedisServer::start();
    let rt = runtime();
    let connect = |prefix: &str, max: usize| {
        rt.block_on(
            RedisBackend::builder(&server.url())
                .prefix(prefix)
                .max_batch(max)
                .timeout(AGREE)
                .connect(),
        )
        .unwrap()
    };
    let (batched, alone) = (connect("a:", 64), connect("b:", 1));
    let sliding: Policy = "5/s".parse().unwrap();
    let two = Policy::builder()
        .limit("burst", Algorithm::Gcra, Quota::per_second(3).unwrap())
        .limit("hour", Algorithm::SlidingLog, Quota::per_hour(7).unwrap())
        .build()
        .unwrap();
    // One GCRA limit: the lean script, which claims new clients' states.
    let bucket = Policy::builder()
        .limit("bucket", Algorithm::Gcra, Quota::per_second(4).unwrap())
        .build()
        .unwrap();
    let asks: Vec<(Key, &Policy, u32)> = (0..200)
        .map(|i| {
            let key = Key::new("user", format!("client-{}", i % 20));
            let policy = [&two, &sliding, &bucket][i % 3];
            // Ten costs in turn, then one: a lean batch sends each
            // distinct argument list once and looks for a decision's
            // among the last 8 only, so more lists than that come first.
            let cost = if i < 100 { i % 10 } else { i % 3 };
            (key, policy, cost as u32)
        })
        .collect();
    let at = Micros::new(1_700_000_000_000_000);
    // The scripts loaded: a first call is refused, then sent again after
    // what came behind it.
    for backend in [&batched, &alone] {
        for policy in [&sliding, &two, &bucket] {
            rt.block_on(backend.check(&Key::new("user", "warm"), policy, 0))
                .unwrap();
        }
    }
    let before = script_calls(&server);
    let together = rt.block_on(at_once(
        asks.iter()
            .map(|(k, p, c)| Box::pin(batched.check_at(k, p, *c, at)) as Pending<'_, Answer>)
            .collect(),
    ));
    let calls = script_calls(&server) - before;
    for (i, ((key, policy, cost), together)) in asks.iter().zip(together).enumerate() {
        let one = rt.block_on(alone.check_at(key, policy, *cost, at)).unwrap();
        assert_eq!(observed(&together.unwrap()), observed(&one), "decision {i}");
    }
    // 200 decisions of three shapes: a lone call each and a second call of
    // one beside it, then batches of 64 and what is left.
    assert!(calls <= 15, "{calls} script calls for 200 decisions");
    for (key, policy, _) in &asks[..20] {
        for limit in policy.limits() {
            let (a, b) = (batched.redis_keys(key, limit), alone.redis_keys(key, limit));
            for (a, b) in a.iter().zip(&b) {
                let dump = |k: &str| {
                    server.cli(&["EVAL", "return redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) or redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')", "1", k])
                };
                assert_eq!(dump(a), dump(b), "{a} and {b}");
            }
        }
    }
}

/// A call of the most decisions a batch holds (256), each of its own
/// argument list (its cost), in each key format: a lean batch names a
/// decision's list in a byte, and all 256 values of that byte decide as
/// their decisions alone would.
#[test]
fn a_batch_of_256_argument_lists_decides_each_by_its_own() {
    let server = RedisServer::start();
    let rt = runtime();
    let bucket = Policy::builder()
        .limit("bucket", Algorithm::Gcra, Quota::per_second(1000).unwrap())
        .build()
        .unwrap();
    for (n, format) in [KeyFormat::Compact, KeyFormat::PACKED]
        .into_iter()
        .enumerate()
    {
        let connect = |prefix: String, max: usize| {
            rt.block_on(
                RedisBackend::builder(&server.url())
                    .prefix(&prefix)
                    .key_format(format)
                    .max_batch(max)
                    .timeout(AGREE)
                    .connect(),
            )
            .unwrap()
        };
        let (batched, alone) = (connect(format!("a{n}:"), 256), connect(format!("b{n}:"), 1));
        for backend in [&batched, &alone] {
            rt.block_on(backend.check(&Key::new("user", "warm"), &bucket, 0))
                .unwrap();
        }
        // One alone, a second call of one beside it (another client),
        // then 256 that wait for the first to end and the 63 left: costs
        // 0 to 255 in the third, over 40 clients (some refused: what a
        // client spent before).
        let asks: Vec<(Key, u32)> = (0..321u32)
            .map(|i| {
                (
                    Key::new("user", format!("client-{}", i % 40)),
                    (i + 191) % 256,
                )
            })
            .collect();
        let at = Micros::new(1_700_000_000_000_000);
        let before = script_calls(&server);
        let together = rt.block_on(at_once(
            asks.iter()
                .map(|(k, c)| Box::pin(batched.check_at(k, &bucket, *c, at)) as Pending<'_, Answer>)
                .collect(),
        ));
        let calls = script_calls(&server) - before;
        assert!(calls <= 4, "{calls} script calls for 321 decisions");
        let mut refused = 0;
        for (i, ((key, cost), together)) in asks.iter().zip(together).enumerate() {
            let one = rt
                .block_on(alone.check_at(key, &bucket, *cost, at))
                .unwrap();
            refused += usize::from(!one.is_allowed());
            assert_eq!(
                observed(&together.unwrap()),
                observed(&one),
                "{format:?}, decision {i}"
            );
        }
        assert!((1..321).contains(&refused), "{refused} of 321 refused");
    }
}

/// New clients decided together on the server's clock (a batch claims
/// their states, sharing for a sliding window one text and TTL per
/// window), under a sliding window and under GCRA: each key outlives its
/// state, never by more than a window (GCRA: never but for rounding), and
/// each client was counted.
#[test]
fn a_batch_of_new_clients_keys_outlive_their_states() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = rt.block_on(server.backend());
    // States that last the decisions and the reads of 48 clients, one
    // redis-cli each, on a busy machine (a window of a second ended
    // before the last reads there).
    let sliding = Policy::builder()
        .limit(
            "window",
            Algorithm::SlidingWindow,
            Quota::new(5, Duration::from_secs(10)).unwrap(),
        )
        .build()
        .unwrap();
    let bucket = Policy::builder()
        .limit("bucket", Algorithm::Gcra, Quota::per_minute(5).unwrap())
        .build()
        .unwrap();
    // How much longer than its state a key may live: a sliding window's
    // key by up to a window; a bucket's not at all, but for whole
    // milliseconds (its TTL's and PTTL's).
    let shapes = [
        (&sliding, 10_000_000u64, 10_000_000u64),
        (&bucket, 60_000_000, 2_000),
    ];
    for (policy, window, outlives_by) in shapes {
        let warm = Key::new("user", "warm");
        rt.block_on(redis.check(&warm, policy, 0)).unwrap();
        let limit = &policy.limits()[0];
        let clients: Vec<Key> = (0..48)
            .map(|i| Key::new("user", format!("new-{}-{i}", limit.name())))
            .collect();
        server.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        server.cli(&["SLOWLOG", "RESET"]);
        let decisions = rt.block_on(at_once(
            clients
                .iter()
                .map(|k| Box::pin(redis.check(k, policy, 1)) as Pending<'_, Answer>)
                .collect(),
        ));
        // A key's expiry counts from its call's start on Redis's clock in
        // whole milliseconds; its state, from the call's read of TIME,
        // later by at most the call's own running time (a busy machine
        // can stop Redis in between): the longest, µs, in the slow log.
        let longest = "local m = 0 \
            for _, e in ipairs(redis.call('SLOWLOG', 'GET', '1000')) do \
                local name = string.lower(e[4][1]) \
                if name == 'evalsha' or name == 'eval' then m = math.max(m, e[3]) end \
            end return m";
        let late: u64 = server.cli(&["EVAL", longest, "0"]).trim().parse().unwrap();
        for (client, decision) in clients.iter().zip(decisions) {
            assert_eq!(decision.unwrap().deciding().remaining(), 4, "{client:?}");
            let key = &redis.redis_keys(client, limit)[0];
            // The server's time, when the key expires (exactly, in
            // milliseconds) and its state, at once.
            let read = "local t = redis.call('TIME') \
                return { t[1] * 1000000 + t[2], redis.call('PEXPIRETIME', KEYS[1]), redis.call('GET', KEYS[1]) }";
            let answer = server.cli(&["EVAL", read, "1", key]);
            let lines: Vec<&str> = answer.lines().map(str::trim).collect();
            let [now, expires, state] = lines[..] else {
                panic!("{key}: {answer}")
            };
            let (ends, previous, current) = state_parts(state).expect(state);
            if window == 10_000_000 {
                // A sliding window: the previous and current counts, in
                // one integer (19 digits: Redis keeps it as one).
                assert_eq!((previous, current), (0, 1), "{key}: {answer}");
                assert_eq!(state.len(), 19, "{key}: {answer}");
            } else {
                // GCRA: when the client's bucket is full again, a fifth
                // of a window after its request.
                assert_eq!((previous, current), (0, 0), "{key}: {answer}");
                assert!(
                    ends <= now.parse::<u64>().unwrap() + window / 5,
                    "{key}: {answer}"
                );
            }
            let lives_until = expires.parse::<u64>().unwrap() * 1000;
            // (The call's start in whole milliseconds: one's leeway.)
            assert!(
                lives_until + 1000 + late >= ends,
                "{key} dies at {lives_until}, its state at {ends} ({late} µs a call)"
            );
            assert!(
                lives_until <= ends + outlives_by,
                "{key} lives on to {lives_until}, its state ends at {ends}"
            );
        }
    }
}

/// Valkey (which says it is Redis 7.2, and runs `SET … NX GET`) decides a
/// batch of new and known clients as memory does, claims and all.
#[test]
fn a_batch_decides_on_valkey_too() {
    let Some(server) = crate::support::valkey() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(server.backend());
    let memory = MemoryBackend::new();
    let policy = Policy::single(Algorithm::SlidingWindow, Quota::per_second(3).unwrap()).unwrap();
    let warm = Key::new("user", "warm");
    rt.block_on(redis.check(&warm, &policy, 0)).unwrap();
    let mut now = 1_700_000_000_000_000u64;
    for round in 0..4 {
        // Half the clients new each round, half seen before.
        let asks: Vec<(Key, u32)> = (0..40)
            .map(|i| {
                let client = match i % 2 {
                    0 => format!("new-{round}-{i}"),
                    _ => format!("known-{}", i % 6),
                };
                (Key::new("user", client), (i % 3) as u32)
            })
            .collect();
        let at = Micros::new(now);
        let together = rt.block_on(at_once(
            asks.iter()
                .map(|(k, c)| Box::pin(redis.check_at(k, &policy, *c, at)) as Pending<'_, Answer>)
                .collect(),
        ));
        for (i, ((key, cost), actual)) in asks.iter().zip(together).enumerate() {
            let expected = memory.check_at(key, &policy, *cost, at);
            assert_eq!(
                observed(&actual.unwrap()),
                observed(&expected),
                "round {round}, decision {i}"
            );
        }
        now += 400_000;
    }
}

/// One decision whose own script fails (its key holds another type) fails
/// alone; the others of its batch are decided.
#[test]
fn a_decision_whose_script_fails_fails_alone() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = rt.block_on(server.backend());
    let policy: Policy = "5/min".parse().unwrap();
    let spoiled = Key::new("user", "spoiled");
    let state = &redis.redis_keys(&spoiled, &policy.limits()[0])[0];
    server.cli(&["HSET", state, "a", "b"]);
    let keys: Vec<Key> = (0..20)
        .map(|i| match i {
            14 => spoiled.clone(),
            i => Key::new("user", format!("client-{i}")),
        })
        .collect();
    // The script loaded: its first call is refused, then sent again.
    rt.block_on(redis.check(&keys[0], &policy, 0)).unwrap();
    let before = script_calls(&server);
    let answers = rt.block_on(at_once(
        keys.iter()
            .map(|k| Box::pin(redis.check(k, &policy, 1)) as Pending<'_, Answer>)
            .collect(),
    ));
    // One alone, one beside it, then the eighteen others (the spoiled
    // one among them) together, the batch's script refused once before it
    // is loaded; and the check of the spoiled one's keys (its script
    // loaded first too: two calls).
    let calls = script_calls(&server) - before;
    assert!(calls <= 6, "not batched: {calls} calls");
    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (14, Err(e)) => assert!(e.to_string().contains("WRONGTYPE"), "{e}"),
            (14, Ok(d)) => panic!("a key of the wrong type was decided: {d:?}"),
            (_, Ok(d)) => assert!(d.is_allowed()),
            (_, Err(e)) => panic!("decision {i} failed with the spoiled one: {e}"),
        }
    }
}

/// A Redis that stops answering while a batch is in flight: every decision
/// of it, and of the batch waiting behind, fails as a timeout within its
/// own timeout (never admitted, never held longer); then Redis decides
/// again.
#[test]
fn a_stalled_batch_fails_each_decision_within_its_timeout() {
    let server = RedisServer::start();
    let rt = runtime();
    let timeout = Duration::from_millis(200);
    let redis = connect_timing_out(&rt, &server.url(), timeout);
    let policy: Policy = "5/min".parse().unwrap();
    let keys: Vec<Key> = (0..40)
        .map(|i| Key::new("user", format!("client-{i}")))
        .collect();
    rt.block_on(redis.check(&keys[0], &policy, 0)).unwrap();
    server.pause();
    let started = Instant::now();
    let answers = rt.block_on(at_once(
        keys.iter()
            .map(|k| {
                Box::pin(async {
                    let answer = redis.check(k, &policy, 1).await;
                    (answer, started.elapsed())
                }) as Pending<'_, (Answer, Duration)>
            })
            .collect(),
    ));
    server.resume();
    for (i, (answer, took)) in answers.iter().enumerate() {
        let error = answer
            .as_ref()
            .expect_err("decided while Redis was stopped");
        assert_eq!(error.cause(), Cause::Timeout, "decision {i}: {error}");
        assert!(
            *took < timeout + Duration::from_millis(150),
            "decision {i} took {took:?}"
        );
    }
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(5);
        while redis.check(&keys[1], &policy, 1).await.is_err() {
            assert!(Instant::now() < deadline, "Redis never decided again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// Beside a call in flight, a decision on the same key waits for it, and
/// one whose caller stops waiting first is never counted; a decision on
/// another key is sent at once, beside it, as it would be alone.
#[test]
fn beside_a_call_in_flight_only_a_decision_on_its_key_waits() {
    let server = RedisServer::start();
    let rt = runtime();
    // What waits behind a stalled call is sent beside it after a fifth of
    // the timeout (2 s): long after its caller gives up (1 s).
    let redis = connect_timing_out(&rt, &server.url(), Duration::from_secs(10));
    let give_up = Duration::from_secs(1);
    let policy: Policy = "5/min".parse().unwrap();
    let (first, other) = (Key::new("user", "first"), Key::new("user", "other"));
    rt.block_on(redis.check(&first, &policy, 0)).unwrap();
    rt.block_on(async {
        server.pause();
        let lead = tokio::spawn({
            let (redis, policy, first) = (redis.clone(), policy.clone(), first.clone());
            async move { redis.check(&first, &policy, 1).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The other key's decision joins first, then the same key's.
        let waited = at_once(
            [&other, &first]
                .into_iter()
                .map(|key| {
                    Box::pin(tokio::time::timeout(give_up, redis.check(key, &policy, 1)))
                        as Pending<'_, _>
                })
                .collect(),
        )
        .await;
        assert!(
            waited.iter().all(Result::is_err),
            "decided while Redis was stopped"
        );
        server.resume();
        assert!(lead.await.unwrap().unwrap().is_allowed());
    });
    let remaining = |key: &Key| {
        let decision = rt.block_on(redis.check(key, &policy, 0)).unwrap();
        let remaining = decision.outcomes().next().unwrap().remaining();
        remaining
    };
    assert_eq!(
        remaining(&first),
        4,
        "a decision given up before it went was counted"
    );
    assert_eq!(
        remaining(&other),
        4,
        "a decision on another key waited for the call in flight"
    );
}

/// On a cluster, decisions at once on clients of many slots (and several
/// of one client) are each decided, exactly as the memory backend decides
/// them one by one: no batch mixes slots (which the cluster would refuse).
#[cfg(feature = "redis-cluster")]
#[test]
fn batches_on_a_cluster_never_cross_slots() {
    let cluster = crate::support::RedisCluster::start();
    let rt = runtime();
    let redis = rt
        .block_on(
            RedisBackend::cluster_builder(cluster.urls())
                .timeout(Duration::from_secs(2))
                .connect(),
        )
        .unwrap();
    let memory = MemoryBackend::new();
    let policy = Policy::builder()
        .limit("burst", Algorithm::Gcra, Quota::per_second(3).unwrap())
        .limit("hour", Algorithm::SlidingLog, Quota::per_hour(7).unwrap())
        .build()
        .unwrap();
    let keys: Vec<Key> = (0..120)
        .map(|i| Key::new("user", format!("client-{}", i % 40)))
        .collect();
    let mut now = 1_700_000_000_000_000u64;
    for _ in 0..3 {
        let at = Micros::new(now);
        let answers = rt.block_on(at_once(
            keys.iter()
                .map(|k| Box::pin(redis.check_at(k, &policy, 1, at)) as Pending<'_, Answer>)
                .collect(),
        ));
        for (key, answer) in keys.iter().zip(answers) {
            let expected = memory.check_at(key, &policy, 1, at);
            assert_eq!(observed(&answer.unwrap()), observed(&expected));
        }
        now += 400_000;
    }
}

/// The example server batches by default and sends each decision alone
/// with `REDIS_BATCH=off`: under 16 clients at once, fewer script calls
/// than decisions, or one each; a value it does not know stops it with one
/// that names the variable and what it takes.
#[test]
fn the_example_server_batches_unless_told_off() {
    use crate::support::example::{ExampleServer, KeptAlive};
    let server = RedisServer::start();
    let url = server.url();
    let mut calls = Vec::new();
    for batch in ["on", "off"] {
        // A timeout of seconds: on a busy machine a decision past the
        // default 50 ms goes to the fallback, and Redis never counts it.
        let example = ExampleServer::start(&[
            ("REDIS_URL", &url),
            ("REDIS_BATCH", batch),
            ("STORE_TIMEOUT_MS", "5000"),
        ]);
        // The scripts loaded.
        example.get("/api/user", &[("x-user-id", "warm")]);
        let before = script_calls(&server);
        let port = example.port;
        std::thread::scope(|s| {
            for client in 0..16 {
                s.spawn(move || {
                    let mut connection = KeptAlive::to(port);
                    for n in 0..10 {
                        let request = format!(
                            "GET /api/user HTTP/1.1\r\nhost: x\r\nx-user-id: {batch}-{client}-{n}\r\n\r\n"
                        );
                        assert_eq!(connection.status(&request), 200);
                    }
                });
            }
        });
        calls.push(script_calls(&server) - before);
    }
    eprintln!(
        "script calls for 160 decisions: {} batched, {} alone",
        calls[0], calls[1]
    );
    assert!(
        calls[0] < 160,
        "batched: {} calls for 160 decisions",
        calls[0]
    );
    assert!(
        calls[1] >= 160,
        "alone: {} calls for 160 decisions",
        calls[1]
    );

    let said =
        crate::support::example::refusal(&[("REDIS_URL", &url), ("REDIS_BATCH", "sometimes")]);
    assert!(
        said.contains("REDIS_BATCH") && said.contains("on or off"),
        "{said}"
    );
}

/// A call holds at most `max_batch` decisions and `max_batch` keys between
/// them: 200 decisions at once of a policy of eight limits and a penalty
/// box (14 keys each) go four to a call under the default 64, where 200 of
/// one limit go 64 to a call.
#[test]
fn a_call_holds_at_most_max_batch_keys() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = connect_timing_out(&rt, &server.url(), Duration::from_secs(5));
    let mut largest = Policy::builder();
    for i in 0..8 {
        let algorithm = match i % 2 {
            0 => Algorithm::SlidingLog,
            _ => Algorithm::SlidingWindow,
        };
        largest = largest.limit(
            format!("l{i}"),
            algorithm,
            Quota::per_hour(1000 + i).unwrap(),
        );
    }
    let largest = largest.penalty(penalty((3, 10, 10, 2))).build().unwrap();
    let one: Policy = "1000/s".parse().unwrap();
    let keys: Vec<Key> = (0..200)
        .map(|i| Key::new("user", format!("c{}", i % 50)))
        .collect();
    // One limit: one alone, one beside it, three of 64, the 6 left.
    for (policy, fewest, most) in [(&largest, 50, 52), (&one, 4, 6)] {
        rt.block_on(redis.check(&keys[0], policy, 0)).unwrap();
        let before = script_calls(&server);
        let answers = rt.block_on(at_once(
            keys.iter()
                .map(|k| Box::pin(redis.check(k, policy, 1)) as Pending<'_, Answer>)
                .collect(),
        ));
        assert!(answers.iter().all(Result::is_ok));
        let calls = script_calls(&server) - before;
        assert!(
            (fewest..=most).contains(&calls),
            "{calls} calls for 200 decisions"
        );
    }
}
