//! Requests counted by whole windows: a rate's estimate in a few integers.

/// Requests counted in whole windows (`k = now / W`), the current one's
/// and the one before: a sliding estimate of a rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    k: u64,
    current: u64,
    previous: u64,
}

impl Counted {
    /// One more at `now`.
    pub(super) fn count(&mut self, now: u64, window: u64) {
        let k = now / window;
        // A caller whose clock was read before another's counts in the
        // window it finds.
        if k > self.k {
            self.previous = if k == self.k + 1 { self.current } else { 0 };
            self.current = 0;
            self.k = k;
        }
        self.current += 1;
    }

    /// The requests of the last window, times 1024: the current window's
    /// and the part of the one before that the last window still covers.
    pub(super) fn last_window(&self, now: u64, window: u64) -> u64 {
        let k = now / window;
        let (current, previous) = match k.saturating_sub(self.k) {
            0 => (self.current, self.previous),
            1 => (0, self.current),
            _ => (0, 0),
        };
        let left = (window - now % window) * 1024 / window;
        current * 1024 + previous * left
    }
}
