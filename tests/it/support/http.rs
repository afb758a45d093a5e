//! Requests for the layer in process, and over real HTTP.

/// A GET from `peer` (as a server would record it) with these headers.
pub fn request(peer: &str, headers: &[(&str, &[u8])]) -> http::Request<()> {
    let mut builder = http::Request::get("/");
    for (name, value) in headers {
        builder = builder.header(*name, http::HeaderValue::from_bytes(value).unwrap());
    }
    let mut req = builder.body(()).unwrap();
    let peer: std::net::SocketAddr = peer.parse().unwrap();
    req.extensions_mut()
        .insert(tower_ratelimit::key::PeerAddr(peer));
    req
}

/// One request over a fresh HTTP/1 connection: status, headers, body text.
pub async fn send(
    addr: std::net::SocketAddr,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (http::StatusCode, http::HeaderMap, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange(stream, addr, method, path, headers, body).await
}

/// [`send`] from the loopback address `127.0.0.<client>`: a client of an
/// address of its own, as a server that knows its peers sees it.
pub async fn send_from(
    client: u8,
    addr: std::net::SocketAddr,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (http::StatusCode, http::HeaderMap, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, client], 0)))
        .unwrap();
    let stream = socket.connect(addr).await.unwrap();
    exchange(stream, addr, method, path, headers, body).await
}

async fn exchange(
    stream: tokio::net::TcpStream,
    addr: std::net::SocketAddr,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (http::StatusCode, http::HeaderMap, String) {
    use http_body_util::{BodyExt, Full};
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let body = Full::new(bytes::Bytes::copy_from_slice(body.as_bytes()));
    let res = sender.send_request(req.body(body).unwrap()).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

/// What [`ok`] answers.
pub type OkResponse = http::Response<http_body_util::Full<bytes::Bytes>>;

/// A service that answers every request 200 "ok", at once; it may move
/// between threads (a shared capacity asks that of what it wraps).
pub fn ok() -> impl tower::Service<
    http::Request<()>,
    Response = OkResponse,
    Error = std::convert::Infallible,
    Future = std::future::Ready<Result<OkResponse, std::convert::Infallible>>,
> + Clone
       + Send
       + 'static {
    tower::service_fn(|_: http::Request<()>| std::future::ready(Ok(OkResponse::new("ok".into()))))
}

/// The statuses of `n` requests `make` makes, each through a clone of `svc`.
pub async fn statuses<S, Req, ResB>(svc: &S, make: impl Fn() -> Req, n: usize) -> Vec<u16>
where
    S: tower::Service<Req, Response = http::Response<ResB>> + Clone,
    S::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(svc.clone().oneshot(make()).await.unwrap().status().as_u16());
    }
    out
}
