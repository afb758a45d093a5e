//! Sliding window counter.

use super::State;
use crate::{algorithm::Outcome, clock::Micros, Quota};

/// Counts per aligned window, like [`FixedWindow`](super::FixedWindow), but
/// judges a request by the current window's count plus the previous window's
/// count weighted by how much of it the sliding window still overlaps:
///
/// ```text
/// estimate = previous × (W − elapsed) / W + current
/// ```
///
/// where `elapsed` is the time since the current window began. A request of
/// cost `c` fits when `estimate + c ≤ limit`. The comparison is made exactly,
/// in integers (`previous·(W − elapsed) + (current + c)·W ≤ limit·W`), with
/// no rounding.
///
/// It is an approximation of the sliding log that assumes the previous
/// window's requests were spread evenly. Its bound: any window of length `W`
/// admits at most `limit + previous × elapsed / W`, always less than twice the
/// limit, and exactly the limit for evenly spread traffic.
///
/// State: `expires_at` is the end of the window *after* the current one (when
/// both counts are forgotten); `value` packs `previous << 32 | current`.
///
/// ```
/// use tower_ratelimit::algorithm::{SlidingWindow, State};
/// use tower_ratelimit::Quota;
/// use tower_ratelimit::clock::Micros;
///
/// let sw = SlidingWindow::new(Quota::per_minute(100).unwrap());
/// let s = sw.consume(State::default(), Micros::ZERO, 100); // 100 in minute 0
/// // At 1:30 the previous minute still weighs half: 50 left.
/// assert_eq!(sw.check(s, Micros::from_secs(90), 0).remaining(), 50);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: u32,
    window_us: u64,
}

/// The two counts as seen from one moment.
struct Counts {
    /// Start of the window `now` is in.
    start: u64,
    previous: u64,
    current: u64,
}

impl SlidingWindow {
    /// The sliding window counter for `quota` (its burst does not apply).
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Self {
            limit: quota.limit(),
            window_us: quota.window_micros().as_u64(),
        }
    }

    #[inline]
    fn counts(&self, state: State, now: u64) -> Counts {
        let w = self.window_us;
        let start = now / w * w;
        if state.is_expired(Micros::new(now)) {
            return Counts {
                start,
                previous: 0,
                current: 0,
            };
        }
        let (previous, current) = (state.value >> 32, state.value & u64::from(u32::MAX));
        // The state's current window started at expires_at − 2W. A `now` a
        // little behind it (another thread read the clock first and took the
        // lock second) counts in the state's window rather than erasing it.
        let state_start = state.expires_at.as_u64().saturating_sub(2 * w);
        match start.checked_sub(state_start) {
            None | Some(0) => Counts {
                start: state_start,
                previous,
                current,
            },
            Some(gap) if gap == w => Counts {
                start,
                previous: current,
                current: 0,
            },
            Some(_) => Counts {
                start,
                previous: 0,
                current: 0,
            },
        }
    }

    /// Time into the window of `c` (0 if `now` is a little before it).
    #[inline]
    fn elapsed(c: &Counts, now: u64) -> u64 {
        now.saturating_sub(c.start)
    }

    /// `estimate × W` for these counts at `now`, exact.
    #[inline]
    fn used_scaled(&self, c: &Counts, now: u64) -> u128 {
        let w = u128::from(self.window_us);
        let overlap = w - u128::from(Self::elapsed(c, now));
        u128::from(c.previous) * overlap + u128::from(c.current) * w
    }

    /// Whole units left when `used_scaled` is taken: `⌊(limit·W − used) / W⌋`.
    #[inline]
    fn free(&self, used_scaled: u128) -> u64 {
        let w = u128::from(self.window_us);
        let capacity = u128::from(self.limit) * w;
        (capacity.saturating_sub(used_scaled) / w) as u64
    }

    #[inline]
    fn reset_after(&self, c: &Counts, now: u64) -> Micros {
        Micros::new(if c.current > 0 {
            (c.start + 2 * self.window_us).saturating_sub(now)
        } else if c.previous > 0 {
            (c.start + self.window_us).saturating_sub(now)
        } else {
            0
        })
    }

    /// What a request of `cost` at `now` would get.
    #[inline]
    pub fn check(&self, state: State, now: Micros, cost: u32) -> Outcome {
        let now = now.as_u64();
        let c = self.counts(state, now);
        let used = self.used_scaled(&c, now);
        let w = u128::from(self.window_us);
        let with_cost = used + u128::from(cost) * w;
        if cost > self.limit {
            return Outcome::never(self.limit, self.free(used), self.reset_after(&c, now));
        }
        if with_cost <= u128::from(self.limit) * w {
            let after = Counts {
                current: c.current + u64::from(cost),
                ..c
            };
            return Outcome::allowed(
                self.limit,
                self.free(with_cost),
                self.reset_after(&after, now),
            );
        }
        let retry_at = self.fits_again_at(&c, cost);
        Outcome::denied(
            self.limit,
            self.free(used),
            self.reset_after(&c, now),
            Micros::new(retry_at.saturating_sub(now)),
        )
    }

    /// The first moment a denied request of `cost` fits, if nothing else comes.
    fn fits_again_at(&self, c: &Counts, cost: u32) -> u64 {
        let w = self.window_us;
        // Earliest offset into a window at which `previous·(W − e) ≤ room·W`.
        let offset = |previous: u64, room: u64| -> u64 {
            if previous == 0 {
                return 0;
            }
            let allowed_overlap = u128::from(room) * u128::from(w) / u128::from(previous);
            w.saturating_sub(allowed_overlap.min(u128::from(w)) as u64)
        };
        let limit = u64::from(self.limit);
        match limit.checked_sub(c.current + u64::from(cost)) {
            // Room in this window once the previous one weighs less.
            Some(room) => c.start + offset(c.previous, room),
            // This window alone is too full: wait for the next, where the
            // current count becomes the previous one.
            None => c.start + w + offset(c.current, limit - u64::from(cost)),
        }
    }

    /// Give back `units` a request took: from the current window's count,
    /// then (if the window turned since) from the previous one's.
    #[inline]
    pub fn refund(&self, state: State, now: Micros, units: u32) -> State {
        let c = self.counts(state, now.as_u64());
        let from_current = u64::from(units).min(c.current);
        let from_previous = (u64::from(units) - from_current).min(c.previous);
        State {
            expires_at: Micros::new(c.start + 2 * self.window_us),
            value: ((c.previous - from_previous) << 32) | (c.current - from_current),
        }
    }

    /// The state after charging `units` used beyond a reservation: the
    /// current window's count may pass the limit (a debt that weighs on the
    /// next window too), up to the 32 bits it is kept in.
    #[inline]
    pub fn charge(&self, state: State, now: Micros, units: u32) -> State {
        let c = self.counts(state, now.as_u64());
        let current = (c.current + u64::from(units)).min(u64::from(u32::MAX));
        State {
            expires_at: Micros::new(c.start + 2 * self.window_us),
            value: (c.previous << 32) | current,
        }
    }

    /// The state after counting `cost` at `now`, the current window never past the limit.
    #[inline]
    pub fn consume(&self, state: State, now: Micros, cost: u32) -> State {
        let c = self.counts(state, now.as_u64());
        let current = (c.current + u64::from(cost)).min(u64::from(self.limit));
        State {
            expires_at: Micros::new(c.start + 2 * self.window_us),
            value: (c.previous << 32) | current,
        }
    }
}
