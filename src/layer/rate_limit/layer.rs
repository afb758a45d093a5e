//! [`RateLimitLayer`]: the policy, the key, the backend, and what to answer;
//! and [`Config`], what every request of a layer shares.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use super::cost::Cost;
use super::decide::Rules;
use super::lists::AccessLists;
use super::observe::offenders::TopOffenders;
use super::observe::Reporting;
use super::select::{KeyPolicies, NoPolicy, PolicyResolver};
use super::settle::{ResponseHead, Settlement};
use super::shaping::Shaping;
use super::soft_shed::SoftShed;
use crate::backend::OnBackendError;
use crate::backend::{Backend, MemoryBackend};
use crate::key::{ClientIp, KeyExtractor};
#[cfg(feature = "axum")]
use crate::layer::answer::body_kind::AxumBody;
use crate::layer::answer::body_kind::OwnBody;
use crate::layer::answer::headers::HeaderStyle;
use crate::layer::answer::response::LimitedResponse;
use crate::{clock::Micros, Live, Policy};

/// Rate-limits requests to the services it wraps.
///
/// Every request is keyed (by default by client IP), given a policy and a
/// cost (by default 1), and checked against the backend (by default a fresh
/// in-memory one). Allowed requests reach the inner service; limited ones
/// get a 429. Every response carries quota headers.
///
/// ```
/// use axum::{routing::get, Router};
/// use tower_ratelimit::key::{ClientIp, KeyExtractor, Header};
/// use tower_ratelimit::{Algorithm, Policy, Quota, RateLimitLayer};
///
/// let per_user = Policy::builder()
///     .limit("burst", Algorithm::TokenBucket, "10/s burst 20".parse().unwrap())
///     .limit("sustained", Algorithm::SlidingWindow, Quota::per_minute(100).unwrap())
///     .build()
///     .unwrap();
///
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(per_user).key(Header::new("x-user-id").or(ClientIp::new())));
/// ```
///
/// The default key, [`ClientIp`], reads the connection's peer address: serve
/// an axum app with `into_make_service_with_connect_info::<SocketAddr>()`.
/// Without it every request is refused with a 400 whose body says so (and,
/// with the `tracing` feature, an error is logged once).
#[derive(Clone, Debug)]
pub struct RateLimitLayer<K = ClientIp, P = Policy, B = MemoryBackend, C = u32, O = OwnBody> {
    pub(super) key: K,
    pub(super) policy: P,
    pub(super) backend: B,
    pub(super) cost: C,
    pub(super) config: Arc<Config>,
    pub(super) body: PhantomData<O>,
}

impl<P: PolicyResolver> RateLimitLayer<ClientIp, P> {
    /// Limit by `policy` (a [`Policy`], or any resolver), per client IP, in
    /// this layer's own memory, with the default responses.
    pub fn new(policy: P) -> Self {
        Self {
            key: ClientIp::new(),
            policy,
            backend: MemoryBackend::new(),
            cost: 1,
            config: Arc::default(),
            body: PhantomData,
        }
    }
}

impl<K, P, B, C, O> RateLimitLayer<K, P, B, C, O> {
    /// Key requests with `key`.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> RateLimitLayer<K2, P, B, C, O> {
        RateLimitLayer {
            key,
            policy: self.policy,
            backend: self.backend,
            cost: self.cost,
            config: self.config,
            body: self.body,
        }
    }

    /// Choose the policy with `policy`.
    pub fn policy<P2: PolicyResolver>(self, policy: P2) -> RateLimitLayer<K, P2, B, C, O> {
        RateLimitLayer {
            key: self.key,
            policy,
            backend: self.backend,
            cost: self.cost,
            config: self.config,
            body: self.body,
        }
    }

    /// Keep state in `backend`.
    ///
    /// Layers given the same backend (clones of one, or one Redis) share the
    /// state of limits with the same [identity](crate::Limit::identity) for
    /// the same key: a named limit is one budget wherever it appears. Anonymous
    /// limits (`"10/min".parse()`) in a [`RoutePolicies`](crate::layer::RoutePolicies)
    /// are kept apart per route; given straight to two layers, keep them apart
    /// with [`Policy::scoped`] or by naming them (see [`Policy`]'s docs).
    pub fn backend<B2: Backend>(self, backend: B2) -> RateLimitLayer<K, P, B2, C, O> {
        RateLimitLayer {
            key: self.key,
            policy: self.policy,
            backend,
            cost: self.cost,
            config: self.config,
            body: self.body,
        }
    }

    /// Weigh each request with `cost` (a constant, or [`cost_fn`](crate::layer::cost_fn)).
    pub fn cost<C2: Cost>(self, cost: C2) -> RateLimitLayer<K, P, B, C2, O> {
        RateLimitLayer {
            key: self.key,
            policy: self.policy,
            backend: self.backend,
            cost,
            config: self.config,
            body: self.body,
        }
    }

    /// Answer with axum's own `Body` rather than [`ResponseBody`](crate::layer::ResponseBody).
    ///
    /// axum boxes any body that is not its own, so a route's body wrapped
    /// by the layer is boxed again: an allocation and an indirection a
    /// request. With this, the route's body is passed on as it is; only a
    /// response that holds a permit of requests in flight until its body
    /// ends, or the limiter's own, is boxed. Everything else is the same.
    ///
    /// ```
    /// use axum::{routing::get, Router};
    /// use tower_ratelimit::{Policy, RateLimitLayer};
    ///
    /// let app: Router = Router::new()
    ///     .route("/", get(|| async { "hello" }))
    ///     .layer(RateLimitLayer::new("100/min".parse::<Policy>()?).axum_body());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "axum")]
    pub fn axum_body(self) -> RateLimitLayer<K, P, B, C, AxumBody> {
        RateLimitLayer {
            key: self.key,
            policy: self.policy,
            backend: self.backend,
            cost: self.cost,
            config: self.config,
            body: PhantomData,
        }
    }

    /// Which quota headers to send (default: both legacy and IETF).
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.config_mut().headers = style;
        self
    }

    /// How to answer limited requests (default: JSON 429).
    pub fn limited_response(mut self, response: LimitedResponse) -> Self {
        self.config_mut().limited = response;
        self
    }

    /// What to do when no key can be derived (default: reject with 400).
    pub fn on_key_error(mut self, action: OnKeyError) -> Self {
        self.config_mut().on_key_error = action;
        self
    }

    /// What to do when the backend fails (default: allow).
    pub fn on_backend_error(mut self, action: OnBackendError) -> Self {
        self.config_mut().on_backend_error = action;
        self
    }

    /// Add up to `jitter` at random to each `Retry-After`, so throttled
    /// clients do not all come back at the same second.
    pub fn retry_after_jitter(mut self, jitter: Duration) -> Self {
        self.config_mut().retry_jitter = Micros::from(jitter);
        self
    }

    /// Delay requests that do not fit yet instead of refusing them, within
    /// the bounds `shaping` sets (see [`Shaping`]).
    pub fn shape(mut self, shaping: Shaping) -> Self {
        self.config_mut().shaping = Some(shaping);
        self
    }

    /// A key its [penalty box](crate::policy::PenaltyBox) banned is not
    /// refused while the ban lasts: it is limited by `policy` instead — a
    /// stricter tier for chronic offenders, rather than none at all — from
    /// the request that earns the ban on. Its requests are counted under
    /// `policy` (one more store call each while demoted); when the ban
    /// ends, the key's own policy applies again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_ratelimit::policy::PenaltyBox;
    /// use tower_ratelimit::{Policy, RateLimitLayer};
    ///
    /// // 10 denials within a minute: 5 minutes at 5/min instead of 100/min.
    /// let boxed = PenaltyBox::new(10, Duration::from_secs(60), Duration::from_secs(300))?;
    /// let policy = "100/min".parse::<Policy>()?.to_builder().penalty(boxed).build()?;
    /// let layer = RateLimitLayer::new(policy).demote_banned("demoted = 5/min".parse()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn demote_banned(mut self, policy: Policy) -> Self {
        self.config_mut().demotion = Some(policy);
        self
    }

    /// Delay admitted requests as a key nears a limit, before refusing
    /// them at it (see [`SoftShed`]).
    pub fn soft_shed(mut self, soft_shed: SoftShed) -> Self {
        self.config_mut().soft_shed = Some(soft_shed);
        self
    }

    /// Settle each counted request by its response: `actual` reads the
    /// response and says what the request really cost (`None`: what it
    /// reserved), and the difference is given back or charged before the
    /// response leaves, its quota headers showing the state after. See
    /// [`count_if`](Self::count_if) for counting only some responses.
    ///
    /// Requests are still checked (and counted) at their [`cost`](Self::cost)
    /// before the handler runs, so a spent budget refuses them before they
    /// run. What a request used beyond its reservation is charged in full,
    /// past the limit if need be: a debt the key's next requests wait out.
    /// So that concurrent requests cannot each overrun, a key has one
    /// request in flight at a time under this layer: another is refused
    /// (429, retry after a second) until the first is settled, or waits if
    /// the layer [shapes](Self::shape). A client that under-reserves is
    /// served at most the budget plus one request's overrun per window on
    /// each server. A request whose response never comes (the client went away) stays
    /// counted at what it reserved.
    ///
    /// ```
    /// use tower_ratelimit::key::Header;
    /// use tower_ratelimit::{Policy, RateLimitLayer};
    ///
    /// // 1000 tokens a minute per user; each request reserves 100 and is
    /// // charged what its `x-tokens-used` header says.
    /// let tokens = RateLimitLayer::new("1000/min".parse::<Policy>().unwrap())
    ///     .key(Header::new("x-user-id"))
    ///     .cost(100)
    ///     .settle(|res| res.number("x-tokens-used"));
    /// ```
    pub fn settle(
        mut self,
        actual: impl Fn(&ResponseHead<'_>) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        self.config_mut().settlement = Some(Settlement::new(actual));
        self
    }

    /// Count only requests whose response matches `counts` (a failed login:
    /// `|res| res.status == 401`); the others are given back. The budget is
    /// still checked before each request, so once it is spent every request
    /// is refused before the handler runs — a correct password after too
    /// many wrong ones included — until the window allows.
    ///
    /// ```
    /// use tower_ratelimit::key::{ClientIp, Header};
    /// use tower_ratelimit::{Policy, RateLimitLayer};
    ///
    /// // 5 failed logins per 15 minutes per client IP and user.
    /// let logins = RateLimitLayer::new("5/15min".parse::<Policy>().unwrap())
    ///     .key((ClientIp::new(), Header::new("x-login")))
    ///     .count_if(|res| res.status == axum::http::StatusCode::UNAUTHORIZED);
    /// ```
    pub fn count_if(
        mut self,
        counts: impl Fn(&ResponseHead<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        let rule = move |res: &ResponseHead<'_>| if counts(res) { None } else { Some(0) };
        self.config_mut().settlement = Some(Settlement::refund_only(rule));
        self
    }

    /// Shadow mode for every policy of this layer (see [`Shadow`]): a dry
    /// run that decides, counts (`shadow_limited`), logs and offers to
    /// [`top_offenders`](Self::top_offenders) as usual, but refuses and
    /// delays nothing. Per policy: [`PolicyBuilder::shadow`](crate::policy::PolicyBuilder::shadow).
    pub fn shadow(mut self, shadow: Shadow) -> Self {
        self.config_mut().shadow = shadow;
        self
    }

    /// What a request its resolver finds no policy for gets (see
    /// [`NoPolicy`]; by default it is refused with 500, and the first one
    /// logged).
    pub fn on_no_policy(mut self, action: NoPolicy) -> Self {
        self.config_mut().on_no_policy = action;
        self
    }

    /// Allow and deny lists, checked before anything else (see
    /// [`AccessLists`]). Give a [`Live`] handle to replace them at runtime.
    pub fn lists(mut self, lists: impl Into<Live<AccessLists>>) -> Self {
        self.config_mut().lists = Some(lists.into());
        self
    }

    /// Keys with a policy of their own (see [`KeyPolicies`]), looked up
    /// after the key is found; usually a [`Live`] handle.
    pub fn key_policies(mut self, policies: impl Into<Live<KeyPolicies>>) -> Self {
        self.config_mut().key_policies = Some(policies.into());
        self
    }

    /// Count each denied request's key in `top` (see [`TopOffenders`]);
    /// share one between layers to rank keys across them.
    pub fn top_offenders(mut self, top: TopOffenders) -> Self {
        self.config_mut().observer.offenders = Some(top);
        self
    }

    fn config_mut(&mut self) -> &mut Config {
        // Setters run while building, before clones are shared; a layer
        // configured after cloning gets its own copy.
        Arc::make_mut(&mut self.config)
    }
}

/// What to do with a request no key can be derived for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnKeyError {
    /// Answer with this status and a JSON body saying what is missing (the
    /// default: 400). Skipping instead would let a client escape the limit
    /// by leaving out its key.
    Reject(StatusCode),
    /// Pass the request on unlimited.
    Skip,
}

impl Default for OnKeyError {
    fn default() -> Self {
        Self::Reject(StatusCode::BAD_REQUEST)
    }
}

/// Shadow mode for a whole layer ([`RateLimitLayer::shadow`](crate::RateLimitLayer::shadow)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shadow {
    /// Enforce every policy that is not in shadow mode itself (the default).
    #[default]
    Off,
    /// A dry run: every request is decided, counted and reported, none is
    /// refused or delayed. Requests that would have been denied get no quota
    /// headers (clients that obey them would slow down for a limit that is
    /// not enforced); admitted ones get them as usual.
    DryRun,
    /// A dry run that also sends quota headers (and `Retry-After`) on the
    /// requests it would have denied, as an enforced limit would.
    DryRunWithHeaders,
}

/// Settings every request of a layer shares.
#[derive(Clone, Debug, Default)]
pub(super) struct Config {
    pub(super) headers: HeaderStyle,
    pub(super) limited: LimitedResponse,
    pub(super) on_key_error: OnKeyError,
    pub(super) on_backend_error: OnBackendError,
    pub(super) retry_jitter: Micros,
    pub(super) shaping: Option<Shaping>,
    /// The policy a key its penalty box banned lives by until the ban ends.
    pub(super) demotion: Option<Policy>,
    /// Delays admissions as a key nears its limit.
    pub(super) soft_shed: Option<SoftShed>,
    /// Settles each counted request by its response.
    pub(super) settlement: Option<Settlement>,
    /// Every policy in shadow mode, whatever it says.
    pub(super) shadow: Shadow,
    pub(super) lists: Option<Live<AccessLists>>,
    pub(super) key_policies: Option<Live<KeyPolicies>>,
    pub(super) on_no_policy: NoPolicy,
    /// Metrics, logs and offenders: what every request reports to.
    pub(super) observer: Reporting,
}

impl Config {
    /// What a refusal's response is built from: the answer to limited
    /// requests, the quota headers' style and `Retry-After`'s jitter.
    pub(super) fn refusals(&self) -> (&LimitedResponse, HeaderStyle, Micros) {
        (&self.limited, self.headers, self.retry_jitter)
    }

    /// The settings that decide what to do with an answered request.
    pub(super) fn rules(&self) -> Rules {
        Rules {
            on_backend_error: self.on_backend_error,
            shadow: self.shadow != Shadow::Off,
            shadow_headers: self.shadow == Shadow::DryRunWithHeaders,
        }
    }
}
