//! The limited routes: their limits from a limits file (`examples/limits.toml`
//! unless `LIMITS_FILE` names another), the keys the file cannot say, and
//! the authentication in front of `/api/key`.

use super::*;
use tower_ratelimit::config::{ConfigError, FileDefaults, Limits, LimitsFile, Tier};
use tower_ratelimit::layer::HeaderStyle;

/// The limits the server runs without `LIMITS_FILE`.
pub(super) const BUILT_IN: &str = include_str!("../limits.toml");

/// One limited route: what the index and `/admin/limits` say of it.
pub(super) struct Route {
    pub(super) method: Method,
    pub(super) path: &'static str,
    pub(super) about: &'static str,
}

const fn route(method: Method, path: &'static str, about: &'static str) -> Route {
    Route {
        method,
        path,
        about,
    }
}

/// Every limited route; the limits file must limit each.
pub(super) static ROUTES: [Route; 10] = [
    route(
        Method::GET,
        "/api/user",
        "100/min per user (x-user-id, else client IP)",
    ),
    route(
        Method::GET,
        "/api/ip",
        "30/min per client IP; 10 denials in a minute: banned 5 min, doubling to 1 h",
    ),
    route(Method::GET, "/api/search", "10/min per user per endpoint"),
    route(
        Method::GET,
        "/api/key",
        "per API key (x-api-key): free-demo 100/h, pro-demo 1000/h, enterprise-demo 10000/h",
    ),
    route(
        Method::GET,
        "/api/burst",
        "10/s and 100/min and 1000/h per user",
    ),
    route(
        Method::GET,
        "/api/quota",
        "60/min per user: every route's budget in one store call",
    ),
    route(
        Method::POST,
        "/api/login",
        "5 failed logins per 15 minutes per client IP and user",
    ),
    route(
        Method::GET,
        "/api/tokens",
        "1000 tokens per minute per user, settled to what each request used",
    ),
    route(
        Method::GET,
        "/api/slow",
        "2 requests in flight per user (a body streamed over ?ms=); PUT a number of permits",
    ),
    route(
        Method::GET,
        "/api/report",
        "60/min per user, adaptive: halved while over 10% of the report service's answers fail (PUT /admin/backend)",
    ),
];

/// The routes of the table of `GET` routes served by one handler.
pub(super) const SIMPLE: [&str; 5] = [
    "/api/user",
    "/api/ip",
    "/api/search",
    "/api/key",
    "/api/burst",
];

pub(super) type KeyOf = Arc<dyn Fn(&RequestHead<'_>) -> Result<Key, KeyError> + Send + Sync>;

#[derive(Clone)]
pub(super) struct AppState<B> {
    pub(super) backend: B,
    pub(super) limits: Limits,
    /// Where a change is made: this server's limits, or the fleet's.
    pub(super) changes: Changes,
    pub(super) top: TopOffenders,
    /// The keys the file cannot say, by route.
    pub(super) coded_keys: Arc<[(&'static str, KeyOf)]>,
    /// The limits file the server started with: each route's own limit
    /// names, which a change that names none keeps.
    pub(super) started: Arc<LimitsFile>,
}

impl<B> AppState<B> {
    /// `req`'s key on the limited route `path` (a request to one route
    /// asking about another), where it has one.
    pub(super) fn key_on(
        &self,
        route: &Route,
        req: &RequestHead<'_>,
    ) -> Option<Result<Key, KeyError>> {
        match self.coded_keys.iter().find(|(path, _)| *path == route.path) {
            Some((_, key)) => Some(key(req)),
            None => self.limits.current().key_on(&route.method, route.path, req),
        }
    }
}

/// The limits file: `LIMITS_FILE`, or the built-in one; its limits use
/// `ALGORITHM` and its client IPs `TRUSTED_PROXIES` unless it says
/// otherwise. A file that leaves a route of the server unlimited is refused
/// — here, and by every reload and fleet version read with its defaults.
pub(super) fn limits_file(config: &Config) -> Result<LimitsFile, ConfigError> {
    let defaults = FileDefaults::new()
        .algorithm(config.algorithm)
        .trusted_proxies(config.trusted_proxies.iter().copied());
    let defaults = ROUTES.iter().fold(defaults, |defaults, route| {
        defaults.require_route(Some(route.method.clone()), route.path)
    });
    match &config.limits_file {
        Some(path) => defaults.read(path),
        None => defaults.parse(BUILT_IN),
    }
}

/// The demo's API keys, hashed under the demo's secret.
pub(super) fn api_key() -> ApiKey {
    ApiKey::header(API_KEY_HEADER, "tower-ratelimit demo secret")
}

/// The client IP as this server finds it (behind `TRUSTED_PROXIES`).
pub(super) fn client_ip(config: &Config) -> ClientIp {
    ClientIp::new().trust_networks(config.trusted_proxies.clone())
}

/// In front of the API-key check: 10 failed checks (401s) a minute per
/// client IP; past them every request from that address is refused until
/// the window allows, a right key included. Successes never count, and no
/// quota headers are sent for it (a client plans by its key's tier; a
/// refusal still says `Retry-After`).
///
/// Counted in each server's own memory: a success is reserved and given
/// back, which on Redis would be a second round trip for every good
/// request. With `SERVERS` servers a guesser gets at most 10 × `SERVERS` a
/// minute, against hundreds of thousands a second unlimited. It guards the
/// authentication, so it is code, not a route's limit in the file.
pub(super) fn failed_key_checks(config: &Config) -> RateLimitLayer<ClientIp, Policy> {
    failures_per_address(config, "auth-failures = 10/min")
}

/// `limit` (the demo's own) per client address, counting only 401s, in
/// this server's memory, without quota headers: what stands in front of
/// a check of credentials.
pub(super) fn failures_per_address(
    config: &Config,
    limit: &str,
) -> RateLimitLayer<ClientIp, Policy> {
    let policy =
        Policy::parse_with(limit, config.algorithm).expect("the demo's own policy is valid");
    RateLimitLayer::new(policy)
        .key(client_ip(config))
        .headers(HeaderStyle::None)
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED)
}

/// `IDS_PER_IP` requests a second per client address, in front of every
/// route keyed by an id the client chooses (`x-user-id`, a login's user):
/// each new id is a new key in the store, so this bounds the keys one
/// address can make, `IDS_PER_IP` × how long a key lives (the sizing rule
/// of `guide::backends`). Counted in each server's own memory; no quota
/// headers (the route's own are the client's to plan by; a refusal still
/// says `Retry-After`).
pub(super) fn ids_per_ip(config: &Config) -> RateLimitLayer<ClientIp, Policy> {
    let policy = Policy::parse_with(
        &format!("ids-per-ip = {}/s", config.ids_per_ip),
        config.algorithm,
    )
    .expect("IDS_PER_IP is checked when read");
    RateLimitLayer::new(policy)
        .key(client_ip(config))
        .headers(HeaderStyle::None)
}

/// The header that carries the demo's API keys.
pub(super) const API_KEY_HEADER: &str = "x-api-key";

/// Who [`authenticate`] lets through: the limits whose `[tier_of]` knows
/// the keys, and whether a request without a key may pass (as no tier).
#[derive(Clone)]
pub(super) struct Callers {
    pub limits: Limits,
    pub anonymous: bool,
}

/// The one place a request's tier is resolved, for every route that limits
/// or weighs callers by it (`/api/key`, `/api/shared`): its API key is
/// looked up in the limits file's `[tier_of]` as it is now, so a key the
/// file no longer lists is unknown at once, and the tier goes into the
/// request's extensions as [`Tier`] for what follows. A key no tier knows
/// is a 401 (counted by [`failed_key_checks`] in front); no key at all
/// passes, with no tier, where the route takes anonymous callers.
pub(super) async fn authenticate(
    State(callers): State<Callers>,
    mut req: Request,
    next: Next,
) -> Response {
    let tier = callers
        .limits
        .current()
        .tier(&RequestHead::from(&req))
        .map(Tier::new);
    match tier {
        Some(tier) => {
            req.extensions_mut().insert(tier);
            next.run(req).await
        }
        None if callers.anonymous && !req.headers().contains_key(API_KEY_HEADER) => {
            next.run(req).await
        }
        None => unknown_api_key(),
    }
}

/// The tier [`authenticate`] found for `req`, if any.
pub(super) fn tier<'a>(req: &'a RequestHead<'_>) -> Option<&'a str> {
    req.extensions.get::<Tier>().map(Tier::name)
}

/// The answer to an API key no tier knows.
pub(super) fn unknown_api_key() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({ "error": "unknown_api_key" })),
    )
        .into_response()
}
