//! [`ResponseFuture`]: first the backend's decision, then the inner call;
//! it polls what each [`State`] awaits and takes the step `state.rs` says.
//! A request admitted with nothing to finish (no quota headers, nothing to
//! settle, no permit) holds its inner call alone.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::layer::Config;
use super::observe;
use super::state::{Admission, State, StateProj, Step};
use crate::backend::Backend;
use crate::layer::answer::body::ResponseBody;
use crate::layer::answer::body_kind::{BodyKind, OwnBody};
use crate::layer::answer::headers::{self, HeaderStyle};
use crate::layer::answer::RefusedByLimit;
use crate::layer::callee::Callee;
use crate::{Decision, Policy};

pin_project! {
    /// The future of a [`RateLimit`](crate::layer::RateLimit) call: it awaits the
    /// backend's decision, then (if allowed) the inner service, then adds the
    /// quota headers. With the memory backend the decision is ready at once.
    pub struct ResponseFuture<S, ReqB, B, O = OwnBody>
    where
        S: Service<Request<ReqB>>,
        B: Backend,
    {
        #[pin]
        kind: Kind<S, ReqB, B>,
        // The kind of body it answers with.
        body: PhantomData<fn() -> O>,
    }
}

pin_project! {
    // The inner call alone, or the states a request goes through with what
    // finishes its response.
    #[project = KindProj]
    enum Kind<S, ReqB, B>
    where
        S: Service<Request<ReqB>>,
        B: Backend,
    {
        // Called with nothing to finish its response: no quota headers,
        // nothing to settle, no permit.
        Plain {
            #[pin]
            call: S::Future,
        },
        Steps {
            #[pin]
            state: State<S, ReqB, B>,
            // What finishes an admitted request's response.
            admission: Admission<B>,
            config: Arc<Config>,
        },
    }
}

impl<S, ReqB, B, O> ResponseFuture<S, ReqB, B, O>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// The step nearly every request takes: the inner service called
    /// with it, built in the expression that returns the future, so that
    /// the call's future is moved into it once.
    #[inline(always)]
    pub(super) fn call<I>(
        mut inner: I,
        admission: Admission<B>,
        req: Request<ReqB>,
        config: &Arc<Config>,
    ) -> Self
    where
        I: Callee<Service = S>,
    {
        let kind = match admission.needed() {
            None => Kind::Plain {
                call: inner.service().call(req),
            },
            Some(admission) => Kind::Steps {
                state: State::Call {
                    call: inner.service().call(req),
                },
                admission,
                config: Arc::clone(config),
            },
        };
        Self {
            kind,
            body: PhantomData,
        }
    }

    /// The request's first step, taken with it.
    #[inline(always)]
    pub(super) fn new<I>(step: Step<I, B>, req: Request<ReqB>, config: &Arc<Config>) -> Self
    where
        I: Callee<Service = S>,
    {
        match step {
            Step::Call(inner, admission) => Self::call(inner, admission, req, config),
            Step::Respond(response) => Self {
                kind: Kind::Steps {
                    state: State::respond(response),
                    admission: Admission::unlimited(),
                    config: Arc::clone(config),
                },
                body: PhantomData,
            },
            step => {
                let mut admission = Admission::unlimited();
                let state = step.state(req, &mut admission);
                Self {
                    kind: Kind::Steps {
                        state,
                        admission,
                        config: Arc::clone(config),
                    },
                    body: PhantomData,
                }
            }
        }
    }
}

impl<S, ReqB, ResB, B, O> Future for ResponseFuture<S, ReqB, B, O>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    B: Backend,
    O: BodyKind<ResB>,
{
    type Output = Result<Response<O::Body>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (mut state, admission, config) = match self.project().kind.project() {
            KindProj::Plain { call } => {
                return call.poll(cx).map_ok(|response| O::served(response, None));
            }
            KindProj::Steps {
                state,
                admission,
                config,
            } => (state, admission, config),
        };
        loop {
            match state.as_mut().project() {
                StateProj::Check { check, pending } => {
                    let answer = ready!(check.poll(cx));
                    let p = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    state.set(p.answered(config, answer, admission));
                }
                StateProj::Wait { sleep, pending } => {
                    ready!(sleep.as_mut().poll(cx));
                    let parked = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    state.set(parked.ask_again(config));
                }
                StateProj::Delay { sleep, admitted } => {
                    ready!(sleep.as_mut().poll(cx));
                    let admitted = admitted
                        .take()
                        .expect("ResponseFuture polled after completion");
                    state.set((*admitted).call(config, admission));
                }
                StateProj::Call { call } => {
                    // Changed in place and moved once, at the end: a
                    // response is 128 bytes.
                    let mut response = ready!(call.poll(cx))?;
                    if let Some(settling) = admission.settling.take() {
                        match (*settling).by(config, response, &admission.quota) {
                            Ok(settle) => {
                                state.set(settle);
                                continue;
                            }
                            Err(unsettled) => response = unsettled,
                        }
                    }
                    if let Some((decision, policy)) = &admission.quota {
                        quota_headers(config, &mut response, decision, policy);
                    }
                    return Poll::Ready(Ok(O::served(response, admission.permit.take())));
                }
                StateProj::Settle {
                    settle,
                    response,
                    hold,
                } => {
                    let settled = ready!(settle.poll(cx));
                    drop(hold.take());
                    let mut response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    // The state after settling; if that failed, the
                    // reservation stands and the first decision is shown.
                    let settled = match settled {
                        Ok(settled) => Some(settled),
                        Err(error) => {
                            observe::settle_failed(&config.observer, &error);
                            None
                        }
                    };
                    if let Some((first, policy)) = &admission.quota {
                        let decision = settled.as_ref().unwrap_or(first);
                        quota_headers(config, &mut response, decision, policy);
                    }
                    return Poll::Ready(Ok(O::served(response, admission.permit.take())));
                }
                StateProj::Respond { response } => {
                    let response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    return Poll::Ready(Ok(response.map(|b| O::body(ResponseBody::limiter(b)))));
                }
            }
        }
    }
}

/// Whether this response is one of the 1 in 64 of its thread looked at for
/// a request counted twice.
#[inline(always)]
fn counted_twice_sampled() -> bool {
    thread_local! {
        static TICK: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    }
    TICK.with(|tick| {
        let next = tick.get().wrapping_add(1);
        tick.set(next);
        next % 64 == 1
    })
}

/// The quota headers of a served request's `decision`, unless a limit
/// inside refused it.
#[inline(always)]
fn quota_headers<B>(
    config: &Config,
    response: &mut Response<B>,
    decision: &Decision,
    policy: &Policy,
) {
    if config.headers == HeaderStyle::None {
        return;
    }
    // A request an inner layer counted against the same limit: two
    // layers on one route with one named limit. Looked for in one
    // response in 64 of each thread (a lookup of a header a response
    // seldom has costs about 2% of a request); such a setup counts
    // every request twice, so it shows within a few dozen.
    if config.headers != HeaderStyle::Legacy && counted_twice_sampled() {
        if let Some(limit) = headers::counted_inside(response.headers(), policy) {
            observe::counted_twice(&config.observer, limit);
        }
    }
    // A limit inside refused it: its headers say so (remaining 0, its
    // reset, its policy), and this layer's, which did not refuse it,
    // would only contradict them.
    if response.extensions().get::<RefusedByLimit>().is_none() {
        // What was enforced: a local fallback's share while the store
        // is down.
        let policy = decision.decided_on(policy);
        headers::write(response.headers_mut(), config.headers, &policy, decision);
    }
}
