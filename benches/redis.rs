//! Decisions per second and latency against one local Redis, for each
//! algorithm, beside `redis-benchmark`'s rate for the very same EVALSHA
//! command (the ceiling for one round trip per decision), and Redis memory
//! per key. Starts its own `redis-server` on a free port.
//!
//! Run: `cargo bench --features redis --bench redis`

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tower_ratelimit::backend::Backend;
use tower_ratelimit::backend::RedisBackend;
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

async fn run(backend: &RedisBackend, policy: &Policy) -> (f64, f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let (backend, policy) = (backend.clone(), policy.clone());
        tasks.spawn(async move {
            let key = Key::new("user", format!("bench-{t}"));
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let start = Instant::now();
                backend.check(&key, &policy, 1).await.expect("decision");
                latencies.push(start.elapsed().as_micros() as u32);
            }
            latencies
        });
    }
    let mut all: Vec<u32> = tasks.join_all().await.into_iter().flatten().collect();
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    (
        all.len() as f64 / elapsed,
        percentile(&all, 0.5),
        percentile(&all, 0.99),
    )
}

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
    let backend = rt
        .block_on(
            RedisBackend::builder(&url)
                .timeout(Duration::from_secs(2))
                .connect(),
        )
        .expect("connect");
    // A rate no task reaches: every decision is an admission that writes.
    let quota = Quota::per_second(1_000_000).unwrap();
    println!("{TASKS} tasks on one multiplexed connection, {SECONDS} s each; ceiling: redis-benchmark -c 64 with the same EVALSHA");
    println!(
        "{:<15} {:>10} {:>9} {:>9} {:>14} {:>7} {:>16} {:>7}",
        "algorithm",
        "decisions/s",
        "p50 ms",
        "p99 ms",
        "ceiling -P1",
        "ratio",
        "ceiling -P16",
        "ratio"
    );
    for algorithm in Algorithm::ALL {
        let policy = Arc::new(Policy::single(algorithm, quota));
        let (rate, p50, p99) = rt.block_on(run(&backend, &policy));
        let command = backend.evalsha_command(&Key::new("user", "redis-benchmark"), &policy, 1);
        let plain = ceiling(port, &command, 1);
        let piped = ceiling(port, &command, 16);
        println!(
            "{:<15} {:>10.0} {:>9.3} {:>9.3} {:>14.0} {:>7.2} {:>16.0} {:>7.2}",
            algorithm.name(),
            rate,
            p50,
            p99,
            plain,
            rate / plain,
            piped,
            rate / piped
        );
    }
    println!("\nRedis memory per key (MEMORY USAGE, after one request; limit 100/min):");
    for algorithm in Algorithm::ALL {
        let policy = Policy::single(algorithm, Quota::per_minute(100).unwrap());
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
}
