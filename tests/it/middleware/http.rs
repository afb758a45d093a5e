//! The example server over real HTTP: a listener on 127.0.0.1 and a real
//! client, so peer addresses, headers and bodies are what a user gets.

use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};
use tokio::net::TcpListener;
use tower_ratelimit::Algorithm;

use crate::server::Config;
use crate::support::send;

/// Serve the demo app on a free port; the server stops with the test's runtime.
async fn start(algorithm: Algorithm, trusted: &[&str]) -> SocketAddr {
    start_with(Config {
        algorithm,
        trusted_proxies: trusted.iter().map(|c| c.parse().unwrap()).collect(),
        ..Default::default()
    })
    .await
}

async fn start_with(config: Config) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = crate::server::app(&config, tower_ratelimit::backend::MemoryBackend::new())
        .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// One GET over a fresh connection.
async fn get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, String) {
    send(addr, Method::GET, path, headers, "").await
}

async fn statuses(addr: SocketAddr, path: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(get(addr, path, headers).await.0.as_u16());
    }
    out
}

#[tokio::test]
async fn search_admits_ten_per_user_then_429_for_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let addr = start(algorithm, &[]).await;
        let alice = [("x-user-id", "alice")];
        let got = statuses(addr, "/api/search", &alice, 12).await;
        assert_eq!(
            got,
            [[200; 10].as_slice(), &[429, 429]].concat(),
            "{algorithm}"
        );
        let (status, headers, body) = get(addr, "/api/search", &alice).await;
        assert_eq!(status, 429);
        assert_eq!(headers["x-ratelimit-limit"], "10");
        assert_eq!(headers["ratelimit-policy"], r#""search";q=10;w=60"#);
        assert!(headers.contains_key("retry-after"), "{algorithm}");
        assert!(body.starts_with(r#"{"error":"rate_limit_exceeded","limit":10,"window":"1m","#));
        // Bob, and alice elsewhere, are untouched.
        assert_eq!(
            get(addr, "/api/search", &[("x-user-id", "bob")]).await.0,
            200
        );
        assert_eq!(get(addr, "/api/user", &alice).await.0, 200);
    }
}

#[tokio::test]
async fn quota_reports_what_was_spent_and_spends_nothing() {
    let addr = start(Algorithm::FixedWindow, &[]).await;
    let carol = [("x-user-id", "carol")];
    // `/api/burst`'s 10/s is a fixed window of whole seconds: start just
    // after one begins, so that the spending and both reads fall in it.
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into_second = Duration::from_nanos(u64::from(since_epoch.subsec_nanos()));
    tokio::time::sleep(Duration::from_millis(1_020).saturating_sub(into_second)).await;
    statuses(addr, "/api/search", &carol, 4).await;
    statuses(addr, "/api/burst", &carol, 3).await;
    let (status, headers, first) = get(addr, "/api/quota", &carol).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    assert!(
        first.contains(r#""name":"search","remaining":6"#),
        "{first}"
    );
    assert!(
        first.contains(r#""name":"burst-second","remaining":7"#),
        "{first}"
    );
    assert!(
        first.contains(r#""name":"burst-hour","remaining":997"#),
        "{first}"
    );
    // Every other limited route is listed, the settled, in-flight and
    // adaptive ones too.
    for route in ["/api/login", "/api/tokens", "/api/slow", "/api/report"] {
        assert!(
            first.contains(&format!(r#""route":"{route}""#)),
            "{route} in {first}"
        );
    }
    let (_, _, second) = get(addr, "/api/quota", &carol).await;
    assert_eq!(first, second, "peeking consumed nothing");
}

#[tokio::test]
async fn api_keys_by_tier_and_unknown_keys_rejected() {
    let addr = start(Algorithm::Gcra, &[]).await;
    assert_eq!(get(addr, "/api/key", &[]).await.0, 401);
    assert_eq!(
        get(addr, "/api/key", &[("x-api-key", "stolen")]).await.0,
        401
    );
    for (key, limit) in [
        ("free-demo", "100"),
        ("pro-demo", "1000"),
        ("enterprise-demo", "10000"),
    ] {
        let (status, headers, _) = get(addr, "/api/key", &[("x-api-key", key)]).await;
        assert_eq!(status, 200);
        assert_eq!(headers["x-ratelimit-limit"], limit);
    }
}

/// API keys could be guessed at full speed: the key check sat in front of
/// the limiter and nothing counted its failures. Now 10 failed checks a
/// minute per client IP, then every request from that address waits.
#[tokio::test]
async fn api_keys_cannot_be_guessed_at_full_speed() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let mut statuses = Vec::new();
    for i in 0..15 {
        let guess = format!("guess-{i}");
        statuses.push(
            get(addr, "/api/key", &[("x-api-key", guess.as_str())])
                .await
                .0
                .as_u16(),
        );
    }
    assert_eq!(statuses[..10], [401; 10]);
    assert_eq!(statuses[10..], [429; 5], "{statuses:?}");
    // Refused before the key is looked at: a right key waits too, and says
    // how long.
    let (status, headers, _) = get(addr, "/api/key", &[("x-api-key", "pro-demo")]).await;
    assert_eq!(status, 429);
    assert!(headers.contains_key("retry-after"));
}

#[tokio::test]
async fn per_ip_limits_use_the_real_peer_and_ignore_spoofed_headers() {
    let addr = start(Algorithm::SlidingLog, &[]).await;
    // Thirty from 127.0.0.1, each claiming to be someone else.
    for i in 0..30 {
        let claim = format!("203.0.113.{i}");
        let (status, _, _) = get(addr, "/api/ip", &[("x-forwarded-for", &claim)]).await;
        assert_eq!(status, 200);
    }
    let got = get(addr, "/api/ip", &[("x-forwarded-for", "198.51.100.1")]).await;
    assert_eq!(got.0, 429, "the spoofed header bought no new budget");
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let addr = start(Algorithm::TokenBucket, &["127.0.0.0/8"]).await;
    let via = |client: &'static str| [("x-forwarded-for", client)];
    assert_eq!(
        statuses(addr, "/api/ip", &via("203.0.113.1"), 31).await[30],
        429
    );
    assert_eq!(get(addr, "/api/ip", &via("203.0.113.2")).await.0, 200);
}

#[tokio::test]
async fn three_limits_at_once_and_the_tightest_decides() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let dave = [("x-user-id", "dave")];
    let got = statuses(addr, "/api/burst", &dave, 11).await;
    assert_eq!(got[..10], [200; 10]);
    assert_eq!(got[10], 429);
    let (_, headers, body) = get(addr, "/api/burst", &dave).await;
    assert_eq!(
        headers["ratelimit-policy"],
        r#""burst-second";q=10;w=1, "burst-minute";q=100;w=60, "burst-hour";q=1000;w=3600"#
    );
    assert!(headers["ratelimit"]
        .to_str()
        .unwrap()
        .contains(r#""burst-minute";r=90;"#));
    assert!(body.contains(r#""limit":10,"window":"1s""#), "{body}");
}

#[tokio::test]
async fn unlimited_routes_stay_unlimited() {
    let addr = start(Algorithm::FixedWindow, &[]).await;
    assert_eq!(statuses(addr, "/health", &[], 50).await, vec![200; 50]);
    let (status, headers, body) = get(addr, "/", &[]).await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("ratelimit"));
    assert!(
        body.contains("GET /api/search  10/min per user per endpoint"),
        "{body}"
    );
}

/// The demo server on Redis, with `ON_STORE_FAILURE`'s choice: while the
/// redis-server is frozen (SIGSTOP), every request is answered within the
/// timeout plus a margin, by the rule chosen.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_frozen_the_server_answers_by_on_store_failure() {
    use crate::server::StoreFailure;
    use std::time::{Duration, Instant};

    let redis = crate::support::RedisServer::start();
    // Long enough that a wait for Redis stands out from scheduling under
    // load; the bound below is well under twice it.
    let timeout = Duration::from_millis(200);
    let mut servers = Vec::new();
    for failure in [
        StoreFailure::Local,
        StoreFailure::Open,
        StoreFailure::Closed,
    ] {
        let config = crate::server::Config {
            on_store_failure: failure,
            store_timeout: timeout,
            // Two servers share the limits: each keeps half while alone.
            servers: 2,
            ..Default::default()
        };
        let app = crate::server::redis_app(&config, &redis.url())
            .await
            .unwrap()
            .into_make_service_with_connect_info::<SocketAddr>();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        servers.push(listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    }
    let [local, open, closed] = servers[..] else {
        unreachable!()
    };
    // Up: Redis decides for all three (one budget: 30/min per IP on /api/ip).
    for addr in [local, open, closed] {
        assert_eq!(get(addr, "/api/ip", &[]).await.0, 200);
    }

    redis.pause();
    let mut seen: Vec<(SocketAddr, u16, Duration)> = Vec::new();
    for _ in 0..20 {
        for addr in [local, open, closed] {
            let started = Instant::now();
            let status = get(addr, "/api/ip", &[]).await.0.as_u16();
            seen.push((addr, status, started.elapsed()));
        }
    }
    let statuses = |which: SocketAddr| -> Vec<u16> {
        seen.iter()
            .filter(|(a, _, _)| *a == which)
            .map(|(_, s, _)| *s)
            .collect()
    };
    // local: 30/min shared by 2 servers is 15 here, then 429s.
    let mut expected = vec![200; 15];
    expected.extend([429; 5]);
    assert_eq!(statuses(local), expected);
    assert_eq!(statuses(open), [200; 20]);
    assert_eq!(statuses(closed), [503; 20]);
    let slowest = seen.iter().map(|(_, _, took)| *took).max().unwrap();
    assert!(
        slowest < timeout + Duration::from_millis(100),
        "{slowest:?}"
    );
    // The breaker opened after 5 failures each: the rest did not wait.
    let waited = seen.iter().filter(|(_, _, took)| *took >= timeout).count();
    assert_eq!(waited, 15, "5 per server");
    redis.resume();
}

/// `/api/ip`'s penalty box: 30 admitted, then 10 denials within the minute
/// ban the client for 5 minutes, whatever the limit would say.
#[tokio::test]
async fn a_client_denied_ten_times_on_api_ip_is_banned_for_five_minutes() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let got = statuses(addr, "/api/ip", &[], 40).await;
    assert_eq!(got, [[200; 30].as_slice(), &[429; 10]].concat());
    let (status, headers, _) = get(addr, "/api/ip", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "300");

    // The most denied key, redacted, with its count.
    let (status, _, top) = get(addr, "/admin/top", &[]).await;
    assert_eq!(status, 200);
    let top: serde_json::Value = serde_json::from_str(&top).unwrap();
    assert_eq!(top[0]["denied"], 11, "{top}");
    let key = top[0]["key"].as_str().unwrap();
    assert!(key.starts_with("ip:…#") && !key.contains("127.0"), "{key}");
    // And its network, ranked apart.
    let (status, _, networks) = get(addr, "/admin/top/networks", &[]).await;
    assert_eq!(status, 200);
    let networks: serde_json::Value = serde_json::from_str(&networks).unwrap();
    assert_eq!(networks[0]["network"], "127.0.0.0/24", "{networks}");
    assert_eq!(networks[0]["denied"], 11, "{networks}");
}

#[tokio::test]
async fn admin_top_lists_the_most_denied_first() {
    let addr = start(Algorithm::Gcra, &[]).await;
    for (user, n) in [("alice", 14), ("bob", 12), ("carol", 11)] {
        statuses(addr, "/api/search", &[("x-user-id", user)], n).await;
    }
    let (_, _, top) = get(addr, "/admin/top?n=2", &[]).await;
    let top: serde_json::Value = serde_json::from_str(&top).unwrap();
    let ranked: Vec<(String, u64)> = top
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["key"].as_str().unwrap().to_owned(),
                o["denied"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ranked.len(), 2);
    // /api/search keys are (user, endpoint): composite, shown by hash only.
    assert_eq!((ranked[0].1, ranked[1].1), (4, 2), "{ranked:?}");
    assert_ne!(ranked[0].0, ranked[1].0);
}

#[tokio::test]
async fn shadow_mode_limits_nothing_and_says_so() {
    let addr = start_with(Config {
        shadow: true,
        ..Default::default()
    })
    .await;
    let alice = [("x-user-id", "alice")];
    assert_eq!(statuses(addr, "/api/search", &alice, 15).await, [200; 15]);
    let (_, _, metrics) = get(addr, "/metrics", &[]).await;
    assert!(metrics.contains("outcome=\"shadow_limited\""), "{metrics}");
}

#[tokio::test]
async fn deny_and_allow_cidrs_refuse_or_exempt_client_ips() {
    let denied = start_with(Config {
        deny_cidrs: vec!["127.0.0.0/8".parse().unwrap()],
        ..Default::default()
    })
    .await;
    let (status, headers, body) = get(denied, "/api/user", &[]).await;
    assert_eq!(status, 403);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(body.contains("\"status\":403"), "{body}");
    assert_eq!(
        get(denied, "/health", &[]).await.0,
        200,
        "only limited routes"
    );

    let allowed = start_with(Config {
        allow_cidrs: vec!["127.0.0.1/32".parse().unwrap()],
        ..Default::default()
    })
    .await;
    assert_eq!(statuses(allowed, "/api/ip", &[], 45).await, [200; 45]);
}

#[tokio::test]
async fn with_an_admin_token_limits_are_replaced_live() {
    let token = "s3cret";
    let addr = start_with(Config {
        admin_token: Some(token.into()),
        ..Default::default()
    })
    .await;
    let put = |auth: Option<String>, route: &'static str, body: &'static str| async move {
        let headers: Vec<(&str, &str)> = match &auth {
            Some(a) => vec![("authorization", a.as_str())],
            None => vec![],
        };
        send(addr, Method::PUT, route, &headers, body).await
    };
    let bearer = |t: &str| Some(format!("Bearer {t}"));
    assert_eq!(put(None, "/admin/limits/api/search", "2/min").await.0, 401);
    assert_eq!(
        put(bearer("guess"), "/admin/limits/api/search", "2/min")
            .await
            .0,
        401
    );
    let (status, _, body) = put(bearer(token), "/admin/limits/api/search", "2/min").await;
    assert_eq!(status, 200, "{body}");
    let erin = [("x-user-id", "erin")];
    assert_eq!(
        statuses(addr, "/api/search", &erin, 3).await,
        [200, 200, 429]
    );
    let (_, headers, _) = get(addr, "/api/search", &erin).await;
    assert_eq!(
        headers["ratelimit-policy"], r#""search";q=2;w=60"#,
        "the name is kept"
    );

    // Every limited route is listed.
    let (_, _, listed) = get(addr, "/admin/limits", &[("authorization", "Bearer s3cret")]).await;
    for route in [
        "/api/login",
        "/api/tokens",
        "/api/slow",
        "/api/quota",
        "/api/key",
    ] {
        assert!(
            listed.contains(&format!(r#""route":"{route}""#)),
            "{route}: {listed}"
        );
    }
    // A bare quota on a route of several unnamed limits: exactly what the
    // body says, unnamed and kept to the route, never named after an old
    // quota's text.
    let (status, _, body) = put(bearer(token), "/admin/limits/api/burst", "5/s").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""name":"5/s""#), "{body}");
    let (status, _, body) = put(bearer(token), "/admin/limits/api/search", "2/fortnight").await;
    assert_eq!(status, 400);
    assert!(body.contains("fortnight"), "{body}");
    assert_eq!(
        put(bearer(token), "/admin/limits/api/nope", "2/min")
            .await
            .0,
        404
    );
    // Every /admin/* route needs the token; the scheme in any case.
    for path in ["/admin/limits", "/admin/top"] {
        assert_eq!(get(addr, path, &[]).await.0, 401, "{path}");
        let wrong = [("authorization", "Bearer guess")];
        assert_eq!(get(addr, path, &wrong).await.0, 401, "{path}");
    }
    let lowercase = [("authorization", "bearer s3cret")];
    let (status, _, listed) = get(addr, "/admin/limits", &lowercase).await;
    assert_eq!(status, 200);
    assert!(
        listed.contains(r#""name":"search","quota":"2/min""#),
        "{listed}"
    );
    let (status, _, _) = put(
        Some("BEARER s3cret".into()),
        "/admin/limits/api/search",
        "3/min",
    )
    .await;
    assert_eq!(status, 200);

    // The routes that settle or hold requests in flight are replaceable too.
    for (route, body, name) in [
        (
            "/admin/limits/api/login",
            "3/15min",
            r#""name":"logins","quota":"3/15min""#,
        ),
        (
            "/admin/limits/api/tokens",
            "500/min",
            r#""name":"tokens","quota":"500/min""#,
        ),
        (
            "/admin/limits/api/quota",
            "2/min",
            r#""name":"quota","quota":"2/min""#,
        ),
        ("/admin/limits/api/slow", "1", r#""name":"slow""#),
    ] {
        let (status, _, body) = put(bearer(token), route, body).await;
        assert_eq!(status, 200, "{route}: {body}");
        assert!(body.contains(name), "{route}: {body}");
    }
    let (status, _, body) = put(bearer(token), "/admin/limits/api/slow", "3/min").await;
    assert_eq!(status, 400, "{body}");
    // Another route's budget name (a tier's of /api/key, /api/user's) is
    // refused unless sharing it is asked for.
    for taken in ["key-free = 1/min", "user = 1/min"] {
        let (status, _, body) = put(bearer(token), "/admin/limits/api/search", taken).await;
        assert_eq!(status, 409, "{taken}: {body}");
    }
    let (status, _, body) = put(
        bearer(token),
        "/admin/limits/api/search?share=true",
        "user = 100/min",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // Later, an unnamed quota for that route keeps its own name, not the
    // budget it shared (that answered 409, "user" being /api/user's).
    let (status, _, body) = put(bearer(token), "/admin/limits/api/search", "7/min").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#""name":"search","quota":"7/min""#),
        "{body}"
    );
    let gil = [("x-user-id", "gil")];
    assert_eq!(statuses(addr, "/api/quota", &gil, 3).await, [200, 200, 429]);
    let (_, headers, _) = get(addr, "/api/tokens?n=1", &gil).await;
    assert_eq!(headers["ratelimit-policy"], r#""tokens";q=500;w=60"#);
    let (_, _, listed) = get(addr, "/admin/limits", &lowercase).await;
    assert!(
        !listed.contains(r#""replaceable":false,"about":"5 failed"#),
        "{listed}"
    );
}

/// An admin-set `4000000/h` sliding log grew the process without bound;
/// the example server does not raise the maximum, so it is refused.
#[tokio::test]
async fn an_admin_cannot_set_a_sliding_log_of_millions() {
    let addr = start_with(Config {
        admin_token: Some("s3cret".into()),
        algorithm: Algorithm::SlidingLog,
        ..Default::default()
    })
    .await;
    let auth = [("authorization", "Bearer s3cret")];
    let (status, _, body) = send(
        addr,
        Method::PUT,
        "/admin/limits/api/ip",
        &auth,
        "4000000/h",
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("sliding-window"), "{body}");
    let (status, _, _) = send(addr, Method::PUT, "/admin/limits/api/ip", &auth, "100000/h").await;
    assert_eq!(status, 200);
}

/// `/api/quota` asked Redis once per route (100 requests, 501 EVALSHA in
/// 501 round trips); it now reads every route in one pipeline: five peeks
/// in one round trip, plus its own limit's.
#[cfg(feature = "redis")]
#[tokio::test]
async fn quota_reads_every_route_in_one_round_trip_on_redis() {
    let redis = crate::support::RedisServer::start();
    // What is counted is round trips, not their speed.
    let config = crate::server::Config {
        store_timeout: crate::support::AGREE,
        ..Default::default()
    };
    let app = crate::server::redis_app(&config, &redis.url())
        .await
        .unwrap()
        .into_make_service_with_connect_info::<SocketAddr>();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let frank = [("x-user-id", "frank")];
    // Spend on /api/search, then read it back through /api/quota.
    assert_eq!(statuses(addr, "/api/search", &frank, 3).await, [200; 3]);
    let (calls, reads) = (redis.evalsha_calls(), redis.reads_processed());
    for _ in 0..20 {
        let (status, _, body) = get(addr, "/api/quota", &frank).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""name":"search","remaining":7"#), "{body}");
    }
    // Each request: its own limit, and the eight other routes this caller
    // has a key for (not /api/key); the first read of each script shape
    // may be loaded first.
    let calls = redis.evalsha_calls() - calls;
    assert!((20 * 9..=20 * 9 + 9).contains(&calls), "{calls}");
    let reads = redis.reads_processed() - reads;
    // Two round trips a request, plus a few of our own (`redis-cli` and
    // the script's first load), and on a busy machine a pipeline now and
    // then read in two parts (53 seen beside a parallel build): 180 when
    // each route was a call of its own.
    assert!(reads <= 20 * 4, "{reads} reads for 20 requests");
}

/// `/api/quota` was unlimited, one store call per route for each request;
/// `/metrics` can leave the public address.
#[tokio::test]
async fn quota_is_limited_and_metrics_can_live_elsewhere() {
    let addr = start_with(Config {
        metrics_addr: Some("127.0.0.1:9".parse().unwrap()),
        ..Default::default()
    })
    .await;
    let dana = [("x-user-id", "dana")];
    let seen = statuses(addr, "/api/quota", &dana, 61).await;
    assert_eq!(seen[..60], [200; 60]);
    assert_eq!(seen[60], 429);
    assert_eq!(
        get(addr, "/api/quota", &[("x-user-id", "eve")]).await.0,
        200
    );
    // Served on METRICS_ADDR instead: not on the public address.
    assert_eq!(get(addr, "/metrics", &[]).await.0, 404);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, crate::server::metrics_app::<()>()).await });
    assert_eq!(get(metrics, "/metrics", &[]).await.0, 200);
}

/// The metrics tell how many tenants share a capacity and which keys are
/// denied: on the public address they are the admin's, behind its token.
#[tokio::test]
async fn metrics_on_the_public_address_need_the_admin_token() {
    let addr = start_with(Config {
        admin_token: Some("s3cret".into()),
        ..Default::default()
    })
    .await;
    assert_eq!(get(addr, "/api/user", &[]).await.0, 200);
    assert_eq!(get(addr, "/metrics", &[]).await.0, 401);
    let bearer = [("authorization", "Bearer s3cret")];
    let (status, _, text) = get(addr, "/metrics", &bearer).await;
    assert_eq!(status, 200);
    assert!(text.contains("ratelimit_"), "{text}");
}

#[tokio::test]
async fn without_an_admin_token_the_admin_write_routes_do_not_exist() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let auth = [("authorization", "Bearer anything")];
    let (status, _, _) = send(
        addr,
        Method::PUT,
        "/admin/limits/api/search",
        &auth,
        "1/min",
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(get(addr, "/admin/limits", &[]).await.0, 200);
    assert_eq!(
        statuses(addr, "/api/search", &[("x-user-id", "x")], 11).await[10],
        429
    );
}

/// `POST /api/login`: only failures count — 5 per 15 minutes per client IP
/// and user — and the sixth attempt is refused even with the right password.
#[tokio::test]
async fn failed_logins_are_limited_per_ip_and_user() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let login = |user: &'static str, password: &'static str| async move {
        let body = format!("user={user}&password={password}");
        send(addr, Method::POST, "/api/login", &form, &body).await
    };
    // Successes never count.
    for _ in 0..8 {
        let (status, _, body) = login("alice", "demo").await;
        assert_eq!((status.as_u16(), body.as_str()), (200, "welcome, alice\n"));
    }
    for _ in 0..5 {
        assert_eq!(login("alice", "wrong").await.0, 401);
    }
    let (status, headers, _) = login("alice", "demo").await;
    assert_eq!(status, 429, "the right password, after five failures");
    // Within two windows: the sliding window counter weighs the previous one.
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry > 0 && retry <= 2 * 15 * 60, "{retry}");
    // Another user from the same address is untouched, even one whose name
    // is bytes that are not UTF-8 and differ from another's in one byte; a
    // form without a user has no key.
    assert_eq!(login("bob", "demo").await.0, 200);
    for _ in 0..5 {
        assert_eq!(login("%FF", "wrong").await.0, 401);
    }
    assert_eq!(login("%FF", "demo").await.0, 429);
    assert_eq!(login("%FE", "demo").await.0, 200);
    let huge = format!("user=mallory&password={}", "x".repeat(5_000));
    assert_eq!(
        send(addr, Method::POST, "/api/login", &form, &huge).await.0,
        413
    );
    let (status, _, _) = send(addr, Method::POST, "/api/login", &form, "password=demo").await;
    assert_eq!(status, 400);
}

/// `GET /api/tokens?n=<k>`: 1000 tokens a minute per user, each request
/// settled to the tokens it reports.
/// What a raw connection reads until the server closes it, if it does within
/// `limit`: `None` while it stays open.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let mut buf = [0u8; 1024];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&seen).into_owned()),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Slow clients held connections for ever: `axum::serve` had no timer. The
/// example serves with `tower_ratelimit::serve`'s header-read timeout and
/// reads bodies within one too.
#[tokio::test]
async fn slow_clients_are_cut_off() {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;
    let timeout = Duration::from_millis(300);
    let config = Config {
        request_timeout: timeout,
        ..Default::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = crate::server::app(&config, tower_ratelimit::backend::MemoryBackend::new());
    let limits = tower_ratelimit::serve::ConnectionLimits::builder()
        .header_timeout(timeout)
        .build()
        .unwrap();
    tokio::spawn(std::future::IntoFuture::into_future(
        tower_ratelimit::serve::serve(listener, app, limits),
    ));
    let wait = Duration::from_secs(3);

    // A partial request line, and an idle connection: closed.
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(b"GET /api/user HT").await.unwrap();
    assert!(
        read_until_closed(&mut partial, wait).await.is_some(),
        "a partial request line"
    );
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert!(
        read_until_closed(&mut idle, wait).await.is_some(),
        "an idle connection"
    );

    // Headers trickled a byte at a time: closed, though bytes keep coming.
    let mut trickle = TcpStream::connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let mut closed = false;
    for byte in b"GET /api/user HTTP/1.1\r\nhost: x\r\nx-user-id: slow\r\n"
        .iter()
        .cycle()
        .take(60)
    {
        if trickle.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        closed || read_until_closed(&mut trickle, wait).await.is_some(),
        "a trickle"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // A login form declared far larger than a form is: 413 at once; one
    // declared small that never comes: 408 when the timeout ends.
    let mut huge = TcpStream::connect(addr).await.unwrap();
    huge.write_all(b"POST /api/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 100000000\r\n\r\nuser=a").await.unwrap();
    let answer = read_until_closed(&mut huge, wait).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let mut late = TcpStream::connect(addr).await.unwrap();
    late.write_all(b"POST /api/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 100\r\n\r\nuser=a").await.unwrap();
    let started = std::time::Instant::now();
    let answer = read_until_closed(&mut late, wait).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());

    // A client that keeps to the timeout is served as before.
    assert_eq!(
        get(addr, "/api/user", &[("x-user-id", "quick")]).await.0,
        200
    );
}

/// HEAD was a second budget: axum answers it with the GET handler, and the
/// endpoint key held the method. Now it spends GET's, and made-up methods
/// share one budget instead of opening one each.
#[tokio::test]
async fn head_spends_the_get_budget_and_made_up_methods_share_one() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let alice = [("x-user-id", "alice")];
    assert_eq!(statuses(addr, "/api/search", &alice, 10).await, [200; 10]);
    for _ in 0..3 {
        let (status, _, _) = send(addr, Method::HEAD, "/api/search", &alice, "").await;
        assert_eq!(status, 429, "HEAD after ten GETs");
    }
    // Another user: HEADs then GETs, one budget of ten between them.
    let bob = [("x-user-id", "bob")];
    for _ in 0..6 {
        assert_eq!(
            send(addr, Method::HEAD, "/api/search", &bob, "").await.0,
            200
        );
    }
    assert_eq!(
        statuses(addr, "/api/search", &bob, 5).await,
        [200, 200, 200, 200, 429]
    );
    // Made-up methods: whatever the route answers, they share one budget,
    // so a client cannot open a new one per method.
    let carol = [("x-user-id", "carol")];
    let mut refused = 0;
    for i in 0..30 {
        let method = Method::from_bytes(format!("M{i}").as_bytes()).unwrap();
        if send(addr, method, "/api/search", &carol, "").await.0 == 429 {
            refused += 1;
        }
    }
    assert!(
        refused >= 20,
        "only {refused} of 30 made-up methods refused"
    );
}

/// The attack that walked through the login limit: the limiter keyed the
/// first `user=` of the form and the handler authenticated the last.
#[tokio::test]
async fn a_repeated_form_field_can_neither_walk_through_nor_log_in() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let post =
        |body: String| async move { send(addr, Method::POST, "/api/login", &form, &body).await };
    // Guesses at one victim, each under a different decoy: never a 401,
    // every one refused before a password is looked at.
    for i in 0..30 {
        let (status, _, _) = post(format!("user=decoy{i}&user=victim&password=g{i}")).await;
        assert_eq!(status, 400, "guess {i}");
    }
    // The victim's own failures lock the victim out...
    for _ in 0..5 {
        assert_eq!(post("user=victim&password=wrong".into()).await.0, 401);
    }
    assert_eq!(post("user=victim&password=demo".into()).await.0, 429);
    // ... and no decoy in front of the right password gets past it.
    assert_eq!(
        post("user=zz&user=victim&password=demo".into()).await.0,
        400
    );
    assert_eq!(
        post("user=victim&password=demo&password=demo".into())
            .await
            .0,
        400
    );
    // Other fields may come and go.
    let (status, _, body) = post("remember=1&user=carol&password=demo".into()).await;
    assert_eq!((status.as_u16(), body.as_str()), (200, "welcome, carol\n"));
}

#[tokio::test]
async fn token_budgets_are_settled_after_each_response() {
    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let dana = [("x-user-id", "dana")];
    let (status, headers, _) = get(addr, "/api/tokens?n=300", &dana).await;
    assert_eq!(
        (status.as_u16(), headers["x-tokens-used"].to_str().unwrap()),
        (200, "300")
    );
    assert_eq!(
        headers["x-ratelimit-remaining"], "700",
        "settled before the response left"
    );
    for _ in 0..2 {
        assert_eq!(get(addr, "/api/tokens?n=300", &dana).await.0, 200);
    }
    // 100 left: the next reservation (100) fits, and it is charged 300 → 0.
    let (status, headers, _) = get(addr, "/api/tokens?n=300", &dana).await;
    assert_eq!(
        (
            status.as_u16(),
            headers["x-ratelimit-remaining"].to_str().unwrap()
        ),
        (200, "0")
    );
    assert_eq!(get(addr, "/api/tokens?n=1", &dana).await.0, 429);
    assert_eq!(
        get(addr, "/api/tokens?n=1", &[("x-user-id", "erin")])
            .await
            .0,
        200
    );
    assert_eq!(
        get(addr, "/api/tokens?n=10001", &[("x-user-id", "erin")])
            .await
            .0,
        400
    );
}

/// `GET /api/slow`: at most 2 in flight per user, each until its body has
/// been sent — or dropped by a client that went away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_are_limited_in_flight_until_their_bodies_end() {
    use std::time::{Duration, Instant};

    let addr = start(Algorithm::SlidingWindow, &[]).await;
    let frank = [("x-user-id", "frank")];
    let slow = |ms: u64| {
        tokio::spawn(async move {
            get(
                addr,
                &format!("/api/slow?ms={ms}"),
                &[("x-user-id", "frank")],
            )
            .await
        })
    };
    let (a, b) = (slow(800), slow(800));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let (status, headers, body) = get(addr, "/api/slow?ms=0", &frank).await;
    assert_eq!(status, 429, "a third while two stream");
    // The refusal names the lease the file gives (15 s), not the default.
    assert!(body.contains(r#""limit":2,"window":"15s""#), "{body}");
    assert_eq!(headers["retry-after"], "15");
    assert!(started.elapsed() < Duration::from_millis(400), "at once");
    assert_eq!(
        headers["ratelimit-policy"],
        r#""slow";q=2;qu="concurrent-requests""#
    );
    assert_eq!(
        get(addr, "/api/slow?ms=0", &[("x-user-id", "grace")])
            .await
            .0,
        200
    );
    for stream in [a, b] {
        let (status, _, body) = stream.await.unwrap();
        assert_eq!((status.as_u16(), body.lines().count()), (200, 10));
    }
    // Both bodies sent: both permits back.
    assert_eq!(
        statuses(addr, "/api/slow?ms=0", &frank, 2).await,
        [200, 200]
    );

    // A client that reads the headers and goes away gives its permit back
    // once the server sees it gone (at the next chunk).
    for _ in 0..2 {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        let req = http::Request::get("/api/slow?ms=2000")
            .header("host", addr.to_string())
            .header("x-user-id", "frank")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        assert_eq!(sender.send_request(req).await.unwrap().status(), 200);
        conn.abort();
    }
    // Waited for, not slept on: the next chunk shows the server they left.
    let waiting = Instant::now();
    while get(addr, "/api/slow?ms=0", &frank).await.0 != 200 {
        assert!(
            waiting.elapsed() < Duration::from_secs(5),
            "the permits never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Support lifts a customer's limit after a mistake: `DELETE /admin/keys`
/// forgets what one client used on every route (by user, by address), and
/// no one else's.
#[tokio::test]
async fn an_admin_resets_one_clients_limits() {
    let addr = start_with(Config {
        admin_token: Some("s3cret".into()),
        ..Default::default()
    })
    .await;
    let reset = |query: &'static str, auth: &'static [(&'static str, &'static str)]| async move {
        send(
            addr,
            Method::DELETE,
            &format!("/admin/keys{query}"),
            auth,
            "",
        )
        .await
    };
    let (erin, frank) = ([("x-user-id", "erin")], [("x-user-id", "frank")]);
    assert_eq!(statuses(addr, "/api/search", &erin, 11).await[10], 429);
    assert_eq!(statuses(addr, "/api/search", &frank, 11).await[10], 429);
    assert_eq!(statuses(addr, "/api/ip", &[], 31).await[30], 429);

    assert_eq!(reset("?user=erin", &[]).await.0, 401);
    const AUTH: &[(&str, &str)] = &[("authorization", "Bearer s3cret")];
    assert_eq!(reset("", AUTH).await.0, 400);
    assert_eq!(reset("?ip=nowhere", AUTH).await.0, 400);
    let (status, _, body) = reset("?user=erin", AUTH).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""route":"/api/search""#), "{body}");
    assert!(!body.contains(r#""route":"/api/ip""#), "{body}");
    assert_eq!(statuses(addr, "/api/search", &erin, 10).await, [200; 10]);
    assert_eq!(
        get(addr, "/api/search", &frank).await.0,
        429,
        "frank keeps his"
    );
    assert_eq!(
        get(addr, "/api/ip", &[]).await.0,
        429,
        "the address keeps its own"
    );

    let (status, _, body) = reset("?ip=127.0.0.1", AUTH).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""route":"/api/ip""#), "{body}");
    assert_eq!(get(addr, "/api/ip", &[]).await.0, 200);
}
