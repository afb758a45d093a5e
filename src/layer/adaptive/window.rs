//! The guarded service's recent responses: counts over a sliding window of
//! ten buckets.

use std::time::Duration;

/// What a window of responses saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceHealth {
    /// Responses in the window.
    pub responses: u64,
    /// Of them, failures.
    pub failures: u64,
}

impl ServiceHealth {
    /// Failures per response (0 without responses).
    pub fn failure_rate(&self) -> f64 {
        if self.responses == 0 {
            0.0
        } else {
            self.failures as f64 / self.responses as f64
        }
    }
}

const BUCKETS: usize = 10;

/// Responses by the tenth of the window they came in.
#[derive(Debug)]
pub(super) struct Window {
    bucket_ms: u64,
    /// Per bucket: which tenth it counts (ms since start / bucket_ms), and
    /// its (responses, failures).
    buckets: [(u64, u64, u64); BUCKETS],
}

impl Window {
    pub(super) fn new(length: Duration) -> Self {
        let bucket_ms = (length.as_millis() as u64 / BUCKETS as u64).max(1);
        Self {
            bucket_ms,
            buckets: [(u64::MAX, 0, 0); BUCKETS],
        }
    }

    /// Count a response at `now_ms` (milliseconds since some start).
    pub(super) fn record(&mut self, now_ms: u64, failed: bool) {
        let tenth = now_ms / self.bucket_ms;
        let bucket = &mut self.buckets[(tenth % BUCKETS as u64) as usize];
        if bucket.0 != tenth {
            *bucket = (tenth, 0, 0);
        }
        bucket.1 += 1;
        bucket.2 += u64::from(failed);
    }

    /// What the last window up to `now_ms` saw.
    pub(super) fn health(&self, now_ms: u64) -> ServiceHealth {
        let tenth = now_ms / self.bucket_ms;
        let oldest = tenth.saturating_sub(BUCKETS as u64 - 1);
        self.buckets
            .iter()
            .filter(|(t, _, _)| *t != u64::MAX && *t >= oldest && *t <= tenth)
            .fold(ServiceHealth::default(), |h, (_, responses, failures)| {
                ServiceHealth {
                    responses: h.responses + responses,
                    failures: h.failures + failures,
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_leave_the_window_as_it_slides() {
        let mut window = Window::new(Duration::from_secs(10));
        for ms in (0..5_000).step_by(100) {
            window.record(ms, ms % 1_000 == 0);
        }
        assert_eq!(
            window.health(5_000),
            ServiceHealth {
                responses: 50,
                failures: 5
            }
        );
        assert_eq!(
            window.health(12_000).responses,
            20,
            "the first three seconds left"
        );
        assert_eq!(window.health(30_000), ServiceHealth::default());
    }
}
