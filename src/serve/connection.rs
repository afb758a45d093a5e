//! One accepted connection, served by hyper within its bounds until it
//! ends, is closed to make room, or the server shuts down.

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower_service::Service;

use super::limits::ConnectionLimits;
use super::table::{Busy, Registration};
use crate::key::PeerAddr;

/// Errors a service or its body may end a connection with.
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the server is in its life, as each connection watches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Serving,
    /// Finish the request under way, take no other.
    Draining,
    /// Close now.
    Stopping,
}

/// Serve `stream` from `peer` with `service` until the connection ends.
pub(super) async fn run<S, B>(
    stream: TcpStream,
    peer: SocketAddr,
    service: S,
    limits: Arc<ConnectionLimits>,
    registration: Registration,
    mut phase: watch::Receiver<Phase>,
) where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let slot = registration.slot.clone();
    let per_request = PerRequest {
        service,
        peer,
        registration: Arc::new(registration),
    };
    // The registration rides in the socket as well, so that an upgraded
    // connection (a WebSocket) keeps its place until its socket closes.
    let io = Counted {
        stream,
        _registration: per_request.registration.clone(),
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(limits.max_header_bytes);
    let connection = builder
        .serve_connection(TokioIo::new(io), per_request)
        .with_upgrades();
    let mut connection = std::pin::pin!(connection);
    let mut draining = false;
    loop {
        let close_to_make_room = slot.close.notified();
        tokio::select! {
            ended = connection.as_mut() => {
                // A connection that ends badly (reset, timed out) is the
                // client's business; only its kind is counted.
                #[cfg(feature = "metrics")]
                if let Err(error) = &ended {
                    if error.is_timeout() {
                        metrics::counter!("ratelimit_connections_closed_total", "reason" => "header_timeout")
                            .increment(1);
                    }
                }
                let _ = ended;
                return;
            }
            () = close_to_make_room, if !draining => {
                // Idle when chosen; a request that began since is answered.
                if slot.is_idle() {
                    return;
                }
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
            changed = phase.changed() => {
                let now = if changed.is_err() { Phase::Stopping } else { *phase.borrow_and_update() };
                match now {
                    Phase::Serving => {}
                    Phase::Draining if !draining => {
                        if slot.is_idle() {
                            return;
                        }
                        draining = true;
                        connection.as_mut().graceful_shutdown();
                    }
                    Phase::Draining => {}
                    Phase::Stopping => return,
                }
            }
        }
    }
}

/// The service hyper calls for each request of one connection.
struct PerRequest<S> {
    service: S,
    peer: SocketAddr,
    registration: Arc<Registration>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for PerRequest<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ServedBody<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        let busy = self.registration.enter();
        req.extensions_mut().insert(PeerAddr(self.peer));
        #[cfg(feature = "axum")]
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        let mut service = self.service.clone();
        Box::pin(async move {
            poll_fn(|cx| service.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            let response = service.call(req).await.map_err(Into::into)?;
            let busy = if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                busy.keep();
                None
            } else {
                Some(busy)
            };
            Ok(response.map(|inner| ServedBody { inner, busy }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its connection busy until it ends.
    struct ServedBody<B> {
        #[pin]
        inner: B,
        busy: Option<Busy>,
    }
}

impl<B> Body for ServedBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            this.busy.take();
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that keeps its connection's place in the table until dropped.
struct Counted {
    stream: TcpStream,
    _registration: Arc<Registration>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
