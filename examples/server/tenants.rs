//! In front of `/api/shared`: at most `SHARED_TENANTS_PER_IP` tenants a
//! client address may bring to the capacity every 2 s, the fair share's
//! activity period. A tenant counts when it first asks from an address,
//! and again each 2 s it keeps asking; a request of one more is refused
//! before the capacity sees it. So an address keeps at most
//! `SHARED_TENANTS_PER_IP` tenants asking at a time, and at most three
//! times that are active in the capacity at once (a burst of them, then
//! as many again in each of the two periods a tenant stays active): made-up
//! ids dilute the real tenants' shares by that many per address, where
//! `SHARED_PER_IP` alone lets an address bring as many as it asks
//! requests. Counted in each server's memory, as `SHARED_PER_IP` is.

use super::shared::tenant;
use super::*;
use tower_ratelimit::key::{Header, Or};
use tower_ratelimit::quota::QuotaError;
use tower_ratelimit::{Limiter, Quota};

/// How long a tenant counts once for its address.
const PERIOD: Duration = Duration::from_secs(2);

/// The tenants each address brings, and which tenants it brought.
#[derive(Clone)]
pub(super) struct TenantsPerAddress {
    address: ClientIp,
    tenant: Or<Header, ClientIp>,
    /// One per (address, tenant) each period: spent, the tenant is known.
    brought: Limiter,
    /// `SHARED_TENANTS_PER_IP` per address each period.
    bringing: Limiter,
}

impl TenantsPerAddress {
    /// `per_period` tenants per address each [`PERIOD`], told apart as the
    /// capacity tells them (`x-user-id`, else the client address).
    pub(super) fn new(config: &Config, per_period: u32) -> Result<Self, QuotaError> {
        let gcra = |name: &str, limit| -> Result<Policy, QuotaError> {
            let quota = Quota::new(limit, PERIOD)?.with_burst(limit)?;
            Ok(Policy::builder()
                .limit(name, Algorithm::Gcra, quota)
                .build()
                .expect("one limit"))
        };
        let memory = MemoryBackend::builder().max_keys(config.max_keys).build();
        Ok(Self {
            address: client_ip(config),
            tenant: tenant(config),
            brought: Limiter::new(gcra("tenant-brought", 1)?).backend(memory.clone()),
            bringing: Limiter::new(gcra("tenants-per-ip", per_period)?).backend(memory),
        })
    }
}

/// A request of a tenant its address has not brought within the period
/// counts one of the address's; past them it is a 429. A tenant is known
/// only once counted, so a refused one stays new.
pub(super) async fn bring(
    State(tenants): State<TenantsPerAddress>,
    req: Request,
    next: Next,
) -> Response {
    let head = RequestHead::from(&req);
    let keys = tenants.address.extract(&head).and_then(|address| {
        let pair = Key::composite(&[address.clone(), tenants.tenant.extract(&head)?]);
        Ok((address, pair))
    });
    // Without an address or a tenant the capacity decides as it does.
    let Ok((address, pair)) = keys else {
        return next.run(req).await;
    };
    let known = tenants
        .brought
        .check(&pair, 0)
        .await
        .decision()
        .is_some_and(|read| read.deciding().remaining() == 0);
    if !known {
        let counted = tenants.bringing.check(&address, 1).await;
        if !counted.is_allowed() {
            // Whole seconds, rounded up: never sooner than it would fit.
            let wait = counted
                .retry_after()
                .unwrap_or(PERIOD)
                .as_secs_f64()
                .ceil()
                .max(1.0);
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", wait.to_string())],
                "too many tenants from this address\n",
            )
                .into_response();
        }
        tenants.brought.check(&pair, 1).await;
    }
    next.run(req).await
}
