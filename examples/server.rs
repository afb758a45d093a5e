//! The demo server: every kind of limit the crate offers, on one axum app.
//!
//! ```sh
//! cargo run --example server
//! ALGORITHM=gcra ADDR=127.0.0.1:8080 cargo run --example server
//! TRUSTED_PROXIES=10.0.0.0/8,192.168.0.0/16 cargo run --example server
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example server --features redis
//! REDIS_URL=redis://10.0.0.1:7000,redis://10.0.0.2:7000 cargo run --example server --features redis-cluster
//! ```
//!
//! With `REDIS_URL` every limit lives in Redis, so any number of copies of
//! this server share them. A URL list (comma-separated) or a
//! `redis+cluster://host:port` URL means Redis Cluster. While Redis is down
//! (a decision takes longer than `STORE_TIMEOUT_MS`, default 50), requests
//! are decided by `ON_STORE_FAILURE`:
//!
//! * `local` (default): each server limits on its own, to its share of each
//!   limit — the limit divided by `SERVERS` (default 1), rounded up;
//! * `open`: let requests through unlimited;
//! * `closed`: refuse them with 503.
//!
//! With `LEASED=1` each server leases shares of every limit from Redis (see
//! `RedisBackendBuilder::leased`, sized for `SERVERS`) and spends them
//! locally: one Redis call per share instead of one per request.
//!
//! On one Redis server, a circuit breaker stops asking it after 5 failures
//! in a row, so an outage costs the timeout a handful of times, not on every
//! request; one probe at a time finds Redis again. On a cluster there is no
//! breaker, so that one primary down only affects the keys in its slots.
//!
//! | route | limit |
//! |---|---|
//! | `GET /`, `GET /health` | none |
//! | `GET /api/user` | 100/min per user (`x-user-id`, else client IP) |
//! | `GET /api/ip` | 30/min per client IP |
//! | `GET /api/search` | 10/min per user per endpoint |
//! | `GET /api/key` | per API key (`x-api-key`): `free-demo` 100/h, `pro-demo` 1000/h, `enterprise-demo` 10000/h; others 401 |
//! | `GET /api/burst` | 10/s and 100/min and 1000/h per user, all at once |
//! | `GET /api/quota` | the caller's remaining budget on each route (consumes nothing) |
//! | `POST /api/login` | form `user=<name>&password=<pw>` (`demo` is right for everyone): 5 failures per 15 minutes per client IP and user; successes never count |
//! | `GET /api/slow?ms=<n>` | a body streamed over n ms (n ≤ 10000): at most 2 in flight per user (`x-user-id`, else client IP), each until its body is sent; a third gets 429 at once |
//! | `GET /api/tokens?n=<k>` | reports `x-tokens-used: k` (k ≤ 10000): 1000 tokens per minute per user, each request reserving 100 and settled to what it used |
//!
//! `/api/ip` also has a penalty box: a client denied 10 times within a
//! minute is banned for 5 minutes, doubling on repeat up to an hour.
//!
//! Operating it:
//!
//! | route or variable | what |
//! |---|---|
//! | `GET /metrics` | Prometheus text: requests by outcome, route and limit; near-limit admissions; decision latency |
//! | `GET /admin/top` | the most denied keys, redacted, most denied first (`?n=`, default 20) |
//! | `GET /admin/limits` | each route's limits now |
//! | `PUT /admin/limits/{route}` | with `ADMIN_TOKEN` set and `Authorization: Bearer <token>`: replace a route's limits live, the body in the quota syntax (`20/min`, `burst = 10/s; 100/min`); 401 without the token; 404 when `ADMIN_TOKEN` is unset |
//! | `SHADOW=1` | every limit in shadow mode: decided, counted, logged, never enforced |
//! | `DENY_CIDRS`, `ALLOW_CIDRS` | comma-separated networks: 403 for the first, unlimited for the second, on every limited route |
//!
//! ```sh
//! SHADOW=1 DENY_CIDRS=203.0.113.0/24 ADMIN_TOKEN=s3cret cargo run --example server
//! curl -X PUT -H 'authorization: Bearer s3cret' --data '20/min' localhost:3000/admin/limits/api/ip
//! curl localhost:3000/metrics | grep ratelimit_
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use ipnet::IpNet;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};
use tower_ratelimit::backend::OnBackendError;
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::Key;
use tower_ratelimit::key::RequestHead;
use tower_ratelimit::key::{key_fn, ApiKey, ClientIp, Endpoint, Header, KeyError, KeyExtractor};
use tower_ratelimit::layer::{policy_fn, AccessLists, PolicyResolver, Shadow, TopOffenders};
use tower_ratelimit::policy::PenaltyBox;
use tower_ratelimit::{Algorithm, Live, Policy, Quota, RateLimitLayer};

/// What the environment configures.
#[derive(Clone, Debug)]
pub struct Config {
    /// `ALGORITHM`: the algorithm of every limit (default sliding-window).
    pub algorithm: Algorithm,
    /// `TRUSTED_PROXIES`: comma-separated CIDRs (default none).
    pub trusted_proxies: Vec<IpNet>,
    /// `ON_STORE_FAILURE`: what decides while Redis is down (default local).
    pub on_store_failure: StoreFailure,
    /// `STORE_TIMEOUT_MS`: how long a Redis decision may take (default 50).
    pub store_timeout: std::time::Duration,
    /// `SERVERS`: how many servers share the limits; while Redis is down,
    /// each enforces its share (default 1).
    pub servers: u32,
    /// `SHADOW=1`: every limit in shadow mode.
    pub shadow: bool,
    /// `DENY_CIDRS`: clients refused with 403.
    pub deny_cidrs: Vec<IpNet>,
    /// `ALLOW_CIDRS`: clients never limited.
    pub allow_cidrs: Vec<IpNet>,
    /// `ADMIN_TOKEN`: when set, limits can be replaced over HTTP with it.
    pub admin_token: Option<String>,
    /// `LEASED=1`: on Redis, every limit is leased (shares for `SERVERS`).
    pub leased: bool,
}

/// What decides while the store is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFailure {
    /// Each server's memory, to its share of each limit.
    Local,
    /// Nothing: requests pass unlimited.
    Open,
    /// Nothing: requests are refused with 503.
    Closed,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::SlidingWindow,
            trusted_proxies: Vec::new(),
            on_store_failure: StoreFailure::Local,
            store_timeout: std::time::Duration::from_millis(50),
            servers: 1,
            shadow: false,
            deny_cidrs: Vec::new(),
            allow_cidrs: Vec::new(),
            admin_token: None,
            leased: false,
        }
    }
}

/// `name`'s comma-separated networks.
fn networks(name: &str) -> Result<Vec<IpNet>, String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|e| format!("{name}: {s:?}: {e}")))
        .collect()
}

/// `name`'s value parsed, or `default` when it is unset.
fn env_or<T>(name: &str, default: T, parse: impl Fn(&str) -> Option<T>) -> Result<T, String> {
    match std::env::var(name) {
        Ok(text) => parse(text.trim()).ok_or_else(|| format!("{name}: {text:?} is not valid")),
        Err(_) => Ok(default),
    }
}

impl Config {
    /// Read the environment, with a clear error for bad values.
    pub fn from_env() -> Result<Self, String> {
        let algorithm = match std::env::var("ALGORITHM") {
            Ok(name) => name.parse().map_err(|e| format!("ALGORITHM: {e}"))?,
            Err(_) => Algorithm::SlidingWindow,
        };
        let trusted_proxies = networks("TRUSTED_PROXIES")?;
        let on_store_failure = env_or("ON_STORE_FAILURE", StoreFailure::Local, |v| match v {
            "local" => Some(StoreFailure::Local),
            "open" => Some(StoreFailure::Open),
            "closed" => Some(StoreFailure::Closed),
            _ => None,
        })
        .map_err(|e| format!("{e} (expected local, open or closed)"))?;
        let store_timeout = env_or("STORE_TIMEOUT_MS", 50, |v| v.parse().ok())?;
        let servers = env_or("SERVERS", 1, |v| v.parse().ok().filter(|n| *n > 0))?;
        let flag = |v: &str| match v {
            "1" | "true" => Some(true),
            "0" | "false" | "" => Some(false),
            _ => None,
        };
        let shadow = env_or("SHADOW", false, flag)?;
        let leased = env_or("LEASED", false, flag)?;
        let admin_token = std::env::var("ADMIN_TOKEN").ok().filter(|t| !t.is_empty());
        Ok(Self {
            algorithm,
            trusted_proxies,
            on_store_failure,
            store_timeout: std::time::Duration::from_millis(store_timeout),
            servers,
            shadow,
            deny_cidrs: networks("DENY_CIDRS")?,
            allow_cidrs: networks("ALLOW_CIDRS")?,
            admin_token,
            leased,
        })
    }
}

/// The demo API keys and their hourly quotas.
const TIERS: [(&str, &str, u32); 3] = [
    ("free-demo", "free", 100),
    ("pro-demo", "pro", 1_000),
    ("enterprise-demo", "enterprise", 10_000),
];

/// The tier the auth layer found for an API key.
#[derive(Clone, Copy, Debug)]
struct Tier(usize);

type KeyOf = Arc<dyn Fn(&RequestHead<'_>) -> Result<Key, KeyError> + Send + Sync>;
type PolicyOf = Arc<dyn Fn(&RequestHead<'_>) -> Option<Policy> + Send + Sync>;

/// One limited route: how it keys requests and which policy it applies.
#[derive(Clone)]
struct Route {
    path: &'static str,
    about: &'static str,
    key: KeyOf,
    /// The same key computed from a request to another route (`/api/quota`).
    peek_key: KeyOf,
    policy: PolicyOf,
    /// The policy, replaceable at runtime (`PUT /admin/limits/...`); none
    /// for `/api/key`, whose policy is its caller's tier.
    live: Option<Live<Policy>>,
}

#[derive(Clone)]
struct AppState<B> {
    backend: B,
    routes: Arc<[Route]>,
    top: TopOffenders,
    admin_token: Option<Arc<str>>,
    algorithm: Algorithm,
}

fn limits(config: &Config, text: &str) -> Policy {
    Policy::parse_with(text, config.algorithm).expect("the demo's own policies are valid")
}

/// The penalty box of `/api/ip`: 10 denials within a minute ban for 5
/// minutes, doubling on repeat up to an hour.
fn ip_penalty() -> PenaltyBox {
    PenaltyBox::new(10, Duration::from_secs(60), Duration::from_secs(300))
        .and_then(|p| p.max_ban(Duration::from_secs(3600)))
        .expect("the demo's penalty box is valid")
}

/// The client IP as this server finds it (behind `TRUSTED_PROXIES`).
fn client_ip(config: &Config) -> ClientIp {
    ClientIp::new().trust_networks(config.trusted_proxies.clone())
}

fn routes(config: &Config) -> Vec<Route> {
    let ip = client_ip(config);
    let user = Header::new("x-user-id").or(ip.clone());
    // A key function used both by the route's layer and by /api/quota.
    fn same(key: impl KeyExtractor) -> (KeyOf, KeyOf) {
        let key: KeyOf = Arc::new(move |r| key.extract(r));
        (key.clone(), key)
    }
    let route = |path, about, (key, peek_key): (KeyOf, KeyOf), policy: Policy| {
        let live = Live::new(policy);
        let current = live.clone();
        Route {
            path,
            about,
            key,
            peek_key,
            policy: Arc::new(move |_| Some(Policy::clone(&current.current()))),
            live: Some(live),
        }
    };
    let tiers: Vec<Policy> = TIERS
        .iter()
        .map(|(_, name, per_hour)| {
            let quota = Quota::per_hour(*per_hour).expect("valid demo quota");
            Policy::builder()
                .limit(format!("key-{name}"), config.algorithm, quota)
                .build()
                .expect("valid demo policy")
        })
        .collect();
    let search_key = (user.clone(), Endpoint);
    let search_peek = user.clone();
    vec![
        route(
            "/api/user",
            "100/min per user (x-user-id, else client IP)",
            same(user.clone()),
            limits(config, "user = 100/min"),
        ),
        route(
            "/api/ip",
            "30/min per client IP; 10 denials in a minute: banned 5 min, doubling to 1 h",
            same(ip),
            limits(config, "ip = 30/min")
                .to_builder()
                .penalty(ip_penalty())
                .build()
                .unwrap(),
        ),
        route(
            "/api/search",
            "10/min per user per endpoint",
            (
                Arc::new(move |r| search_key.extract(r)),
                // What `Endpoint` derives on /api/search, from any route.
                Arc::new(move |r| {
                    let endpoint = Key::new("endpoint", "GET /api/search");
                    Ok(Key::composite(&[search_peek.extract(r)?, endpoint]))
                }),
            ),
            limits(config, "search = 10/min"),
        ),
        {
            let (key, peek_key) = same(ApiKey::header("x-api-key", "tower-ratelimit demo secret"));
            Route {
                path: "/api/key",
                about: "per API key (x-api-key): free-demo 100/h, pro-demo 1000/h, enterprise-demo 10000/h",
                key,
                peek_key,
                policy: Arc::new(move |r| {
                    let tier = r.extensions.get::<Tier>().copied().or_else(|| tier_of(r))?;
                    tiers.get(tier.0).cloned()
                }),
                live: None,
            }
        },
        route(
            "/api/burst",
            "10/s and 100/min and 1000/h per user",
            same(user),
            limits(
                config,
                "burst-second = 10/s; burst-minute = 100/min; burst-hour = 1000/h",
            ),
        ),
    ]
}

/// The tier of the request's demo API key, if it has one.
fn tier_of(req: &RequestHead<'_>) -> Option<Tier> {
    let key = req.headers.get("x-api-key")?.as_bytes();
    TIERS
        .iter()
        .position(|(k, _, _)| k.as_bytes() == key)
        .map(Tier)
}

/// The auth layer in front of `/api/key`: known demo keys get a tier,
/// anything else is a 401.
async fn authenticate(mut req: Request, next: Next) -> Response {
    match tier_of(&RequestHead::from(&req)) {
        Some(tier) => {
            req.extensions_mut().insert(tier);
            next.run(req).await
        }
        None => (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "unknown_api_key" })),
        )
            .into_response(),
    }
}

/// The demo app, every route's limits kept in `backend`.
pub fn app<B: Backend>(config: &Config, backend: B) -> Router {
    let routes: Arc<[Route]> = routes(config).into();
    let top = TopOffenders::new(100);
    let lists = (!config.deny_cidrs.is_empty() || !config.allow_cidrs.is_empty()).then(|| {
        let lists = AccessLists::new().client_ip(client_ip(config));
        let lists = config
            .deny_cidrs
            .iter()
            .fold(lists, |l, net| l.deny_network(*net));
        config
            .allow_cidrs
            .iter()
            .fold(lists, |l, net| l.allow_network(*net))
    });
    let metrics = prometheus();
    let mut app = Router::new()
        .route("/", get(index::<B>))
        .route("/health", get(|| async { "ok" }))
        .route("/api/quota", get(quota::<B>))
        .route(
            "/metrics",
            get(move || async move {
                match metrics {
                    Some(handle) => handle.render().into_response(),
                    None => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "another metrics recorder is installed\n",
                    )
                        .into_response(),
                }
            }),
        )
        .route("/admin/top", get(top_offenders::<B>))
        .route("/admin/limits", get(list_limits::<B>));
    if config.admin_token.is_some() {
        app = app.route("/admin/limits/{*route}", put(replace_limits::<B>));
    }
    let common = Common {
        backend: backend.clone(),
        on_error: match config.on_store_failure {
            StoreFailure::Closed => OnBackendError::Deny,
            StoreFailure::Local | StoreFailure::Open => OnBackendError::Allow,
        },
        shadow: config.shadow,
        top: top.clone(),
        lists,
    };
    for route in routes.iter() {
        let (key, policy) = (route.key.clone(), route.policy.clone());
        let limiter = common.layer(key_fn(move |r| key(r)), policy_fn(move |r| policy(r)));
        let path = route.path;
        let handler = get(move || async move { format!("ok: {path}\n") }).layer(limiter);
        let handler = if path == "/api/key" {
            handler.layer(middleware::from_fn(authenticate))
        } else {
            handler
        };
        app = app.route(path, handler);
    }
    let app = app
        .route("/api/login", login::route(config, &common))
        .route("/api/tokens", tokens::route(config, &common))
        .route("/api/slow", slow::route(config, &common));
    app.with_state(AppState {
        backend,
        routes,
        top,
        admin_token: config.admin_token.as_deref().map(Arc::from),
        algorithm: config.algorithm,
    })
}

/// What every limited route's layer shares.
struct Common<B> {
    backend: B,
    on_error: OnBackendError,
    shadow: bool,
    top: TopOffenders,
    lists: Option<AccessLists>,
}

impl<B: Backend> Common<B> {
    /// A layer keyed by `key` with `policy`, on the shared backend, with
    /// the failure rule, shadow mode, top offenders and lists.
    fn layer<K: KeyExtractor, P: PolicyResolver>(
        &self,
        key: K,
        policy: P,
    ) -> RateLimitLayer<K, P, B> {
        let layer = RateLimitLayer::new(policy)
            .key(key)
            .backend(self.backend.clone())
            .on_backend_error(self.on_error)
            .shadow(if self.shadow {
                Shadow::DryRun
            } else {
                Shadow::Off
            })
            .top_offenders(self.top.clone());
        match &self.lists {
            Some(lists) => layer.lists(lists.clone()),
            None => layer,
        }
    }
}

/// `POST /api/login`: 5 failed logins per 15 minutes per client IP and
/// user; successes never count.
mod login {
    use std::collections::HashMap;

    use axum::body::{to_bytes, Body};
    use axum::extract::{Form, Request};
    use axum::http::StatusCode;
    use axum::middleware::{self, Next};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{post, MethodRouter};
    use tower_ratelimit::backend::Backend;
    use tower_ratelimit::key::{key_fn, Key, KeyError, KeyExtractor};
    use tower_ratelimit::Policy;

    use super::{client_ip, Common, Config};

    /// The user a login form names, for the key.
    #[derive(Clone)]
    struct LoginUser(Vec<u8>);

    /// Login forms are small; a larger body is refused before anything else.
    const MAX_FORM: usize = 4 * 1024;

    pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
        config: &Config,
        common: &Common<B>,
    ) -> MethodRouter<S> {
        let ip = client_ip(config);
        let key = key_fn(move |r| {
            let user = r
                .extensions
                .get::<LoginUser>()
                .ok_or(KeyError::Missing("the form's user field"))?;
            Ok(Key::composite(&[
                ip.extract(r)?,
                Key::new("login-user", &user.0),
            ]))
        });
        let policy =
            Policy::parse_with("logins = 5/15min", config.algorithm).expect("a valid demo policy");
        let limiter = common
            .layer(key, policy)
            .count_if(|res| res.status == StatusCode::UNAUTHORIZED);
        post(login)
            .layer(limiter)
            .layer(middleware::from_fn(read_user))
    }

    /// Read the form's user (the key needs it) and hand the body on.
    async fn read_user(req: Request, next: Next) -> Response {
        let (mut parts, body) = req.into_parts();
        let Ok(bytes) = to_bytes(body, MAX_FORM).await else {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                "a login form is at most 4 KiB\n",
            )
                .into_response();
        };
        let user = form_field(&bytes, b"user").filter(|u| !u.is_empty());
        if let Some(user) = user {
            parts.extensions.insert(LoginUser(user));
        }
        next.run(Request::from_parts(parts, Body::from(bytes)))
            .await
    }

    /// Field `name` of an `a=1&b=2` form, percent-decoded (`+` is a
    /// space), as bytes: two different user names never read as one.
    fn form_field(body: &[u8], name: &[u8]) -> Option<Vec<u8>> {
        body.split(|b| *b == b'&').find_map(|pair| {
            let eq = pair.iter().position(|b| *b == b'=')?;
            (decode(&pair[..eq]) == name).then(|| decode(&pair[eq + 1..]))
        })
    }

    fn decode(text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match (text[i], hex) {
                (b'%', Some(byte)) => {
                    out.push(byte);
                    i += 3;
                }
                (b'+', _) => {
                    out.push(b' ');
                    i += 1;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        out
    }

    /// The password `demo` is right for every user.
    async fn login(Form(form): Form<HashMap<String, String>>) -> Response {
        let user = form.get("user").map_or("", String::as_str);
        if form.get("password").map(String::as_str) == Some("demo") {
            format!("welcome, {user}\n").into_response()
        } else {
            (StatusCode::UNAUTHORIZED, "wrong user name or password\n").into_response()
        }
    }
}

/// `GET /api/tokens?n=<k>`: 1000 tokens per minute per user; each request
/// reserves 100 and is charged the `x-tokens-used` it reports.
mod tokens {
    use std::collections::HashMap;

    use axum::extract::Query;
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, MethodRouter};
    use tower_ratelimit::backend::Backend;
    use tower_ratelimit::key::{Header, KeyExtractor};
    use tower_ratelimit::Policy;

    use super::{client_ip, Common, Config};

    pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
        config: &Config,
        common: &Common<B>,
    ) -> MethodRouter<S> {
        let user = Header::new("x-user-id").or(client_ip(config));
        let policy =
            Policy::parse_with("tokens = 1000/min", config.algorithm).expect("a valid demo policy");
        let limiter = common
            .layer(user, policy)
            .cost(100)
            .settle(|res| res.number("x-tokens-used"));
        get(tokens).layer(limiter)
    }

    async fn tokens(Query(query): Query<HashMap<String, String>>) -> Response {
        match query
            .get("n")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n <= 10_000)
        {
            Some(n) => (
                [("x-tokens-used", n.to_string())],
                format!("used {n} tokens\n"),
            )
                .into_response(),
            None => (
                StatusCode::BAD_REQUEST,
                "n must be a number of tokens from 0 to 10000\n",
            )
                .into_response(),
        }
    }
}

/// `GET /api/slow?ms=<n>`: a body streamed over n ms (n ≤ 10000); at most 2
/// in flight per user, each holding its permit until its body is sent.
mod slow {
    use std::collections::HashMap;
    use std::convert::Infallible;
    use std::time::Duration;

    use axum::body::{Body, Bytes};
    use axum::extract::Query;
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, MethodRouter};
    use tower_ratelimit::backend::Backend;
    use tower_ratelimit::key::{Header, KeyExtractor};
    use tower_ratelimit::{Limit, Policy};

    use super::{client_ip, Common, Config};

    /// Chunks of a slow body.
    const CHUNKS: u64 = 10;

    pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
        config: &Config,
        common: &Common<B>,
    ) -> MethodRouter<S> {
        let user = Header::new("x-user-id").or(client_ip(config));
        // Leased for 15 s, renewed every 7.5 s while a body streams.
        let in_flight = Limit::concurrent("slow", 2)
            .and_then(|l| l.lease(Duration::from_secs(15)))
            .and_then(|limit| Policy::builder().with(limit).build())
            .expect("a valid demo policy");
        get(slow).layer(common.layer(user, in_flight))
    }

    async fn slow(Query(query): Query<HashMap<String, String>>) -> Response {
        let Some(ms) = query
            .get("ms")
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n <= 10_000)
        else {
            return (StatusCode::BAD_REQUEST, "ms must be from 0 to 10000\n").into_response();
        };
        let pause = Duration::from_millis(ms / CHUNKS);
        let chunks = futures_util::stream::unfold(0, move |i| async move {
            if i == CHUNKS {
                return None;
            }
            tokio::time::sleep(pause).await;
            Some((
                Ok::<_, Infallible>(Bytes::from(format!("chunk {i}\n"))),
                i + 1,
            ))
        });
        Body::from_stream(chunks).into_response()
    }
}

/// The process's Prometheus recorder, installed by the first app built
/// (`None` if another recorder was installed first).
fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let latency = [1e-6, 1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 0.025, 0.1];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("ratelimit_decision_seconds".into()),
                    &latency,
                )
                .ok()?
                .install_recorder()
                .ok()?;
            // Histograms are drained periodically; the exporter leaves that to us.
            let upkeep = handle.clone();
            std::thread::spawn(move || loop {
                std::thread::sleep(Duration::from_secs(5));
                upkeep.run_upkeep();
            });
            Some(handle)
        })
        .as_ref()
}

/// The most denied keys, redacted (`?n=`: how many, default 20).
async fn top_offenders<B>(
    State(state): State<AppState<B>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Json<Value> {
    let n = query.get("n").and_then(|n| n.parse().ok()).unwrap_or(20);
    let top = state.top.top(usize::min(n, 100));
    Json(Value::Array(
        top.into_iter()
            .map(|o| json!({ "key": o.key, "denied": o.count, "error": o.error }))
            .collect(),
    ))
}

/// What `policy` enforces, as JSON.
fn describe(policy: &Policy) -> Value {
    let limits: Vec<Value> = policy
        .limits()
        .iter()
        .map(|l| json!({ "name": l.name(), "algorithm": l.algorithm().to_string(), "quota": l.quota().to_string() }))
        .collect();
    json!({
        "limits": limits,
        "shadow": policy.is_shadow(),
        "penalty_box": policy.penalty().map(|p| json!({
            "strikes": p.strikes(),
            "within_seconds": p.within().as_secs(),
            "ban_seconds": p.ban().as_secs(),
            "max_ban_seconds": p.longest_ban().as_secs(),
        })),
    })
}

/// Every route's limits now.
async fn list_limits<B>(State(state): State<AppState<B>>) -> Json<Value> {
    let routes = state.routes.iter().map(|route| match &route.live {
        Some(live) => {
            json!({ "route": route.path, "replaceable": true, "policy": describe(&live.current()) })
        }
        None => json!({ "route": route.path, "replaceable": false, "about": route.about }),
    });
    Json(Value::Array(routes.collect()))
}

/// `PUT /admin/limits/{route}`: replace a route's limits, live.
async fn replace_limits<B>(
    State(state): State<AppState<B>>,
    Path(route): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let error =
        |status: StatusCode, text: String| (status, Json(json!({ "error": text }))).into_response();
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let authorized = match (&state.admin_token, presented) {
        (Some(token), Some(presented)) => same_secret(token.as_bytes(), presented.as_bytes()),
        _ => false,
    };
    if !authorized {
        return error(
            StatusCode::UNAUTHORIZED,
            "a valid bearer token is required".into(),
        );
    }
    let path = format!("/{}", route.trim_start_matches('/'));
    let Some(route) = state.routes.iter().find(|r| r.path == path) else {
        return error(StatusCode::NOT_FOUND, format!("no limited route {path:?}"));
    };
    let Some(live) = &route.live else {
        return error(
            StatusCode::CONFLICT,
            format!("{path}'s limits follow the caller's tier"),
        );
    };
    let old = live.current();
    // One unnamed quota for a route of one limit keeps the limit's name
    // (and so its metrics label); unnamed limits are kept to this route.
    let text = match &old.limits() {
        [limit] if !body.contains('=') => format!("{} = {}", limit.name(), body.trim()),
        _ => body.trim().to_owned(),
    };
    let policy = match Policy::parse_with(&text, state.algorithm) {
        Ok(policy) => policy.scoped(&path),
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    // The route keeps its own settings (shadow mode, penalty box).
    let mut builder = policy.to_builder().shadow(old.is_shadow());
    if let Some(penalty) = old.penalty() {
        builder = builder.penalty(*penalty);
    }
    let policy = match builder.build() {
        Ok(policy) => policy,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let described = describe(&policy);
    live.replace(policy);
    Json(json!({ "route": path, "policy": described })).into_response()
}

/// Equal secrets, compared in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn index<B>(State(state): State<AppState<B>>) -> String {
    let mut text = String::from("tower-ratelimit demo\n\nGET /            this page (not limited)\nGET /health      (not limited)\nGET /api/quota   your remaining budget on each route (consumes nothing)\nGET /metrics     Prometheus metrics\nGET /admin/top   the most denied keys (redacted)\nGET /admin/limits  each route's limits\nPOST /api/login  form user=<name>&password=<pw> (demo is right): 5 failures per 15 min per IP and user\nGET /api/tokens?n=<k>  reports x-tokens-used: k; 1000 tokens/min per user, reserved 100, settled after\nGET /api/slow?ms=<n>  a body streamed over n ms; at most 2 in flight per user\n");
    for route in state.routes.iter() {
        text.push_str(&format!("GET {:<13}{}\n", route.path, route.about));
    }
    text
}

/// Each route's limits for the caller, peeked with cost 0.
async fn quota<B: Backend>(State(state): State<AppState<B>>, req: Request) -> Json<Value> {
    let mut routes = Vec::new();
    for route in state.routes.iter() {
        let (key, policy) = {
            let head = RequestHead::from(&req);
            ((route.peek_key)(&head), (route.policy)(&head))
        };
        let (Ok(key), Some(policy)) = (key, policy) else {
            routes.push(json!({ "route": route.path, "limits": null }));
            continue;
        };
        let decision = match state.backend.check(&key, &policy, 0).await {
            Ok(decision) => decision,
            Err(e) => {
                routes.push(json!({ "route": route.path, "error": e.to_string() }));
                continue;
            }
        };
        let limits: Vec<Value> = policy
            .limits()
            .iter()
            .zip(decision.outcomes())
            .map(|(limit, outcome)| {
                json!({
                    "name": limit.name(),
                    "limit": outcome.limit(),
                    "remaining": outcome.remaining(),
                    "reset_seconds": outcome.reset_after().as_secs_f64().ceil() as u64,
                })
            })
            .collect();
        routes.push(json!({ "route": route.path, "limits": limits }));
    }
    Json(Value::Array(routes))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    let addr: SocketAddr = std::env::var("ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
        .parse()
        .map_err(|e| format!("ADDR: {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let (app, store) = match std::env::var("REDIS_URL") {
        Ok(url) => (redis_app(&config, &url).await?, "Redis"),
        Err(_) => (app(&config, MemoryBackend::new()), "in memory"),
    };
    println!(
        "tower-ratelimit demo on http://{addr} ({} algorithm, {store})",
        config.algorithm
    );
    for route in routes(&config) {
        println!("  GET {:<13} {}", route.path, route.about);
    }
    println!("\ntry: for i in $(seq 12); do curl -s -o /dev/null -w '%{{http_code}} ' -H 'x-user-id: alice' http://{addr}/api/search; done; echo");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// The app on Redis: a cluster when `url` lists several nodes or says
/// `redis+cluster://`, else one server.
#[cfg(feature = "redis")]
pub async fn redis_app(config: &Config, url: &str) -> Result<Router, Box<dyn std::error::Error>> {
    use tower_ratelimit::backend::RedisBackend;
    let nodes: Vec<String> = url
        .split(',')
        .map(|u| u.trim().replacen("redis+cluster://", "redis://", 1))
        .collect();
    if nodes.len() > 1 || url.starts_with("redis+cluster://") {
        #[cfg(feature = "redis-cluster")]
        {
            // No breaker: one covers a whole backend, and a cluster with one
            // primary down should fall back only for that primary's keys.
            let mut cluster = RedisBackend::cluster_builder(nodes).timeout(config.store_timeout);
            if config.leased {
                cluster = cluster.leased(config.servers);
            }
            let cluster = cluster.connect().await?;
            return Ok(on_store_failure(config, cluster));
        }
        #[cfg(not(feature = "redis-cluster"))]
        return Err("REDIS_URL names a cluster: run with --features redis-cluster".into());
    }
    // Lazily connected: the server starts even while Redis is down, and
    // decides by ON_STORE_FAILURE until it is up.
    let mut redis = RedisBackend::builder(&nodes[0]).timeout(config.store_timeout);
    if config.leased {
        redis = redis.leased(config.servers);
    }
    let redis = redis.connect_lazy()?;
    Ok(on_store_failure(config, redis.with_breaker()))
}

/// The app on `store`, decided by `ON_STORE_FAILURE` while it fails.
#[cfg(feature = "redis")]
fn on_store_failure<B: Backend>(config: &Config, store: B) -> Router {
    match config.on_store_failure {
        StoreFailure::Local => {
            let local = MemoryBackend::builder().servers(config.servers).build();
            app(config, store.or_fallback(local))
        }
        StoreFailure::Open | StoreFailure::Closed => app(config, store),
    }
}

#[cfg(not(feature = "redis"))]
pub async fn redis_app(_: &Config, _: &str) -> Result<Router, Box<dyn std::error::Error>> {
    Err("REDIS_URL is set but this build has no Redis: run with --features redis".into())
}
