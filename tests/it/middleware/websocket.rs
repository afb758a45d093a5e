//! `examples/websocket.rs` over a real WebSocket: messages limited per
//! connection and per user.

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::websocket_example::{app, Limits};

async fn start() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = tower_ratelimit::serve::ConnectionLimits::default();
    let server = tower_ratelimit::serve::serve(listener, app(Limits::default()), limits);
    tokio::spawn(std::future::IntoFuture::into_future(server));
    addr
}

/// Send `n` messages on a new connection as `user`; the replies.
async fn chat(addr: std::net::SocketAddr, user: &str, n: usize) -> Vec<String> {
    let url = format!("ws://{addr}/echo?user={user}");
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut replies = Vec::new();
    for i in 0..n {
        socket.send(Message::text(format!("m{i}"))).await.unwrap();
        let reply = socket.next().await.unwrap().unwrap();
        replies.push(reply.into_text().unwrap().to_string());
    }
    replies
}

fn echoed(replies: &[String]) -> usize {
    replies.iter().filter(|r| r.starts_with("echo: ")).count()
}

#[tokio::test]
async fn messages_are_limited_per_connection_and_per_user() {
    let addr = start().await;
    // One connection, a burst of 8: 5 per second per connection.
    let replies = chat(addr, "alice", 8).await;
    assert_eq!(echoed(&replies), 5, "{replies:?}");
    assert!(
        replies[5].starts_with("rate limited (connection): retry in "),
        "{replies:?}"
    );

    // Alice's other connections share her 30 a minute: 25 left.
    let mut total = 5;
    for _ in 0..6 {
        total += echoed(&chat(addr, "alice", 5).await);
    }
    assert_eq!(total, 30);
    let last = chat(addr, "alice", 1).await;
    assert!(
        last[0].starts_with("rate limited (user): retry in "),
        "{last:?}"
    );
    // Bob is untouched.
    assert_eq!(echoed(&chat(addr, "bob", 5).await), 5);
}
