//! [`ResponseFuture`]: first the backend's decision, then the inner call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::headers;
use crate::layer::{OnBackendError, Options};
use crate::{response, BackendError, Decision, Policy};

pin_project! {
    /// The future of a [`RateLimit`](crate::RateLimit) call: it awaits the
    /// backend's decision, then (if allowed) the inner service, then adds the
    /// quota headers. With the memory backend the decision is ready at once.
    pub struct ResponseFuture<S, ReqB, F>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S, ReqB, F>,
        options: Arc<Options>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, F>
    where
        S: Service<Request<ReqB>>,
    {
        Check {
            #[pin]
            check: F,
            pending: Option<(S, Request<ReqB>)>,
            policy: Policy,
        },
        Call {
            #[pin]
            call: S::Future,
            // The decision and policy to render headers from; none when unlimited.
            limited: Option<(Decision, Policy)>,
        },
        Respond {
            response: Option<Response<Bytes>>,
        },
    }
}

impl<S, ReqB, F> ResponseFuture<S, ReqB, F>
where
    S: Service<Request<ReqB>>,
{
    pub(crate) fn check(
        check: F,
        inner: S,
        req: Request<ReqB>,
        policy: Policy,
        options: Arc<Options>,
    ) -> Self {
        Self {
            state: State::Check {
                check,
                pending: Some((inner, req)),
                policy,
            },
            options,
        }
    }

    pub(crate) fn unlimited(call: S::Future, options: Arc<Options>) -> Self {
        Self {
            state: State::Call {
                call,
                limited: None,
            },
            options,
        }
    }

    pub(crate) fn respond(response: Response<Bytes>, options: Arc<Options>) -> Self {
        Self {
            state: State::Respond {
                response: Some(response),
            },
            options,
        }
    }
}

fn now_unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl<S, ReqB, ResB, F> Future for ResponseFuture<S, ReqB, F>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    F: Future<Output = Result<Decision, BackendError>>,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Check {
                    check,
                    pending,
                    policy,
                } => {
                    let result = ready!(check.poll(cx));
                    let (mut inner, req) = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let limited = match result {
                        Ok(decision) if decision.is_allowed() => Some((decision, policy.clone())),
                        Ok(decision) => {
                            let response = limited_response(this.options, &decision, policy);
                            return Poll::Ready(Ok(response.map(ResponseBody::limiter)));
                        }
                        Err(_) if this.options.on_backend_error == OnBackendError::Deny => {
                            let mut response = response::unavailable();
                            headers::write_retry_after(response.headers_mut(), 1_000_000, 0);
                            return Poll::Ready(Ok(response.map(ResponseBody::limiter)));
                        }
                        Err(_) => None,
                    };
                    let call = inner.call(req);
                    this.state.set(State::Call { call, limited });
                }
                StateProj::Call { call, limited } => {
                    let mut response = ready!(call.poll(cx))?;
                    if let Some((decision, policy)) = limited {
                        headers::write(
                            response.headers_mut(),
                            this.options.headers,
                            policy,
                            decision,
                            now_unix_us(),
                        );
                    }
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
                StateProj::Respond { response } => {
                    let response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    return Poll::Ready(Ok(response.map(ResponseBody::limiter)));
                }
            }
        }
    }
}

/// The 429 (or custom answer) for a denied request, with quota headers.
fn limited_response(options: &Options, decision: &Decision, policy: &Policy) -> Response<Bytes> {
    let mut response = options.limited.render(decision, policy);
    headers::write(
        response.headers_mut(),
        options.headers,
        policy,
        decision,
        now_unix_us(),
    );
    if let Some(retry) = decision.retry_after() {
        headers::write_retry_after(
            response.headers_mut(),
            retry.as_micros() as u64,
            options.retry_jitter_us,
        );
    }
    response
}
