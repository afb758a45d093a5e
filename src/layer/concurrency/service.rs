//! `ConcurrencyLimited`: the service that takes a place before each call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::layer::AdaptiveConcurrency;
use crate::layer::answer::body::ResponseBody;

/// The service an [`AdaptiveConcurrency`] wraps.
#[derive(Clone, Debug)]
pub struct ConcurrencyLimited<S> {
    pub(super) inner: S,
    pub(super) limiter: AdaptiveConcurrency,
}

/// The future of a [`ConcurrencyLimited`] call.
pub type ConcurrencyFuture<ResB, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<ResB>>, E>> + Send>>;

impl<S, ReqB, ResB> Service<Request<ReqB>> for ConcurrencyLimited<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    ReqB: Send + 'static,
    ResB: 'static,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ConcurrencyFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.limiter.clone();
        let class = limiter.class_of(&crate::key::RequestHead::from(&req));
        Box::pin(async move {
            let Some(mut place) = limiter.enter(class).await else {
                return Ok(overloaded());
            };
            let response = inner.call(req).await;
            place.done = Some(match &response {
                Ok(response) => response.status().is_server_error(),
                Err(_) => true,
            });
            drop(place);
            response.map(|r| r.map(|b| ResponseBody::holding(b, None)))
        })
    }
}

/// The answer over the limit: the service is overloaded.
fn overloaded<B>() -> Response<ResponseBody<B>> {
    let body = Bytes::from_static(br#"{"error":"overloaded","detail":"the service is at its limit of requests in flight; try again shortly"}"#);
    let mut response = Response::new(ResponseBody::limiter(body));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
