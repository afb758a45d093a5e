//! [`Breaker`]: stop paying a failing backend's timeout once it is known down.

use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use super::circuit::{Circuit, Pass, Probe, Settings};
use super::{Backend, BackendError, Peeks, Reset};
use crate::key::Key;
use crate::{clock::Micros, Decision, Policy};

/// A circuit breaker in front of a backend; see [`Backend::with_breaker`].
///
/// * **Closed** (the start): every decision goes to the backend. After
///   [`failures_to_open`](Self::failures_to_open) failures in a row (errors
///   and timeouts alike) it opens.
/// * **Open**: decisions fail at once, without asking the backend, with an
///   error that says the breaker is open — so a [`Fallback`](super::Fallback)
///   behind it decides in microseconds instead of after a timeout each.
/// * After [`open_for`](Self::open_for), **one** probe at a time asks the
///   backend what the next decision's key holds (a check of cost 0, which
///   consumes nothing). Inside a tokio runtime the probe runs on its own
///   task and that decision, like every other, still fails at once: no
///   request waits on a probe. (Outside a runtime the decision is the
///   probe, and waits for it.) A probe that succeeds closes the breaker; one
///   that fails opens it again for twice as long, up to
///   [`max_open_for`](Self::max_open_for).
///
/// So an outage of any length costs requests nothing once the breaker is
/// open, probing costs the backend at most one call per `open_for` (10 a
/// second at first by default, 2.5 once the backoff reaches its 400 ms
/// cap), and
/// decisions come from the backend again at most `max_open_for` after it
/// answers again, plus one call.
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::backend::{Backend, MemoryBackend};
///
/// # let redis = MemoryBackend::new(); // stands in for a RedisBackend
/// let backend = redis
///     .with_breaker()
///     .failures_to_open(5)
///     .open_for(Duration::from_millis(500))
///     .or_fallback(MemoryBackend::new());
/// ```
#[derive(Clone, Debug)]
pub struct Breaker<B> {
    inner: B,
    circuit: Arc<Circuit>,
}

impl<B> Breaker<B> {
    pub(crate) fn new(inner: B) -> Self {
        Self {
            inner,
            circuit: Arc::new(Circuit::new(Settings::default())),
        }
    }

    /// Open after this many failures in a row (default 5, at least 1).
    pub fn failures_to_open(mut self, failures: u32) -> Self {
        self.settings().failures_to_open = failures.max(1);
        self
    }

    /// Stay open this long before the first probe (default 100 ms).
    pub fn open_for(mut self, open_for: Duration) -> Self {
        self.settings().open_for = Micros::from(open_for).max(Micros::new(1));
        self
    }

    /// Never stay open longer than this between probes (default 400 ms):
    /// the longest a backend that answers again waits to be asked.
    pub fn max_open_for(mut self, max: Duration) -> Self {
        self.settings().max_open_for = Micros::from(max).max(Micros::new(1));
        self
    }

    /// Whether decisions currently fail at once (a probe may be due).
    pub fn is_open(&self) -> bool {
        self.circuit.is_open()
    }

    /// The backend behind the breaker.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// Its circuit, for another store of the same backend to share.
    #[cfg_attr(not(all(feature = "redis", feature = "fair-share")), allow(dead_code))]
    pub(crate) fn circuit(&self) -> &Arc<Circuit> {
        &self.circuit
    }

    fn settings(&mut self) -> &mut Settings {
        // Settings are set while building, before the breaker is cloned; a
        // breaker configured after cloning gets a state of its own.
        &mut Arc::make_mut(&mut self.circuit).settings
    }
}

impl<B: Backend> Backend for Breaker<B> {
    type Future = BreakerFuture<B>;

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        self.ask(key, policy, |inner| inner.check(key, policy, cost))
    }

    fn settle(&self, key: &Key, policy: &Policy, reserved: u32, actual: u32) -> Self::Future {
        self.ask(key, policy, |inner| {
            inner.settle(key, policy, reserved, actual)
        })
    }

    fn release(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        self.ask(key, policy, |inner| {
            inner.release(key, policy, permit, cost)
        })
    }

    fn renew(&self, key: &Key, policy: &Policy, permit: Micros, cost: u32) -> Self::Future {
        self.ask(key, policy, |inner| inner.renew(key, policy, permit, cost))
    }

    /// Asked even while the breaker is open: an operator's request.
    fn reset(&self, key: &Key, policy: &Policy) -> Reset {
        self.inner.reset(key, policy)
    }

    fn forget_local(&self, key: &Key, policy: &Policy) {
        self.inner.forget_local(key, policy);
    }

    /// Fails at once while the breaker is open; never a probe.
    fn peek_many(&self, asks: Vec<(Key, Policy)>) -> Peeks {
        if self.is_open() {
            return Box::pin(ready(Err(self.circuit.refusal())));
        }
        let (peeks, circuit) = (self.inner.peek_many(asks), Arc::clone(&self.circuit));
        Box::pin(async move {
            let result = peeks.await;
            circuit.record(&result, false);
            result
        })
    }
}

impl<B: Backend> Breaker<B> {
    /// Ask the backend with `ask`, unless the breaker is open.
    fn ask(
        &self,
        key: &Key,
        policy: &Policy,
        ask: impl FnOnce(&B) -> B::Future,
    ) -> BreakerFuture<B> {
        let circuit = &self.circuit;
        let open = || BreakerFuture {
            state: State::Open {
                error: ready(Err(circuit.refusal())),
            },
        };
        let probe = match circuit.pass() {
            Pass::Closed => None,
            Pass::Open => return open(),
            Pass::Probe(probe) => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    // No task to probe on: this decision probes.
                    return BreakerFuture {
                        state: State::Asking {
                            future: ask(&self.inner),
                            circuit: Arc::clone(circuit),
                            probe: Some(probe),
                        },
                    };
                };
                // On its own task: this decision fails at once like the rest.
                let peek = self.inner.check(key, policy, 0);
                runtime.spawn(async move { probe.finished(&peek.await) });
                return open();
            }
        };
        BreakerFuture {
            state: State::Asking {
                future: ask(&self.inner),
                circuit: Arc::clone(circuit),
                probe,
            },
        }
    }
}

pin_project! {
    /// The future of a [`Breaker`]'s decision: the backend's, recorded, or
    /// a failure at once while the breaker is open.
    pub struct BreakerFuture<B>
    where
        B: Backend,
    {
        #[pin]
        state: State<B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<B>
    where
        B: Backend,
    {
        Open {
            #[pin]
            error: Ready<Result<Decision, BackendError>>,
        },
        Asking {
            #[pin]
            future: B::Future,
            circuit: Arc<Circuit>,
            probe: Option<Probe>,
        },
    }
}

impl<B: Backend> Future for BreakerFuture<B> {
    type Output = Result<Decision, BackendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Open { error } => error.poll(cx),
            StateProj::Asking {
                future,
                circuit,
                probe,
            } => {
                let result = ready!(future.poll(cx));
                circuit.record(&result, probe.is_some());
                // Recorded: the next decision may probe.
                probe.take();
                Poll::Ready(result)
            }
        }
    }
}

impl<B: Backend> std::fmt::Debug for BreakerFuture<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BreakerFuture").finish_non_exhaustive()
    }
}
