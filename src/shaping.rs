//! Shaping: delay a request until it fits instead of rejecting it.
//!
//! Like nginx's `limit_req ... delay=`, a layer with
//! [`RateLimitLayer::shape`](crate::RateLimitLayer::shape) holds a request
//! that does not fit yet, up to a maximum wait, and lets it through once it
//! fits. A request that would wait longer, or arrives when too many already
//! wait, is rejected at once as usual.
//!
//! A waiting request reserves nothing: it sleeps until the backend said it
//! would fit, then asks again. So a cancelled wait leaves nothing behind, and
//! however many wait, the limit admits exactly what it would without shaping.
//! The price is order: a newcomer can take the unit a waiter was waiting for;
//! the waiter then waits again, within its maximum.
//!
//! ```
//! use std::time::Duration;
//! use tower_ratelimit::key::Global;
//! use tower_ratelimit::{Policy, RateLimitLayer};
//!
//! // 10/s, smoothing bursts by delaying up to half a second, at most 100 waiting.
//! let layer = RateLimitLayer::new("10/s".parse::<Policy>().unwrap())
//!     .key(Global)
//!     .shape(Duration::from_millis(500), 100);
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Shaping settings, shared by every request of a layer.
#[derive(Debug)]
pub(crate) struct Shaping {
    pub(crate) max_wait_us: u64,
    pub(crate) max_waiting: usize,
    waiting: Arc<AtomicUsize>,
}

/// A copy has the same settings and a waiting room of its own.
impl Clone for Shaping {
    fn clone(&self) -> Self {
        Self::new(self.max_wait_us, self.max_waiting)
    }
}

impl Shaping {
    pub(crate) fn new(max_wait_us: u64, max_waiting: usize) -> Self {
        Self {
            max_wait_us,
            max_waiting,
            waiting: Arc::default(),
        }
    }

    /// A place in the waiting room, if one is free.
    pub(crate) fn enter(&self) -> Option<Waiting> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_waiting).then_some(n + 1)
            })
            .ok()
            .map(|_| Waiting(self.waiting.clone()))
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
