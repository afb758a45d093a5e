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
use super::observe;
use super::observe::Report;
use super::select::{NoPolicy, PolicyResolver};
use super::settle::Place;
use super::state::{Admission, Ask, Parking, Pending, Retry, Step};
use crate::backend::{Backend, BackendError};
use crate::decision::Origin;
use crate::key::{Key, KeyError, KeyExtractor};
use crate::layer::answer::body_kind::{BodyKind, OwnBody};
use crate::layer::callee::{self, Answer};
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
        let config = self.layer.config.clone();
        let start = self.start(&config, &RequestHead::from(&req));
        let step = start.step(&self.layer.backend, &mut self.inner, &mut req, &config);
        ResponseFuture::new(step.state(req), config)
    }
}

impl<S, K, P, B, C, O> RateLimit<S, K, P, B, C, O>
where
    K: KeyExtractor,
    P: PolicyResolver,
    C: Cost,
{
    #[inline(always)]
    fn start(&self, config: &Config, head: &RequestHead<'_>) -> Start {
        let report = Report::start(&config.observer, head);
        match self.layer.select(config, head) {
            Selected::Listed(listed) => {
                let denied = listed == Listed::Denied;
                observe::listed(&config.observer, &report, denied);
                match listed {
                    Listed::Denied => Start::Refuse(Refusal::DenyListed),
                    Listed::Allowed => Start::Pass(Origin::AllowListed),
                }
            }
            Selected::NoPolicy => {
                let refused = config.on_no_policy == NoPolicy::Refuse;
                observe::no_policy(&config.observer, &report, refused);
                match refused {
                    true => Start::Refuse(Refusal::NoPolicy),
                    false => Start::Pass(Origin::NoPolicy),
                }
            }
            Selected::NoKey(error) => {
                let rejected = matches!(config.on_key_error, OnKeyError::Reject(_));
                observe::key_missing(&config.observer, &report, &error, rejected);
                match config.on_key_error {
                    OnKeyError::Skip => Start::Pass(Origin::NoKey),
                    OnKeyError::Reject(status) => Start::Refuse(Refusal::NoKey(status, error)),
                }
            }
            Selected::Check(key, policy) => Start::Check(Ask {
                key,
                policy,
                cost: self.layer.cost.cost(head),
                report,
            }),
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
        let (Some(policy), Some(key)) = (policy, key) else {
            return Selected::NoPolicy;
        };
        let key = match key {
            Ok(key) => key,
            Err(error) => return Selected::NoKey(error),
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

/// What the service knows of a request when its future starts.
pub(super) enum Start {
    /// Ask the backend.
    Check(Ask),
    /// Call the inner service unlimited, marked with how it got there (an
    /// allow-listed client, no policy or no key, let through).
    Pass(Origin),
    /// Refuse at once (a deny-listed client, no policy or no key, refused).
    Refuse(Refusal),
}

impl Start {
    /// The request's first step, with the ready inner service.
    #[inline(always)]
    pub(super) fn step<'s, S, ReqB, B>(
        self,
        backend: &B,
        inner: &'s mut S,
        req: &mut Request<ReqB>,
        config: &Config,
    ) -> Step<&'s mut S, B>
    where
        S: Service<Request<ReqB>> + Clone,
        B: Backend,
    {
        let ask = match self {
            Start::Check(ask) => ask,
            Start::Pass(origin) => {
                mark(req.extensions_mut(), origin);
                return Step::Call(inner, Admission::unlimited());
            }
            Start::Refuse(refusal) => {
                return Step::Respond(refusal.response(config.refusals(), req, None));
            }
        };
        let in_flight = ask.policy.limits().iter().any(|l| l.is_concurrent());
        let place = Place::of(config.settlement.as_ref(), &ask.key, &ask.policy);
        let check = backend.check(&ask.key, &ask.policy, place.cost(ask.cost));
        let retry = config.shaping.as_ref().map(|shaping| {
            Box::new(Retry {
                deadline: Instant::now() + shaping.max_wait,
                waiting: None,
            })
        });
        let asks_again = retry.is_some()
            || config.settlement.is_some()
            || config.demotion.is_some()
            || in_flight;
        match callee::answer::<B, S>(check, inner) {
            Answer::Now(answer, inner) => {
                Pending::new(inner, ask, backend, asks_again, retry, place)
                    .answered(req, config, answer)
            }
            Answer::Later(check, inner) => Step::Park(
                Pending::new(inner, ask, backend, asks_again, retry, place),
                Parking::Check(check),
            ),
        }
    }
}
