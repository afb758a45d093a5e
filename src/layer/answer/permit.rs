//! A permit of a limit of requests in flight, held by a request until its
//! response body has been sent or dropped.
//!
//! While it is held, a task renews the lease every half lease, so a long
//! response keeps its permit and a crashed server's permits end with their
//! lease. Dropping the permit gives it back: at once with a backend that
//! answers at once (memory), else on the runtime.

use std::any::Any;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Waker};
use std::time::Duration;

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
    renewing: Option<tokio::task::JoinHandle<()>>,
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
    let lease = policy
        .limits()
        .iter()
        .filter(|l| l.is_concurrent())
        .map(|l| l.quota().window())
        .min()
        .unwrap_or(Duration::from_secs(30));
    let renewing = tokio::runtime::Handle::try_current().ok().map(|runtime| {
        let (backend, key, policy, name) =
            (backend.clone(), key.clone(), policy.clone(), name.clone());
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(lease / 2).await;
                let current = *name.lock().unwrap_or_else(PoisonError::into_inner);
                // The store down: try again next time; the lease ends by
                // itself if it stays down.
                if let Ok(decision) = backend.renew(&key, &policy, current, cost).await {
                    let Some(renewed) = decision.permit() else {
                        return; // lost: its lease ended first
                    };
                    *name.lock().unwrap_or_else(PoisonError::into_inner) = renewed;
                }
            }
        })
    });
    Box::new(Permit {
        backend: backend.clone(),
        key: key.clone(),
        policy: policy.clone(),
        cost,
        name,
        renewing,
    })
}

impl<B: Backend> Drop for Permit<B> {
    fn drop(&mut self) {
        if let Some(renewing) = self.renewing.take() {
            renewing.abort();
        }
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
