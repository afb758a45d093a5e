//! One limits file for a fleet on Redis: a change made on any server runs
//! on every server within a second, a server that joins later starts on
//! the current version, and a changed named limit is one budget. On one
//! server here; on a cluster and behind Sentinel, across a failover, in
//! `fleet_failover.rs`.
#![cfg(feature = "redis")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::{Method, Request};
use tokio::net::TcpListener;
use tower_ratelimit::config::{Fleet, Limits, LimitsFile, List, ListEntry};
use tower_ratelimit::key::{Header, RequestHead};
use tower_ratelimit::layer::PolicyResolver;

use crate::support::{send, RedisServer};

pub const FILE: &str = "[keys]\nuser = { header = \"x-user-id\" }\n\n[[routes]]\npath = \"/api/search\"\nkey = \"user\"\nlimits = \"search = 10/min\"\n";

/// The limit `limits` runs on `/api/search`.
fn search_limit(limits: &Limits) -> u32 {
    let req = Request::get("/api/search").body(()).unwrap();
    let policy = limits.policies().resolve(&RequestHead::from(&req)).unwrap();
    policy.limits()[0].quota().limit()
}

/// `n` servers joined one after another on the Redis at `url`, each
/// running `FILE` at first.
pub async fn fleet_of(n: usize, url: &str) -> Vec<(Limits, Fleet)> {
    let mut servers = Vec::new();
    for _ in 0..n {
        let limits = Limits::new(LimitsFile::parse(FILE).unwrap());
        let fleet = Fleet::connect(url, limits.clone()).await.unwrap();
        servers.push((limits, fleet));
    }
    servers
}

/// Each of `servers` makes `each` changes, one after another, all servers
/// at once: an override of `user` for `tenant-<server>-<n>` each.
async fn overrides_at_once(servers: &[(Limits, Fleet)], each: usize) {
    let tasks: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(i, (_, fleet))| {
            let fleet = fleet.clone();
            tokio::spawn(async move {
                for n in 0..each {
                    let who = format!("tenant-{i}-{n}");
                    fleet
                        .change(|f| f.with_override("user", &who, Some("7/min")))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Waits (at most 15 s) until `done`; how long that took.
pub async fn until(done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    // Generous: an agreement waited for, not a speed (a busy machine's
    // polls can time out a few times in a row); what took how long is
    // asserted where it matters, from the time this returns.
    while !done() && start.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// Three servers: a route's limits, an override and a list entry changed
/// on one run on the others within a second; a server joining later, with
/// a file of its own, runs the fleet's current version at once.
#[tokio::test]
async fn a_change_on_one_server_runs_on_every_server_within_a_second() {
    let redis = RedisServer::start();
    let servers = changes_run_everywhere(&redis.url(), || {
        redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    })
    .await;
    assert_eq!(
        redis.cli(&["HGET", Fleet::DEFAULT_NAME, "seq"]).trim(),
        servers[0].1.version().to_string()
    );
}

/// Many changes at once on three servers, while each server's follower
/// runs the others' versions: none is lost. A change is made on the
/// version whose text runs on its server; made on the one counted as
/// applied before its text was live, it dropped the change between them
/// (seen once in a full run, behind Sentinel: 3 overrides of 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_changes_at_once_are_all_kept() {
    const EACH: usize = 15;
    let redis = RedisServer::start();
    let servers = fleet_of(3, &redis.url()).await;
    overrides_at_once(&servers, EACH).await;
    for (limits, _) in &servers {
        until(|| limits.overrides().current().len() == 3 * EACH).await;
        assert_eq!(limits.overrides().current().len(), 3 * EACH);
    }
}

/// A version this server cannot read (a newer server's file) is not
/// changed from here: the change would be made on the version before it
/// and drop what it holds; the fleet's copy stays as it was.
#[tokio::test]
async fn a_server_that_cannot_read_the_fleet_s_version_does_not_change_it() {
    let redis = RedisServer::start();
    let servers = fleet_of(1, &redis.url()).await;
    let (_, fleet) = &servers[0];
    let newer = "[a_section_a_newer_server_knows]\nx = 1\n";
    redis.cli(&["HSET", Fleet::DEFAULT_NAME, "seq", "9", "text", newer]);
    let error = fleet
        .change(|f| f.with_override("user", "ann", Some("7/min")))
        .await
        .expect_err("a change on a version this server cannot read");
    assert!(
        error.to_string().contains("cannot read version 9"),
        "{error}"
    );
    assert_eq!(
        redis.cli(&["HGET", Fleet::DEFAULT_NAME, "text"]).trim(),
        newer.trim()
    );
}

/// The same as the least-privileged user the guide shows for a fleet.
#[tokio::test]
async fn a_fleet_runs_as_the_least_privileged_user_the_guide_shows() {
    let guide = include_str!("../../../src/guide/live_changes.md");
    let rules = guide
        .lines()
        .find_map(|l| l.strip_prefix("ACL SETUSER fleet "))
        .expect("the guide shows the fleet's ACL user");
    let redis = RedisServer::start();
    let mut setuser = vec!["ACL", "SETUSER", "fleet"];
    setuser.extend(rules.split_whitespace().map(|rule| match rule {
        ">password" => ">fleet-secret",
        rule => rule,
    }));
    assert_eq!(redis.cli(&setuser).trim(), "OK");
    let url = format!("redis://fleet:fleet-secret@127.0.0.1:{}", redis.port);
    changes_run_everywhere(&url, || {
        redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    })
    .await;
    // Without one of its rights, a change fails and says so.
    assert_eq!(
        redis.cli(&["ACL", "SETUSER", "fleet", "-hset"]).trim(),
        "OK"
    );
    let limits = Limits::new(LimitsFile::parse(FILE).unwrap());
    let fleet = Fleet::connect(&url, limits).await.unwrap();
    let err = fleet
        .change(|f| f.with_route_limits(None, "/api/search", "search = 21/min"))
        .await
        .unwrap_err();
    assert!(err.message().contains("can't run this command"), "{err}");
}

/// What a fleet of three servers on the Redis at `url` does on every
/// topology: a change on one runs on all within a second, concurrent
/// changes are all kept, a reset reaches every server (by the channel
/// alone), a change made after `cut` ended every subscription still runs
/// everywhere within a second, a server joining later runs the current
/// version at once, and an invalid change is refused. The servers.
pub async fn changes_run_everywhere(url: &str, cut: impl Fn()) -> Vec<(Limits, Fleet)> {
    let servers = fleet_of(3, url).await;
    assert_eq!(servers[0].1.version(), 1, "the first wrote its own version");
    assert!(servers.iter().all(|(_, f)| f.version() == 1));

    // A route's limits, changed on the second server.
    let changed = Instant::now();
    servers[1]
        .1
        .change(|f| f.with_route_limits(None, "/api/search", "search = 20/min"))
        .await
        .unwrap();
    for (limits, _) in &servers {
        let took = until(|| search_limit(limits) == 20).await;
        assert!(took < Duration::from_secs(1), "took {took:?}");
    }
    println!(
        "a route's change ran on all three in {:?}",
        changed.elapsed()
    );

    // An override and a deny entry, changed on the third.
    let user = Header::new("x-user-id");
    servers[2]
        .1
        .change(|f| {
            f.with_override("user", "acme", Some("acme = 500/min"))?
                .with_listed(
                    List::Deny,
                    &ListEntry::Network("203.0.113.0/24".parse().unwrap()),
                    true,
                )
        })
        .await
        .unwrap();
    for (limits, _) in &servers {
        let took = until(|| {
            limits
                .overrides()
                .current()
                .get(&user.key_of(b"acme"))
                .is_some()
        })
        .await;
        assert!(took < Duration::from_secs(1), "took {took:?}");
        assert!(limits.current().text().contains("203.0.113.0/24"));
    }

    // Concurrent changes on every server: none is lost.
    overrides_at_once(&servers, 1).await;
    for (limits, _) in &servers {
        until(|| limits.overrides().current().len() == 4).await;
        assert_eq!(
            limits.overrides().current().len(),
            4,
            "acme and the three tenants"
        );
    }

    // A reset told on one server reaches every server: by the channel
    // alone, so each server's subscription works.
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for (i, (_, fleet)) in servers.iter().enumerate() {
        let told = told.clone();
        fleet.on_forget(move |key| told.lock().unwrap().push((i, key.clone())));
    }
    let ann = user.key_of(b"ann");
    servers[1].1.forget(&ann).await.unwrap();
    let took = until(|| told.lock().unwrap().len() == 3).await;
    assert!(took < Duration::from_secs(1), "{:?}", told.lock().unwrap());
    assert!(told.lock().unwrap().iter().all(|(_, key)| *key == ann));

    // Servers whose subscriptions were cut (a message they may miss) still
    // run the next change within a second.
    cut();
    let changed = Instant::now();
    servers[0]
        .1
        .change(|f| f.with_route_limits(None, "/api/search", "search = 25/min"))
        .await
        .unwrap();
    for (limits, _) in &servers {
        until(|| search_limit(limits) == 25).await;
    }
    let took = changed.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}");
    servers[0]
        .1
        .change(|f| f.with_route_limits(None, "/api/search", "search = 20/min"))
        .await
        .unwrap();

    // A late starter with its own (older) file runs the fleet's.
    let late = Limits::new(LimitsFile::parse(FILE).unwrap());
    assert_eq!(search_limit(&late), 10);
    let fleet = Fleet::connect(url, late.clone()).await.unwrap();
    assert_eq!(
        search_limit(&late),
        20,
        "the fleet's version, before join returns"
    );
    assert_eq!(fleet.version(), servers[0].1.version());

    // An invalid change is refused and changes nothing anywhere.
    let before = fleet.version();
    let err = servers[0]
        .1
        .change(|f| f.with_route_limits(None, "/api/search", "search = 20/fortnight"))
        .await
        .unwrap_err();
    assert!(err.message().contains("fortnight"), "{err}");
    assert_eq!(servers[0].1.version(), before);
    servers
}

/// Three example servers on one Redis: `PUT /admin/limits/api/search` on
/// one, and within a second the others answer with the new quota, from one
/// budget (a client cannot get 20 on one server and 10 on another); a
/// fourth started later answers with it at once.
#[tokio::test]
async fn the_example_servers_change_a_limit_together() {
    let redis = RedisServer::start();
    let config = crate::server::Config {
        admin_token: Some("s3cret".into()),
        ..Default::default()
    };
    let start = || async {
        let app = crate::server::redis_app(&config, &redis.url())
            .await
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    };
    let mut addrs = Vec::new();
    for _ in 0..3 {
        addrs.push(start().await);
    }
    let ann = [("x-user-id", "ann")];
    let policy = |addr: SocketAddr| async move {
        let (_, headers, _) = send(addr, Method::GET, "/api/search", &ann, "").await;
        headers["ratelimit-policy"].to_str().unwrap().to_owned()
    };
    // Ann spends 4 of 10 on the first server.
    for _ in 0..4 {
        policy(addrs[0]).await;
    }
    let auth = [("authorization", "Bearer s3cret")];
    let put = Instant::now();
    let (status, _, body) = send(
        addrs[0],
        Method::PUT,
        "/admin/limits/api/search",
        &auth,
        "20/min",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for addr in &addrs[1..] {
        loop {
            if policy(*addr).await == r#""search";q=20;w=60"# {
                break;
            }
            assert!(
                put.elapsed() < Duration::from_secs(1),
                "{addr}: still the old limit after {:?}",
                put.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // One budget: what Ann spent on every server, counted once under the
    // new quota.
    let (_, headers, _) = send(addrs[2], Method::GET, "/api/search", &ann, "").await;
    let spent: u32 = 4 + 2; // her 4, and the two reads of the loop above at least
    let remaining: u32 = headers["ratelimit"]
        .to_str()
        .unwrap()
        .split(";r=")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|r| r.parse().ok())
        .unwrap();
    assert!(
        remaining < 20 - spent,
        "r={remaining}: the budget of 20 began afresh somewhere"
    );

    let late = start().await;
    assert_eq!(policy(late).await, r#""search";q=20;w=60"#);
}

/// Redis loses the fleet's copy (flushed, as after a restart with nothing
/// saved, or an eviction): a change right after works, every server runs
/// it within a second, and a server joining after the next loss with a
/// file of its own ends up running the fleet's newest version, as do the
/// others — its file never wins over a newer version.
#[tokio::test]
async fn a_lost_copy_is_put_back_from_the_newest_version_a_server_runs() {
    let redis = RedisServer::start();
    let servers = fleet_of(3, &redis.url()).await;
    for quota in ["search = 11/min", "search = 12/min", "search = 20/min"] {
        servers[0]
            .1
            .change(|f| f.with_route_limits(None, "/api/search", quota))
            .await
            .unwrap();
    }
    let newest = servers[0].1.version();
    for (limits, _) in &servers {
        until(|| search_limit(limits) == 20).await;
    }

    redis.cli(&["FLUSHALL"]);
    let changed = Instant::now();
    servers[1]
        .1
        .change(|f| f.with_route_limits(None, "/api/search", "search = 30/min"))
        .await
        .expect("a change right after the loss");
    assert!(servers[1].1.version() > newest);
    for (limits, _) in &servers {
        until(|| search_limit(limits) == 30).await;
        assert_eq!(search_limit(limits), 30);
    }
    let took = changed.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}");

    // Lost again, and a server joins with its own file (10/min).
    redis.cli(&["FLUSHALL"]);
    let late = Limits::new(LimitsFile::parse(FILE).unwrap());
    let late_fleet = Fleet::connect(&redis.url(), late.clone()).await.unwrap();
    let joined = Instant::now();
    for (limits, _) in servers.iter().chain([&(late.clone(), late_fleet.clone())]) {
        until(|| search_limit(limits) == 30).await;
        assert_eq!(search_limit(limits), 30, "the fleet's newest version");
    }
    assert!(joined.elapsed() < Duration::from_secs(1));
    assert_eq!(late_fleet.version(), servers[1].1.version());
    let stored = redis.cli(&["HGET", Fleet::DEFAULT_NAME, "text"]);
    assert!(stored.contains("search = 30/min"), "{stored}");
}
