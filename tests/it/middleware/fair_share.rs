//! Fair shares of one capacity: the memory and Redis backends decide the
//! same, step for step; concurrent callers never take more than the
//! capacity on either; and, over HTTP through the example server (6 s at
//! 200/s each, on memory and on two servers sharing one Redis), a light
//! tenant beside a hog, a pro hog beside a free one, and a critical client
//! beside sheddable hogs get what their shares and classes say.
#![cfg(feature = "redis")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::layer::fair_share::FairShare;
use tower_ratelimit::layer::Class;
use tower_ratelimit::Quota;

use crate::support::example::{ExampleServer, KeptAlive};
use crate::support::{epoch_micros, unique_name, RedisServer, AGREE};

const CLASSES: [Class; 3] = [Class::Critical, Class::Default, Class::Sheddable];

/// One request of a generated sequence: µs after the last (less 3 ms),
/// tenant, weight, class.
fn steps() -> impl Strategy<Value = Vec<(u64, u8, u32, usize)>> {
    prop::collection::vec((0u64..30_000, 0u8..6, 1u32..11, 0usize..3), 1..200)
}

/// Replays `steps` through a capacity of `quota` in memory and on Redis
/// (tenants told apart: `max_tenants`): every decision the same.
async fn replay(
    quota: &str,
    max_tenants: usize,
    trusted: bool,
    steps: &[(u64, u8, u32, usize)],
) -> Result<(), TestCaseError> {
    let name = unique_name("conformance");
    let capacity = || {
        let capacity = FairShare::new(quota.parse::<Quota>().unwrap())
            .unwrap()
            .named(&name)
            .unwrap()
            .max_tenants(max_tenants);
        if trusted {
            capacity.trusted_tenants()
        } else {
            capacity
        }
    };
    let memory = capacity();
    let backend = RedisBackend::builder(&RedisServer::per_thread_url())
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let on_redis = capacity().redis(backend);
    let mut now = 1_700_000_000_000_000u64;
    for (i, &(dt, tenant, weight, class)) in steps.iter().enumerate() {
        // Up to 3 ms back: concurrent callers read the clock before they
        // take the state, so one may bring an earlier time than the last.
        now = now + dt - 3_000;
        let ask = |fair: FairShare| async move {
            fair.decide_at(&[tenant], weight, CLASSES[class], now)
                .await
                .unwrap()
        };
        let (expected, seen) = (ask(memory.clone()).await, ask(on_redis.clone()).await);
        prop_assert_eq!(expected, seen, "request {} of {:?}", i, steps);
    }
    Ok(())
}

/// Trusted tenants stay trusted through the builder's other steps
/// (`reserves`, `servers`): beside a tenant established a second before,
/// the last of 17 arriving together gets a share of its own (200/s over
/// 18: 11), not part of the newcomers' place (200/s over 2, by 17: 5).
#[test]
fn trusted_tenants_stay_trusted_through_the_builder() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for trusted in [false, true] {
            let capacity = FairShare::new(Quota::per_second(200).unwrap()).unwrap();
            let capacity = if trusted {
                capacity.trusted_tenants()
            } else {
                capacity
            };
            let capacity = capacity
                .reserves(tower_ratelimit::layer::Reserves::STANDARD)
                .servers(2);
            let start = 1_700_000_000_000_000u64;
            for at in (0..1_000_000).step_by(100_000) {
                capacity
                    .decide_at(&[0], 1, Class::Default, start + at)
                    .await
                    .unwrap();
            }
            let mut shares = Vec::new();
            for tenant in 1..=17u8 {
                let (_, share, ..) = capacity
                    .decide_at(&[tenant], 1, Class::Default, start + 1_000_000)
                    .await
                    .unwrap();
                shares.push(share);
            }
            // The last to arrive, all 18 there.
            let want = if trusted { 11 } else { 5 };
            assert_eq!(shares.last(), Some(&want), "trusted {trusted}: {shares:?}");
        }
    });
}

/// Idle tenants leave at most 64 a decision, oldest first, on both
/// backends, so that a decision after a crowd went quiet costs a bounded
/// amount: 200 tenants ask once, then nobody for an hour (past the
/// activity period of every capacity here, 40 minutes at 1/min); the next
/// four decisions, of one tenant, count 137, 73, 9 and 1 active (itself
/// among them), at 200/s, 5/s and 1/min.
#[test]
fn idle_tenants_leave_at_most_64_a_decision() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = RedisBackend::builder(&RedisServer::per_thread_url())
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        for quota in ["200/s", "5/s", "1/min"] {
            let name = unique_name("expiry");
            let capacity = || {
                FairShare::new(quota.parse::<Quota>().unwrap())
                    .unwrap()
                    .named(&name)
                    .unwrap()
                    .max_tenants(256)
            };
            for capacity in [capacity(), capacity().redis(backend.clone())] {
                let start = 1_700_000_000_000_000u64;
                for tenant in 0..200u8 {
                    let at = start + u64::from(tenant) * 1_000;
                    capacity
                        .decide_at(&[tenant], 1, Class::Default, at)
                        .await
                        .unwrap();
                }
                let mut active = Vec::new();
                for n in 0..4 {
                    let at = start + 3_600_000_000 + n * 1_000;
                    let (.., seen) = capacity
                        .decide_at(&[250], 1, Class::Default, at)
                        .await
                        .unwrap();
                    active.push(seen);
                }
                assert_eq!(active, [137, 73, 9, 1], "{quota}: {capacity:?}");
            }
        }
    });
}

/// A crowd: up to 40 tenants, the first two asking far more often (hogs),
/// over up to 24 s (some requests up to 3 ms before the one before), so
/// that the newcomers' place fills past its small
/// size, busy newcomers graduate, and the place grows.
fn crowds() -> impl Strategy<Value = Vec<(u64, u8, u32, usize)>> {
    prop::collection::vec(
        (
            0u64..60_000,
            prop_oneof![0u8..2, 0u8..2, 0u8..40],
            1u32..4,
            0usize..3,
        ),
        100..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Redis's script and the memory backend decide every request the
    /// same: admitted or not, the share, the retry-after, the active
    /// tenants (a small capacity and tenant cap, so that every branch
    /// runs: full, within share, borrowing, over share, the critical
    /// reserve, overflow, expiry).
    #[test]
    fn redis_decides_as_memory_does(steps in steps(), trusted in prop::bool::weighted(0.25)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(replay("50/s", 4, trusted, &steps))?;
    }

    /// The same with crowds of newcomers: the place past its small size,
    /// graduations of busy newcomers within their budget, the place
    /// growing. Both, a quarter of the time, with trusted tenants (no
    /// place).
    #[test]
    fn redis_decides_as_memory_does_for_crowds(steps in crowds(), trusted in prop::bool::weighted(0.25)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(replay("20/s", 64, trusted, &steps))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// Eight callers at once, tenants and classes at random, for 300 ms on
    /// each backend: the admissions never exceed the capacity over the
    /// time taken plus its depth (`t / T + D / T`): the borrowing is
    /// atomic.
    #[test]
    fn concurrent_callers_never_take_more_than_the_capacity(
        mix in prop::collection::vec((0u8..20, 1u32..11, 0usize..3), 8)
    ) {
                let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let backend = RedisBackend::builder(&RedisServer::per_thread_url()).timeout(AGREE).connect().await.unwrap();
            let name = unique_name("concurrent");
            let capacity = FairShare::new(Quota::per_second(100).unwrap())
                .unwrap()
                .named(&name)
                .unwrap();
            for fair in [capacity.clone(), capacity.redis(backend)] {
                let admitted = Arc::new(AtomicU64::new(0));
                let started = Instant::now();
                let mut tasks = tokio::task::JoinSet::new();
                for &(tenant, weight, class) in &mix {
                    let (fair, admitted) = (fair.clone(), admitted.clone());
                    tasks.spawn(async move {
                        while started.elapsed() < Duration::from_millis(300) {
                            let now = epoch_micros();
                            let (yes, ..) = fair
                                .decide_at(&[tenant], weight, CLASSES[class], now)
                                .await
                                .unwrap();
                            admitted.fetch_add(u64::from(yes), Ordering::Relaxed);
                        }
                    });
                }
                while tasks.join_next().await.is_some() {}
                let took = started.elapsed().as_secs_f64();
                // T = 10 ms, D = 200 ms (20 requests at least): at most
                // took / T + 20 (+1 for the first emission).
                let most = (took * 100.0).ceil() as u64 + 21;
                let admitted = admitted.load(Ordering::Relaxed);
                prop_assert!(admitted <= most, "{} admitted in {:.3} s (at most {})", admitted, took, most);
                prop_assert!(admitted >= 20, "{} admitted: the test did not load it", admitted);
            }
            Ok(())
        })?;
    }
}

/// A service that answers 200 at once.
fn ok() -> impl tower::Service<
    http::Request<()>,
    Response = http::Response<String>,
    Error = std::convert::Infallible,
    Future = std::future::Ready<Result<http::Response<String>, std::convert::Infallible>>,
> + Clone {
    tower::service_fn(|_: http::Request<()>| {
        std::future::ready(Ok(http::Response::new(String::new())))
    })
}

/// A client of `/api/shared`: its headers, how many tenant ids it takes
/// in turn (`x-user-id: <id>-<n>`; one: `<id>` as it is), how many
/// connections (each from a loopback address of its own), its pace
/// (requests a second over all its connections; `None`: as fast as it
/// can), and when it starts.
#[derive(Clone)]
struct Client {
    id: String,
    headers: Vec<(&'static str, &'static str)>,
    ids: u32,
    connections: usize,
    per_second: Option<f64>,
    from: Duration,
    /// Its connections' address, `127.0.0.<address>`; else one of their
    /// own each.
    address: Option<u8>,
}

fn client(id: &str, connections: usize, per_second: Option<f64>) -> Client {
    Client {
        id: id.to_owned(),
        headers: Vec::new(),
        ids: 1,
        connections,
        per_second,
        from: Duration::ZERO,
        address: None,
    }
}

impl Client {
    fn with(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// Each client's (admitted, refused) over `run`, its connections spread
/// over the servers on `ports`. A paced client never catches up after a
/// stall (no burst its pace does not make).
fn load(ports: &[u16], clients: &[Client], run: Duration) -> Vec<(u64, u64)> {
    load_by_slice(ports, clients, run)
        .into_iter()
        .map(|slices| {
            slices
                .iter()
                .fold((0, 0), |(a, r), (sa, sr)| (a + sa, r + sr))
        })
        .collect()
}

/// How long a slice of [`load_by_slice`] is.
const SLICE: Duration = Duration::from_millis(200);

/// Each client's (admitted, refused) in each [`SLICE`] of `run`.
fn load_by_slice(ports: &[u16], clients: &[Client], run: Duration) -> Vec<Vec<(u64, u64)>> {
    let slices = (run.as_millis() / SLICE.as_millis()) as usize + 1;
    let started = Instant::now();
    let mut threads = Vec::new();
    let mut address = 1u8;
    for (c, client) in clients.iter().enumerate() {
        for n in 0..client.connections {
            address = address.checked_add(1).expect("at most 254 connections");
            let port = ports[(c + n) % ports.len()];
            let client = client.clone();
            let address = client.address.unwrap_or(address);
            threads.push((
                c,
                std::thread::spawn(move || {
                    let mut seen = vec![(0u64, 0u64); slices];
                    let interval = client
                        .per_second
                        .map(|rate| Duration::from_secs_f64(client.connections as f64 / rate));
                    let mut next = started + client.from;
                    let mut asked = n as u32;
                    // Connected when it starts: an idle connection is closed.
                    std::thread::sleep(client.from);
                    let mut connection = KeptAlive::from(address, port);
                    while started.elapsed() < run {
                        if let Some(interval) = interval {
                            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                                std::thread::sleep(wait);
                            }
                            next = (next + interval).max(Instant::now());
                        }
                        let mut request = "GET /api/shared HTTP/1.1\r\nhost: x\r\n".to_owned();
                        match client.ids {
                            1 => request.push_str(&format!("x-user-id: {}\r\n", client.id)),
                            ids => request.push_str(&format!(
                                "x-user-id: {}-{}\r\n",
                                client.id,
                                asked % ids
                            )),
                        }
                        asked += client.connections as u32;
                        for (name, value) in &client.headers {
                            request.push_str(&format!("{name}: {value}\r\n"));
                        }
                        request.push_str("\r\n");
                        let status = connection.status(&request);
                        let slice = &mut seen[(started.elapsed().as_millis() / SLICE.as_millis())
                            .min(slices as u128 - 1)
                            as usize];
                        match status {
                            200 => slice.0 += 1,
                            429 => slice.1 += 1,
                            other => panic!("status {other}"),
                        }
                    }
                    seen
                }),
            ));
        }
    }
    let mut totals = vec![vec![(0, 0); slices]; clients.len()];
    for (c, thread) in threads {
        for (total, seen) in totals[c].iter_mut().zip(thread.join().unwrap()) {
            total.0 += seen.0;
            total.1 += seen.1;
        }
    }
    totals
}

/// What `a` and `b` were admitted in the slices where both were also
/// refused: where each asked more than it got, what each got is what its
/// share gave it, whatever the machine let it ask in the others.
fn admitted_while_both_refused(a: &[(u64, u64)], b: &[(u64, u64)]) -> (u64, u64) {
    a.iter()
        .zip(b)
        .filter(|((_, a_refused), (_, b_refused))| *a_refused > 0 && *b_refused > 0)
        .fold((0, 0), |(x, y), ((a, _), (b, _))| (x + a, y + b))
}

/// At most 1% of `seen` refused.
fn at_most_one_percent_refused((admitted, refused): (u64, u64)) -> bool {
    refused * 100 <= admitted + refused
}

/// How long each case of the example's figures runs.
const RUN: Duration = Duration::from_secs(6);

/// The most the example's capacity (200/s) admits over [`RUN`], 10% of
/// slack.
const MOST: u64 = (200 * 6) * 11 / 10;

/// How long a case of weights runs: twice [`RUN`]. Beside two busy loops
/// the ratio over 6 s moved from 3.28 to 3.92 from run to run (3.14 once
/// in CI), the first seconds weighing most; over 12 s, 3.94 to 3.97.
const WEIGHTS_RUN: Duration = Duration::from_secs(12);

/// Weights 4 to 1 between two hogs on 6 connections each, each asking
/// `per_second` over them (`None`: as fast as it can), on the example
/// servers at `ports` (one capacity of 200/s), judged where both hogs were
/// refused: on a busy machine a hog does not keep its connections busy,
/// and what one leaves unasked the other borrows (over whole runs: 2.16
/// to 1 beside a parallel build, 3.16 beside the suite).
fn weights(ports: &[u16], store: &str, per_second: Option<f64>) {
    let slices = load_by_slice(
        ports,
        &[
            client("pro", 6, per_second).with("x-api-key", "pro-demo"),
            client("free", 6, per_second).with("x-api-key", "free-demo"),
        ],
        WEIGHTS_RUN,
    );
    let both = admitted_while_both_refused(&slices[0], &slices[1]);
    let total = |c: &[(u64, u64)]| c.iter().map(|s| s.0).sum::<u64>();
    println!("{store}: a pro hog and a free hog ({per_second:?}/s each): {both:?} while both were refused");
    let ratio = both.0 as f64 / both.1.max(1) as f64;
    assert!(
        both.0 + both.1 >= 200,
        "too few slices with both refused: {both:?}"
    );
    assert!((3.2..=4.8).contains(&ratio), "ratio {ratio:.2}: {both:?}");
    assert!(
        total(&slices[0]) + total(&slices[1]) <= 2 * MOST,
        "{slices:?}"
    );
}

/// The example with no limit per client address that two hogs on 6
/// connections reach: behind the example's 100/s an address, each hog
/// asks the capacity 600/s at most.
const PER_IP_UNLIMITED: (&str, &str) = ("SHARED_PER_IP", "1000000");

/// The figures, on the example servers at `ports` (one capacity of 200/s
/// for all of them, 100/s per client address in front of it).
fn figures(ports: &[u16], store: &str) {
    // A tenant stays active two windows after it last asked: each case
    // starts once the last one's tenants have left.
    let pause = || std::thread::sleep(Duration::from_millis(2_500));

    let seen = load(
        ports,
        &[client("hog", 6, None), client("light", 1, Some(20.0))],
        RUN,
    );
    println!("{store}: a hog and a light tenant: {seen:?}");
    assert!(at_most_one_percent_refused(seen[1]), "{seen:?}");
    assert!(seen[0].0 + seen[1].0 <= MOST, "{seen:?}");
    assert!(seen[0].0 >= 600, "the hog gets what is left: {seen:?}");
    pause();

    // Sheddable tenants together asking far more than the capacity, and a
    // critical one (an enterprise key: a client's own x-priority is not
    // believed) at 20/s, half the critical reserve.
    for tenants in [2, 10, 50] {
        let mut clients: Vec<Client> = (0..tenants)
            .map(|n| {
                let connections = if tenants == 2 { 3 } else { 1 };
                client(&format!("batch-{n}"), connections, None).with("x-priority", "sheddable")
            })
            .collect();
        clients.push(
            client("pager", 1, Some(20.0))
                .with("x-priority", "critical")
                .with("x-api-key", "enterprise-demo"),
        );
        let seen = load(ports, &clients, RUN);
        let critical = seen[tenants];
        let sheddable: u64 = seen[..tenants].iter().map(|s| s.0).sum();
        println!("{store}: {tenants} sheddable tenants ({sheddable} admitted) and a critical client: {critical:?}");
        assert_eq!(critical.1, 0, "{tenants} sheddable tenants: {seen:?}");
        assert!(sheddable + critical.0 <= MOST, "{seen:?}");
        assert!(
            sheddable >= 500,
            "the sheddable ones take the rest: {seen:?}"
        );
        pause();
    }

    // A light tenant, then a client inventing tenant ids on 8 connections
    // from 8 addresses (each under its 100/s), as fast as it can.
    for ids in [200, 1_000, 5_000] {
        let flood = Client {
            ids,
            from: Duration::from_secs(1),
            ..client("made-up", 8, None)
        };
        let seen = load(ports, &[client("light", 1, Some(20.0)), flood], RUN);
        println!("{store}: a light tenant and {ids} made-up tenant ids: {seen:?}");
        assert!(
            at_most_one_percent_refused(seen[0]),
            "{ids} made-up ids: {seen:?}"
        );
        assert!(seen[0].0 + seen[1].0 <= MOST, "{seen:?}");
        pause();
    }
}

/// The example without its limit on the tenants an address brings: the
/// made-up ids of `figures` reach the capacity, whose own newcomers' place
/// is what holds them.
const TENANTS_UNLIMITED: (&str, &str) = ("SHARED_TENANTS_PER_IP", "1000000");

#[test]
fn over_http_in_memory_shares_follow_weights_and_classes() {
    let server = ExampleServer::start(&[TENANTS_UNLIMITED]);
    figures(&[server.port], "memory");
    weights(&[server.port], "memory", None);
}

/// Hogs asking the capacity 2 to 4 times their shares (400/s and 600/s
/// each, as behind the example's 100/s an address on 6 connections) keep
/// their weights, though each hog's connections, paced alike, send
/// together: 3.9 and 3.9 to 1 (2.1 and 3.0 while a tenant kept nothing of
/// its unused share past two of its intervals; `shares`'
/// `two_hogs_asking_in_bursts_share_by_weight`, the same in the unit
/// model).
#[test]
fn hogs_asking_a_few_times_their_shares_keep_their_weights() {
    let server = ExampleServer::start(&[TENANTS_UNLIMITED, PER_IP_UNLIMITED]);
    for per_second in [400.0, 600.0] {
        weights(&[server.port], "memory", Some(per_second));
        std::thread::sleep(Duration::from_millis(2_500));
    }
}

/// Hogs of weights 4 and 1 asking 1.5 times their shares (240/s and
/// 60/s) on 6 connections each, paced alike: the free one sends 6
/// together every 100 ms, further apart than its GCRA's tolerance (50
/// ms), and still gets its share, two thirds of what it asks (at least
/// 90% of that), and the weights hold where both were refused: 480 of
/// its share's 480 over 12 s, 4.0 to 1. Keeping nothing of its unused
/// share below that tolerance, it got 343 (0.47 of what it asked), 6.0
/// to 1. `shares`'
/// `hogs_a_little_past_their_shares_on_six_connections_keep_them` is the
/// same in the unit model.
#[test]
fn hogs_a_little_past_their_shares_on_six_connections_keep_them() {
    let server = ExampleServer::start(&[]);
    let slices = load_by_slice(
        &[server.port],
        &[
            client("pro", 6, Some(240.0)).with("x-api-key", "pro-demo"),
            client("free", 6, Some(60.0)).with("x-api-key", "free-demo"),
        ],
        WEIGHTS_RUN,
    );
    let total = |c: &[(u64, u64)]| c.iter().fold((0, 0), |(a, r), s| (a + s.0, r + s.1));
    let (pro, free) = (total(&slices[0]), total(&slices[1]));
    let both = admitted_while_both_refused(&slices[0], &slices[1]);
    let ratio = both.0 as f64 / both.1.max(1) as f64;
    println!("pro {pro:?}, free {free:?}; {both:?} while both were refused");
    let got = free.0 as f64 / (free.0 + free.1) as f64;
    assert!(
        got >= 0.9 * 2.0 / 3.0,
        "the free hog got {got:.2} of what it asked: {free:?}"
    );
    assert!(
        both.0 + both.1 >= 200,
        "too few slices with both refused: {both:?}"
    );
    assert!((3.2..=4.8).contains(&ratio), "ratio {ratio:.2}: {both:?}");
}

/// Two example servers on the Redis at `url`, with `env`. Their store
/// timeout is seconds: these tests check what Redis decides for servers
/// sharing it, and a slow answer on a busy machine would hand a request to
/// a server's fallback, whose shares are its own (see `redis_decided`).
fn two_servers_on(url: &str, env: &[(&str, &str)]) -> [ExampleServer; 2] {
    let env: Vec<(&str, &str)> = [("REDIS_URL", url), ("STORE_TIMEOUT_MS", "5000")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    [ExampleServer::start(&env), ExampleServer::start(&env)]
}

/// Fails when either server said Redis was failing: then some decisions
/// were its fallback's, not the shared capacity's.
fn redis_decided(servers: &[ExampleServer]) {
    for server in servers {
        while let Some(line) = server.printed_line() {
            assert!(!line.starts_with("redis: failing"), "{line}");
        }
    }
}

#[test]
fn over_http_two_servers_on_one_redis_share_one_capacity() {
    let redis = RedisServer::start();
    let servers = two_servers_on(&redis.url(), &[TENANTS_UNLIMITED]);
    figures(&[servers[0].port, servers[1].port], "redis, two servers");
    weights(
        &[servers[0].port, servers[1].port],
        "redis, two servers",
        None,
    );
    redis_decided(&servers);
}

/// A small capacity (20/s) shared by four tenants of weight 1 (5/s each):
/// two hogs on 3 connections each, far over their shares; a tenant at 4/s
/// (80% of its share: one asking exactly its share is refused now and then
/// when the machine's jitter brings two of its requests together past its
/// depth of two intervals) and one at 0.75/s (about as rarely as a tenant
/// stays active: it must ask within the period `max(2 W, 2 D)`, 2 s here),
/// who arrive together once the hogs are there, get all they ask, as
/// newcomers too (the hogs' saved requests leave them the headroom's
/// middle third); in memory and on two servers sharing one Redis.
#[test]
fn over_http_a_small_capacity_serves_light_tenants_in_full() {
    let redis = RedisServer::start();
    let url = redis.url();
    let small = [("SHARED_CAPACITY", "20")];
    let memory = ExampleServer::start(&small);
    let servers = two_servers_on(&url, &small);
    for (ports, store) in [
        (vec![memory.port], "memory"),
        (vec![servers[0].port, servers[1].port], "redis, two servers"),
    ] {
        let later = |c: Client| Client {
            from: Duration::from_secs(1),
            ..c
        };
        let seen = load(
            &ports,
            &[
                client("hog-1", 3, None),
                client("hog-2", 3, None),
                later(client("light", 1, Some(4.0))),
                later(client("trickle", 1, Some(0.75))),
            ],
            Duration::from_secs(12),
        );
        println!("{store}: 20/s, two hogs, 4/s and 0.75/s: {seen:?}");
        assert!(at_most_one_percent_refused(seen[2]), "{seen:?}");
        assert_eq!(seen[3].1, 0, "{seen:?}");
        assert!(seen[2].0 >= 40 && seen[3].0 >= 7, "{seen:?}");
        // 20 a second for 12 s, and the depth: 20 requests.
        let admitted: u64 = seen.iter().map(|s| s.0).sum();
        assert!(admitted <= 20 * 12 + 21, "{seen:?}");
        std::thread::sleep(Duration::from_millis(2_500));
    }
    redis_decided(&servers);
}

/// The workload that once refused light tenants over HTTP, measured on
/// demand: at 20/s in memory, ten tenants arriving together, each asking
/// 3.5/s (2.1 times its share), beside two asking 0.8/s, each on an
/// address of its own, for 40 s. Prints what the light ones got, and
/// fails on a refusal of theirs: `cargo test --all-features --test it --
/// --ignored over_http_ten_tenants_arriving --nocapture`
#[test]
#[ignore = "40 s: a measurement, run on demand"]
fn over_http_ten_tenants_arriving_beside_two_light_ones() {
    let server = ExampleServer::start(&[("SHARED_CAPACITY", "20")]);
    let mut clients: Vec<Client> = (0..10)
        .map(|n| client(&format!("crowd-{n}"), 1, Some(3.5)))
        .collect();
    clients.extend((0..2).map(|n| client(&format!("light-{n}"), 1, Some(0.8))));
    let seen = load(&[server.port], &clients, Duration::from_secs(40));
    println!("20/s, ten at 3.5/s and two at 0.8/s: {seen:?}");
    assert!(seen[10].1 + seen[11].1 == 0, "{seen:?}");
}

/// Made-up tenant ids added one every half second from 8 addresses, each
/// asking 3 to 6 a second as a real tenant would, beside a light tenant
/// asking 20/s (10% of the capacity of 200/s), for 60 s; with
/// `SHARED_TENANTS_PER_IP` at its default (4) and without it (1,000,000).
/// Prints what the light tenant got in each 10 s, and fails when the
/// limit does not keep it more than without. A measurement, run on demand:
/// `cargo test --all-features --test it -- --ignored
/// over_http_made_up_tenants_one_every_half_second --nocapture`
#[test]
#[ignore = "2 min: a measurement, run on demand"]
fn over_http_made_up_tenants_one_every_half_second() {
    let run = Duration::from_secs(60);
    let mut got = Vec::new();
    for tenants_per_ip in ["4", "1000000"] {
        let server = ExampleServer::start(&[("SHARED_TENANTS_PER_IP", tenants_per_ip)]);
        let mut clients = vec![client("light", 1, Some(20.0))];
        clients.extend((0..118u8).map(|i| Client {
            from: Duration::from_millis(1_000 + 500 * u64::from(i)),
            address: Some(200 + i % 8),
            ..client(&format!("made-up-{i}"), 1, Some(3.0 + f64::from(i % 4)))
        }));
        let slices = load_by_slice(&[server.port], &clients, run);
        let per_ten_seconds: Vec<(u64, u64)> = slices[0]
            .chunks(50)
            .map(|c| c.iter().fold((0, 0), |(a, r), s| (a + s.0, r + s.1)))
            .collect();
        let made_up: u64 = slices[1..].iter().flatten().map(|s| s.0).sum();
        println!(
            "SHARED_TENANTS_PER_IP={tenants_per_ip}: the light tenant (admitted, refused) \
             each 10 s {per_ten_seconds:?}; made-up ids admitted {made_up}"
        );
        got.push(per_ten_seconds[5].0);
    }
    assert!(got[0] > got[1], "the last 10 s: {got:?}");
}

/// Waiting instead of refusing (`wait_up_to`): a hog keeping 40 requests
/// waiting at once and a light tenant at 20/s, for 3 s at 200/s. The light
/// tenant's requests are admitted at once (p99 of its waits printed, at
/// most 50 ms: its own share admits it, the hog's queue is not ahead of
/// it); the hog gets at least its share (it borrows less of what is left
/// than when it asks without waiting: waiting requests are woken by the
/// timer); the total stays within the capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_hog_does_not_delay_a_light_tenant() {
    use tower::{Layer, ServiceExt};
    let shared = FairShare::new(Quota::per_second(200).unwrap())
        .unwrap()
        .tenant(tower_ratelimit::key::Header::new("x-user-id"))
        .wait_up_to(Duration::from_millis(500), 1000);
    let svc = shared.layer(ok());
    let request = |user: &str| {
        http::Request::builder()
            .header("x-user-id", user)
            .body(())
            .unwrap()
    };
    let run = Duration::from_secs(3);
    let started = Instant::now();
    let hog_admitted = Arc::new(AtomicU64::new(0));
    let mut hogs = Vec::new();
    for _ in 0..40 {
        let (svc, admitted) = (svc.clone(), hog_admitted.clone());
        hogs.push(tokio::spawn(async move {
            while started.elapsed() < run {
                let response = svc.clone().oneshot(request("hog")).await.unwrap();
                admitted.fetch_add(u64::from(response.status() == 200), Ordering::Relaxed);
            }
        }));
    }
    let mut waits = Vec::new();
    let mut light_refused = 0;
    let mut next = Instant::now();
    while started.elapsed() < run {
        next += Duration::from_millis(50);
        tokio::time::sleep_until(next.into()).await;
        let sent = Instant::now();
        let response = svc.clone().oneshot(request("light")).await.unwrap();
        waits.push(sent.elapsed());
        light_refused += usize::from(response.status() != 200);
    }
    for hog in hogs {
        hog.await.unwrap();
    }
    let took = started.elapsed().as_secs_f64();
    waits.sort();
    let p99 = waits[waits.len() * 99 / 100];
    let hog = hog_admitted.load(Ordering::Relaxed);
    println!(
        "waiting: light p99 wait {p99:?} over {} requests ({light_refused} refused); hog admitted {hog} in {took:.2} s",
        waits.len()
    );
    assert_eq!(light_refused, 0);
    assert!(p99 < Duration::from_millis(50), "light p99 {p99:?}");
    let total = hog + waits.len() as u64;
    assert!(
        total as f64 <= 200.0 * took + 21.0,
        "{total} in {took:.2} s"
    );
    // At least its share (100/s with the light tenant active), less a
    // tenth for the timer's granularity under load.
    assert!(
        hog as f64 >= 90.0 * run.as_secs_f64(),
        "the hog gets its share: {hog}"
    );
}

/// A capacity over more than a day is refused with what is wrong; weights
/// past 1,000 count as 1,000 on both backends (the conformance above
/// draws weights up to 10; here the decisions at the extremes agree).
#[tokio::test]
async fn a_capacity_s_bounds_are_checked_and_kept_on_both_backends() {
    let err = FairShare::new("100/week".parse::<Quota>().unwrap()).unwrap_err();
    assert!(err.to_string().contains("at most a day"), "{err}");
    let backend = RedisBackend::builder(&RedisServer::per_thread_url())
        .timeout(AGREE)
        .connect()
        .await
        .unwrap();
    let name = unique_name("bounds");
    let capacity = FairShare::new("1/day".parse::<Quota>().unwrap())
        .unwrap()
        .named(&name)
        .unwrap();
    let (memory, on_redis) = (capacity.clone(), capacity.redis(backend));
    let mut now = 1_700_000_000_000_000u64;
    for (i, weight) in [u32::MAX, 1, 0, 1_000, 1_001, 7].into_iter().enumerate() {
        now += 1_000_000;
        let tenant = [i as u8];
        let expected = memory
            .decide_at(&tenant, weight, Class::Default, now)
            .await
            .unwrap();
        let seen = on_redis
            .decide_at(&tenant, weight, Class::Default, now)
            .await
            .unwrap();
        assert_eq!(expected, seen, "weight {weight}");
    }
}

/// On a cluster, the capacity's two keys share one slot and decide as
/// memory does; with Redis gone, each server decides on a capacity of its
/// own at once instead of failing the request.
#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_and_without_redis_the_capacity_still_decides() {
    use tower::{Layer, ServiceExt};
    let cluster = crate::support::RedisCluster::start();
    let backend = RedisBackend::cluster_builder(cluster.urls())
        .connect()
        .await
        .unwrap();
    let capacity = FairShare::new(Quota::per_second(5).unwrap())
        .unwrap()
        .named("cluster")
        .unwrap();
    let (memory, on_redis) = (capacity.clone(), capacity.redis(backend));
    let mut now = 1_700_000_000_000_000u64;
    for i in 0..40u64 {
        now += 37_000 * (i % 3);
        let tenant = [(i % 4) as u8];
        let class = CLASSES[(i % 3) as usize];
        let expected = memory
            .decide_at(&tenant, 1 + (i % 5) as u32, class, now)
            .await
            .unwrap();
        let seen = on_redis
            .decide_at(&tenant, 1 + (i % 5) as u32, class, now)
            .await
            .unwrap();
        assert_eq!(expected, seen, "request {i}");
    }

    // Without Redis, each of 3 servers decides on its third of 200/s
    // (67/s, a depth of 20): over a second of requests as fast as they
    // come, at most its rate over the time taken and its depth.
    let redis = RedisServer::start();
    let lost = RedisBackend::builder(&redis.limiter_url())
        .timeout(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let svc = FairShare::new(Quota::per_second(200).unwrap())
        .unwrap()
        .servers(3)
        .redis(lost)
        .layer(ok());
    drop(redis);
    let (mut admitted, mut asked) = (0u64, 0u64);
    let mut refusal = None;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        let response = svc.clone().oneshot(http::Request::new(())).await.unwrap();
        asked += 1;
        if response.status() == 429 && refusal.is_none() {
            use http_body_util::BodyExt;
            let body = response.into_body().collect().await.unwrap().to_bytes();
            refusal = Some(String::from_utf8(body.to_vec()).unwrap());
        } else if response.status() == 200 {
            admitted += 1;
            let policy = response.headers()["ratelimit-policy"].to_str().unwrap();
            assert_eq!(
                policy, "\"shared\";q=67;w=1",
                "the part's share is reported"
            );
        }
    }
    let took = started.elapsed().as_secs_f64();
    let most = (took * 67.0).ceil() as u64 + 21;
    assert!(
        admitted <= most,
        "{admitted} of {asked} admitted in {took:.2} s: at most {most}"
    );
    assert!(admitted >= 10 && asked > admitted, "{admitted} of {asked}");
    // A refusal's body is the one every limit of this crate answers with.
    assert_eq!(
        refusal.as_deref(),
        Some(r#"{"error":"rate_limit_exceeded","limit":67,"window":"1s","retry_after_seconds":1}"#)
    );
}

/// Redis frozen (SIGSTOP) under a shared capacity: five requests wait the
/// timeout, then the rest are decided locally at once; once Redis answers
/// again it decides within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_costs_the_timeout_a_few_times_then_nothing() {
    use tower::{Layer, ServiceExt};
    let redis = RedisServer::start();
    let timeout = Duration::from_millis(200);
    let backend = RedisBackend::builder(&redis.limiter_url())
        .timeout(timeout)
        .connect()
        .await
        .unwrap();
    // A capacity one tenant's 51 requests in a row fit in (a lone tenant
    // borrows at most a third of the depth past its share's own).
    let svc = FairShare::new(Quota::per_second(10_000).unwrap())
        .unwrap()
        .redis(backend)
        .layer(ok());
    let ask = || async {
        let started = Instant::now();
        let response = svc.clone().oneshot(http::Request::new(())).await.unwrap();
        (response.status(), started.elapsed())
    };
    assert_eq!(ask().await.0, 200);
    redis.pause();
    let mut slow = 0;
    for _ in 0..50 {
        let (status, took) = ask().await;
        assert_eq!(status, 200);
        assert!(took < timeout + Duration::from_millis(100), "{took:?}");
        slow += usize::from(took >= timeout);
    }
    // Five to open, and at most a probe or two in the 50 (each waits
    // 100 ms or more apart).
    assert!((5..=7).contains(&slow), "{slow} waited the timeout");
    redis.resume();
    // The calls that timed out reach Redis as it wakes: counted first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = redis.evalsha_calls();
    let resumed = Instant::now();
    while redis.evalsha_calls() == before {
        assert!(
            resumed.elapsed() < Duration::from_secs(1),
            "Redis was not asked again"
        );
        ask().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A per-user limit in front of the capacity, in the guide's order: with
/// `count_if(|res| !res.refused_by_a_limit())` the requests the capacity
/// refused spend nothing of the user's budget; without it, each one does.
#[tokio::test]
async fn a_refusal_behind_spends_nothing_of_a_limit_in_front() {
    use tower::{Layer, ServiceExt};
    use tower_ratelimit::clock::{ManualClock, Micros};
    use tower_ratelimit::key::Header;
    use tower_ratelimit::{Policy, RateLimitLayer};

    for give_back in [true, false] {
        // A capacity of 1/s on a clock that stands still: its depth
        // admits some, then it refuses.
        let clock = ManualClock::new(Micros::from_secs(1_000));
        let capacity = FairShare::new(Quota::per_second(1).unwrap())
            .unwrap()
            .tenant(Header::new("x-user-id"))
            .clock(clock.clone());
        let per_user =
            RateLimitLayer::new("100/min".parse::<Policy>().unwrap()).key(Header::new("x-user-id"));
        let per_user = match give_back {
            true => per_user.count_if(|res| !res.refused_by_a_limit()),
            false => per_user,
        };
        let svc = per_user.layer(capacity.layer(ok()));
        let request = || {
            http::Request::builder()
                .header("x-user-id", "heavy")
                .body(())
                .unwrap()
        };
        let (mut admitted, mut refused) = (0u64, 0u64);
        for _ in 0..30 {
            match svc
                .clone()
                .oneshot(request())
                .await
                .unwrap()
                .status()
                .as_u16()
            {
                200 => admitted += 1,
                429 => refused += 1,
                other => panic!("status {other}"),
            }
        }
        assert!(admitted >= 1 && refused >= 10, "{admitted} and {refused}");
        // A minute on, the capacity admits one more, whose headers are the
        // outer budget's (a refusal's are the refusing capacity's).
        clock.advance(Duration::from_secs(60));
        let last = svc.clone().oneshot(request()).await.unwrap();
        assert_eq!(last.status(), 200);
        let remaining = last.headers()["x-ratelimit-remaining"].to_str().unwrap();
        let spent = 100 - remaining.parse::<u64>().unwrap() - 1;
        let expected = if give_back { admitted } else { 30 };
        assert_eq!(
            spent, expected,
            "given back: {give_back}: {admitted} admitted"
        );
    }

    // The same with a limit behind it (per `x-inner`, its headers off so
    // that the outer one's show): its refusals are marked too. A last
    // request of another `x-inner` passes it and shows the outer budget:
    // the first and itself spent it, not the 4 refused.
    let inner = RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
        .key(Header::new("x-inner"))
        .headers(tower_ratelimit::layer::HeaderStyle::None);
    let outer = RateLimitLayer::new("100/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .count_if(|res| !res.refused_by_a_limit());
    let svc = outer.layer(inner.layer(ok()));
    let mut statuses = Vec::new();
    let mut remaining = String::new();
    for inner_key in ["a", "a", "a", "a", "a", "b"] {
        let req = http::Request::builder()
            .header("x-user-id", "heavy")
            .header("x-inner", inner_key)
            .body(())
            .unwrap();
        let response = svc.clone().oneshot(req).await.unwrap();
        statuses.push(response.status().as_u16());
        // A refusal inside carries none of the outer budget's headers.
        if let Some(value) = response.headers().get("x-ratelimit-remaining") {
            remaining = value.to_str().unwrap().to_owned();
        }
    }
    assert_eq!(statuses, [200, 429, 429, 429, 429, 200]);
    assert_eq!(
        remaining, "98",
        "only the admitted ones spent the outer budget"
    );
}

/// On the backend the app's limits use (Redis, its breaker, a fallback for
/// three servers): once the limits have opened the breaker on a frozen
/// Redis, the capacity waits for Redis no longer — its decisions come at
/// once, where a circuit of its own would have waited the timeout five
/// times — and decides on its third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_app_s_composed_backend_one_breaker_and_one_rule() {
    use tower::{Layer, ServiceExt};
    use tower_ratelimit::backend::{Backend, MemoryBackend};
    use tower_ratelimit::key::Key;
    let redis = RedisServer::start();
    let timeout = Duration::from_secs(1);
    let backend = RedisBackend::builder(&redis.limiter_url())
        .timeout(timeout)
        .connect()
        .await
        .unwrap()
        .with_breaker()
        .or_fallback(MemoryBackend::builder().servers(3).build());
    let svc = FairShare::new(Quota::per_second(200).unwrap())
        .unwrap()
        .named(&unique_name("composed"))
        .unwrap()
        .redis(&backend)
        .layer(ok());
    let first = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    let policy = first.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(policy.ends_with(";q=200;w=1"), "Redis decides: {policy}");
    redis.pause();
    // The limits find Redis frozen: five failures open the breaker.
    let policy: tower_ratelimit::Policy = "10/s".parse().unwrap();
    for i in 0..5 {
        let _ = backend
            .check(&Key::new("user", format!("u{i}")), &policy, 1)
            .await;
    }
    assert!(backend.primary().is_open());
    let started = Instant::now();
    for _ in 0..5 {
        let response = svc.clone().oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(response.status(), 200);
        let policy = response.headers()["ratelimit-policy"].to_str().unwrap();
        assert!(policy.ends_with(";q=67;w=1"), "its third: {policy}");
    }
    let took = started.elapsed();
    assert!(
        took < timeout,
        "five decisions took {took:?}: they waited for Redis"
    );
    redis.resume();
}
