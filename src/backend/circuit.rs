//! A circuit breaker's state, apart from what it guards: open after
//! failures in a row, one probe at a time once open long enough, the wait
//! doubling while probes fail. [`Breaker`](super::Breaker) puts one in front
//! of a whole backend; the Redis backend keeps one per cluster node.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{BackendError, Cause};
use crate::clock::Micros;

#[derive(Debug)]
pub(crate) struct Circuit {
    pub(crate) settings: Settings,
    /// Failures in a row, since the last success.
    failures: AtomicU32,
    /// Until when (µs since `epoch`) decisions fail at once; 0: closed.
    open_until: AtomicU64,
    /// How long it opened for last (doubling on failed probes).
    opened_for: AtomicU64,
    /// A probe is under way.
    probing: AtomicBool,
    /// The last failure's cause (`Cause as u8`), what an open circuit's
    /// refusals say kept it open: an outage or a full store.
    last_cause: AtomicU8,
    epoch: Instant,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) failures_to_open: u32,
    pub(crate) open_for: Micros,
    pub(crate) max_open_for: Micros,
}

impl Default for Settings {
    /// Open after 5 failures in a row; probe after 100 ms, doubling to 400 ms.
    fn default() -> Self {
        Self {
            failures_to_open: 5,
            open_for: Micros::from_millis(100),
            max_open_for: Micros::from_millis(400),
        }
    }
}

/// What a call may do now.
pub(crate) enum Pass {
    /// Closed: go ahead, and record how it went.
    Closed,
    /// Open, and this caller is the one to probe.
    Probe(Probe),
    /// Open: fail at once.
    Open,
}

/// A copy has the same settings and a state of its own, closed.
impl Clone for Circuit {
    fn clone(&self) -> Self {
        Self::new(self.settings)
    }
}

impl Circuit {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            settings,
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            opened_for: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            last_cause: AtomicU8::new(Cause::Other as u8),
            epoch: Instant::now(),
        }
    }

    /// Whether calls fail at once now (a probe may be due).
    pub(crate) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    /// What a call may do now.
    pub(crate) fn pass(self: &Arc<Self>) -> Pass {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Pass::Closed;
        }
        let won = self.now() >= open_until
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if won {
            Pass::Probe(Probe(Arc::clone(self)))
        } else {
            Pass::Open
        }
    }

    fn now(&self) -> u64 {
        // Never 0, which means "closed".
        Micros::from(self.epoch.elapsed()).as_u64().max(1)
    }

    /// `call` made through the circuit, how it went recorded: `None`
    /// while the circuit is open (a probe is made inline, by this call).
    #[cfg_attr(not(all(feature = "redis", feature = "fair-share")), allow(dead_code))]
    pub(crate) async fn guard<T>(
        self: &Arc<Self>,
        call: impl std::future::Future<Output = Result<T, BackendError>>,
    ) -> Option<Result<T, BackendError>> {
        match self.pass() {
            Pass::Open => None,
            Pass::Closed => {
                let result = call.await;
                self.record(&result, false);
                Some(result)
            }
            Pass::Probe(probe) => {
                let result = call.await;
                probe.finished(&result);
                Some(result)
            }
        }
    }

    /// How a call went, a probe's or not: a failure about one key's state
    /// is the store answering (a poisoned key must not open the circuit
    /// for every other key).
    pub(crate) fn record<T>(&self, result: &Result<T, BackendError>, probe: bool) {
        match result {
            Err(error) if !error.is_about_one_key() => {
                self.last_cause
                    .store(error.cause() as u8, Ordering::Release);
                self.failed(probe)
            }
            _ => self.succeeded(),
        }
    }

    /// What a call refused while the circuit is open fails with: the
    /// breaker's error, naming what kept it open.
    pub(crate) fn refusal(&self) -> BackendError {
        let cause = Cause::ALL
            .get(usize::from(self.last_cause.load(Ordering::Acquire)))
            .copied();
        BackendError::breaker_open(cause)
    }

    pub(crate) fn succeeded(&self) {
        self.failures.store(0, Ordering::Release);
        self.opened_for.store(0, Ordering::Release);
        self.open_until.store(0, Ordering::Release);
    }

    pub(crate) fn failed(&self, probe: bool) {
        let failures = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        let Settings {
            failures_to_open,
            open_for,
            max_open_for,
        } = self.settings;
        if probe || failures >= failures_to_open {
            let last = self.opened_for.load(Ordering::Acquire);
            let open_for = if probe && last > 0 {
                last.saturating_mul(2).min(max_open_for.as_u64())
            } else {
                open_for.as_u64().min(max_open_for.as_u64())
            };
            self.opened_for.store(open_for, Ordering::Release);
            self.open_until
                .store(self.now().saturating_add(open_for), Ordering::Release);
        }
    }
}

/// The one probe under way; dropping it (done, or its caller gone) lets
/// the next call probe.
#[derive(Debug)]
pub(crate) struct Probe(Arc<Circuit>);

impl Probe {
    /// Record how the probe went.
    pub(crate) fn finished<T>(self, result: &Result<T, BackendError>) {
        self.0.record(result, true);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.probing.store(false, Ordering::Release);
    }
}
