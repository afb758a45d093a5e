//! The reference model of every algorithm, written from its definition and
//! slow on purpose: a list of the admitted requests per key, and for each
//! new request the rule read off that list. It shares nothing with `src/`
//! (not `Quota`'s arithmetic, not a state), so what is compared with it is
//! compared with something it did not write. Used by `tests/it/decisions/reference.rs`
//! and by the fuzz target `differential`.
//!
//! The definitions, for a limit `L` per window `W` (µs) and a request of
//! cost `c` at `t`:
//! * sliding log: the costs admitted in `(t − W, t]`, plus `c`, are at
//!   most `L`;
//! * fixed window: the costs admitted in the same window `⌊t / W⌋`, plus
//!   `c`, are at most `L`;
//! * sliding window counter: with `p` and `n` the costs of the previous and
//!   current windows and `e` the time since the current one began,
//!   `p·(W − e) + (n + c)·W ≤ L·W`;
//! * the buckets, with the emission interval `T = ⌈W / L⌉` µs and a
//!   capacity `B` (the burst, or `L`): a token bucket holding at most `B·T`
//!   µs of credit, refilled one a µs, a request taking `c·T`; a leaky
//!   bucket whose level drains one a µs and may rise to `B·T`; GCRA's
//!   theoretical arrival time. Three textbook forms, one rate.
//!
//! Every request with `c > L` (or `c > B`) never fits. A denied request's
//! retry-after is the earliest moment the same request would fit.

use tower_ratelimit::Algorithm;

/// One key's admitted requests, and the rule.
#[derive(Clone, Debug)]
pub struct Reference {
    algorithm: Algorithm,
    limit: u64,
    window: u64,
    capacity: u64,
    admitted: Vec<(u64, u64)>,
}

impl Reference {
    pub fn new(algorithm: Algorithm, limit: u64, window: u64, burst: Option<u64>) -> Self {
        let buckets = matches!(
            algorithm,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        );
        let capacity = if buckets {
            burst.unwrap_or(limit)
        } else {
            limit
        };
        Self {
            algorithm,
            limit,
            window,
            capacity,
            admitted: Vec::new(),
        }
    }

    /// Counts a request of `cost` admitted at `t`.
    pub fn admit(&mut self, t: u64, cost: u64) {
        self.admitted.push((t, cost));
    }

    fn interval(&self) -> u64 {
        self.window.div_ceil(self.limit)
    }

    /// The costs admitted in `(t − W, t]`.
    fn in_last_window(&self, t: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(a, _)| a + self.window > t && a <= t)
            .map(|&(_, c)| c)
            .sum()
    }

    fn in_window(&self, index: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(a, _)| a / self.window == index)
            .map(|&(_, c)| c)
            .sum()
    }

    /// Whether a request of `cost` fits at `t`.
    pub fn fits(&self, t: u64, cost: u64) -> bool {
        if cost > self.capacity {
            return false;
        }
        let (w, l) = (self.window, self.limit);
        match self.algorithm {
            Algorithm::SlidingLog => self.in_last_window(t) + cost <= l,
            Algorithm::FixedWindow => self.in_window(t / w) + cost <= l,
            Algorithm::SlidingWindow => {
                let index = t / w;
                let previous = if index == 0 {
                    0
                } else {
                    self.in_window(index - 1)
                };
                let current = self.in_window(index);
                let elapsed = t - index * w;
                u128::from(previous) * u128::from(w - elapsed)
                    + u128::from(current + cost) * u128::from(w)
                    <= u128::from(l) * u128::from(w)
            }
            Algorithm::TokenBucket => {
                // Credit in µs, full at the start, refilled one a µs.
                let full = self.capacity * self.interval();
                let mut credit = full;
                let mut at = 0;
                for &(a, c) in &self.admitted {
                    credit = (credit + (a - at)).min(full);
                    credit -= c * self.interval();
                    at = a;
                }
                credit = (credit + (t - at)).min(full);
                credit >= cost * self.interval()
            }
            Algorithm::LeakyBucket => {
                // The level, in µs, drains one a µs.
                let mut level = 0u64;
                let mut at = 0;
                for &(a, c) in &self.admitted {
                    level = level.saturating_sub(a - at) + c * self.interval();
                    at = a;
                }
                level = level.saturating_sub(t - at);
                level + cost * self.interval() <= self.capacity * self.interval()
            }
            Algorithm::Gcra => {
                let mut tat = 0u64;
                for &(a, c) in &self.admitted {
                    tat = tat.max(a) + c * self.interval();
                }
                tat.max(t) + cost * self.interval() - t <= self.capacity * self.interval()
            }
        }
    }

    /// The earliest moment from `t` on at which the request fits, found by
    /// looking at every moment where the rule can change its mind.
    pub fn fits_from(&self, t: u64, cost: u64) -> Option<u64> {
        if cost > self.capacity {
            return None;
        }
        if self.algorithm == Algorithm::SlidingWindow {
            // Its estimate falls between boundaries; two windows on, both
            // counts are empty. (Its retry time is compared only as later.)
            return Some((t / self.window + 2) * self.window);
        }
        let mut candidates: Vec<u64> = vec![t];
        for &(a, _) in &self.admitted {
            candidates.push(a + self.window);
            candidates.push((a / self.window + 1) * self.window);
        }
        candidates.push((t / self.window + 1) * self.window);
        candidates.retain(|&c| c >= t);
        candidates.sort_unstable();
        if matches!(
            self.algorithm,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        ) {
            // Credit grows one a µs: the first fitting moment, by bisection
            // over a span that surely fits (everything drained).
            let (mut low, mut high) = (
                t,
                t + (self.admitted.len() as u64 + self.capacity + 1) * self.interval() * 2
                    + self.window,
            );
            if self.fits(t, cost) {
                return Some(t);
            }
            while low + 1 < high {
                let mid = low + (high - low) / 2;
                if self.fits(mid, cost) {
                    high = mid;
                } else {
                    low = mid;
                }
            }
            return Some(high);
        }
        candidates.into_iter().find(|&c| self.fits(c, cost))
    }
}
