//! A permit of a limit of requests in flight, held by a request until its
//! response body has been sent or dropped.
//!
//! While it is held, a task renews the lease every half lease, so a long
//! response keeps its permit and a crashed server's permits end with their
//! lease. Dropping the permit gives it back: at once with a backend that
//! answers at once (memory), else on the runtime; and stops the renewing
//! task, which, if a renewal is under way, gives back the name that
//! renewal took (the drop could only see the one before).

use std::any::Any;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use std::task::{Context, Waker};
use std::time::Duration;
use tokio::sync::Notify;

use crate::backend::Backend;
use crate::key::Key;
use crate::{clock::Micros, Policy};

/// A held permit, type-erased so that the response body need not name the
/// backend: dropping it gives the permit back.
pub(crate) type Held = Box<dyn Any + Send + Sync>;

struct Permit<B: Backend> {
    backend: B,
    key: Key,
    policy: Policy,
    cost: u32,
    /// The permit's current name: renewing takes a new one.
    name: Arc<Mutex<Micros>>,
    /// Set, and the renewing task told, when the permit is dropped.
    dropped: Arc<(AtomicBool, Notify)>,
}

/// Hold the permit `decision` took, if the policy has limits of requests
/// in flight.
pub(crate) fn hold<B: Backend>(
    backend: &B,
    key: &Key,
    policy: &Policy,
    cost: u32,
    name: Micros,
) -> Held {
    let name = Arc::new(Mutex::new(name));
    let dropped = Arc::new((AtomicBool::new(false), Notify::new()));
    let lease = policy
        .limits()
        .iter()
        .filter(|l| l.is_concurrent())
        .map(|l| l.quota().window())
        .min()
        .unwrap_or(Duration::from_secs(30));
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let (backend, key, policy, name, dropped) = (
            backend.clone(),
            key.clone(),
            policy.clone(),
            name.clone(),
            dropped.clone(),
        );
        runtime.spawn(async move {
            loop {
                let stopped = tokio::time::timeout(lease / 2, dropped.1.notified()).await;
                if stopped.is_ok() {
                    return;
                }
                let current = *name.lock().unwrap_or_else(PoisonError::into_inner);
                // The store down: try again next time; the lease ends by
                // itself if it stays down.
                if let Ok(decision) = backend.renew(&key, &policy, current, cost).await {
                    let Some(renewed) = decision.permit() else {
                        return; // lost: its lease ended first
                    };
                    *name.lock().unwrap_or_else(PoisonError::into_inner) = renewed;
                    // Dropped while this renewal was under way: the name
                    // it gave back was the old one.
                    if dropped.0.load(Ordering::SeqCst) {
                        let _ = backend.release(&key, &policy, renewed, cost).await;
                        return;
                    }
                }
            }
        });
    }
    Box::new(Permit {
        backend: backend.clone(),
        key: key.clone(),
        policy: policy.clone(),
        cost,
        name,
        dropped,
    })
}

impl<B: Backend> Drop for Permit<B> {
    fn drop(&mut self) {
        self.dropped.0.store(true, Ordering::SeqCst);
        // Stored if the task is not waiting now: it stops at its next wait.
        self.dropped.1.notify_one();
        let name = *self.name.lock().unwrap_or_else(PoisonError::into_inner);
        let mut release = Box::pin(
            self.backend
                .release(&self.key, &self.policy, name, self.cost),
        );
        // The memory backend answers at once: no task needed.
        let waker = Waker::noop();
        if release
            .as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_ready()
        {
            return;
        }
        // Without a runtime to finish on, the permit ends with its lease.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = release.await;
            });
        }
    }
}
