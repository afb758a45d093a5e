//! Accuracy under faults, measured end to end.
//!
//! k example servers (`examples/server`, its binary run as a user runs
//! it: its own Redis connections, a breaker, a local fallback of its
//! share, the fleet's limits) decide over HTTP for many clients on many
//! keys — one route per algorithm — while Redis is killed and restarted
//! empty, frozen, failed over, slowed or cut off from one server, a limit
//! changes and a server restarts. Every decision (when it was asked and
//! answered, by which server, on which key, under which limit, admitted or
//! not, by Redis or the fallback, as its status and `RateLimit-Policy`
//! header say) and every fault is written to `decisions.csv` and
//! `events.csv` in a folder per run; `scripts/accuracy-check`, which
//! shares no code with `src/`, checks them against the documented bounds.
//!
//! Run by `scripts/accuracy` (`ACCURACY_SHORT=1`: standalone, 3 servers,
//! one fault of each kind; `ACCURACY_RUNS=cluster-3,sentinel-10`: those
//! runs of the full schedule):
//! `cargo test --all-features --test accuracy -- OUT_DIR`, once the
//! example is built (`cargo build --all-features --example server`).

// The tests' Redis processes and proxy (their module allows what this
// binary leaves unused).
#[path = "../it/support/mod.rs"]
mod support;

mod record;
mod servers;
mod store;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use record::{Decided, Recorder};
use servers::{Applied, Server, Servers, CHANGED, FILE, ROUTES, TIMEOUT};
use store::{Fault, Store, Topology};
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::config::LimitsFile;
use tower_ratelimit::key::RequestHead;

/// Clients at once, and the pause each makes between its requests: about
/// 600 decisions a second in all, 25 a second on each of 24 keys.
const CLIENTS: usize = 24;
const PACE: Duration = Duration::from_millis(40);
const KEYS_PER_ROUTE: usize = 6;
/// How far a decision's instant may be from its [asked, answered] span in
/// the history: Redis's clock and this process's are one machine's, read
/// apart by the time a thread may be preempted between the two.
const TOLERANCE_US: u64 = 5_000;
/// How long a fault lasts, and the quiet between two.
const FAULT: Duration = Duration::from_secs(3);
const QUIET: Duration = Duration::from_secs(4);

fn main() {
    let out = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or_else(|| PathBuf::from("target/accuracy"), PathBuf::from);
    let short = std::env::var("ACCURACY_SHORT").is_ok_and(|v| v == "1");
    let runs: &[(Topology, usize, usize)] = if short {
        &[(Topology::Standalone, 3, 1)]
    } else {
        &[
            (Topology::Standalone, 3, 2),
            (Topology::Standalone, 10, 2),
            (Topology::Sentinel, 3, 1),
            (Topology::Sentinel, 10, 1),
            (Topology::Cluster, 3, 1),
            (Topology::Cluster, 10, 1),
        ]
    };
    // ACCURACY_RUNS=cluster-3,sentinel-10 picks runs by their folders' names.
    let picked = std::env::var("ACCURACY_RUNS").ok();
    let picked = |topology: Topology, servers: usize| {
        picked.as_deref().is_none_or(|names| {
            names
                .split(',')
                .any(|name| name.trim() == format!("{topology}-{servers}"))
        })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for &(topology, servers, rounds) in runs.iter().filter(|r| picked(r.0, r.1)) {
        let dir = out.join(format!("{topology}-{servers}"));
        let decisions = runtime.block_on(run(topology, servers, rounds, &dir));
        println!(
            "accuracy: {topology}, {servers} servers: {decisions} decisions in {}",
            dir.display()
        );
    }
}

/// One run: the topology started, `servers` servers on it, the schedule
/// of its faults `rounds` times under load; the history written to `dir`.
async fn run(topology: Topology, servers: usize, rounds: usize, dir: &Path) -> usize {
    std::fs::create_dir_all(dir).expect("the run's folder");
    let file = dir.join("limits.toml");
    std::fs::write(&file, FILE).expect("the run's limits file");
    let file = file.to_str().expect("a UTF-8 path").to_owned();
    let mut store = Store::start(topology, servers).await;
    let recorder = Arc::new(Recorder::new(&topology.to_string(), servers, TOLERANCE_US));
    let mut started = Vec::new();
    for i in 0..servers {
        started.push(start(&store, i, servers, &file).await);
    }
    let fleet = Arc::new(Servers::new(started));
    // Each route's limits the run may set, the first in force at the start.
    let versions: Vec<_> = ROUTES.iter().map(servers::versions).collect();
    let versions = Arc::new(versions);
    for (route, versions) in ROUTES.iter().zip(versions.iter()) {
        recorder.event_at(0, "policy", None, &versions[0].event(route.prefix));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (fleet, versions) = (fleet.clone(), versions.clone());
            tokio::spawn(client(c, fleet, versions, recorder.clone(), stop.clone()))
        })
        .collect();

    tokio::time::sleep(QUIET).await;
    for round in 0..rounds {
        for fault in store.faults() {
            if fault == Fault::Failover && round > 0 {
                continue; // the old primary is gone: one failover a run
            }
            inject(fault, round, &mut store, &fleet, &recorder, &file).await;
            tokio::time::sleep(QUIET).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    recorder.write(dir).expect("the history is written");
    recorder.decisions()
}

/// Server `i` of `servers`, started on `store` with the limits `file`
/// (retried for a few seconds: a server may start while Redis recovers).
async fn start(store: &Store, i: usize, servers: usize, file: &str) -> Server {
    let url = store.url_for(i);
    let what = format!("starting server {i}");
    retried(&what, || {
        let (url, file) = (url.clone(), file.to_owned());
        async move {
            tokio::task::spawn_blocking(move || Server::start(&url, &file, servers as u32))
                .await
                .map_err(|e| e.to_string())?
        }
    })
    .await
}

/// What `attempt` gives once it succeeds, tried 50 times at most, 100 ms
/// apart: Redis may be recovering from the fault before.
async fn retried<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    for _ in 0..50 {
        match attempt().await {
            Ok(done) => return done,
            Err(e) => eprintln!("accuracy: {what}: {e}; again"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    attempt()
        .await
        .unwrap_or_else(|e| panic!("accuracy: {what}: {e}"))
}

/// One client: a request every `PACE` on a key of a route, each to the
/// next running server, until told to stop.
async fn client(
    c: usize,
    servers: Arc<Servers>,
    versions: Arc<Vec<Vec<Applied>>>,
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
) {
    let mut rng =
        XorShift(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    let mut next = tokio::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let r = rng.below(ROUTES.len());
        let route = &ROUTES[r];
        let key = format!("{}:{}", route.prefix, rng.below(KEYS_PER_ROUTE));
        if let Some((server, s)) = servers.pick(rng.below(servers.len())) {
            let sent = recorder.now();
            let answer = s.decide(route, &key, &versions[r]).await;
            let received = recorder.now();
            recorder.decision(&Decided {
                sent,
                received,
                server,
                key: &key,
                applied: &answer.applied,
                admitted: answer.admitted,
                origin: answer.origin,
            });
        }
        next += PACE;
        let now = tokio::time::Instant::now();
        if next < now {
            next = now; // behind: no catching up in a burst
        }
        tokio::time::sleep_until(next).await;
    }
}

/// Injects `fault`, records when it began and ended, and what it lost.
async fn inject(
    fault: Fault,
    round: usize,
    store: &mut Store,
    servers: &Servers,
    recorder: &Recorder,
    file: &str,
) {
    let kind = format!("kind={}", fault.name());
    // One server is hit by faults of one server, in turn.
    let one = (round + fault as usize) % servers.len();
    let on = match fault {
        Fault::Latency | Fault::Partition | Fault::ServerRestart => Some(one),
        _ => None,
    };
    recorder.event("fault_start", on, &kind);
    match fault {
        Fault::Kill => {
            tokio::task::block_in_place(|| store.kill());
            recorder.event("state_lost", None, "");
            tokio::time::sleep(FAULT).await;
            tokio::task::block_in_place(|| store.restart());
        }
        Fault::Freeze => {
            store.freeze();
            tokio::time::sleep(store.freeze_for()).await;
            store.thaw();
        }
        Fault::Failover => {
            match failing_shard_keys(store).await {
                None => recorder.event("state_lost", None, ""),
                Some(keys) if keys.is_empty() => 0,
                Some(keys) => {
                    recorder.event("state_lost", None, &format!("keys={}", keys.join("|")))
                }
            };
            tokio::task::block_in_place(|| store.fail_over());
        }
        Fault::Latency => {
            let proxy = store.proxy(one).expect("standalone");
            proxy.set_latency(TIMEOUT * 2);
            tokio::time::sleep(FAULT).await;
            proxy.set_latency(Duration::ZERO);
        }
        Fault::Partition => {
            let proxy = store.proxy(one).expect("standalone");
            proxy.cut(true);
            tokio::time::sleep(FAULT).await;
            proxy.cut(false);
        }
        Fault::LimitChange => {
            let limits = CHANGED.1[round % 2];
            let server = servers.pick(0).expect("a server runs").1;
            let route = ROUTES.iter().find(|r| r.path == CHANGED.0).unwrap();
            let changed = servers::changed_file(limits);
            let applied = Applied::of(&servers::policy_of(&changed, route.path));
            // Recorded at the time the change that took was sent: a server
            // may apply it, and answer with it, before the change's own
            // answer comes back.
            let sent = AtomicU64::new(0);
            retried("changing a limit", || {
                sent.store(recorder.now(), Ordering::Relaxed);
                let server = server.clone();
                async move {
                    tokio::task::spawn_blocking(move || server.change(limits))
                        .await
                        .unwrap()
                }
            })
            .await;
            let sent = sent.load(Ordering::Relaxed);
            recorder.event_at(sent, "policy", None, &applied.event(route.prefix));
        }
        Fault::ServerRestart => {
            drop(servers.stop(one));
            tokio::time::sleep(Duration::from_secs(1)).await;
            recorder.event("state_lost", Some(one), "");
            let server = start(store, one, servers.len(), file).await;
            servers.put(one, server);
        }
    }
    recorder.event("fault_end", on, &kind);
}

/// The clients' keys whose states a failover loses, when it loses one
/// shard's (a cluster's first primary) and not every state: each client's
/// Redis keys named as the example names them (its limits file's key and
/// limit, the default key format), each name checked to be in Redis.
async fn failing_shard_keys(store: &Store) -> Option<Vec<String>> {
    if !store.failing_is_one_shard() {
        return None;
    }
    let naming = RedisBackend::builder(&store.url_for(0))
        .connect()
        .await
        .expect("the cluster answers");
    let file = LimitsFile::parse(FILE).expect("the run's limits file");
    let mut lost = Vec::new();
    for route in &ROUTES {
        let limit = servers::policy_of(&file, route.path).limits()[0].clone();
        for n in 0..KEYS_PER_ROUTE {
            let id = format!("{}:{n}", route.prefix);
            let req = http::Request::get(route.path)
                .header("x-user-id", id.as_str())
                .body(())
                .unwrap();
            let key = file
                .key_on(&http::Method::GET, route.path, &RequestHead::from(&req))
                .expect("a keyed route")
                .expect("a key");
            let names = naming.redis_keys(&key, &limit);
            assert!(
                names.iter().any(|name| store.holds(name)),
                "{id}: none of {names:?} is in Redis: the example names its keys otherwise"
            );
            if names.iter().any(|name| store.on_failing_primary(name)) {
                lost.push(id);
            }
        }
    }
    Some(lost)
}

/// A small seeded generator: runs differ only by what the machine does.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
