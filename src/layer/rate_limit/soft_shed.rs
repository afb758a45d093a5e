//! [`SoftShed`]: delay admitted requests as a key nears its limit, before
//! refusing them at it.

use std::time::Duration;

use crate::Decision;

/// Soft shedding before the wall, for
/// [`RateLimitLayer::soft_shed`](crate::RateLimitLayer::soft_shed): once a
/// key has used a share of a limit (80% by default), each request it makes
/// is still admitted, but its call waits first, the longer the closer the
/// key is to the limit — up to `max_delay` as it reaches it. A herd that
/// would spend the rest of a window in one burst is spread over it instead;
/// at 100% requests are refused as before.
///
/// A delayed request was counted when it was admitted, once: the delay
/// costs nothing on any backend, so the limit admits exactly what it would
/// without it. The request carries a [`Delayed`] extension (how long it
/// waited), and the metrics count it with the outcome `delayed`.
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::layer::SoftShed;
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// // From 80% of 100/min, up to 2 s of delay at the limit.
/// let layer = RateLimitLayer::new("100/min".parse::<Policy>()?)
///     .soft_shed(SoftShed::new(Duration::from_secs(2)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SoftShed {
    from: f64,
    max_delay: Duration,
}

/// How long a request waited, soft shed, before its handler ran: in the
/// request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delayed(pub Duration);

impl SoftShed {
    /// Delay from 80% of a limit used, by up to `max_delay` at the limit.
    pub fn new(max_delay: Duration) -> Self {
        Self {
            from: 0.8,
            max_delay,
        }
    }

    /// Start delaying once this share of a limit is used (0 to 1).
    pub fn from_share(mut self, share: f64) -> Self {
        self.from = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.8
        };
        self
    }

    /// How long an admission `decision` waits: none below the share; past
    /// it, in proportion to how far the most used limit is toward full.
    pub(super) fn delay_for(&self, decision: &Decision) -> Option<Duration> {
        let used = decision
            .outcomes()
            .filter(|o| o.limit() > 0)
            .map(|o| 1.0 - f64::from(o.remaining()) / f64::from(o.limit()))
            .fold(0.0, f64::max);
        if used <= self.from || self.from >= 1.0 {
            return None;
        }
        let past = ((used - self.from) / (1.0 - self.from)).min(1.0);
        Some(self.max_delay.mul_f64(past)).filter(|d| !d.is_zero())
    }
}
