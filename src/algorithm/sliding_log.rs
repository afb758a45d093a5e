//! Sliding window log.

use std::collections::VecDeque;

use crate::{algorithm::Outcome, clock::Micros, Quota};

/// Remembers the time and cost of every admitted request for one window. A
/// request of cost `c` at `now` fits when the cost admitted in
/// `(now − W, now]` plus `c` is at most the limit — exact, for every window,
/// at the price of memory: one entry per admitted request, at most `limit`
/// entries per key (requests at the same microsecond share one entry).
///
/// ```
/// use tower_ratelimit::algorithm::{SlidingLog, SlidingLogState};
/// use tower_ratelimit::Quota;
/// use tower_ratelimit::clock::Micros;
///
/// let log = SlidingLog::new(Quota::per_minute(2).unwrap());
/// let mut s = SlidingLogState::default();
/// log.consume(&mut s, Micros::from_secs(10), 1);
/// log.consume(&mut s, Micros::from_secs(50), 1);
/// let denied = log.check(&mut s, Micros::from_secs(60), 1);
/// // The request at 0:10 leaves the window at 1:10.
/// assert_eq!(denied.retry_after_micros(), Some(Micros::from_secs(10)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u32,
    window_us: u64,
}

/// One key's log: admitted requests in the last window, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    entries: VecDeque<Entry>,
    /// Sum of `entries`' costs.
    used: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    at: u64,
    cost: u64,
}

impl SlidingLogState {
    /// From when the log is empty under a window of `window` (zero if it is now).
    pub fn expires_at(&self, window: Micros) -> Micros {
        Micros::new(self.entries.back().map_or(0, |e| e.at + window.as_u64()))
    }

    /// Entries held (for memory accounting).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Heap bytes the entries occupy.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// Whether the log holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap bytes one more entry would allocate: none while the log has
    /// room, else what growing it takes (it doubles, from four entries).
    pub fn growth_bytes(&self) -> usize {
        if self.entries.len() < self.entries.capacity() {
            return 0;
        }
        self.entries.capacity().max(4) * std::mem::size_of::<Entry>()
    }

    /// Give back most of the allocation when the entries fill under a
    /// quarter of it, so a log that was long once does not keep its peak.
    pub(crate) fn shrink_if_sparse(&mut self) {
        let capacity = self.entries.capacity();
        if capacity > 16 && self.entries.len() < capacity / 4 {
            self.entries.shrink_to((self.entries.len() * 2).max(16));
        }
    }

    /// Add `units` at `now` without allocating: into the newest entry,
    /// moved to `now` (its earlier units then leave the window later than
    /// they would have: stricter, never looser). Whether there was an
    /// entry to take them.
    pub(crate) fn merge_into_newest(&mut self, now: Micros, units: u32) -> bool {
        let Some(last) = self.entries.back_mut() else {
            return false;
        };
        last.at = last.at.max(now.as_u64());
        last.cost += u64::from(units);
        self.used += u64::from(units);
        true
    }

    /// Forget entries outside the window `(now − W, now]`.
    fn forget_outside(&mut self, now: u64, window_us: u64) {
        let Some(cutoff) = now.checked_sub(window_us) else {
            return; // the window reaches back before time zero
        };
        while let Some(e) = self.entries.front().filter(|e| e.at <= cutoff) {
            self.used -= e.cost;
            self.entries.pop_front();
        }
    }
}

impl SlidingLog {
    /// The sliding log for `quota` (its burst does not apply).
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Self {
            limit: quota.limit(),
            window_us: quota.window_micros().as_u64(),
        }
    }

    /// The window length.
    pub fn window(&self) -> Micros {
        Micros::new(self.window_us)
    }

    /// What a request of `cost` at `now` would get. Forgets entries that have
    /// left the window, which changes no decision.
    #[inline]
    pub fn check(&self, state: &mut SlidingLogState, now: Micros, cost: u32) -> Outcome {
        let reset = |s: &SlidingLogState| s.expires_at(self.window()).saturating_sub(now);
        let now = now.as_u64();
        state.forget_outside(now, self.window_us);
        let limit = u64::from(self.limit);
        if u64::from(cost) > limit {
            return Outcome::never(self.limit, limit.saturating_sub(state.used), reset(state));
        }
        let used = state.used + u64::from(cost);
        if used <= limit {
            let reset = if cost > 0 {
                self.window()
            } else {
                reset(state)
            };
            return Outcome::allowed(self.limit, limit - used, reset);
        }
        // Wait until enough of the oldest entries have left the window.
        let mut to_free = used - limit;
        let mut retry_at = now;
        for e in &state.entries {
            retry_at = e.at + self.window_us;
            to_free = to_free.saturating_sub(e.cost);
            if to_free == 0 {
                break;
            }
        }
        Outcome::denied(
            self.limit,
            limit.saturating_sub(state.used),
            reset(state),
            Micros::new(retry_at - now),
        )
    }

    /// Take `units` out of the entry made at `at` (a permit of a limit of
    /// requests in flight, given back): whether it was still there.
    #[inline]
    pub fn release(
        &self,
        state: &mut SlidingLogState,
        now: Micros,
        at: Micros,
        units: u32,
    ) -> bool {
        state.forget_outside(now.as_u64(), self.window_us);
        let at = at.as_u64();
        let Some(i) = state.entries.iter().position(|e| e.at == at) else {
            return false;
        };
        let taken = u64::from(units).min(state.entries[i].cost);
        state.entries[i].cost -= taken;
        state.used -= taken;
        if state.entries[i].cost == 0 {
            state.entries.remove(i);
        }
        true
    }

    /// Give back `units` a request took: they leave the newest entries.
    #[inline]
    pub fn refund(&self, state: &mut SlidingLogState, now: Micros, units: u32) {
        state.forget_outside(now.as_u64(), self.window_us);
        let mut units = u64::from(units);
        while units > 0 {
            let Some(last) = state.entries.back_mut() else {
                break;
            };
            let taken = units.min(last.cost);
            last.cost -= taken;
            state.used -= taken;
            units -= taken;
            if last.cost == 0 {
                state.entries.pop_back();
            }
        }
    }

    /// Charges `units` used beyond a reservation at `now`: the log may hold
    /// more than the limit (a debt that leaves with its entry).
    #[inline]
    pub fn charge(&self, state: &mut SlidingLogState, now: Micros, units: u32) {
        let now = now.as_u64();
        state.forget_outside(now, self.window_us);
        let units = u64::from(units);
        if units == 0 {
            return;
        }
        state.used += units;
        match state.entries.back_mut() {
            Some(last) if last.at >= now => last.cost += units,
            _ => state.entries.push_back(Entry {
                at: now,
                cost: units,
            }),
        }
    }

    /// Counts `cost` at `now`. When a denied request is counted, the oldest
    /// entries make room for it, so the log never holds more than the limit.
    #[inline]
    pub fn consume(&self, state: &mut SlidingLogState, now: Micros, cost: u32) {
        let now = now.as_u64();
        state.forget_outside(now, self.window_us);
        let cost = u64::from(cost).min(u64::from(self.limit));
        if cost == 0 {
            return;
        }
        let limit = u64::from(self.limit);
        while state.used + cost > limit {
            let Some(front) = state.entries.front_mut() else {
                break;
            };
            let excess = state.used + cost - limit;
            let taken = excess.min(front.cost);
            front.cost -= taken;
            state.used -= taken;
            if front.cost == 0 {
                state.entries.pop_front();
            }
        }
        state.used += cost;
        match state.entries.back_mut() {
            // A `now` a little behind the newest entry (another thread read
            // the clock first and took the lock second) joins that entry, so
            // the log stays in time order.
            Some(last) if last.at >= now => last.cost += cost,
            _ => state.entries.push_back(Entry { at: now, cost }),
        }
    }
}
