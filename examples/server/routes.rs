//! The limited routes as a table: each route's key and policy, the API-key tiers, and the authentication in front of them.

use super::*;
use tower_ratelimit::layer::HeaderStyle;

/// The demo API keys and their hourly quotas.
pub(super) const TIERS: [(&str, &str, u32); 3] = [
    ("free-demo", "free", 100),
    ("pro-demo", "pro", 1_000),
    ("enterprise-demo", "enterprise", 10_000),
];

/// The tier the auth layer found for an API key.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tier(usize);

pub(super) type KeyOf = Arc<dyn Fn(&RequestHead<'_>) -> Result<Key, KeyError> + Send + Sync>;
type PolicyOf = Arc<dyn Fn(&RequestHead<'_>) -> Option<Policy> + Send + Sync>;

/// One limited route: how it keys requests and which policy it applies.
#[derive(Clone)]
pub(super) struct Route {
    pub(super) path: &'static str,
    pub(super) about: &'static str,
    pub(super) key: KeyOf,
    /// The same key computed from a request to another route (`/api/quota`).
    pub(super) peek_key: KeyOf,
    pub(super) policy: PolicyOf,
    /// The policy, replaceable at runtime (`PUT /admin/limits/...`); none
    /// for `/api/key`, whose policy is its caller's tier.
    pub(super) live: Option<Live<Policy>>,
}

/// A limited route outside the table of `GET` routes (its limit settles by
/// the response, or holds requests in flight): its policy, replaceable.
#[derive(Clone)]
pub(super) struct Settled {
    pub(super) path: &'static str,
    pub(super) about: &'static str,
    pub(super) live: Live<Policy>,
    /// The route's key for a client named by its `x-user-id` and address
    /// (for `DELETE /admin/keys`; the login's user is the form's).
    pub(super) key: KeyOf,
}

#[derive(Clone)]
pub(super) struct AppState<B> {
    pub(super) backend: B,
    pub(super) routes: Arc<[Route]>,
    pub(super) settled: Arc<[Settled]>,
    pub(super) top: TopOffenders,
    pub(super) algorithm: Algorithm,
}

impl<B> AppState<B> {
    /// The replaceable policy of the limited route at `path`: `Err` when
    /// the route is limited but its policy is not one to replace.
    pub(super) fn live(&self, path: &str) -> Option<Result<&Live<Policy>, ()>> {
        let settled = self
            .settled
            .iter()
            .find(|s| s.path == path)
            .map(|s| &s.live);
        let route = self.routes.iter().find(|r| r.path == path);
        settled
            .map(Ok)
            .or_else(|| route.map(|r| r.live.as_ref().ok_or(())))
    }
}

pub(super) fn limits(config: &Config, text: &str) -> Policy {
    Policy::parse_with(text, config.algorithm).expect("the demo's own policies are valid")
}

/// The penalty box of `/api/ip`: 10 denials within a minute ban for 5
/// minutes, doubling on repeat up to an hour.
pub(super) fn ip_penalty() -> PenaltyBox {
    PenaltyBox::new(10, Duration::from_secs(60), Duration::from_secs(300))
        .and_then(|p| p.max_ban(Duration::from_secs(3600)))
        .expect("the demo's penalty box is valid")
}

/// The client IP as this server finds it (behind `TRUSTED_PROXIES`).
pub(super) fn client_ip(config: &Config) -> ClientIp {
    ClientIp::new().trust_networks(config.trusted_proxies.clone())
}

pub(super) fn routes(config: &Config) -> Vec<Route> {
    let ip = client_ip(config);
    let user = Header::new("x-user-id").or(ip.clone());
    // A key function used both by the route's layer and by /api/quota.
    fn same(key: impl KeyExtractor) -> (KeyOf, KeyOf) {
        let key: KeyOf = Arc::new(move |r| key.extract(r));
        (key.clone(), key)
    }
    let route = |path, about, (key, peek_key): (KeyOf, KeyOf), policy: Policy| {
        let live = Live::new(policy);
        let current = live.clone();
        Route {
            path,
            about,
            key,
            peek_key,
            policy: Arc::new(move |_| Some(Policy::clone(&current.current()))),
            live: Some(live),
        }
    };
    let tiers: Vec<Policy> = TIERS
        .iter()
        .map(|(_, name, per_hour)| {
            let quota = Quota::per_hour(*per_hour).expect("valid demo quota");
            Policy::builder()
                .limit(format!("key-{name}"), config.algorithm, quota)
                .build()
                .expect("valid demo policy")
        })
        .collect();
    let search_key = (user.clone(), Endpoint);
    let search_peek = user.clone();
    vec![
        route(
            "/api/user",
            "100/min per user (x-user-id, else client IP)",
            same(user.clone()),
            limits(config, "user = 100/min"),
        ),
        route(
            "/api/ip",
            "30/min per client IP; 10 denials in a minute: banned 5 min, doubling to 1 h",
            same(ip),
            limits(config, "ip = 30/min")
                .to_builder()
                .penalty(ip_penalty())
                .build()
                .unwrap(),
        ),
        route(
            "/api/search",
            "10/min per user per endpoint",
            (
                Arc::new(move |r| search_key.extract(r)),
                // What `Endpoint` derives on /api/search, from any route.
                Arc::new(move |r| {
                    let endpoint = Key::new("endpoint", "GET /api/search");
                    Ok(Key::composite(&[search_peek.extract(r)?, endpoint]))
                }),
            ),
            limits(config, "search = 10/min"),
        ),
        {
            let (key, peek_key) = same(ApiKey::header("x-api-key", "tower-ratelimit demo secret"));
            Route {
                path: "/api/key",
                about: "per API key (x-api-key): free-demo 100/h, pro-demo 1000/h, enterprise-demo 10000/h",
                key,
                peek_key,
                policy: Arc::new(move |r| {
                    let tier = r.extensions.get::<Tier>().copied().or_else(|| tier_of(r))?;
                    tiers.get(tier.0).cloned()
                }),
                live: None,
            }
        },
        route(
            "/api/burst",
            "10/s and 100/min and 1000/h per user",
            same(user),
            limits(
                config,
                "burst-second = 10/s; burst-minute = 100/min; burst-hour = 1000/h",
            ),
        ),
    ]
}

/// The tier of the request's demo API key, if it has one.
pub(super) fn tier_of(req: &RequestHead<'_>) -> Option<Tier> {
    let key = req.headers.get("x-api-key")?.as_bytes();
    TIERS
        .iter()
        .position(|(k, _, _)| k.as_bytes() == key)
        .map(Tier)
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
/// minute, against hundreds of thousands a second unlimited.
pub(super) fn failed_key_checks(config: &Config) -> RateLimitLayer<ClientIp, Policy> {
    let policy = limits(config, "auth-failures = 10/min");
    RateLimitLayer::new(policy)
        .key(client_ip(config))
        .headers(HeaderStyle::None)
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED)
}

/// The auth layer in front of `/api/key`: known demo keys get a tier,
/// anything else is a 401.
pub(super) async fn authenticate(mut req: Request, next: Next) -> Response {
    match tier_of(&RequestHead::from(&req)) {
        Some(tier) => {
            req.extensions_mut().insert(tier);
            next.run(req).await
        }
        None => (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "unknown_api_key" })),
        )
            .into_response(),
    }
}
