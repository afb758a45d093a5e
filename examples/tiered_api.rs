//! A complete app to start from: a public API with free and pro tiers by API
//! key, a login that locks out after failed attempts, and metrics.
//!
//! * `GET /api/data` with `x-api-key`: the free tier 10 a minute per key,
//!   pro 100 (keys looked up by the `authenticate` middleware: here a table,
//!   in your app your store); an unknown key is 401, and 10 of those a
//!   minute per address lock that address out;
//! * `POST /login` (`user=…&password=…`, the password `demo` is right): 5
//!   failures per 15 minutes per address and user, and 50 per address
//!   whatever the user; successes never count. The form is decoded once
//!   (`%61lice` is `alice`) for the limit and the handler alike, and a
//!   field sent twice is 400; a form not sent within 10 s is 408, so that
//!   a stalled body does not hold its connection;
//! * `GET /metrics`: Prometheus text (requests by outcome, route and limit).
//!
//! The cap per address is what stops one address guessing across many
//! users (without it, 300 users × 5 guesses each were 1,500 password
//! checks); its cost is that everyone behind one address (an office, a
//! carrier's NAT) shares those 50 failures and is locked out together
//! once they are spent. Raise it where many users share an address (the
//! per-user cap still holds each user to 5); never drop it.
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

/// How long a login form's body may take to arrive.
pub const FORM_TIMEOUT: Duration = Duration::from_secs(10);

/// The login form, read and decoded once: the limit's key and the handler
/// see the same user, however it was spelled (`%61lice`, `alice`).
#[derive(Clone)]
struct LoginForm {
    user: String,
    password: String,
}

async fn read_form(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(FORM_TIMEOUT, axum::body::to_bytes(body, 4096)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => return StatusCode::PAYLOAD_TOO_LARGE.into_response(),
        Err(_) => {
            let late = "the login form did not arrive in time\n";
            return (StatusCode::REQUEST_TIMEOUT, late).into_response();
        }
    };
    let Some(form) = parse_form(&bytes) else {
        let text = "a form of user and password, each once, URL-encoded\n";
        return (StatusCode::BAD_REQUEST, text).into_response();
    };
    let mut req = Request::from_parts(parts, axum::body::Body::empty());
    req.extensions_mut().insert(form);
    next.run(req).await
}

/// `user=…&password=…` decoded (`+` a space, `%XX` a byte, UTF-8 after);
/// none when either field is missing, sent twice, or badly encoded: a
/// field sent twice could be read one way by the limit and another by the
/// handler.
fn parse_form(body: &[u8]) -> Option<LoginForm> {
    let (mut user, mut password) = (None, None);
    for pair in body.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        let (name, value) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &b""[..]),
        };
        let slot = match decode(name)?.as_str() {
            "user" => &mut user,
            "password" => &mut password,
            _ => continue,
        };
        if slot.replace(decode(value)?).is_some() {
            return None;
        }
    }
    Some(LoginForm {
        user: user?,
        password: password?,
    })
}

/// One form field's bytes, URL-decoded.
fn decode(field: &[u8]) -> Option<String> {
    let mut bytes = Vec::with_capacity(field.len());
    let mut rest = field.iter();
    while let Some(&b) = rest.next() {
        bytes.push(match b {
            b'+' => b' ',
            b'%' => {
                let hex = [*rest.next()?, *rest.next()?];
                u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?
            }
            _ => b,
        });
    }
    String::from_utf8(bytes).ok()
}

async fn login(Extension(form): Extension<LoginForm>) -> Response {
    if form.password == "demo" {
        format!("welcome, {}\n", form.user).into_response()
    } else {
        (StatusCode::UNAUTHORIZED, "wrong user or password\n").into_response()
    }
}

/// Failed logins only: 5 per 15 minutes per address and user, and 50 per
/// address whatever the user.
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
    let per_address = RateLimitLayer::new("address-logins = 50/15min".parse::<Policy>()?)
        .key(ClientIp::new())
        .headers(HeaderStyle::None)
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED);
    // The last added runs first: the address's failures, the form read,
    // then the user's failures at that address.
    let route = post(login)
        .layer(failures)
        .layer(middleware::from_fn(read_form));
    Ok(Router::new().route("/login", route).layer(per_address))
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
