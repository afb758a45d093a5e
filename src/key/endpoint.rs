//! A key from the route a request matched.

use axum::extract::MatchedPath;

use super::{Key, KeyError, KeyExtractor};
use crate::key::RequestHead;

/// Keys each request by its method and the route template it matched
/// (axum's [`MatchedPath`], e.g. `GET /users/{id}`) — never the raw path,
/// which would give `/users/1`, `/users/2`, … a budget each.
///
/// Alone it limits an endpoint as a whole; in a tuple with a client key it
/// limits each client per endpoint: `(Header::new("x-user-id"), Endpoint)`.
/// A request that matched no route has no endpoint key.
///
/// `HEAD` shares `GET`'s budget (a server answers it by running the `GET`
/// handler), and methods outside the standard nine share one budget
/// (`OTHER`): a client cannot open a new budget by inventing a method.
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
            budget_of(req.method).as_bytes(),
            b" ",
            route.as_str().as_bytes(),
        ]
        .concat();
        Ok(Key::new("endpoint", value))
    }
}

/// The method whose budget a request of `method` spends: `HEAD` is `GET`'s,
/// and every method outside the standard ones is one, `OTHER`.
fn budget_of(method: &http::Method) -> &'static str {
    use http::Method;
    match *method {
        Method::GET | Method::HEAD => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}
