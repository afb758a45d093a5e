//! The operating surface: `/metrics`, `/admin/*` (limits, top offenders), `/` and `/api/quota`.

use super::*;

/// The process's Prometheus recorder, installed by the first app built
/// (`None` if another recorder was installed first).
pub(super) fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let latency = [1e-6, 1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 0.025, 0.1];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("ratelimit_decision_seconds".into()),
                    &latency,
                )
                .ok()?
                .install_recorder()
                .ok()?;
            // Histograms are drained periodically; the exporter leaves that to us.
            let upkeep = handle.clone();
            std::thread::spawn(move || loop {
                std::thread::sleep(Duration::from_secs(5));
                upkeep.run_upkeep();
            });
            Some(handle)
        })
        .as_ref()
}

/// The most denied keys, redacted (`?n=`: how many, default 20).
pub(super) async fn top_offenders<B>(
    State(state): State<AppState<B>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Json<Value> {
    ranked(&query, "key", |n| state.top.top(n))
}

/// The most denied networks of client IPs (`/24`, `/48`), most denied
/// first (`?n=`, default 20): one subnet spread over many addresses.
pub(super) async fn top_networks<B>(
    State(state): State<AppState<B>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Json<Value> {
    ranked(&query, "network", |n| state.top.top_networks(n))
}

/// The first `?n=` (default 20, at most 100) of `top`, each named `what`.
fn ranked(
    query: &std::collections::HashMap<String, String>,
    what: &str,
    top: impl FnOnce(usize) -> Vec<tower_ratelimit::layer::Offender>,
) -> Json<Value> {
    let n = query.get("n").and_then(|n| n.parse().ok()).unwrap_or(20);
    Json(Value::Array(
        top(usize::min(n, 100))
            .into_iter()
            .map(|o| json!({ what: o.key, "denied": o.count, "error": o.error }))
            .collect(),
    ))
}

/// What `policy` enforces, as JSON.
pub(super) fn describe(policy: &Policy) -> Value {
    let limits: Vec<Value> = policy
        .limits()
        .iter()
        .map(|l| json!({ "name": l.name(), "algorithm": l.algorithm().to_string(), "quota": l.quota().to_string() }))
        .collect();
    json!({
        "limits": limits,
        "shadow": policy.is_shadow(),
        "penalty_box": policy.penalty().map(|p| json!({
            "strikes": p.strikes(),
            "within_seconds": p.within().as_secs(),
            "ban_seconds": p.ban().as_secs(),
            "max_ban_seconds": p.longest_ban().as_secs(),
        })),
    })
}

/// A request with nothing of a client's: what a route's own policy (not a
/// tier's) is read with.
pub(super) fn nobody() -> Request {
    Request::new(axum::body::Body::empty())
}

/// Every limited route's limits now, and the version of the limits file.
pub(super) async fn list_limits<B>(State(state): State<AppState<B>>) -> Json<Value> {
    let file = state.limits.current();
    let request = nobody();
    let head = RequestHead::from(&request);
    let routes: Vec<Value> = ROUTES
        .iter()
        .map(
            |route| match file.policy(&route.method, route.path, &head) {
                Some(policy) => json!({
                    "route": route.path,
                    "method": route.method.as_str(),
                    "replaceable": true,
                    "about": route.about,
                    "policy": describe(&policy),
                }),
                None => json!({
                    "route": route.path,
                    "method": route.method.as_str(),
                    "replaceable": false,
                    "about": route.about,
                }),
            },
        )
        .collect();
    Json(json!({ "version": file.version(), "routes": routes }))
}

/// `PUT /admin/limits/{route}`: replace a route's limits in the limits
/// file running now (on every server of a fleet), live.
pub(super) async fn replace_limits<B>(
    State(state): State<AppState<B>>,
    Path(route): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    body: String,
) -> Response {
    let error =
        |status: StatusCode, text: String| (status, Json(json!({ "error": text }))).into_response();
    let path = format!("/{}", route.trim_start_matches('/'));
    let Some(route) = ROUTES.iter().find(|r| r.path == path) else {
        return error(StatusCode::NOT_FOUND, format!("no limited route {path:?}"));
    };
    let request = nobody();
    let head = RequestHead::from(&request);
    let Some(old) = state
        .limits
        .current()
        .policy(&route.method, route.path, &head)
    else {
        let text = format!("{path}'s limits follow the caller's tier");
        return error(StatusCode::CONFLICT, text);
    };
    let body = body.trim().to_owned();
    let made = if old.limits().iter().any(|l| l.is_concurrent()) {
        // Requests in flight have no quota syntax: the body is a number
        // of permits.
        let Ok(permits) = body.parse::<u32>() else {
            let text = "the body is a number of requests in flight, e.g. 3";
            return error(StatusCode::BAD_REQUEST, text.into());
        };
        let change = |file: &LimitsFile| file.with_route_in_flight(None, route.path, permits);
        state.changes.make(&state.limits, change).await
    } else {
        // A name is a budget: one another route counts against already is
        // shared only when asked (`?share=true`), never by a slip.
        let shared = query.get("share").is_some_and(|v| v == "true");
        let file = state.limits.current();
        let others_count = |name: &str| {
            file.routes_with_limit(name)
                .iter()
                .any(|(_, p)| *p != route.path)
        };
        // The body says what the route's limits are. One unnamed quota for
        // a route of one *named* limit keeps the route's own name (and so
        // its state and its metrics label: see `Live`): the name it has,
        // unless that is another route's budget too (shared on purpose
        // once), then the one it started with. Any other unnamed limit
        // stays unnamed, kept to this route.
        let own_name = |limits: &[tower_ratelimit::Limit]| match limits {
            [limit] if limit.is_named() && !others_count(limit.name()) => {
                Some(limit.name().to_owned())
            }
            _ => None,
        };
        let started = state.started.policy(&route.method, route.path, &head);
        let text = match (old.limits(), body.contains('=')) {
            ([limit], false) if limit.is_named() => own_name(old.limits())
                .or_else(|| started.as_ref().and_then(|p| own_name(p.limits())))
                .map_or(body.clone(), |name| format!("{name} = {body}")),
            _ => body,
        };
        let taken = text.parse::<Policy>().ok().and_then(|new| {
            new.limits().iter().filter(|l| l.is_named()).find_map(|l| {
                let others: Vec<String> = file
                    .routes_with_limit(l.name())
                    .into_iter()
                    .filter(|(_, p)| *p != route.path)
                    .map(|(_, p)| p.to_owned())
                    .collect();
                (!others.is_empty()).then(|| (l.name().to_owned(), others))
            })
        });
        if let (Some((name, others)), false) = (taken, shared) {
            let text = format!(
                "the limit name {name:?} is {}'s budget: add ?share=true to share it, or choose another name",
                others.join(", ")
            );
            return error(StatusCode::CONFLICT, text);
        }
        let method = (route.method != Method::GET).then_some(&route.method);
        let change = |file: &LimitsFile| file.with_route_limits(method, route.path, &text);
        state.changes.make(&state.limits, change).await
    };
    match made {
        Ok(file) => {
            let policy = file.policy(&route.method, route.path, &head);
            let described = policy.as_ref().map(describe);
            Json(json!({ "route": path, "version": file.version(), "policy": described }))
                .into_response()
        }
        Err(ChangeError::Invalid(e)) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(ChangeError::Unavailable(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// `DELETE /admin/keys?user=<id>&ip=<address>` (either or both): forget
/// what that client has used on every limited route, and its bans — support
/// lifting a customer's limit after a mistake. Each route's key is found
/// from a request as that client would send it; routes keyed by the
/// address are left alone when no `ip` is named.
pub(super) async fn reset_keys<B: Backend>(
    State(state): State<AppState<B>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let error =
        |status: StatusCode, text: String| (status, Json(json!({ "error": text }))).into_response();
    let ip = match query.get("ip").map(|ip| ip.parse::<std::net::IpAddr>()) {
        Some(Ok(ip)) => Some(ip),
        Some(Err(e)) => return error(StatusCode::BAD_REQUEST, format!("ip: {e}")),
        None => None,
    };
    let user = query.get("user").filter(|u| !u.is_empty());
    if user.is_none() && ip.is_none() {
        let text = "name the client: ?user=<id>, ?ip=<address>, or both";
        return error(StatusCode::BAD_REQUEST, text.into());
    }
    let mut request = Request::builder().uri("/");
    if let Some(user) = user {
        request = request.header("x-user-id", user.as_str());
    }
    let Ok(mut request) = request.body(axum::body::Body::empty()) else {
        return error(StatusCode::BAD_REQUEST, "user: not a header value".into());
    };
    if let Some(ip) = ip {
        let peer = std::net::SocketAddr::new(ip, 0);
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
    }
    // Before the fleet is joined the other servers could not be told: a
    // reset then would be half done (Redis and this server forgetting, the
    // others refusing from their denial caches). Nothing is done.
    if !state.changes.joined(Duration::ZERO).await {
        let text = "the fleet's Redis has not answered yet: nothing was reset";
        return error(StatusCode::SERVICE_UNAVAILABLE, text.into());
    }
    let head = RequestHead::from(&request);
    let file = state.limits.current();
    let (mut reset, mut keys) = (Vec::new(), Vec::new());
    for route in &ROUTES {
        let key = state.key_on(route, &head);
        let policy = file.policy(&route.method, route.path, &head);
        // No key for this client here (no address named, or no API key).
        let (Some(Ok(key)), Some(policy)) = (key, policy) else {
            continue;
        };
        if let Err(e) = state.backend.reset(&key, &policy).await {
            return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
        }
        reset.push(json!({ "route": route.path, "key": key.redacted() }));
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    // The other servers' denial caches, leases and local fallbacks.
    for key in &keys {
        if let Err(e) = state.changes.forget_everywhere(key).await {
            return error(StatusCode::SERVICE_UNAVAILABLE, e);
        }
    }
    Json(json!({ "reset": reset })).into_response()
}

/// In front of every `/admin/*` route when `ADMIN_TOKEN` is set: the
/// request must carry `Authorization: Bearer <token>` (the scheme in any
/// case, as HTTP says), or gets 401.
pub(super) async fn require_admin(
    State(token): State<Arc<str>>,
    req: Request,
    next: Next,
) -> Response {
    let presented = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim());
    match presented {
        Some(presented) if same_secret(token.as_bytes(), presented.as_bytes()) => {
            next.run(req).await
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "a valid bearer token is required" })),
        )
            .into_response(),
    }
}

/// `/metrics`: Prometheus text, on the app or on an address of its own
/// (`METRICS_ADDR`).
pub fn metrics_app<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let metrics = prometheus();
    Router::new().route(
        "/metrics",
        get(move || async move {
            match metrics {
                Some(handle) => handle.render().into_response(),
                None => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "another metrics recorder is installed\n",
                )
                    .into_response(),
            }
        }),
    )
}

/// Equal secrets, compared in time that depends neither on where they
/// differ nor on their lengths: their SHA-256 digests (32 bytes whatever
/// was sent) are compared byte by byte, every byte.
pub(super) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    a.iter().zip(&b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(super) async fn index<B>(State(state): State<AppState<B>>) -> String {
    let mut text = String::from("tower-ratelimit demo\n\nGET /            this page (not limited)\nGET /health      (not limited)\nGET /metrics     Prometheus metrics\nGET /admin/top   the most denied keys (redacted)\nGET /admin/limits  each route's limits\n");
    text.push_str(&format!(
        "limits: version {}\n\n",
        state.limits.current().version()
    ));
    for route in &ROUTES {
        text.push_str(&format!(
            "{:<4} {:<13}{}\n",
            route.method, route.path, route.about
        ));
    }
    text
}

/// Each `GET` route's limits for the caller, peeked with cost 0, in one
/// read of the store ([`Backend::peek_many`]: one round trip on Redis).
///
/// An `x-api-key` the tiers do not know is a 401, as on `/api/key`, and
/// counted with its failures (the route is behind the same count): the
/// answer would otherwise say which keys are real, at any speed.
pub(super) async fn quota<B: Backend>(State(state): State<AppState<B>>, req: Request) -> Response {
    let head = RequestHead::from(&req);
    let file = state.limits.current();
    if req.headers().contains_key("x-api-key") && file.tier(&head).is_none() {
        return unknown_api_key();
    }
    // Every other limited route: its key and policy for this caller, where
    // it has both (`limits` is null where it has no key there).
    let routes: Vec<&Route> = ROUTES.iter().filter(|r| r.path != "/api/quota").collect();
    let asks: Vec<_> = routes
        .iter()
        .map(|route| {
            match (
                state.key_on(route, &head),
                file.policy(&route.method, route.path, &head),
            ) {
                (Some(Ok(key)), Some(policy)) => Some((key, policy)),
                _ => None,
            }
        })
        .collect();
    let peeks = asks.iter().flatten().cloned().collect();
    let (mut decisions, error) = match state.backend.peek_many(peeks).await {
        Ok(decisions) => (decisions.into_iter(), None),
        Err(e) => (Vec::new().into_iter(), Some(e.to_string())),
    };
    let routes = routes.iter().zip(&asks).map(|(route, ask)| {
        let Some((_, policy)) = ask else {
            return json!({ "route": route.path, "limits": null });
        };
        let Some(decision) = decisions.next() else {
            return json!({ "route": route.path, "error": error });
        };
        let limits: Vec<Value> = policy
            .limits()
            .iter()
            .zip(decision.outcomes())
            .map(|(limit, outcome)| {
                json!({
                    "name": limit.name(),
                    "limit": outcome.limit(),
                    "remaining": outcome.remaining(),
                    "reset_seconds": outcome.reset_after().as_secs_f64().ceil() as u64,
                })
            })
            .collect();
        json!({ "route": route.path, "limits": limits })
    });
    Json(Value::Array(routes.collect())).into_response()
}
