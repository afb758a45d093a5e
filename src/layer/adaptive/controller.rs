//! How the factor follows the service's health: a table of steps, or AIMD.

use super::window::ServiceHealth;

/// Chooses the next factor of an adaptive limit from the current one and
/// what the last window saw. The [`Adaptive`](super::Adaptive) around it
/// applies the bounds, the minimum of responses, and the pace of recovery.
pub trait HealthController: Send + Sync + 'static {
    /// The factor to apply next, in `(0, 1]`.
    fn next(&self, factor: f64, health: &ServiceHealth) -> f64;

    /// The factor one step up from `factor` toward `target`, when the
    /// limit recovers: by default the target itself.
    fn step_up(&self, factor: f64, target: f64) -> f64 {
        let _ = factor;
        target
    }
}

/// A table from failure rate to factor: above each rate (the highest that
/// applies), its factor; below them all, the full limit. Recovery climbs the
/// table one step at a time (unless [`jump_up`](Self::jump_up)).
///
/// The default is over 10% failures → half the limit, over 5% → three
/// quarters, otherwise the whole limit.
///
/// ```
/// use tower_ratelimit::layer::adaptive::{HealthController, ServiceHealth, Steps};
///
/// let steps = Steps::default();
/// let sick = ServiceHealth { responses: 100.0, failures: 20.0, ..Default::default() };
/// assert_eq!(steps.next(1.0, &sick), 0.5);
/// let well = ServiceHealth { responses: 100.0, failures: 1.0, ..Default::default() };
/// assert_eq!(steps.next(0.5, &well), 1.0); // the target; Adaptive climbs to it by steps
/// assert_eq!(steps.step_up(0.5, 1.0), 0.75);
/// ```
#[derive(Clone, Debug)]
pub struct Steps {
    /// (failure rate above which it applies, factor), the highest rate first.
    table: Vec<(f64, f64)>,
    jump: bool,
}

impl Default for Steps {
    fn default() -> Self {
        Self::new([(0.10, 0.5), (0.05, 0.75)])
    }
}

impl Steps {
    /// Above each failure rate, its factor (each in `(0, 1]`).
    pub fn new(table: impl IntoIterator<Item = (f64, f64)>) -> Self {
        let mut table: Vec<(f64, f64)> = table
            .into_iter()
            .filter(|(rate, factor)| rate.is_finite() && factor.is_finite())
            .map(|(rate, factor)| (rate.clamp(0.0, 1.0), factor.clamp(f64::MIN_POSITIVE, 1.0)))
            .collect();
        table.sort_by(|a, b| b.0.total_cmp(&a.0));
        Self { table, jump: false }
    }

    /// Recover to the target at once instead of a step at a time.
    pub fn jump_up(mut self) -> Self {
        self.jump = true;
        self
    }
}

impl HealthController for Steps {
    fn next(&self, _factor: f64, health: &ServiceHealth) -> f64 {
        let rate = health.failure_rate();
        self.table
            .iter()
            .find(|(above, _)| rate > *above)
            .map_or(1.0, |(_, factor)| *factor)
    }

    fn step_up(&self, factor: f64, target: f64) -> f64 {
        if self.jump {
            return target;
        }
        // The lowest level of the table (or the whole limit) above `factor`.
        self.table
            .iter()
            .map(|(_, f)| *f)
            .chain([1.0])
            .filter(|f| *f > factor && *f <= target)
            .min_by(f64::total_cmp)
            .unwrap_or(target)
    }
}

/// Additive increase, multiplicative decrease: a window whose failure rate
/// passes the threshold multiplies the factor by `decrease`; a good one adds
/// `increase`.
///
/// ```
/// use tower_ratelimit::layer::adaptive::{AimdLimits, HealthController, ServiceHealth};
///
/// let aimd = AimdLimits::default(); // over 5%: × 0.5; else + 0.1
/// assert_eq!(aimd.next(1.0, &ServiceHealth { responses: 50.0, failures: 10.0, ..Default::default() }), 0.5);
/// assert!((aimd.next(0.5, &ServiceHealth { responses: 50.0, failures: 0.0, ..Default::default() }) - 0.6).abs() < 1e-9);
/// ```
#[derive(Clone, Debug)]
pub struct AimdLimits {
    threshold: f64,
    decrease: f64,
    increase: f64,
}

impl Default for AimdLimits {
    fn default() -> Self {
        Self {
            threshold: 0.05,
            decrease: 0.5,
            increase: 0.1,
        }
    }
}

impl AimdLimits {
    /// A window is bad past this failure rate (default 5%).
    pub fn threshold(mut self, rate: f64) -> Self {
        self.threshold = rate.clamp(0.0, 1.0);
        self
    }

    /// A bad window multiplies the factor by this (default 0.5).
    pub fn decrease(mut self, by: f64) -> Self {
        self.decrease = by.clamp(0.0, 1.0);
        self
    }

    /// A good window adds this to the factor (default 0.1).
    pub fn increase(mut self, by: f64) -> Self {
        self.increase = by.clamp(0.0, 1.0);
        self
    }
}

impl HealthController for AimdLimits {
    fn next(&self, factor: f64, health: &ServiceHealth) -> f64 {
        if health.failure_rate() > self.threshold {
            factor * self.decrease
        } else {
            (factor + self.increase).min(1.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(responses: u64, failures: u64) -> ServiceHealth {
        ServiceHealth {
            responses: responses as f64,
            failures: failures as f64,
            ..ServiceHealth::default()
        }
    }

    #[test]
    fn the_default_steps_are_the_table_asked_for() {
        let steps = Steps::default();
        assert_eq!(steps.next(1.0, &window(100, 11)), 0.5);
        assert_eq!(
            steps.next(1.0, &window(100, 10)),
            0.75,
            "10% is not over 10%"
        );
        assert_eq!(steps.next(1.0, &window(100, 6)), 0.75);
        assert_eq!(steps.next(0.5, &window(100, 5)), 1.0);
        assert_eq!(steps.step_up(0.5, 1.0), 0.75);
        assert_eq!(steps.step_up(0.75, 1.0), 1.0);
        assert_eq!(steps.step_up(0.5, 0.75), 0.75);
        assert_eq!(Steps::default().jump_up().step_up(0.5, 1.0), 1.0);
    }

    #[test]
    fn aimd_halves_on_bad_windows_and_climbs_on_good_ones() {
        let aimd = AimdLimits::default();
        // A recorded run: two bad windows, then good ones.
        let mut factor = 1.0;
        let mut seen = Vec::new();
        for failures in [20, 9, 0, 0, 0, 1, 0, 0] {
            factor = aimd.next(factor, &window(100, failures));
            seen.push((factor * 100.0_f64).round() / 100.0);
        }
        assert_eq!(seen, [0.5, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85]);
    }
}
