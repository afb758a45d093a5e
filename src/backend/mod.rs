//! Backends: where per-key state lives and is updated atomically.
//!
//! A [`Backend`] takes a key, a policy and a cost, applies every limit of the
//! policy to that key's state at once (all-or-nothing), and answers with a
//! [`Decision`]. The in-memory backend ([`MemoryBackend`]) answers at once
//! with a ready future; a networked one (`RedisBackend`, feature `redis`)
//! answers later; [`Fallback`] decides with a second backend while the first
//! fails; [`Breaker`] stops asking a backend known to be down; [`Either`]
//! holds one of two, chosen at run time; [`StoreBackend`] decides on the
//! state a store of your own keeps ([`StateStore`]).
//!
//! Use this module when limits must hold across servers (Redis), survive a
//! store's outage (fallback, breaker), or live in your own store; the layer
//! and the [`Limiter`](crate::Limiter) use the memory backend by default.
//!
//! ```
//! use tower_ratelimit::backend::{Backend, MemoryBackend};
//! use tower_ratelimit::key::Key;
//! use tower_ratelimit::Policy;
//!
//! let backend = MemoryBackend::new();
//! let policy: Policy = "2/min".parse().unwrap();
//! let check = backend.check(&Key::new("ip", "192.0.2.7"), &policy, 1);
//! // The memory backend's future is `std::future::Ready`.
//! let decision = check.into_inner().unwrap();
//! assert!(decision.is_allowed());
//! ```
//!
//! ## A backend of your own
//!
//! To keep state somewhere else, implement [`StateStore`] — read, change
//! and write back one key's states atomically — and wrap it in a
//! [`StoreBackend`]: the algorithms, all or nothing, counted denials,
//! penalty boxes, permits, settling and a key cap come with it, decided by
//! the memory backend's own code (see the [`StateStore`] docs; a
//! `Mutex<HashMap>` store is 20 lines).
//!
//! To decide somewhere else (a store with its own scripts, like Redis),
//! implement [`Backend::check`]: find the key's state for each of the
//! policy's limits (a limit's [`identity`](crate::Limit::identity) keeps
//! limits apart), apply the [`algorithm`](crate::algorithm)s, and answer
//! with [`Decision::from_outcomes`] — one
//! [`Outcome`](crate::algorithm::Outcome) per limit, made with
//! [`Outcome::allowed`](crate::algorithm::Outcome::allowed),
//! [`denied`](crate::algorithm::Outcome::denied) or
//! [`never`](crate::algorithm::Outcome::never). The crate applies the
//! all-or-nothing rule and picks the deciding limit. Commit the cost only
//! when every limit allows it (or, for a policy that
//! [counts denied requests](crate::Policy::counts_denied), always), and do
//! the check and the commit atomically. Fail with [`BackendError`]: the
//! layer then does what it was told ([`OnBackendError`]).

mod breaker;
pub(crate) mod circuit;
#[cfg(feature = "redis")]
mod denials;
mod either;
mod error;
mod fallback;
#[cfg(feature = "redis")]
mod health;
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod store;

use std::future::{Future, Ready};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::key::Key;
use crate::{clock::Micros, Decision, Policy};

pub use breaker::{Breaker, BreakerFuture};
pub use either::{Either, EitherFuture};
pub(crate) use error::FailureLog;
pub use error::{BackendError, Cause, OnBackendError};
pub use fallback::{Fallback, FallbackFuture};
#[cfg(feature = "redis")]
pub use health::StoreHealth;
pub use memory::{AtCapacity, MemoryBackend, MemoryBackendBuilder};
#[cfg(all(feature = "redis", feature = "fair-share"))]
pub(crate) use redis::FlightPermit;
#[cfg(feature = "redis")]
pub use redis::{KeyFormat, RedisBackend, RedisBackendBuilder};
pub use store::{KeyStates, StateStore, StoreBackend};

/// The answer of [`Backend::reset`]: done, or why not.
pub type Reset = Pin<Box<dyn Future<Output = Result<(), BackendError>> + Send>>;

/// The answer of [`Backend::peek_many`]: each key's state, in order.
pub type Peeks = Pin<Box<dyn Future<Output = Result<Vec<Decision>, BackendError>> + Send>>;

/// Stores per-key state and decides requests against a policy.
pub trait Backend: Clone + Send + Sync + 'static {
    /// The decision, when it is known. A backend that decides within
    /// [`check`](Self::check) should answer with [`std::future::Ready`]
    /// and say so in [`answer_now`](Self::answer_now).
    type Future: Future<Output = Result<Decision, BackendError>> + Send + 'static;

    /// Count a request of `cost` for `key` under every limit of `policy`.
    /// A cost of 0 only reports the state.
    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future;

    /// The answer `future` (one of this backend's) holds already, or `None`
    /// if it is still to come. The layer asks right after
    /// [`check`](Self::check): an answer known at once is acted on within
    /// its `call`, sparing the request its response future's waiting state
    /// (and the inner service's clone). A future answered here is dropped
    /// without the layer polling it.
    ///
    /// The default answers `None`: the layer polls the future. A backend
    /// whose future is a [`std::future::Ready`] answers with
    /// [`ready_answer`]; one that wraps others ([`Either`]) asks the one it
    /// holds.
    fn answer_now(future: &mut Self::Future) -> Option<Result<Decision, BackendError>> {
        let _ = future;
        None
    }

    /// Correct a request [`check`](Self::check)ed and admitted at
    /// `reserved` to its `actual` cost, known only after it was served: give
    /// the difference back to every limit of `policy`, or charge all of it,
    /// past each limit's capacity if need be: the work is done, so the
    /// overrun is a debt that the key's next requests wait out
    /// (`Retry-After` says how long). Answers with each limit's state
    /// afterwards.
    ///
    /// The default charges an `actual` above `reserved` only where it fits
    /// and never gives anything back: a backend of your own that cannot
    /// refund still never admits more than its limits. The memory and
    /// Redis backends settle exactly, in one atomic step.
    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        self.check(key, policy, actual.saturating_sub(reserved))
    }

    /// Give back the `permit` an admission took (of `cost`) on each of
    /// `policy`'s limits of requests in flight
    /// ([`Limit::concurrent`](crate::Limit::concurrent)): the request is
    /// over. Answers with each limit's state.
    ///
    /// The default gives nothing back: a backend of your own without it
    /// gets each permit back when its lease ends.
    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        let _ = (permit, cost);
        self.check(key, policy, 0)
    }

    /// Renew the `permit` an admission holds, for another lease: the
    /// request is still under way. The answer holds the permit's new name
    /// ([`Decision::permit`]), or none if the permit was lost (its lease
    /// ended first).
    ///
    /// The default renews nothing.
    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        let _ = (permit, cost);
        self.check(key, policy, 0)
    }

    /// What each key holds under its policy, consuming nothing (as a
    /// [`check`](Self::check) of cost 0 each), in as few calls to the store
    /// as it allows: standalone Redis answers them all in one round trip (a
    /// pipeline). For a page that shows a client every budget it has. The
    /// decisions come in the order asked; one failure fails the whole read.
    ///
    /// The default asks one at a time.
    fn peek_many(&self, asks: Vec<(Key, Policy)>) -> Peeks {
        let this = self.clone();
        Box::pin(async move {
            let mut decisions = Vec::with_capacity(asks.len());
            for (key, policy) in &asks {
                decisions.push(this.check(key, policy, 0).await?);
            }
            Ok(decisions)
        })
    }

    /// Forget what `key` has used under every limit of `policy`, and its
    /// penalty box's strikes and bans: its next request starts with every
    /// limit full (support lifting a customer's limit after a mistake).
    /// Other keys, and `key` under other policies, are untouched.
    ///
    /// The default fails with an error that says so: a backend of your own
    /// that cannot forget never pretends it did.
    fn reset(&self, key: &Key, policy: &Policy) -> Reset {
        let _ = (key, policy);
        Box::pin(std::future::ready(Err(BackendError::new(format!(
            "the {} backend cannot reset a key",
            self.name()
        )))))
    }

    /// Forget what this process alone remembers of `key` under `policy` —
    /// a denial cache, leases, a local fallback's state, a memory
    /// backend's state — and nothing of a store other servers share. What
    /// a server does when another server [`reset`](Self::reset) the key in
    /// the shared store (a `config::Fleet` tells it, features `config` and
    /// `redis`), so that no server goes on refusing from what it
    /// remembered.
    ///
    /// The default remembers nothing, and forgets nothing.
    fn forget_local(&self, key: &Key, policy: &Policy) {
        let _ = (key, policy);
    }

    /// A short name for the `backend` label of decision-latency metrics:
    /// `memory`, `redis`; a wrapper ([`Fallback`], [`Breaker`]) gives the
    /// name of the backend it wraps first.
    fn name(&self) -> &'static str {
        "custom"
    }

    /// Decide with `fallback` whenever this backend fails: typically Redis
    /// first and, while it is down, each server's own memory — every server
    /// then enforces the whole limit on its own, so the service stays both
    /// up and limited. Each failure is still reported (a throttled `tracing`
    /// warning, feature `tracing`), and the decision says it came from the
    /// fallback ([`Decision::origin`]), which the layer counts (feature
    /// `metrics`).
    ///
    /// ```
    /// use tower_ratelimit::backend::{Backend, MemoryBackend};
    /// # let shared = MemoryBackend::new(); // stands in for a RedisBackend
    /// let backend = shared.or_fallback(MemoryBackend::new());
    /// ```
    fn or_fallback<F: Backend>(self, fallback: F) -> Fallback<Self, F>
    where
        Self: Sized,
    {
        Fallback::new(self, fallback)
    }

    /// Put a circuit breaker in front of this backend: once it has failed
    /// several times in a row, decisions fail at once (and a fallback behind
    /// the breaker decides in microseconds) until a single probe finds the
    /// backend answering again. See [`Breaker`].
    fn with_breaker(self) -> Breaker<Self>
    where
        Self: Sized,
    {
        Breaker::new(self)
    }
}

/// The answer a [`Ready`] holds, for [`Backend::answer_now`] of a backend
/// that decides within [`check`](Backend::check):
///
/// ```
/// # use std::future::{ready, Ready};
/// # use tower_ratelimit::backend::{ready_answer, Backend, BackendError};
/// # use tower_ratelimit::{key::Key, Decision, Policy};
/// #[derive(Clone)]
/// struct AlwaysRefuses;
///
/// impl Backend for AlwaysRefuses {
///     type Future = Ready<Result<Decision, BackendError>>;
///
///     fn check(&self, _: &Key, _: &Policy, _: u32) -> Self::Future {
///         ready(Err(BackendError::new(std::io::Error::other("closed"))))
///     }
///
///     fn answer_now(future: &mut Self::Future) -> Option<Result<Decision, BackendError>> {
///         ready_answer(future)
///     }
/// }
/// ```
pub fn ready_answer<T>(future: &mut Ready<T>) -> Option<T> {
    match Pin::new(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => Some(answer),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_answer_is_taken() {
        let mut ready = std::future::ready(7);
        assert_eq!(ready_answer(&mut ready), Some(7));
    }

    #[test]
    fn either_answers_now_when_the_backend_it_holds_does() {
        let (key, policy) = (Key::new("t", "a"), "1/min".parse::<Policy>().unwrap());
        let memory: Either<MemoryBackend, MemoryBackend> = Either::Left(MemoryBackend::new());
        let mut future = memory.check(&key, &policy, 1);
        let answer = Either::<MemoryBackend, MemoryBackend>::answer_now(&mut future);
        assert!(answer.is_some_and(|d| d.is_ok_and(|d| d.is_allowed())));
        let later = Breaker::new(MemoryBackend::new());
        let mut future = later.check(&key, &policy, 1);
        assert!(Breaker::<MemoryBackend>::answer_now(&mut future).is_none());
    }
}
