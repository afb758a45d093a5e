//! `layer-instructions <bare|allowed|no-headers|rejected|adaptive|adaptive-clients|adaptive-scaled|shared|shared-in-flight> <n>`:
//! n requests of 1,000 users through `RateLimitLayer` (GCRA, user-header
//! keys, default headers; `no-headers` without them), each polled to
//! completion at once. `adaptive` puts the policy behind an `Adaptive`
//! limit at its full factor (its observer around the service; the
//! requests carry no peer address, so each response is a client of its
//! own), `adaptive-clients` the same with the users as its clients,
//! `adaptive-scaled` the same pinned at half; `shared` puts a `FairShare`
//! capacity (in memory, every request admitted, the 1,000 users its
//! tenants) in place of the rate limit, `shared-in-flight` a capacity of
//! requests in flight (each place given back as its response ends). With `PROMETHEUS=1` (feature
//! `metrics`) a Prometheus recorder is installed first; with `SIZES=1` the
//! sizes of the request and of the layer's response future are printed
//! (what each move of them copies).
//!
//! Under `valgrind --tool=callgrind`, the inclusive count of
//! `Oneshot::poll` divided by the requests is the layer's cost per request
//! in instructions (`scripts/instructions` does it).

use std::hint::black_box;

use tower::{ServiceBuilder, ServiceExt};
use tower_ratelimit::key::Header;
use tower_ratelimit::layer::fair_share::FairShare;
use tower_ratelimit::layer::{HeaderStyle, adaptive::{Adaptive, Steps}};
use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};

#[path = "../../benches/support/requests.rs"]
mod requests;
use requests::{hello, now, request};

fn main() {
    #[cfg(feature = "metrics")]
    if std::env::var_os("PROMETHEUS").is_some() {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("no other recorder");
    }
    let mut args = std::env::args().skip(1);
    let which = args.next().expect("bare, allowed or rejected");
    let n: usize = args.next().expect("a number of requests").parse().unwrap();
    let users: Vec<String> = (0..1000).map(|i| format!("user-{i}")).collect();
    let quota = match which.as_str() {
        "rejected" => Quota::per_hour(1).unwrap(),
        _ => Quota::per_second(1_000_000).unwrap(),
    };
    let policy = Policy::single(Algorithm::Gcra, quota).unwrap();
    let adaptive = Adaptive::new(Steps::default());
    // 1,000 clients told apart (the users), each response counted under
    // its client; in `adaptive` the requests have no peer address, so
    // each is a client of its own.
    let adaptive = if which == "adaptive-clients" {
        adaptive.clients(Header::new("x-user-id"))
    } else {
        adaptive
    };
    if which == "adaptive-scaled" {
        adaptive.pin().replace(Some(0.5));
    }
    if which.starts_with("shared") {
        let shared = if which == "shared" {
            FairShare::new(Quota::per_second(1_000_000).unwrap())
        } else {
            FairShare::in_flight(1_000_000)
        };
        let shared = shared.unwrap().tenant(Header::new("x-user-id"));
        let limited = ServiceBuilder::new().layer(shared).service(hello());
        drive(limited, &users, n, false);
    } else if which.starts_with("adaptive") {
        let limited = ServiceBuilder::new()
            .layer(RateLimitLayer::new(adaptive.policies(policy)).key(Header::new("x-user-id")))
            .layer(adaptive.observer())
            .service(hello());
        drive(limited, &users, n, false);
    } else {
        let style = match which.as_str() {
            "no-headers" => HeaderStyle::None,
            _ => HeaderStyle::default(),
        };
        let limited = ServiceBuilder::new()
            .layer(
                RateLimitLayer::new(policy)
                    .key(Header::new("x-user-id"))
                    .headers(style),
            )
            .service(hello());
        drive(limited, &users, n, which == "bare");
    }
}

/// Every user known first (the rejected ones are then all over their
/// limit), then `n` requests round-robin, through `limited` (or the bare
/// service).
fn drive<S>(limited: S, users: &[String], n: usize, bare: bool)
where
    S: tower::Service<http::Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    for user in users {
        now(limited.clone().oneshot(request(user))).unwrap();
    }
    if std::env::var_os("SIZES").is_some() {
        let fut = limited.clone().oneshot(request(&users[0]));
        eprintln!("oneshot future: {} bytes", std::mem::size_of_val(&fut));
        let mut svc = limited.clone();
        let call = svc.call(request(&users[0]));
        eprintln!("response future: {} bytes", std::mem::size_of_val(&call));
        eprintln!("request: {} bytes", std::mem::size_of::<http::Request<()>>());
    }
    for i in 0..n {
        let user = &users[i % users.len()];
        if bare {
            black_box(now(hello().oneshot(request(user))).unwrap());
        } else {
            black_box(now(limited.clone().oneshot(request(user))).unwrap());
        }
    }
}
