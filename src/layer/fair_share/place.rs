//! `Place`: a request's place in a capacity in flight, given back when
//! its response body has been sent or dropped.

use std::sync::{Arc, Mutex};

use super::config::{lock, Capacity, Config, Holding, Store};
use crate::algorithm::fair_share::TenantId;

/// A place in flight: dropping it gives it back (on Redis, on the
/// runtime; without one, its lease ends it). A place counted in this
/// process's state is given back at its lease's end too, if its request
/// has not ended by then (a body nobody reads): a timer on the runtime,
/// stopped when the place is dropped first.
#[doc(hidden)]
#[cfg_attr(not(feature = "test-hooks"), allow(unreachable_pub))]
pub struct Place {
    config: Arc<Config>,
    holding: Arc<Mutex<Option<Holding>>>,
    lease_end: Option<tokio::task::AbortHandle>,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place")
            .field("holding", &self.holding)
            .finish()
    }
}

impl Place {
    pub(super) fn new(config: Arc<Config>, holding: Holding) -> Self {
        let local = matches!(holding, Holding::Local(_));
        let holding = Arc::new(Mutex::new(Some(holding)));
        let lease_end = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if local => {
                let (config, held) = (config.clone(), Arc::clone(&holding));
                let lease = std::time::Duration::from_micros(config.lease);
                let task = runtime.spawn(async move {
                    tokio::time::sleep(lease).await;
                    let ended = lock(&held).take();
                    if let Some(holding) = ended {
                        let _ = release(&config, holding, None).await;
                    }
                });
                Some(task.abort_handle())
            }
            _ => None,
        };
        Self {
            config,
            holding,
            lease_end,
        }
    }

    /// Give the place back at `now` (µs; on Redis too, instead of its
    /// clock): for the conformance tests.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub async fn release_at(self, now: u64) -> Result<(), crate::backend::BackendError> {
        let Some(holding) = lock(&self.holding).take() else {
            return Ok(());
        };
        release(&self.config, holding, Some(now)).await
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(lease_end) = &self.lease_end {
            lease_end.abort();
        }
        let held = lock(&self.holding).take();
        match held {
            None => {}
            Some(Holding::Local(id)) => release_locally(&self.config, id, None),
            #[cfg(feature = "redis")]
            Some(holding) => {
                let config = self.config.clone();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        // Failed: the place's lease ends it.
                        let _ = release(&config, holding, None).await;
                    });
                }
            }
        }
    }
}

/// Give back a place counted in this process's state, at `now` or the
/// capacity's clock.
fn release_locally(config: &Config, id: TenantId, now: Option<u64>) {
    let now = now.unwrap_or_else(|| config.clock.now().as_u64());
    // While Redis fails, places are counted on this server's part.
    let (local, capacity) = match &config.store {
        Store::Memory(local) => (local, &config.capacity),
        #[cfg(feature = "redis")]
        Store::Redis { local, .. } => (local, &config.fallback),
    };
    if let Capacity::InFlight(flight) = capacity {
        lock(&local.flights).release(flight, id, now);
    }
    config.freed.notify_waiters();
}

async fn release(
    config: &Config,
    holding: Holding,
    now: Option<u64>,
) -> Result<(), crate::backend::BackendError> {
    match holding {
        Holding::Local(id) => release_locally(config, id, now),
        #[cfg(feature = "redis")]
        Holding::Redis(permit) => {
            if let (Store::Redis { redis, .. }, Capacity::InFlight(flight)) =
                (&config.store, &config.capacity)
            {
                redis
                    .capacities()
                    .fair_flight_release(&config.name, flight, &permit, config.lease, now)
                    .await?;
                config.freed.notify_waiters();
            }
        }
    }
    Ok(())
}
