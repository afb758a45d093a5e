//! An inner service that holds a layer to tower's readiness contract.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use tower::Service;

/// Counts its calls, its clones, and the calls made without a
/// `poll_ready` first (each clone starts not ready).
#[derive(Default)]
pub struct Strict {
    ready: bool,
    pub calls: Arc<AtomicUsize>,
    pub clones: Arc<AtomicUsize>,
    pub unready_calls: Arc<AtomicUsize>,
}

impl Strict {
    /// Calls, clones, calls without readiness, so far.
    pub fn counts(&self) -> impl Fn() -> [usize; 3] {
        let counts = [
            self.calls.clone(),
            self.clones.clone(),
            self.unready_calls.clone(),
        ];
        move || counts.each_ref().map(|c| c.load(Ordering::SeqCst))
    }
}

impl Clone for Strict {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Self {
            ready: false,
            calls: self.calls.clone(),
            clones: self.clones.clone(),
            unready_calls: self.unready_calls.clone(),
        }
    }
}

impl<R> Service<R> for Strict {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.ready = true;
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: R) -> Self::Future {
        if !std::mem::take(&mut self.ready) {
            self.unready_calls.fetch_add(1, Ordering::SeqCst);
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        ready(Ok(Response::new(Full::default())))
    }
}
