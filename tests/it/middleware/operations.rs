//! Running it in production: shadow mode, access lists, the penalty box,
//! limits and lists changed live, per-key policies, top offenders.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::routing::get;
use axum::Router;
use tower::ServiceExt;
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::clock::ManualClock;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::decision::Origin;
use tower_ratelimit::key::{Header, Key, PeerAddr};
use tower_ratelimit::layer::{
    AccessLists, KeyPolicies, NoPolicy, RoutePolicies, Shadow, Shaping, TopOffenders,
};
use tower_ratelimit::policy::PenaltyBox;
use tower_ratelimit::{Live, Policy, RateLimitLayer};

/// A memory backend that counts how often it is asked.
#[derive(Clone, Default)]
struct Counted {
    inner: MemoryBackend,
    calls: Arc<AtomicUsize>,
}

impl Counted {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Backend for Counted {
    type Future = <MemoryBackend as Backend>::Future;
    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.check(key, policy, cost)
    }
    fn answer_now(
        future: &mut Self::Future,
    ) -> Option<Result<tower_ratelimit::Decision, tower_ratelimit::backend::BackendError>> {
        <MemoryBackend as Backend>::answer_now(future)
    }
}

/// The handler says what the limiter told it.
async fn told(req: Request) -> String {
    format!("{:?}", req.extensions().get::<Origin>())
}

/// One route, `/`, behind `layer`.
macro_rules! app {
    ($layer:expr) => {
        Router::new().route("/", get(told).layer($layer))
    };
}

/// What a client sees.
#[derive(Debug)]
struct Seen {
    status: u16,
    remaining: Option<String>,
    retry_after: Option<u64>,
    /// The handler's text; empty when the limiter answered.
    told: String,
}

async fn send(app: &Router, user: &str, ip: &str) -> Seen {
    let mut req = Request::get("/")
        .header("x-user-id", user)
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr(format!("{ip}:4000").parse().unwrap()));
    let res = app.clone().oneshot(req).await.unwrap();
    let header = |name: &str| {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (remaining, retry_after) = (header("x-ratelimit-remaining"), header("retry-after"));
    let status = res.status().as_u16();
    let body = axum::body::to_bytes(res.into_body(), 1 << 16)
        .await
        .unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    Seen {
        status,
        remaining,
        retry_after: retry_after.map(|s| s.parse().unwrap()),
        told: if text.starts_with("Some(") || text == "None" {
            text
        } else {
            String::new()
        },
    }
}

fn statuses(seen: &[Seen]) -> Vec<u16> {
    seen.iter().map(|s| s.status).collect()
}

async fn send_n(app: &Router, n: usize, user: &str, ip: &str) -> Vec<Seen> {
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.push(send(app, user, ip).await);
    }
    seen
}

#[tokio::test]
async fn shadow_mode_reports_but_never_refuses_or_delays() {
    let policy: Policy = "2/min".parse().unwrap();
    let backend = MemoryBackend::new();
    let layer = RateLimitLayer::new(policy.clone())
        .key(Header::new("x-user-id"))
        .backend(backend.clone())
        // Shaping would delay; shadow mode never does.
        .shape(Shaping::wait_up_to(Duration::from_secs(60)).max_waiting(10))
        .shadow(Shadow::DryRun);
    let app = app!(layer.clone());
    let started = std::time::Instant::now();
    let seen = send_n(&app, 5, "alice", "192.0.2.1").await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(statuses(&seen), [200; 5]);
    assert_eq!(seen[1].remaining.as_deref(), Some("0"));
    // Decided by the store: no mark.
    assert_eq!(seen[1].told, "None");
    // Over the limit: the handler knows; the client sees no quota headers.
    assert_eq!(seen[2].told, "Some(Shadow)");
    assert_eq!(
        (seen[2].remaining.as_ref(), seen[2].retry_after),
        (None, None)
    );

    // With shadow headers, what an enforced limit would have said.
    let app = app!(layer.clone().shadow(Shadow::DryRunWithHeaders));
    let seen = send(&app, "alice", "192.0.2.1").await;
    assert_eq!((seen.status, seen.remaining.as_deref()), (200, Some("0")));

    // Per policy: the same; and enforcing it later keeps its state (the
    // shadow run admitted 2, as the enforced policy would have).
    let shadow_policy = RateLimitLayer::new(policy.to_builder().shadow(true).build().unwrap())
        .key(Header::new("x-user-id"))
        .backend(backend.clone());
    assert_eq!(
        send(&app!(shadow_policy), "alice", "192.0.2.1")
            .await
            .status,
        200
    );
    let enforced = RateLimitLayer::new(policy.to_builder().shadow(false).build().unwrap())
        .key(Header::new("x-user-id"))
        .backend(backend);
    assert_eq!(
        send(&app!(enforced), "alice", "192.0.2.1").await.status,
        429
    );
}

#[tokio::test]
async fn a_request_is_marked_with_its_origin_unless_the_store_decided_it() {
    use tower_ratelimit::layer::OnKeyError;
    let limited = RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .on_key_error(OnKeyError::Skip);
    let app = app!(limited);
    // The store's admission and the store's refusal carry no mark, which
    // `Origin::of` reads as the store's.
    assert_eq!(send(&app, "alice", "192.0.2.1").await.told, "None");
    let req = || {
        Request::get("/")
            .header("x-user-id", "alice")
            .body(Body::empty())
            .unwrap()
    };
    let refused = app.clone().oneshot(req()).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.extensions().get::<Origin>(), None);
    assert_eq!(Origin::of(refused.extensions()), Origin::Primary);

    // Let through unlimited, the request says why: no key ...
    let keyless = Request::get("/").body(Body::empty()).unwrap();
    let res = app.clone().oneshot(keyless).await.unwrap();
    let body = axum::body::to_bytes(res.into_body(), 1 << 10)
        .await
        .unwrap();
    assert_eq!(body, "Some(NoKey)");
    // ... or no policy.
    let unmatched =
        RateLimitLayer::new(RoutePolicies::new().route("/other", "1/min".parse().unwrap()))
            .key(Header::new("x-user-id"))
            .on_no_policy(NoPolicy::Unlimited);
    assert_eq!(
        send(&app!(unmatched), "alice", "192.0.2.1").await.told,
        "Some(NoPolicy)"
    );
}

#[tokio::test]
async fn lists_refuse_and_exempt_without_touching_the_store_and_change_live() {
    let backend = Counted::default();
    let lists = Live::new(
        AccessLists::new()
            .deny_network("203.0.113.0/24".parse().unwrap())
            .allow_network("10.0.0.0/8".parse().unwrap())
            .deny_key(Key::new("header:x-user-id", "mallory"))
            .allow_key(Key::new("header:x-user-id", "monitor")),
    );
    let layer = RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .backend(backend.clone())
        .lists(lists.clone());
    let app = app!(layer);

    let denied = send_n(&app, 3, "alice", "203.0.113.50").await;
    assert_eq!(statuses(&denied), [403; 3]);
    assert_eq!(
        statuses(&send_n(&app, 2, "mallory", "192.0.2.1").await),
        [403; 2]
    );
    let allowed = send_n(&app, 5, "bob", "10.1.2.3").await;
    assert_eq!(statuses(&allowed), [200; 5]);
    assert_eq!(allowed[0].told, "Some(AllowListed)");
    assert_eq!(allowed[0].remaining, None, "unlimited: no quota headers");
    assert_eq!(
        statuses(&send_n(&app, 5, "monitor", "192.0.2.1").await),
        [200; 5]
    );
    // Deny wins: an allowed key from a denied network is refused.
    assert_eq!(send(&app, "monitor", "203.0.113.7").await.status, 403);
    assert_eq!(backend.calls(), 0, "listed clients never reach the store");

    // Replaced at runtime: the network is no longer denied, only limited.
    lists.replace(AccessLists::new());
    let limited = send_n(&app, 2, "alice", "203.0.113.50").await;
    assert_eq!(statuses(&limited), [200, 429]);
    assert_eq!(backend.calls(), 2);
}

/// A layer on `backend` whose policy bans: 1/min; 3 denials within a
/// minute ban for 5 minutes, doubling up to 20.
fn banning<B: Backend>(backend: B) -> RateLimitLayer<Header, Policy, B> {
    let penalty = PenaltyBox::new(3, Duration::from_secs(60), Duration::from_secs(300))
        .unwrap()
        .max_ban(Duration::from_secs(1200))
        .unwrap();
    RateLimitLayer::new(
        "1/min"
            .parse::<Policy>()
            .unwrap()
            .to_builder()
            .penalty(penalty)
            .build()
            .unwrap(),
    )
    .key(Header::new("x-user-id"))
    .backend(backend)
}

#[tokio::test]
async fn a_ban_answers_with_its_remaining_time_and_doubles_on_repeat() {
    let clock = ManualClock::new(Micros::from_secs(1_000));
    let app = app!(banning(
        MemoryBackend::builder().clock(clock.clone()).build()
    ));
    let seen = send_n(&app, 4, "eve", "192.0.2.1").await;
    assert_eq!(statuses(&seen), [200, 429, 429, 429]);
    // The third denial bans: Retry-After is the ban, not the limit's wait.
    assert!(seen[1].retry_after.unwrap() <= 120);
    assert_eq!(seen[3].retry_after, Some(300));
    clock.advance(Duration::from_secs(100));
    let banned = send(&app, "eve", "192.0.2.1").await;
    assert_eq!((banned.status, banned.retry_after), (429, Some(200)));
    assert_eq!(banned.remaining.as_deref(), Some("0"));
    // Others are not banned.
    assert_eq!(send(&app, "frank", "192.0.2.1").await.status, 200);

    // The ban ends; offending again within 20 minutes doubles it.
    clock.advance(Duration::from_secs(200));
    let again = send_n(&app, 4, "eve", "192.0.2.1").await;
    assert_eq!(statuses(&again), [200, 429, 429, 429]);
    assert_eq!(again[3].retry_after, Some(600));
    clock.advance(Duration::from_secs(600));
    let third = send_n(&app, 4, "eve", "192.0.2.1").await;
    assert_eq!(third[3].retry_after, Some(1200));
    clock.advance(Duration::from_secs(1200));
    assert_eq!(
        send_n(&app, 4, "eve", "192.0.2.1").await[3].retry_after,
        Some(1200),
        "capped at the maximum"
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn bans_hold_across_servers_on_redis_and_cost_no_round_trip() {
    use crate::support::RedisServer;

    let server = RedisServer::start();
    let a = server.backend().await;
    let b = server.backend().await;
    let (app_a, app_b) = (app!(banning(a)), app!(banning(b)));
    let seen = send_n(&app_a, 4, "eve", "192.0.2.1").await;
    assert_eq!(statuses(&seen), [200, 429, 429, 429]);
    assert_eq!(seen[3].retry_after, Some(300));

    // Server B never saw eve, yet refuses her for the ban's remaining time.
    let on_b = send(&app_b, "eve", "192.0.2.1").await;
    assert_eq!(on_b.status, 429);
    assert!((299..=300).contains(&on_b.retry_after.unwrap()));
    assert_eq!(send(&app_b, "frank", "192.0.2.1").await.status, 200);

    // While banned, a server answers from what it learned: no round trip.
    let calls = |s: &RedisServer| {
        let stats = s.cli(&["INFO", "commandstats"]);
        stats
            .lines()
            .find(|l| l.starts_with("cmdstat_evalsha:"))
            .and_then(|l| l.split(['=', ',']).nth(1))
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    let before = calls(&server);
    assert_eq!(
        statuses(&send_n(&app_b, 20, "eve", "192.0.2.1").await),
        [429; 20]
    );
    assert_eq!(calls(&server), before);
}

#[tokio::test]
async fn limits_change_live_keeping_state_only_where_a_limit_is_unchanged() {
    let routes = |text: &str| RoutePolicies::new().route("/", text.parse::<Policy>().unwrap());
    let live = Live::new(routes("2/min; daily = 4/day"));
    let layer = RateLimitLayer::new(live.clone())
        .key(Header::new("x-user-id"))
        .on_no_policy(NoPolicy::Unlimited);
    let app = app!(layer);
    assert_eq!(
        statuses(&send_n(&app, 3, "alice", "192.0.2.1").await),
        [200, 200, 429]
    );

    // The same limits again: state kept, still limited.
    live.replace(routes("2/min; daily = 4/day"));
    assert_eq!(send(&app, "alice", "192.0.2.1").await.status, 429);

    // A changed quota is a new limit with a fresh budget (3 more per
    // minute); the unchanged named limit kept its count: 2 of 4 left.
    live.replace(routes("3/min; daily = 4/day"));
    let seen = send_n(&app, 3, "alice", "192.0.2.1").await;
    assert_eq!(statuses(&seen), [200, 200, 429]);
    assert_eq!(seen[0].remaining.as_deref(), Some("1"), "the day binds");

    // Removing the route's policy lifts the limit at once.
    live.replace(RoutePolicies::new());
    assert_eq!(
        statuses(&send_n(&app, 3, "alice", "192.0.2.1").await),
        [200; 3]
    );
}

#[tokio::test]
async fn a_key_can_have_its_own_policy_changed_live() {
    let tenants = Live::new(KeyPolicies::new());
    let layer = RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .key_policies(tenants.clone());
    let app = app!(layer);
    assert_eq!(
        statuses(&send_n(&app, 2, "acme", "192.0.2.1").await),
        [200, 429]
    );
    tenants.update(|t| {
        t.clone().set(
            Key::new("header:x-user-id", "acme"),
            "5/min".parse().unwrap(),
        )
    });
    assert_eq!(
        statuses(&send_n(&app, 6, "acme", "192.0.2.1").await),
        [200, 200, 200, 200, 200, 429]
    );
    assert_eq!(
        statuses(&send_n(&app, 2, "other", "192.0.2.1").await),
        [200, 429]
    );
}

#[tokio::test]
async fn top_offenders_rank_denied_keys_across_layers_redacted() {
    let top = TopOffenders::new(16);
    let layer = RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .top_offenders(top.clone());
    let (one, two) = (
        app!(layer.clone()),
        app!(layer.policy("2/min".parse::<Policy>().unwrap())),
    );
    send_n(&one, 6, "mallory@example.com", "192.0.2.1").await; // 5 denied
    send_n(&two, 4, "mallory@example.com", "192.0.2.1").await; // 2 denied
    send_n(&one, 3, "trudy", "192.0.2.1").await; // 2 denied
    send_n(&one, 1, "alice", "192.0.2.1").await; // none
    let ranked: Vec<(String, u64)> = top.top(10).into_iter().map(|o| (o.key, o.count)).collect();
    assert_eq!(ranked.len(), 2);
    assert!(
        ranked[0].0.starts_with("header:x-user-id:mall…#"),
        "{ranked:?}"
    );
    assert_eq!(ranked[0].1, 7);
    assert!(ranked[1].0.starts_with("header:x-user-id:trud…#"));
    assert_eq!(ranked[1].1, 2);
    assert!(!ranked.iter().any(|(k, _)| k.contains("example.com")));
}
