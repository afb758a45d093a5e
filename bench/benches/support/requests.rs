//! What the layer benches send: a request per user, a service that answers
//! at once, and a poll that never waits. Shared by `benches/layer.rs` and
//! `benches/instructions`.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{service_fn, Service};

/// Poll `fut` once: the memory backend and `hello` are ready at once, so no
/// runtime is in the measurement.
pub fn now<F: Future>(fut: F) -> F::Output {
    match pin!(fut).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("everything here is ready at once"),
    }
}

/// A GET of `/api` from `user` (`x-user-id`).
pub fn request(user: &str) -> Request<()> {
    Request::get("/api")
        .header("x-user-id", user)
        .body(())
        .unwrap()
}

/// A service answering "ok" at once.
/// `hello`'s answer.
type Answer = Result<Response<Full<Bytes>>, Infallible>;

pub fn hello() -> impl Service<
    Request<()>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = Ready<Answer>,
> + Clone {
    service_fn(|_req: Request<()>| {
        ready(Ok::<_, Infallible>(Response::new(Full::new(
            Bytes::from_static(b"ok"),
        ))))
    })
}
