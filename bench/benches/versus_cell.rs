//! This crate's Redis decisions against redis-cell's `CL.THROTTLE` (the
//! native Redis module many pick for GCRA in Redis) and the minimal
//! token-bucket script, in one run on one `redis-server` with the module
//! loaded: Redis's CPU per decision (`INFO cpu`: reading, parsing, the
//! work, writing), decisions per second of Redis CPU, how busy Redis was,
//! decisions per command Redis ran (ours: the mean batch), its CPU in
//! passes reclaiming expired keys and the longest of them (every call
//! waits while one runs: `REDIS_HZ=100` makes them a tenth as long), and
//! latency (p50, p99, p99.9) — at 32 and 256 concurrent callers, on new keys
//! (one never seen, every decision) and hot keys (16, every decision
//! admitted), GCRA and sliding window for ours, and GCRA under the packed
//! format (a client's state a field of a shared hash: no key of its own
//! for Redis to expire); then the tail at one load
//! for both (each caller paced, 80% of the anchor's rate, latency from
//! when a decision was due); then callers from 1 to 16, batched and each
//! alone (`max_batch(1)`), to find where batching starts to win. Redis's
//! CPU a decision, ours against the anchor's at 32 and 256 callers on
//! new keys, is measured again in alternating pairs (`PAIRS`, 5 by
//! default): each pair's ratio and their median.
//!
//! The callers are tokio tasks on one worker thread, the library called
//! directly (no HTTP). Ours: `RedisBackend` as built by default (batching
//! on). `CL.THROTTLE` two ways, as users call it: a connection per caller
//! (a pool; redis-benchmark's way) and every caller on one multiplexed
//! connection (redis-rs pipelines them). The minimal script on one
//! multiplexed connection, and `SET key 1 PX 1` on it too: no decision,
//! only a key to expire, so its tail is what Redis's expiry alone makes
//! at that many keys a second; `PX 1000` beside it, keys that live a
//! second (what a floor on a key's life would make of them).
//!
//! redis-cell is found at `$REDIS_CELL` or `target/redis-cell/libredis_cell.so`
//! (`scripts/redis-cell` builds it); without it the bench says so and
//! measures the rest.
//!
//! Run: `cargo bench -p tower-ratelimit-bench --features redis --bench versus_cell`
//! (`REDIS_HZ=100` for Redis's `hz`, 10 by default; `PAIRS=7` for seven
//! alternating pairs)

#[allow(dead_code)] // the tests' Redis processes; this bench needs one server
#[path = "../../tests/it/support/redis.rs"]
mod support;

#[allow(dead_code)] // process_cpu: the batch bench's
#[path = "support/cpu.rs"]
mod cpu;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use tower_ratelimit::backend::{Backend, KeyFormat, RedisBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

const SECONDS: f64 = 3.0;
const HOT_KEYS: usize = 16;
/// The minimal token-bucket script (the anchor of `benches/redis.rs`).
const MINIMAL: &str = include_str!("support/minimal.lua");

#[derive(Clone, Copy, PartialEq)]
enum Keys {
    New,
    Hot,
}

/// Who decides, and how it is asked.
#[derive(Clone)]
enum Contender {
    Ours(RedisBackend, Policy),
    /// `CL.THROTTLE`, a connection per caller (`true`) or one for all.
    Cell(bool),
    /// The minimal script (its hash computed once, not per call).
    Minimal(redis::Script),
    /// No decision: `SET key 1 PX <ms>`, the cheapest call that leaves a
    /// key to expire (what Redis's expiry alone does to the tail): 1 ms as
    /// ours and `CL.THROTTLE`'s states live here, or 1,000 (a floor on a
    /// key's life would make them so).
    Set(u64),
}

struct Run {
    decisions: f64,
    rate: f64,
    p50: f64,
    p99: f64,
    /// One decision in a thousand waits longer: a pass over expired keys
    /// stops every caller at once.
    p999: f64,
    cpu_us: f64,
    busy: f64,
    /// Decisions per command Redis ran: the mean batch for ours, 1 for
    /// the others.
    per_call: f64,
    /// Redis's milliseconds of CPU in its passes reclaiming expired keys:
    /// every decision stops while one runs (the tail at 256 callers).
    expiring_ms: f64,
    /// The longest of those passes, in milliseconds (Redis's latency
    /// monitor), 0 when none took a millisecond.
    longest_pass_ms: f64,
}

/// Redis's CPU milliseconds in its passes over expired keys so far.
fn expiring_ms(server: &support::RedisServer) -> f64 {
    server
        .cli(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("expire_cycle_cpu_milliseconds:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The longest pass over expired keys since the monitor was reset, in
/// milliseconds (`LATENCY LATEST`: event, when, latest, longest).
fn longest_pass_ms(server: &support::RedisServer) -> f64 {
    let latest = server.cli(&["LATENCY", "LATEST"]);
    let mut lines = latest.lines().map(str::trim);
    lines
        .position(|l| l == "expire-cycle")
        .and_then(|_| lines.nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// How many calls of `names` Redis ran (`INFO commandstats`: for the
/// scripts, their calls only, not the commands they run, so `set` is
/// counted only for the contender that sends it).
fn commands(server: &support::RedisServer, names: &[&str]) -> f64 {
    let info = server.cli(&["INFO", "commandstats"]);
    names
        .iter()
        .filter_map(|name| {
            let line = info
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))?;
            line.strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum()
}

/// The key of decision `n` of caller `t`.
fn key_name(keys: Keys, tag: &str, t: usize, n: u64) -> String {
    match keys {
        Keys::New => format!("{tag}-{t}-{n}"),
        Keys::Hot => format!("hot-{}", (t + n as usize) % HOT_KEYS),
    }
}

/// One decision of `contender` on `key`: whether it was admitted.
async fn decide(contender: &Contender, conn: &mut MultiplexedConnection, key: &str) -> bool {
    match contender {
        Contender::Ours(backend, policy) => backend
            .check(&Key::new("user", key), policy, 1)
            .await
            .expect("decision")
            .is_allowed(),
        // The same bucket as ours: 1,000,000 a second, every decision admitted.
        Contender::Cell(_) => {
            let answer: Vec<i64> = redis::cmd("CL.THROTTLE")
                .arg(key)
                .arg(1_000_000)
                .arg(1_000_000)
                .arg(1)
                .arg(1)
                .query_async(conn)
                .await
                .expect("CL.THROTTLE");
            answer[0] == 0
        }
        Contender::Minimal(script) => {
            let answer: Vec<i64> = script
                .key(key)
                .arg(1_000_000)
                .arg(1)
                .invoke_async(conn)
                .await
                .expect("the minimal script");
            answer[0] == 0
        }
        Contender::Set(ms) => {
            let () = redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("PX")
                .arg(*ms)
                .query_async(conn)
                .await
                .expect("SET");
            true
        }
    }
}

/// `callers` tasks deciding until the time is up: each as soon as its
/// last decision came back, or, `paced` at that many decisions a second
/// in all, each at its own times (its latency counted from the time it
/// should have started, so that a stall delays the ones behind it too).
async fn run(
    server: &support::RedisServer,
    contender: &Contender,
    callers: usize,
    keys: Keys,
    tag: &str,
    paced: Option<f64>,
) -> Run {
    let client = redis::Client::open(server.url()).unwrap();
    let shared = client.get_multiplexed_async_connection().await.unwrap();
    let mut conns = Vec::new();
    for _ in 0..callers {
        conns.push(match contender {
            Contender::Cell(true) => client.get_multiplexed_async_connection().await.unwrap(),
            _ => shared.clone(),
        });
    }
    server.cli(&["FLUSHALL"]);
    let names: &[&str] = match contender {
        Contender::Set(_) => &["set"],
        _ => &["evalsha", "eval", "cl.throttle"],
    };
    let commands_before = commands(server, names);
    let expiring_before = expiring_ms(server);
    server.cli(&["LATENCY", "RESET"]);
    let (cpu, started) = (cpu::redis_cpu(server), Instant::now());
    let deadline = started + Duration::from_secs_f64(SECONDS);
    let mut set = tokio::task::JoinSet::new();
    for (t, mut conn) in conns.into_iter().enumerate() {
        let (contender, tag) = (contender.clone(), tag.to_owned());
        // Each caller's spacing, its first time staggered among the others'.
        let spacing = paced.map(|rate| Duration::from_secs_f64(callers as f64 / rate));
        let mut due = started + spacing.map_or(Duration::ZERO, |s| s * t as u32 / callers as u32);
        set.spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while due < deadline && Instant::now() < deadline {
                n += 1;
                let key = key_name(keys, &tag, t, n);
                let start = match spacing {
                    Some(spacing) => {
                        tokio::time::sleep_until(due.into()).await;
                        let start = due;
                        due += spacing;
                        start
                    }
                    None => Instant::now(),
                };
                assert!(decide(&contender, &mut conn, &key).await, "admitted");
                latencies.push(start.elapsed().as_micros() as u32);
            }
            latencies
        });
    }
    let mut latencies: Vec<u32> = set.join_all().await.into_iter().flatten().collect();
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu::redis_cpu(server) - cpu;
    let calls = commands(server, names) - commands_before;
    let expiring = expiring_ms(server) - expiring_before;
    latencies.sort_unstable();
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    let decisions = latencies.len() as f64;
    Run {
        decisions,
        rate: decisions / elapsed,
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        cpu_us: cpu * 1e6 / decisions,
        busy: cpu / elapsed,
        per_call: decisions / calls,
        expiring_ms: expiring,
        longest_pass_ms: longest_pass_ms(server),
    }
}

/// Where the redis-cell module is, if it is there.
fn redis_cell() -> Option<PathBuf> {
    let path = std::env::var_os("REDIS_CELL").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/redis-cell/libredis_cell.so"),
        PathBuf::from,
    );
    path.exists().then_some(path)
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--exact") {
        return; // `cargo bench -- <filter>` conventions: nothing to list
    }
    let cell = redis_cell();
    let server = match &cell {
        Some(path) => support::RedisServer::start_with(
            "redis-server",
            &["--loadmodule", path.to_str().expect("a UTF-8 path")],
        ),
        None => support::RedisServer::start(),
    };
    let pinned = cpu::pin(server.pid());
    // Every event of a millisecond or more (`longest pass`).
    server.cli(&["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    // How often Redis reclaims expired keys (`REDIS_HZ`, its `hz`: 10 by
    // default; each pass up to a quarter of its period).
    if let Ok(hz) = std::env::var("REDIS_HZ") {
        server.cli(&["CONFIG", "SET", "hz", &hz]);
    }
    // As Redis has it (a value it refused leaves the one before).
    let hz = server.cli(&["CONFIG", "GET", "hz"]);
    let hz = hz.lines().nth(1).unwrap_or("?").trim().to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = server.url();
    let builder = || RedisBackend::builder(&url).timeout(Duration::from_secs(5));
    // As built by default, and (among fewer callers) each decision alone.
    let backend = rt.block_on(builder().connect()).expect("connect");
    let alone = rt
        .block_on(builder().max_batch(1).connect())
        .expect("connect");
    let policy =
        |algorithm| Policy::single(algorithm, Quota::per_second(1_000_000).unwrap()).unwrap();
    let gcra = Contender::Ours(backend.clone(), policy(Algorithm::Gcra));
    let gcra_alone = Contender::Ours(alone, policy(Algorithm::Gcra));
    let sliding = Contender::Ours(backend, policy(Algorithm::SlidingWindow));
    let packed = rt
        .block_on(builder().key_format(KeyFormat::PACKED).connect())
        .expect("connect");
    let mut contenders = vec![
        ("ours, GCRA", gcra.clone()),
        (
            "ours, GCRA, packed",
            Contender::Ours(packed, policy(Algorithm::Gcra)),
        ),
        ("ours, sliding window", sliding),
    ];
    match &cell {
        Some(path) => {
            println!("redis-cell: {}", path.display());
            contenders.push(("CL.THROTTLE, a connection each", Contender::Cell(true)));
            contenders.push(("CL.THROTTLE, one connection", Contender::Cell(false)));
        }
        None => println!(
            "redis-cell is not there: no CL.THROTTLE rows (scripts/redis-cell builds it; \
             REDIS_CELL=/path/to/libredis_cell.so names one)"
        ),
    }
    let minimal = Contender::Minimal(redis::Script::new(MINIMAL));
    contenders.push(("the minimal script", minimal.clone()));
    contenders.push(("SET with PX 1 (no decision)", Contender::Set(1)));
    contenders.push(("SET with PX 1000 (no decision)", Contender::Set(1000)));
    println!(
        "Redis {}, hz {hz}; {}; every decision admitted (1,000,000/s); {SECONDS} s a row",
        server
            .cli(&["INFO", "server"])
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map_or("?", str::trim),
        match pinned {
            true => "Redis on core 0, the callers on core 1 (one worker thread)",
            false => "not pinned (no taskset)",
        },
    );
    println!(
        "{:<32} {:>5} {:>7} {:>12} {:>8} {:>8} {:>8} {:>13} {:>16} {:>6} {:>8} {:>10} {:>12}",
        "",
        "keys",
        "callers",
        "decisions/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "Redis CPU µs",
        "per Redis CPU s",
        "busy",
        "per call",
        "expiry ms",
        "longest pass"
    );
    let mut seen = Vec::new();
    // Each row's decisions a second and p99.9.
    let mut row = |name: &str, keys: Keys, callers: usize, contender: &Contender, paced| {
        let tag = format!("row{}", seen.len());
        let r = rt.block_on(run(&server, contender, callers, keys, &tag, paced));
        let keys_name = match keys {
            Keys::New => "new",
            Keys::Hot => "hot",
        };
        println!(
            "{name:<32} {keys_name:>5} {callers:>7} {:>12.0} {:>8.3} {:>8.3} {:>8.3} {:>13.2} {:>16.0} {:>6.2} {:>8.1} {:>10.0} {:>12.0}",
            r.rate,
            r.p50,
            r.p99,
            r.p999,
            r.cpu_us,
            1e6 / r.cpu_us,
            r.busy,
            r.per_call,
            r.expiring_ms,
            r.longest_pass_ms
        );
        assert!(r.decisions > 0.0);
        if paced.is_none() {
            seen.push((name.to_owned(), keys_name, callers, r.cpu_us, r.p99, r.p999));
        }
        (r.rate, r.p999)
    };
    // Where batching starts to win: ours against a call a decision.
    let anchor = match &cell {
        Some(_) => ("CL.THROTTLE, a connection each", Contender::Cell(true)),
        None => ("the minimal script", minimal),
    };
    let mut anchor_rates = Vec::new();
    for callers in [32, 256] {
        for keys in [Keys::New, Keys::Hot] {
            for (name, contender) in &contenders {
                let (rate, _) = row(name, keys, callers, contender, None);
                if *name == anchor.0 && keys == Keys::New {
                    anchor_rates.push((callers, rate));
                }
            }
        }
    }
    // Redis's CPU a decision, ours against the anchor in alternating pairs
    // (ours first in one pair, the anchor first in the next), new keys:
    // each pair's ratio and their median, so that a slow few seconds of
    // the machine move one pair, not the figure.
    let pairs: usize = std::env::var("PAIRS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5);
    let mut paired = Vec::new();
    for callers in [32, 256] {
        let cpu = |contender: &Contender, tag: String| {
            rt.block_on(run(&server, contender, callers, Keys::New, &tag, None))
                .cpu_us
        };
        let mut ratios: Vec<f64> = (0..pairs)
            .map(|pair| {
                let tag = |who| format!("pair{callers}-{pair}-{who}");
                let (ours, theirs) = if pair % 2 == 0 {
                    let ours = cpu(&gcra, tag("ours"));
                    (ours, cpu(&anchor.1, tag("anchor")))
                } else {
                    let theirs = cpu(&anchor.1, tag("anchor"));
                    (cpu(&gcra, tag("ours")), theirs)
                };
                ours / theirs
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        paired.push((callers, ratios));
    }
    // The tail at one load for both: decided faster, ours expires as many
    // times the keys a second, and Redis's passes over them stop every
    // caller. Paced at 80% of the anchor's rate above, new keys, each
    // decision's latency from when it was due.
    println!(
        "\nthe same load for both, new keys (80% of {}'s rate above):",
        anchor.0
    );
    let mut equal = Vec::new();
    for (callers, rate) in anchor_rates {
        let paced = Some(0.8 * rate);
        let (_, ours) = row("ours, GCRA, paced", Keys::New, callers, &gcra, paced);
        let anchor_paced = format!("{}, paced", anchor.0);
        let (_, theirs) = row(&anchor_paced, Keys::New, callers, &anchor.1, paced);
        equal.push((callers, ours / theirs));
    }
    println!("\nfewer callers, new keys:");
    for callers in [1, 2, 4, 8, 16] {
        row("ours, GCRA", Keys::New, callers, &gcra, None);
        row(
            "ours, GCRA, max_batch(1)",
            Keys::New,
            callers,
            &gcra_alone,
            None,
        );
        row(anchor.0, Keys::New, callers, &anchor.1, None);
    }
    let cpu_of = |name: &str, keys: &str, callers: usize| {
        seen.iter()
            .find(|(n, k, c, ..)| n == name && *k == keys && *c == callers)
            .map(|s| (s.3, s.4, s.5))
    };
    for ours_name in ["ours, GCRA", "ours, GCRA, packed"] {
        println!("\n{ours_name} against {}:", anchor.0);
        for callers in [1, 2, 4, 8, 16, 32, 256] {
            for keys in ["new", "hot"] {
                if let (Some(ours), Some(theirs)) = (
                    cpu_of(ours_name, keys, callers),
                    cpu_of(anchor.0, keys, callers),
                ) {
                    println!(
                        "  {callers:>3} callers, {keys} keys: Redis CPU per decision {:.2}×, p99 latency {:.2}×, p99.9 {:.2}×",
                        ours.0 / theirs.0,
                        ours.1 / theirs.1,
                        ours.2 / theirs.2
                    );
                }
            }
        }
    }
    for (callers, ratio) in equal {
        println!("  {callers:>3} callers, new keys, the same load: p99.9 latency {ratio:.2}×");
    }
    for (callers, ratios) in paired {
        let pairs: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        if let Some(median) = ratios.get(ratios.len() / 2) {
            println!(
                "  {callers:>3} callers, new keys, {} alternating pairs: Redis CPU per decision, median {median:.2}× ({}×)",
                ratios.len(),
                pairs.join(", ")
            );
        }
    }
}
