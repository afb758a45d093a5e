//! `GET /api/shared`: one capacity of `SHARED_CAPACITY` a second shared by
//! every tenant (`x-user-id`), weighted by its API key's tier, its requests
//! classed by `x-priority`.

use super::*;
use axum::routing::MethodRouter;
use tower_ratelimit::key::Header;
use tower_ratelimit::layer::fair_share::FairShare;

/// The capacity, in memory (`FairShare::redis` puts it on Redis).
pub fn capacity(config: &Config) -> FairShare {
    let per_second = tower_ratelimit::Quota::per_second(config.shared_capacity)
        .expect("SHARED_CAPACITY is checked when read");
    FairShare::new(per_second)
        .expect("a second's capacity")
        .named("api_shared")
        .expect("a valid name")
        .tenant(Header::new("x-user-id").or(client_ip(config)))
        .weight(
            |req| match req.headers.get("x-api-key").map(|v| v.as_bytes()) {
                Some(b"enterprise-demo") => 10,
                Some(b"pro-demo") => 4,
                _ => 1,
            },
        )
        .class_header("x-priority")
}

/// The route, behind `capacity`.
pub(super) fn route<S: Clone + Send + Sync + 'static>(capacity: FairShare) -> MethodRouter<S> {
    get(|| async { "ok: /api/shared\n" }).layer(capacity)
}
