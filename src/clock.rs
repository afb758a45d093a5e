//! Where the in-memory backend gets the time.
//!
//! Algorithms take `now` as an argument; a [`Clock`] supplies it, in
//! microseconds. [`MonotonicClock`] is the default: it never goes backwards
//! and counts from the Unix epoch, so windows line up with wall-clock minutes
//! and hours. [`ManualClock`] moves only when told to, for tests.
//!
//! ```
//! use std::time::Duration;
//! use tower_ratelimit::clock::{Clock, ManualClock};
//!
//! let clock = ManualClock::new(0);
//! let seen_by_backend = clock.clone();
//! clock.advance(Duration::from_millis(1500));
//! assert_eq!(seen_by_backend.now_us(), 1_500_000);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time in microseconds.
pub trait Clock: Send + Sync + 'static {
    /// Microseconds since this clock's epoch; never decreases.
    fn now_us(&self) -> u64;
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
    start: quanta::Instant,
    start_us: u64,
}

impl MonotonicClock {
    /// A clock reading the wall time once, now, and counting monotonically from it.
    pub fn new() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let clock = quanta::Clock::new();
        Self {
            start: clock.now(),
            clock,
            start_us: since_epoch.as_micros() as u64,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_us(&self) -> u64 {
        let elapsed = self.clock.now().saturating_duration_since(self.start);
        self.start_us + elapsed.as_secs() * 1_000_000 + u64::from(elapsed.subsec_micros())
    }
}

/// A clock that moves only when told; clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `now_us`.
    pub fn new(now_us: u64) -> Self {
        Self(Arc::new(AtomicU64::new(now_us)))
    }

    /// Move forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_micros() as u64, Ordering::SeqCst);
    }

    /// Set the time to `now_us` (tests may go anywhere, even backwards).
    pub fn set(&self, now_us: u64) {
        self.0.store(now_us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
