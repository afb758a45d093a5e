//! [`Fallback`]: a second backend for while the first one fails.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;

use super::{Backend, BackendError, FailureLog, Peeks, Reset};
use crate::key::Key;
use crate::{clock::Micros, decision::Origin, Decision, Policy};

/// A backend that decides with a second one whenever the first fails; see
/// [`Backend::or_fallback`].
///
/// Every failure of the primary is reported — a `tracing` warning (at most
/// one a second, with a count of those not logged; feature `tracing`) — and
/// the decision says [`Origin::Fallback`] (or [`Origin::BreakerOpen`] when a
/// [`Breaker`](super::Breaker) kept the primary from being asked), which the
/// layer counts as
/// `fallback_allowed` or `fallback_limited` (feature `metrics`).
#[derive(Clone, Debug)]
pub struct Fallback<P, F> {
    primary: P,
    // One reference count for a request to hold, and one failure throttle
    // for the fallback however it is cloned.
    second: Arc<Second<F>>,
}

#[derive(Debug)]
struct Second<F> {
    backend: F,
    failures: FailureLog,
}

impl<P, F> Fallback<P, F> {
    pub(crate) fn new(primary: P, fallback: F) -> Self {
        Self {
            primary,
            second: Arc::new(Second {
                backend: fallback,
                failures: FailureLog::default(),
            }),
        }
    }

    /// The backend asked first.
    pub fn primary(&self) -> &P {
        &self.primary
    }

    /// The backend asked when the first fails.
    pub fn fallback(&self) -> &F {
        &self.second.backend
    }
}

impl<P: Backend, F: Backend> Backend for Fallback<P, F> {
    type Future = FallbackFuture<P, F>;

    fn name(&self) -> &'static str {
        self.primary.name()
    }

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        self.ask(key, policy, Op::Check(cost))
    }

    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        self.ask(key, policy, Op::Settle { reserved, actual })
    }

    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        self.ask(key, policy, Op::Release { permit, cost })
    }

    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        self.ask(key, policy, Op::Renew { permit, cost })
    }

    /// Both forget: the key starts afresh whichever decides next.
    fn reset(&self, key: &Key, policy: &Policy) -> Reset {
        let (primary, second) = (
            self.primary.reset(key, policy),
            self.second.backend.reset(key, policy),
        );
        Box::pin(async move {
            let (primary, second) = (primary.await, second.await);
            primary.and(second)
        })
    }

    fn forget_local(&self, key: &Key, policy: &Policy) {
        self.primary.forget_local(key, policy);
        self.second.backend.forget_local(key, policy);
    }

    /// The primary's answer, else the fallback's.
    fn peek_many(&self, asks: Vec<(Key, Policy)>) -> Peeks {
        let (primary, second) = (self.primary.clone(), Arc::clone(&self.second));
        Box::pin(async move {
            match primary.peek_many(asks.clone()).await {
                Ok(decisions) => Ok(decisions),
                Err(error) => {
                    second.failures.warn("fallback", &error);
                    second.backend.peek_many(asks).await
                }
            }
        })
    }
}

impl<P: Backend, F: Backend> Fallback<P, F> {
    fn ask(&self, key: &Key, policy: &Policy, op: Op) -> FallbackFuture<P, F> {
        FallbackFuture {
            state: State::Primary {
                future: op.ask(&self.primary, key, policy),
                // What asking the fallback takes, should the primary fail:
                // the future borrows nothing, so it keeps its own key and
                // policy (two reference counts and the key's bytes, inline
                // up to 46 of them; about 50 ns a request with a memory
                // primary, nothing beside a Redis round trip).
                retry: Some(Retry {
                    second: Arc::clone(&self.second),
                    key: key.clone(),
                    policy: policy.clone(),
                    op,
                }),
            },
        }
    }
}

/// What a backend is asked.
#[derive(Clone, Copy)]
enum Op {
    Check(u32),
    Settle { reserved: u32, actual: u32 },
    Release { permit: Micros, cost: u32 },
    Renew { permit: Micros, cost: u32 },
}

impl Op {
    fn ask<B: Backend>(self, backend: &B, key: &Key, policy: &Policy) -> B::Future {
        match self {
            Op::Check(cost) => backend.check(key, policy, cost),
            Op::Settle { reserved, actual } => backend.settle(key, policy, reserved, actual),
            Op::Release { permit, cost } => backend.release(key, policy, permit, cost),
            Op::Renew { permit, cost } => backend.renew(key, policy, permit, cost),
        }
    }
}

pin_project! {
    /// The future of a [`Fallback`]'s decision: the primary's, or, if it
    /// fails, the fallback's.
    pub struct FallbackFuture<P, F>
    where
        P: Backend,
        F: Backend,
    {
        #[pin]
        state: State<P, F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<P, F>
    where
        P: Backend,
        F: Backend,
    {
        Primary {
            #[pin]
            future: P::Future,
            retry: Option<Retry<F>>,
        },
        Fallback {
            #[pin]
            future: F::Future,
            origin: Origin,
        },
    }
}

struct Retry<F> {
    second: Arc<Second<F>>,
    key: Key,
    policy: Policy,
    op: Op,
}

impl<P: Backend, F: Backend> Future for FallbackFuture<P, F> {
    type Output = Result<Decision, BackendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Primary { future, retry } => {
                    let error = match ready!(future.poll(cx)) {
                        Ok(decision) => return Poll::Ready(Ok(decision)),
                        Err(error) => error,
                    };
                    // Polled again after failing for good: say so again.
                    let Some(retry) = retry.take() else {
                        return Poll::Ready(Err(error));
                    };
                    retry.second.failures.warn("fallback", &error);
                    let future = retry
                        .op
                        .ask(&retry.second.backend, &retry.key, &retry.policy);
                    let origin = if error.is_breaker_open() {
                        Origin::BreakerOpen
                    } else {
                        Origin::Fallback
                    };
                    state.set(State::Fallback { future, origin });
                }
                StateProj::Fallback { future, origin } => {
                    let decided = ready!(future.poll(cx));
                    return Poll::Ready(decided.map(|d| d.with_origin(*origin)));
                }
            }
        }
    }
}

impl<P: Backend, F: Backend> std::fmt::Debug for FallbackFuture<P, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackFuture").finish_non_exhaustive()
    }
}
