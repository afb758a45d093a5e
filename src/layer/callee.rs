//! [`Callee`]: the inner service a decided request is called with.
//!
//! A layer's `poll_ready` readies its own inner service. A request decided
//! within `call` is passed to that service (`&mut S`: nothing is cloned);
//! one that must wait first (a decision still to come, shaping, soft
//! shedding) takes the ready service with it and leaves a clone, not yet
//! ready, in its place ([`Taken`]), as tower's services expect.
//! [`answer`] is that choice, made once for every layer that decides.

use std::mem;

use crate::backend::{Backend, BackendError};
use crate::Decision;

/// The service a request is to be called with.
pub(crate) trait Callee {
    type Service;
    fn service(&mut self) -> &mut Self::Service;
    /// A service the request can keep while it waits.
    fn take(self) -> Taken<Self::Service>;
}

/// The ready inner service, taken from the layer, a clone left in its place.
pub(crate) struct Taken<S>(S);

impl<S> Callee for Taken<S> {
    type Service = S;
    fn service(&mut self) -> &mut S {
        &mut self.0
    }
    fn take(self) -> Taken<S> {
        self
    }
}

impl<S: Clone> Callee for &mut S {
    type Service = S;
    fn service(&mut self) -> &mut S {
        self
    }
    fn take(self) -> Taken<S> {
        let clone = self.clone();
        Taken(mem::replace(self, clone))
    }
}

/// A check's answer, with the service its request is to be called with.
pub(crate) enum Answer<'a, S, F> {
    /// Known within `call` (the memory backend): the layer's own ready
    /// service.
    Now(Result<Decision, BackendError>, &'a mut S),
    /// Still to come (`F`, the backend's future): the request waits with
    /// the ready service, taken.
    Later(F, Taken<S>),
}

/// The backend's answer to `check` if it is known already, else the check
/// to await; either with the service to call.
#[inline(always)]
pub(crate) fn answer<B: Backend, S: Clone>(
    mut check: B::Future,
    inner: &mut S,
) -> Answer<'_, S, B::Future> {
    match B::answer_now(&mut check) {
        Some(answer) => Answer::Now(answer, inner),
        None => Answer::Later(check, inner.take()),
    }
}
