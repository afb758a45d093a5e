//! Limiting WebSocket messages with [`Limiter`]: 5 messages a second per
//! connection, and 30 a minute per user across all of that user's
//! connections. A message over either limit is not processed; the client is
//! told when to try again, and the connection stays open.
//!
//! ```sh
//! cargo run --example websocket
//! # then, e.g. with websocat:  websocat 'ws://127.0.0.1:3002/echo?user=alice'
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use tower_ratelimit::key::Key;
use tower_ratelimit::serve::{serve, ConnectionLimits};
use tower_ratelimit::{Admission, Limiter, Policy};

/// The two limiters every connection consults, and connection numbers.
#[derive(Clone, Debug)]
pub struct Limits {
    per_connection: Limiter,
    per_user: Limiter,
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
            next_connection: Arc::default(),
        }
    }
}

/// The app: `GET /echo?user=<name>` upgrades to a WebSocket that echoes
/// each message it is allowed to process.
pub fn app(limits: Limits) -> Router {
    Router::new()
        .route("/echo", get(upgrade))
        .with_state(limits)
}

async fn upgrade(
    ws: WebSocketUpgrade,
    State(limits): State<Limits>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let user = query
        .get("user")
        .cloned()
        .unwrap_or_else(|| "anonymous".into());
    let connection = limits.next_connection.fetch_add(1, Ordering::Relaxed);
    ws.on_upgrade(move |socket| echo(socket, limits, user, connection))
}

async fn echo(mut socket: WebSocket, limits: Limits, user: String, connection: u64) {
    let connection = Key::new("ws-connection", connection.to_be_bytes());
    let user = Key::new("user", user);
    while let Some(Ok(message)) = socket.recv().await {
        let Message::Text(text) = message else {
            continue;
        };
        // The connection's limit first: a flood from one socket then costs
        // the user's budget nothing.
        let verdict = match limits.per_connection.check(&connection, 1).await {
            Admission::Denied(d) => Err(("connection", d.retry_after())),
            _ => match limits.per_user.check(&user, 1).await {
                Admission::Denied(d) => Err(("user", d.retry_after())),
                _ => Ok(()),
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
    println!("WebSocket echo on ws://{addr}/echo?user=<name>: 5 messages/s per connection, 30/min per user");
    serve(
        listener,
        app(Limits::default()),
        ConnectionLimits::default(),
    )
    .await;
    Ok(())
}
