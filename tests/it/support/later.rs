//! A backend whose answer comes on a later poll, as a networked store's
//! does, and a trace of requests sent through the layer acting on an
//! answer at once and on one that comes later. Shared by the layer's tests
//! and its fuzz target (`fuzz/fuzz_targets/layer.rs`, by path).

use std::convert::Infallible;
use std::future::{ready, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_ratelimit::backend::{Backend, BackendError, Either, MemoryBackend};
use tower_ratelimit::clock::{ManualClock, Micros};
use tower_ratelimit::key::{Header, Key};
use tower_ratelimit::layer::{cost_fn, Cost};
use tower_ratelimit::{Algorithm, Decision, Policy, RateLimitLayer};

/// The memory backend behind a future that answers on its second poll:
/// the layer cannot act on it within `call`.
#[derive(Clone)]
pub struct Later(pub MemoryBackend<ManualClock>);

impl Later {
    /// On a memory backend of its own that reads `clock`.
    pub fn on(clock: ManualClock) -> Self {
        Later(MemoryBackend::builder().clock(clock).build())
    }
}

/// An answer given after one `Pending` (which wakes its task at once).
pub struct SecondPoll {
    polled: bool,
    answer: Option<Result<Decision, BackendError>>,
}

impl Future for SecondPoll {
    type Output = Result<Decision, BackendError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !std::mem::replace(&mut self.polled, true) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.answer.take().map_or(Poll::Pending, Poll::Ready)
    }
}

impl Backend for Later {
    type Future = SecondPoll;
    fn check(&self, key: &Key, policy: &Policy, cost: u32) -> SecondPoll {
        let mut now = self.0.check(key, policy, cost);
        SecondPoll {
            polled: false,
            answer: MemoryBackend::<ManualClock>::answer_now(&mut now),
        }
    }
}

/// Sends each request of `trace` (how long after the previous one, its
/// `x-user-id`, its `x-cost`, as bytes) to the layer acting on the memory
/// backend's answer at once and to the layer acting on the same backend's
/// answer on a later poll, under `algorithm` at 4/s beside a fixed window
/// of 12/min: both must answer alike (statuses, quota headers, bodies), and
/// call the inner service as often. A request whose headers http refuses
/// never reaches a layer; its time passes all the same.
pub async fn same_answers<ReqB>(
    algorithm: Algorithm,
    trace: impl IntoIterator<Item = (Duration, impl AsRef<[u8]>, impl AsRef<[u8]>)>,
) where
    ReqB: Default + Send + 'static,
{
    let policy = two_limits(algorithm);
    let stack = |backend| {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let svc = ServiceBuilder::new()
            .layer(costed(policy.clone(), backend))
            .service(service_fn(move |_: Request<ReqB>| {
                counted.fetch_add(1, Ordering::SeqCst);
                ready(Ok::<_, Infallible>(Response::new(Full::new(
                    Bytes::from_static(b"ok"),
                ))))
            }));
        (svc, calls)
    };
    let clocks = [(); 2].map(|()| ManualClock::new(Micros::from_secs(1_000)));
    let memory = MemoryBackend::builder().clock(clocks[0].clone()).build();
    let (mut at_once, at_once_calls) = stack(Either::Left(memory));
    let (mut later, later_calls) = stack(Either::Right(Later::on(clocks[1].clone())));
    for (step, user, cost) in trace {
        for clock in &clocks {
            clock.advance(step);
        }
        let (Ok(user), Ok(cost)) = (
            HeaderValue::from_bytes(user.as_ref()),
            HeaderValue::from_bytes(cost.as_ref()),
        ) else {
            continue;
        };
        let request = || {
            let mut request = Request::new(ReqB::default());
            let headers = request.headers_mut();
            headers.insert("x-user-id", user.clone());
            headers.insert("x-cost", cost.clone());
            request
        };
        let (a, b) = both_answer(&mut at_once, &mut later, request).await;
        assert_eq!(a, b);
    }
    assert_eq!(
        at_once_calls.load(Ordering::SeqCst),
        later_calls.load(Ordering::SeqCst)
    );
}

/// The policy the two paths are compared under: `algorithm` at 4/s beside
/// a fixed window of 12/min.
fn two_limits(algorithm: Algorithm) -> Policy {
    Policy::builder()
        .limit("second", algorithm, "4/s".parse().unwrap())
        .limit("minute", Algorithm::FixedWindow, "12/min".parse().unwrap())
        .build()
        .unwrap()
}

/// `policy` on `backend`, per `x-user-id`, each request costing what its
/// `x-cost` says (1 when it says nothing readable).
fn costed<B: Backend>(policy: Policy, backend: B) -> RateLimitLayer<Header, Policy, B, impl Cost> {
    RateLimitLayer::new(policy)
        .key(Header::new("x-user-id"))
        .cost(cost_fn(|req| {
            req.headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        }))
        .backend(backend)
}

/// What a response says: its status, headers (but the wall clock's
/// `X-RateLimit-Reset`) and body.
type Answer = (u16, Vec<(String, Vec<u8>)>, Bytes);

/// The same request (each made by `request`) to the layer acting on an
/// answer at once, then to the one acting on it later: what each answers.
async fn both_answer<S, ReqB, ResB>(
    at_once: &mut S,
    later: &mut S,
    request: impl Fn() -> Request<ReqB>,
) -> (Answer, Answer)
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: std::fmt::Debug,
    ResB: http_body::Body<Data = Bytes>,
    ResB::Error: std::fmt::Debug,
{
    let a = at_once
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap();
    let b = later.ready().await.unwrap().call(request()).await.unwrap();
    (answer(a).await, answer(b).await)
}

/// What `response` says ([`Answer`]).
async fn answer<B>(response: Response<B>) -> Answer
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let (parts, body) = response.into_parts();
    let headers = parts
        .headers
        .iter()
        .filter(|(name, _)| *name != "x-ratelimit-reset")
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status.as_u16(), headers, body)
}
