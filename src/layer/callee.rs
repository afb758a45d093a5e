//! [`Callee`]: the inner service a decided request is called with.
//!
//! A layer's `poll_ready` readies its own inner service. A request decided
//! within `call` is passed to that service (`&mut S`: nothing is cloned);
//! one that must wait first (a decision still to come, shaping, soft
//! shedding) takes the ready service with it and leaves a clone, not yet
//! ready, in its place ([`Taken`]), as tower's services expect.

use std::mem;

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
