//! Redis failing under load, with the breaker and a local fallback in front
//! of it: killed, restarted empty (its scripts gone), and slow. Every
//! decision is answered within the timeout plus a margin, and decisions come
//! from Redis again soon after it answers.

#![cfg(feature = "redis")]

use std::time::{Duration, Instant};

use tower_ratelimit::backend::{Backend, Breaker, Fallback, MemoryBackend, RedisBackend};
use tower_ratelimit::decision::Origin;
use tower_ratelimit::key::Key;
use tower_ratelimit::Policy;

use crate::support::proxy::Proxy;
use crate::support::RedisServer;

const TIMEOUT: Duration = Duration::from_millis(100);
/// What a decision may take beyond the timeout on a shared 2-core machine
/// at load 4 while the rest of the suite runs: a few scheduler time slices.
const MARGIN: Duration = Duration::from_millis(100);
const CLIENTS: usize = 32;

type Guarded = Fallback<Breaker<RedisBackend>, MemoryBackend>;

async fn guarded(server: &RedisServer) -> Guarded {
    RedisBackend::builder(&server.url())
        .timeout(TIMEOUT)
        .connect_lazy()
        .unwrap()
        .with_breaker()
        .failures_to_open(5)
        .open_for(Duration::from_millis(100))
        .max_open_for(Duration::from_millis(400))
        .or_fallback(MemoryBackend::new())
}

/// `CLIENTS` tasks deciding for `run`, each for its own user; every
/// decision's origin and time.
async fn load(backend: &Guarded, run: Duration) -> Vec<(Origin, Duration)> {
    let policy: Policy = "1000000/s".parse().unwrap();
    let until = Instant::now() + run;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let (backend, policy) = (backend.clone(), policy.clone());
        tasks.spawn(async move {
            let key = Key::new("user", format!("client-{client}"));
            let mut seen = Vec::new();
            while Instant::now() < until {
                let started = Instant::now();
                let decision = backend.check(&key, &policy, 1).await.unwrap();
                seen.push((decision.origin(), started.elapsed()));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        });
    }
    let mut all = Vec::new();
    while let Some(seen) = tasks.join_next().await {
        all.extend(seen.unwrap());
    }
    all
}

fn slowest(seen: &[(Origin, Duration)]) -> Duration {
    seen.iter().map(|(_, took)| *took).max().unwrap_or_default()
}

/// Wait until Redis decides again; how long that took.
async fn until_redis_decides(backend: &Guarded) -> Duration {
    let started = Instant::now();
    let policy: Policy = "1000000/s".parse().unwrap();
    loop {
        let d = backend
            .check(&Key::new("user", "probe"), &policy, 1)
            .await
            .unwrap();
        if d.origin() == Origin::Primary {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "Redis never came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_then_killed_then_restarted_empty_under_load() {
    let mut server = RedisServer::start();
    let backend = guarded(&server).await;
    let up = load(&backend, Duration::from_millis(200)).await;
    assert!(up.iter().all(|(o, _)| *o == Origin::Primary));

    // Frozen (SIGSTOP): connections stay open, nothing answers; the
    // timeout bounds every wait until the breaker opens.
    server.pause();
    let frozen = load(&backend, Duration::from_millis(500)).await;
    assert!(frozen.iter().all(|(o, _)| *o != Origin::Primary));
    assert!(
        slowest(&frozen) < TIMEOUT + MARGIN,
        "{:?}",
        slowest(&frozen)
    );
    let mut frozen_times: Vec<Duration> = frozen.iter().map(|(_, t)| *t).collect();
    frozen_times.sort();
    let frozen_median = frozen_times[frozen_times.len() / 2];
    assert!(
        // Answered without Redis: a fifth of the timeout at most, even
        // while the rest of the suite loads the machine.
        frozen_median < TIMEOUT / 5,
        "median {frozen_median:?}"
    );
    eprintln!(
        "frozen: {} decisions, slowest {:?}, median {frozen_median:?}",
        frozen.len(),
        slowest(&frozen)
    );

    // Then killed while frozen.
    server.kill();
    let down = load(&backend, Duration::from_millis(500)).await;
    // Every request answered, by the fallback, within the timeout.
    assert!(down.iter().all(|(o, _)| *o != Origin::Primary));
    assert!(slowest(&down) < TIMEOUT + MARGIN, "{:?}", slowest(&down));
    let mut times: Vec<Duration> = down.iter().map(|(_, t)| *t).collect();
    times.sort();
    assert!(
        times[times.len() / 2] < TIMEOUT / 5,
        "median {:?}",
        times[times.len() / 2]
    );

    // Back, empty: its script cache is gone; decisions come from it again
    // within a second, and its keys reappear.
    server.restart();
    let back = until_redis_decides(&backend).await;
    assert!(back < Duration::from_secs(1), "{back:?}");
    let after = load(&backend, Duration::from_millis(200)).await;
    assert!(after.iter().all(|(o, _)| *o == Origin::Primary));
    assert_ne!(server.cli(&["DBSIZE"]), "0");
    eprintln!(
        "killed: {} decisions, slowest {:?}, median {:?}; back after {back:?}",
        down.len(),
        slowest(&down),
        times[times.len() / 2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_costs_no_more_than_the_timeout() {
    // Redis 7 takes DEBUG only when told to.
    let server = RedisServer::start_with("redis-server", &["--enable-debug-command", "yes"]);
    let backend = guarded(&server).await;
    assert!(until_redis_decides(&backend).await < Duration::from_secs(1));
    // Redis busy for 600 ms: it answers nothing meanwhile.
    let sleeper = {
        let port = server.port;
        std::thread::spawn(move || {
            std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "0.6"])
                .output()
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let slow = load(&backend, Duration::from_millis(400)).await;
    assert!(slowest(&slow) < TIMEOUT + MARGIN, "{:?}", slowest(&slow));
    assert!(slow.iter().any(|(o, _)| *o != Origin::Primary));
    let slept = sleeper.join().unwrap();
    assert_eq!(String::from_utf8_lossy(&slept.stdout).trim(), "OK");
    let back = until_redis_decides(&backend).await;
    assert!(back < Duration::from_secs(1), "{back:?}");
    eprintln!(
        "slow: {} decisions, slowest {:?}; back after {back:?}",
        slow.len(),
        slowest(&slow)
    );
}

/// The slot ranges node `i` serves, from its own `CLUSTER NODES` line.
fn slots_of(cluster: &crate::support::RedisCluster, i: usize) -> Vec<(u16, u16)> {
    let nodes = cluster.nodes[i].cli(&["CLUSTER", "NODES"]);
    let mine = nodes.lines().find(|l| l.contains("myself")).unwrap();
    mine.split_whitespace()
        .skip(8)
        .filter_map(|range| {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// On a 3-primary cluster, one primary killed: keys of its slots are decided
/// by the fallback, within the timeout, and once that node's circuit is
/// open (5 failures) without waiting at all; keys of the others stay on
/// Redis throughout. (A circuit per node, inside the backend: a `Breaker`
/// covers a whole backend and would send every key to the fallback.)
#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_primary_affects_only_its_own_slots() {
    use tower_ratelimit::{Algorithm, Limit, Quota};
    let mut cluster = crate::support::RedisCluster::start();
    let redis = RedisBackend::cluster_builder(cluster.urls())
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    let backend = redis.clone().or_fallback(MemoryBackend::new());
    let policy: Policy = "1000000/s".parse().unwrap();
    let limit = Limit::new("probe", Algorithm::Gcra, Quota::per_second(1).unwrap()).unwrap();
    let dead_slots = slots_of(&cluster, 0);
    // Twenty users, each placed by its key's slot.
    let (mut on_dead, mut on_live) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let key = Key::new("user", format!("user-{i}"));
        let name = &redis.redis_keys(&key, &limit)[0];
        let slot: u16 = cluster.nodes[1]
            .cli(&["CLUSTER", "KEYSLOT", name])
            .parse()
            .unwrap();
        if dead_slots.iter().any(|&(a, b)| (a..=b).contains(&slot)) {
            on_dead.push(key);
        } else {
            on_live.push(key);
        }
    }
    assert!(!on_dead.is_empty() && !on_live.is_empty());
    for key in on_dead.iter().chain(&on_live) {
        assert_eq!(
            backend.check(key, &policy, 1).await.unwrap().origin(),
            Origin::Primary
        );
    }

    cluster.nodes[0].kill();
    let (mut slowest, mut waited) = (Duration::ZERO, 0);
    for _ in 0..5 {
        for (keys, live) in [(&on_dead, false), (&on_live, true)] {
            for key in keys {
                let started = Instant::now();
                let decision = backend.check(key, &policy, 1).await.unwrap();
                let took = started.elapsed();
                slowest = slowest.max(took);
                if live {
                    assert_eq!(decision.origin(), Origin::Primary, "{key:?}");
                } else {
                    assert!(
                        matches!(decision.origin(), Origin::Fallback | Origin::BreakerOpen),
                        "{key:?}: {:?}",
                        decision.origin()
                    );
                    waited += usize::from(took >= Duration::from_millis(5));
                }
            }
        }
    }
    assert!(slowest < TIMEOUT + MARGIN, "{slowest:?}");
    // Only the failures that opened the dead node's circuit waited.
    assert!(waited <= 5, "{waited} decisions waited");
    eprintln!(
        "cluster: {} keys on the dead primary ({waited} waited), {} on the others; slowest {slowest:?}",
        on_dead.len(),
        on_live.len()
    );
}

/// A 3-primary, 3-replica cluster; one primary killed under load. Its keys
/// are decided by the fallback while it is down (fast, once its circuit is
/// open), by Redis again within a second of its replica's promotion, and
/// keys of the other primaries stay on Redis throughout. What the failover
/// cost one key under a fixed window is measured.
#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_over_primary_is_decided_by_its_replica_within_a_second() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use tower_ratelimit::{Algorithm, Quota};

    let mut cluster =
        tokio::task::spawn_blocking(crate::support::RedisCluster::start_with_replicas)
            .await
            .unwrap();
    let redis = RedisBackend::cluster_builder(cluster.urls())
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    let backend = redis.clone().or_fallback(MemoryBackend::new());
    let hot = Policy::single(Algorithm::FixedWindow, Quota::per_day(400).unwrap()).unwrap();

    // Twenty users, each placed on the primary that holds its key.
    let primary_of = |key: &Key| -> usize {
        let name = &redis.redis_keys(key, &hot.limits()[0])[0];
        let slot: u16 = cluster.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", name])
            .parse()
            .unwrap();
        (0..cluster.nodes.len())
            .find(|&i| {
                cluster.nodes[i].cli(&["ROLE"]).starts_with("master")
                    && slots_of(&cluster, i)
                        .iter()
                        .any(|&(a, b)| (a..=b).contains(&slot))
            })
            .unwrap()
    };
    let keys: Vec<(Key, usize)> = (0..20)
        .map(|i| {
            let key = Key::new("user", format!("user-{i}"));
            let primary = primary_of(&key);
            (key, primary)
        })
        .collect();
    let victim = keys[0].1;
    let replica = (0..cluster.nodes.len())
        .find(|&i| {
            cluster.nodes[i]
                .cli(&["INFO", "replication"])
                .contains(&format!("master_port:{}", cluster.nodes[victim].port))
        })
        .expect("the victim's replica");

    // Exactness: 200 of a day's 400 admitted on the victim just before it dies.
    let hot_key = &keys[0].0;
    for _ in 0..200 {
        assert!(redis.check(hot_key, &hot, 1).await.unwrap().is_allowed());
    }

    // Load: every key decided all along, each decision timed.
    let load: Policy = "1000000/min".parse().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Each decision: when, whether its key is on the victim, who decided, how long.
    type Seen = Vec<(Instant, bool, Origin, Duration)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let client = {
        let (backend, stop, seen) = (backend.clone(), stop.clone(), seen.clone());
        let keys: Vec<(Key, bool)> = keys
            .iter()
            .map(|(k, p)| (k.clone(), *p == victim))
            .collect();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for (key, on_victim) in &keys {
                    let started = Instant::now();
                    let origin = backend.check(key, &load, 1).await.unwrap().origin();
                    seen.lock()
                        .unwrap()
                        .push((started, *on_victim, origin, started.elapsed()));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.nodes[victim].kill();
    let killed = Instant::now();
    // When the replica was last seen a replica (a reading's start: it was
    // one then), and when first seen a primary: a loaded machine may take
    // long over a reading, and the promotion lies between the two.
    let promoted = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut asked = Instant::now();
        let mut still_replica = killed;
        while !cluster.nodes[replica].cli(&["ROLE"]).starts_with("master") {
            assert!(Instant::now() < deadline, "the replica was not promoted");
            still_replica = asked;
            std::thread::sleep(Duration::from_millis(10));
            asked = Instant::now();
        }
        (still_replica, Instant::now(), cluster)
    });
    let (still_replica, promoted, cluster) = promoted.await.unwrap();
    let back = loop {
        let last = seen
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|s| s.1 && s.0 > promoted)
            .map(|s| s.2);
        if last == Some(Origin::Primary) {
            break promoted.elapsed();
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(1),
            "the victim's keys are not back on Redis"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    stop.store(true, Ordering::Relaxed);
    client.await.unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());

    // The other primaries' keys: on Redis throughout.
    let strays: Vec<_> = seen
        .iter()
        .filter(|s| !s.1 && s.2 != Origin::Primary)
        .map(|s| (s.0.saturating_duration_since(killed), s.2, s.3))
        .collect();
    assert!(
        strays.is_empty(),
        "promoted {:?} after the kill: {strays:?}",
        promoted - killed
    );
    // The victim's keys while it was surely down (asked after the kill,
    // answered before the replica was last seen one): the fallback, within
    // the timeout and what this machine made a decision on a live primary
    // take meanwhile.
    let down: Vec<_> = seen
        .iter()
        .filter(|s| s.1 && s.0 > killed && s.0 + s.3 < still_replica)
        .collect();
    let slowest_live = seen
        .iter()
        .filter(|s| !s.1 && s.0 > killed && s.0 < promoted)
        .map(|s| s.3)
        .max()
        .unwrap_or_default();
    let bound = TIMEOUT + MARGIN + slowest_live;
    let late: Vec<_> = down
        .iter()
        .filter(|s| s.2 == Origin::Primary || s.3 >= bound)
        .map(|s| (s.0.saturating_duration_since(killed), s.2, s.3))
        .collect();
    assert!(
        late.is_empty(),
        "decided by a primary or past {bound:?} while down: {late:?}"
    );
    let waited = down
        .iter()
        .filter(|s| s.3 >= Duration::from_millis(5))
        .count();

    // What the failover lost: the rest of the day's 400 on the new primary
    // (400 answers; a call that fails while the client settles is no
    // admission, and is asked again). Admissions the replica had not yet
    // copied are lost (at most the 200); a failed call that Redis ran
    // anyway spent its unit unanswered (at most one each).
    let (mut after, mut answers, mut failed) = (0, 0, 0);
    // A wait for the answers, not a bound: a loaded machine may take long.
    let deadline = Instant::now() + Duration::from_secs(60);
    while answers < 400 && Instant::now() < deadline {
        match redis.check(hot_key, &hot, 1).await {
            Ok(decision) => {
                answers += 1;
                after += usize::from(decision.is_allowed());
            }
            Err(_) => failed += 1,
        }
    }
    assert_eq!(answers, 400);
    let admitted = 200 + after;
    assert!(
        (400 - failed.min(400)..=600).contains(&admitted),
        "{admitted} admitted, {failed} calls failed"
    );
    eprintln!(
        "cluster failover: promoted {:?} after the kill; its keys on Redis again {back:?} after; \
         {waited} of {} decisions for them waited 5 ms or more while down; \
         one key admitted {admitted} against a limit of 400 ({failed} calls failed after)",
        promoted - killed,
        down.len()
    );
    drop(cluster);
}

/// Redis answering 50 ms late under 16 clients at once: each call takes
/// one round trip (every connection sets `TCP_NODELAY`; under Nagle's
/// algorithm a request waited for the acknowledgement of the one before,
/// two round trips, and a 100 ms timeout saw most decisions fail). What
/// this machine adds of its own is measured in the same run, on a link
/// with no latency: each decision sent alone, at most 5% take longer than
/// the late link's round trip plus the more of half a round trip and the
/// machine's own 95th percentile (none on a quiet machine; 24–40% with
/// Nagle's algorithm back on, which adds a whole round trip); batched (a
/// decision may wait for the call in flight, then go in the next), the
/// median is under 2.5 round trips plus the machine's own median. The
/// timeout is seconds: a busy machine's stalls lengthen a few decisions
/// without failing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_answering_within_the_timeout_keeps_deciding() {
    let server = RedisServer::start();
    let late: u64 = std::env::var("REDIS_LATE_MS").map_or(50, |ms| ms.parse().unwrap());
    let late = Duration::from_millis(late);
    let prompt = Proxy::start(server.port).await.port;
    let port = Proxy::with_latency(server.port, late).await.port;
    for batch in [1, 64] {
        let own = decision_times(prompt, batch).await;
        let times = decision_times(port, batch).await;
        let (own_median, own_p95) = (own[own.len() / 2], own[own.len() * 95 / 100]);
        let median = times[times.len() / 2];
        eprintln!(
            "{late:?} late, batches of {batch}: {} decisions, median {median:?}, p99 {:?}; \
             with no latency: median {own_median:?}, p95 {own_p95:?}",
            times.len(),
            times[times.len() * 99 / 100]
        );
        let bound = late + (late / 2).max(own_p95);
        let slow = times.iter().filter(|t| **t > bound).count();
        match batch {
            1 => assert!(
                slow * 100 <= times.len() * 5,
                "alone: {slow} of {} over {bound:?} (a round trip of {late:?}, then half one \
                 or this machine's own p95, {own_p95:?})",
                times.len()
            ),
            _ => assert!(
                median < late.mul_f64(2.5) + own_median,
                "batched: median {median:?} for a link {late:?} late ({own_median:?} with none)"
            ),
        }
    }
}

/// How long each of 16 clients' 50 decisions took on the Redis behind
/// `port`, sorted, in batches of `batch`.
async fn decision_times(port: u16, batch: usize) -> Vec<Duration> {
    let backend = RedisBackend::builder(&format!("redis://127.0.0.1:{port}"))
        .timeout(crate::support::AGREE)
        .max_batch(batch)
        .connect_lazy()
        .unwrap();
    let policy: Policy = "1000000/s".parse().unwrap();
    // Connecting and loading the scripts take several round trips.
    for _ in 0..5 {
        backend
            .check(&Key::new("user", "warm"), &policy, 1)
            .await
            .unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..16 {
        let (backend, policy) = (backend.clone(), policy.clone());
        tasks.spawn(async move {
            let key = Key::new("user", format!("client-{client}-{port}"));
            let mut times = Vec::new();
            for _ in 0..50 {
                let asked = std::time::Instant::now();
                backend.check(&key, &policy, 1).await.unwrap();
                times.push(asked.elapsed());
            }
            times
        });
    }
    let mut times = Vec::new();
    while let Some(more) = tasks.join_next().await {
        times.extend(more.unwrap());
    }
    times.sort();
    times
}

/// One client's key poisoned — replaced with a list, as an operator's
/// mistake or anyone who can write to Redis might — again before each of
/// its decisions, 20 rounds of six in a row and one beside 16 others': that
/// client's decisions fail alone (decided by the fallback), never open the
/// breaker nor leave Redis's health, and every other decision is Redis's;
/// batched and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_key_is_that_key_s_trouble_alone() {
    for batch in [64, 1] {
        let server = RedisServer::start();
        let changes = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = changes.clone();
        let redis = RedisBackend::builder(&server.url())
            .timeout(Duration::from_secs(5))
            .max_batch(batch)
            .on_health_change(move |_| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .connect()
            .await
            .unwrap();
        let backend = redis
            .clone()
            .with_breaker()
            .or_fallback(MemoryBackend::new());
        let policy: Policy = "1000/min".parse().unwrap();
        let poisoned = Key::new("user", "poisoned");
        let state = redis.redis_keys(&poisoned, &policy.limits()[0])[0].clone();
        let others: Vec<Key> = (0..16)
            .map(|i| Key::new("user", format!("bystander-{i}")))
            .collect();
        for round in 0..20 {
            server.cli(&["LPUSH", &state, "junk"]);
            // Six of its decisions in a row (more than the breaker's five
            // failures), then one of its beside the others' all at once (so
            // that they share batches).
            for _ in 0..6 {
                let decision = backend.check(&poisoned, &policy, 1).await.unwrap();
                assert_eq!(
                    decision.origin(),
                    Origin::Fallback,
                    "round {round}, batch {batch}"
                );
                server.cli(&["LPUSH", &state, "junk"]);
            }
            let mut all = vec![tokio::spawn(backend.check(&poisoned, &policy, 1))];
            all.extend(
                others
                    .iter()
                    .map(|k| tokio::spawn(backend.check(k, &policy, 1))),
            );
            let mut decisions = Vec::new();
            for decision in all {
                decisions.push(decision.await.unwrap());
            }
            let poisoned_origin = decisions[0].as_ref().unwrap().origin();
            assert_eq!(
                poisoned_origin,
                Origin::Fallback,
                "round {round}, batch {batch}"
            );
            for (i, decision) in decisions[1..].iter().enumerate() {
                let decision = decision.as_ref().unwrap();
                assert_eq!(
                    decision.origin(),
                    Origin::Primary,
                    "round {round}, bystander {i}"
                );
                assert!(decision.is_allowed());
            }
            assert!(
                !backend.primary().is_open(),
                "round {round}: the breaker opened"
            );
            assert_eq!(
                redis.health(),
                tower_ratelimit::backend::StoreHealth::Deciding
            );
        }
        // Deciding from the first call on: the health line never flapped.
        let changes = changes.load(std::sync::atomic::Ordering::Relaxed);
        assert!(changes <= 1, "{changes} changes of health, batch {batch}");
    }
}

/// A state that does not parse, or a key of another type, under each
/// algorithm: at most its first decision fails (as one key's trouble), and
/// the state is replaced with a new client's: the next ones are decided,
/// never denied for ever.
#[tokio::test]
async fn a_state_that_does_not_parse_is_replaced_with_a_new_client_s() {
    use tower_ratelimit::backend::Cause;
    use tower_ratelimit::Algorithm;
    let server = RedisServer::start();
    let redis = server.backend().await;
    let algorithms = [
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
        Algorithm::LeakyBucket,
    ];
    // In ms (13 digits), two minutes from now: the end of a 5/min
    // sliding window's state made now.
    let soon_ms = server.time_micros() / 1000 + 120_000;
    let values = [
        "x".to_owned(),
        "nan".to_owned(),
        "inf".to_owned(),
        "nan nan nan".to_owned(),
        "1 2".to_owned(),
        "-5 3".to_owned(),
        "99999999999999999999 1".to_owned(),
        // Ends past 2^53 µs, whole counts at the limit: in text, and as
        // the one-integer form of a window's state (19 digits: its end in
        // ms, then two counts); 19 characters whose end parses as
        // infinity.
        "9999999999999998 5 5".to_owned(),
        "9999999999999999999".to_owned(),
        "1e99999999999999999".to_owned(),
        "a list".to_owned(),
    ];
    // For a window (to any other, a state two minutes ahead): a count past
    // 2^53 (exact.lua's arithmetic never ended on one), in 19 characters
    // ending in an exponent, and in text.
    let window_values = [
        format!("{soon_ms}1e+300"),
        format!("{soon_ms}.1e+30"),
        format!("{} 1{} 0", soon_ms * 1000, "0".repeat(40)),
    ];
    // Alone (the lean scripts), and beside another limit (the general one).
    let policies = algorithms.into_iter().flat_map(|algorithm| {
        let alone = Policy::single(algorithm, "5/min".parse().unwrap()).unwrap();
        let beside = alone
            .to_builder()
            .limit("other", Algorithm::Gcra, "1000/s".parse().unwrap())
            .build()
            .unwrap();
        [(algorithm, alone), (algorithm, beside)]
    });
    for (algorithm, policy) in policies {
        let limits = policy.limits().len();
        let window = matches!(algorithm, Algorithm::SlidingWindow | Algorithm::FixedWindow);
        let for_windows = window_values.iter().filter(|_| window);
        for value in values.iter().chain(for_windows) {
            let value = value.as_str();
            let key = Key::new("user", format!("{algorithm:?}-{limits}-{value}"));
            for state in redis.redis_keys(&key, &policy.limits()[0]) {
                match value {
                    "a list" => server.cli(&["LPUSH", &state, "x"]),
                    value => server.cli(&["SET", &state, value]),
                };
            }
            match redis.check(&key, &policy, 1).await {
                Ok(_) => {}
                Err(e) => assert_eq!(
                    e.cause(),
                    Cause::KeyState,
                    "{algorithm:?} ({limits}) {value:?}: {e}"
                ),
            }
            for n in 0..2 {
                let decision = redis.check(&key, &policy, 1).await;
                let decision =
                    decision.unwrap_or_else(|e| panic!("{algorithm:?} ({limits}) {value:?}: {e}"));
                assert!(
                    decision.is_allowed(),
                    "{algorithm:?} ({limits}) {value:?}: decision {n} denied"
                );
            }
        }
    }
}

/// A full Redis (`maxmemory` reached under `noeviction`) answers every
/// decision `OOM`: that is told apart from an outage — the cause is
/// `OutOfMemory` in the errors, the health and the metrics' label, and a
/// breaker it opens says so in its refusals — while the fallback decides;
/// once memory is freed Redis decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_is_told_apart_from_an_outage() {
    use tower_ratelimit::backend::{Cause, StoreHealth};
    let server = RedisServer::start();
    let redis = server.backend().await;
    let backend = redis
        .clone()
        .with_breaker()
        .failures_to_open(5)
        .open_for(Duration::from_millis(100))
        .or_fallback(MemoryBackend::new());
    let policy: Policy = "1000/min".parse().unwrap();
    let user = |i: usize| Key::new("user", format!("u{i}"));
    assert!(redis.check(&user(0), &policy, 1).await.is_ok());
    // Full: Redis now uses more than its maxmemory, and evicts nothing.
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let error = redis.check(&user(1), &policy, 1).await.unwrap_err();
    assert_eq!(error.cause(), Cause::OutOfMemory, "{error}");
    assert!(
        matches!(
            redis.health(),
            StoreHealth::Failing {
                cause: Cause::OutOfMemory,
                ..
            }
        ),
        "{}",
        redis.health()
    );
    let mut origins = Vec::new();
    for i in 0..20 {
        origins.push(backend.check(&user(i), &policy, 1).await.unwrap().origin());
    }
    assert_eq!(origins[19], Origin::BreakerOpen, "{origins:?}");
    let refusal = backend
        .primary()
        .check(&user(0), &policy, 1)
        .await
        .unwrap_err();
    assert!(refusal.is_breaker_open());
    assert_eq!(refusal.opened_by(), Some(Cause::OutOfMemory), "{refusal}");
    assert!(refusal.to_string().contains("out_of_memory"), "{refusal}");
    // Memory freed: Redis decides again.
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    let started = std::time::Instant::now();
    while backend.check(&user(0), &policy, 1).await.unwrap().origin() != Origin::Primary {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "Redis never decided again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(redis.health(), StoreHealth::Deciding);
}
