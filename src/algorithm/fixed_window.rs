//! Fixed window counter.

use super::State;
use crate::quota::Calendar;
use crate::{algorithm::Outcome, clock::Micros, Quota};

/// Counts cost per window aligned to multiples of the window length since
/// the clock's epoch (with the default clock, the Unix epoch: a `/min` window
/// resets at every whole minute), or for a calendar quota (`/month`) to its
/// periods. A window admits at most `limit`; across a
/// boundary two windows can admit up to twice that within one window's length.
///
/// State: `expires_at` is the current window's end, `value` the cost counted
/// in it.
///
/// ```
/// use tower_ratelimit::algorithm::{FixedWindow, State};
/// use tower_ratelimit::Quota;
/// use tower_ratelimit::clock::Micros;
///
/// let fw = FixedWindow::new(Quota::per_minute(2).unwrap());
/// let mut s = State::default();
/// s = fw.consume(s, Micros::from_secs(59), 2); // 0:59, window full
/// assert!(!fw.check(s, Micros::from_millis(59_500), 1).is_allowed());
/// assert!(fw.check(s, Micros::from_secs(60), 1).is_allowed()); // 1:00, a new window
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    limit: u32,
    window_us: u64,
    /// The calendar whose periods are the windows, if any.
    calendar: Option<Calendar>,
}

impl FixedWindow {
    /// The window algorithm for `quota` (its burst does not apply).
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Self {
            limit: quota.limit(),
            window_us: quota.window_micros().as_u64(),
            calendar: quota.calendar(),
        }
    }

    /// The window `now` falls in, as (end, cost counted so far).
    #[inline]
    fn current(&self, state: State, now: u64) -> (u64, u64) {
        if state.is_expired(Micros::new(now)) {
            let end = match &self.calendar {
                Some(calendar) => calendar.end_after(Micros::new(now)).as_u64(),
                None => (now / self.window_us + 1) * self.window_us,
            };
            (end, 0)
        } else {
            (state.expires_at.as_u64(), state.value)
        }
    }

    /// What a request of `cost` at `now` would get.
    #[inline]
    pub fn check(&self, state: State, now: Micros, cost: u32) -> Outcome {
        let now = now.as_u64();
        let (end, used) = self.current(state, now);
        let limit = u64::from(self.limit);
        let reset = |used: u64| Micros::new(if used > 0 { end - now } else { 0 });
        // `used` never exceeds the limit in states this algorithm wrote;
        // saturating keeps even a foreign state (a fingerprint collision in
        // the memory backend) from panicking.
        if u64::from(cost) > limit {
            Outcome::never(self.limit, limit.saturating_sub(used), reset(used))
        } else if used + u64::from(cost) <= limit {
            let used = used + u64::from(cost);
            Outcome::allowed(self.limit, limit - used, reset(used))
        } else {
            Outcome::denied(
                self.limit,
                limit.saturating_sub(used),
                reset(used),
                Micros::new(end - now),
            )
        }
    }

    /// Give back `units` a request took: they leave the window's count, if
    /// that window is still the current one.
    #[inline]
    pub fn refund(&self, state: State, now: Micros, units: u32) -> State {
        if state.is_expired(now) {
            return state;
        }
        State {
            value: state.value.saturating_sub(u64::from(units)),
            ..state
        }
    }

    /// The state after charging `units` used beyond a reservation: the
    /// window's count may pass the limit (a debt until the window ends).
    #[inline]
    pub fn charge(&self, state: State, now: Micros, units: u32) -> State {
        let (end, used) = self.current(state, now.as_u64());
        State {
            expires_at: Micros::new(end),
            value: used.saturating_add(u64::from(units)),
        }
    }

    /// The state after counting `cost` at `now`, never past the limit.
    #[inline]
    pub fn consume(&self, state: State, now: Micros, cost: u32) -> State {
        let (end, used) = self.current(state, now.as_u64());
        State {
            expires_at: Micros::new(end),
            value: (used + u64::from(cost)).min(u64::from(self.limit)),
        }
    }
}
