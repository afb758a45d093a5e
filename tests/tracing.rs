//! What the layer logs (feature `tracing`). In a test binary of its own:
//! a thread-scoped subscriber must be the first to see the log call sites.
#![cfg(feature = "tracing")]

#[path = "it/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::future::ready;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use support::Broken;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_ratelimit::backend::{Backend, MemoryBackend};
use tower_ratelimit::key::{Global, Header};
use tower_ratelimit::{Policy, RateLimitLayer};

fn ok(
) -> impl tower::Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone
{
    service_fn(|_: Request<()>| {
        ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
            "ok",
        )))))
    })
}

fn user(id: &str) -> Request<()> {
    Request::get("/").header("x-user-id", id).body(()).unwrap()
}

/// With the `tracing` feature, a failing backend is logged, once a second at
/// most, saying what the layer did; a limited request is logged at debug,
/// naming the limit, with the key redacted.
#[test]
fn failures_and_limits_are_logged_without_flooding() {
    use std::io::Write;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let open = RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
                .key(Global)
                .backend(Broken);
            let svc = ServiceBuilder::new().layer(open).service(ok());
            for _ in 0..100 {
                svc.clone().oneshot(user("a")).await.unwrap();
            }
            let limited = RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
                .key(Header::new("x-user-id"));
            let svc = ServiceBuilder::new().layer(limited).service(ok());
            svc.clone().oneshot(user("secret-user-42")).await.unwrap();
            svc.clone().oneshot(user("secret-user-42")).await.unwrap();

            // A fallback decides while its primary fails, and says so.
            let local = RateLimitLayer::new("1000/min".parse::<Policy>().unwrap())
                .key(Global)
                .backend(Broken.or_fallback(MemoryBackend::new()));
            let svc = ServiceBuilder::new().layer(local).service(ok());
            for _ in 0..100 {
                svc.clone().oneshot(user("a")).await.unwrap();
            }

            // Two layers checking one named limit: counted twice, said once
            // (looked for in one response in 64). Nested layers of other
            // limits say nothing.
            let logins = || "failed-logins = 1000/15min".parse::<Policy>().unwrap();
            let per_user = || RateLimitLayer::new(logins()).key(Header::new("x-user-id"));
            let twice = ServiceBuilder::new()
                .layer(per_user())
                .layer(per_user())
                .service(ok());
            for _ in 0..200 {
                twice.clone().oneshot(user("b")).await.unwrap();
            }
            let nested = ServiceBuilder::new()
                .layer(
                    RateLimitLayer::new("outer = 1000/min".parse::<Policy>().unwrap()).key(Global),
                )
                .layer(per_user())
                .service(ok());
            for _ in 0..200 {
                nested.clone().oneshot(user("c")).await.unwrap();
            }

            // The default key without a peer address: every request fails
            // the same way; the error is logged once.
            let no_peer = RateLimitLayer::new("1/min".parse::<Policy>().unwrap());
            let svc = ServiceBuilder::new().layer(no_peer).service(ok());
            for _ in 0..10 {
                svc.clone().oneshot(user("a")).await.unwrap();
            }
        })
    });
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("rate limit backend failed") && l.contains("action=\"allow\""))
        .collect();
    assert!((1..=2).contains(&warnings.len()), "{text}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("action=\"allow\""),
        "{text}"
    );
    assert!(warnings[0].contains("connection refused"), "{text}");
    // One event per decision: admissions at trace (not captured here),
    // the rest at debug, with the key redacted.
    let limited: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("rate limit decision"))
        .collect();
    assert_eq!(limited.len(), 1, "{text}");
    for field in [
        "DEBUG",
        "outcome=\"limited\"",
        "limit=\"1/min\"",
        "policy=1/min = 1/min",
        "backend=\"memory\"",
        "latency_us=",
        "retry_after_ms=",
        "key=header:x-user-id:secr…#",
    ] {
        assert!(limited[0].contains(field), "{field} in {text}");
    }
    assert!(
        !text.contains("secret-user-42"),
        "keys never reach the logs: {text}"
    );
    let fallbacks: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("rate limit backend failed") && l.contains("action=\"fallback\""))
        .collect();
    assert!((1..=2).contains(&fallbacks.len()), "{text}");
    assert!(
        fallbacks[0].contains("WARN") && fallbacks[0].contains("connection refused"),
        "{text}"
    );
    let twice: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("counted twice"))
        .collect();
    assert_eq!(twice.len(), 1, "{text}");
    assert!(
        twice[0].contains("WARN") && twice[0].contains("\"failed-logins\""),
        "{text}"
    );
    let misconfigured: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("no request can have a rate limit key"))
        .collect();
    assert_eq!(misconfigured.len(), 1, "{text}");
    assert!(
        misconfigured[0].contains("ERROR")
            && misconfigured[0].contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{text}"
    );
}
