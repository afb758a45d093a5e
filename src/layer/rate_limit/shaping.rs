//! [`Shaping`]: delay a request until it fits instead of rejecting it.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::{algorithm::Verdict, Decision};

/// Delaying requests that do not fit yet, instead of refusing them, for
/// [`RateLimitLayer::shape`](crate::RateLimitLayer::shape): each waits up to
/// a maximum, and at most so many wait at once.
///
/// Like nginx's `limit_req ... delay=`: a request that would wait longer,
/// or arrives when too many already wait, is refused at once as usual.
/// A waiting request reserves nothing: it sleeps until the backend said it
/// would fit, then asks again. So a cancelled wait leaves nothing behind,
/// and however many wait, the limit admits exactly what it would without
/// shaping. The price is order: a newcomer can take the unit a waiter was
/// waiting for; the waiter then waits again, within its maximum.
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::key::Global;
/// use tower_ratelimit::layer::Shaping;
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// // 10/s, smoothing bursts by delaying up to half a second, at most 100 waiting.
/// let layer = RateLimitLayer::new("10/s".parse::<Policy>()?)
///     .key(Global)
///     .shape(Shaping::wait_up_to(Duration::from_millis(500)).max_waiting(100));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Shaping {
    pub(super) max_wait: Duration,
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
    /// How many requests may wait at once unless
    /// [`max_waiting`](Self::max_waiting) says otherwise.
    pub const DEFAULT_MAX_WAITING: usize = 1024;

    /// Delay a request that does not fit by up to `max_wait`.
    pub fn wait_up_to(max_wait: Duration) -> Self {
        Self::new(max_wait, Self::DEFAULT_MAX_WAITING)
    }

    /// At most `max_waiting` requests wait at once; later ones are refused
    /// at once.
    pub fn max_waiting(self, max_waiting: usize) -> Self {
        Self::new(self.max_wait, max_waiting)
    }

    fn new(max_wait: Duration, max_waiting: usize) -> Self {
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
    pub(super) fn wait_for(
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
pub(super) struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
