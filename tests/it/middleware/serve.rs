//! `serve::serve` over real sockets, as hostile clients meet it: connections
//! that never finish their headers from many addresses, a client at its cap,
//! headers trickled or padded, WebSockets, and a graceful shutdown.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Query};
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tower_ratelimit::serve::{serve, ConnectionLimits};
use tower_ratelimit::{Policy, RateLimitLayer};

/// `/` answers at once, `/slow?ms=<n>` after n ms, `/peer` with the
/// address the handler sees, `/limited` 2 a minute per client address.
fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|Query(q): Query<HashMap<String, u64>>| async move {
                let ms = q.get("ms").copied().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                "done"
            }),
        )
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        )
        .merge(
            Router::new()
                .route("/limited", get(|| async { "ok" }))
                .layer(RateLimitLayer::new("2/min".parse::<Policy>().unwrap())),
        )
}

/// A server of `app()` within `limits`, ended by sending on the sender.
async fn start(
    limits: ConnectionLimits,
) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        serve(listener, app(), limits)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .into_future(),
    );
    (addr, stop, server)
}

use std::future::IntoFuture;

/// A connection from the loopback address `127.0.0.<client>`.
async fn connect_from(client: u8, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from(([127, 0, 0, client], 0)))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// Send a GET for `path` on `stream` and read the answer: its status and
/// body, or `None` if the connection was closed (or reset) first, or
/// nothing came within 10 s.
async fn get_on(stream: &mut TcpStream, path: &str) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    read_response(stream).await
}

async fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let status = head.get(9..12)?.parse().ok()?;
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                let body = String::from_utf8_lossy(&seen[end + 4..end + 4 + length]).into_owned();
                return Some((status, body));
            }
        }
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Whether the server closes `stream` within `within` (reading and
/// dropping whatever it sends first).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut buf = [0u8; 1024];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

fn limits() -> tower_ratelimit::serve::ConnectionLimitsBuilder {
    ConnectionLimits::builder().header_timeout(Duration::from_secs(60))
}

/// The attack that stalled every example but the server: connections that
/// never finish their headers, from 8 addresses, filling every place. Each
/// client that sends a whole request takes the place of the half-open
/// connection idle longest and is served; the half-open ones lose theirs
/// one for one.
#[tokio::test]
async fn half_open_connections_from_many_addresses_hold_no_place_a_request_needs() {
    let (addr, _stop, _server) = start(
        limits()
            .max_connections(32)
            .max_per_client(4)
            .build()
            .unwrap(),
    )
    .await;
    let mut half_open = Vec::new();
    for client in 10..18 {
        for _ in 0..4 {
            let mut stream = connect_from(client, addr).await;
            stream.write_all(b"GET / HTTP/1.1\r\nhost").await.unwrap();
            half_open.push(stream);
        }
    }
    // Let the server accept them all before anyone else arrives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut fresh = Vec::new();
    for client in 100..120 {
        let mut stream = connect_from(client, addr).await;
        assert_eq!(
            get_on(&mut stream, "/").await,
            Some((200, "ok".into())),
            "client 127.0.0.{client}"
        );
        // Kept open (and idle): it was busy last, so it is not the next
        // to go.
        fresh.push(stream);
    }
    // An attacking address is served as well: its own half-open
    // connection makes room.
    let mut own = connect_from(10, addr).await;
    assert_eq!(get_on(&mut own, "/").await, Some((200, "ok".into())));
    // Each was closed as its replacement arrived; a busy machine may
    // take a moment to get there.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut closed = 0;
    for stream in &mut half_open {
        if closed_within(stream, Duration::from_millis(200)).await {
            closed += 1;
        }
    }
    assert_eq!(
        closed, 21,
        "{closed} of 32 half-open connections were closed"
    );
    // The fresh clients keep theirs: each is served again on it.
    for stream in &mut fresh {
        assert_eq!(get_on(stream, "/").await, Some((200, "ok".into())));
    }
}

/// A client at its cap with a request under way on every connection: one
/// more connection is closed at once, unanswered, and every request under
/// way is answered. Others are served meanwhile.
#[tokio::test]
async fn requests_under_way_are_never_cut_to_make_room() {
    let (addr, _stop, _server) = start(
        limits()
            .max_connections(16)
            .max_per_client(2)
            .build()
            .unwrap(),
    )
    .await;
    let slow = |client| {
        tokio::spawn(async move {
            let mut stream = connect_from(client, addr).await;
            get_on(&mut stream, "/slow?ms=1500").await
        })
    };
    let under_way = [slow(20), slow(20)];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut third = connect_from(20, addr).await;
    assert_eq!(
        get_on(&mut third, "/").await,
        None,
        "a third from a full client"
    );
    let mut other = connect_from(21, addr).await;
    assert_eq!(get_on(&mut other, "/").await, Some((200, "ok".into())));
    for request in under_way {
        assert_eq!(request.await.unwrap(), Some((200, "done".into())));
    }
    // Both ended: the client has room again.
    let mut again = connect_from(20, addr).await;
    assert_eq!(get_on(&mut again, "/").await, Some((200, "ok".into())));
}

/// The cap in all: past it, with every connection busy, a new one is
/// closed at once, however many addresses it comes from.
#[tokio::test]
async fn past_the_cap_in_all_with_every_connection_busy_a_new_one_is_closed() {
    let (addr, _stop, _server) = start(
        limits()
            .max_connections(4)
            .max_per_client(4)
            .build()
            .unwrap(),
    )
    .await;
    let under_way: Vec<_> = (30..34)
        .map(|client| {
            tokio::spawn(async move {
                let mut stream = connect_from(client, addr).await;
                get_on(&mut stream, "/slow?ms=1500").await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for client in 40..44 {
        let mut stream = connect_from(client, addr).await;
        assert_eq!(get_on(&mut stream, "/").await, None, "127.0.0.{client}");
    }
    for request in under_way {
        assert_eq!(request.await.unwrap(), Some((200, "done".into())));
    }
}

/// A request's headers: within the timeout from the connection's opening
/// or the response before, and within the bound in bytes however they
/// arrive.
#[tokio::test]
async fn headers_come_in_time_and_within_their_bytes_or_the_connection_closes() {
    let timeout = Duration::from_millis(300);
    let (addr, _stop, _server) = start(
        ConnectionLimits::builder()
            .header_timeout(timeout)
            .max_header_bytes(8 * 1024)
            .max_connections(100)
            .max_per_client(100)
            .build()
            .unwrap(),
    )
    .await;
    let wait = Duration::from_secs(5);
    // Half a request line; nothing at all.
    let mut partial = connect_from(50, addr).await;
    partial.write_all(b"GET / HT").await.unwrap();
    assert!(
        closed_within(&mut partial, wait).await,
        "half a request line"
    );
    let mut silent = connect_from(50, addr).await;
    assert!(
        closed_within(&mut silent, wait).await,
        "a silent connection"
    );
    // Kept alive after a response, then idle. The server's clock starts
    // once it has written the response, before this client has read it:
    // measured from before the request, the wait is at least the timeout
    // (from after the answer, beside load it was 297 ms of 300).
    let mut kept = connect_from(50, addr).await;
    let idle_since = Instant::now();
    assert_eq!(get_on(&mut kept, "/").await, Some((200, "ok".into())));
    assert!(
        closed_within(&mut kept, wait).await,
        "an idle kept-alive connection"
    );
    assert!(
        idle_since.elapsed() >= timeout,
        "{:?}",
        idle_since.elapsed()
    );
    // A byte every 50 ms: closed though bytes keep coming.
    let mut trickle = connect_from(50, addr).await;
    let started = Instant::now();
    for byte in b"GET / HTTP/1.1\r\nhost: x\r\nx-pad: aaaaaaaa\r\n"
        .iter()
        .cycle()
        .take(100)
    {
        if trickle.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if started.elapsed() > wait {
            break;
        }
    }
    assert!(closed_within(&mut trickle, wait).await, "a trickle");
    assert!(started.elapsed() < wait, "{:?}", started.elapsed());

    // Exactly the bound in one write: served; one byte more, in one write
    // or unfinished: 431.
    let block = |bytes: usize, finished: bool| {
        let start = "GET / HTTP/1.1\r\nhost: x\r\n";
        let end = if finished { "\r\n\r\n" } else { "\r\n" };
        let padding = bytes - start.len() - "x-pad: ".len() - end.len();
        format!("{start}x-pad: {}{end}", "a".repeat(padding))
    };
    for (bytes, finished, status) in [
        (8 * 1024, true, Some(200)),
        (8 * 1024 + 1, true, Some(431)),
        (20 * 1024, false, Some(431)),
    ] {
        let mut stream = connect_from(51, addr).await;
        let _ = stream.write_all(block(bytes, finished).as_bytes()).await;
        let answer = read_response(&mut stream).await.map(|(status, _)| status);
        assert_eq!(answer, status, "{bytes} bytes, finished: {finished}");
    }
}

/// The limiter behind `serve` sees each client's address: the default key
/// counts per address, and a handler reads it as `ConnectInfo`.
#[tokio::test]
async fn every_request_carries_its_peer_for_the_limiter_and_the_handler() {
    let (addr, _stop, _server) = start(limits().build().unwrap()).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from(60, addr).await;
        statuses.push(get_on(&mut stream, "/limited").await.map(|(s, _)| s));
    }
    assert_eq!(statuses, [Some(200), Some(200), Some(429)]);
    let mut other = connect_from(61, addr).await;
    assert_eq!(
        get_on(&mut other, "/limited").await.map(|(s, _)| s),
        Some(200)
    );
    assert_eq!(
        get_on(&mut other, "/peer").await,
        Some((200, "127.0.0.61".into()))
    );
}

/// A WebSocket keeps its connection's place until it closes and is never
/// closed to make room: upgrading is no way around the caps.
#[tokio::test]
async fn an_upgraded_connection_keeps_its_place_until_it_closes() {
    use axum::extract::ws::WebSocketUpgrade;
    let app = Router::new().route("/", get(|| async { "ok" })).route(
        "/ws",
        get(|ws: WebSocketUpgrade| async move {
            ws.on_upgrade(|mut socket| async move {
                while let Some(Ok(message)) = socket.recv().await {
                    if socket.send(message).await.is_err() {
                        break;
                    }
                }
            })
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = limits()
        .max_connections(8)
        .max_per_client(1)
        .build()
        .unwrap();
    tokio::spawn(serve(listener, app, limits).into_future());
    let stream = connect_from(70, addr).await;
    let (socket, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream)
        .await
        .unwrap();
    let mut second = connect_from(70, addr).await;
    assert_eq!(
        get_on(&mut second, "/").await,
        None,
        "beside an open WebSocket"
    );
    drop(socket);
    // Once its socket closes, the place is the client's again.
    let started = Instant::now();
    loop {
        let mut stream = connect_from(70, addr).await;
        if get_on(&mut stream, "/").await == Some((200, "ok".into())) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the place never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Shutting down: no new connection, idle ones closed at once, a request
/// under way answered, then the server ends.
#[tokio::test]
async fn a_graceful_shutdown_answers_requests_under_way_and_closes_the_rest() {
    let (addr, stop, server) = start(limits().build().unwrap()).await;
    let mut idle = connect_from(80, addr).await;
    assert_eq!(get_on(&mut idle, "/").await, Some((200, "ok".into())));
    let mut half_open = connect_from(80, addr).await;
    half_open.write_all(b"GET / HT").await.unwrap();
    let under_way = tokio::spawn(async move {
        let mut stream = connect_from(81, addr).await;
        get_on(&mut stream, "/slow?ms=5000").await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send(()).unwrap();
    // Closed long before the request under way ends (seconds, so that a
    // busy machine's stalls do not count).
    assert!(
        closed_within(&mut idle, Duration::from_secs(3)).await,
        "idle"
    );
    assert!(
        closed_within(&mut half_open, Duration::from_secs(3)).await,
        "half open"
    );
    assert!(!server.is_finished(), "ended with a request under way");
    assert_eq!(under_way.await.unwrap(), Some((200, "done".into())));
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server ended")
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
}

/// A request that outlasts the grace is cut when it ends.
#[tokio::test]
async fn a_shutdown_waits_no_longer_than_its_grace() {
    let (addr, stop, server) = start(
        limits()
            .shutdown_grace(Duration::from_millis(200))
            .build()
            .unwrap(),
    )
    .await;
    let under_way = tokio::spawn(async move {
        let mut stream = connect_from(90, addr).await;
        get_on(&mut stream, "/slow?ms=30000").await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server ended within its grace")
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(under_way.await.unwrap(), None, "cut, unanswered");
}

/// Each refusal and each close the server chose is counted by its reason.
#[test]
fn refusals_and_closes_are_counted_by_reason() {
    let counts = super::metrics::counts_of(|| async {
        let limits = limits()
            .header_timeout(Duration::from_secs(1))
            .max_connections(8)
            .max_per_client(1)
            .build()
            .unwrap();
        let (addr, _stop, _server) = start(limits).await;
        // A silent connection, timed out; then one from the same client,
        // idle, closed to make room for the next.
        let mut silent = connect_from(2, addr).await;
        assert!(closed_within(&mut silent, Duration::from_secs(5)).await);
        let mut idle = connect_from(2, addr).await;
        idle.write_all(b"GET / HT").await.unwrap();
        // Each step well inside the second the half-open one has.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let busy = tokio::spawn(async move {
            let mut stream = connect_from(2, addr).await;
            get_on(&mut stream, "/slow?ms=3000").await
        });
        assert!(closed_within(&mut idle, Duration::from_secs(5)).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The client's one place is busy: refused.
        let mut refused = connect_from(2, addr).await;
        assert_eq!(get_on(&mut refused, "/").await, None);
        assert_eq!(busy.await.unwrap(), Some((200, "done".into())));
    });
    let counted: Vec<_> = counts
        .into_iter()
        .filter(|(name, _)| name.starts_with("ratelimit_connections"))
        .collect();
    assert_eq!(
        counted,
        [
            (
                "ratelimit_connections_closed_total{reason=header_timeout}".to_owned(),
                1
            ),
            (
                "ratelimit_connections_closed_total{reason=made_room}".to_owned(),
                1
            ),
            (
                "ratelimit_connections_refused_total{reason=client}".to_owned(),
                1
            ),
        ]
    );
}
