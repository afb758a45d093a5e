//! One request's way from the service's `call` to its response: the states
//! of its [`ResponseFuture`](super::ResponseFuture) ([`State`]) and every
//! step between them. What the backend is asked ([`Ask`]), what the request
//! holds while it waits ([`Pending`]), what becomes of it once the answer is
//! known ([`Pending::answered`], carrying out an [`Action`]), and what its
//! response settles ([`Settling`]). `future.rs` polls what each state
//! awaits and takes the step this file says.

use std::pin::Pin;

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::decide::{decide, mark, Action, QuotaHeaders, Refusal, Spent};
use super::layer::Config;
use super::observe::{self, Fate, Report};
use super::settle::{Hold, Place, ResponseHead};
use super::shaping::Waiting;
use super::soft_shed::Delayed;
use crate::backend::{Backend, BackendError};
use crate::decision::Origin;
use crate::key::Key;
use crate::layer::answer::permit::{self, Held};
use crate::layer::callee::{Callee, Taken};
use crate::{Decision, Policy};

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

    /// Answer with the limiter's own `response`.
    #[inline(always)]
    pub(super) fn respond(response: Response<Bytes>) -> Self {
        State::Respond {
            response: Some(response),
        }
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
/// `I` it is to be called with (see [`Callee`]). The request itself is
/// passed beside it, not kept in it: a request decided at once goes to the
/// inner service without being moved in and out (a few hundred bytes).
pub(super) struct Pending<I, B> {
    pub(super) inner: I,
    pub(super) ask: Ask,
    pub(super) backend_name: &'static str,
    /// The backend, kept when the request may ask it again: to retry
    /// (shaping), to settle, or to renew and give back a permit.
    pub(super) backend: Option<B>,
    /// Present when the layer shapes: how long it may wait.
    pub(super) retry: Option<Box<Retry>>,
    /// Whether the request was banned and is now asked about under the
    /// layer's demoted policy.
    pub(super) demoted: bool,
    /// Its key's place as the one request of unknown cost in flight, when
    /// the layer settles requests that may cost more than they reserve.
    pub(super) place: Place,
}

/// A request that waits (for a decision still to come, or to be called)
/// with a ready copy of the inner service.
pub(super) struct Parked<S, ReqB, B> {
    pub(super) pending: Pending<Taken<S>, B>,
    pub(super) req: Request<ReqB>,
}

impl<S, ReqB, B> Parked<S, ReqB, B>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// What becomes of the request once the backend's `answer` is known.
    pub(super) fn answered(
        self,
        config: &Config,
        answer: Result<Decision, BackendError>,
    ) -> State<S, ReqB, B> {
        self.pending.answered(self.req, config, answer)
    }

    /// A shaped request whose wait is over asks again; one held back behind
    /// another of its key's asks for the key's place again.
    pub(super) fn ask_again(mut self: Box<Self>, config: &Config) -> State<S, ReqB, B> {
        let waiting = &mut self.pending;
        let backend = waiting.backend.as_ref().expect("only shaped requests wait");
        let Ask {
            key, policy, cost, ..
        } = &waiting.ask;
        if waiting.place.is_behind() {
            waiting.place = Place::of(config.settlement.as_ref(), key, policy);
        }
        let check = backend.check(key, policy, waiting.place.cost(*cost));
        State::Check {
            check,
            pending: Some(self),
        }
    }
}

impl<I, B> Pending<I, B>
where
    I: Callee,
    B: Backend,
{
    /// A request to be decided by `backend`, kept when it `asks_again`.
    #[inline(always)]
    pub(super) fn new(
        inner: I,
        ask: Ask,
        backend: &B,
        asks_again: bool,
        retry: Option<Box<Retry>>,
        place: Place,
    ) -> Self {
        Pending {
            inner,
            ask,
            backend_name: backend.name(),
            backend: asks_again.then(|| backend.clone()),
            retry,
            demoted: false,
            place,
        }
    }

    /// The request `req`, to wait with a service of its own.
    fn parked<ReqB>(self, req: Request<ReqB>) -> Parked<I::Service, ReqB, B> {
        let pending = Pending {
            inner: self.inner.take(),
            ask: self.ask,
            backend_name: self.backend_name,
            backend: self.backend,
            retry: self.retry,
            demoted: self.demoted,
            place: self.place,
        };
        Parked { pending, req }
    }

    /// The request `req`, waiting for the backend's answer to `check`.
    #[inline(always)]
    pub(super) fn wait_for<ReqB>(
        self,
        check: B::Future,
        req: Request<ReqB>,
    ) -> State<I::Service, ReqB, B>
    where
        I::Service: Service<Request<ReqB>>,
    {
        State::Check {
            check,
            pending: Some(Box::new(self.parked(req))),
        }
    }

    /// Call the inner service with the request, told its `origin`. A
    /// counted admission holds its permit (from before the call, so that a
    /// call that fails or is dropped gives it back too) and is settled by
    /// its response.
    #[inline(always)]
    pub(super) fn call<ReqB>(
        mut self,
        mut req: Request<ReqB>,
        config: &Config,
        decision: Option<Decision>,
        origin: Origin,
        spent: Spent,
        headers: QuotaHeaders,
    ) -> State<I::Service, ReqB, B>
    where
        I::Service: Service<Request<ReqB>>,
    {
        mark(req.extensions_mut(), origin);
        let Ask {
            key, policy, cost, ..
        } = self.ask;
        let backend = self.backend.filter(|_| spent == Spent::Counted);
        let permit = match (decision.as_ref().and_then(Decision::permit), &backend) {
            (Some(name), Some(backend)) => Some(permit::hold(backend, &key, &policy, cost, name)),
            _ => None,
        };
        let call = self.inner.service().call(req);
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
            quota: decision
                .filter(|_| headers == QuotaHeaders::Shown)
                .map(|d| (d, policy)),
            settling,
            permit,
        }
    }

    /// What becomes of the request once the backend's `answer` is known:
    /// the next state of its future (for a refusal, the response to send).
    #[inline(always)]
    pub(super) fn answered<ReqB>(
        mut self,
        mut req: Request<ReqB>,
        config: &Config,
        answer: Result<Decision, BackendError>,
    ) -> State<I::Service, ReqB, B>
    where
        I::Service: Service<Request<ReqB>>,
    {
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
                return self.wait_for(check, req);
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
                spent: Spent::Counted,
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
                pending: Some(Box::new(self.parked(req))),
            },
            Action::Admit {
                decision,
                origin,
                spent,
                headers,
            } => match delay {
                Some(delay) => {
                    req.extensions_mut().insert(Delayed(delay));
                    State::Delay {
                        sleep: Box::pin(tokio::time::sleep(delay)),
                        admitted: Some(Box::new(Admitted {
                            pending: self.parked(req),
                            decision,
                            origin,
                            headers,
                        })),
                    }
                }
                None => self.call(req, config, Some(decision), origin, spent, headers),
            },
            Action::FailOpen(error) => {
                observe::backend_failed(&config.observer, &self.ask.report, "allow", &error);
                let origin = Origin::FailedOpen {
                    breaker_open: error.is_breaker_open(),
                };
                self.call(
                    req,
                    config,
                    None,
                    origin,
                    Spent::Uncounted,
                    QuotaHeaders::Withheld,
                )
            }
            Action::Refuse(refusal) => {
                if let Refusal::Unavailable(error) = &refusal {
                    observe::backend_failed(&config.observer, &self.ask.report, "deny", error);
                }
                State::respond(refusal.response(
                    config.refusals(),
                    &req,
                    Some((&self.ask.key, &self.ask.policy)),
                ))
            }
        }
    }
}

/// An admitted request waiting to be called (soft shedding).
pub(super) struct Admitted<S, ReqB, B> {
    pub(super) pending: Parked<S, ReqB, B>,
    pub(super) decision: Decision,
    pub(super) origin: Origin,
    pub(super) headers: QuotaHeaders,
}

impl<S, ReqB, B> Admitted<S, ReqB, B>
where
    S: Service<Request<ReqB>>,
    B: Backend,
{
    /// Its delay over: called.
    pub(super) fn call(self, config: &Config) -> State<S, ReqB, B> {
        let Parked { pending, req } = self.pending;
        pending.call(
            req,
            config,
            Some(self.decision),
            self.origin,
            Spent::Counted,
            self.headers,
        )
    }
}

/// What settling an admitted request by its response takes.
pub(super) struct Settling<B> {
    pub(super) backend: B,
    pub(super) key: Key,
    pub(super) reserved: u32,
    pub(super) hold: Option<Box<Hold>>,
}

impl<B: Backend> Settling<B> {
    /// The request's `response` settles it: the state that awaits the
    /// settlement when it cost other than it reserved, else the response
    /// (the key's place given up now).
    #[inline(always)]
    pub(super) fn by<S, ReqB, ResB>(
        self,
        config: &Config,
        response: Response<ResB>,
        quota: &mut Option<(Decision, Policy)>,
        permit: &mut Option<Held>,
    ) -> Result<State<S, ReqB, B>, Response<ResB>>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>>,
    {
        let settle = (|| {
            let settlement = config.settlement.as_ref()?;
            let actual = settlement.actual(&ResponseHead::from(&response), self.reserved)?;
            let (_, policy) = quota.as_ref()?;
            Some(
                self.backend
                    .settle(&self.key, policy, self.reserved, actual),
            )
        })();
        match settle {
            Some(settle) => Ok(State::Settle {
                settle,
                response: Some(response),
                quota: quota.take(),
                permit: permit.take(),
                hold: self.hold,
            }),
            None => Err(response),
        }
    }
}

pub(super) struct Retry {
    pub(super) deadline: Instant,
    pub(super) waiting: Option<Waiting>,
}
