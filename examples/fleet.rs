//! A complete app to start from: one of several servers sharing one Redis,
//! their limits in a file that every server runs.
//!
//! * `GET /api/search`: 10 a minute per user (`x-user-id`, else the client's
//!   address) across every server, decided on Redis; while Redis fails,
//!   each of `SERVERS` servers allows its part from its own memory;
//! * `GET /api/items`: 100 a minute per user;
//! * in front of both, per client address across every server: 30
//!   searches and 300 item reads a minute, whatever the users. A user id
//!   here is a header the client chooses: without this, one address
//!   inventing 300 names got 300 searches a minute instead of 10. Its
//!   cost: every user behind one address (an office, a carrier's NAT)
//!   shares it. Key the per-user limits by what your authentication
//!   established and raise these to what one address's users need;
//! * `PUT /admin/search` with a number: `/api/search`'s limit per minute,
//!   changed on every server within a second (with `ADMIN_TOKEN` as a bearer
//!   token: an admin route is the operator's); a number no quota holds
//!   (`0`, past a million a second) is 400, naming why. 10 wrong tokens a
//!   minute from one address, on any of the servers, lock that address
//!   out of it (429), so that a token cannot be guessed at full speed.
//!
//! The limits are the file below (or `LIMITS_FILE`), kept in Redis as the
//! fleet's: the first server to join writes it, the others run Redis's.
//!
//! ```sh
//! redis-server --port 6379 &
//! ADDR=127.0.0.1:3001 cargo run --example fleet --features redis,config &
//! ADDR=127.0.0.1:3002 cargo run --example fleet --features redis,config &
//! curl -i -H 'x-user-id: ann' localhost:3001/api/search   # one budget on both
//! ```

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use tower_ratelimit::backend::RedisBackend;
use tower_ratelimit::config::{Fleet, Limits, LimitsFile};
use tower_ratelimit::key::ClientIp;
use tower_ratelimit::layer::{HeaderStyle, RoutePolicies};
use tower_ratelimit::serve::{serve, ConnectionLimits};
use tower_ratelimit::{Policy, RateLimitLayer};

/// The limits every server runs, unless `LIMITS_FILE` names another file.
pub const LIMITS: &str = r#"
[keys]
user = { header = "x-user-id", or = "ip" }

[[routes]]
path = "/api/search"
key = "user"
limits = "search = 10/min"

[[routes]]
path = "/api/items"
key = "user"
limits = "items = 100/min"
"#;

/// What the admin route needs: the fleet to change, the token to check.
#[derive(Clone)]
struct Admin {
    fleet: Fleet,
    token: Option<String>,
}

/// `PUT /admin/search`: the new limit per minute, on every server.
async fn set_search(State(admin): State<Admin>, headers: HeaderMap, body: String) -> Response {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
    let allowed = match &admin.token {
        Some(token) => bearer == Some(&format!("Bearer {token}")),
        None => false,
    };
    if !allowed {
        return (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
    }
    let Ok(per_minute) = body.trim().parse::<u32>() else {
        return (StatusCode::BAD_REQUEST, "a number of requests a minute\n").into_response();
    };
    let limits = format!("search = {per_minute}/min");
    // Checked here so that a bad number is the caller's 400, not a failed
    // change (503).
    if let Err(e) = limits.parse::<Policy>() {
        return (StatusCode::BAD_REQUEST, format!("{per_minute}: {e}\n")).into_response();
    }
    let changed = admin
        .fleet
        .change(|file| file.with_route_limits(None, "/api/search", &limits))
        .await;
    match changed {
        Ok(file) => format!("version {} on every server\n", file.version()).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// The app of one of `servers` servers on the Redis at `url`.
pub async fn app(
    url: &str,
    servers: u32,
    file: LimitsFile,
    admin_token: Option<String>,
) -> Result<Router, Box<dyn std::error::Error>> {
    let limits = Limits::new(file);
    // Joins the fleet: runs Redis's version from now on (or writes this
    // one, the first to join), and follows every change.
    let fleet = Fleet::connect(url, limits.clone()).await?;
    let backend = RedisBackend::builder(url).connect_with_fallback(servers)?;
    let admin = Admin {
        fleet,
        token: admin_token,
    };
    // What one client address may ask whatever the user ids it sends,
    // on every server together; its quota headers are the file's limits'.
    let per_address = RateLimitLayer::new(
        RoutePolicies::new()
            .route("/api/search", "search-per-address = 30/min".parse()?)
            .route("/api/items", "items-per-address = 300/min".parse()?),
    )
    .key(ClientIp::new())
    .headers(HeaderStyle::None)
    .backend(backend.clone());
    // Wrong admin tokens per address, on every server together.
    let token_guesses = RateLimitLayer::new("admin-token-guesses = 10/min".parse::<Policy>()?)
        .key(ClientIp::new())
        .headers(HeaderStyle::None)
        .count_if(|res| res.status == StatusCode::UNAUTHORIZED)
        .backend(backend.clone());
    Ok(Router::new()
        .route("/api/search", get(|| async { "results\n" }))
        .route("/api/items", get(|| async { "items\n" }))
        // One layer for every route above: each gets its limits from the
        // file. The last added runs first: the address, then the user.
        // Route layers: a path no route matches is axum's 404, not a
        // request without a policy (500).
        .route_layer(limits.layer().backend(backend))
        .route_layer(per_address)
        .route(
            "/admin/search",
            put(set_search).with_state(admin).layer(token_guesses),
        ))
}

#[allow(dead_code)] // run by `cargo run`, not by the test that reads `app`
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |name: &str| std::env::var(name).ok();
    let addr = env("ADDR").unwrap_or_else(|| "127.0.0.1:3000".into());
    let url = env("REDIS_URL").unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let servers = env("SERVERS").map_or(Ok(3), |n| n.parse())?;
    let file = match env("LIMITS_FILE") {
        Some(path) => LimitsFile::read(path)?,
        None => LimitsFile::parse(LIMITS)?,
    };
    let app = app(&url, servers, file, env("ADMIN_TOKEN")).await?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({e}): set ADDR to another address"))?;
    println!(
        "listening on {}, one of {servers} servers on {url}",
        listener.local_addr()?
    );
    serve(listener, app, ConnectionLimits::default()).await;
    Ok(())
}
