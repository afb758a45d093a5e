//! The fleet on a Redis Cluster with replicas and behind Sentinel: what it
//! does on one server (`fleet.rs`), then across a failover made while
//! changes are being made — every acknowledged change is on every server
//! afterwards, all servers run one text, and a change made after the
//! promotion runs everywhere within 5 s of it.
#![cfg(all(feature = "redis-cluster", feature = "redis-sentinel"))]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tower_ratelimit::config::{Fleet, Limits, LimitsFile, List, ListEntry};

use crate::limits::fleet::{changes_run_everywhere, until, FILE};
use crate::support::example::ExampleServer;
use crate::support::sentinel::{Sentinels, SETTLE_WITHIN};
use crate::support::{RedisCluster, RedisServer};

/// The deny entry of the `i`th change.
fn entry(i: usize) -> String {
    format!("10.9.{}.{}/32", i / 256, i % 256)
}

/// Changes (a deny entry each) made one after another on the servers in
/// turn while `fail_over` kills the master and waits for its replica to
/// take over; then a change after the promotion, made again until Redis
/// takes it. Checks every acknowledged change is on every server and all
/// run one text, which a server joining then starts on; gives back what
/// `fail_over` returned.
async fn changes_across_a_failover<T: Send + 'static>(
    url: &str,
    servers: &[(Limits, Fleet)],
    fail_over: impl FnOnce() -> T + Send + 'static,
) -> T {
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(Mutex::new(Vec::new()));
    // Changes go on for a moment first, so that some are acknowledged
    // just before the master dies.
    let failing_over = tokio::task::spawn_blocking(|| {
        std::thread::sleep(Duration::from_millis(500));
        fail_over()
    });
    let mut i = 0;
    while !failing_over.is_finished() {
        let fleet = &servers[i % servers.len()].1;
        let network = entry(i);
        let change = fleet.change(|f| {
            f.with_listed(
                List::Deny,
                &ListEntry::Network(network.parse().unwrap()),
                true,
            )
        });
        match tokio::time::timeout(Duration::from_secs(3), change).await {
            Ok(Ok(_)) => acknowledged.lock().unwrap().push(network),
            Ok(Err(e)) => refused.lock().unwrap().push(format!("{network}: {e}")),
            Err(_) => refused
                .lock()
                .unwrap()
                .push(format!("{network}: no answer")),
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept = failing_over.await.unwrap();
    let promoted = Instant::now();

    // A change after the promotion, made again until the fleet's
    // connections have found the new master.
    let after = "search = 33/min";
    loop {
        let made = servers[1]
            .1
            .change(|f| f.with_route_limits(None, "/api/search", after))
            .await;
        if made.is_ok() {
            break;
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(5),
            "no change taken 5 s after the promotion: {made:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let search = |limits: &Limits| limits.current().text().contains(after);
    for (limits, _) in servers {
        until(|| search(limits)).await;
    }
    let took = promoted.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "{took:?} after the promotion"
    );
    let acknowledged = acknowledged.lock().unwrap().clone();
    let refused = refused.lock().unwrap().clone();
    println!(
        "failover: {} changes acknowledged, {} refused ({:?}); a change after the promotion ran everywhere {took:?} after it",
        acknowledged.len(),
        refused.len(),
        refused.first()
    );
    assert!(!acknowledged.is_empty(), "no change was made: {refused:?}");

    // Every server ends on one text holding every acknowledged change.
    let one_text = || {
        let texts: Vec<_> = servers.iter().map(|(l, _)| l.current()).collect();
        texts.iter().all(|t| t.text() == texts[0].text())
    };
    until(one_text).await;
    assert!(one_text(), "the servers run different texts");
    let text = servers[0].0.current();
    for network in &acknowledged {
        assert!(
            text.text().contains(network.as_str()),
            "{network} was acknowledged, and lost"
        );
    }
    let late = Limits::new(LimitsFile::parse(FILE).unwrap());
    Fleet::connect(url, late.clone()).await.unwrap();
    assert_eq!(
        late.current().text(),
        text.text(),
        "a late joiner's version"
    );
    kept
}

/// A cluster of three primaries with a replica each: the fleet works as on
/// one server (its subscriptions on any node), and across the failover of
/// the primary that holds its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_fleet_holds_across_a_failover() {
    let cluster = RedisCluster::start_with_replicas();
    let url = cluster.urls().join(",");
    let servers = changes_run_everywhere(&url, || {
        for node in &cluster.nodes {
            node.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        }
    })
    .await;
    assert_eq!(servers[0].1.topology(), "cluster");

    let holds = |node: &RedisServer| node.cli(&["EXISTS", Fleet::DEFAULT_NAME]).trim() == "1";
    let owner = cluster
        .nodes
        .iter()
        .position(holds)
        .expect("a node holds the copy");
    let mut cluster = cluster;
    let _cluster = changes_across_a_failover(&url, &servers, move || {
        cluster.nodes[owner].kill();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster
            .nodes
            .iter()
            .enumerate()
            .any(|(i, node)| i != owner && holds(node))
        {
            assert!(Instant::now() < deadline, "no replica took over");
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster
    })
    .await;
}

/// Sentinel (a primary, a replica, three sentinels): the fleet works as on
/// one server, on the master the sentinels name, and across a failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_fleet_holds_across_a_failover() {
    let sentinels = Sentinels::start();
    let servers = changes_run_everywhere(&sentinels.url(), || {
        sentinels.primary.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    })
    .await;
    assert_eq!(servers[0].1.topology(), "sentinel");
    let url = sentinels.url();
    let mut sentinels = sentinels;
    let _sentinels = changes_across_a_failover(&url, &servers, move || {
        sentinels.primary.kill();
        sentinels.wait_until(SETTLE_WITHIN, Sentinels::replica_is_master);
        sentinels
    })
    .await;
}

/// The example server on a cluster: its start-up line names the topology,
/// a change on one server reaches the other within a second, and a server
/// started afterwards answers its first request with it.
#[test]
fn the_example_servers_share_changes_on_a_cluster() {
    let cluster = RedisCluster::start();
    let url = cluster.urls().join(",");
    let env = [("REDIS_URL", url.as_str()), ("ADMIN_TOKEN", "t")];
    let mut first = ExampleServer::start(&env);
    let mut second = ExampleServer::start(&env);
    for server in [&mut first, &mut second] {
        let joined = server.line_starting("limits: joined the fleet");
        assert!(
            joined
                .as_deref()
                .is_some_and(|l| l.contains("on a Redis Cluster")),
            "{joined:?}"
        );
    }
    let put = first.send(
        "PUT",
        "/admin/limits/api/search",
        &[("authorization", "Bearer t")],
        "7/min",
    );
    assert!(put.starts_with("HTTP/1.1 200"), "{put}");
    let changed = Instant::now();
    let search = |server: &ExampleServer| server.get("/api/search", &[("x-user-id", "ann")]);
    while !search(&second).contains("q=7") {
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "{}",
            search(&second)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let late = ExampleServer::start(&env);
    let first = search(&late);
    assert!(first.contains("q=7"), "{first}");
}

/// Async replication loses what the master had not sent yet. With the
/// replica frozen, a change is reported as not confirmed (yet runs on
/// every server). Then a change made while the replica's link is down (the
/// master waits for no replica: it has none connected) is lost when the
/// master dies at once: the promoted replica never had it,
/// and the servers that run it put it back — every server, and Redis, end
/// on it, none on the replica's older version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_replica_did_not_confirm_is_reported_and_a_lost_one_put_back() {
    let sentinels = Sentinels::start();
    let servers = crate::limits::fleet::fleet_of(2, &sentinels.url()).await;
    let change = |quota: &'static str| {
        servers[0]
            .1
            .change(move |f| f.with_route_limits(None, "/api/search", quota))
    };
    let runs = |limits: &Limits, quota: &str| limits.current().text().contains(quota);
    let stored = |s: &Sentinels| s.replica.cli(&["HGET", Fleet::DEFAULT_NAME, "text"]);

    sentinels.replica.pause();
    let error = change("search = 44/min").await.expect_err("not confirmed");
    assert!(error.message().contains("replicas confirmed"), "{error}");
    for (limits, _) in &servers {
        until(|| runs(limits, "44/min")).await;
        assert!(runs(limits, "44/min"), "it runs where it was published");
    }
    sentinels.replica.resume();
    until(|| stored(&sentinels).contains("44/min")).await;

    // The replica frozen and its link cut by the master, a change (the
    // master has no replica to wait for), and the master killed at once.
    sentinels.replica.pause();
    sentinels
        .primary
        .cli(&["CLIENT", "KILL", "TYPE", "replica"]);
    let made = change("search = 55/min").await;
    let mut sentinels = sentinels;
    sentinels.primary.kill();
    sentinels.replica.resume();
    println!(
        "made while the link was down: {:?}",
        made.as_ref().map(|_| ())
    );
    let lost = !stored(&sentinels).contains("55/min");
    assert!(lost, "the replica had it: no loss was made");
    let sentinels = sentinels.promotion().await;
    let promoted = Instant::now();
    until(|| stored(&sentinels).contains("55/min")).await;
    let took = promoted.elapsed();
    let now = stored(&sentinels);
    assert!(now.contains("55/min"), "not put back: {now}");
    assert!(
        took < Duration::from_secs(5),
        "put back {took:?} after the promotion"
    );
    println!("put back {took:?} after the promotion");
    // A server that had not received the change before the master died
    // gets it from the copy put back (by its channel or its poll).
    for (limits, _) in &servers {
        until(|| runs(limits, "55/min")).await;
        assert!(
            runs(limits, "55/min") && promoted.elapsed() < Duration::from_secs(5),
            "a server does not run the change put back within 5 s of the promotion"
        );
    }
}

/// Two example servers behind Sentinel: `8/min` put on the first runs on
/// the second within a second; the primary killed and its replica
/// promoted, `9/min` put on the second runs on the first within 5 s of the
/// promotion.
#[test]
fn the_example_servers_share_changes_behind_sentinel_across_a_failover() {
    let sentinels = Sentinels::start();
    let url = sentinels.url();
    let env = [("REDIS_URL", url.as_str()), ("ADMIN_TOKEN", "t")];
    let mut servers = [ExampleServer::start(&env), ExampleServer::start(&env)];
    for server in &mut servers {
        let joined = server.line_starting("limits: joined the fleet");
        let on_sentinel = joined
            .as_deref()
            .is_some_and(|l| l.contains("on the master Sentinel names"));
        assert!(on_sentinel, "{joined:?}");
    }
    let put = |server: &ExampleServer, quota: &str| {
        server.send(
            "PUT",
            "/admin/limits/api/search",
            &[("authorization", "Bearer t")],
            quota,
        )
    };
    let shows = |server: &ExampleServer, q: &str, within: Duration| {
        let since = Instant::now();
        loop {
            let answer = server.get("/api/search", &[("x-user-id", "ann")]);
            if answer.contains(q) {
                return since.elapsed();
            }
            assert!(
                since.elapsed() < within,
                "not {q} after {within:?}: {answer}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let answer = put(&servers[0], "8/min");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    shows(&servers[1], "q=8", Duration::from_secs(1));

    let mut sentinels = sentinels;
    sentinels.primary.kill();
    sentinels.wait_until(SETTLE_WITHIN, Sentinels::replica_is_master);
    let promoted = Instant::now();
    while !put(&servers[1], "9/min").starts_with("HTTP/1.1 200") {
        assert!(
            promoted.elapsed() < Duration::from_secs(5),
            "no change taken"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    shows(
        &servers[0],
        "q=9",
        Duration::from_secs(5).saturating_sub(promoted.elapsed()),
    );
    println!("9/min on both {:?} after the promotion", promoted.elapsed());
}
