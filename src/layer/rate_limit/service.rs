//! [`RateLimit`]: the service a [`RateLimitLayer`] wraps around another.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::cost::Cost;
use super::decide::{mark, Refusal};
use super::future::ResponseFuture;
use super::layer::{Config, OnKeyError, RateLimitLayer};
use super::lists::Listed;
use super::observe::{self, Fate, Report};
use super::select::{NoPolicy, PolicyResolver};
use super::settle::Place;
use super::state::{Admission, Ask, Parking, Pending, Retry, Step};
use crate::backend::{Backend, BackendError};
use crate::decision::Origin;
use crate::key::{Key, KeyError, KeyExtractor};
use crate::layer::answer::body_kind::{BodyKind, OwnBody};
use crate::layer::answer::headers::HeaderStyle;
use crate::layer::callee::{self, Answer, Callee};
use crate::{key::RequestHead, Decision, Live, Policy};

/// Rate-limits the requests to `S`. Made by [`RateLimitLayer`].
///
/// `poll_ready` only asks the inner service; quota is never reserved there,
/// since the key is only known from the request. `call` decides first and
/// calls the inner service only for allowed requests.
///
/// Works with any `Service<http::Request<_>>` whose response body yields
/// [`bytes::Bytes`] — axum, hyper, tonic — not only axum:
///
/// ```
/// use std::convert::Infallible;
/// use tower::{Service, ServiceExt};
/// use tower_ratelimit::key::Global;
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let hello = tower::service_fn(|_req: http::Request<String>| async {
///     Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
/// });
/// let mut svc = tower::ServiceBuilder::new()
///     .layer(RateLimitLayer::new("1/min".parse::<Policy>().unwrap()).key(Global))
///     .service(hello);
///
/// let first = svc.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(first.status(), 200);
/// assert_eq!(first.headers()["x-ratelimit-remaining"], "0");
/// let second = svc.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(second.status(), 429);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RateLimit<S, K, P, B, C, O = OwnBody> {
    inner: S,
    // Shared: axum clones a route's service for every request, and one
    // reference count is cheaper than one per part.
    layer: Arc<RateLimitLayer<K, P, B, C, O>>,
}

// Here rather than beside the builder, so that the builder knows nothing
// of the service it makes.
impl<S, K: Clone, P: Clone, B: Clone, C: Clone, O: Clone> Layer<S>
    for RateLimitLayer<K, P, B, C, O>
{
    type Service = RateLimit<S, K, P, B, C, O>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            layer: Arc::new(self.clone()),
        }
    }
}

impl<S, K, P, B, C, O> RateLimit<S, K, P, B, C, O> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, K, P, B, C, O, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, K, P, B, C, O>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    K: KeyExtractor,
    P: PolicyResolver,
    B: Backend,
    C: Cost,
    O: BodyKind<ResB>,
{
    type Response = Response<O::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB, B, O>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let config = &self.layer.config;
        match Self::first_step(&self.layer, &mut self.inner, &mut req) {
            // Nearly every request: the request goes from here into the
            // inner call, not through a copy kept for the other steps.
            Step::Call(inner, admission) => ResponseFuture::call(inner, admission, req, config),
            step => ResponseFuture::new(step, req, config),
        }
    }
}

impl<S, K, P, B, C, O> RateLimit<S, K, P, B, C, O>
where
    K: KeyExtractor,
    P: PolicyResolver,
    B: Backend,
    C: Cost,
{
    /// The request's first step: what the lists, the resolver and the key
    /// make of it, or the backend's answer. A request to check goes
    /// straight on to the backend, its ask built where it is kept.
    #[inline(always)]
    fn first_step<'s, ReqB>(
        layer: &RateLimitLayer<K, P, B, C, O>,
        inner: &'s mut S,
        req: &mut Request<ReqB>,
    ) -> Step<&'s mut S, B>
    where
        S: Service<Request<ReqB>> + Clone,
    {
        let config = &layer.config;
        let head = RequestHead::from(&*req);
        let report = Report::start(&config.observer, &head);
        let known = match layer.select(config, &head) {
            Selected::Check(key, policy) => {
                let cost = layer.cost.cost(&head);
                let ask = Ask {
                    key,
                    policy,
                    cost,
                    report,
                };
                return check(ask, &layer.backend, inner, req, config);
            }
            Selected::Listed(listed) => {
                let denied = listed == Listed::Denied;
                observe::listed(&config.observer, &report, denied);
                match listed {
                    Listed::Denied => Err(Refusal::DenyListed),
                    Listed::Allowed => Ok(Origin::AllowListed),
                }
            }
            Selected::NoPolicy => {
                let refused = config.on_no_policy == NoPolicy::Refuse;
                observe::no_policy(&config.observer, &report, refused);
                match refused {
                    true => Err(Refusal::NoPolicy),
                    false => Ok(Origin::NoPolicy),
                }
            }
            Selected::NoKey(error) => {
                let rejected = matches!(config.on_key_error, OnKeyError::Reject(_));
                observe::key_missing(&config.observer, &report, &error, rejected);
                match config.on_key_error {
                    OnKeyError::Skip => Ok(Origin::NoKey),
                    OnKeyError::Reject(status) => Err(Refusal::NoKey(status, error)),
                }
            }
        };
        // Known without a backend: passed on unlimited, marked with how it
        // got there, or refused at once.
        match known {
            Ok(origin) => {
                mark(req.extensions_mut(), origin);
                Step::Call(inner, Admission::unlimited())
            }
            Err(refusal) => Step::Respond(refusal.response(config.refusals(), req, None)),
        }
    }
}

/// What the layer makes of a request before any backend is asked.
enum Selected {
    /// On an allow or a deny list.
    Listed(Listed),
    /// No policy for it (or no key where one was wanted).
    NoPolicy,
    /// A policy, but its key could not be had.
    NoKey(KeyError),
    /// Checked under this key and policy.
    Check(Key, Policy),
}

impl<K: KeyExtractor, P: PolicyResolver, B, C, O> RateLimitLayer<K, P, B, C, O> {
    /// The lists, the resolver, the key extractor and a key's own policy,
    /// in the order a request meets them.
    #[inline(always)]
    fn select(&self, config: &Config, head: &RequestHead<'_>) -> Selected {
        let policy = self.policy.resolve(head);
        let lists = config.lists.as_ref().map(Live::load);
        let wants_key = policy.is_some() || lists.as_ref().is_some_and(|l| l.has_keys());
        let key = wants_key.then(|| self.key.extract(head));
        if let Some(lists) = &lists {
            let ip = lists.ip_of(head);
            if let Some(listed) = lists.find(ip, key.as_ref().and_then(|k| k.as_ref().ok())) {
                return Selected::Listed(listed);
            }
        }
        let Some(policy) = policy else {
            return Selected::NoPolicy;
        };
        let key = match key {
            Some(Ok(key)) => key,
            Some(Err(error)) => return Selected::NoKey(error),
            // A policy always wants a key.
            None => return Selected::NoPolicy,
        };
        let policy = match &config.key_policies {
            Some(own) => own.load().get(&key).cloned().unwrap_or(policy),
            None => policy,
        };
        Selected::Check(key, policy)
    }

    /// What this layer would check `req` against, read without spending
    /// anything: the policy it resolves for `req` (its resolver, its key,
    /// the key's own policy) and that key's state under it now — each
    /// limit's remaining and reset, as a request of cost 0 would find
    /// them. `None` when the layer would not check `req`: no policy, no
    /// key, or on an allow or deny list. For a quota endpoint behind the
    /// very limits it reports: reading one spends none of them.
    ///
    /// ```
    /// use axum::{body::Body, http::Request};
    /// use tower_ratelimit::key::{Header, RequestHead};
    /// use tower_ratelimit::{Policy, RateLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::new("plan = 60/min".parse::<Policy>()?).key(Header::new("x-user-id"));
    /// let req = Request::get("/quota").header("x-user-id", "ann").body(Body::empty())?;
    /// let (policy, now) = layer.peek(&RequestHead::from(&req)).await?.expect("ann is limited");
    /// assert_eq!(policy.limits()[0].name(), "plan");
    /// assert_eq!(now.deciding().remaining(), 60); // and reading spent none
    /// # Ok(())
    /// # }
    /// ```
    pub fn peek(&self, req: &RequestHead<'_>) -> Peek
    where
        B: Backend,
    {
        let Selected::Check(key, policy) = self.select(&self.config, req) else {
            return Box::pin(std::future::ready(Ok(None)));
        };
        let read = self.backend.peek_many(vec![(key, policy.clone())]);
        Box::pin(async move { Ok(read.await?.pop().map(|decision| (policy, decision))) })
    }
}

/// [`RateLimitLayer::peek`]'s answer: the policy and the decision a
/// request of cost 0 would get now, if the layer would check the request.
pub type Peek =
    Pin<Box<dyn Future<Output = Result<Option<(Policy, Decision)>, BackendError>> + Send>>;

/// Asks the backend about `ask`; acted on at once when the answer is known
/// at once, else parked beside the backend's future with a ready copy of
/// the inner service.
#[inline(always)]
fn check<'s, S, ReqB, B>(
    ask: Ask,
    backend: &B,
    inner: &'s mut S,
    req: &mut Request<ReqB>,
    config: &Config,
) -> Step<&'s mut S, B>
where
    S: Service<Request<ReqB>> + Clone,
    B: Backend,
{
    let in_flight = ask.policy.has_in_flight();
    let place = Place::of(config.settlement.as_ref(), &ask.key, &ask.policy);
    let check = backend.check(&ask.key, &ask.policy, place.cost(ask.cost));
    // Built only for a request that may wait: none is dropped on the way.
    let retry = || {
        config.shaping.as_ref().map(|shaping| {
            Box::new(Retry {
                deadline: Instant::now() + shaping.max_wait,
                waiting: None,
            })
        })
    };
    let asks_again = config.shaping.is_some()
        || config.settlement.is_some()
        || config.demotion.is_some()
        || in_flight;
    match callee::answer::<B, S>(check, inner) {
        // Nearly every request: admitted at once, with nothing to hold,
        // settle or delay. Called straight away, its ask never moved into
        // a pending request.
        Answer::Now(Ok(decision), inner)
            if decision.is_allowed() && !asks_again && config.soft_shed.is_none() =>
        {
            // Nothing is settled, so it holds no place: forgotten, not
            // dropped (its drop is a call).
            std::mem::forget(place);
            admitted_at_once(inner, ask, backend.name(), req, config, decision)
        }
        Answer::Now(answer, inner) => Pending::new(inner, ask, backend, asks_again, retry(), place)
            .answered(req, config, answer),
        Answer::Later(check, inner) => Step::Park(
            Pending::new(inner, ask, backend, asks_again, retry(), place),
            Parking::Check(check),
        ),
    }
}

/// A request the backend admitted at once, when nothing is to be held,
/// settled, delayed or asked again: what [`Pending::answered`] makes of
/// such an answer, without building the pending request.
#[inline(always)]
fn admitted_at_once<I: Callee, B: Backend, ReqB>(
    inner: I,
    ask: Ask,
    backend_name: &'static str,
    req: &mut Request<ReqB>,
    config: &Config,
    decision: Decision,
) -> Step<I, B> {
    let Ask {
        key,
        policy,
        report,
        ..
    } = ask;
    observe::decided(
        &config.observer,
        (&key, &policy, &report),
        backend_name,
        &decision,
        Fate::Allowed,
    );
    mark(req.extensions_mut(), decision.origin());
    // The decision is kept only to be shown: nothing else reads it on
    // this path.
    if config.headers == HeaderStyle::None {
        return Step::Call(inner, Admission::unlimited());
    }
    Step::Call(
        inner,
        Admission {
            quota: Some((decision, policy)),
            settling: None,
            permit: None,
        },
    )
}
