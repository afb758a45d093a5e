//! Choosing the policy for each request.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use http::Method;

use crate::key::Key;
use crate::{key::RequestHead, Live, Policy};

/// Chooses the policy for a request; `None` means it has none, and the
/// layer does what [`NoPolicy`] says (by default, refuses it).
///
/// A [`Policy`] is its own resolver: every request gets it. [`RoutePolicies`]
/// picks one by route, [`policy_fn`] by anything in the request head — a tier
/// an auth layer put in the extensions, say.
///
/// ```
/// use tower_ratelimit::key::RequestHead;
/// use tower_ratelimit::layer::{policy_fn, PolicyResolver};
/// use tower_ratelimit::Policy;
///
/// #[derive(Clone, Copy)]
/// enum Tier { Free, Pro }
///
/// let free: Policy = "100/hour".parse().unwrap();
/// let pro: Policy = "1000/hour".parse().unwrap();
/// let by_tier = policy_fn(move |req| match req.extensions.get::<Tier>()? {
///     Tier::Free => Some(free.clone()),
///     Tier::Pro => Some(pro.clone()),
/// });
///
/// let mut req = http::Request::get("/").body(()).unwrap();
/// req.extensions_mut().insert(Tier::Pro);
/// let policy = by_tier.resolve(&RequestHead::from(&req)).unwrap();
/// assert_eq!(policy.limits()[0].quota().limit(), 1000);
/// ```
pub trait PolicyResolver: Clone + Send + Sync + 'static {
    /// The policy for `req`, or `None` when it has none.
    fn resolve(&self, req: &RequestHead<'_>) -> Option<Policy>;
}

impl PolicyResolver for Policy {
    fn resolve(&self, _: &RequestHead<'_>) -> Option<Policy> {
        Some(self.clone())
    }
}

/// What the layer does with a request its [`PolicyResolver`] found no
/// policy for ([`RateLimitLayer::on_no_policy`](crate::RateLimitLayer::on_no_policy)).
///
/// No policy is most often a mistake: a [`policy_fn`] reading a tier that
/// an authentication layer sets, with that layer placed *inside* the
/// limiter, finds no tier on any request. So by default such a request is
/// refused with a 500 whose body says why, and the first one is logged
/// (feature `tracing`); leaving requests unlimited is a choice the builder
/// states.
///
/// ```
/// use tower_ratelimit::layer::{NoPolicy, RoutePolicies};
/// use tower_ratelimit::RateLimitLayer;
///
/// // Only /api/search is limited; every other route is served unlimited.
/// let layer = RateLimitLayer::new(RoutePolicies::new().route("/api/search", "10/min".parse()?))
///     .on_no_policy(NoPolicy::Unlimited);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoPolicy {
    /// Refuse the request with 500 and a JSON body naming the problem (the
    /// default).
    #[default]
    Refuse,
    /// Pass the request on, unlimited and without quota headers.
    Unlimited,
}

/// A closure as a policy resolver: the policy for a request, or `None`
/// (refused with 500 unless [`NoPolicy::Unlimited`]).
///
/// Most often a tier: what your authentication established about the
/// caller, read from the request's extensions — never a header the client
/// sets itself. Put the authentication outside the limiter (added after
/// it), so that it runs first. The guide's policies chapter has the whole
/// app (an API key looked up, its plan, keyed by the key).
///
/// ```
/// use tower_ratelimit::layer::policy_fn;
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// /// Put in the request by your authentication.
/// #[derive(Clone, Copy, PartialEq)]
/// enum Plan { Free, Pro }
///
/// let (free, pro): (Policy, Policy) = ("free = 100/h".parse()?, "pro = 1000/h".parse()?);
/// let tiers = policy_fn(move |req| match req.extensions.get::<Plan>()? {
///     Plan::Free => Some(free.clone()),
///     Plan::Pro => Some(pro.clone()),
/// });
/// let layer = RateLimitLayer::new(tiers);
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn policy_fn<F>(f: F) -> PolicyFn<F>
where
    F: Fn(&RequestHead<'_>) -> Option<Policy> + Clone + Send + Sync + 'static,
{
    PolicyFn(f)
}

/// A closure as a policy resolver; see [`policy_fn`].
#[derive(Clone)]
pub struct PolicyFn<F>(F);

impl<F> fmt::Debug for PolicyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PolicyFn")
    }
}

impl<F> PolicyResolver for PolicyFn<F>
where
    F: Fn(&RequestHead<'_>) -> Option<Policy> + Clone + Send + Sync + 'static,
{
    fn resolve(&self, req: &RequestHead<'_>) -> Option<Policy> {
        (self.0)(req)
    }
}

/// One layer, a policy per route: routes are matched by axum's route
/// template (`/users/{id}`) when the `axum` feature is on and the request
/// matched one, else by the exact path. Optionally per method.
///
/// Each route keeps its own budget: the anonymous limits of a route's policy
/// (`"10/min".parse()`) are [scoped](Policy::scoped) by the route (and the
/// method, for [`route_method`](Self::route_method)), so two routes given
/// equal policies never share state. Name a limit (`"api = 100/min"`) to
/// share it between routes. The fallback's policy is one budget for every
/// request no route matches.
///
/// ```
/// use tower_ratelimit::Policy;
/// use tower_ratelimit::key::RequestHead;
/// use tower_ratelimit::layer::{PolicyResolver, RoutePolicies};
///
/// let table = RoutePolicies::new()
///     .route("/api/search", "10/min".parse::<Policy>().unwrap())
///     .route("/api/export", "10/min".parse::<Policy>().unwrap())
///     .route_method(http::Method::POST, "/api/upload", "5/min".parse().unwrap())
///     .fallback("100/min".parse().unwrap());
///
/// let policy_of = |path: &str| {
///     let req = http::Request::get(path).body(()).unwrap();
///     table.resolve(&RequestHead::from(&req)).unwrap()
/// };
/// // Equal policies, separate budgets.
/// let (search, export) = (policy_of("/api/search"), policy_of("/api/export"));
/// assert_ne!(search.limits()[0].identity(), export.limits()[0].identity());
/// ```
#[derive(Clone, Debug, Default)]
pub struct RoutePolicies {
    routes: RouteTable<Policy>,
    fallback: Option<Policy>,
}

/// Values by route template and method: what [`RoutePolicies`] and the
/// limits file look requests up in.
#[derive(Clone, Debug)]
pub(crate) struct RouteTable<T> {
    routes: Arc<HashMap<String, RouteEntry<T>>>,
}

#[derive(Clone, Debug)]
struct RouteEntry<T> {
    any_method: Option<T>,
    by_method: Vec<(Method, T)>,
}

impl<T> Default for RouteTable<T> {
    fn default() -> Self {
        Self {
            routes: Arc::default(),
        }
    }
}

impl<T: Clone> RouteTable<T> {
    /// `value` for `method` requests to `route` (any method when `None`),
    /// replacing an earlier one.
    pub(crate) fn insert(&mut self, method: Option<Method>, route: String, value: T) {
        let entry = Arc::make_mut(&mut self.routes)
            .entry(route)
            .or_insert_with(|| RouteEntry {
                any_method: None,
                by_method: Vec::new(),
            });
        match method {
            None => entry.any_method = Some(value),
            Some(method) => {
                entry.by_method.retain(|(m, _)| *m != method);
                entry.by_method.push((method, value));
            }
        }
    }

    /// The value for `req`'s route: its method's, else any method's.
    pub(crate) fn find(&self, req: &RequestHead<'_>) -> Option<&T> {
        self.get(req.method, route_of(req))
    }

    /// The value for `method` requests to the route template `route`: its
    /// method's, else any method's.
    pub(crate) fn get(&self, method: &Method, route: &str) -> Option<&T> {
        let entry = self.routes.get(route)?;
        // HEAD is answered by the GET handler: it spends GET's budget.
        let method = match *method {
            Method::HEAD => &Method::GET,
            ref method => method,
        };
        entry
            .by_method
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, value)| value)
            .or(entry.any_method.as_ref())
    }
}

/// The route `req` matched: axum's template when the `axum` feature is on
/// and the request matched one, else the exact path.
pub(crate) fn route_of<'a>(req: &'a RequestHead<'_>) -> &'a str {
    #[cfg(feature = "axum")]
    if let Some(matched) = req.extensions.get::<axum::extract::MatchedPath>() {
        return matched.as_str();
    }
    req.uri.path()
}

impl RoutePolicies {
    /// No routes. A request no route matches gets the fallback's policy;
    /// with none it has no policy, and is refused with 500 unless the layer
    /// says [`NoPolicy::Unlimited`]. On axum, a layer added with
    /// `Router::layer` also runs for paths no route matches (axum's 404):
    /// add it with `Router::route_layer` to leave those to axum.
    pub fn new() -> Self {
        Self::default()
    }

    /// Limit requests to `route` (any method) with `policy`.
    pub fn route(self, route: impl Into<String>, policy: Policy) -> Self {
        self.insert(None, route.into(), policy)
    }

    /// Limit `method` requests to `route` with `policy`; these win over
    /// [`route`](Self::route) entries for the same route. `HEAD` requests
    /// spend a `GET` entry's budget.
    pub fn route_method(self, method: Method, route: impl Into<String>, policy: Policy) -> Self {
        self.insert(Some(method), route.into(), policy)
    }

    /// The policy for requests no route matches.
    pub fn fallback(mut self, policy: Policy) -> Self {
        self.fallback = Some(policy);
        self
    }

    fn insert(mut self, method: Option<Method>, route: String, policy: Policy) -> Self {
        let policy = match &method {
            None => policy.scoped(&route),
            Some(method) => policy.scoped(&format!("{method} {route}")),
        };
        self.routes.insert(method, route, policy);
        self
    }
}

impl PolicyResolver for RoutePolicies {
    fn resolve(&self, req: &RequestHead<'_>) -> Option<Policy> {
        self.routes.find(req).or(self.fallback.as_ref()).cloned()
    }
}

/// The current resolver: change a layer's policies at runtime (see
/// [`Live`] for what a change does to clients' state).
impl<P: PolicyResolver> PolicyResolver for Live<P> {
    fn resolve(&self, req: &RequestHead<'_>) -> Option<Policy> {
        self.load().resolve(req)
    }
}

/// Policies of particular keys — a tenant's own contract, a partner's
/// raised quota — which replace whatever policy the layer chose for the
/// request, wherever it limits ([`RateLimitLayer::key_policies`]). Usually
/// held in a [`Live`] handle and replaced as contracts change.
///
/// A key's policy is one budget on every route of the layer (unless it is
/// [scoped](Policy::scoped)).
///
/// ```
/// use tower_ratelimit::key::{Key, Header};
/// use tower_ratelimit::{Live, Policy, RateLimitLayer};
/// use tower_ratelimit::layer::KeyPolicies;
///
/// let tenants = Live::new(KeyPolicies::new());
/// let layer = RateLimitLayer::new("100/min".parse::<Policy>().unwrap())
///     .key(Header::new("x-tenant"))
///     .key_policies(tenants.clone());
/// // Acme signs for more, at runtime:
/// tenants.update(|t| t.clone().set(Key::new("header:x-tenant", "acme"), "5000/min".parse().unwrap()));
/// assert_eq!(tenants.current().len(), 1);
/// ```
///
/// [`RateLimitLayer::key_policies`]: crate::RateLimitLayer::key_policies
#[derive(Clone, Debug, Default)]
pub struct KeyPolicies {
    policies: HashMap<Key, Policy>,
}

impl KeyPolicies {
    /// No key has a policy of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// Give `key` its own `policy`.
    pub fn set(mut self, key: Key, policy: Policy) -> Self {
        self.policies.insert(key, policy);
        self
    }

    /// `key` goes back to the layer's policy.
    pub fn remove(mut self, key: &Key) -> Self {
        self.policies.remove(key);
        self
    }

    /// `key`'s own policy, if it has one.
    pub fn get(&self, key: &Key) -> Option<&Policy> {
        self.policies.get(key)
    }

    /// How many keys have a policy of their own.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether no key has a policy of its own.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}
