//! Serving with timeouts on the wire: `axum::serve` has no timer, so a
//! client that sends half a request line, idles on a kept-alive connection
//! or trickles its headers would hold a connection for ever. Each
//! connection is served by hyper with a header-read timeout instead.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Serve `app` on `listener`: each connection must send a request's headers
/// (and, kept alive, start the next one) within `timeout`, or is closed.
/// Handlers see the peer address as `ConnectInfo`, as with
/// `into_make_service_with_connect_info`.
pub async fn serve(listener: TcpListener, app: Router, timeout: Duration) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let app = app
            .clone()
            .layer(Extension(ConnectInfo::<SocketAddr>(peer)));
        tokio::spawn(async move {
            let service = TowerToHyperService::new(app);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            // A connection that ends badly (a timeout, a reset) is the
            // client's business.
            let _ = connection.await;
        });
    }
}
