//! `GET /api/shared`: one capacity of `SHARED_CAPACITY` a second shared by
//! every tenant (`x-user-id`), weighted by its API key's tier, its requests
//! classed by `x-priority` where the key's tier allows; behind a limit per
//! client address (`SHARED_PER_IP` a second).

use super::*;
use axum::routing::MethodRouter;
use tower_ratelimit::key::{Header, RequestHead};
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
        .tenant(Header::new("x-user-id").or(client_ip(config)))
        .weight(|req| match tier(req) {
            Some(b"enterprise-demo") => 10,
            Some(b"pro-demo") => 4,
            _ => 1,
        })
        .class(class)
        .servers(config.servers)
}

/// The API key, the demo's credential: its tier is what the client proved,
/// where `x-user-id` and `x-priority` are only what it says.
fn tier<'a>(req: &'a RequestHead<'_>) -> Option<&'a [u8]> {
    req.headers.get("x-api-key").map(|v| v.as_bytes())
}

/// `x-priority: critical` only for an enterprise key (anyone else asking
/// for it is served as default); `sheddable`, asking to be refused first,
/// for anyone.
fn class(req: &RequestHead<'_>) -> Class {
    match req.headers.get("x-priority").map(|v| v.as_bytes()) {
        Some(b"critical") if tier(req) == Some(b"enterprise-demo") => Class::Critical,
        Some(b"sheddable") => Class::Sheddable,
        _ => Class::Default,
    }
}

/// The route: `SHARED_PER_IP` requests a second per client address (in
/// this server's memory) before the capacity, so that one client inventing
/// tenant ids asks at most that.
pub(super) fn route<S: Clone + Send + Sync + 'static>(
    config: &Config,
    capacity: FairShare,
) -> MethodRouter<S> {
    let per_ip: Policy = format!("{}/s", config.shared_per_ip)
        .parse()
        .expect("SHARED_PER_IP is checked when read");
    let per_ip = RateLimitLayer::new(per_ip).key(client_ip(config));
    // The capacity first, then the limit in front of it.
    get(|| async { "ok: /api/shared\n" })
        .layer::<_, std::convert::Infallible>(capacity)
        .layer(per_ip)
}
