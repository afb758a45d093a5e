//! `Observed`: the service that times each call.

use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response};
use tower_service::Service;

use super::future::ObservedFuture;
use super::limits::Adaptive;
use crate::key::RequestHead;

/// The guarded service, its responses counted ([`Observer`](super::Observer)).
#[derive(Clone, Debug)]
pub struct Observed<S> {
    pub(super) inner: S,
    pub(super) adaptive: Adaptive,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Observed<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ObservedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // Read before the request is handed on: the response has no peer.
        let client = self.adaptive.client_of(&RequestHead::from(&req));
        ObservedFuture {
            call: self.inner.call(req),
            adaptive: Some(self.adaptive.clone()),
            client,
            start: Instant::now(),
        }
    }
}
