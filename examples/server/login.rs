//! `POST /api/login`: 5 failed logins per 15 minutes per client IP and
//! user, and 50 per client IP whatever the user; successes never count.
//!
//! The limiter's key and the handler read the same form, parsed once: a
//! form that repeats a field is refused with 400, so no client can be
//! counted as one user and authenticated as another.

use axum::body::to_bytes;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use tower_ratelimit::backend::Backend;
use tower_ratelimit::config::FilePolicies;
use tower_ratelimit::key::{key_fn, Key, KeyError, KeyExtractor};

use super::routes::client_ip;
use super::{Common, Config};
use tower_ratelimit::key::ClientIp;
use tower_ratelimit::{Policy, RateLimitLayer};

/// A login form, parsed once for the key and the handler alike.
#[derive(Clone)]
struct LoginForm {
    user: Vec<u8>,
    password: Vec<u8>,
}

/// The login limit's key of the user named by `x-user-id`, from the
/// request's address: what `DELETE /admin/keys?user=…&ip=…` forgets.
pub(super) fn key_of_user(config: &Config) -> super::routes::KeyOf {
    let ip = client_ip(config);
    Arc::new(move |r| {
        let user = r
            .headers
            .get("x-user-id")
            .ok_or(KeyError::Missing("the user"))?;
        Ok(Key::composite(&[
            ip.extract(r)?,
            Key::new("login-user", user.as_bytes()),
        ]))
    })
}

/// Login forms are small; a larger body is refused before anything else.
const MAX_FORM: usize = 4 * 1024;

pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
    config: &Config,
    common: &Common<B>,
    policy: FilePolicies,
) -> MethodRouter<S> {
    let ip = client_ip(config);
    let key = key_fn(move |r| {
        let form = r
            .extensions
            .get::<LoginForm>()
            .filter(|f| !f.user.is_empty())
            .ok_or(KeyError::Missing("the form's user field"))?;
        Ok(Key::composite(&[
            ip.extract(r)?,
            Key::new("login-user", &form.user),
        ]))
    });
    let limiter = common
        .layer(key, policy)
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED);
    post(login)
        .layer(limiter)
        .layer::<_, std::convert::Infallible>(middleware::from_fn_with_state(
            config.request_timeout,
            read_form,
        ))
        .layer(failures_per_address(config))
}

/// In front of the lockouts: 50 failed logins per 15 minutes per client
/// address, whatever the user names. Each lockout is a state the memory
/// backend keeps before others at its cap (`MAX_KEYS`); one address
/// inventing users could otherwise make thousands and push out the lockout
/// it wants lifted. With this, one address makes at most 10 lockouts per
/// 15 minutes, and a flood must come from `MAX_KEYS` / 10 addresses at
/// once.
fn failures_per_address(config: &Config) -> RateLimitLayer<ClientIp, Policy> {
    super::routes::failures_per_address(config, "login-failures-per-ip = 50/15min")
}

/// Read the form once (the key and the handler both need it) and keep it
/// in the request's extensions. A form too large (declared or sent), not
/// sent within `timeout`, or with a repeated field is refused here.
async fn read_form(State(timeout): State<Duration>, req: Request, next: Next) -> Response {
    let too_large = (
        StatusCode::PAYLOAD_TOO_LARGE,
        "a login form is at most 4 KiB\n",
    );
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_FORM as u64) {
        return too_large.into_response();
    }
    let (mut parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(timeout, to_bytes(body, MAX_FORM)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => return too_large.into_response(),
        Err(_) => {
            let late = "the login form did not arrive in time\n";
            return (StatusCode::REQUEST_TIMEOUT, late).into_response();
        }
    };
    match parse(&bytes) {
        Ok(form) => {
            parts.extensions.insert(form);
            next.run(Request::from_parts(parts, axum::body::Body::empty()))
                .await
        }
        Err(problem) => (StatusCode::BAD_REQUEST, problem).into_response(),
    }
}

/// The `user` and `password` of an `a=1&b=2` form, percent-decoded (`+`
/// is a space), as bytes: two different user names never read as one. A
/// field given twice is an error: which one counts would be a guess.
fn parse(body: &[u8]) -> Result<LoginForm, &'static str> {
    let (mut user, mut password) = (None, None);
    for pair in body.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        let eq = pair.iter().position(|b| *b == b'=').unwrap_or(pair.len());
        let field = match &decode(&pair[..eq])[..] {
            b"user" => &mut user,
            b"password" => &mut password,
            _ => continue,
        };
        if field.is_some() {
            return Err("a login form names each field once\n");
        }
        *field = Some(decode(pair.get(eq + 1..).unwrap_or_default()));
    }
    Ok(LoginForm {
        user: user.unwrap_or_default(),
        password: password.unwrap_or_default(),
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

/// The password `demo` is right for every user: checked against exactly
/// the form the limiter keyed the request by.
async fn login(Extension(form): Extension<LoginForm>) -> Response {
    if form.password == b"demo" {
        let user = String::from_utf8_lossy(&form.user);
        format!("welcome, {user}\n").into_response()
    } else {
        (StatusCode::UNAUTHORIZED, "wrong user name or password\n").into_response()
    }
}
