//! [`ResponseFuture`]: first the backend's decision, then the inner call.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::decide::{mark, Refusal, Spent};
use super::layer::Config;
use super::observe;
use super::pending::{Admitted, Ask, Parked, Pending, Retry, Settling};
use super::settle::{Hold, Place, ResponseHead};
use crate::backend::Backend;
use crate::decision::Origin;
use crate::layer::answer::body::ResponseBody;
use crate::layer::answer::body_kind::{BodyKind, OwnBody};
use crate::layer::answer::headers::{self, HeaderStyle};
use crate::layer::answer::permit::Held;
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
        state: State<S, ReqB, B>,
        config: Arc<Config>,
        // The kind of body it answers with.
        body: PhantomData<fn() -> O>,
    }
}

pin_project! {
    #[project = StateProj]
    pub(super) enum State<S, ReqB, B>
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

impl<S, ReqB, B> State<S, ReqB, B>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// Call the inner service without a decision: no quota headers, no
    /// permit, nothing to settle.
    pub(super) fn unlimited(call: S::Future) -> Self {
        State::Call {
            call,
            quota: None,
            settling: None,
            permit: None,
        }
    }
}

/// What the service knows of a request when its future starts.
pub(super) enum Start {
    /// Ask the backend.
    Check(Ask),
    /// Call the inner service unlimited, marked with how it got there (an
    /// allow-listed client, no policy or no key, let through).
    Pass(Origin),
    /// Refuse at once (a deny-listed client, no policy or no key, refused).
    Refuse(Refusal),
}

impl<S, ReqB, B, O> ResponseFuture<S, ReqB, B, O>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// The one entry: a request the service has looked at, with the ready
    /// inner service. A decision known at once is acted on here; one still
    /// to come waits in `Check` with a ready copy taken from `inner`.
    #[inline(always)]
    pub(super) fn new(
        backend: &B,
        start: Start,
        inner: &mut S,
        mut req: Request<ReqB>,
        config: Arc<Config>,
    ) -> Self
    where
        S: Clone,
    {
        let ask = match start {
            Start::Check(ask) => ask,
            Start::Pass(origin) => {
                mark(req.extensions_mut(), origin);
                let state = State::unlimited(inner.call(req));
                return Self::at(state, config);
            }
            Start::Refuse(refusal) => {
                let state = State::respond(refusal.response(config.refusals(), &req, None));
                return Self::at(state, config);
            }
        };
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
        // A `Pending` is built on each path, not once before the branch:
        // moved into the branch taken, it would be copied again.
        let state = match B::answer_now(&mut check) {
            Some(answer) => Pending::new(inner, ask, backend, asks_again, (retry, place))
                .answered(req, &config, answer),
            None => {
                let inner = Callee::take(inner);
                let pending = Pending::new(inner, ask, backend, asks_again, (retry, place));
                State::Check {
                    check,
                    pending: Some(Box::new(Parked { pending, req })),
                }
            }
        };
        Self::at(state, config)
    }

    #[inline(always)]
    fn at(state: State<S, ReqB, B>, config: Arc<Config>) -> Self {
        Self {
            state,
            config,
            body: PhantomData,
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
                    let waiting = &mut p.pending;
                    let backend = waiting.backend.as_ref().expect("only shaped requests wait");
                    let Ask {
                        key, policy, cost, ..
                    } = &waiting.ask;
                    // A request held back behind another of its key's asks
                    // for the key's place again.
                    if waiting.place.is_behind() {
                        waiting.place = Place::of(this.config.settlement.as_ref(), key, policy);
                    }
                    let check = backend.check(key, policy, waiting.place.cost(*cost));
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
                    let Parked { pending, req } = a.pending;
                    let state = pending.call(
                        req,
                        this.config,
                        Some(a.decision),
                        a.origin,
                        Spent::Counted,
                        a.headers,
                    );
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
                    return Poll::Ready(Ok(finish::<_, O>(
                        this.config,
                        response,
                        quota,
                        permit.take(),
                    )));
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
                    return Poll::Ready(Ok(finish::<_, O>(
                        this.config,
                        response,
                        quota,
                        permit.take(),
                    )));
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

/// The one tail of every served request: its quota headers (if it has a
/// decision to show) and a body that holds its permit until it ends.
#[inline(always)]
fn finish<B, O: BodyKind<B>>(
    config: &Config,
    mut response: Response<B>,
    quota: Option<(&Decision, &Policy)>,
    permit: Option<Held>,
) -> Response<O::Body> {
    if let Some((decision, policy)) = quota {
        // A request an inner layer counted against the same limit: two
        // layers on one route with one named limit. Looked for in one
        // response in 64 of each thread (a lookup of a header a response
        // seldom has costs about 2% of a request); such a setup counts
        // every request twice, so it shows within a few dozen.
        if counted_twice_sampled()
            && !matches!(config.headers, HeaderStyle::None | HeaderStyle::Legacy)
        {
            if let Some(limit) = headers::counted_inside(response.headers(), policy) {
                observe::counted_twice(&config.observer, limit);
            }
        }
        // What was enforced: a local fallback's share while the store is
        // down.
        let policy = decision.decided_on(policy);
        headers::write(response.headers_mut(), config.headers, &policy, decision);
    }
    response.map(|b| O::body(ResponseBody::holding(b, permit)))
}

impl<S, ReqB, B> State<S, ReqB, B>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// Answer with the limiter's own `response`.
    #[inline(always)]
    pub(super) fn respond(response: Response<Bytes>) -> Self {
        State::Respond {
            response: Some(response),
        }
    }
}
