//! Shaping: delay a request until it fits instead of rejecting it (see
//! [`RateLimitLayer::shape`](crate::RateLimitLayer::shape)).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::{Decision, Verdict};

/// Shaping settings, shared by every request of a layer.
#[derive(Debug)]
pub(crate) struct Shaping {
    pub(crate) max_wait: Duration,
    max_waiting: usize,
    waiting: Arc<AtomicUsize>,
}

/// A copy has the same settings and a waiting room of its own.
impl Clone for Shaping {
    fn clone(&self) -> Self {
        Self::new(self.max_wait, self.max_waiting)
    }
}

impl Shaping {
    pub(crate) fn new(max_wait: Duration, max_waiting: usize) -> Self {
        Self {
            max_wait,
            max_waiting,
            waiting: Arc::default(),
        }
    }

    /// A place in the waiting room, if one is free.
    fn enter(&self) -> Option<Waiting> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_waiting).then_some(n + 1)
            })
            .ok()
            .map(|_| Waiting(self.waiting.clone()))
    }

    /// For a request the limit denied: the sleep until it fits, if it will
    /// before `deadline` and it may wait (it keeps its place in `waiting`).
    pub(crate) fn wait_for(
        &self,
        decision: &Decision,
        deadline: Instant,
        waiting: &mut Option<Waiting>,
    ) -> Option<Pin<Box<Sleep>>> {
        let Verdict::RetryAfter(after) = decision.verdict() else {
            return None; // can never fit
        };
        if decision.is_capacity_exhausted() {
            return None;
        }
        let wake = Instant::now() + Duration::from(after);
        if wake > deadline {
            return None;
        }
        if waiting.is_none() {
            *waiting = Some(self.enter()?);
        }
        // Boxed: only shaped requests wait, and every request's future
        // would otherwise carry a timer's worth of bytes.
        Some(Box::pin(tokio::time::sleep_until(wake)))
    }
}

/// A place in the waiting room; leaving it (done, or the future dropped)
/// frees it.
#[derive(Debug)]
pub(crate) struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
