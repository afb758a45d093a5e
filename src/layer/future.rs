//! [`ResponseFuture`]: first the backend's decision, then the inner call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::body::ResponseBody;
use super::config::Config;
use super::config::Shadow;
use super::observe::{Fate, Report};
use super::permit::{self, Held};
use super::settle::ResponseHead;
use super::shaping::Waiting;
use super::{grpc, headers, observe, response};
use crate::backend::Backend;
use crate::backend::OnBackendError;
use crate::decision::Origin;
use crate::key::Key;
use crate::{Decision, Policy};

pin_project! {
    /// The future of a [`RateLimit`](crate::layer::RateLimit) call: it awaits the
    /// backend's decision, then (if allowed) the inner service, then adds the
    /// quota headers. With the memory backend the decision is ready at once.
    pub struct ResponseFuture<S, ReqB, B>
    where
        S: Service<Request<ReqB>>,
        B: Backend,
    {
        #[pin]
        state: State<S, ReqB, B>,
        config: Arc<Config>,
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
            sleep: Pin<Box<Sleep>>,
            pending: Option<Pending<S, ReqB, B>>,
        },
        Call {
            #[pin]
            call: S::Future,
            // The decision and policy to render headers from; none when unlimited.
            limited: Option<(Decision, Policy)>,
            // What settling the request by its response takes, when the
            // layer settles and the request was counted.
            settling: Option<Box<Settling<B>>>,
            // A permit of a limit of requests in flight, for the body.
            permit: Option<Held>,
        },
        Settle {
            #[pin]
            settle: B::Future,
            response: Option<S::Response>,
            limited: Option<(Decision, Policy)>,
            permit: Option<Held>,
        },
        Respond {
            response: Option<Response<Bytes>>,
        },
    }
}

/// What the backend is asked about a request.
pub(crate) struct Checked {
    pub(crate) key: Key,
    pub(crate) policy: Policy,
    pub(crate) cost: u32,
    pub(crate) report: Report,
}

/// What a request holds while its decision is not yet known.
struct Pending<S, ReqB, B> {
    inner: S,
    req: Request<ReqB>,
    checked: Checked,
    backend: &'static str,
    /// The backend, kept when the request may ask it again: to retry
    /// (shaping), to settle, or to renew and give back a permit.
    again: Option<B>,
    /// Present when the layer shapes: how long it may wait.
    retry: Option<Box<Retry>>,
}

/// What settling an admitted request by its response takes.
struct Settling<B> {
    backend: B,
    key: Key,
    reserved: u32,
}

struct Retry {
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
        checked: Checked,
        inner: S,
        req: Request<ReqB>,
        config: Arc<Config>,
    ) -> Self {
        let in_flight = checked.policy.limits().iter().any(|l| l.is_concurrent());
        let check = backend.check(&checked.key, &checked.policy, checked.cost);
        let retry = config.shaping.as_ref().map(|shaping| {
            Box::new(Retry {
                deadline: Instant::now() + shaping.max_wait,
                waiting: None,
            })
        });
        let again = retry.is_some() || config.settlement.is_some() || in_flight;
        let pending = Pending {
            inner,
            req,
            checked,
            backend: backend.name(),
            again: again.then(|| backend.clone()),
            retry,
        };
        Self {
            state: State::Check {
                check,
                pending: Some(pending),
            },
            config,
        }
    }

    pub(crate) fn unlimited(call: S::Future, config: Arc<Config>) -> Self {
        Self {
            state: State::Call {
                call,
                limited: None,
                settling: None,
                permit: None,
            },
            config,
        }
    }

    /// Answer with the limiter's own `response` (as a gRPC status for a
    /// gRPC request).
    pub(crate) fn respond(response: Response<Bytes>, grpc: bool, config: Arc<Config>) -> Self {
        Self {
            state: State::Respond {
                response: Some(limiters(response, grpc)),
            },
            config,
        }
    }
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
                        Err(error) if this.config.on_backend_error == OnBackendError::Deny => {
                            observe::backend_failed(
                                &this.config.observer,
                                &p.checked.report,
                                "deny",
                                &error,
                            );
                            let mut response = response::unavailable();
                            response.extensions_mut().insert(Origin::FailedClosed {
                                breaker_open: error.is_breaker_open(),
                            });
                            return Poll::Ready(Ok(answer(
                                response,
                                grpc::is_grpc(p.req.headers()),
                            )));
                        }
                        Err(error) => {
                            observe::backend_failed(
                                &this.config.observer,
                                &p.checked.report,
                                "allow",
                                &error,
                            );
                            p.req.extensions_mut().insert(Origin::FailedOpen {
                                breaker_open: error.is_breaker_open(),
                            });
                            let call = p.inner.call(p.req);
                            this.state.set(State::Call {
                                call,
                                limited: None,
                                settling: None,
                                permit: None,
                            });
                            continue;
                        }
                    };
                    let fate = if decision.is_allowed() {
                        Fate::Allowed
                    } else if this.config.shadow != Shadow::Off || p.checked.policy.is_shadow() {
                        Fate::Shadowed
                    } else if let Some(sleep) = wait_for(this.config, &mut p, &decision) {
                        this.state.set(State::Wait {
                            sleep,
                            pending: Some(p),
                        });
                        continue;
                    } else {
                        Fate::Limited
                    };
                    let Checked {
                        key,
                        policy,
                        report,
                        ..
                    } = &p.checked;
                    observe::decided(
                        &this.config.observer,
                        (key, policy, report),
                        p.backend,
                        &decision,
                        fate,
                    );
                    let (decided, limited) = match fate {
                        Fate::Allowed => (decision.origin(), true),
                        // A dry run: reported as a denial, never enforced.
                        Fate::Shadowed => (
                            Origin::Shadow,
                            this.config.shadow == Shadow::DryRunWithHeaders,
                        ),
                        Fate::Limited => {
                            let config = &this.config;
                            let mut response = config.limited.respond(
                                &decision,
                                &p.checked.policy,
                                config.headers,
                                config.retry_jitter,
                            );
                            response.extensions_mut().insert(decision.origin());
                            return Poll::Ready(Ok(answer(
                                response,
                                grpc::is_grpc(p.req.headers()),
                            )));
                        }
                    };
                    p.req.extensions_mut().insert(decided);
                    // Held from before the call, so that a call that fails
                    // or is dropped gives it back too.
                    let permit = match (fate, decision.permit(), &p.again) {
                        (Fate::Allowed, Some(name), Some(backend)) => Some(permit::hold(
                            backend,
                            &p.checked.key,
                            &p.checked.policy,
                            p.checked.cost,
                            name,
                        )),
                        _ => None,
                    };
                    let call = p.inner.call(p.req);
                    // Only a request that was counted is settled.
                    let settles = this.config.settlement.is_some();
                    let settling = match (fate, settles, p.again) {
                        (Fate::Allowed, true, Some(backend)) => Some(Box::new(Settling {
                            backend,
                            key: p.checked.key,
                            reserved: p.checked.cost,
                        })),
                        _ => None,
                    };
                    let limited = limited.then_some((decision, p.checked.policy));
                    this.state.set(State::Call {
                        call,
                        limited,
                        settling,
                        permit,
                    });
                }
                StateProj::Wait { sleep, pending } => {
                    ready!(sleep.as_mut().poll(cx));
                    let p = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let backend = p.again.as_ref().expect("only shaped requests wait");
                    let Checked {
                        key, policy, cost, ..
                    } = &p.checked;
                    let check = backend.check(key, policy, *cost);
                    this.state.set(State::Check {
                        check,
                        pending: Some(p),
                    });
                }
                StateProj::Call {
                    call,
                    limited,
                    settling,
                    permit,
                } => {
                    let mut response = ready!(call.poll(cx))?;
                    let settle = settling.take().and_then(|s| {
                        let settlement = this.config.settlement.as_ref()?;
                        let actual =
                            settlement.actual(&ResponseHead::from(&response), s.reserved)?;
                        let (_, policy) = limited.as_ref()?;
                        Some(s.backend.settle(&s.key, policy, s.reserved, actual))
                    });
                    if let Some(settle) = settle {
                        let (limited, permit) = (limited.take(), permit.take());
                        this.state.set(State::Settle {
                            settle,
                            response: Some(response),
                            limited,
                            permit,
                        });
                        continue;
                    }
                    if let Some((decision, policy)) = limited {
                        headers::write(
                            response.headers_mut(),
                            this.config.headers,
                            policy,
                            decision,
                        );
                    }
                    let permit = permit.take();
                    return Poll::Ready(Ok(response.map(|b| ResponseBody::holding(b, permit))));
                }
                StateProj::Settle {
                    settle,
                    response,
                    limited,
                    permit,
                } => {
                    let settled = ready!(settle.poll(cx));
                    let mut response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    if let Some((decision, policy)) = limited {
                        // The state after settling; if that failed, the
                        // reservation stands and the first decision is shown.
                        let decision = match settled {
                            Ok(settled) => settled,
                            Err(error) => {
                                observe::settle_failed(&this.config.observer, &error);
                                *decision
                            }
                        };
                        headers::write(
                            response.headers_mut(),
                            this.config.headers,
                            policy,
                            &decision,
                        );
                    }
                    let permit = permit.take();
                    return Poll::Ready(Ok(response.map(|b| ResponseBody::holding(b, permit))));
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

/// The limiter's own answer, as a gRPC status for a gRPC request (looked
/// at only when refusing, never on an admission).
fn limiters(response: Response<Bytes>, grpc: bool) -> Response<Bytes> {
    if grpc {
        grpc::refusal(response)
    } else {
        response
    }
}

fn answer<B>(response: Response<Bytes>, grpc: bool) -> Response<ResponseBody<B>> {
    limiters(response, grpc).map(ResponseBody::limiter)
}

/// For a shaped request the limit denied: how long to sleep before asking
/// again, if it may wait.
fn wait_for<S, ReqB, B>(
    config: &Config,
    pending: &mut Pending<S, ReqB, B>,
    decision: &Decision,
) -> Option<Pin<Box<Sleep>>> {
    let (shaping, retry) = (config.shaping.as_ref()?, pending.retry.as_mut()?);
    shaping.wait_for(decision, retry.deadline, &mut retry.waiting)
}
