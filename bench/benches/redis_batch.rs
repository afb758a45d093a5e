//! Batched Redis decisions (`RedisBackendBuilder::max_batch`, the
//! default 64) against each decision in a call of its own (`max_batch(1)`),
//! in one run: new users (a key never seen, every decision) under one
//! sliding-window limit, the example's `/api/user`. For each, at 1 task
//! and at 32: decisions per second, latency (p50, p99), Redis's whole CPU
//! per decision (`INFO cpu`: reading, parsing, the script, writing) and
//! the scripts' own time of it (`INFO commandstats`), what one Redis core
//! could then decide a second, and the mean batch
//! (decisions per script call). The two alternate, twice each, on one
//! `redis-server` of the bench's own.
//!
//! Run: `cargo bench -p tower-ratelimit-bench --features redis --bench redis_batch`

#[allow(dead_code)] // the tests' Redis processes; this bench needs one server
#[path = "../../tests/it/support/redis.rs"]
mod support;

#[path = "support/cpu.rs"]
mod cpu;

use std::time::{Duration, Instant};

use tower_ratelimit::backend::{Backend, RedisBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

const SECONDS: u64 = 4;

/// Script calls answered so far (EVALSHA and EVAL), and the
/// microseconds spent in them (`INFO commandstats`).
fn script_calls(server: &support::RedisServer) -> (f64, f64) {
    let stats = server.cli(&["INFO", "commandstats"]);
    let field = |name: &str| -> f64 {
        ["cmdstat_evalsha:", "cmdstat_eval:"]
            .iter()
            .filter_map(|prefix| {
                let line = stats.lines().find_map(|l| l.strip_prefix(prefix))?;
                line.split(',')
                    .find_map(|f| f.strip_prefix(name))?
                    .parse::<f64>()
                    .ok()
            })
            .sum()
    };
    (field("calls="), field("usec="))
}

struct Run {
    rate: f64,
    p50: f64,
    p99: f64,
    cpu_us: f64,
    script_us: f64,
    client_us: f64,
    batch: f64,
}

/// `tasks` tasks deciding for new users until the time is up.
fn run(
    rt: &tokio::runtime::Runtime,
    server: &support::RedisServer,
    backend: &RedisBackend,
    policy: &Policy,
    tasks: usize,
    tag: &str,
) -> Run {
    let (cpu, calls, client) = (
        cpu::redis_cpu(server),
        script_calls(server),
        cpu::process_cpu(),
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(SECONDS);
    let mut latencies: Vec<u32> = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for t in 0..tasks {
            let (backend, policy, tag) = (backend.clone(), policy.clone(), tag.to_owned());
            set.spawn(async move {
                let mut latencies = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    let key = Key::new("user", format!("{tag}-{t}-{n}"));
                    let start = Instant::now();
                    let decision = backend.check(&key, &policy, 1).await.expect("decision");
                    assert!(decision.is_allowed());
                    latencies.push(start.elapsed().as_micros() as u32);
                }
                latencies
            });
        }
        set.join_all().await.into_iter().flatten().collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (cpu, client) = (cpu::redis_cpu(server) - cpu, cpu::process_cpu() - client);
    let (calls_after, usec_after) = script_calls(server);
    let (calls, script_us) = (calls_after - calls.0, usec_after - calls.1);
    latencies.sort_unstable();
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    let decisions = latencies.len() as f64;
    Run {
        rate: decisions / elapsed,
        p50: at(0.5),
        p99: at(0.99),
        cpu_us: cpu * 1e6 / decisions,
        script_us: script_us / decisions,
        client_us: client * 1e6 / decisions,
        batch: decisions / calls,
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--exact") {
        return; // `cargo bench -- <filter>` conventions: nothing to list
    }
    let server = support::RedisServer::start();
    let pinned = cpu::pin(server.pid());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = server.url();
    let connect = |max_batch| {
        rt.block_on(
            RedisBackend::builder(&url)
                .max_batch(max_batch)
                .timeout(Duration::from_secs(2))
                .connect(),
        )
        .expect("connect")
    };
    let (alone, batched) = (connect(1), connect(64));
    let policy = Policy::single(Algorithm::SlidingWindow, Quota::per_minute(100).unwrap()).unwrap();
    for backend in [&alone, &batched] {
        rt.block_on(backend.check(&Key::new("user", "warm"), &policy, 1))
            .expect("decision");
    }
    println!(
        "New users, one sliding-window limit: each decision alone (max_batch 1) and batched (64); {}; {}",
        match pinned {
            true => "Redis on core 0, the client on core 1",
            false => "not pinned (no taskset)",
        },
        server.cli(&["INFO", "server"])
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map_or(String::new(), |v| format!("Redis {}", v.trim()))
    );
    println!(
        "{:<10} {:>6} {:>12} {:>9} {:>9} {:>14} {:>10} {:>16} {:>10} {:>7}",
        "",
        "tasks",
        "decisions/s",
        "p50 ms",
        "p99 ms",
        "Redis CPU µs",
        "script µs",
        "one Redis core/s",
        "client µs",
        "batch"
    );
    let mut rounds: Vec<(usize, &str, Run)> = Vec::new();
    for round in 0..2 {
        for tasks in [1, 32] {
            for (name, backend) in [("alone", &alone), ("batched", &batched)] {
                let tag = format!("{name}-{round}-{tasks}");
                // An empty Redis each run: its key tables grow with every
                // run's new users and rehash at each power of two, a cost
                // that would fall on whichever run crosses one.
                server.cli(&["FLUSHALL"]);
                let r = run(&rt, &server, backend, &policy, tasks, &tag);
                println!(
                    "{name:<10} {tasks:>6} {:>12.0} {:>9.3} {:>9.3} {:>14.2} {:>10.2} {:>16.0} {:>10.2} {:>7.1}",
                    r.rate,
                    r.p50,
                    r.p99,
                    r.cpu_us,
                    r.script_us,
                    1e6 / r.cpu_us,
                    r.client_us,
                    r.batch
                );
                rounds.push((tasks, name, r));
            }
        }
    }
    let ratio = |tasks: usize, of: fn(&Run) -> f64| -> Vec<String> {
        let of_name = |name: &str| -> Vec<f64> {
            rounds
                .iter()
                .filter(|(t, n, _)| *t == tasks && *n == name)
                .map(|(_, _, r)| of(r))
                .collect()
        };
        of_name("batched")
            .iter()
            .zip(of_name("alone"))
            .map(|(b, a)| format!("{:.2}", b / a))
            .collect()
    };
    println!("\nbatched / alone, round by round:");
    println!(
        "  32 tasks, Redis CPU per decision: {}",
        ratio(32, |r| r.cpu_us).join(", ")
    );
    println!(
        "  32 tasks, decisions per second:   {}",
        ratio(32, |r| r.rate).join(", ")
    );
    println!(
        "  32 tasks, one Redis core's decisions per second: {}",
        ratio(32, |r| 1.0 / r.cpu_us).join(", ")
    );
    println!(
        "  1 task, p50 latency:              {}",
        ratio(1, |r| r.p50).join(", ")
    );
    let p50 = |name: &str| -> Vec<String> {
        rounds
            .iter()
            .filter(|(t, n, _)| *t == 1 && *n == name)
            .map(|(_, _, r)| format!("{:.3}", r.p50))
            .collect()
    };
    println!(
        "  1 task, p50 latency in ms: batched {}, alone {}",
        p50("batched").join(", "),
        p50("alone").join(", ")
    );
}
