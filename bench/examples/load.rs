//! The target of `scripts/bench-http`: one handler, bare and behind each
//! limiter that is compared, every client keyed by its IP. One tokio worker
//! (the script pins the process to one core), so the CPU a request costs is
//! what the throughput shows.
//!
//! | route | what |
//! |---|---|
//! | `/bare` | the handler alone |
//! | `/bare/path-as-long-as-ours` | the same at a path as long as `/memory/allowed-no-headers` (a path's parsing and routing grow with its length) |
//! | `/bare/as-governor` | the same at a path as long as `/governor/allowed` |
//! | `/floor/key-plus-a-decision` | the least a layer deciding with our key and backend can be: the client-IP key, the memory backend's decision, then the inner call or a bare 429 (no policy resolved, no settings, no headers), at a path as long as ours |
//! | `/bare/headers` | the handler, adding five constant headers as long as the quota headers (what sending them costs hyper, without computing them) |
//! | `/governor/allowed`, `/governor/rejecting` | `tower_governor` per IP |
//! | `/memory/allowed` | ours per IP (answering axum's own body: `axum_body`), default headers, a limit never reached |
//! | `/memory/allowed-no-headers` | the same without quota headers |
//! | `/memory/ownbody-no-headers` | the same answering the layer's own `ResponseBody` (axum boxes it again) |
//! | `/memory/rejecting` | ours per IP, every request refused (429) |
//! | `/memory/rejecting-no-headers` | the same without quota headers (`Retry-After` stays) |
//! | `/redis/allowed`, `/redis/rejecting` | the same on Redis (`REDIS_URL`) |
//! | `/redis/leased` | allowed, on Redis with leased budgets (one server) |
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example load &
//! wrk -t1 -c32 -d8s http://127.0.0.1:3001/memory/allowed
//! ```

use std::net::SocketAddr;

use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::key::{ClientIp, KeyExtractor, RequestHead};
use tower_ratelimit::layer::HeaderStyle;
use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};

/// Five headers the length of a typical allowed response's quota headers.
const QUOTA_HEADERS: [(&str, &str); 5] = [
    ("x-ratelimit-limit", "1000000"),
    ("x-ratelimit-remaining", "999999"),
    ("x-ratelimit-reset", "1763769600"),
    ("ratelimit-policy", "\"1000000/s\";q=1000000;w=1"),
    ("ratelimit", "\"1000000/s\";r=999999;t=1"),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve())
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    // Roomy: never reached by one machine's load. Tight: spent at once.
    let roomy = Policy::single(Algorithm::Gcra, Quota::per_second(1_000_000)?).unwrap();
    let tight = Policy::single(Algorithm::Gcra, Quota::per_hour(1)?).unwrap();
    let own = |policy: &Policy| RateLimitLayer::new(policy.clone()).key(ClientIp::new());
    let ours = |policy: &Policy| own(policy).axum_body();
    let governor = |per_ns: u64, burst: u32| {
        let config = GovernorConfigBuilder::default()
            .per_nanosecond(per_ns)
            .burst_size(burst)
            .finish()
            .expect("a valid governor quota");
        GovernorLayer::new(config)
    };
    let floor = |policy: &Policy| {
        let (backend, policy) = (MemoryBackend::new(), policy.clone());
        tower::layer::layer_fn(move |inner| Floor {
            inner,
            key: ClientIp::new(),
            backend: backend.clone(),
            policy: policy.clone(),
        })
    };
    let ok = || get(|| async { "ok" });
    let app = Router::new()
        .route("/bare", ok())
        .route("/bare/path-as-long-as-ours", ok())
        .route("/bare/as-governor", ok())
        .route("/bare/headers", get(|| async { (QUOTA_HEADERS, "ok") }))
        .route("/governor/allowed", ok().layer(governor(100, 1_000_000)))
        .route(
            "/governor/rejecting",
            ok().layer(governor(3_600_000_000_000, 1)),
        )
        .route("/floor/key-plus-a-decision", ok().layer(floor(&roomy)))
        .route("/memory/allowed", ok().layer(ours(&roomy)))
        .route(
            "/memory/allowed-no-headers",
            ok().layer(ours(&roomy).headers(HeaderStyle::None)),
        )
        .route(
            "/memory/ownbody-no-headers",
            ok().layer(own(&roomy).headers(HeaderStyle::None)),
        )
        .route("/memory/rejecting", ok().layer(ours(&tight)))
        .route(
            "/memory/rejecting-no-headers",
            ok().layer(ours(&tight).headers(HeaderStyle::None)),
        );
    #[cfg(feature = "redis")]
    let app = match std::env::var("REDIS_URL") {
        Ok(url) => {
            use tower_ratelimit::backend::RedisBackend;
            let redis = RedisBackend::connect(&url).await?;
            let leased = RedisBackend::builder(&url).leased(1).connect().await?;
            app.route(
                "/redis/allowed",
                ok().layer(ours(&roomy).backend(redis.clone())),
            )
            .route("/redis/rejecting", ok().layer(ours(&tight).backend(redis)))
            .route("/redis/leased", ok().layer(ours(&roomy).backend(leased)))
        }
        Err(_) => app,
    };
    let addr: SocketAddr = std::env::var("ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3001".to_owned())
        .parse()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("load target on http://{addr}");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// The floor a layer deciding with our key and backend stands on: the
/// client-IP key, the memory backend's decision, then the inner call or a
/// bare 429. What `RateLimit` costs above it is its policy, settings and
/// the steps between.
#[derive(Clone)]
struct Floor<S> {
    inner: S,
    key: ClientIp,
    backend: MemoryBackend,
    policy: Policy,
}

impl<S, B> tower::Service<http::Request<B>> for Floor<S>
where
    S: tower::Service<http::Request<B>, Response = axum::response::Response>,
{
    type Response = axum::response::Response;
    type Error = S::Error;
    type Future = FloorFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let allowed = self
            .key
            .extract(&RequestHead::from(&req))
            .is_ok_and(|key| self.backend.check_now(&key, &self.policy, 1).is_allowed());
        match allowed {
            true => FloorFuture::Called {
                call: self.inner.call(req),
            },
            false => FloorFuture::Refused {
                response: Some((http::StatusCode::TOO_MANY_REQUESTS, "").into_response()),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// [`Floor`]'s future: the inner call's, or a refusal.
    #[project = FloorProj]
    enum FloorFuture<F> {
        Called { #[pin] call: F },
        Refused { response: Option<axum::response::Response> },
    }
}

impl<F, E> std::future::Future for FloorFuture<F>
where
    F: std::future::Future<Output = Result<axum::response::Response, E>>,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.project() {
            FloorProj::Called { call } => call.poll(cx),
            FloorProj::Refused { response } => {
                std::task::Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
        }
    }
}
