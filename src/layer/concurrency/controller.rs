//! How a limit of requests in flight follows latency: AIMD, or a gradient
//! of long-term to short-term latency.

use std::time::Duration;

/// Moves a limit of requests in flight after each response, from its
/// latency and how many requests were in flight. Bounds are applied by
/// [`AdaptiveConcurrency`](super::AdaptiveConcurrency).
pub trait LatencyController: Send + 'static {
    /// The limit after a response that took `latency` (`failed`: an error,
    /// which counts as overload), with `in_flight` requests in flight
    /// (itself included) under `limit`.
    fn next(&mut self, limit: f64, latency: Duration, in_flight: usize, failed: bool) -> f64;
}

/// The service's unloaded latency, learnt from what it answers: the
/// least latency seen, allowed to rise only very slowly (so that a
/// sustained load cannot pass for the baseline).
#[derive(Clone, Copy, Debug)]
struct Baseline {
    seconds: Option<f64>,
}

impl Baseline {
    /// Rises by this share of the gap per sample.
    const RISE: f64 = 1e-5;

    fn update(&mut self, sample: f64) -> f64 {
        let next = match self.seconds {
            None => sample,
            Some(base) if sample < base => sample,
            Some(base) => base + (sample - base) * Self::RISE,
        };
        self.seconds = Some(next);
        next
    }
}

/// Additive increase, multiplicative decrease on latency: a response
/// slower than `tolerance` × the service's unloaded latency (or an error)
/// multiplies the limit by `backoff` — once per round trip: the responses
/// already under way when it backed off do not back it off again; a faster
/// one, while the limit is in use (at least half of it in flight), adds
/// `1 / limit` (one a limit's worth of responses).
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::layer::concurrency::{AimdConcurrency, LatencyController};
///
/// let mut aimd = AimdConcurrency::default();
/// let ms = Duration::from_millis;
/// assert_eq!(aimd.next(10.0, ms(50), 10, false), 10.1);  // the baseline: room to grow
/// assert_eq!(aimd.next(10.1, ms(80), 10, false), 9.09); // 1.6 × the baseline: back off
/// ```
#[derive(Clone, Debug)]
pub struct AimdConcurrency {
    tolerance: f64,
    backoff: f64,
    baseline: Baseline,
    /// When it last backed off.
    backed_off: Option<tokio::time::Instant>,
}

impl Default for AimdConcurrency {
    fn default() -> Self {
        Self {
            tolerance: 1.1,
            backoff: 0.9,
            baseline: Baseline { seconds: None },
            backed_off: None,
        }
    }
}

impl AimdConcurrency {
    /// A response this many times slower than the unloaded latency means
    /// overload (default 1.1). Set it above the service's own spread
    /// (its slowest unloaded responses over its fastest, the host's
    /// scheduling jitter included): a spread past it reads as overload
    /// and holds the limit below what the service takes.
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance.max(1.0);
        self
    }

    /// Overload multiplies the limit by this (default 0.9).
    pub fn backoff(mut self, backoff: f64) -> Self {
        self.backoff = backoff.clamp(0.1, 1.0);
        self
    }
}

impl LatencyController for AimdConcurrency {
    fn next(&mut self, limit: f64, latency: Duration, in_flight: usize, failed: bool) -> f64 {
        let sample = latency.as_secs_f64();
        let base = self.baseline.update(sample);
        if failed || sample > base * self.tolerance {
            // A response sent before the last back-off says nothing new.
            let now = tokio::time::Instant::now();
            let fresh = self
                .backed_off
                .is_none_or(|at| now.duration_since(at) >= latency);
            if !fresh {
                return limit;
            }
            self.backed_off = Some(now);
            (limit * self.backoff * 100.0).round() / 100.0
        } else if in_flight as f64 * 2.0 >= limit {
            limit + 1.0 / limit
        } else {
            limit
        }
    }
}

/// A gradient in the spirit of Netflix's Gradient2: the ratio of the
/// long-term (unloaded) latency to the short-term one, `gradient =
/// clamp(tolerance × long / short, 0.5, 1)`; the limit moves toward
/// `limit × gradient + queue` by `smoothing` of the way per response. While
/// the service keeps up, the gradient is 1 and the limit grows by `queue`;
/// once requests queue in it, short-term latency rises and the limit
/// settles where `limit × (1 - gradient) = queue`: just past the service's
/// concurrency.
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::layer::concurrency::{LatencyController, Gradient};
///
/// let mut gradient = Gradient::default();
/// let ms = Duration::from_millis;
/// let grown = gradient.next(20.0, ms(50), 20, false);
/// assert!(grown > 20.0);
/// // Twice the latency: the gradient halves the limit's target.
/// let mut limit = grown;
/// for _ in 0..50 {
///     limit = gradient.next(limit, ms(100), 20, false);
/// }
/// assert!(limit < 15.0, "{limit}");
/// ```
#[derive(Clone, Debug)]
pub struct Gradient {
    tolerance: f64,
    queue: f64,
    smoothing: f64,
    baseline: Baseline,
    /// An average over the last responses (seconds).
    short: Option<f64>,
}

impl Default for Gradient {
    fn default() -> Self {
        Self {
            tolerance: 1.05,
            queue: 1.0,
            smoothing: 0.05,
            baseline: Baseline { seconds: None },
            short: None,
        }
    }
}

impl Gradient {
    /// How much slower than the unloaded latency still counts as keeping
    /// up (default 1.05).
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance.max(1.0);
        self
    }

    /// How many requests past the estimate the limit allows, to keep
    /// probing for more (default 1).
    pub fn queue(mut self, queue: f64) -> Self {
        self.queue = queue.max(0.0);
        self
    }
}

impl LatencyController for Gradient {
    fn next(&mut self, limit: f64, latency: Duration, in_flight: usize, failed: bool) -> f64 {
        let sample = latency.as_secs_f64();
        let long = self.baseline.update(sample);
        let short = match self.short {
            None => sample,
            Some(short) => short + (sample - short) * 0.1,
        };
        self.short = Some(short);
        if failed {
            return limit * 0.9;
        }
        // An idle limit learns nothing: only grow while it is in use.
        if (in_flight as f64) * 2.0 < limit {
            return limit;
        }
        let gradient = (self.tolerance * long / short).clamp(0.5, 1.0);
        let target = limit * gradient + self.queue;
        limit + (target - limit) * self.smoothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn aimd_on_a_recorded_run() {
        let mut aimd = AimdConcurrency::default();
        let mut limit = 10.0;
        // Fast while in use: grows by 1/limit; idle: stays; slow: backs off.
        let run = [(50, 10), (50, 10), (50, 2), (70, 10), (50, 10)];
        let mut seen = Vec::new();
        for (ms, in_flight) in run {
            limit = aimd.next(limit, MS(ms), in_flight, false);
            seen.push((limit * 100.0_f64).round() / 100.0);
        }
        assert_eq!(seen, [10.1, 10.2, 10.2, 9.18, 9.29]);
        // Another slow response at once: sent before the back-off, so it
        // says nothing new.
        assert_eq!(aimd.next(9.29, MS(70), 10, false), 9.29);
        assert_eq!(
            AimdConcurrency::default().next(10.0, MS(50), 10, true),
            9.0,
            "an error backs off"
        );
    }

    #[test]
    fn the_gradient_settles_just_past_the_services_concurrency() {
        // A service of 40 workers, 50 ms each: past 40 in flight, latency
        // grows in proportion. Saturated: the limit is always in use.
        let mut gradient = Gradient::default();
        let mut limit = 5.0_f64;
        for _ in 0..20_000 {
            let in_flight = limit.floor() as usize;
            let latency = 50.0 * (in_flight as f64 / 40.0).max(1.0);
            limit = gradient.next(
                limit,
                Duration::from_secs_f64(latency / 1000.0),
                in_flight,
                false,
            );
        }
        assert!((40.0..=46.0).contains(&limit), "{limit}");
    }
}
