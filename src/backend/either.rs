//! [`Either`]: one of two backends, chosen at run time, without generics in
//! the code that builds the layer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::{Backend, BackendError, Peeks, Reset};
use crate::key::Key;
use crate::{clock::Micros, Decision, Policy};

/// One of two backends, chosen when the service starts: memory in
/// development, Redis in production, say. It decides exactly as the backend
/// it holds, with no allocation of its own (its future is an enum of the
/// two futures).
///
/// ```
/// use tower_ratelimit::backend::{Either, MemoryBackend};
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// # type Shared = MemoryBackend; // stands in for a RedisBackend
/// # fn connect_to_redis() -> Shared { MemoryBackend::new() }
/// let backend: Either<MemoryBackend, Shared> = match std::env::var("REDIS_URL") {
///     Ok(_) => Either::Right(connect_to_redis()),
///     Err(_) => Either::Left(MemoryBackend::new()),
/// };
/// let layer = RateLimitLayer::new("100/min".parse::<Policy>()?).backend(backend);
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub enum Either<L, R> {
    /// The first kind of backend.
    Left(L),
    /// The second kind of backend.
    Right(R),
}

macro_rules! either {
    ($self:ident, $b:ident => $call:expr) => {
        match $self {
            Either::Left($b) => EitherFuture {
                inner: Inner::Left { future: $call },
            },
            Either::Right($b) => EitherFuture {
                inner: Inner::Right { future: $call },
            },
        }
    };
}

impl<L: Backend, R: Backend> Backend for Either<L, R> {
    type Future = EitherFuture<L::Future, R::Future>;

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        either!(self, b => b.check(key, policy, cost))
    }

    fn answer_now(future: &mut Self::Future) -> Option<Result<Decision, BackendError>> {
        match &mut future.inner {
            Inner::Left { future } => L::answer_now(future),
            Inner::Right { future } => R::answer_now(future),
        }
    }

    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        either!(self, b => b.settle(key, policy, reserved, actual))
    }

    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        either!(self, b => b.release(key, policy, permit, cost))
    }

    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        either!(self, b => b.renew(key, policy, permit, cost))
    }

    fn reset(&self, key: &Key, policy: &Policy) -> Reset {
        match self {
            Either::Left(b) => b.reset(key, policy),
            Either::Right(b) => b.reset(key, policy),
        }
    }

    fn forget_local(&self, key: &Key, policy: &Policy) {
        match self {
            Either::Left(b) => b.forget_local(key, policy),
            Either::Right(b) => b.forget_local(key, policy),
        }
    }

    fn peek_many(&self, asks: Vec<(Key, Policy)>) -> Peeks {
        match self {
            Either::Left(b) => b.peek_many(asks),
            Either::Right(b) => b.peek_many(asks),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Either::Left(b) => b.name(),
            Either::Right(b) => b.name(),
        }
    }
}

pin_project! {
    /// The future of an [`Either`] backend: the future of the backend it holds.
    pub struct EitherFuture<L, R> {
        #[pin]
        inner: Inner<L, R>,
    }
}

pin_project! {
    #[project = InnerProj]
    enum Inner<L, R> {
        Left { #[pin] future: L },
        Right { #[pin] future: R },
    }
}

impl<L, R> Future for EitherFuture<L, R>
where
    L: Future<Output = Result<Decision, BackendError>>,
    R: Future<Output = Result<Decision, BackendError>>,
{
    type Output = Result<Decision, BackendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().inner.project() {
            InnerProj::Left { future } => future.poll(cx),
            InnerProj::Right { future } => future.poll(cx),
        }
    }
}
