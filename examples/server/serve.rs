//! Serving a hostile internet: `axum::serve` has no timer and no cap, so a
//! client that sends half a request line, idles on a kept-alive connection,
//! trickles its headers or sends megabytes of them, or simply opens
//! connections until the process runs out of file descriptors, would hold
//! memory for ever or end the accept loop. Each connection is served by
//! hyper with a header-read timeout and a bound on its header bytes, open
//! connections are capped in all and per client address, and an accept
//! error never stops the loop.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tower::ServiceExt;

/// The most bytes of a request's header block (its request line, headers
/// and the blank line): past it the server answers 431 and closes the
/// connection. hyper refuses a block still unfinished when its buffer holds
/// this much; a whole block that arrives in one read is measured once
/// parsed. 64 KiB is eight times what most servers allow.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What bounds each connection, and how many there may be.
#[derive(Clone, Debug)]
pub struct Serving {
    /// A request's headers (and, kept alive, the start of the next request)
    /// must arrive within this, or the connection is closed.
    pub timeout: Duration,
    /// Connections open at once; one more is closed as soon as it is
    /// accepted, so the process keeps file descriptors for Redis, files and
    /// the connections it serves.
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6 client:
    /// from one /64, what one host is usually given). One more closes that
    /// address's oldest idle connection, or is itself closed when none is
    /// idle: a client never holds more, and never closes another's.
    pub max_per_client: usize,
    /// Peers not capped per address: reverse proxies, whose connections
    /// carry many clients (`TRUSTED_PROXIES`).
    pub uncapped: Vec<IpNet>,
}

/// Serve `app` on `listener` within `serving`'s bounds. Handlers see the
/// peer address as `ConnectInfo`, as with
/// `into_make_service_with_connect_info`. Never returns: an accept error
/// (`EMFILE`, `ENFILE`, `ECONNABORTED`…) is printed, waited out (10 ms,
/// doubling to 100 ms while errors go on) and accepting goes on.
pub async fn serve(listener: TcpListener, app: Router, serving: Serving) {
    let open = Arc::new(Semaphore::new(serving.max_connections));
    let clients = Arc::new(Clients::default());
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
        let capped = !serving.uncapped.iter().any(|n| n.contains(&peer.ip()));
        let connection = if capped {
            // At the address's cap with nothing idle: closed at once.
            let Some(connection) = clients.admit(peer.ip(), serving.max_per_client) else {
                continue;
            };
            connection
        } else {
            Connection::uncapped()
        };
        // At the cap: closed at once (dropped), so a flood of idle
        // connections costs nothing beyond the cap.
        let Ok(permit) = open.clone().try_acquire_owned() else {
            continue;
        };
        let app = app
            .clone()
            .layer(Extension(ConnectInfo::<SocketAddr>(peer)));
        let state = connection.state.clone();
        let service = TowerToHyperService::new(tower::service_fn(move |req: Request<_>| {
            let busy = Busy::enter(&state);
            let app = app.clone();
            async move {
                if header_bytes(&req) > MAX_HEADER_BYTES {
                    return Ok::<_, Infallible>(header_block_too_large());
                }
                let response = app.oneshot(req).await;
                drop(busy);
                response
            }
        }));
        tokio::spawn(async move {
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(serving.timeout)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut served = std::pin::pin!(served);
            // A connection that ends badly (a timeout, a reset) is the
            // client's business.
            tokio::select! {
                _ = served.as_mut() => {}
                _ = connection.state.close.notified() => {
                    // Asked to make room: a request under way is answered first.
                    served.as_mut().graceful_shutdown();
                    let _ = served.await;
                }
            }
            drop(connection);
            drop(permit);
        });
    }
}

/// The bytes of `req`'s header block as the client sent it: the request
/// line, each header line and the blank line.
fn header_bytes<B>(req: &Request<B>) -> usize {
    // The request target's length without writing it out (no allocation
    // on every request): `scheme://authority` in absolute form, then the
    // path and query.
    let uri = req.uri();
    let origin = match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(authority)) => scheme.len() + "://".len() + authority.as_str().len(),
        _ => 0,
    };
    let target = origin + uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = req.method().as_str().len() + target + " HTTP/1.1\r\n ".len();
    let headers: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + ": \r\n".len() + value.len())
        .sum();
    line + headers + "\r\n".len()
}

fn header_block_too_large() -> Response {
    (
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        [(header::CONNECTION, "close")],
        format!("request headers over {MAX_HEADER_BYTES} bytes\n"),
    )
        .into_response()
}

/// Each client address's open connections, oldest first.
#[derive(Default)]
struct Clients {
    open: Mutex<HashMap<IpAddr, Vec<Arc<ConnectionState>>>>,
}

/// One connection's requests under way, and its signal to close.
#[derive(Default)]
struct ConnectionState {
    busy: AtomicUsize,
    close: Notify,
}

/// A served connection's place in [`Clients`], given back when it ends.
struct Connection {
    state: Arc<ConnectionState>,
    client: Option<(Arc<Clients>, IpAddr)>,
}

impl Connection {
    fn uncapped() -> Self {
        Self {
            state: Arc::default(),
            client: None,
        }
    }
}

impl Clients {
    /// A place for a new connection from `ip`, the client's oldest idle
    /// connection closed if it has `cap` open; none when all are busy.
    fn admit(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<Connection> {
        let client = client_of(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let connections = open.entry(client).or_default();
        if connections.len() >= cap {
            let idle = connections
                .iter()
                .position(|c| c.busy.load(Ordering::Acquire) == 0)?;
            connections.remove(idle).close.notify_one();
        }
        let state = Arc::new(ConnectionState::default());
        connections.push(state.clone());
        Some(Connection {
            state,
            client: Some((self.clone(), client)),
        })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let Some((clients, client)) = &self.client else {
            return;
        };
        let mut open = clients.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(connections) = open.get_mut(client) {
            connections.retain(|c| !Arc::ptr_eq(c, &self.state));
            if connections.is_empty() {
                open.remove(client);
            }
        }
    }
}

/// A request under way on a connection: it is not idle until this drops.
struct Busy(Arc<ConnectionState>);

impl Busy {
    fn enter(state: &Arc<ConnectionState>) -> Self {
        state.busy.fetch_add(1, Ordering::AcqRel);
        Self(state.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whom a connection counts against: an IPv4 address, or an IPv6 /64
/// (an IPv4 address mapped into IPv6 is that IPv4 address).
fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
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

/// The default cap per client address: an eighth of the cap in all, at
/// most 64 (a browser opens 6 per host; a client needing more can be given
/// more with `MAX_CONNECTIONS_PER_CLIENT`).
pub fn default_max_per_client(max_connections: usize) -> usize {
    (max_connections / 8).clamp(1, 64)
}
