//! `RedisStore`: where a capacity shared on Redis lives — the backend the
//! app's limits use, and the breaker and fallback in front of it if the
//! app composed them, so that one outage is seen once and decided by one
//! rule.

use std::sync::Arc;

use crate::backend::circuit::{Circuit, Settings};
use crate::backend::{Breaker, Fallback, MemoryBackend, RedisBackend};

/// A capacity's store on Redis, for [`FairShare::redis`](super::FairShare::redis):
/// a [`RedisBackend`] (its connections shared with every clone), and,
/// taken from the backend the app's limits use:
/// - its [`Breaker`]: the capacity waits for Redis no longer once the
///   breaker has opened for any limit, and a probe's success closes it
///   for all;
/// - its [`Fallback`]'s [`servers`](crate::backend::MemoryBackendBuilder::servers):
///   while Redis fails each server decides on its part of the capacity,
///   as of every limit.
///
/// ```
/// use tower_ratelimit::backend::{Backend, MemoryBackend, RedisBackend};
/// use tower_ratelimit::layer::fair_share::FairShare;
/// # fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // The backend the app's limits use: Redis, a breaker, a fallback for
/// // three servers.
/// let backend = RedisBackend::builder("redis://127.0.0.1:6379")
///     .connect_lazy()?
///     .with_breaker()
///     .or_fallback(MemoryBackend::builder().servers(3).build());
/// // The capacity on the same connections, breaker and fallback rule.
/// let shared = FairShare::new("200/s".parse()?)?.redis(&backend);
/// # drop(shared);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisStore {
    pub(super) redis: RedisBackend,
    pub(super) circuit: Arc<Circuit>,
    pub(super) servers: Option<u32>,
}

impl From<RedisBackend> for RedisStore {
    /// Redis alone: a circuit of the capacity's own.
    fn from(redis: RedisBackend) -> Self {
        Self {
            redis,
            circuit: Arc::new(Circuit::new(Settings::default())),
            servers: None,
        }
    }
}

impl From<&RedisBackend> for RedisStore {
    fn from(redis: &RedisBackend) -> Self {
        Self::from(redis.clone())
    }
}

impl From<&Breaker<RedisBackend>> for RedisStore {
    /// Redis behind the app's breaker: one circuit for the limits and the
    /// capacity.
    fn from(breaker: &Breaker<RedisBackend>) -> Self {
        Self {
            redis: breaker.get_ref().clone(),
            circuit: Arc::clone(breaker.circuit()),
            servers: None,
        }
    }
}

impl From<&Fallback<Breaker<RedisBackend>, MemoryBackend>> for RedisStore {
    /// The app's whole composition: its breaker, and its fallback's
    /// number of servers.
    fn from(backend: &Fallback<Breaker<RedisBackend>, MemoryBackend>) -> Self {
        Self {
            servers: Some(backend.fallback().servers()),
            ..Self::from(backend.primary())
        }
    }
}
