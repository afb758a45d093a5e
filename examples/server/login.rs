//! `POST /api/login`: 5 failed logins per 15 minutes per client IP and
//! user; successes never count.

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

use super::routes::client_ip;
use super::{Common, Config};

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
