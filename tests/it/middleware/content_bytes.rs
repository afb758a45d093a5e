//! Limits in bytes over HTTP: request bodies counted as they stream (the
//! declared length only a first reservation), cut off with 429 or 413, the
//! unread part of a grant given back; response bodies charged once sent.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::later::Later;
use crate::support::strict::Strict;
use axum::extract::Query;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::clock::{ManualClock, Micros};
use tower_ratelimit::key::Header;
use tower_ratelimit::layer::{content_bytes::ContentBytesLayer, HeaderStyle};
use tower_ratelimit::Policy;

/// An app whose `/upload` counts the bytes it read, and whose `/download`
/// sends `?n=` bytes, behind 100,000 bytes a minute per user.
async fn start(handled: Arc<AtomicUsize>) -> SocketAddr {
    start_on(handled, MemoryBackend::new()).await
}

async fn start_on(handled: Arc<AtomicUsize>, backend: impl Backend) -> SocketAddr {
    crate::support::with_a_minute_to_spare().await;
    let layer = ContentBytesLayer::new("transfer = 100000/min".parse::<Policy>().unwrap())
        .key(Header::new("x-user-id"))
        .backend(backend)
        .headers(HeaderStyle::Both)
        .min_grant(16_384);
    let app = Router::new()
        .route(
            "/upload",
            post(move |body: axum::body::Bytes| {
                handled.fetch_add(1, Ordering::SeqCst);
                async move { format!("read {}", body.len()) }
            }),
        )
        .route(
            "/download",
            get(
                |Query(q): Query<std::collections::HashMap<String, usize>>| async move {
                    vec![b'x'; q["n"]]
                },
            ),
        )
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// One request over a fresh connection, written by hand: `head` then, for
/// a chunked body, each chunk. Returns the status and the whole response.
fn raw(addr: SocketAddr, head: &str, chunks: &[usize]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    for &n in chunks {
        // The server may answer (and close) before the whole body is sent.
        let chunk = format!("{n:x}\r\n{}\r\n", "y".repeat(n));
        if stream.write_all(chunk.as_bytes()).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

fn header<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    response.lines().find_map(|l| {
        let (n, v) = l.split_once(": ")?;
        n.eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// What `user` has left, read by a request without a body (a check of 0
/// bytes), once the refunds and charges spawned by the last one landed.
async fn remaining(addr: SocketAddr, user: &str) -> u32 {
    tokio::time::sleep(Duration::from_millis(100)).await;
    let head = format!(
        "GET /download?n=0 HTTP/1.1\r\nhost: x\r\nx-user-id: {user}\r\nconnection: close\r\n\r\n"
    );
    let (_, response) = blocking(move || raw(addr, &head, &[])).await;
    header(&response, "x-ratelimit-remaining")
        .unwrap_or_else(|| panic!("{response}"))
        .parse()
        .unwrap()
}

fn upload_head(user: &str, length: Option<usize>) -> String {
    let length = match length {
        Some(n) => format!("content-length: {n}\r\n"),
        None => "transfer-encoding: chunked\r\n".to_owned(),
    };
    format!("POST /upload HTTP/1.1\r\nhost: x\r\nx-user-id: {user}\r\nconnection: close\r\n{length}\r\n")
}

#[tokio::test]
async fn a_declared_body_is_checked_before_its_handler_runs() {
    let handled = Arc::new(AtomicUsize::new(0));
    let addr = start(handled.clone()).await;
    let send = |n: usize| {
        let head = upload_head("ann", Some(n)) + &"y".repeat(n);
        blocking(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let _ = stream.write_all(head.as_bytes());
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            (
                response
                    .get(9..12)
                    .and_then(|s| s.parse::<u16>().ok())
                    .unwrap_or(0),
                response,
            )
        })
    };
    let (status, response) = send(60_000).await;
    assert_eq!(status, 200, "{response}");
    assert!(response.ends_with("read 60000"), "{response}");
    assert_eq!(
        header(&response, "ratelimit-policy"),
        Some(r#""transfer";q=100000;w=60;qu="content-bytes""#)
    );
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some("40000"));
    // 60,000 more do not fit: refused before the handler runs.
    let (status, response) = send(60_000).await;
    assert_eq!(status, 429, "{response}");
    assert!(header(&response, "retry-after").is_some());
    // Larger than the limit ever holds: 413, at once.
    let (status, response) = send(200_000).await;
    assert_eq!(status, 413, "{response}");
    assert_eq!(
        handled.load(Ordering::SeqCst),
        1,
        "only the first reached its handler"
    );
    // The 60,000 sent, and the 10 of "read 60000" the handler answered.
    assert_eq!(remaining(addr, "ann").await, 39_990);
}

/// Without a Content-Length, the bytes are counted as they arrive (with
/// one, too: the length is only a first reservation, and HTTP's framing,
/// which hyper enforces, keeps a body to it): a body that passes what is left is cut off with 429, and
/// exactly the bytes the handler read are charged.
#[tokio::test]
async fn a_streamed_body_is_counted_as_it_arrives_and_cut_off() {
    streamed_bodies(start(Arc::new(AtomicUsize::new(0))).await).await;
}

/// The same on Redis: grants, refunds and charges are its check and settle.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_streamed_body_is_counted_the_same_on_redis() {
    let server = crate::support::RedisServer::start();
    let redis = server.backend().await;
    streamed_bodies(start_on(Arc::new(AtomicUsize::new(0)), redis).await).await;
}

async fn streamed_bodies(addr: SocketAddr) {
    let head = upload_head("bob", None);
    let (status, response) = blocking(move || raw(addr, &head, &[10_000; 6])).await;
    assert_eq!(status, 200, "{response}");
    assert!(response.ends_with("read 60000"), "{response}");
    // Grants of 16 KiB were taken while it streamed; what was not read
    // went back. (And the answer's 10 bytes were charged.)
    assert_eq!(remaining(addr, "bob").await, 39_990);

    let head = upload_head("bob", None);
    let (status, response) = blocking(move || raw(addr, &head, &[10_000; 6])).await;
    assert_eq!(status, 429, "{response}");
    assert!(header(&response, "retry-after").is_some(), "{response}");
    // Three chunks fit and were read (39,990 left: two grants of 16 KiB,
    // then neither a grant nor the 7,232 missing for the fourth); the
    // fourth was never read whole, nor charged beyond what was read, and
    // the unread grant came back: 9,990 left when it arrived whole, less
    // when TCP split it and its first part fitted (on a loaded machine).
    let left = remaining(addr, "bob").await;
    assert!(left <= 9_990, "{left}");

    // A body larger than the limit, sent without a length: 413 once it
    // passes the limit; nothing more than the limit was ever counted.
    let head = upload_head("dee", None);
    let (status, response) = blocking(move || raw(addr, &head, &[40_000; 4])).await;
    assert_eq!(status, 413, "{response}");
    // Two chunks were read (and charged); the third, past the limit, not
    // whole (its first part may fit when TCP splits it).
    let left = remaining(addr, "dee").await;
    assert!(left <= 20_000, "{left}");
}

/// Response bodies are charged once sent, past the limit as a debt: the
/// next request waits it out.
#[tokio::test]
async fn response_bytes_are_charged_once_sent() {
    let addr = start(Arc::new(AtomicUsize::new(0))).await;
    let get = |n: usize| {
        let head = format!("GET /download?n={n} HTTP/1.1\r\nhost: x\r\nx-user-id: eve\r\nconnection: close\r\n\r\n");
        blocking(move || raw(addr, &head, &[]))
    };
    for expected_before in [100_000, 70_000, 40_000, 10_000] {
        let (status, response) = get(30_000).await;
        assert_eq!(status, 200);
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            Some(expected_before.to_string().as_str())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 120,000 sent against 100,000: in debt, refused until it is repaid.
    let (status, response) = get(1).await;
    assert_eq!(status, 429, "{response}");
    assert!(header(&response, "retry-after").is_some());
}

/// Five uploads of 10 bytes (declared) through a layer of 100,000 bytes a
/// minute on `backend` around a [`Strict`] service: how often it was
/// called, cloned, and called without `poll_ready` first.
async fn five_uploads<B: Backend>(backend: B) -> [usize; 3] {
    use http_body_util::Full;
    use tower::{Service, ServiceExt};

    let strict = Strict::default();
    let counts = strict.counts();
    let mut svc = tower::ServiceBuilder::new()
        .layer(
            ContentBytesLayer::new("transfer = 100000/min".parse::<Policy>().unwrap())
                .key(Header::new("x-user-id"))
                .backend(backend),
        )
        .service(strict);
    for _ in 0..5 {
        let upload = http::Request::post("/upload")
            .header("x-user-id", "u")
            .header("content-length", "10")
            .body(Full::new(bytes::Bytes::from_static(b"0123456789")))
            .unwrap();
        let ready = ServiceExt::<http::Request<Full<bytes::Bytes>>>::ready(&mut svc)
            .await
            .unwrap();
        assert_eq!(ready.call(upload).await.unwrap().status(), 200);
    }
    counts()
}

#[tokio::test]
async fn the_inner_service_is_called_ready_and_cloned_only_for_a_decision_still_to_come() {
    let [calls, clones, unready] = five_uploads(MemoryBackend::new()).await;
    assert_eq!((calls, unready), (5, 0));
    assert_eq!(clones, 0, "nothing cloned for a decision known at once");
    let later = Later::on(ManualClock::new(Micros::from_secs(1)));
    let [calls, clones, unready] = five_uploads(later).await;
    assert_eq!((calls, unready), (5, 0));
    assert_eq!(clones, 5, "one ready copy taken per request that waited");
}
