//! The conformance tests' entries (feature `test-hooks`): a capacity's
//! decision at a given time, without a request.

use super::config::{tenant_id, Store};
use super::layer::FairShare;
use super::place::Place;
use crate::algorithm::fair_share::{Ask, Verdict};
use crate::layer::Class;

/// The conformance tests' entries: a decision at a given time (µs; on
/// Redis too, instead of its clock), without a request, Redis's failures
/// returned.
impl FairShare {
    /// A rate's decision: admitted, the tenant's share, the retry-after
    /// (µs), the active tenants.
    #[doc(hidden)]
    pub async fn decide_at(
        &self,
        tenant: &[u8],
        weight: u32,
        class: Class,
        now: u64,
    ) -> Result<(bool, u32, u64, u32), crate::backend::BackendError> {
        let (v, _) = self.decided_at(tenant, weight, class, now).await?;
        Ok((v.admitted, v.share, v.retry_after, v.active))
    }

    /// A capacity in flight's decision: admitted, the tenant's share, the
    /// active tenants, and the place it holds if admitted.
    #[doc(hidden)]
    pub async fn acquire_at(
        &self,
        tenant: &[u8],
        weight: u32,
        class: Class,
        now: u64,
    ) -> Result<(bool, u32, u32, Option<Place>), crate::backend::BackendError> {
        let (v, place) = self.decided_at(tenant, weight, class, now).await?;
        Ok((v.admitted, v.share, v.active, place))
    }

    async fn decided_at(
        &self,
        tenant: &[u8],
        weight: u32,
        class: Class,
        now: u64,
    ) -> Result<(Verdict, Option<Place>), crate::backend::BackendError> {
        let config = &self.config;
        let ask = Ask {
            tenant: tenant_id(tenant),
            weight: weight.max(1),
            class: class.index(),
            now,
        };
        let (verdict, holding) = match &config.store {
            Store::Memory(local) => config.decide_locally(local, &config.capacity, ask),
            #[cfg(feature = "redis")]
            Store::Redis { redis, .. } => config.decide_on(redis, &ask, Some(now)).await?,
        };
        let place = holding.map(|holding| Place::new(config.clone(), holding));
        Ok((verdict, place))
    }
}
