//! What a shared capacity reports (feature `metrics`): its requests by
//! class and outcome, its active tenants, and each class's share of what
//! this server admitted over the last window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::algorithm::fair_share::Verdict;
use crate::layer::Class;

/// Admissions by class in the current window, for the class shares.
#[derive(Debug, Default)]
pub(super) struct Observed {
    /// When the current window began, µs on the capacity's clock.
    started: AtomicU64,
    admitted: [AtomicU64; 3],
}

impl Observed {
    /// Count one ended request; when a window (the capacity's, or a
    /// second for a capacity in flight) has passed, report each class's
    /// share of the admissions in it.
    pub(super) fn record(
        &self,
        name: &Arc<str>,
        class: Class,
        verdict: &Verdict,
        now: u64,
        window: Option<u64>,
    ) {
        let window = window.unwrap_or(1_000_000);
        #[cfg(feature = "metrics")]
        {
            let outcome = if verdict.admitted {
                "admitted"
            } else {
                "refused"
            };
            // The capacity's name is shared, not copied, on every request.
            let capacity = || metrics::SharedString::from_shared(Arc::clone(name));
            metrics::counter!(
                "ratelimit_shared_requests_total",
                "capacity" => capacity(),
                "class" => class.as_str(),
                "outcome" => outcome
            )
            .increment(1);
            metrics::gauge!("ratelimit_shared_active_tenants", "capacity" => capacity())
                .set(f64::from(verdict.active));
        }
        if verdict.admitted {
            self.admitted[class.index()].fetch_add(1, Ordering::Relaxed);
        }
        let started = self.started.load(Ordering::Relaxed);
        let rolled = now.saturating_sub(started) >= window
            && self
                .started
                .compare_exchange(started, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        if rolled {
            let counts = self
                .admitted
                .each_ref()
                .map(|n| n.swap(0, Ordering::Relaxed));
            let total: u64 = counts.iter().sum();
            #[cfg(feature = "metrics")]
            for (class, count) in Class::ALL.into_iter().zip(counts) {
                let share = if total == 0 {
                    0.0
                } else {
                    count as f64 / total as f64
                };
                metrics::gauge!(
                    "ratelimit_shared_class_share",
                    "capacity" => metrics::SharedString::from_shared(Arc::clone(name)),
                    "class" => class.as_str()
                )
                .set(share);
            }
            let _ = total;
        }
        let _ = name;
    }
}
