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

use super::config::Config;
use super::decide::{decide, Action};
use super::observe;
use super::observe::Fate;
use super::observe::Report;
use super::settle::{Hold, Place, ResponseHead};
use super::shaping::Waiting;
use super::soft_shed::Delayed;
use crate::backend::{Backend, BackendError};
use crate::decision::Origin;
use crate::key::{Key, RequestHead};
use crate::layer::answer::body::ResponseBody;
use crate::layer::answer::permit::{self, Held};
use crate::layer::answer::response::Refused;
use crate::layer::answer::{grpc, headers, response};
use crate::layer::callee::{Callee, Taken};
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
        // Boxed: only a decision that is not known at once (Redis) waits
        // here, and the request it holds would otherwise widen every state.
        Check {
            #[pin]
            check: B::Future,
            pending: Option<Box<Parked<S, ReqB, B>>>,
        },
        Wait {
            sleep: Pin<Box<Sleep>>,
            pending: Option<Box<Parked<S, ReqB, B>>>,
        },
        // Admitted, and soft shed: the call waits first.
        Delay {
            sleep: Pin<Box<Sleep>>,
            admitted: Option<Box<Admitted<S, ReqB, B>>>,
        },
        Call {
            #[pin]
            call: S::Future,
            // The decision and policy to write quota headers from; none
            // when the request is unlimited or its headers are withheld.
            quota: Option<(Decision, Policy)>,
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
            quota: Option<(Decision, Policy)>,
            permit: Option<Held>,
            // The key's place as the one request of unknown cost in
            // flight, given up once settled.
            hold: Option<Box<Hold>>,
        },
        Respond {
            response: Option<Response<Bytes>>,
        },
    }
}

/// What the backend is asked about a request.
pub(super) struct Ask {
    pub(super) key: Key,
    pub(super) policy: Policy,
    pub(super) cost: u32,
    pub(super) report: Report,
}

/// What a request holds until it is called or refused, with the service
/// `I` it is to be called with (see [`Callee`]).
struct Pending<I, ReqB, B> {
    inner: I,
    req: Request<ReqB>,
    ask: Ask,
    backend_name: &'static str,
    /// The backend, kept when the request may ask it again: to retry
    /// (shaping), to settle, or to renew and give back a permit.
    backend: Option<B>,
    /// Present when the layer shapes: how long it may wait.
    retry: Option<Box<Retry>>,
    /// Whether the request was banned and is now asked about under the
    /// layer's demoted policy.
    demoted: bool,
    /// Its key's place as the one request of unknown cost in flight, when
    /// the layer settles requests that may cost more than they reserve.
    place: Place,
}

/// A request that waits (for a decision still to come, or to be called)
/// with a ready copy of the inner service.
type Parked<S, ReqB, B> = Pending<Taken<S>, ReqB, B>;

impl<I, ReqB, B> Pending<I, ReqB, B>
where
    I: Callee,
    I::Service: Service<Request<ReqB>>,
    B: Backend,
{
    /// A request to be decided by `backend`, kept when it `asks_again`.
    #[inline(always)]
    fn new(
        inner: I,
        req: Request<ReqB>,
        ask: Ask,
        backend: &B,
        asks_again: bool,
        (retry, place): (Option<Box<Retry>>, Place),
    ) -> Self {
        Pending {
            inner,
            req,
            ask,
            backend_name: backend.name(),
            backend: asks_again.then(|| backend.clone()),
            retry,
            demoted: false,
            place,
        }
    }

    /// The request, to wait with a service of its own.
    fn parked(self) -> Parked<I::Service, ReqB, B> {
        Pending {
            inner: self.inner.take(),
            req: self.req,
            ask: self.ask,
            backend_name: self.backend_name,
            backend: self.backend,
            retry: self.retry,
            demoted: self.demoted,
            place: self.place,
        }
    }

    /// Call the inner service with the request, told its `origin`. A
    /// `counted` admission holds its permit (from before the call, so that a
    /// call that fails or is dropped gives it back too) and is settled by
    /// its response; `headers` says whether the decision is shown in quota
    /// headers.
    #[inline(always)]
    fn call(
        mut self,
        config: &Config,
        decision: Option<Decision>,
        origin: Origin,
        counted: bool,
        headers: bool,
    ) -> State<I::Service, ReqB, B> {
        mark(self.req.extensions_mut(), origin);
        let Ask {
            key, policy, cost, ..
        } = self.ask;
        let backend = self.backend.filter(|_| counted);
        let permit = match (decision.as_ref().and_then(Decision::permit), &backend) {
            (Some(name), Some(backend)) => Some(permit::hold(backend, &key, &policy, cost, name)),
            _ => None,
        };
        let call = self.inner.service().call(self.req);
        let settling = match (&config.settlement, backend) {
            (Some(_), Some(backend)) => Some(Box::new(Settling {
                backend,
                key,
                reserved: cost,
                hold: self.place.take_hold(),
            })),
            _ => None,
        };
        State::Call {
            call,
            quota: decision.filter(|_| headers).map(|d| (d, policy)),
            settling,
            permit,
        }
    }

    /// What becomes of the request once the backend's `answer` is known:
    /// the next state of its future (for a refusal, the response to send).
    #[inline(always)]
    fn answered(
        mut self,
        config: &Config,
        answer: Result<Decision, BackendError>,
    ) -> State<I::Service, ReqB, B> {
        // A key its penalty box banned, with a demoted policy to live by
        // meanwhile: asked again under it.
        if let (Ok(decision), Some(demoted), Some(backend), false) =
            (&answer, &config.demotion, &self.backend, self.demoted)
        {
            if decision.is_banned() {
                self.demoted = true;
                self.ask.policy = demoted.clone();
                let cost = self.place.cost(self.ask.cost);
                let check = backend.check(&self.ask.key, &self.ask.policy, cost);
                return State::Check {
                    check,
                    pending: Some(Box::new(self.parked())),
                };
            }
        }
        // Held back behind another request of unknown cost of its key:
        // asked at cost 0, and refused whatever the store said.
        let answer = match self.place.is_behind() {
            true => answer.map(|d| Place::refuse_behind(d, &self.ask.policy)),
            false => answer,
        };
        let in_shadow = self.ask.policy.is_shadow();
        let retry = &mut self.retry;
        let action = decide(config.rules(), in_shadow, answer, |decision| {
            let (shaping, retry) = (config.shaping.as_ref()?, retry.as_mut()?);
            shaping.wait_for(decision, retry.deadline, &mut retry.waiting)
        });
        // Soft shedding: an admission near the limit waits.
        let delay = match &action {
            Action::Admit {
                decision,
                counted: true,
                ..
            } => config
                .soft_shed
                .as_ref()
                .and_then(|s| s.delay_for(decision)),
            _ => None,
        };
        if let Some((decision, fate)) = action.reported() {
            let fate = if delay.is_some() { Fate::Delayed } else { fate };
            let Ask {
                key,
                policy,
                report,
                ..
            } = &self.ask;
            observe::decided(
                &config.observer,
                (key, policy, report),
                self.backend_name,
                decision,
                fate,
            );
        }
        match action {
            Action::Wait(sleep) => State::Wait {
                sleep,
                pending: Some(Box::new(self.parked())),
            },
            Action::Admit {
                decision,
                origin,
                counted,
                headers,
            } => match delay {
                Some(delay) => {
                    self.req.extensions_mut().insert(Delayed(delay));
                    State::Delay {
                        sleep: Box::pin(tokio::time::sleep(delay)),
                        admitted: Some(Box::new(Admitted {
                            pending: self.parked(),
                            decision,
                            origin,
                            headers,
                        })),
                    }
                }
                None => self.call(config, Some(decision), origin, counted, headers),
            },
            Action::FailOpen(error) => {
                observe::backend_failed(&config.observer, &self.ask.report, "allow", &error);
                let origin = Origin::FailedOpen {
                    breaker_open: error.is_breaker_open(),
                };
                self.call(config, None, origin, false, false)
            }
            Action::Refuse(decision) => {
                let refused = Refused {
                    decision: &decision,
                    policy: &self.ask.policy,
                    key: &self.ask.key,
                    request: &RequestHead::from(&self.req),
                };
                let mut response =
                    config
                        .limited
                        .respond(&refused, config.headers, config.retry_jitter);
                mark(response.extensions_mut(), decision.origin());
                self.refuse(response)
            }
            Action::FailClosed(error) => {
                observe::backend_failed(&config.observer, &self.ask.report, "deny", &error);
                let mut response = response::unavailable();
                response.extensions_mut().insert(Origin::FailedClosed {
                    breaker_open: error.is_breaker_open(),
                });
                self.refuse(response)
            }
        }
    }

    /// Answer with the limiter's own refusal (a gRPC status for a gRPC
    /// request: looked at only when refusing).
    #[inline(always)]
    fn refuse(self, response: Response<Bytes>) -> State<I::Service, ReqB, B> {
        State::respond(response, grpc::is_grpc(self.req.headers()))
    }
}

/// An admitted request waiting to be called (soft shedding).
struct Admitted<S, ReqB, B> {
    pending: Parked<S, ReqB, B>,
    decision: Decision,
    origin: Origin,
    headers: bool,
}

/// Mark a request or response with how it was decided, unless the store
/// did: no mark means [`Origin::Primary`] (see [`Origin::of`]), which
/// spares the commonest request the extension map's allocations.
#[inline]
fn mark(extensions: &mut http::Extensions, origin: Origin) {
    if origin != Origin::Primary {
        extensions.insert(origin);
    }
}

/// What settling an admitted request by its response takes.
struct Settling<B> {
    backend: B,
    key: Key,
    reserved: u32,
    hold: Option<Box<Hold>>,
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
    /// Decide with `backend`, then call `inner` (ready) if allowed: at
    /// once when the decision is, otherwise with a ready copy taken from
    /// it.
    pub(super) fn check(
        backend: &B,
        ask: Ask,
        inner: &mut S,
        req: Request<ReqB>,
        config: Arc<Config>,
    ) -> Self
    where
        S: Clone,
    {
        let in_flight = ask.policy.limits().iter().any(|l| l.is_concurrent());
        let place = Place::of(config.settlement.as_ref(), &ask.key, &ask.policy);
        let mut check = backend.check(&ask.key, &ask.policy, place.cost(ask.cost));
        let retry = config.shaping.as_ref().map(|shaping| {
            Box::new(Retry {
                deadline: Instant::now() + shaping.max_wait,
                waiting: None,
            })
        });
        let asks_again = retry.is_some()
            || config.settlement.is_some()
            || config.demotion.is_some()
            || in_flight;
        // The request is put in place once on either path: a `Pending`
        // built before the branch is moved again into the one taken (a
        // copy of a few hundred bytes a request).
        let state = match B::answer_now(&mut check) {
            Some(answer) => Pending::new(inner, req, ask, backend, asks_again, (retry, place))
                .answered(&config, answer),
            None => {
                let inner = Callee::take(inner);
                let pending = Pending::new(inner, req, ask, backend, asks_again, (retry, place));
                State::Check {
                    check,
                    pending: Some(Box::new(pending)),
                }
            }
        };
        Self { state, config }
    }

    pub(super) fn unlimited(call: S::Future, config: Arc<Config>) -> Self {
        Self {
            state: State::Call {
                call,
                quota: None,
                settling: None,
                permit: None,
            },
            config,
        }
    }

    /// Answer with the limiter's own `response` (as a gRPC status for a
    /// gRPC request).
    pub(super) fn respond(response: Response<Bytes>, grpc: bool, config: Arc<Config>) -> Self {
        Self {
            state: State::respond(response, grpc),
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
                    let answer = ready!(check.poll(cx));
                    let p = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let state = p.answered(this.config, answer);
                    this.state.set(state);
                }
                StateProj::Wait { sleep, pending } => {
                    ready!(sleep.as_mut().poll(cx));
                    let mut p = pending
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let backend = p.backend.as_ref().expect("only shaped requests wait");
                    let Ask {
                        key, policy, cost, ..
                    } = &p.ask;
                    // A request held back behind another of its key's asks
                    // for the key's place again.
                    if p.place.is_behind() {
                        p.place = Place::of(this.config.settlement.as_ref(), key, policy);
                    }
                    let check = backend.check(key, policy, p.place.cost(*cost));
                    this.state.set(State::Check {
                        check,
                        pending: Some(p),
                    });
                }
                StateProj::Delay { sleep, admitted } => {
                    ready!(sleep.as_mut().poll(cx));
                    let a = admitted
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let state =
                        a.pending
                            .call(this.config, Some(a.decision), a.origin, true, a.headers);
                    this.state.set(state);
                }
                StateProj::Call {
                    call,
                    quota,
                    settling,
                    permit,
                } => {
                    let response = ready!(call.poll(cx))?;
                    // A request settled at what it reserved gives up its
                    // key's place now; one with a difference, once settled.
                    let settle = settling.take().and_then(|s| {
                        let settlement = this.config.settlement.as_ref()?;
                        let actual =
                            settlement.actual(&ResponseHead::from(&response), s.reserved)?;
                        let (_, policy) = quota.as_ref()?;
                        let settle = s.backend.settle(&s.key, policy, s.reserved, actual);
                        Some((settle, s.hold))
                    });
                    if let Some((settle, hold)) = settle {
                        let (quota, permit) = (quota.take(), permit.take());
                        this.state.set(State::Settle {
                            settle,
                            response: Some(response),
                            quota,
                            permit,
                            hold,
                        });
                        continue;
                    }
                    let quota = quota.as_ref().map(|(d, p)| (d, p));
                    return Poll::Ready(Ok(finish(this.config, response, quota, permit.take())));
                }
                StateProj::Settle {
                    settle,
                    response,
                    quota,
                    permit,
                    hold,
                } => {
                    let settled = ready!(settle.poll(cx));
                    drop(hold.take());
                    let response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    // The state after settling; if that failed, the
                    // reservation stands and the first decision is shown.
                    let settled = match settled {
                        Ok(settled) => Some(settled),
                        Err(error) => {
                            observe::settle_failed(&this.config.observer, &error);
                            None
                        }
                    };
                    let quota = quota
                        .as_ref()
                        .map(|(first, policy)| (settled.as_ref().unwrap_or(first), policy));
                    return Poll::Ready(Ok(finish(this.config, response, quota, permit.take())));
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

/// The one tail of every served request: its quota headers (if it has a
/// decision to show) and a body that holds its permit until it ends.
fn finish<B>(
    config: &Config,
    mut response: Response<B>,
    quota: Option<(&Decision, &Policy)>,
    permit: Option<Held>,
) -> Response<ResponseBody<B>> {
    if let Some((decision, policy)) = quota {
        headers::write(response.headers_mut(), config.headers, policy, decision);
    }
    response.map(|b| ResponseBody::holding(b, permit))
}

impl<S, ReqB, B> State<S, ReqB, B>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// Answer with the limiter's own `response`, as a gRPC status for a
    /// gRPC request (looked at only when refusing, never on an admission).
    #[inline(always)]
    fn respond(response: Response<Bytes>, grpc: bool) -> Self {
        let response = if grpc {
            grpc::refusal(response)
        } else {
            response
        };
        State::Respond {
            response: Some(response),
        }
    }
}
