//! One request's way from the service's `call` to its response: the states
//! of its [`ResponseFuture`](super::ResponseFuture) ([`State`]) and every
//! step between them. What the backend is asked ([`Ask`]), what the request
//! holds while it waits ([`Pending`]), what becomes of it once the answer is
//! known ([`Pending::answered`], carrying out an [`Action`] as a [`Step`]
//! that moves the request once), and what its response settles
//! ([`Settling`]). `future.rs` polls what each state awaits and takes the
//! step this file says.

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
        // The inner service's call alone: what finishes its response
        // is the future's `Admission`, beside the state, so that the call's
        // future is all this state holds (moved once, not with the rest).
        Call {
            #[pin]
            call: S::Future,
        },
        Settle {
            #[pin]
            settle: B::Future,
            response: Option<S::Response>,
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
    /// What becomes of the request once the backend's `answer` is known
    /// (a call's admission kept in `admitted`).
    pub(super) fn answered(
        self,
        config: &Config,
        answer: Result<Decision, BackendError>,
        admitted: &mut Admission<B>,
    ) -> State<S, ReqB, B> {
        let Parked { pending, mut req } = self;
        pending
            .answered(&mut req, config, answer)
            .state(req, admitted)
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

/// The next step of a request whose fate is known, taken with the request
/// itself by [`Step::state`]. Every step before it borrows the request, so
/// that it is moved once: into the inner service's call, or to wait.
pub(super) enum Step<I: Callee, B: Backend> {
    /// Call the inner service `I`; its response is finished as the
    /// [`Admission`] says.
    Call(I, Admission<B>),
    /// Wait, with a ready copy of the inner service, for what [`Parking`]
    /// says.
    Park(Pending<Taken<I::Service>, B>, Parking<B>),
    /// Answer with the limiter's own response.
    Respond(Response<Bytes>),
}

/// What a request waits for before its next step.
pub(super) enum Parking<B: Backend> {
    /// The backend's answer to `check`.
    Check(B::Future),
    /// Its turn to ask again (shaping).
    Wait(Pin<Box<Sleep>>),
    /// Admitted, the end of its delay (soft shedding).
    Delay(Pin<Box<Sleep>>, Decision, Origin, QuotaHeaders),
}

/// What an admitted request's response is finished with: its quota
/// headers' decision, its settling, its permit. Kept by the response
/// future beside its state, from the call to the response.
pub(super) struct Admission<B> {
    /// The decision and policy to write quota headers from; none when the
    /// request is unlimited or its headers are withheld.
    pub(super) quota: Option<(Decision, Policy)>,
    /// What settling the request by its response takes, when the layer
    /// settles and the request was counted.
    pub(super) settling: Option<Box<Settling<B>>>,
    /// A permit of a limit of requests in flight, for the body.
    pub(super) permit: Option<Held>,
}

impl<B> Admission<B> {
    /// Called without a decision: no quota headers, no permit, nothing to
    /// settle.
    pub(super) fn unlimited() -> Self {
        Admission {
            quota: None,
            settling: None,
            permit: None,
        }
    }

    /// The admission, or `None` when nothing finishes the response: no
    /// quota headers, nothing to settle, no permit.
    #[inline(always)]
    pub(super) fn needed(self) -> Option<Self> {
        if self.quota.is_none() && self.settling.is_none() && self.permit.is_none() {
            // Nothing in it to drop: forgotten rather than dropped field
            // by field, which costs a request with no headers about 30
            // instructions.
            std::mem::forget(self);
            return None;
        }
        Some(self)
    }
}

impl<I: Callee, B: Backend> Step<I, B> {
    /// The request's state after this step; a call's admission is kept in
    /// `admitted`.
    #[inline(always)]
    pub(super) fn state<ReqB>(
        self,
        req: Request<ReqB>,
        admitted: &mut Admission<B>,
    ) -> State<I::Service, ReqB, B>
    where
        I::Service: Service<Request<ReqB>>,
    {
        match self {
            Step::Call(mut inner, admission) => {
                *admitted = admission;
                State::Call {
                    call: inner.service().call(req),
                }
            }
            Step::Park(pending, parking) => {
                let pending = Parked { pending, req };
                match parking {
                    Parking::Check(check) => State::Check {
                        check,
                        pending: Some(Box::new(pending)),
                    },
                    Parking::Wait(sleep) => State::Wait {
                        sleep,
                        pending: Some(Box::new(pending)),
                    },
                    Parking::Delay(sleep, decision, origin, headers) => State::Delay {
                        sleep,
                        admitted: Some(Box::new(Admitted {
                            pending,
                            decision,
                            origin,
                            headers,
                        })),
                    },
                }
            }
            Step::Respond(response) => State::respond(response),
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

    /// The request, to wait for `parking` with a service of its own.
    pub(super) fn park(self, parking: Parking<B>) -> Step<I, B> {
        let pending = Pending {
            inner: self.inner.take(),
            ask: self.ask,
            backend_name: self.backend_name,
            backend: self.backend,
            retry: self.retry,
            demoted: self.demoted,
            place: self.place,
        };
        Step::Park(pending, parking)
    }

    /// Call the inner service with the request, told its `origin`. A
    /// counted admission holds its permit (from before the call, so that a
    /// call that fails or is dropped gives it back too) and is settled by
    /// its response.
    #[inline(always)]
    pub(super) fn admit<ReqB>(
        mut self,
        req: &mut Request<ReqB>,
        config: &Config,
        decision: Option<Decision>,
        origin: Origin,
        spent: Spent,
        headers: QuotaHeaders,
    ) -> Step<I, B> {
        mark(req.extensions_mut(), origin);
        let Ask {
            key, policy, cost, ..
        } = self.ask;
        let backend = self.backend.filter(|_| spent == Spent::Counted);
        let permit = match (decision.as_ref().and_then(Decision::permit), &backend) {
            (Some(name), Some(backend)) => Some(permit::hold(backend, &key, &policy, cost, name)),
            _ => None,
        };
        let settling = match (&config.settlement, backend) {
            (Some(_), Some(backend)) => Some(Box::new(Settling {
                backend,
                key,
                reserved: cost,
                hold: self.place.take_hold(),
            })),
            _ => None,
        };
        let quota = decision
            .filter(|_| headers == QuotaHeaders::Shown)
            .map(|d| (d, policy));
        Step::Call(
            self.inner,
            Admission {
                quota,
                settling,
                permit,
            },
        )
    }

    /// What becomes of the request once the backend's `answer` is known:
    /// its next step (for a refusal, the response to send).
    #[inline(always)]
    pub(super) fn answered<ReqB>(
        mut self,
        req: &mut Request<ReqB>,
        config: &Config,
        answer: Result<Decision, BackendError>,
    ) -> Step<I, B> {
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
                return self.park(Parking::Check(check));
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
            Action::Wait(sleep) => self.park(Parking::Wait(sleep)),
            Action::Admit {
                decision,
                origin,
                spent,
                headers,
            } => match delay {
                Some(delay) => {
                    req.extensions_mut().insert(Delayed(delay));
                    let sleep = Box::pin(tokio::time::sleep(delay));
                    self.park(Parking::Delay(sleep, decision, origin, headers))
                }
                None => self.admit(req, config, Some(decision), origin, spent, headers),
            },
            Action::FailOpen(error) => {
                observe::backend_failed(&config.observer, &self.ask.report, "allow", &error);
                let origin = Origin::FailedOpen {
                    breaker_open: error.is_breaker_open(),
                };
                self.admit(
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
                Step::Respond(refusal.response(
                    config.refusals(),
                    req,
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
    /// Its delay over: called (its admission kept in `admitted`).
    pub(super) fn call(self, config: &Config, admitted: &mut Admission<B>) -> State<S, ReqB, B> {
        let Parked { pending, mut req } = self.pending;
        let step = pending.admit(
            &mut req,
            config,
            Some(self.decision),
            self.origin,
            Spent::Counted,
            self.headers,
        );
        step.state(req, admitted)
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
    /// (the key's place given up now). `quota`: the admission's.
    #[inline(always)]
    pub(super) fn by<S, ReqB, ResB>(
        self,
        config: &Config,
        response: Response<ResB>,
        quota: &Option<(Decision, Policy)>,
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
