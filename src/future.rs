//! [`ResponseFuture`]: first the backend's decision, then the inner call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use crate::algorithm::Verdict;
use crate::body::ResponseBody;
use crate::headers;
use crate::layer::{OnBackendError, Options};
use crate::observe;
use crate::shaping::Waiting;
use crate::{response, Backend, Decision, Key, Policy};

pin_project! {
    /// The future of a [`RateLimit`](crate::RateLimit) call: it awaits the
    /// backend's decision, then (if allowed) the inner service, then adds the
    /// quota headers. With the memory backend the decision is ready at once.
    pub struct ResponseFuture<S, ReqB, B>
    where
        S: Service<Request<ReqB>>,
        B: Backend,
    {
        #[pin]
        state: State<S, ReqB, B>,
        options: Arc<Options>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, B>
    where
        S: Service<Request<ReqB>>,
        B: Backend,
    {
        Check {
            #[pin]
            check: B::Future,
            pending: Option<Pending<S, ReqB, B>>,
        },
        Wait {
            // Boxed: only shaped requests wait, and every request's future
            // would otherwise carry a timer's worth of bytes.
            sleep: Pin<Box<Sleep>>,
            pending: Option<Pending<S, ReqB, B>>,
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

/// What a request holds while its decision is not yet known.
struct Pending<S, ReqB, B> {
    inner: S,
    req: Request<ReqB>,
    key: Key,
    policy: Policy,
    /// Present when the layer shapes: what it takes to ask again.
    retry: Option<Box<Retry<B>>>,
}

struct Retry<B> {
    backend: B,
    cost: u32,
    deadline: Instant,
    waiting: Option<Waiting>,
}

impl<S, ReqB, B> ResponseFuture<S, ReqB, B>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// Decide with `backend`, then call `inner` if allowed.
    pub(crate) fn check(
        backend: &B,
        key: Key,
        cost: u32,
        inner: S,
        req: Request<ReqB>,
        policy: Policy,
        options: Arc<Options>,
    ) -> Self {
        let check = backend.check(&key, &policy, cost);
        let retry = options.shaping.as_ref().map(|shaping| {
            Box::new(Retry {
                backend: backend.clone(),
                cost,
                deadline: Instant::now() + Duration::from_micros(shaping.max_wait_us),
                waiting: None,
            })
        });
        let pending = Pending {
            inner,
            req,
            key,
            policy,
            retry,
        };
        Self {
            state: State::Check {
                check,
                pending: Some(pending),
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

impl<S, ReqB, ResB, B> Future for ResponseFuture<S, ReqB, B>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    B: Backend,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Check { check, pending } => {
                    let result = ready!(check.poll(cx));
                    let mut p = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let decision = match result {
                        Ok(decision) => decision,
                        Err(error) if this.options.on_backend_error == OnBackendError::Deny => {
                            this.options.failures.backend_failed("deny", &error);
                            let mut response = response::unavailable();
                            headers::write_retry_after(response.headers_mut(), 1_000_000, 0);
                            return Poll::Ready(Ok(response.map(ResponseBody::limiter)));
                        }
                        Err(error) => {
                            this.options.failures.backend_failed("allow", &error);
                            let call = p.inner.call(p.req);
                            this.state.set(State::Call {
                                call,
                                limited: None,
                            });
                            continue;
                        }
                    };
                    if decision.is_allowed() {
                        observe::allowed(&p.policy, &decision);
                        let call = p.inner.call(p.req);
                        let limited = Some((decision, p.policy));
                        this.state.set(State::Call { call, limited });
                        continue;
                    }
                    if let Some(sleep) = wait_for(this.options, &mut p, &decision) {
                        this.state.set(State::Wait {
                            sleep,
                            pending: Some(p),
                        });
                        continue;
                    }
                    observe::limited(&p.key, &p.policy, &decision);
                    let response = limited_response(this.options, &decision, &p.policy);
                    return Poll::Ready(Ok(response.map(ResponseBody::limiter)));
                }
                StateProj::Wait { sleep, pending } => {
                    ready!(sleep.as_mut().poll(cx));
                    let p = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let retry = p.retry.as_ref().expect("only shaped requests wait");
                    let check = retry.backend.check(&p.key, &p.policy, retry.cost);
                    this.state.set(State::Check {
                        check,
                        pending: Some(p),
                    });
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

/// For a shaped request the limit denied: how long to sleep before asking
/// again, if it will fit before its deadline and it may wait.
fn wait_for<S, ReqB, B>(
    options: &Options,
    pending: &mut Pending<S, ReqB, B>,
    decision: &Decision,
) -> Option<Pin<Box<Sleep>>> {
    let (shaping, retry) = (options.shaping.as_ref()?, pending.retry.as_mut()?);
    let Verdict::RetryAfter(after) = decision.verdict() else {
        return None; // can never fit
    };
    if decision.is_capacity_exhausted() {
        return None;
    }
    let wake = Instant::now() + Duration::from_micros(after.get());
    if wake > retry.deadline {
        return None;
    }
    if retry.waiting.is_none() {
        retry.waiting = Some(shaping.enter()?);
    }
    Some(Box::pin(tokio::time::sleep_until(wake)))
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
