//! A backend whose answer comes on a later poll, as a networked store's
//! does, the layer the two paths are compared through, and what a response
//! says. Shared by the layer's tests and its fuzz target
//! (`fuzz/fuzz_targets/layer.rs`, by path).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use tower::{Service, ServiceExt};
use tower_ratelimit::backend::{Backend, BackendError, MemoryBackend};
use tower_ratelimit::clock::ManualClock;
use tower_ratelimit::key::{Header, Key};
use tower_ratelimit::layer::{cost_fn, Cost};
use tower_ratelimit::{Algorithm, Decision, Policy, RateLimitLayer};

/// The memory backend behind a future that answers on its second poll:
/// the layer cannot act on it within `call`.
#[derive(Clone)]
pub struct Later(pub MemoryBackend<ManualClock>);

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

/// The policy the two paths are compared under: `algorithm` at 4/s beside
/// a fixed window of 12/min.
pub fn two_limits(algorithm: Algorithm) -> Policy {
    Policy::builder()
        .limit("second", algorithm, "4/s".parse().unwrap())
        .limit("minute", Algorithm::FixedWindow, "12/min".parse().unwrap())
        .build()
        .unwrap()
}

/// `policy` on `backend`, per `x-user-id`, each request costing what its
/// `x-cost` says (1 when it says nothing readable).
pub fn costed<B: Backend>(
    policy: Policy,
    backend: B,
) -> RateLimitLayer<Header, Policy, B, impl Cost> {
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
pub type Answer = (u16, Vec<(String, Vec<u8>)>, Bytes);

/// The same request (each made by `request`) to the layer acting on an
/// answer at once, then to the one acting on it later: what each answers.
pub async fn both_answer<S, ReqB, ResB>(
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
pub async fn answer<B>(response: Response<B>) -> Answer
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
