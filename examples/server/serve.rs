//! Serving a hostile internet: `axum::serve` has no timer and no cap, so a
//! client that sends half a request line, idles on a kept-alive connection,
//! trickles its headers or sends megabytes of them, or simply opens
//! connections until the process runs out of file descriptors, would hold
//! memory for ever or end the accept loop. Each connection is served by
//! hyper with a header-read timeout and a bound on its header bytes, open
//! connections are capped, and an accept error never stops the loop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The most bytes a connection may send before its headers end: past it
/// hyper answers 431 and closes the connection. 64 KiB is eight times what
/// most servers allow for a whole header block.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What bounds each connection, and how many there may be.
#[derive(Clone, Copy, Debug)]
pub struct Serving {
    /// A request's headers (and, kept alive, the start of the next request)
    /// must arrive within this, or the connection is closed.
    pub timeout: Duration,
    /// Connections open at once; one more is closed as soon as it is
    /// accepted, so the process keeps file descriptors for Redis, files and
    /// the connections it serves.
    pub max_connections: usize,
}

/// Serve `app` on `listener` within `serving`'s bounds. Handlers see the
/// peer address as `ConnectInfo`, as with
/// `into_make_service_with_connect_info`. Never returns: an accept error
/// (`EMFILE`, `ENFILE`, `ECONNABORTED`…) is printed, waited out (10 ms,
/// doubling to 100 ms while errors go on) and accepting goes on.
pub async fn serve(listener: TcpListener, app: Router, serving: Serving) {
    let open = Arc::new(Semaphore::new(serving.max_connections));
    let mut backoff = Duration::ZERO;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => {
                backoff = Duration::ZERO;
                accepted
            }
            Err(error) => {
                backoff =
                    (backoff * 2).clamp(Duration::from_millis(10), Duration::from_millis(100));
                eprintln!("accept: {error}; accepting again in {backoff:?}");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        // At the cap: closed at once (dropped), so a flood of idle
        // connections costs nothing beyond the cap.
        let Ok(permit) = open.clone().try_acquire_owned() else {
            continue;
        };
        let app = app
            .clone()
            .layer(Extension(ConnectInfo::<SocketAddr>(peer)));
        tokio::spawn(async move {
            let service = TowerToHyperService::new(app);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(serving.timeout)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            // A connection that ends badly (a timeout, a reset) is the
            // client's business.
            let _ = connection.await;
            drop(permit);
        });
    }
}

/// The default cap on open connections: three quarters of the process's
/// limit on open files (`ulimit -n`), at most 10,000; the rest are left for
/// everything else the process opens.
pub fn default_max_connections() -> usize {
    let soft_limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        })
        .unwrap_or(1024);
    (soft_limit / 4 * 3).clamp(16, 10_000)
}
