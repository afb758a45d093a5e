//! `Config`: a capacity as built — its numbers, how a request's tenant,
//! weight and class are found, where its state lives — and the decision
//! on it, in this process or on Redis.

use std::sync::{Arc, Mutex, PoisonError};

use crate::algorithm::fair_flight::{FlightSettings, Flights};
use crate::algorithm::fair_share::{Ask, Settings, Shares, TenantId, Verdict};
use crate::clock::Clock;
use crate::key::{Key, RequestHead};
use crate::layer::Class;

pub(super) type TenantFn = Arc<dyn Fn(&RequestHead<'_>) -> Option<Key> + Send + Sync>;
pub(super) type WeightFn = Arc<dyn Fn(&RequestHead<'_>) -> u32 + Send + Sync>;
pub(super) type ClassFn = Arc<dyn Fn(&RequestHead<'_>) -> Class + Send + Sync>;

#[derive(Clone)]
pub(super) struct Config {
    pub(super) name: Arc<str>,
    pub(super) capacity: Capacity,
    /// How many servers share the capacity on Redis, and what each of
    /// them decides on while Redis fails: its part of the capacity.
    pub(super) servers: u32,
    pub(super) fallback: Capacity,
    pub(super) tenant: TenantFn,
    pub(super) weight: WeightFn,
    pub(super) class: ClassFn,
    pub(super) store: Store,
    pub(super) clock: Arc<dyn Clock>,
    /// How long a refused request may wait, and how many at once.
    pub(super) max_wait: std::time::Duration,
    pub(super) max_waiting: usize,
    pub(super) waiting: Arc<std::sync::atomic::AtomicUsize>,
    /// Told when a place in flight ends here: waiting requests ask again.
    pub(super) freed: Arc<tokio::sync::Notify>,
    /// How long a place in flight counts on Redis at most, µs.
    pub(super) lease: u64,
    pub(super) observed: Arc<super::observe::Observed>,
}

/// What a capacity shares, with its numbers.
#[derive(Clone, Debug)]
pub(super) enum Capacity {
    /// Admissions per window.
    Rate(Settings),
    /// Requests in flight at once.
    InFlight(FlightSettings),
}

impl Capacity {
    /// This capacity's part for one of `servers` servers, rounded up (at
    /// least 1).
    pub(super) fn part(&self, servers: u32) -> Self {
        let servers = servers.max(1);
        match self {
            Capacity::Rate(s) => Capacity::Rate(s.rebuilt(s.limit.div_ceil(servers), s.fills)),
            Capacity::InFlight(s) => Capacity::InFlight(FlightSettings::new(
                s.capacity.div_ceil(servers),
                s.fills,
                s.max_tenants,
            )),
        }
    }

    /// The window a share is per, µs (`w` in headers); none in flight.
    pub(super) fn window(&self) -> Option<u64> {
        match self {
            Capacity::Rate(settings) => Some(settings.window),
            Capacity::InFlight(_) => None,
        }
    }
}

/// A capacity's state in this process (the ledger of its kind is used).
#[derive(Debug, Default)]
pub(super) struct Local {
    pub(super) shares: Mutex<Shares>,
    pub(super) flights: Mutex<Flights>,
}

/// Where a capacity's state lives.
#[derive(Clone)]
pub(super) enum Store {
    Memory(Arc<Local>),
    /// On Redis, decided locally while Redis fails: after 5 failures in
    /// a row Redis is not asked for 100 ms, then once (that request waits
    /// for it), the pause doubling to 400 ms while it fails.
    #[cfg(feature = "redis")]
    Redis {
        redis: crate::backend::RedisBackend,
        local: Arc<Local>,
        circuit: Arc<crate::backend::circuit::Circuit>,
    },
}

/// Where a place is counted.
#[derive(Debug)]
pub(crate) enum Holding {
    /// In this process's state, as this tenant.
    Local(TenantId),
    /// On Redis, as this permit.
    #[cfg(feature = "redis")]
    Redis(crate::backend::FlightPermit),
}

impl Config {
    /// Decide `req`: the verdict, the class it was decided in, when (µs
    /// on the capacity's clock), and the place in flight it holds if
    /// admitted to a capacity in flight.
    pub(super) async fn decide(
        &self,
        req: &RequestHead<'_>,
    ) -> (Verdict, Class, u64, Option<Holding>) {
        let class = (self.class)(req);
        let tenant = (self.tenant)(req);
        let tenant = tenant.as_ref().map_or(&[][..], Key::as_bytes);
        let mut ask = Ask {
            tenant: [0; 16],
            weight: (self.weight)(req).max(1),
            class: class.index(),
            now: self.clock.now().as_u64(),
        };
        let (verdict, holding) = match &self.store {
            Store::Memory(local) => {
                ask.tenant = local_id(tenant);
                self.decide_locally(local, &self.capacity, ask)
            }
            #[cfg(feature = "redis")]
            Store::Redis {
                redis,
                local,
                circuit,
            } => {
                ask.tenant = tenant_id(tenant);
                let shared = self.decide_on(redis, &ask, None);
                let asked = circuit.guard(shared).await.and_then(Result::ok);
                asked.unwrap_or_else(|| self.decide_locally(local, &self.fallback, ask))
            }
        };
        (verdict, class, ask.now, holding)
    }

    /// Decide `ask` on this process's state, as `capacity`.
    pub(super) fn decide_locally(
        &self,
        local: &Local,
        capacity: &Capacity,
        ask: Ask,
    ) -> (Verdict, Option<Holding>) {
        match capacity {
            Capacity::Rate(settings) => (lock(&local.shares).decide(settings, ask), None),
            Capacity::InFlight(flight) => {
                let (verdict, id) = lock(&local.flights).acquire(flight, ask);
                (verdict, verdict.admitted.then_some(Holding::Local(id)))
            }
        }
    }

    /// Decide `ask` on Redis, at `now` (µs) or on Redis's clock.
    #[cfg(feature = "redis")]
    pub(super) async fn decide_on(
        &self,
        redis: &crate::backend::RedisBackend,
        ask: &Ask,
        now: Option<u64>,
    ) -> Result<(Verdict, Option<Holding>), crate::backend::BackendError> {
        match &self.capacity {
            Capacity::Rate(settings) => {
                let verdict = redis
                    .capacities()
                    .fair_share(&self.name, settings, ask, now)
                    .await?;
                Ok((verdict, None))
            }
            Capacity::InFlight(flight) => {
                let (verdict, permit) = redis
                    .capacities()
                    .fair_flight_acquire(&self.name, flight, ask, self.lease, now)
                    .await?;
                Ok((verdict, permit.map(Holding::Redis)))
            }
        }
    }
}

pub(super) fn lock<T>(state: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A tenant's id in this process: 128 bits of two SipHashes under keys
/// drawn at start (no client can make two tenants collide without knowing
/// them), several times cheaper than [`tenant_id`].
pub(super) fn local_id(key: &[u8]) -> TenantId {
    use std::hash::BuildHasher;
    static KEYS: std::sync::OnceLock<[std::collections::hash_map::RandomState; 2]> =
        std::sync::OnceLock::new();
    let keys = KEYS.get_or_init(Default::default);
    let mut id = [0; 16];
    id[..8].copy_from_slice(&keys[0].hash_one(key).to_le_bytes());
    id[8..].copy_from_slice(&keys[1].hash_one(key).to_le_bytes());
    id
}

/// A tenant's id on every server sharing a Redis: 16 bytes of SHA-256 of
/// its key.
#[cfg(any(feature = "redis", feature = "test-hooks"))]
pub(super) fn tenant_id(key: &[u8]) -> TenantId {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key);
    let mut id = [0; 16];
    id.copy_from_slice(&digest[..16]);
    id
}
