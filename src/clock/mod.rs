//! Where the in-memory backend gets the time.
//!
//! Algorithms take `now` as an argument; a [`Clock`] supplies it, as
//! [`Micros`]. [`MonotonicClock`] is the default: it never goes backwards
//! and counts from the Unix epoch, so windows line up with wall-clock minutes
//! and hours. [`ManualClock`] moves only when told to, for tests.
//!
//! ```
//! use std::time::Duration;
//! use tower_ratelimit::clock::{Clock, ManualClock, Micros};
//!
//! let clock = ManualClock::new(Micros::ZERO);
//! let seen_by_backend = clock.clone();
//! clock.advance(Duration::from_millis(1500));
//! assert_eq!(seen_by_backend.now(), Micros::from_millis(1500));
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) mod micros;

pub use micros::Micros;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The time since this clock's epoch; never decreases.
    fn now(&self) -> Micros;
}

/// A monotonic clock, reported as microseconds since the Unix epoch as of
/// when the clock was made. Later changes to the wall clock do not move it.
///
/// It reads the CPU's time-stamp counter through `quanta` where that is
/// reliable (about 10 ns here, against 25 ns for `std::time::Instant`: the
/// clock is the largest single cost of an in-memory decision) and the
/// operating system's monotonic clock elsewhere.
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    started: quanta::Instant,
    start: Micros,
}

impl MonotonicClock {
    /// A clock reading the wall time once, now, and counting monotonically from it.
    pub fn new() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let clock = quanta::Clock::new();
        Self {
            started: clock.now(),
            clock,
            start: Micros::from(since_epoch),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Micros {
        let elapsed = self.clock.now().saturating_duration_since(self.started);
        self.start + Micros::from(elapsed)
    }
}

/// A clock that moves only when told; clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `now`.
    pub fn new(now: Micros) -> Self {
        Self(Arc::new(AtomicU64::new(now.as_u64())))
    }

    /// Move forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0
            .fetch_add(Micros::from(by).as_u64(), Ordering::SeqCst);
    }

    /// Set the time to `now` (tests may go anywhere, even backwards).
    pub fn set(&self, now: Micros) {
        self.0.store(now.as_u64(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        Micros::new(self.0.load(Ordering::SeqCst))
    }
}
