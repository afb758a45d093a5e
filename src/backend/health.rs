//! Whether a networked backend is deciding, and if not, why: a cause
//! reported when it first happens, when it changes, and when it clears —
//! not a timeout on every request and silence in the logs.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::error::{BackendError, Cause};

/// Whether a backend is deciding now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreHealth {
    /// Nothing has been asked yet (a lazily connected backend).
    Unknown,
    /// The last call was answered.
    Deciding,
    /// The last call failed, for this cause.
    Failing {
        /// Why, as far as the backend can tell.
        cause: Cause,
        /// The error as the backend reported it.
        error: String,
    },
}

/// `deciding`, `not asked yet`, or `failing (<cause>): <error>`, as the
/// example server prints it after `redis: `.
///
/// ```
/// use tower_ratelimit::backend::{Cause, StoreHealth};
///
/// let failing = StoreHealth::Failing { cause: Cause::Authentication, error: "WRONGPASS".into() };
/// assert_eq!(failing.to_string(), "failing (authentication): WRONGPASS");
/// assert_eq!(StoreHealth::Deciding.to_string(), "deciding");
/// ```
impl std::fmt::Display for StoreHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreHealth::Unknown => f.write_str("not asked yet"),
            StoreHealth::Deciding => f.write_str("deciding"),
            StoreHealth::Failing { cause, error } => write!(f, "failing ({cause}): {error}"),
        }
    }
}

/// Told of every change of [`StoreHealth`].
#[derive(Clone)]
pub(crate) struct OnChange(pub(crate) Arc<dyn Fn(&StoreHealth) + Send + Sync>);

impl std::fmt::Debug for OnChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnChange")
    }
}

/// A backend's health, recorded after each call: one atomic load when
/// nothing changed, a lock and a report when it did.
pub(crate) struct HealthTracker {
    backend: &'static str,
    /// 0: unknown; 1: deciding; 2 + a cause's index: failing.
    state: AtomicU8,
    health: Mutex<StoreHealth>,
    on_change: Option<OnChange>,
}

const UNKNOWN: u8 = 0;
const DECIDING: u8 = 1;

impl HealthTracker {
    pub(crate) fn new(backend: &'static str, on_change: Option<OnChange>) -> Self {
        Self {
            backend,
            state: AtomicU8::new(UNKNOWN),
            health: Mutex::new(StoreHealth::Unknown),
            on_change,
        }
    }

    pub(crate) fn health(&self) -> StoreHealth {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How a call ended.
    pub(crate) fn record<T>(&self, result: &Result<T, BackendError>) {
        #[cfg(feature = "metrics")]
        if let Err(error) = result {
            metrics::counter!(
                "ratelimit_store_failures_total",
                "backend" => self.backend,
                "cause" => error.cause().as_str(),
            )
            .increment(1);
        }
        // One key's trouble is counted, but the store answered: deciding.
        let failing = result.as_ref().err().filter(|e| !e.is_about_one_key());
        let state = failing.map_or(DECIDING, |error| 2 + error.cause() as u8);
        if self.state.load(Ordering::Acquire) == state {
            return;
        }
        // Changes are made and reported one at a time, in order.
        let mut held = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        if self.state.swap(state, Ordering::AcqRel) == state {
            return;
        }
        *held = match failing {
            None => StoreHealth::Deciding,
            Some(error) => StoreHealth::Failing {
                cause: error.cause(),
                error: error.to_string(),
            },
        };
        self.report(&held);
        if let Some(on_change) = &self.on_change {
            (on_change.0)(&held);
        }
    }

    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    fn report(&self, health: &StoreHealth) {
        #[cfg(feature = "tracing")]
        match health {
            StoreHealth::Failing { cause, error } => tracing::warn!(
                backend = self.backend,
                cause = cause.as_str(),
                %error,
                "rate limit store failing"
            ),
            StoreHealth::Deciding => {
                tracing::info!(backend = self.backend, "rate limit store deciding")
            }
            StoreHealth::Unknown => {}
        }
    }
}

impl std::fmt::Debug for HealthTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthTracker")
            .field("backend", &self.backend)
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}
