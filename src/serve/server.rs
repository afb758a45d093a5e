//! The accept loop: each connection admitted or refused by the table,
//! served on a task of its own, and all of them drained on shutdown.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower_service::Service;

use super::connection::{self, BoxError, Phase};
use super::limits::ConnectionLimits;
use super::table::Table;
use crate::key::canonical;

/// Serve `service` on `listener` within `limits`: the
/// [module's](super) one entry. Await it (it never ends), or call
/// [`with_graceful_shutdown`](Serve::with_graceful_shutdown) first.
///
/// Each request carries the peer's address as a
/// [`PeerAddr`](crate::key::PeerAddr) extension (and, with the `axum`
/// feature, as axum's `ConnectInfo<SocketAddr>`), which
/// [`ClientIp`](crate::key::ClientIp) reads.
pub fn serve<S, B>(listener: TcpListener, service: S, limits: ConnectionLimits) -> Serve<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    Serve {
        listener,
        service,
        limits,
    }
}

/// A server not yet started: [`serve`]'s answer, awaited to run it.
#[derive(Debug)]
#[must_use = "a server does nothing until awaited"]
pub struct Serve<S> {
    listener: TcpListener,
    service: S,
    limits: ConnectionLimits,
}

impl<S> Serve<S> {
    /// Serve until `signal` completes, then accept no more connections,
    /// close the idle ones, let each request under way finish (within the
    /// limits' [`shutdown_grace`](super::ConnectionLimitsBuilder::shutdown_grace),
    /// then close what is left) and end.
    pub fn with_graceful_shutdown<F>(self, signal: F) -> WithGracefulShutdown<S, F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        WithGracefulShutdown {
            serve: self,
            signal,
        }
    }
}

/// A server that ends when its signal completes:
/// [`Serve::with_graceful_shutdown`]'s answer, awaited to run it.
#[derive(Debug)]
#[must_use = "a server does nothing until awaited"]
pub struct WithGracefulShutdown<S, F> {
    serve: Serve<S>,
    signal: F,
}

impl<S, B> IntoFuture for Serve<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Output = ();
    type IntoFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        self.with_graceful_shutdown(std::future::pending())
            .into_future()
    }
}

impl<S, B, F> IntoFuture for WithGracefulShutdown<S, F>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    F: Future<Output = ()> + Send + 'static,
{
    type Output = ();
    type IntoFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        let Serve {
            listener,
            service,
            limits,
        } = self.serve;
        Box::pin(run(listener, service, limits, self.signal))
    }
}

async fn run<S, B, F>(listener: TcpListener, service: S, limits: ConnectionLimits, signal: F)
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    F: Future<Output = ()> + Send,
{
    let limits = Arc::new(limits);
    let table = Arc::new(Table::new(&limits));
    let (phase, watching) = watch::channel(Phase::Serving);
    let mut signal = std::pin::pin!(signal);
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = signal.as_mut() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = Duration::ZERO;
                accepted
            }
            Err(_error) => {
                // EMFILE, ENFILE, ECONNABORTED…: never the end of the
                // server. Waited out, 10 ms doubling to 100 ms while they
                // go on, so that a process out of descriptors does not spin.
                backoff =
                    (backoff * 2).clamp(Duration::from_millis(10), Duration::from_millis(100));
                #[cfg(feature = "tracing")]
                tracing::warn!(error = %_error, ?backoff, "accepting a connection failed");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => continue,
                    () = signal.as_mut() => break,
                }
            }
        };
        let ip = canonical(peer.ip());
        let capped = !limits.uncapped.iter().any(|net| net.contains(&ip));
        let registration = match table.admit(ip, capped) {
            Ok(registration) => registration,
            // Closed at once (dropped): a flood costs nothing past the caps.
            Err(_refused) => {
                #[cfg(feature = "metrics")]
                metrics::counter!("ratelimit_connections_refused_total", "reason" => _refused.as_str())
                    .increment(1);
                continue;
            }
        };
        // Responses are written whole; waiting to fill a packet only adds
        // latency.
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection::run(
            stream,
            peer,
            service.clone(),
            limits.clone(),
            registration,
            watching.clone(),
        ));
    }
    drop(listener);
    drop(watching);
    // Every connection holds a receiver until it ends.
    let _ = phase.send(Phase::Draining);
    if tokio::time::timeout(limits.shutdown_grace, phase.closed())
        .await
        .is_err()
    {
        let _ = phase.send(Phase::Stopping);
        phase.closed().await;
    }
}
