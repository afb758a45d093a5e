//! Redis failing under load, with the breaker and a local fallback in front
//! of it: killed, restarted empty (its scripts gone), and slow. Every
//! decision is answered within the timeout plus a margin, and decisions come
//! from Redis again soon after it answers.

use std::time::{Duration, Instant};

use tower_ratelimit::backend::{Backend, Breaker, Fallback, MemoryBackend, RedisBackend};
use tower_ratelimit::decision::Origin;
use tower_ratelimit::key::Key;
use tower_ratelimit::Policy;

use crate::support::RedisServer;

const TIMEOUT: Duration = Duration::from_millis(50);
/// What a decision may take beyond the timeout on this shared, 2-core
/// machine while the rest of the suite runs (measured figures in the notes).
const MARGIN: Duration = Duration::from_millis(40);
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
        frozen_median < Duration::from_millis(1),
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
        times[times.len() / 2] < Duration::from_millis(1),
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
/// by the fallback, within the timeout; keys of the others stay on Redis.
/// (No breaker here: one covers a whole backend, so it would send every key
/// to the fallback; see RELIABILITY.md.)
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
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        for (keys, expected) in [(&on_dead, Origin::Fallback), (&on_live, Origin::Primary)] {
            for key in keys {
                let started = Instant::now();
                let decision = backend.check(key, &policy, 1).await.unwrap();
                slowest = slowest.max(started.elapsed());
                assert_eq!(decision.origin(), expected, "{key:?}");
            }
        }
    }
    assert!(slowest < TIMEOUT + MARGIN, "{slowest:?}");
    eprintln!(
        "cluster: {} keys on the dead primary, {} on the others; slowest {slowest:?}",
        on_dead.len(),
        on_live.len()
    );
}
