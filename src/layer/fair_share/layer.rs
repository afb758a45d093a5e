//! `FairShare`: the capacity, who its tenants are, their weights and
//! classes, and where its state lives.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::config::{lock, Capacity, Config, Store};
use super::service::FairShared;
use crate::algorithm::fair_flight::FlightSettings;
use crate::algorithm::fair_share::{Settings, MAX_WINDOW_US};
use crate::clock::{Clock, MonotonicClock};
use crate::key::{ClientIp, KeyExtractor, RequestHead};
use crate::layer::{Class, Reserves};
use crate::Quota;

/// One capacity — a rate such as `200/s`, or a number of requests in
/// flight ([`in_flight`](Self::in_flight)) — shared by the tenants asking
/// for it, by weight: a tenant asking no more than its share (`C · w /
/// Σw`) gets all it asks, and what tenants leave unused goes to those
/// asking more. A request's [`Class`] says who is refused first when the
/// capacity is short: sheddable requests, then default ones; critical ones
/// keep a reserve (20% of the capacity by default) and may use all of it.
/// Tenants new to the capacity share one place until they have been here
/// a while, so tenant ids a client makes up dilute nobody's share (the
/// guide's fairness chapter has the exact rules and bounds; where ids
/// cannot be made up, [`trusted_tenants`](Self::trusted_tenants)). Nothing — no
/// class, no tenant, no interleaving of servers — admits more than the
/// capacity: on Redis each decision is one script call.
///
/// A refused request is answered `429` with `Retry-After`; every answer
/// carries the tenant's current share as `RateLimit-Policy:
/// "shared";q=<share>;w=<window>`. It composes with per-key limits: put a
/// [`RateLimitLayer`](crate::RateLimitLayer) outside it, so that a tenant's
/// own limit refuses first and its refused requests do not take the
/// capacity's place.
///
/// The decision is exact to the formula in the module
/// `algorithm::fair_share` (not public: see the guide); the memory and
/// Redis backends make it step for step (conformance tests).
#[derive(Clone)]
pub struct FairShare {
    pub(super) config: Arc<Config>,
}

/// Why a [`FairShare`] could not be built as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairShareError(String);

impl fmt::Display for FairShareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FairShareError {}

impl FairShare {
    /// How many tenants are told apart by default.
    pub const DEFAULT_MAX_TENANTS: usize = 10_000;

    /// `capacity` (`"200/s"`) shared by tenants keyed by client IP, each of
    /// weight 1, every request of class default; in memory. Its burst is a
    /// tenth of its window's, at least 20 requests. A window longer than a
    /// day is refused.
    pub fn new(capacity: Quota) -> Result<Self, FairShareError> {
        let window = crate::clock::Micros::from(capacity.window()).as_u64();
        if window > MAX_WINDOW_US {
            return Err(FairShareError(format!(
                "a shared capacity's window is at most a day (it divides a rate among the tenants of the last two windows): {capacity}"
            )));
        }
        Ok(Self::sharing(Capacity::Rate(Settings::new(
            capacity.limit(),
            window,
            Self::standard_fills(),
            Self::DEFAULT_MAX_TENANTS,
        ))))
    }

    fn standard_fills() -> [u8; 3] {
        Class::ALL.map(|class| Reserves::STANDARD.fill(class))
    }

    /// `capacity` shared by tenants keyed by client IP, each of weight 1,
    /// every request of class default; in memory.
    fn sharing(capacity: Capacity) -> Self {
        let per_ip = ClientIp::new();
        Self {
            config: Arc::new(Config {
                name: "shared".into(),
                servers: 1,
                fallback: capacity.clone(),
                capacity,
                tenant: Arc::new(move |req| per_ip.extract(req).ok()),
                weight: Arc::new(|_| 1),
                class: Arc::new(|_| Class::Default),
                store: Store::Memory(Arc::default()),
                clock: Arc::new(MonotonicClock::new()),
                max_wait: std::time::Duration::ZERO,
                max_waiting: 0,
                waiting: Arc::default(),
                freed: Arc::default(),
                lease: 60_000_000,
                observed: Arc::default(),
            }),
        }
    }

    /// `capacity` requests in flight at once, shared by the tenants that
    /// had a request in flight, or began or ended one, in the last second:
    /// a tenant's share is `θ · weight / Σ weights` (at least 1) of what
    /// its request's class may fill (`θ`), and a tenant over its share
    /// borrows only places nobody holds — each tenant keeps the places it
    /// used within its share in the last second, and one more, so a place
    /// a tenant's request just left stays its own. A request holds its
    /// place until its response body has been sent or dropped, and for at
    /// most its [`lease`](Self::lease) (60 s), in memory and on Redis: a
    /// body a client never reads, or a server that stops without giving
    /// its places back, holds a place no longer. A refused request is
    /// answered `429` with `Retry-After: 1`. Zero is refused.
    pub fn in_flight(capacity: u32) -> Result<Self, FairShareError> {
        if capacity == 0 {
            return Err(FairShareError(
                "a capacity of requests in flight is at least 1".into(),
            ));
        }
        Ok(Self::sharing(Capacity::InFlight(FlightSettings::new(
            capacity,
            Self::standard_fills(),
            Self::DEFAULT_MAX_TENANTS,
        ))))
    }

    /// How long a place in flight counts at most (60 s by default; at
    /// least a second), in memory and on Redis: longer requests (a body
    /// nobody reads) stop counting then, and a server that stopped without
    /// giving its places back loses them. It is not renewed: a request
    /// that may rightly run longer needs a longer lease.
    pub fn lease(self, lease: std::time::Duration) -> Self {
        let lease = lease.max(std::time::Duration::from_secs(1));
        self.with(|c| c.lease = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX / 4))
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        let config = Arc::make_mut(&mut self.config);
        change(config);
        config.fallback = config.capacity.part(config.servers);
        self
    }

    /// How many servers share the capacity on Redis (1 by default): while
    /// Redis fails, each decides on its part, `⌈capacity / servers⌉`, so
    /// that the fleet together admits about the capacity, not `servers`
    /// times it. The headers report what is enforced: the part's shares.
    /// `redis` (feature `redis`) given the app's fallback sets it to the
    /// fallback's; whichever of the two comes last holds.
    pub fn servers(self, servers: u32) -> Self {
        self.with(|c| c.servers = servers.max(1))
    }

    /// Its name: the label of its metrics, the policy's name in headers,
    /// and its keys in Redis. Letters, digits, `_`, `-`, `.` and `:`.
    pub fn named(self, name: &str) -> Result<Self, FairShareError> {
        let fine = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c);
        if name.is_empty() || name.len() > 64 || !name.chars().all(fine) {
            return Err(FairShareError(format!(
                "a capacity's name is 1 to 64 letters, digits, '_', '-', '.' or ':': {name:?}"
            )));
        }
        Ok(self.with(|c| c.name = name.into()))
    }

    /// Who a request's tenant is. A request without one (the extractor
    /// fails) counts as one tenant with every other such request.
    pub fn tenant(self, tenant: impl KeyExtractor) -> Self {
        self.with(|c| c.tenant = Arc::new(move |req| tenant.extract(req).ok()))
    }

    /// A tenant's weight (1 to 1,000; others count as the nearest): from
    /// its tier, its plan, a header set by your auth. The latest request's
    /// weight is the tenant's.
    pub fn weight(self, weight: impl Fn(&RequestHead<'_>) -> u32 + Send + Sync + 'static) -> Self {
        self.with(|c| c.weight = Arc::new(weight))
    }

    /// A request's class.
    pub fn class(self, class: impl Fn(&RequestHead<'_>) -> Class + Send + Sync + 'static) -> Self {
        self.with(|c| c.class = Arc::new(class))
    }

    /// A request's class from the header `name` (`critical`, `default`,
    /// `sheddable`; anything else or none: default). Only where the header
    /// is set by something you trust, or where any client may ask for
    /// `critical`.
    pub fn class_header(self, name: &'static str) -> Self {
        self.class(Class::by_header(name))
    }

    /// The parts of the capacity's depth the less important classes
    /// leave to the more important ([`Reserves::STANDARD`] by default).
    pub fn reserves(self, reserves: Reserves) -> Self {
        let fills = Class::ALL.map(|class| reserves.fill(class));
        self.with(|c| {
            c.capacity = match &c.capacity {
                Capacity::Rate(s) => Capacity::Rate(s.rebuilt(s.limit, fills)),
                Capacity::InFlight(s) => {
                    Capacity::InFlight(FlightSettings::new(s.capacity, fills, s.max_tenants))
                }
            }
        })
    }

    /// Instead of refusing at once, a request waits up to `max_wait` for
    /// its tenant's share (or the capacity) to admit it, at most
    /// `max_waiting` requests at once (past that, refused at once). It is
    /// asked again when it could be admitted, holding no place meanwhile:
    /// each tenant's requests are paced by its own share, so a tenant
    /// whose burst waits never delays another tenant.
    pub fn wait_up_to(self, max_wait: std::time::Duration, max_waiting: usize) -> Self {
        self.with(|c| (c.max_wait, c.max_waiting) = (max_wait, max_waiting))
    }

    /// How many tenants are told apart (10,000 by default): past that, new
    /// tenants share one place until others leave. Memory per tenant is
    /// about 100 bytes.
    pub fn max_tenants(self, max: usize) -> Self {
        self.with(|c| match &mut c.capacity {
            Capacity::Rate(s) => s.max_tenants = max.max(1),
            Capacity::InFlight(s) => s.max_tenants = max.max(1),
        })
    }

    /// Tenant ids no client can make up — an account your authentication
    /// verified, an API key you issued — are trusted: each tenant is one of
    /// its own from its first request. By default tenants new to a rate
    /// capacity share one place until they have been here a while, so that
    /// ids a client makes up dilute nobody; more than 16 arriving together
    /// (all of them, after a restart of a server keeping the capacity in
    /// memory) then get part of their shares until that place has grown
    /// (the guide's fairness chapter). Trusted, they get them at once; but
    /// ids a client can choose, or get for free, then dilute every share.
    /// A capacity in flight has no such place: there it changes nothing.
    pub fn trusted_tenants(self) -> Self {
        self.with(|c| {
            if let Capacity::Rate(s) = &mut c.capacity {
                s.trusted = true;
            }
        })
    }

    /// Keep the capacity on Redis, shared by every server on it; while
    /// Redis fails, each server decides on its part of the capacity
    /// ([`servers`](Self::servers)), after five failures in a row without
    /// asking Redis, one request asking it again every 100 to 400 ms.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis(self, store: impl Into<super::RedisStore>) -> Self {
        let store = store.into();
        self.with(|c| {
            if let Some(servers) = store.servers {
                c.servers = servers;
            }
            c.store = Store::Redis {
                redis: store.redis,
                local: Arc::default(),
                circuit: store.circuit,
            }
        })
    }

    /// The clock of the memory store (tests: a manual clock).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.with(|c| c.clock = Arc::new(clock))
    }

    /// Tenants active now on this server's memory store (none on Redis).
    pub fn active_tenants(&self) -> usize {
        match &self.config.store {
            Store::Memory(local) => match self.config.capacity {
                Capacity::Rate(_) => lock(&local.shares).active(),
                Capacity::InFlight(_) => lock(&local.flights).active(),
            },
            #[cfg(feature = "redis")]
            Store::Redis { .. } => 0,
        }
    }
}

impl fmt::Debug for FairShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairShare")
            .field("name", &self.config.name)
            .field("capacity", &self.config.capacity)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for FairShare {
    type Service = FairShared<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FairShared {
            inner,
            share: self.clone(),
        }
    }
}
