//! Slots moving while their keys are decided, on a cluster of three
//! primaries: a live reshard of 5,000 slots there and back (their keys
//! migrated while requests meet ASK and MOVED, batched and alone), then a
//! fourth primary taking its share in a rebalance. Nobody is admitted past
//! a limit (no state lost or counted twice in a move), and every decision
//! is Redis's: none fails.
#![cfg(feature = "redis-cluster")]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{RedisCluster, AGREE};
use tower_ratelimit::backend::{Backend, RedisBackend, RedisBackendBuilder};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// Each user's hourly limit.
const LIMIT: u32 = 20;
const USERS: usize = 400;

/// What the deciding saw.
#[derive(Default)]
struct Seen {
    admitted: Vec<AtomicU32>,
    decisions: AtomicU64,
    /// Decisions while slots were moving.
    while_moving: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// Users decided on `cluster` over and over, half on a backend that
/// batches and half on one that does not: once each has had its limit,
/// `moves` runs; then a second more. A user's two limits are three keys of one slot (a
/// burst's, and an hour's sliding log and its sum).
fn decided_while(cluster: &mut RedisCluster, moves: impl FnOnce(&mut RedisCluster) + Send) -> Seen {
    let policy = Policy::builder()
        .limit("burst", Algorithm::Gcra, Quota::per_second(50).unwrap())
        .limit(
            "hour",
            Algorithm::SlidingLog,
            Quota::per_hour(LIMIT).unwrap(),
        )
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backends: Vec<RedisBackend> = [RedisBackendBuilder::DEFAULT_MAX_BATCH, 1]
        .iter()
        .map(|&batch| {
            rt.block_on(
                RedisBackend::cluster_builder(cluster.urls())
                    .timeout(AGREE)
                    .max_batch(batch)
                    .connect(),
            )
            .unwrap()
        })
        .collect();
    let seen = Arc::new(Seen {
        admitted: (0..USERS).map(|_| AtomicU32::new(0)).collect(),
        ..Seen::default()
    });
    let (moving, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    std::thread::scope(|scope| {
        let (moving, done, seen) = (&moving, &done, &seen);
        scope.spawn(move || {
            // Every user's limit spent before a slot moves: a state lost
            // in a move would admit again.
            let deadline = Instant::now() + Duration::from_secs(20);
            let full = || {
                seen.admitted
                    .iter()
                    .all(|a| a.load(Ordering::Relaxed) >= LIMIT)
            };
            while !full() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            moving.store(true, Ordering::Relaxed);
            moves(cluster);
            moving.store(false, Ordering::Relaxed);
            // A second more on the slots' new homes.
            std::thread::sleep(Duration::from_secs(1));
            done.store(true, Ordering::Relaxed);
        });
        rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for worker in 0..16 {
                let (backends, policy) = (backends.clone(), policy.clone());
                let (seen, moving, done) = (Arc::clone(seen), Arc::clone(moving), Arc::clone(done));
                tasks.spawn(async move {
                    loop {
                        let finished = done.load(Ordering::Relaxed);
                        for user in (worker..USERS).step_by(16) {
                            decide(&backends[user % 2], &policy, &seen, &moving, user).await;
                        }
                        if finished {
                            return;
                        }
                        // Requests come and go, as from clients: a
                        // runtime never left idle drives no timers (its
                        // 100 ms sleeps ran 18 s late here), and nothing
                        // that waits on one ends, timeouts included.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                });
            }
            while let Some(task) = tasks.join_next().await {
                task.unwrap();
            }
        });
    });
    Arc::into_inner(seen).unwrap()
}

/// One decision of `user`'s, counted in `seen`.
async fn decide(
    backend: &RedisBackend,
    policy: &Policy,
    seen: &Seen,
    moving: &AtomicBool,
    user: usize,
) {
    let key = Key::new("user", format!("u{user}"));
    match backend.check(&key, policy, 1).await {
        Ok(decision) => {
            let admitted = u32::from(decision.is_allowed());
            seen.admitted[user].fetch_add(admitted, Ordering::Relaxed);
        }
        Err(error) => seen.errors.lock().unwrap().push(error.to_string()),
    }
    seen.decisions.fetch_add(1, Ordering::Relaxed);
    if moving.load(Ordering::Relaxed) {
        seen.while_moving.fetch_add(1, Ordering::Relaxed);
    }
}

/// What must hold whatever moved: each user got its limit, no more (the
/// first rounds spend it; a state lost in a move would admit again), no
/// decision failed, and decisions were made while slots moved.
fn holds(seen: &Seen, what: &str) {
    let errors = seen.errors.lock().unwrap();
    assert!(
        errors.is_empty(),
        "{what}: {} of {} decisions failed, first: {:?}",
        errors.len(),
        seen.decisions.load(Ordering::Relaxed),
        errors.first()
    );
    let admitted: Vec<u32> = seen
        .admitted
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    let over: Vec<(usize, u32)> = admitted
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, a)| *a > LIMIT)
        .collect();
    assert!(over.is_empty(), "{what}: admitted past {LIMIT}: {over:?}");
    assert!(
        admitted.iter().all(|a| *a == LIMIT),
        "{what}: a user short of its limit: {admitted:?}"
    );
    let while_moving = seen.while_moving.load(Ordering::Relaxed);
    assert!(
        while_moving >= USERS as u64,
        "{what}: {while_moving} decisions while moving"
    );
    println!(
        "{what}: {} decisions, {while_moving} while slots moved; none failed, none past a limit",
        seen.decisions.load(Ordering::Relaxed)
    );
}

#[test]
fn slots_moving_live_lose_no_state_and_fail_no_decision() {
    let mut cluster = RedisCluster::start();
    let seen = decided_while(&mut cluster, |cluster| {
        let (from, to) = (cluster.id(0), cluster.id(1));
        for (from, to) in [(&from, &to), (&to, &from)] {
            cluster.manage(&[
                "reshard",
                &cluster.first(),
                "--cluster-from",
                from,
                "--cluster-to",
                to,
                "--cluster-slots",
                "5000",
                "--cluster-yes",
            ]);
        }
    });
    holds(&seen, "5,000 slots there and back");
}

#[test]
fn a_new_primary_takes_its_slots_while_they_are_decided() {
    let mut cluster = RedisCluster::start();
    let seen = decided_while(&mut cluster, |cluster| {
        cluster.add_primary();
        // A rebalance right after the join can find nothing to move, or
        // refuse while the nodes' views differ: again until it holds
        // slots.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !holds_slots(cluster, 3) {
            assert!(
                Instant::now() < deadline,
                "no slot moved to the new primary"
            );
            let first = cluster.first();
            let args = [
                "rebalance",
                &first,
                "--cluster-use-empty-masters",
                "--cluster-yes",
            ];
            if !cluster.try_manage(&args) {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    });
    holds(&seen, "a fourth primary, rebalanced");
}

/// Whether node `i` of `cluster` holds slots now, as it sees itself.
fn holds_slots(cluster: &RedisCluster, i: usize) -> bool {
    let nodes = cluster.nodes[i].cli(&["CLUSTER", "NODES"]);
    let me = nodes.lines().find(|l| l.contains("myself")).unwrap_or("");
    // id, address, flags, primary, ping, pong, epoch, link, then slots.
    me.split_whitespace().count() > 8
}
