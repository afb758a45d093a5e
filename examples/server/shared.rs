//! `GET /api/shared`: one capacity of `SHARED_CAPACITY` a second shared by
//! every tenant (`x-user-id`), weighted by its API key's tier, its requests
//! classed by `x-priority` where the key's tier allows; behind a limit per
//! client address (`SHARED_PER_IP` a second) and one on the tenants each
//! address brings (`SHARED_TENANTS_PER_IP`, `tenants.rs`). The tier is the one
//! [`authenticate`] resolves for every route: a key the limits file does
//! not list (or no longer lists) is a 401, counted with every failed key
//! check; a request without a key is a tenant of weight 1.

use super::tenants::{bring, TenantsPerAddress};
use super::*;
use axum::routing::MethodRouter;
use tower_ratelimit::config::Limits;
use tower_ratelimit::key::{Header, Or, RequestHead};
use tower_ratelimit::layer::fair_share::FairShare;
use tower_ratelimit::layer::Class;

/// The capacity, in memory (`FairShare::redis` puts it on Redis), for
/// `SERVERS` servers (each decides on its part while Redis fails).
pub fn capacity(config: &Config) -> FairShare {
    let per_second = tower_ratelimit::Quota::per_second(config.shared_capacity)
        .expect("SHARED_CAPACITY is checked when read");
    FairShare::new(per_second)
        .expect("a second's capacity")
        .named("api_shared")
        .expect("a valid name")
        .tenant(tenant(config))
        .weight(|req| match tier(req) {
            Some("enterprise") => 10,
            Some("pro") => 4,
            _ => 1,
        })
        .class(class)
        .servers(config.servers)
}

/// Who a request of `/api/shared` is counted against: `x-user-id`, else
/// the client address (the capacity and the tenants per address alike).
pub(super) fn tenant(config: &Config) -> Or<Header, ClientIp> {
    Header::new("x-user-id").or(client_ip(config))
}

/// `x-priority: critical` only for the enterprise tier: what the client's
/// key proved, where `x-user-id` and `x-priority` are only what it says
/// (anyone else asking
/// for it is served as default); `sheddable`, asking to be refused first,
/// for anyone.
fn class(req: &RequestHead<'_>) -> Class {
    match req.headers.get("x-priority").map(|v| v.as_bytes()) {
        Some(b"critical") if tier(req) == Some("enterprise") => Class::Critical,
        Some(b"sheddable") => Class::Sheddable,
        _ => Class::Default,
    }
}

/// The route: `SHARED_PER_IP` requests a second per client address (in
/// this server's memory) before anything else, so that one client inventing
/// tenant ids asks at most that; then the failed key checks, the tier, the
/// tenants each address brings, and the capacity.
pub(super) fn route<S: Clone + Send + Sync + 'static>(
    config: &Config,
    capacity: FairShare,
    limits: &Limits,
    key_checks: RateLimitLayer<ClientIp, Policy>,
) -> MethodRouter<S> {
    let per_ip: Policy = format!("{}/s", config.shared_per_ip)
        .parse()
        .expect("SHARED_PER_IP is checked when read");
    let per_ip = RateLimitLayer::new(per_ip).key(client_ip(config));
    let tenants = TenantsPerAddress::new(config, config.shared_tenants_per_ip)
        .expect("SHARED_TENANTS_PER_IP is checked when read");
    let callers = Callers {
        limits: limits.clone(),
        anonymous: true,
    };
    // Innermost first: the capacity, then what stands in front of it.
    get(|| async { "ok: /api/shared\n" })
        .layer::<_, std::convert::Infallible>(capacity)
        .layer::<_, std::convert::Infallible>(middleware::from_fn_with_state(tenants, bring))
        .layer::<_, std::convert::Infallible>(middleware::from_fn_with_state(callers, authenticate))
        .layer::<_, std::convert::Infallible>(key_checks)
        .layer(per_ip)
}
