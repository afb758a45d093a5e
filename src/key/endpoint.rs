//! A key from the route a request matched.

use axum::extract::MatchedPath;

use super::{Key, KeyError, KeyExtractor};
use crate::RequestHead;

/// Keys each request by its method and the route template it matched
/// (axum's [`MatchedPath`], e.g. `GET /users/{id}`) — never the raw path,
/// which would give `/users/1`, `/users/2`, … a budget each.
///
/// Alone it limits an endpoint as a whole; in a tuple with a client key it
/// limits each client per endpoint: `(Header::new("x-user-id"), Endpoint)`.
/// A request that matched no route has no endpoint key.
///
/// ```
/// use axum::{routing::get, Router};
/// use tower_ratelimit::key::{ClientIp, Endpoint};
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// let app: Router = Router::new()
///     .route("/users/{id}", get(|| async { "user" }))
///     .route_layer(RateLimitLayer::new("10/min".parse::<Policy>().unwrap()).key((ClientIp::new(), Endpoint)));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Endpoint;

impl KeyExtractor for Endpoint {
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        let route = req
            .extensions
            .get::<MatchedPath>()
            .ok_or(KeyError::Missing("matched route"))?;
        // A method is a token (no spaces), so the first space ends it.
        let value = [
            req.method.as_str().as_bytes(),
            b" ",
            route.as_str().as_bytes(),
        ]
        .concat();
        Ok(Key::new("endpoint", value))
    }
}
