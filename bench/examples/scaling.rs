//! SCALING.md's model, replayed at rates this machine can take: several
//! "servers" (each its own Redis connection, as separate processes would
//! have) send a paced load of decisions to one Redis, with and without
//! leased budgets; the Redis CPU, calls and memory they cost are measured
//! (Redis's own `INFO`) and set beside what the model predicts from its
//! constants.
//!
//! ```sh
//! cargo run --release -p tower-ratelimit-bench --features redis --example scaling
//! RATE=30000 SERVERS=4 SECONDS=6 cargo run --release -p tower-ratelimit-bench --features redis --example scaling
//! ```
//!
//! It starts its own `redis-server` on a free port (`REDIS_SERVER` names
//! another binary), and stops it at the end.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tower_ratelimit::backend::{Backend, RedisBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// The model's constants (SCALING.md): Redis CPU per decision call and per
/// lease call, in microseconds (measured here at 20,000 decisions/s: see
/// SCALING.md), and the lease rules (`backend/redis/leases.rs`: a share is
/// capacity / (30 × servers), a lease lasts 1% of the window, 10 ms to 1 s).
const REDIS_US_PER_CALL: f64 = 8.0;
const REDIS_US_PER_LEASE_CALL: f64 = 15.0;
const LEASE_SHARE_DIVISOR: f64 = 30.0;

struct Redis {
    child: Child,
    url: String,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis() -> Redis {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let program = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let child = Command::new(program)
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server runs");
    let url = format!("redis://127.0.0.1:{port}");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Redis { child, url }
}

/// What Redis says of itself: CPU seconds, EVALSHA calls, bytes used, keys.
async fn info(url: &str) -> (f64, u64, u64, u64) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let text: String = redis::cmd("INFO")
        .arg("all")
        .query_async(&mut conn)
        .await
        .unwrap();
    let field = |name: &str| -> Option<String> {
        text.lines().find_map(|l| {
            l.strip_prefix(&format!("{name}:"))
                .map(|v| v.trim().to_owned())
        })
    };
    let cpu = field("used_cpu_sys").unwrap().parse::<f64>().unwrap()
        + field("used_cpu_user").unwrap().parse::<f64>().unwrap();
    let evalsha = field("cmdstat_evalsha")
        .and_then(|v| v.split(',').next()?.strip_prefix("calls=")?.parse().ok())
        .unwrap_or(0);
    let memory = field("used_memory").unwrap().parse().unwrap();
    let keys = field("db0")
        .and_then(|v| v.split(',').next()?.strip_prefix("keys=")?.parse().ok())
        .unwrap_or(0);
    (cpu, evalsha, memory, keys)
}

struct Scenario {
    name: &'static str,
    servers: usize,
    keys: usize,
    rate: f64,
    seconds: f64,
    policy: Policy,
    leased: bool,
}

/// Sends the scenario's load; what it measured.
async fn replay(redis: &Redis, s: &Scenario) -> (f64, f64, u64, f64, u64) {
    let (cpu0, calls0, mem0, keys0) = info(&redis.url).await;
    let mut tasks = Vec::new();
    // Each server sends its share of the rate from 8 paced tasks.
    const TASKS: usize = 8;
    let per_task = s.rate / (s.servers * TASKS) as f64;
    let start = Instant::now();
    for server in 0..s.servers {
        let mut builder = RedisBackend::builder(&redis.url).timeout(Duration::from_secs(2));
        if s.leased {
            builder = builder.leased(s.servers as u32);
        }
        if let Some(max) = std::env::var("MAX_BATCH").ok().and_then(|v| v.parse().ok()) {
            builder = builder.max_batch(max);
        }
        let backend = builder.connect().await.unwrap();
        for task in 0..TASKS {
            let (backend, policy) = (backend.clone(), s.policy.clone());
            let (keys, seconds) = (s.keys, s.seconds);
            tasks.push(tokio::spawn(async move {
                let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / per_task));
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut sent = 0u64;
                let mut i = server * TASKS + task;
                while start.elapsed().as_secs_f64() < seconds {
                    ticks.tick().await;
                    let key = Key::new("user", (i % keys).to_string());
                    i += 7919;
                    backend.check(&key, &policy, 1).await.unwrap();
                    sent += 1;
                }
                sent
            }));
        }
    }
    let mut sent = 0;
    for task in tasks {
        sent += task.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (cpu1, calls1, mem1, keys1) = info(&redis.url).await;
    let rate = sent as f64 / elapsed;
    let cores = (cpu1 - cpu0) / elapsed;
    let calls = calls1 - calls0;
    let bytes_per_key = (mem1 - mem0) as f64 / (keys1 - keys0).max(1) as f64;
    (rate, cores, calls, bytes_per_key, sent)
}

/// The model's prediction of the Redis calls a scenario makes: one a
/// decision without leases; with them, for each (server, key) in use, the
/// more of one per share spent and one per lease term — but never more than
/// one a decision (a key asked less often than once a term takes a lease
/// each time).
fn predicted_calls(s: &Scenario, sent: u64) -> f64 {
    if !s.leased {
        return sent as f64;
    }
    let limit = &s.policy.limits()[0];
    let share = (limit.capacity() as f64 / (LEASE_SHARE_DIVISOR * s.servers as f64)).max(1.0);
    let window = limit.quota().window().as_secs_f64();
    let term = (window / 100.0).clamp(0.01, 1.0);
    let per_pair_rate = s.rate / (s.servers * s.keys) as f64;
    let per_pair_calls = (per_pair_rate / share).max(1.0 / term).min(per_pair_rate);
    per_pair_calls * (s.servers * s.keys) as f64 * s.seconds
}

#[tokio::main]
async fn main() {
    let env = |name: &str, default: f64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (servers, rate, seconds) = (
        env("SERVERS", 4.0) as usize,
        env("RATE", 20_000.0),
        env("SECONDS", 5.0),
    );
    let gcra = |limit: u32, per_min: bool| {
        let quota = if per_min {
            Quota::per_minute(limit)
        } else {
            Quota::per_hour(limit)
        }
        .unwrap();
        Policy::single(Algorithm::Gcra, quota).unwrap()
    };
    let scenarios = [
        Scenario {
            name: "many keys, no leases",
            servers,
            keys: 10_000,
            rate,
            seconds,
            policy: gcra(1_000, true),
            leased: false,
        },
        Scenario {
            name: "many keys, leased",
            servers,
            keys: 10_000,
            rate,
            seconds,
            policy: gcra(1_000, true),
            leased: true,
        },
        Scenario {
            name: "hot keys, no leases",
            servers,
            keys: 10,
            rate,
            seconds,
            policy: gcra(60_000_000, true),
            leased: false,
        },
        Scenario {
            name: "hot keys, leased",
            servers,
            keys: 10,
            rate,
            seconds,
            policy: gcra(60_000_000, true),
            leased: true,
        },
    ];
    println!("| scenario | decisions/s | Redis calls, measured | model | ratio | Redis cores, measured | model | ratio | bytes per key |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in &scenarios {
        let redis = start_redis();
        // What Redis spends doing nothing (its timers): part of the model.
        let (idle0, ..) = info(&redis.url).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = info(&redis.url).await.0 - idle0;
        let (rate, cores, calls, bytes, sent) = replay(&redis, s).await;
        let model_calls = predicted_calls(s, sent);
        let per_call = if s.leased {
            REDIS_US_PER_LEASE_CALL
        } else {
            REDIS_US_PER_CALL
        };
        let model_cores = idle + model_calls * per_call / 1e6 / s.seconds;
        println!(
            "| {} | {rate:.0} | {calls} | {model_calls:.0} | {:.2} | {cores:.3} | {model_cores:.3} | {:.2} | {bytes:.0} |",
            s.name,
            calls as f64 / model_calls,
            cores / model_cores,
        );
    }
}
