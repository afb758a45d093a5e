//! `AdaptiveConcurrency`: the limit, its queue, and the place a request holds.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tower_layer::Layer;

use super::controller::LatencyController;
use crate::key::RequestHead;
use crate::layer::{Class, Reserves};

use super::service::ConcurrencyLimited;

/// A limit of requests in flight to the service it wraps, for every client
/// together, between `min` and `max`, moved by a [`LatencyController`]
/// ([`Gradient`](super::Gradient) or [`AimdConcurrency`](super::AimdConcurrency)) after each response from its latency: it
/// rises while the service answers as fast as unloaded, and falls once
/// requests start to queue in it — so the service stays below the knee of
/// its latency curve.
///
/// A request over the limit is answered at once with `503 Service
/// Unavailable` and `Retry-After: 1` (the service is overloaded; the client
/// exceeded nothing), or, with [`queue`](Self::queue), waits for a place up
/// to a bound, in a queue of bounded length.
///
/// The layer is a handle: clones share the limit, and
/// [`limit`](Self::limit) and [`in_flight`](Self::in_flight) read it.
#[derive(Clone)]
pub struct AdaptiveConcurrency {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    in_flight: AtomicUsize,
    waiting: AtomicUsize,
    freed: Notify,
    min: f64,
    max: f64,
    queue: usize,
    max_wait: Duration,
    /// A request's class, and what each class may fill.
    class: Option<ClassOf>,
    reserves: Reserves,
}

type ClassOf = Box<dyn Fn(&RequestHead<'_>) -> Class + Send + Sync>;

struct State {
    limit: f64,
    controller: Box<dyn LatencyController>,
}

impl AdaptiveConcurrency {
    /// A limit moved by `controller`, from 10, between 1 and 1000, without
    /// a queue.
    pub fn new(controller: impl LatencyController) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    limit: 10.0,
                    controller: Box::new(controller),
                }),
                in_flight: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
                freed: Notify::new(),
                min: 1.0,
                max: 1000.0,
                queue: 0,
                max_wait: Duration::ZERO,
                class: None,
                reserves: Reserves::STANDARD,
            }),
        }
    }

    /// A setting changed, before the handle is cloned (its clones share
    /// one limit, which settings must not split).
    ///
    /// # Panics
    ///
    /// If the handle was cloned already: a mistake in setting it up.
    fn with(mut self, change: impl FnOnce(&mut Shared)) -> Self {
        let shared = Arc::get_mut(&mut self.shared)
            .expect("configure an AdaptiveConcurrency before cloning it");
        change(shared);
        self
    }

    /// The limit stays within `min..=max` (`min` at least 1); it starts at
    /// `min`.
    pub fn bounds(self, min: usize, max: usize) -> Self {
        let min = min.max(1) as f64;
        let max = (max as f64).max(min);
        self.with(|shared| {
            (shared.min, shared.max) = (min, max);
            shared
                .state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .limit = min;
        })
    }

    /// Requests over the limit wait up to `max_wait` for a place, at most
    /// `length` of them at once; the others get 503 at once.
    pub fn queue(self, length: usize, max_wait: Duration) -> Self {
        self.with(|shared| (shared.queue, shared.max_wait) = (length, max_wait))
    }

    /// Classes: when the limit is short, sheddable requests are refused
    /// first, then default ones; each class may fill the limit up to its
    /// part by `reserves` ([`Reserves::STANDARD`]: critical requests all of
    /// it, default ones 80%, sheddable ones 70%). Without it, every request
    /// is default and may fill all of it.
    pub fn classes(
        self,
        class: impl Fn(&RequestHead<'_>) -> Class + Send + Sync + 'static,
        reserves: Reserves,
    ) -> Self {
        let class: ClassOf = Box::new(class);
        self.with(|shared| (shared.class, shared.reserves) = (Some(class), reserves))
    }

    /// The class of `req`, by [`classes`](Self::classes).
    pub(super) fn class_of(&self, req: &RequestHead<'_>) -> Class {
        self.shared
            .class
            .as_ref()
            .map_or(Class::Critical, |class| class(req))
    }

    /// How many requests may be in flight now.
    pub fn limit(&self) -> usize {
        self.lock().limit.floor() as usize
    }

    /// How many are.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Take a place if one is free for `class`.
    fn try_enter(&self, class: Class) -> Option<Place> {
        let limit = self.limit();
        // At least one place for every class, so that none starves at a
        // limit of 1.
        let limit = (limit * usize::from(self.shared.reserves.fill(class)) / 100).max(1);
        let entered = self
            .shared
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok();
        entered.then(|| Place {
            limiter: self.clone(),
            // tokio's clock: the same as the system's, but paused with a
            // test's runtime, so that a controller can be tested on exact
            // latencies.
            start: tokio::time::Instant::now(),
            done: None,
        })
    }

    /// A place for a request of `class`, waiting in the queue for one if
    /// it may.
    pub(super) async fn enter(&self, class: Class) -> Option<Place> {
        if let Some(place) = self.try_enter(class) {
            return Some(place);
        }
        let shared = &self.shared;
        let queued = shared
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < shared.queue).then_some(n + 1)
            })
            .is_ok();
        if !queued {
            return None;
        }
        let deadline = tokio::time::Instant::now() + shared.max_wait;
        let place = loop {
            let freed = shared.freed.notified();
            if let Some(place) = self.try_enter(class) {
                break Some(place);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                break self.try_enter(class);
            }
        };
        shared.waiting.fetch_sub(1, Ordering::AcqRel);
        place
    }
}

impl fmt::Debug for AdaptiveConcurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveConcurrency")
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

/// A request's place in flight: given back when dropped, with its latency
/// told to the controller when the response came.
pub(super) struct Place {
    limiter: AdaptiveConcurrency,
    start: tokio::time::Instant,
    /// Set when the response came: whether it failed.
    pub(super) done: Option<bool>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let shared = &self.limiter.shared;
        let in_flight = shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(failed) = self.done {
            let latency = self.start.elapsed();
            let mut state = self.limiter.lock();
            let limit = state.limit;
            let next = state.controller.next(limit, latency, in_flight, failed);
            state.limit = if next.is_finite() {
                next.clamp(shared.min, shared.max)
            } else {
                state.limit
            };
        }
        shared.freed.notify_one();
    }
}

impl<S> Layer<S> for AdaptiveConcurrency {
    type Service = ConcurrencyLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimited {
            inner,
            limiter: self.clone(),
        }
    }
}
