//! The extension points, used from outside the crate as a user would: a
//! `Backend`, a `KeyExtractor` and a `PolicyResolver` of our own, driven
//! through the layer.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_ratelimit::algorithm::Outcome;
use tower_ratelimit::algorithm::{Gcra, State};
use tower_ratelimit::backend::{Backend, BackendError, MemoryBackend};
use tower_ratelimit::clock::Micros;
use tower_ratelimit::decision::Origin;
use tower_ratelimit::key::RequestHead;
use tower_ratelimit::key::{Key, KeyError, KeyExtractor};
use tower_ratelimit::layer::{NoPolicy, PolicyResolver};
use tower_ratelimit::{Decision, Policy, RateLimitLayer};

use crate::support::http::ok;
use crate::support::Broken;

/// A backend of our own: GCRA state in a `HashMap`, on a clock we move by
/// hand. It enforces every limit as GCRA (a real one would pick the
/// algorithm by `limit.algorithm()`), all or nothing.
#[derive(Clone, Default)]
struct HashMapGcra {
    states: Arc<Mutex<HashMap<(Key, String), State>>>,
    now: Arc<AtomicU64>,
}

impl Backend for HashMapGcra {
    type Future = Ready<Result<Decision, BackendError>>;

    fn answer_now(future: &mut Self::Future) -> Option<Result<Decision, BackendError>> {
        tower_ratelimit::backend::ready_answer(future)
    }

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        let now = Micros::new(self.now.load(Ordering::SeqCst));
        let mut states = self.states.lock().unwrap();
        let entry = |limit: &tower_ratelimit::Limit| (key.clone(), limit.identity().to_owned());
        let outcomes: Vec<Outcome> = policy
            .limits()
            .iter()
            .map(|limit| {
                let state = states.get(&entry(limit)).copied().unwrap_or_default();
                Gcra::new(limit.quota()).check(state, now, cost)
            })
            .collect();
        let decision = match Decision::from_outcomes(policy, outcomes) {
            Ok(decision) => decision,
            Err(e) => return ready(Err(BackendError::new(e))),
        };
        if decision.is_allowed() {
            for limit in policy.limits() {
                let state = states.entry(entry(limit)).or_default();
                *state = Gcra::new(limit.quota()).consume(*state, now, cost);
            }
        }
        ready(Ok(decision))
    }
}

/// A key of our own: the tenant, from the host name.
#[derive(Clone)]
struct Tenant;

impl KeyExtractor for Tenant {
    fn extract(&self, req: &RequestHead<'_>) -> Result<Key, KeyError> {
        let host = req.headers.get("host").ok_or(KeyError::Missing("host"))?;
        Ok(Key::new("tenant", host.as_bytes()))
    }
}

/// A policy resolver of our own: GETs free, writes limited.
#[derive(Clone)]
struct WritesOnly(Policy);

impl PolicyResolver for WritesOnly {
    fn resolve(&self, req: &RequestHead<'_>) -> Option<Policy> {
        (req.method != http::Method::GET).then(|| self.0.clone())
    }
}

fn post(host: &str) -> Request<()> {
    Request::post("/").header("host", host).body(()).unwrap()
}

#[tokio::test]
async fn a_backend_of_our_own_decides_through_the_layer() {
    let backend = HashMapGcra::default();
    let policy: Policy = "2/s; 100/min".parse().unwrap();
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new(WritesOnly(policy))
                .key(Tenant)
                .backend(backend.clone())
                .on_no_policy(NoPolicy::Unlimited),
        )
        .service(ok());

    let mut statuses = Vec::new();
    for _ in 0..3 {
        let res = svc.clone().oneshot(post("a.example")).await.unwrap();
        statuses.push(res.status());
        if res.status() == StatusCode::TOO_MANY_REQUESTS {
            // The 2/s limit decided: retry after half a second, rounded up.
            assert_eq!(res.headers()["retry-after"], "1");
            assert_eq!(res.headers()["x-ratelimit-limit"], "2");
            let body = res.into_body().collect().await.unwrap().to_bytes();
            assert!(String::from_utf8_lossy(&body).contains(r#""window":"1s""#));
        } else {
            assert_eq!(
                res.headers()["ratelimit-policy"],
                r#""2/s";q=2;w=1, "100/min";q=100;w=60"#
            );
        }
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );

    // Another tenant has its own budget; GETs are not limited at all.
    let other = svc.clone().oneshot(post("b.example")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    let get = Request::get("/")
        .header("host", "a.example")
        .body(())
        .unwrap();
    assert_eq!(
        svc.clone().oneshot(get).await.unwrap().status(),
        StatusCode::OK
    );

    // Half a second later (GCRA at 2/s) one more fits, and only one.
    backend.now.fetch_add(500_000, Ordering::SeqCst);
    let after = svc.clone().oneshot(post("a.example")).await.unwrap();
    assert_eq!(after.status(), StatusCode::OK);
    assert_eq!(after.headers()["x-ratelimit-remaining"], "0");
    let again = svc.clone().oneshot(post("a.example")).await.unwrap();
    assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);

    // A request without the key's part is refused, saying what is missing.
    let bare = Request::post("/").body(()).unwrap();
    let res = svc.clone().oneshot(bare).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("missing host"));
}

#[test]
fn outcomes_must_be_one_per_limit() {
    let policy: Policy = "1/s; 2/s".parse().unwrap();
    let one = [Outcome::allowed(1, 0, Micros::ZERO)];
    let err = Decision::from_outcomes(&policy, one).unwrap_err();
    assert_eq!((err.expected, err.got), (2, 1));
    assert!(err
        .to_string()
        .contains("1 outcomes for a policy of 2 limits"));
    let three = [Outcome::allowed(1, 0, Micros::ZERO); 3];
    assert!(Decision::from_outcomes(&policy, three).is_err());
}

#[test]
fn the_crate_applies_all_or_nothing_to_outside_outcomes() {
    let policy: Policy = "a = 10/s; b = 100/min; c = 1000/h".parse().unwrap();
    let decision = Decision::from_outcomes(
        &policy,
        [
            Outcome::allowed(10, 9, Micros::from_millis(100)),
            Outcome::denied(100, 0, Micros::from_secs(60), Micros::from_secs(5)),
            Outcome::never(1000, 1000, Micros::ZERO),
        ],
    )
    .unwrap();
    assert!(!decision.is_allowed());
    // A request that can never fit outranks one that must wait.
    assert_eq!(decision.decided_by(), 2);
    assert_eq!(decision.retry_after(), None);
    assert_eq!(decision.origin(), Origin::Primary);

    let allowed = Decision::from_outcomes(
        &policy,
        [
            Outcome::allowed(10, 9, Micros::from_millis(100)),
            Outcome::allowed(100, 3, Micros::from_secs(60)),
            Outcome::allowed(1000, 500, Micros::from_secs(3600)),
        ],
    )
    .unwrap();
    assert!(allowed.is_allowed());
    // The most restrictive: fewest remaining.
    assert_eq!(allowed.decided_by(), 1);
    assert_eq!(allowed.deciding().remaining(), 3);
}

#[tokio::test]
async fn a_fallback_decides_when_the_primary_fails_and_says_so() {
    let local = MemoryBackend::new();
    let backend = Broken.or_fallback(local.clone());
    let policy: Policy = "2/min".parse().unwrap();
    let key = Key::new("user", "alice");
    let first = backend.check(&key, &policy, 1).await.unwrap();
    assert!(first.is_allowed());
    assert_eq!(first.origin(), Origin::Fallback);
    // The fallback counted it: one left there.
    assert_eq!(first.deciding().remaining(), 1);
    assert_eq!(local.check_now(&key, &policy, 0).deciding().remaining(), 1);

    // A primary that answers decides alone, and the fallback is untouched.
    let healthy = MemoryBackend::new().or_fallback(local.clone());
    let decided = healthy.check(&key, &policy, 1).await.unwrap();
    assert_eq!(decided.origin(), Origin::Primary);
    assert_eq!(decided.deciding().remaining(), 1);
    assert_eq!(local.check_now(&key, &policy, 0).deciding().remaining(), 1);
}

#[tokio::test]
async fn the_layer_counts_fallback_decisions_as_limits() {
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("1/min".parse::<Policy>().unwrap())
                .key(Tenant)
                .backend(Broken.or_fallback(MemoryBackend::new())),
        )
        .service(ok());
    let first = svc.clone().oneshot(post("a.example")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["x-ratelimit-remaining"], "0");
    let second = svc.clone().oneshot(post("a.example")).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    // The local limit answered: a real retry-after, not the failure answer's 1 s.
    let retry: u64 = second.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((2..=120).contains(&retry), "{retry}");
}

/// What the inner service saw: the `Origin` in its request's extensions.
fn echo_decided(
) -> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone {
    service_fn(|req: Request<()>| {
        let seen = format!(
            "{:?}",
            req.extensions().get::<tower_ratelimit::decision::Origin>()
        );
        ready(Ok::<_, Infallible>(Response::new(Full::from(seen))))
    })
}

async fn decided_by<B: Backend>(
    backend: B,
    on_error: tower_ratelimit::backend::OnBackendError,
) -> String {
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::new("100/min".parse::<Policy>().unwrap())
                .key(Tenant)
                .backend(backend)
                .on_backend_error(on_error),
        )
        .service(echo_decided());
    let res = svc.oneshot(post("a.example")).await.unwrap();
    if let Some(decided) = res.extensions().get::<tower_ratelimit::decision::Origin>() {
        return format!("response: {decided:?}");
    }
    let body = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn how_each_request_was_decided_is_in_its_extensions() {
    use tower_ratelimit::backend::OnBackendError::{Allow, Deny};
    // The store decided: no mark (`Origin::of` reads it as `Primary`).
    assert_eq!(decided_by(MemoryBackend::new(), Allow).await, "None");
    assert_eq!(
        decided_by(Broken.or_fallback(MemoryBackend::new()), Allow).await,
        "Some(Fallback)"
    );
    // A breaker that opened at the first failure: the fallback decides
    // without asking the primary.
    let breaker = Broken.with_breaker().failures_to_open(1);
    let backend = breaker.clone().or_fallback(MemoryBackend::new());
    assert_eq!(decided_by(backend.clone(), Allow).await, "Some(Fallback)");
    assert!(breaker.is_open());
    assert_eq!(decided_by(backend, Allow).await, "Some(BreakerOpen)");
    assert_eq!(
        decided_by(Broken, Allow).await,
        "Some(FailedOpen { breaker_open: false })"
    );
    assert_eq!(
        decided_by(breaker.clone(), Allow).await,
        "Some(FailedOpen { breaker_open: true })"
    );
    // Refused: the response says it.
    assert_eq!(
        decided_by(Broken, Deny).await,
        "response: FailedClosed { breaker_open: false }"
    );
    // A backend answering within the call (as the memory backend does)
    // has its admissions marked alike.
    assert_eq!(
        decided_by(AtOnceFallback::default(), Allow).await,
        "Some(Fallback)"
    );
}

/// A fallback of our own that answers within the layer's call: the
/// memory backend's decisions, said to be a fallback's.
#[derive(Clone, Default)]
struct AtOnceFallback(MemoryBackend);

impl Backend for AtOnceFallback {
    type Future = Ready<Result<Decision, BackendError>>;

    fn answer_now(future: &mut Self::Future) -> Option<Result<Decision, BackendError>> {
        tower_ratelimit::backend::ready_answer(future)
    }

    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> Self::Future {
        let decision = self.0.check_now(key, policy, cost);
        ready(Ok(decision.with_origin(Origin::Fallback)))
    }

    fn name(&self) -> &'static str {
        "at-once-fallback"
    }
}

#[test]
fn a_local_share_is_each_limit_divided_by_the_servers() {
    let local = MemoryBackend::builder().servers(10).build();
    let key = Key::new("user", "alice");
    let admitted = |policy: &Policy| {
        (0..1_000)
            .filter(|_| local.check_at(&key, policy, 1, Micros::ZERO).is_allowed())
            .count()
    };
    // 105 / 10, rounded up; never below one.
    assert_eq!(admitted(&"105/min".parse().unwrap()), 11);
    assert_eq!(admitted(&"3/min".parse().unwrap()), 1);
    // A burst is shared too: 50 / 10 at once (the rate 100/s / 10 refills
    // nothing at a standstill).
    let bursty = Policy::parse_with("100/s burst 50", tower_ratelimit::Algorithm::Gcra).unwrap();
    assert_eq!(admitted(&bursty), 5);
    // Decisions report the share.
    let d = local.check_at(
        &Key::new("user", "bob"),
        &"100/min".parse().unwrap(),
        1,
        Micros::ZERO,
    );
    assert_eq!((d.deciding().limit(), d.deciding().remaining()), (10, 9));
}

/// Through a layer, a share's headers and refusal body report what is
/// enforced: a 1000/min limit shared by 3 servers says 334 everywhere
/// (its limit, its policy's quota, its remaining, its refusal's body).
#[tokio::test]
async fn a_local_share_is_what_the_headers_and_body_report() {
    use tower::Layer;
    let local = MemoryBackend::builder().servers(3).build();
    let svc = RateLimitLayer::new("1000/min".parse::<Policy>().unwrap())
        .key(tower_ratelimit::key::Header::new("x-user-id"))
        .backend(local)
        .layer(ok());
    let ask = || {
        Request::builder()
            .header("x-user-id", "alice")
            .body(())
            .unwrap()
    };
    let first = svc.clone().oneshot(ask()).await.unwrap();
    assert_eq!(first.headers()["x-ratelimit-limit"], "334");
    assert_eq!(first.headers()["x-ratelimit-remaining"], "333");
    let policy = first.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(policy.contains("q=334"), "{policy}");
    let mut last = first;
    for _ in 0..334 {
        last = svc.clone().oneshot(ask()).await.unwrap();
    }
    assert_eq!(last.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(last.headers()["x-ratelimit-limit"], "334");
    let body = last.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.contains(r#""limit":334"#), "{body}");
}
