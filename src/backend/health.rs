//! Whether a networked backend is deciding, and if not, why: a cause
//! reported when it first happens, when it changes, and when it clears —
//! not a timeout on every request and silence in the logs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::error::{BackendError, Cause};
use crate::key::Key;

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
    /// Keys whose state was reported this minute (by a hash), and when the
    /// minute began: a poisoned key is logged and counted once a minute,
    /// however often its client asks.
    key_states: Mutex<(Instant, HashSet<u64>)>,
}

/// Keys reported per minute at most; past it, the rest of the minute's
/// are neither logged nor counted (a flood of poisoned keys cannot grow
/// memory or the logs).
const KEY_STATES_PER_MINUTE: usize = 1024;

const UNKNOWN: u8 = 0;
const DECIDING: u8 = 1;

impl HealthTracker {
    pub(crate) fn new(backend: &'static str, on_change: Option<OnChange>) -> Self {
        Self {
            backend,
            state: AtomicU8::new(UNKNOWN),
            health: Mutex::new(StoreHealth::Unknown),
            on_change,
            key_states: Mutex::new((Instant::now(), HashSet::new())),
        }
    }

    /// `key`'s state could not be decided on (`error`, [`Cause::KeyState`]):
    /// logged (feature `tracing`, the key redacted) and counted
    /// (`ratelimit_store_failures_total{cause="key_state"}`, feature
    /// `metrics`) once per key and minute. Whether it was reported now.
    pub(crate) fn key_state(&self, key: &Key, error: &BackendError) -> bool {
        let hash = {
            use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
            BuildHasherDefault::<DefaultHasher>::default().hash_one(key)
        };
        {
            let mut held = self
                .key_states
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let (since, told) = &mut *held;
            if since.elapsed().as_secs() >= 60 {
                *since = Instant::now();
                told.clear();
            }
            if told.len() >= KEY_STATES_PER_MINUTE || !told.insert(hash) {
                return false;
            }
        }
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "ratelimit_store_failures_total",
            "backend" => self.backend,
            "cause" => Cause::KeyState.as_str(),
        )
        .increment(1);
        #[cfg(feature = "tracing")]
        tracing::warn!(
            backend = self.backend,
            key = %key.redacted(),
            %error,
            "a key's state could not be decided on; it is replaced with a new client's"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = error;
        true
    }

    pub(crate) fn health(&self) -> StoreHealth {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How a call ended.
    pub(crate) fn record<T>(&self, result: &Result<T, BackendError>) {
        // One key's trouble is counted by `key_state`, once a minute.
        #[cfg(feature = "metrics")]
        if let Err(error) = result {
            if !error.is_about_one_key() {
                metrics::counter!(
                    "ratelimit_store_failures_total",
                    "backend" => self.backend,
                    "cause" => error.cause().as_str(),
                )
                .increment(1);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A client asking again and again with a poisoned key is reported once
    /// a minute; each other key once too; a flood of poisoned keys at most
    /// `KEY_STATES_PER_MINUTE` times a minute.
    #[test]
    fn a_key_s_state_is_reported_once_per_key_and_minute() {
        let health = HealthTracker::new("test", None);
        let error = BackendError::new("WRONGTYPE").with_cause(Cause::KeyState);
        let reported = |key: &Key| health.key_state(key, &error);
        let poisoned = Key::new("user", "poisoned");
        let told = (0..100).filter(|_| reported(&poisoned)).count();
        assert_eq!(told, 1);
        assert!(reported(&Key::new("user", "other")));
        let flood = (0..5_000)
            .filter(|i| reported(&Key::new("user", format!("made-up-{i}"))))
            .count();
        assert_eq!(flood, KEY_STATES_PER_MINUTE - 2);
        // A minute later, each is told again.
        health.key_states.lock().unwrap().0 -= std::time::Duration::from_secs(61);
        assert!(reported(&poisoned));
    }
}
