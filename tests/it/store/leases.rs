//! Leased budgets (`RedisBackendBuilder::leased`): ten servers on one Redis,
//! each spending leases of the budget locally. What must hold: no more than
//! the limit admitted (plus the documented bound), little of it stranded,
//! several admissions per Redis call, and refusals without round trips.
#![cfg(feature = "redis")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::RedisServer;
use tower_ratelimit::backend::{Backend, RedisBackend};
use tower_ratelimit::decision::Origin;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

const SERVERS: u32 = 10;
const TASKS_PER_SERVER: usize = 4;
/// A decision's time limit where exactness is the question, not latency.
const GENEROUS: Duration = Duration::from_secs(2);

/// A backend on `server` leasing for `servers` servers, whose decisions may
/// take `timeout`.
async fn leasing(server: &RedisServer, servers: u32, timeout: Duration) -> RedisBackend {
    RedisBackend::builder(&server.limiter_url())
        .timeout(timeout)
        .leased(servers)
        .connect()
        .await
        .unwrap()
}

/// `SERVERS` leasing backends, each with its own connection.
async fn servers(server: &RedisServer) -> Vec<RedisBackend> {
    let mut backends = Vec::new();
    for _ in 0..SERVERS {
        backends.push(leasing(server, SERVERS, GENEROUS).await);
    }
    backends
}

/// Every server's tasks send `per_task` requests of one key at once;
/// how many were admitted.
async fn hammer(backends: &[RedisBackend], policy: &Policy, key: &Key, per_task: usize) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for backend in backends {
        for _ in 0..TASKS_PER_SERVER {
            let (backend, policy, key) = (backend.clone(), policy.clone(), key.clone());
            let admitted = admitted.clone();
            tasks.spawn(async move {
                for _ in 0..per_task {
                    if backend.check(&key, &policy, 1).await.unwrap().is_allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }
    tasks.join_all().await;
    admitted.load(Ordering::Relaxed)
}

/// Wait until at least `margin` is left in the current fixed window of
/// `window` (Redis's clock), so that one window holds the whole test.
async fn within_one_window(server: &RedisServer, window: Duration, margin: Duration) {
    let window = window.as_micros() as u64;
    let left = window - server.time_micros() % window;
    if left < margin.as_micros() as u64 {
        tokio::time::sleep(Duration::from_micros(left + 100_000)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_leasing_servers_admit_the_limit_with_several_requests_per_call() {
    let server = RedisServer::start();
    let backends = servers(&server).await;
    // 10,000 an hour over ten servers: shares of 10,000 / (30 × 10) = 33.
    let policy = Policy::single(Algorithm::FixedWindow, Quota::per_hour(10_000).unwrap()).unwrap();
    let key = Key::new("user", "alice");
    within_one_window(&server, Duration::from_secs(3600), Duration::from_secs(60)).await;

    // 12,000 requests against 10,000, then 2,000 more once it is spent.
    let admitted = hammer(&backends, &policy, &key, 300).await;
    let calls = server.evalsha_calls();
    let held: u64 = backends.iter().map(|b| b.leased_units()).sum();
    assert!(
        admitted >= 5 * calls,
        "{admitted} admitted in {calls} calls: fewer than 5 a call"
    );
    // And Redis counted them: a call leases at most a share (33 units), so
    // 10,000 units took at least 300 calls.
    assert!(calls >= 300, "10,000 units in {calls} calls");
    assert_eq!(admitted + held, 10_000, "admitted {admitted}, held {held}");
    let more = hammer(&backends, &policy, &key, 50).await;
    let refusal_calls = server.evalsha_calls() - calls;
    let admitted = admitted + more;
    let stranded: u64 = backends.iter().map(|b| b.leased_units()).sum();
    // Counted in Redis when leased: never beyond the limit in one window.
    // Stranded: the units still held in leases, under 5%.
    assert!(admitted <= 10_000, "admitted {admitted}");
    assert_eq!(admitted + stranded, 10_000);
    assert!(stranded <= 500, "stranded {stranded}");
    // The refusals were answered without asking Redis each time.
    assert!(
        refusal_calls <= 200,
        "2,000 requests past the limit took {refusal_calls} calls"
    );
    eprintln!(
        "leases: {admitted} admitted in {} calls ({:.1} a call), {stranded} stranded",
        calls,
        admitted as f64 / calls as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_bucket_admits_no_more_than_its_bound_across_ten_servers() {
    let server = RedisServer::start();
    let backends = servers(&server).await;
    // 6,000 a minute: 6,000 at once, then 100 a second. Shares of 20.
    let policy = Policy::single(Algorithm::TokenBucket, Quota::per_minute(6_000).unwrap()).unwrap();
    let key = Key::new("user", "dave");
    let before = server.time_micros();
    let admitted = hammer(&backends, &policy, &key, 200).await;
    let after = server.time_micros();
    // What one round trip per request could admit at most in that time:
    // the full bucket and its refill.
    let exact = 6_000 + (after - before) / 10_000 + 1;
    let bound = 3 * 20 * u64::from(SERVERS) / 2; // 1.5 shares a server
    eprintln!("bucket: {admitted} admitted, exact at most {exact}, bound {bound}");
    assert!(admitted <= exact + bound, "{admitted} > {exact} + {bound}");
    // And spent almost all of it: what is stranded is under the bound.
    assert!(admitted + bound >= 6_000, "{admitted}");
}

#[tokio::test]
async fn a_lease_ends_and_gives_back_what_it_did_not_spend() {
    let server = RedisServer::start();
    let leased = leasing(&server, 1, GENEROUS).await;
    let alone = server.backend().await;
    // Shares of 60,000 / 30 = 2,000, lasting 600 ms (1% of the window).
    let policy =
        Policy::single(Algorithm::FixedWindow, Quota::per_minute(60_000).unwrap()).unwrap();
    let key = Key::new("user", "bob");
    within_one_window(&server, Duration::from_secs(60), Duration::from_secs(5)).await;
    let first = leased.check(&key, &policy, 1).await.unwrap();
    assert!(first.is_allowed());
    assert_eq!(first.origin(), Origin::Primary);
    // Redis counted the whole share.
    assert_eq!(first.deciding().remaining(), 60_000 - 2_000);
    assert_eq!(leased.leased_units(), 1_999);
    let second = leased.check(&key, &policy, 1).await.unwrap();
    assert_eq!(second.origin(), Origin::Leased);
    assert_eq!(leased.leased_units(), 1_998);

    // Past its term, the next request gives back 1,998 and takes a share.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let third = leased.check(&key, &policy, 1).await.unwrap();
    assert_eq!(third.origin(), Origin::Primary);
    assert_eq!(leased.leased_units(), 1_999);
    // Another server (no lease) sees 3 spent and one share held.
    let peek = alone.check(&key, &policy, 0).await.unwrap();
    assert_eq!(peek.deciding().remaining(), 60_000 - 3 - 1_999);
}

#[tokio::test]
async fn policies_that_must_see_every_request_are_never_leased() {
    let server = RedisServer::start();
    let leased = leasing(&server, 1, GENEROUS).await;
    let key = Key::new("user", "carol");
    let counted = Policy::builder()
        .limit("minute", Algorithm::Gcra, Quota::per_minute(1000).unwrap())
        .count_denied(true)
        .build()
        .unwrap();
    for policy in [
        counted,
        Policy::builder()
            .with(
                tower_ratelimit::Limit::concurrent("flight", 1000)
                    .and_then(|l| l.lease(Duration::from_secs(30)))
                    .unwrap(),
            )
            .build()
            .unwrap(),
    ] {
        for _ in 0..3 {
            let decision = leased.check(&key, &policy, 1).await.unwrap();
            assert_eq!(decision.origin(), Origin::Primary);
        }
        assert_eq!(leased.leased_units(), 0);
    }
}

#[tokio::test]
async fn leasing_needs_at_least_one_server() {
    let server = RedisServer::start();
    let err = RedisBackend::builder(&server.limiter_url())
        .leased(0)
        .connect()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
}

#[tokio::test]
async fn the_example_server_leases_every_limit_with_leased_1() {
    use std::net::SocketAddr;
    let server = RedisServer::start();
    let config = crate::server::Config {
        leased: true,
        servers: 2,
        ..Default::default()
    };
    let app = crate::server::redis_app(&config, &server.url())
        .await
        .unwrap()
        .into_make_service_with_connect_info::<SocketAddr>();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // The enterprise tier: 10,000 an hour, shares of 10,000 / (30 × 2) = 166.
    let calls = server.evalsha_calls();
    for _ in 0..100 {
        let (status, headers, _) = crate::support::send(
            addr,
            http::Method::GET,
            "/api/key",
            &[("x-api-key", "enterprise-demo")],
            "",
        )
        .await;
        assert_eq!(status, 200);
        assert!(headers.contains_key("ratelimit"));
    }
    let calls = server.evalsha_calls() - calls;
    // A share lasts at most a second: a slow machine may need a few; and
    // the budget is Redis's: the first share at least was asked for.
    assert!(
        (1..=10).contains(&calls),
        "100 requests took {calls} Redis calls"
    );
}

#[tokio::test]
async fn what_a_fixed_window_leased_lapses_with_its_window() {
    let server = RedisServer::start();
    let leased = leasing(&server, 1, GENEROUS).await;
    let alone = server.backend().await;
    // 3,000 a second: shares of 100, a window of one second.
    let policy = Policy::single(Algorithm::FixedWindow, Quota::per_second(3_000).unwrap()).unwrap();
    let key = Key::new("user", "erin");
    within_one_window(&server, Duration::from_secs(1), Duration::from_millis(500)).await;
    assert!(leased.check(&key, &policy, 1).await.unwrap().is_allowed());
    assert_eq!(leased.leased_units(), 99);

    // Into the next window, where another server counts first.
    let into = server.time_micros() % 1_000_000;
    tokio::time::sleep(Duration::from_micros(1_000_000 - into + 50_000)).await;
    assert!(alone.check(&key, &policy, 1).await.unwrap().is_allowed());
    // The 99 unspent units were counted in the last window: giving them back
    // now would lend this window room it never had. They lapse.
    assert!(leased.check(&key, &policy, 1).await.unwrap().is_allowed());
    let peek = alone.check(&key, &policy, 0).await.unwrap();
    assert_eq!(peek.deciding().remaining(), 3_000 - 1 - 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_keeps_admitting_at_once_while_redis_is_frozen() {
    let server = RedisServer::start();
    // A timeout long enough that waiting for Redis would show under any
    // load: no request may wait half of it.
    let leased = leasing(&server, 1, Duration::from_millis(400)).await;
    // 3,000 a minute: shares of 100 lasting 600 ms.
    let policy = Policy::single(Algorithm::FixedWindow, Quota::per_minute(3_000).unwrap()).unwrap();
    let key = Key::new("user", "frank");
    within_one_window(&server, Duration::from_secs(60), Duration::from_secs(5)).await;
    assert!(leased.check(&key, &policy, 1).await.unwrap().is_allowed());

    server.pause();
    // 60 more: past half a share a top-up is tried (and fails after the
    // timeout) in the background; no request waits for it.
    let mut slowest = Duration::ZERO;
    for _ in 0..60 {
        let started = std::time::Instant::now();
        let decision = leased.check(&key, &policy, 1).await.unwrap();
        slowest = slowest.max(started.elapsed());
        assert!(decision.is_allowed());
        assert_eq!(decision.origin(), Origin::Leased);
    }
    server.resume();
    assert!(slowest < Duration::from_millis(200), "slowest {slowest:?}");
}

#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_hold_on_a_redis_cluster() {
    let cluster = crate::support::RedisCluster::start();
    let mut backends = Vec::new();
    for _ in 0..SERVERS {
        let backend = RedisBackend::cluster_builder(cluster.urls())
            .timeout(GENEROUS)
            .leased(SERVERS)
            .connect()
            .await
            .unwrap();
        backends.push(backend);
    }
    // 3,000 an hour over ten servers: shares of 10.
    let policy = Policy::single(Algorithm::FixedWindow, Quota::per_hour(3_000).unwrap()).unwrap();
    let key = Key::new("user", "grace");
    within_one_window(
        &cluster.nodes[0],
        Duration::from_secs(3600),
        Duration::from_secs(60),
    )
    .await;
    let admitted = hammer(&backends, &policy, &key, 100).await;
    let held: u64 = backends.iter().map(|b| b.leased_units()).sum();
    assert!(admitted <= 3_000, "admitted {admitted}");
    assert_eq!(admitted + held, 3_000, "admitted {admitted}, held {held}");
}

#[tokio::test]
async fn a_lease_whose_request_went_away_leaves_no_one_waiting() {
    let server = RedisServer::start();
    let leased = leasing(&server, 1, Duration::from_millis(300)).await;
    let policy = Policy::single(Algorithm::FixedWindow, Quota::per_minute(3_000).unwrap()).unwrap();
    let key = Key::new("user", "heidi");
    // The first request starts taking a lease, and goes away mid-call.
    server.pause();
    let gone = tokio::time::timeout(Duration::from_millis(20), leased.check(&key, &policy, 1));
    assert!(gone.await.is_err());
    server.resume();
    // The next one takes the lease itself, rather than waiting for the
    // one that will never come back.
    let started = std::time::Instant::now();
    let decision = leased.check(&key, &policy, 1).await.unwrap();
    assert!(decision.is_allowed());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
}
