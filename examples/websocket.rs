//! Limiting WebSocket messages with [`Limiter`]: per connection 5 messages
//! a second, per user 30 messages and 256 KiB a minute across all of that
//! user's connections, and no message over 64 KiB. A message over a rate
//! is not processed: the client is told when to try again, and the
//! connection stays open. A message over 64 KiB ends the connection
//! before it is read into memory (without a close frame: the client sees
//! 1006, abnormal closure).
//!
//! The user is who the bearer token says (`Authorization: Bearer
//! alice-token`; here a table, in your app your session store), never a
//! name the client picks: a query's `?user=` would let anyone spend
//! anyone's budget, and each made-up name would be a fresh one. A missing
//! or unknown token is 401, and 10 of those a minute from one address lock
//! that address out. Browsers cannot set headers on a WebSocket: check the
//! session cookie your login set the same way.
//!
//! ```sh
//! cargo run --example websocket   # on 127.0.0.1:3002 (ADDR picks another)
//! # then, e.g. with websocat:
//! websocat -H 'authorization: Bearer alice-token' ws://127.0.0.1:3002/echo
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_ratelimit::key::{ClientIp, Key};
use tower_ratelimit::layer::HeaderStyle;
use tower_ratelimit::serve::{serve, ConnectionLimits};
use tower_ratelimit::{Admission, Limiter, Policy, RateLimitLayer};

/// The largest message read: a larger one closes its connection.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The limiters every connection consults, and connection numbers.
#[derive(Clone, Debug)]
pub struct Limits {
    per_connection: Limiter,
    per_user: Limiter,
    bytes_per_user: Limiter,
    next_connection: Arc<AtomicU64>,
}

impl Default for Limits {
    fn default() -> Self {
        let policy = |text: &str| {
            text.parse::<Policy>()
                .expect("the example's policies are valid")
        };
        Self {
            per_connection: Limiter::new(policy("connection = 5/s")),
            per_user: Limiter::new(policy("user = 30/min")),
            bytes_per_user: Limiter::new(policy("user-bytes = 262144/min")),
            next_connection: Arc::default(),
        }
    }
}

/// Who a bearer token belongs to: here a table, in your app your session
/// store.
fn user_of(headers: &HeaderMap) -> Option<&'static str> {
    let token = headers.get("authorization")?.as_bytes();
    match token.strip_prefix(b"Bearer ")? {
        b"alice-token" => Some("alice"),
        b"bob-token" => Some("bob"),
        _ => None,
    }
}

/// The app: `GET /echo` with a bearer token upgrades to a WebSocket that
/// echoes each message it is allowed to process.
pub fn app(limits: Limits) -> Router {
    // Failed token checks per address, so tokens cannot be guessed at
    // full speed (answered 429 past them, a right token included).
    let guesses = RateLimitLayer::new(
        "token-guesses = 10/min"
            .parse::<Policy>()
            .expect("the example's policies are valid"),
    )
    .key(ClientIp::new())
    .headers(HeaderStyle::None)
    .count_if(|res| res.status == StatusCode::UNAUTHORIZED);
    Router::new()
        .route("/echo", get(upgrade))
        .layer(guesses)
        .with_state(limits)
}

async fn upgrade(
    ws: WebSocketUpgrade,
    State(limits): State<Limits>,
    headers: HeaderMap,
) -> Response {
    let Some(user) = user_of(&headers) else {
        return (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
    };
    let connection = limits.next_connection.fetch_add(1, Ordering::Relaxed);
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| echo(socket, limits, user, connection))
}

async fn echo(mut socket: WebSocket, limits: Limits, user: &str, connection: u64) {
    let connection = Key::new("ws-connection", connection.to_be_bytes());
    let user = Key::new("user", user);
    // A message over `MAX_MESSAGE_BYTES` ends the loop with an error: the
    // socket is dropped, with no close frame.
    while let Some(Ok(message)) = socket.recv().await {
        let Message::Text(text) = message else {
            continue;
        };
        let bytes = u32::try_from(text.len()).unwrap_or(u32::MAX);
        // The connection's limit first: a flood from one socket then costs
        // the user's budget nothing.
        let verdict = match limits.per_connection.check(&connection, 1).await {
            Admission::Denied(d) => Err(("connection", d.retry_after())),
            _ => match limits.per_user.check(&user, 1).await {
                Admission::Denied(d) => Err(("user", d.retry_after())),
                _ => match limits.bytes_per_user.check(&user, bytes).await {
                    Admission::Denied(d) => Err(("bytes", d.retry_after())),
                    _ => Ok(()),
                },
            },
        };
        let reply = match verdict {
            Ok(()) => format!("echo: {text}"),
            Err((limit, retry)) => format!(
                "rate limited ({limit}): retry in {} ms",
                retry.map_or(0, |r| r.as_millis())
            ),
        };
        if socket.send(Message::Text(reply.into())).await.is_err() {
            break;
        }
    }
}

#[allow(dead_code)] // tests include this file for `app`
#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::var("ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3002".into())
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("ADDR: {e}")))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "WebSocket echo on ws://{addr}/echo (authorization: Bearer alice-token or bob-token): \
         5 messages/s per connection, 30 messages and 256 KiB a minute per user, 64 KiB a message"
    );
    serve(
        listener,
        app(Limits::default()),
        ConnectionLimits::default(),
    )
    .await;
    Ok(())
}
