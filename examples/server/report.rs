//! `GET /api/report`: 60/min per user, **adaptive**: the limit follows the
//! health of the (simulated) service behind it — over 10% of its responses
//! failing in the last window (10 s, at least 20 responses), half the limit;
//! over 5%, three quarters; a step back up each window once it recovers.
//! While it is reduced, `x-priority: sheddable` requests stop at 70% of
//! it and default ones at 80%; critical ones have all of it. The window
//! weighs clients by their address (behind `TRUSTED_PROXIES`): no client's
//! responses count more than a quarter of it, so it takes four clients at
//! least, and one client cannot choose everyone's limit.
//! `PUT /admin/backend` sets how often that service fails and how slow it
//! is (`error_rate=<0..1>&latency_ms=<n>`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use tower_ratelimit::backend::Backend;
use tower_ratelimit::config::Limits;
use tower_ratelimit::layer::{
    adaptive::{Adaptive, Steps},
    Class, Reserves,
};

use super::{Common, Config};

/// The simulated service behind `/api/report`.
#[derive(Default)]
pub(super) struct Service {
    /// Failures per thousand responses.
    error_permille: AtomicU32,
    latency_ms: AtomicU64,
    served: AtomicU64,
}

pub(super) fn route<B: Backend, S: Clone + Send + Sync + 'static>(
    config: &Config,
    common: &Common<B>,
    limits: &Limits,
    service: Arc<Service>,
) -> MethodRouter<S> {
    let adaptive = Adaptive::new(Steps::default())
        .named("/api/report")
        .window(config.adaptive_window)
        .min_responses(20)
        // The address, as the limits that guard the login see it: the
        // client a proxy forwards, not the proxy.
        .clients(super::routes::client_ip(config))
        .classes(Class::by_header("x-priority"), Reserves::STANDARD)
        .on_change(|change| println!("adaptive: {change}"));
    let limiter = common.layer(limits.keys(), adaptive.policies(limits.policies()));
    get(move || report(service.clone()))
        .layer::<_, std::convert::Infallible>(adaptive.observer())
        .layer(limiter)
}

/// The report, or a 503 as often as the service is set to fail (spread
/// evenly over its responses), after its latency.
async fn report(service: Arc<Service>) -> Response {
    let latency = service.latency_ms.load(Ordering::Relaxed);
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    let n = service.served.fetch_add(1, Ordering::Relaxed);
    let rate = u64::from(service.error_permille.load(Ordering::Relaxed));
    if (n + 1) * rate / 1000 > n * rate / 1000 {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the report service is failing\n",
        )
            .into_response()
    } else {
        "report\n".into_response()
    }
}

/// `PUT /admin/backend` with `error_rate=<0..1>` and optionally
/// `latency_ms=<n>` (at most 10,000).
pub(super) async fn set(service: Arc<Service>, body: String) -> Response {
    let mut error_rate = None;
    let mut latency = None;
    for pair in body.trim().split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("error_rate", v)) => {
                error_rate = v.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r))
            }
            Some(("latency_ms", v)) => latency = v.parse::<u64>().ok().filter(|ms| *ms <= 10_000),
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("unknown setting {pair:?}\n"),
                )
                    .into_response()
            }
        }
        if error_rate.is_none() && pair.starts_with("error_rate")
            || latency.is_none() && pair.starts_with("latency_ms")
        {
            let text = "error_rate is 0 to 1, latency_ms 0 to 10000\n";
            return (StatusCode::BAD_REQUEST, text).into_response();
        }
    }
    let Some(error_rate) = error_rate else {
        return (StatusCode::BAD_REQUEST, "error_rate=<0..1> is required\n").into_response();
    };
    // Said as stored (`-0` is 0, 0.2 is 20): what the service will do.
    let permille = (error_rate * 1000.0).round() as u32;
    service.error_permille.store(permille, Ordering::Relaxed);
    service
        .latency_ms
        .store(latency.unwrap_or(0), Ordering::Relaxed);
    format!(
        "the report service fails {}% of requests, {} ms each\n",
        f64::from(permille) / 10.0,
        latency.unwrap_or(0)
    )
    .into_response()
}
