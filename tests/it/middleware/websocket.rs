//! `examples/websocket.rs` over a real WebSocket: messages limited per
//! connection and per user in number and bytes, the user from its token.

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::websocket_example::{app, Limits, MAX_MESSAGE_BYTES};

async fn start() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = tower_ratelimit::serve::ConnectionLimits::default();
    let server = tower_ratelimit::serve::serve(listener, app(Limits::default()), limits);
    tokio::spawn(std::future::IntoFuture::into_future(server));
    addr
}

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket to `/echo<query>` with `token`, or the HTTP status that
/// refused it.
async fn connect(addr: std::net::SocketAddr, token: &str, query: &str) -> Result<Socket, u16> {
    let mut request = format!("ws://{addr}/echo{query}")
        .into_client_request()
        .unwrap();
    if !token.is_empty() {
        let bearer = format!("Bearer {token}").parse().unwrap();
        request.headers_mut().insert("authorization", bearer);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(e) => panic!("{e}"),
    }
}

/// Send `n` messages on a new connection with `token`; the replies.
async fn chat(addr: std::net::SocketAddr, token: &str, n: usize) -> Vec<String> {
    let mut socket = connect(addr, token, "").await.unwrap();
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
    let replies = chat(addr, "alice-token", 8).await;
    assert_eq!(echoed(&replies), 5, "{replies:?}");
    assert!(
        replies[5].starts_with("rate limited (connection): retry in "),
        "{replies:?}"
    );

    // Alice's other connections share her 30 a minute: 25 left.
    let mut total = 5;
    for _ in 0..6 {
        total += echoed(&chat(addr, "alice-token", 5).await);
    }
    assert_eq!(total, 30);
    let last = chat(addr, "alice-token", 1).await;
    assert!(
        last[0].starts_with("rate limited (user): retry in "),
        "{last:?}"
    );
    // Bob is untouched.
    assert_eq!(echoed(&chat(addr, "bob-token", 5).await), 5);
}

/// The user is its token's, whatever the query says: `?user=alice` with
/// Bob's token spends Bob's budget (an attacker naming the victim spent the
/// victim's), and no token, or a made-up one, is refused (20 made-up names
/// sent 100 of 100).
#[tokio::test]
async fn the_user_is_whom_the_token_names_never_the_query() {
    let addr = start().await;
    let mut spent = 0;
    for _ in 0..6 {
        let mut socket = connect(addr, "bob-token", "?user=alice").await.unwrap();
        for i in 0..5 {
            socket.send(Message::text(format!("m{i}"))).await.unwrap();
            let reply = socket.next().await.unwrap().unwrap().into_text().unwrap();
            spent += usize::from(reply.starts_with("echo: "));
        }
    }
    assert_eq!(spent, 30, "Bob's 30 a minute");
    assert_eq!(
        echoed(&chat(addr, "alice-token", 5).await),
        5,
        "Alice keeps hers"
    );

    assert_eq!(connect(addr, "", "?user=carol").await.err(), Some(401));
    for n in 1..9 {
        let made_up = format!("token-{n}");
        assert_eq!(
            connect(addr, &made_up, "").await.err(),
            Some(401),
            "{made_up}"
        );
    }
    // Ten failures in a minute from one address: what follows is refused,
    // a right token included.
    assert_eq!(connect(addr, "guess", "").await.err(), Some(401));
    assert_eq!(connect(addr, "alice-token", "").await.err(), Some(429));
}

/// Messages are limited in bytes too: 256 KiB a minute per user, and one
/// over 64 KiB closes its connection unread (four 15 MiB messages took the
/// server from 4 to 158 MB).
#[tokio::test]
async fn messages_are_limited_in_bytes() {
    let addr = start().await;
    let mut replies = Vec::new();
    // 60 KiB messages, four a connection (under 5 a second).
    let message = "a".repeat(60 * 1024);
    for _ in 0..2 {
        let mut socket = connect(addr, "alice-token", "").await.unwrap();
        for _ in 0..3 {
            socket.send(Message::text(message.clone())).await.unwrap();
            let reply = socket.next().await.unwrap().unwrap().into_text().unwrap();
            replies.push(reply.chars().take(40).collect::<String>());
        }
    }
    // 4 × 60 KiB fit in 256 KiB; the fifth does not.
    assert_eq!(echoed(&replies), 4, "{replies:?}");
    assert!(
        replies[4].starts_with("rate limited (bytes)"),
        "{replies:?}"
    );

    let mut socket = connect(addr, "bob-token", "").await.unwrap();
    let huge = "b".repeat(15 << 20);
    let _ = socket.send(Message::text(huge)).await;
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the connection was closed");
    // Ended without a close frame, as the example says.
    assert_eq!(closed, None);
    assert_eq!(MAX_MESSAGE_BYTES, 64 * 1024);
    // Bob's budget was not spent by it.
    assert_eq!(echoed(&chat(addr, "bob-token", 5).await), 5);
}
