//! A complete app to start from: a public API with free and pro tiers by API
//! key, a login that locks out after failed attempts, and metrics.
//!
//! * `GET /api/data` with `x-api-key`: the free tier 10 a minute per key,
//!   pro 100 (keys looked up by the `authenticate` middleware: here a table,
//!   in your app your store); an unknown key is 401, and 10 of those a
//!   minute per address lock that address out;
//! * `POST /login` (`user=…&password=…`, the password `demo` is right): 5
//!   failures per 15 minutes per address and user; successes never count;
//! * `GET /metrics`: Prometheus text (requests by outcome, route and limit).
//!
//! `cargo run --example tiered_api`, then
//! `curl -i -H 'x-api-key: free-key' localhost:3000/api/data` (`ADDR` picks
//! another address).

use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tower_ratelimit::key::{key_fn, ApiKey, ClientIp, Key, KeyError};
use tower_ratelimit::layer::{policy_fn, HeaderStyle};
use tower_ratelimit::serve::{serve, ConnectionLimits};
use tower_ratelimit::{Policy, RateLimitLayer};

/// What `authenticate` established about the caller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Plan {
    Free,
    Pro,
}

/// Looks the API key up and puts the caller's plan in the request; an
/// unknown key (or none) is 401.
async fn authenticate(mut req: Request, next: Next) -> Response {
    let plan = match req.headers().get("x-api-key").map(|v| v.as_bytes()) {
        Some(b"free-key") => Plan::Free,
        Some(b"pro-key") => Plan::Pro,
        _ => return (StatusCode::UNAUTHORIZED, "unknown API key\n").into_response(),
    };
    req.extensions_mut().insert(plan);
    next.run(req).await
}

/// The API: each key has its plan's budget; failed key checks are counted
/// per address in front, so keys cannot be guessed at full speed.
fn api() -> Result<Router, Box<dyn std::error::Error>> {
    let (free, pro): (Policy, Policy) = ("free = 10/min".parse()?, "pro = 100/min".parse()?);
    let tiers = policy_fn(move |req| match req.extensions.get::<Plan>()? {
        Plan::Free => Some(free.clone()),
        Plan::Pro => Some(pro.clone()),
    });
    let per_key =
        RateLimitLayer::new(tiers).key(ApiKey::header("x-api-key", "replace this secret"));
    let guesses = RateLimitLayer::new("key-guesses = 10/min".parse::<Policy>()?)
        .key(ClientIp::new())
        .headers(HeaderStyle::None)
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED);
    Ok(Router::new()
        .route("/api/data", get(|| async { "data\n" }))
        // The last added runs first: guesses counted, then the plan found,
        // then the plan's limit.
        .layer(per_key)
        .layer(middleware::from_fn(authenticate))
        .layer(guesses))
}

/// The login form, read once: the limit's key and the handler both need
/// the user. (A real app decodes it with `serde_urlencoded`; a field sent
/// twice is read the same way by both here: the first.)
#[derive(Clone)]
struct LoginForm {
    user: String,
    password: String,
}

async fn read_form(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 4096).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let text = String::from_utf8_lossy(&bytes);
    let field = |name: &str| {
        let value = text
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='));
        value.unwrap_or_default().to_owned()
    };
    let form = LoginForm {
        user: field("user"),
        password: field("password"),
    };
    let mut req = Request::from_parts(parts, axum::body::Body::empty());
    req.extensions_mut().insert(form);
    next.run(req).await
}

async fn login(Extension(form): Extension<LoginForm>) -> Response {
    if form.password == "demo" {
        format!("welcome, {}\n", form.user).into_response()
    } else {
        (StatusCode::UNAUTHORIZED, "wrong user or password\n").into_response()
    }
}

/// Failed logins only: 5 per 15 minutes per address and user.
fn login_route() -> Result<Router, Box<dyn std::error::Error>> {
    let user = key_fn(|req| {
        let form = req
            .extensions
            .get::<LoginForm>()
            .filter(|f| !f.user.is_empty());
        let form = form.ok_or(KeyError::Missing("the form's user"))?;
        Ok(Key::new("login", form.user.as_bytes()))
    });
    let failures = RateLimitLayer::new("logins = 5/15min".parse::<Policy>()?)
        .key((ClientIp::new(), user))
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED);
    let route = post(login)
        .layer(failures)
        .layer(middleware::from_fn(read_form));
    Ok(Router::new().route("/login", route))
}

/// The metrics, with the upkeep the exporter leaves to its user.
pub fn metrics() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let upkeep = handle.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(5));
        upkeep.run_upkeep();
    });
    Ok(handle)
}

/// The whole app, its metrics rendered by `handle`.
pub fn app(handle: PrometheusHandle) -> Result<Router, Box<dyn std::error::Error>> {
    Ok(api()?
        .merge(login_route()?)
        .route("/metrics", get(move || async move { handle.render() })))
}

#[allow(dead_code)] // run by `cargo run`, not by the test that reads `app`
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({e}): set ADDR to another address"))?;
    println!("listening on {}", listener.local_addr()?);
    let app = app(metrics()?)?;
    serve(listener, app, ConnectionLimits::default()).await;
    Ok(())
}
