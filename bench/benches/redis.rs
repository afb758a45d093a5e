//! Decisions per second and latency against one local Redis, for each
//! algorithm, beside `redis-benchmark`'s rate for the very same EVALSHA
//! command (the ceiling for one round trip per decision), and Redis memory
//! per key. Starts its own `redis-server` on a free port.
//!
//! Run: `cargo bench -p tower-ratelimit-bench --features redis --bench redis`

#[allow(dead_code)] // the tests' Redis processes; this bench needs one server
#[path = "../../tests/it/support/redis.rs"]
mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tower_ratelimit::backend::Backend;
use tower_ratelimit::backend::{KeyFormat, RedisBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

const TASKS: usize = 64;
const SECONDS: u64 = 4;

/// `redis-benchmark`'s requests per second for `command`, 64 clients,
/// with `pipeline` commands in flight per client.
fn ceiling(port: u16, command: &[String], pipeline: u32) -> f64 {
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-c",
            "64",
            "-n",
            "300000",
            "-P",
            &pipeline.to_string(),
            "-q",
        ])
        .args(command)
        .output()
        .expect("redis-benchmark");
    let text = String::from_utf8_lossy(&out.stdout);
    text.rsplit(" requests per second")
        .nth(1)
        .and_then(|s| s.rsplit([' ', '\r']).next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rate in: {text}"))
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

/// Decisions per second, p50 and p99 in ms, and this process's CPU per
/// decision in µs, of `TASKS` tasks each running `task` until the deadline.
async fn run<T, F>(task: T) -> Run
where
    T: Fn(usize, Instant) -> F,
    F: std::future::Future<Output = Vec<u32>> + Send + 'static,
{
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let (started, cpu) = (Instant::now(), process_cpu());
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        tasks.spawn(task(t, deadline));
    }
    let mut all: Vec<u32> = tasks.join_all().await.into_iter().flatten().collect();
    let (elapsed, cpu) = (started.elapsed().as_secs_f64(), process_cpu() - cpu);
    all.sort_unstable();
    Run {
        rate: all.len() as f64 / elapsed,
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
        cpu_us: cpu * 1e6 / all.len() as f64,
    }
}

struct Run {
    rate: f64,
    p50: f64,
    p99: f64,
    cpu_us: f64,
}

/// Latencies in µs of `ask` run in a loop until `deadline`.
async fn timed<F: std::future::Future<Output = ()>>(
    deadline: Instant,
    ask: impl Fn() -> F,
) -> Vec<u32> {
    let mut latencies = Vec::new();
    while Instant::now() < deadline {
        let start = Instant::now();
        ask().await;
        latencies.push(start.elapsed().as_micros() as u32);
        // A decision answered locally (a lease, a cached denial) is ready at
        // once: give the connection's task its turn now and then.
        tokio::task::consume_budget().await;
    }
    latencies
}

/// Task `t`'s decisions, each one request of its own key, until `deadline`.
fn checks(
    backend: &RedisBackend,
    policy: &Arc<Policy>,
    t: usize,
    deadline: Instant,
) -> impl std::future::Future<Output = Vec<u32>> + Send + 'static {
    let (backend, policy) = (backend.clone(), policy.clone());
    let key = Key::new("user", format!("bench-{t}"));
    timed(deadline, move || {
        let (backend, policy, key) = (backend.clone(), policy.clone(), key.clone());
        async move {
            backend.check(&key, &policy, 1).await.expect("decision");
        }
    })
}

/// This process's CPU time (user + system) in seconds.
fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields 14 and 15 of the file, counted after the command's ')'.
    (ticks(11) + ticks(12)) / 100.0
}

/// Redis's time per EVALSHA (`INFO commandstats`) and its whole CPU
/// (`INFO cpu`, network included) per EVALSHA while `work` runs, in µs.
fn redis_cost<R>(server: &support::RedisServer, work: impl FnOnce() -> R) -> (R, f64, f64) {
    let cpu = |server: &support::RedisServer| {
        let info = server.cli(&["INFO", "cpu"]);
        ["used_cpu_sys:", "used_cpu_user:"]
            .iter()
            .filter_map(|field| info.lines().find_map(|l| l.strip_prefix(field)))
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum::<f64>()
    };
    server.cli(&["CONFIG", "RESETSTAT"]);
    let before = cpu(server);
    let result = work();
    let spent = cpu(server) - before;
    let stats = server.cli(&["INFO", "commandstats"]);
    let line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or_else(|| panic!("no EVALSHA in {stats}"));
    let field = |name: &str| -> f64 {
        line.split([':', ','])
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let calls = field("calls=");
    (result, field("usec=") / calls, spent * 1e6 / calls)
}

/// The minimal token-bucket script (the anchor).
const MINIMAL: &str = include_str!("support/minimal.lua");

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--exact") {
        return; // `cargo bench -- <filter>` conventions: nothing to list
    }
    let server = support::RedisServer::start();
    let port = server.port;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let connect = |format| {
        let builder = RedisBackend::builder(&url).key_format(format);
        rt.block_on(builder.timeout(Duration::from_secs(2)).connect())
            .expect("connect")
    };
    let backend = connect(KeyFormat::Compact);
    // A rate no task reaches: every decision is an admission that writes.
    let quota = Quota::per_second(1_000_000).unwrap();

    // One token-bucket limit, ours against the minimal script, each through
    // redis-benchmark (unpipelined and 16 deep) and through a Rust client.
    let bucket = Arc::new(Policy::single(Algorithm::TokenBucket, quota).unwrap());
    // One decision first loads the script (and, in the packed key format,
    // makes the client's field: the benchmark's client is a known one).
    let command = |backend: &RedisBackend| {
        let key = Key::new("user", "redis-benchmark");
        rt.block_on(backend.check(&key, &bucket, 1))
            .expect("decision");
        backend.evalsha_command(&key, &bucket, 1)
    };
    let ours = command(&backend);
    let ours_packed = command(&connect(KeyFormat::PACKED));
    let sha = server.cli(&["SCRIPT", "LOAD", MINIMAL]);
    let minimal: Vec<String> = [
        "EVALSHA",
        &sha,
        "1",
        "minimal:redis-benchmark",
        "1000000",
        "1",
    ]
    .map(String::from)
    .into();
    println!("One token-bucket limit (1,000,000/s, every decision admitted), ours against the minimal script");
    println!(
        "{:<36} {:>12} {:>12} {:>7} {:>13} {:>13} {:>7} {:>11}",
        "client",
        "minimal/s",
        "ours/s",
        "ratio",
        "µs/call min",
        "µs/call ours",
        "ratio",
        "CPU µs m/o"
    );
    let row = |name: &str, (m, mu, mc): (f64, f64, f64), (o, ou, oc): (f64, f64, f64)| {
        println!(
            "{name:<36} {m:>12.0} {o:>12.0} {:>7.2} {mu:>13.2} {ou:>13.2} {:>7.2} {:>5.1}/{:<5.1}",
            o / m,
            ou / mu,
            mc,
            oc
        );
    };
    for (format, ours) in [("", &ours), ("packed, ", &ours_packed)] {
        for pipeline in [1, 16] {
            row(
                &format!("{format}redis-benchmark -c 64 -P {pipeline}"),
                redis_cost(&server, || ceiling(port, &minimal, pipeline)),
                redis_cost(&server, || ceiling(port, ours, pipeline)),
            );
        }
    }
    let plain = rt
        .block_on(
            ::redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection(),
        )
        .unwrap();
    let script = ::redis::Script::new(MINIMAL);
    let (m, m_us, _) = redis_cost(&server, || {
        rt.block_on(run(|t, deadline| {
            let (conn, script) = (plain.clone(), script.clone());
            let key = format!("minimal:{t}");
            timed(deadline, move || {
                let (mut conn, script, key) = (conn.clone(), script.clone(), key.clone());
                async move {
                    let _: Vec<i64> = script
                        .key(key)
                        .arg(1_000_000)
                        .arg(1)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                }
            })
        }))
    });
    let (o, o_us, _) = redis_cost(&server, || {
        rt.block_on(run(|t, deadline| checks(&backend, &bucket, t, deadline)))
    });
    row(
        &format!("Rust, {TASKS} tasks, one connection"),
        (m.rate, m_us, m.cpu_us),
        (o.rate, o_us, o.cpu_us),
    );
    println!(
        "(CPU µs m/o: Redis's whole CPU per call for redis-benchmark; this client's CPU per decision for Rust)\n"
    );

    // Leased budgets against one round trip per decision: a limit never
    // reached, and 1,000 a minute (spent at once, then mostly refusals).
    println!(
        "Leased budgets ({TASKS} tasks, one key each, token bucket): decisions/s and Redis calls"
    );
    println!(
        "{:<32} {:>12} {:>9} {:>14} {:>10}",
        "backend", "decisions/s", "ratio", "EVALSHA/dec.", "admitted"
    );
    let lease_row = |name: &str, backend: &RedisBackend, policy: &Arc<Policy>, anchor: f64| {
        let calls = |s: &support::RedisServer| s.evalsha_calls() as f64;
        let before = calls(&server);
        let admitted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let result = rt.block_on(run(|t, deadline| {
            let (backend, policy, admitted) = (backend.clone(), policy.clone(), admitted.clone());
            let key = Key::new("user", format!("{name}-{}", t % 8));
            timed(deadline, move || {
                let (backend, policy, key) = (backend.clone(), policy.clone(), key.clone());
                let admitted = admitted.clone();
                async move {
                    if backend
                        .check(&key, &policy, 1)
                        .await
                        .expect("decision")
                        .is_allowed()
                    {
                        admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        }));
        let decisions = result.rate * SECONDS as f64;
        println!(
            "{name:<32} {:>12.0} {:>9.2} {:>14.4} {:>10}",
            result.rate,
            if anchor > 0.0 {
                result.rate / anchor
            } else {
                1.0
            },
            (calls(&server) - before) / decisions,
            admitted.load(std::sync::atomic::Ordering::Relaxed)
        );
        result.rate
    };
    let leased = |servers: u32| {
        rt.block_on(
            RedisBackend::builder(&url)
                .timeout(Duration::from_secs(2))
                .leased(servers)
                .connect(),
        )
        .expect("connect")
    };
    let roomy = Arc::new(
        Policy::single(
            Algorithm::TokenBucket,
            Quota::per_minute(60_000_000).unwrap(),
        )
        .unwrap(),
    );
    let one_trip = lease_row("one round trip, 60M/min", &backend, &roomy, 0.0);
    lease_row("leased(1), 60M/min", &leased(1), &roomy, one_trip);
    lease_row("leased(10), 60M/min", &leased(10), &roomy, one_trip);
    let small = Arc::new(
        Policy::single(Algorithm::TokenBucket, Quota::per_minute(1_000).unwrap()).unwrap(),
    );
    let one_trip = lease_row("one round trip, 1000/min", &backend, &small, 0.0);
    lease_row("leased(1), 1000/min", &leased(1), &small, one_trip);
    println!(
        "(8 keys; 1000/min admits at most 8 × (1000 + {SECONDS} s of refill) = {:.0})\n",
        8.0 * (1000.0 + SECONDS as f64 * 1000.0 / 60.0)
    );

    println!("{TASKS} tasks on one multiplexed connection, {SECONDS} s each; ceiling: redis-benchmark -c 64 with the same EVALSHA");
    println!(
        "{:<15} {:>10} {:>9} {:>9} {:>14} {:>7} {:>16} {:>7} {:>12}",
        "algorithm",
        "decisions/s",
        "p50 ms",
        "p99 ms",
        "ceiling -P1",
        "ratio",
        "ceiling -P16",
        "ratio",
        "µs/call"
    );
    for algorithm in Algorithm::ALL {
        // The sliding log keeps an entry per request: a million a window
        // is past its default cap.
        let policy = Policy::builder()
            .limit("bench", algorithm, quota)
            .max_log_entries(1_000_000)
            .build();
        let policy = Arc::new(policy.unwrap());
        let (result, usec, _) = redis_cost(&server, || {
            rt.block_on(run(|t, deadline| checks(&backend, &policy, t, deadline)))
        });
        let command = backend.evalsha_command(&Key::new("user", "redis-benchmark"), &policy, 1);
        let plain = ceiling(port, &command, 1);
        let piped = ceiling(port, &command, 16);
        println!(
            "{:<15} {:>10.0} {:>9.3} {:>9.3} {:>14.0} {:>7.2} {:>16.0} {:>7.2} {:>12.2}",
            algorithm.name(),
            result.rate,
            result.p50,
            result.p99,
            plain,
            result.rate / plain,
            piped,
            result.rate / piped,
            usec
        );
    }
    println!("\nRedis memory per key (MEMORY USAGE, after one request; limit 100/min):");
    for algorithm in Algorithm::ALL {
        let policy = Policy::single(algorithm, Quota::per_minute(100).unwrap()).unwrap();
        let key = Key::new("ip", [203, 0, 113, 7]);
        rt.block_on(backend.check(&key, &policy, 1)).unwrap();
        let bytes: u64 = backend
            .redis_keys(&key, &policy.limits()[0])
            .iter()
            .map(|k| {
                server
                    .cli(&["MEMORY", "USAGE", k])
                    .parse::<u64>()
                    .unwrap_or(0)
            })
            .sum();
        println!("{:<15} {bytes:>5} bytes", algorithm.name());
    }
    let minimal_key = "minimal:203.0.113.7";
    server.cli(&["EVALSHA", &sha, "1", minimal_key, "100", "600000"]);
    println!(
        "{:<15} {:>5} bytes (the minimal script, key {minimal_key:?})",
        "minimal",
        server.cli(&["MEMORY", "USAGE", minimal_key])
    );
}
