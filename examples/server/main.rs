//! The demo server: every kind of limit the crate offers, on one axum app.
//!
//! ```sh
//! cargo run --example server
//! ALGORITHM=gcra ADDR=127.0.0.1:8080 cargo run --example server
//! TRUSTED_PROXIES=10.0.0.0/8,192.168.0.0/16 cargo run --example server
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example server --features redis
//! REDIS_URL=redis://10.0.0.1:7000,redis://10.0.0.2:7000 cargo run --example server --features redis-cluster
//! REDIS_URL=rediss://limiter:secret@redis.internal:6380 REDIS_CA_FILE=ca.pem cargo run --example server --features redis-tls
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
//! With `REDIS_KEY_FORMAT=packed` (or `packed:<shards>`; every server the
//! same) many clients' states share one Redis hash: under a third of the
//! memory a key of their own takes (`KeyFormat::Packed`).
//!
//! With `REDIS_BATCH=off` each decision is a Redis call of its own; by
//! default (`on`) decisions in flight at the same moment share one call
//! (`RedisBackendBuilder::max_batch`), which costs Redis far less CPU.
//!
//! Why Redis is not deciding is printed when it starts, changes and ends
//! (`redis: failing (authentication): …`, `redis: deciding`).
//!
//! `rediss://` URLs (feature `redis-tls`) verify the server against the
//! system's roots, or the PEM file `REDIS_CA_FILE` names;
//! `REDIS_CLIENT_CERT` and `REDIS_CLIENT_KEY` name a client certificate for
//! servers that require one.
//!
//! On one Redis server, a circuit breaker stops asking it after 5 failures
//! in a row, so an outage costs the timeout a handful of times, not on every
//! request; one probe at a time finds Redis again. On a cluster the backend
//! keeps a circuit per node, so one primary down only affects the keys in
//! its slots, and those without waiting once its circuit is open.
//!
//! | route | limit |
//! |---|---|
//! | `GET /`, `GET /health` | none |
//! | `GET /api/user` | 100/min per user (`x-user-id`, else client IP) |
//! | `GET /api/ip` | 30/min per client IP |
//! | `GET /api/search` | 10/min per user per endpoint |
//! | `GET /api/key` | per API key (`x-api-key`): `free-demo` 100/h, `pro-demo` 1000/h, `enterprise-demo` 10000/h; others 401, at most 10 failed checks a minute per client IP |
//! | `GET /api/burst` | 10/s and 100/min and 1000/h per user, all at once |
//! | `GET /api/quota` | the caller's remaining budget on each route, read in one store call (60/min per user) |
//! | `POST /api/login` | form `user=<name>&password=<pw>` (`demo` is right for everyone): 5 failures per 15 minutes per client IP and user, and 50 per client IP whatever the user (so that one address cannot make thousands of lockouts to push out the one it wants lifted at `MAX_KEYS`); successes never count |
//! | `GET /api/slow?ms=<n>` | a body streamed over n ms (n ≤ 10000): at most 2 in flight per user (`x-user-id`, else client IP), each until its body is sent; a third gets 429 at once |
//! | `GET /api/shared` | one capacity of `SHARED_CAPACITY` a second (default 200) for every tenant together, by weight: the tenant is `x-user-id` (else client IP), its weight its API key's tier, resolved as for `/api/key` (`x-api-key`: the free tier 1, pro 4, enterprise 10, no key 1; a key no tier knows is 401, counted with the failed key checks); `x-priority: sheddable` is refused first, `critical` last (only for the enterprise tier); `SHARED_PER_IP` requests a second per client address (default 100) and `SHARED_TENANTS_PER_IP` tenants per client address each 2 s (default 4: a tenant counts when it first asks from the address and again each 2 s it keeps asking; one more is 429) checked first |
//! | `GET /api/tokens?n=<k>` | reports `x-tokens-used: k` (k ≤ 10000): 1000 tokens per minute per user, each request reserving 100 and settled to what it used |
//!
//! `/api/ip` also has a penalty box: a client denied 10 times within a
//! minute is banned for 5 minutes, doubling on repeat up to an hour.
//!
//! Operating it:
//!
//! | route or variable | what |
//! |---|---|
//! | `GET /metrics` | Prometheus text: requests by outcome, route and limit; near-limit admissions; decision latency (with `ADMIN_TOKEN` set, the token is required, as on `/admin`; on `METRICS_ADDR` instead, when set, for a scraper on an internal network) |
//! | `GET /admin/top` | the most denied keys, redacted, most denied first (`?n=`, default 20; with `ADMIN_TOKEN` set, the token is required) |
//! | `GET /admin/limits` | each route's limits now (likewise) |
//! | `DELETE /admin/keys?user=<id>&ip=<address>` | with `ADMIN_TOKEN`: forget what that client used on every limited route, and its bans |
//! | `PUT /admin/limits/{route}` | with `ADMIN_TOKEN` set and `Authorization: Bearer <token>`: replace a limited route's limits live, the body in the quota syntax (`20/min`, `burst = 10/s; 100/min`), or for `/api/slow` a number of requests in flight; a limit name another route's budget has is 409 unless `?share=true`; 401 without the token; 404 when `ADMIN_TOKEN` is unset |
//! | `SHADOW=1` | every limit in shadow mode: decided, counted, logged, never enforced |
//! | `REDACTION_SECRET` | the secret redacted keys (`/admin/top`, logs) are hashed under: the same on every server so that their redacted keys match (default: random per process) |
//! | `MAX_KEYS` | the memory backend's cap on states (bans and exhausted budgets are evicted last) |
//! | `IDS_PER_IP` | requests a second one client address may send to the routes keyed by an id it chooses (`x-user-id`, a login's user; default 200, in each server's memory): how fast it can make new keys in Redis |
//! | `MAX_CONNECTIONS` | connections open at once; one more takes the place of the connection idle longest, or is closed at once when all are busy (default: 3/4 of `ulimit -n`, at most 10,000) |
//! | `MAX_CONNECTIONS_PER_CLIENT` | connections open at once from one client address (IPv6: one /64; `TRUSTED_PROXIES` excepted): one more takes the place of that address's connection idle longest, or is closed when none is idle (default: 1/8 of `MAX_CONNECTIONS`, at most 64) |
//! | `MAX_CONNECTIONS_PER_NETWORK` | connections open at once from one IPv4 /24 or IPv6 /48, for clients that rotate addresses within one (default: no cap; behind a carrier's NAT many clients share one) |
//! | `REQUEST_TIMEOUT_MS` | how long a request's headers may take, from the connection's opening or the response before (an idle kept-alive connection is closed then), and a login form's body (default 10,000) |
//! | `DENY_CIDRS`, `ALLOW_CIDRS` | comma-separated networks: 403 for the first, unlimited for the second, on every limited route |
//!
//! ```sh
//! SHADOW=1 DENY_CIDRS=203.0.113.0/24 ADMIN_TOKEN=s3cret cargo run --example server
//! curl -X PUT -H 'authorization: Bearer s3cret' --data '20/min' localhost:3000/admin/limits/api/ip
//! curl localhost:3000/metrics | grep ratelimit_
//! ```

// One file per concern; `#[path]` so that the same files serve the example
// binary and the tests that include it as a module.
#[path = "admin.rs"]
mod admin;
#[path = "changes.rs"]
mod changes;
#[path = "config.rs"]
mod config;
#[path = "login.rs"]
mod login;
#[path = "report.rs"]
mod report;
#[path = "routes.rs"]
mod routes;
#[path = "shared.rs"]
mod shared;
#[path = "slow.rs"]
mod slow;
#[path = "tenants.rs"]
mod tenants;
#[path = "tokens.rs"]
mod tokens;

pub use admin::metrics_app;
use admin::*;
pub use changes::{ChangeError, Changes};
#[cfg(feature = "redis")]
use config::RedisKeyFormat;
pub use config::{Config, StoreFailure};
use routes::*;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::Method;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, put};
use axum::{Json, Router};
use ipnet::IpNet;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};
use tower_ratelimit::backend::OnBackendError;
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::config::{ConfigError, Limits, LimitsFile, Reload};
use tower_ratelimit::key::Key;
use tower_ratelimit::key::RequestHead;
use tower_ratelimit::key::{ApiKey, ClientIp, KeyError, KeyExtractor};
use tower_ratelimit::layer::{AccessLists, AxumBody, PolicyResolver, Shadow, TopOffenders};
use tower_ratelimit::serve::{serve, ConnectionLimits, ConnectionLimitsError};
use tower_ratelimit::{Algorithm, Policy, RateLimitLayer};

/// The demo app, every route's limits kept in `backend`, from the limits
/// file the configuration names (or the built-in one).
///
/// # Panics
///
/// If `LIMITS_FILE` is invalid: `main` checks it first.
pub fn app<B: Backend>(config: &Config, backend: B) -> Router {
    let file = limits_file(config).expect("the limits file is checked before the app is built");
    let capacity = shared::capacity(config);
    app_with(config, backend, Limits::new(file), Changes::Local, capacity)
}

/// The demo app on `limits`, changed through `changes`, `/api/shared` on
/// `capacity`.
pub fn app_with<B: Backend>(
    config: &Config,
    backend: B,
    limits: Limits,
    changes: Changes,
    capacity: tower_ratelimit::layer::fair_share::FairShare,
) -> Router {
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
    let mut admin = Router::new()
        .route("/admin/top", get(top_offenders::<B>))
        .route("/admin/top/networks", get(top_networks::<B>))
        .route("/admin/limits", get(list_limits::<B>));
    if config.metrics_addr.is_none() {
        // What the metrics tell (tenants active, keys denied) is the
        // operator's: behind the admin token like the rest of /admin.
        admin = admin.merge(metrics_app());
    }
    let report_service = Arc::new(report::Service::default());
    if let Some(token) = &config.admin_token {
        let service = report_service.clone();
        admin = admin
            .route(
                "/admin/backend",
                put(move |body: String| report::set(service.clone(), body)),
            )
            .route("/admin/limits/{*route}", put(replace_limits::<B>))
            .route("/admin/keys", delete(reset_keys::<B>))
            .route_layer(middleware::from_fn_with_state(
                Arc::<str>::from(token.as_str()),
                require_admin,
            ));
    }
    let mut app = Router::new()
        .route("/", get(index::<B>))
        .route("/health", get(|| async { "ok" }))
        .merge(admin);
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
    // Each route's policy is the file's for the route the request matched
    // (axum's template): one resolver serves them all, and follows every
    // new version of the file.
    let policies = limits.policies();
    // One count of failed API-key checks per client IP, for every route
    // that evaluates a key: /api/key and /api/quota.
    let key_checks = failed_key_checks(config);
    // In front of every route keyed by an id the client chooses: how fast
    // one address can make new keys (and so fill Redis) at most.
    let ids = ids_per_ip(config);
    for path in SIMPLE {
        let handler = get(move || async move { format!("ok: {path}\n") });
        let handler = if path == "/api/key" {
            // Keyed by the API key (hashed under the demo's secret);
            // outermost, failed key checks counted per client IP, so that
            // keys cannot be guessed at full speed.
            handler
                .layer(common.layer(api_key(), policies.clone()))
                .layer::<_, std::convert::Infallible>(middleware::from_fn_with_state(
                    Callers {
                        limits: limits.clone(),
                        anonymous: false,
                    },
                    authenticate,
                ))
                .layer(key_checks.clone())
        } else {
            handler
                .layer::<_, std::convert::Infallible>(common.layer(limits.keys(), policies.clone()))
                .layer(ids.clone())
        };
        app = app.route(path, handler);
    }
    // What the caller has left everywhere: a read of the store, so it is
    // limited too.
    let quota_limit = common.layer(limits.keys(), policies.clone());
    let app = app
        .route(
            "/api/quota",
            get(quota::<B>)
                .layer::<_, std::convert::Infallible>(quota_limit)
                .layer::<_, std::convert::Infallible>(key_checks.clone())
                .layer(ids.clone()),
        )
        .route(
            "/api/login",
            login::route(config, &common, policies.clone()).layer(ids.clone()),
        )
        .route(
            "/api/tokens",
            tokens::route(&common, &limits).layer(ids.clone()),
        )
        .route(
            "/api/slow",
            slow::route(&common, &limits).layer(ids.clone()),
        )
        .route(
            "/api/shared",
            shared::route(config, capacity, &limits, key_checks),
        )
        .route(
            "/api/report",
            report::route(config, &common, &limits, report_service).layer(ids),
        );
    changes.forget_on(&backend, &limits);
    let api_key = api_key();
    let coded_keys: [(&'static str, KeyOf); 2] = [
        ("/api/key", Arc::new(move |r| api_key.extract(r))),
        ("/api/login", login::key_of_user(config)),
    ];
    app.with_state(AppState {
        backend,
        started: limits.current(),
        limits,
        changes,
        top,
        coded_keys: coded_keys.into(),
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
    /// the failure rule, shadow mode, top offenders and lists, answering
    /// axum's own body (which axum then need not box again).
    fn layer<K: KeyExtractor, P: PolicyResolver>(
        &self,
        key: K,
        policy: P,
    ) -> RateLimitLayer<K, P, B, u32, AxumBody> {
        let layer = RateLimitLayer::new(policy)
            .axum_body()
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let [flag, path] = &std::env::args().skip(1).collect::<Vec<_>>()[..] {
        if flag == "--check" {
            std::process::exit(check(path));
        }
    }
    let config = Config::from_env()?;
    // Keys in /admin/top and logs are redacted under a secret: this one,
    // for a fleet whose servers' redacted keys must match, else a random
    // one of this process's.
    if let Ok(secret) = std::env::var("REDACTION_SECRET") {
        Key::set_redaction_secret(secret);
    }
    let addr: SocketAddr = std::env::var("ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
        .parse()
        .map_err(|e| format!("ADDR: {e}"))?;
    // Listening first: nothing below waits for Redis.
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({e}): set ADDR to another address"))?;
    let limits = Limits::new(limits_file(&config)?);
    let redis_url = std::env::var("REDIS_URL").ok();
    let changes = match &redis_url {
        #[cfg(feature = "redis")]
        Some(url) => Changes::for_redis(&config, url, &limits)?,
        _ => Changes::Local,
    };
    if let Some(path) = &config.limits_file {
        let version = limits.current().version().to_owned();
        println!("limits: version {version} from {}", path.display());
        changes.watch(&limits, path);
    }
    // A fleet's current version before the first request: waited for a
    // moment only, never for a Redis that does not answer (the failure
    // rule decides meanwhile, and the fleet is joined once it answers).
    changes.joined(Duration::from_millis(500)).await;
    let (app, store) = match redis_url {
        Some(url) => (
            redis_app_with(&config, &url, limits, changes).await?,
            "Redis",
        ),
        None => (
            app_with(
                &config,
                memory(&config).build(),
                limits,
                changes,
                shared::capacity(&config),
            ),
            "in memory",
        ),
    };
    println!(
        "tower-ratelimit demo on http://{addr} ({} algorithm, {store})",
        config.algorithm
    );
    let connections = &config.connections;
    let per_network = connections
        .max_per_network()
        .map_or(String::new(), |(_, _, max)| {
            format!(", {max} per /24 or /48 (MAX_CONNECTIONS_PER_NETWORK)")
        });
    println!(
        "limits in memory: at most {} keys (MAX_KEYS); connections: at most {} open (MAX_CONNECTIONS), {} per client address (MAX_CONNECTIONS_PER_CLIENT){per_network}",
        config.max_keys,
        connections.max_connections(),
        connections.max_per_client()
    );
    println!(
        "note: x-user-id is trusted as sent, for the demo; behind your own auth, key by what it established"
    );
    for route in &ROUTES {
        println!(
            "  {:<4} {:<13} {}",
            route.method.as_str(),
            route.path,
            route.about
        );
    }
    println!(
        "  GET  /api/shared    {}/s shared by every tenant (x-user-id), weighted by tier (x-api-key), x-priority: critical (enterprise key) | default | sheddable; {}/s per client address",
        config.shared_capacity, config.shared_per_ip
    );
    println!("\ntry: for i in $(seq 12); do curl -s -o /dev/null -w '%{{http_code}} ' -H 'x-user-id: alice' http://{addr}/api/search; done; echo");
    if let Some(metrics_addr) = config.metrics_addr {
        // For a scraper on an internal network: not on the public address.
        let metrics = tokio::net::TcpListener::bind(metrics_addr)
            .await
            .map_err(|e| {
                format!(
                    "cannot listen on {metrics_addr} ({e}): set METRICS_ADDR to another address"
                )
            })?;
        println!("metrics on http://{metrics_addr}/metrics");
        let metrics = serve(metrics, metrics_app::<()>(), config.connections.clone());
        tokio::spawn(metrics.into_future());
    }
    serve(listener, app, config.connections.clone())
        .with_graceful_shutdown(shutdown_signal())
        .await;
    println!("stopped");
    Ok(())
}

/// Ctrl-C or SIGTERM: requests under way are answered, then the server
/// ends (within 30 s).
async fn shutdown_signal() {
    let interrupted = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminated = signal(SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = interrupted => {}
            _ = terminated.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupted.await;
    println!("stopping: answering the requests under way");
}

/// The memory backend's builder, capped at `MAX_KEYS`.
fn memory(config: &Config) -> tower_ratelimit::backend::MemoryBackendBuilder {
    MemoryBackend::builder().max_keys(config.max_keys)
}

/// `--check path`: whether the file at `path` is one this server can run
/// (`ok`, or the error with its line and column); the exit code.
fn check(path: &str) -> i32 {
    let config = Config {
        algorithm: Config::from_env().map(|c| c.algorithm).unwrap_or_default(),
        limits_file: Some(path.into()),
        ..Config::default()
    };
    match limits_file(&config) {
        Ok(_) => {
            println!("ok");
            0
        }
        Err(error) => {
            println!("{error}");
            1
        }
    }
}

/// The app on Redis: the library reads every URL form (one server, a
/// cluster — `redis+cluster://` or several URLs — or Sentinel's
/// `redis+sentinel://host:port,…/master`).
#[cfg(feature = "redis")]
pub async fn redis_app(config: &Config, url: &str) -> Result<Router, Box<dyn std::error::Error>> {
    let limits = Limits::new(limits_file(config)?);
    let changes = Changes::for_redis(config, url, &limits)?;
    // For a caller that changes limits at once (tests): joined first.
    changes.joined(Duration::from_secs(5)).await;
    redis_app_with(config, url, limits, changes).await
}

/// The app on Redis, running `limits`, changed through `changes`.
#[cfg(feature = "redis")]
pub async fn redis_app_with(
    config: &Config,
    url: &str,
    limits: Limits,
    changes: Changes,
) -> Result<Router, Box<dyn std::error::Error>> {
    use tower_ratelimit::backend::{KeyFormat, RedisBackend, StoreHealth};
    let mut redis = RedisBackend::builder(url)
        .timeout(config.store_timeout)
        // Why Redis is not deciding, when that starts, changes or ends: a
        // mistyped password or CA shows here, not as silent local limits.
        .on_health_change(|health| {
            if matches!(health, StoreHealth::Failing { .. } | StoreHealth::Deciding) {
                println!("redis: {health}");
            }
        });
    redis = with_tls(config, redis)?;
    redis = match config.redis_key_format {
        RedisKeyFormat::Compact => redis,
        RedisKeyFormat::Packed(None) => redis.key_format(KeyFormat::PACKED),
        RedisKeyFormat::Packed(Some(shards)) => redis.key_format(KeyFormat::Packed { shards }),
    };
    if config.leased {
        redis = redis.leased(config.servers);
    }
    if !config.redis_batch {
        redis = redis.max_batch(1);
    }
    if redis.is_cluster() {
        // The backend keeps a circuit per node (a whole-backend breaker
        // would send every key to the failure rule when one primary dies).
        // A cluster client learns the slots first, so it connects now.
        let redis = redis.connect().await?;
        let capacity = shared::capacity(config).redis(redis.clone());
        return Ok(on_store_failure(config, redis, limits, changes, capacity));
    }
    // Lazily connected: the server starts even while Redis is down, and
    // decides by ON_STORE_FAILURE until it is up.
    let redis = redis.connect_lazy()?.with_breaker();
    // The shared capacity behind the limits' breaker: one outage, seen once.
    let capacity = shared::capacity(config).redis(&redis);
    Ok(on_store_failure(config, redis, limits, changes, capacity))
}

/// `REDIS_CA_FILE`, `REDIS_CLIENT_CERT` and `REDIS_CLIENT_KEY` applied to
/// `builder`; an error names the variable and the file it could not read.
#[cfg(feature = "redis")]
fn with_tls(
    config: &Config,
    builder: tower_ratelimit::backend::RedisBackendBuilder,
) -> Result<tower_ratelimit::backend::RedisBackendBuilder, String> {
    if config.redis_ca_file.is_none() && config.redis_client_cert.is_none() {
        return Ok(builder);
    }
    #[cfg(feature = "redis-tls")]
    {
        let read = |name: &str, path: &std::path::Path| {
            std::fs::read(path).map_err(|e| format!("{name}: {}: {e}", path.display()))
        };
        let mut builder = builder;
        if let Some(ca) = &config.redis_ca_file {
            builder = builder.tls_root_certificates(read("REDIS_CA_FILE", ca)?);
        }
        if let Some((cert, key)) = &config.redis_client_cert {
            builder = builder.tls_client_certificate(
                read("REDIS_CLIENT_CERT", cert)?,
                read("REDIS_CLIENT_KEY", key)?,
            );
        }
        Ok(builder)
    }
    #[cfg(not(feature = "redis-tls"))]
    Err("REDIS_CA_FILE or REDIS_CLIENT_CERT is set: run with --features redis-tls".into())
}

/// The app on `store`, decided by `ON_STORE_FAILURE` while it fails.
#[cfg(feature = "redis")]
fn on_store_failure<B: Backend>(
    config: &Config,
    store: B,
    limits: Limits,
    changes: Changes,
    capacity: tower_ratelimit::layer::fair_share::FairShare,
) -> Router {
    match config.on_store_failure {
        StoreFailure::Local => {
            let local = memory(config).servers(config.servers).build();
            app_with(config, store.or_fallback(local), limits, changes, capacity)
        }
        StoreFailure::Open | StoreFailure::Closed => {
            app_with(config, store, limits, changes, capacity)
        }
    }
}

#[cfg(not(feature = "redis"))]
pub async fn redis_app(_: &Config, _: &str) -> Result<Router, Box<dyn std::error::Error>> {
    Err("REDIS_URL is set but this build has no Redis: run with --features redis".into())
}

#[cfg(not(feature = "redis"))]
pub async fn redis_app_with(
    _: &Config,
    _: &str,
    _: Limits,
    _: Changes,
) -> Result<Router, Box<dyn std::error::Error>> {
    Err("REDIS_URL is set but this build has no Redis: run with --features redis".into())
}
