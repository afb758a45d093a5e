//! Policies: one or more named limits that a request must all pass.

use std::any::Any;
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use crate::algorithm::{Algorithm, Rule};
use crate::penalty::PenaltyBox;
use crate::quota::{Quota, QuotaError};

/// The most limits one policy may hold. Decisions keep one outcome per
/// limit inline, without allocating.
pub const MAX_LIMITS: usize = 8;

/// One named limit: an algorithm enforcing a quota.
#[derive(Clone, PartialEq, Eq)]
pub struct Limit {
    name: Arc<str>,
    algorithm: Algorithm,
    quota: Quota,
    rule: Rule,
    /// Given a name by the user, rather than named after its quota.
    named: bool,
    /// Counts requests in flight (see [`Limit::concurrent`]), not requests
    /// made.
    concurrent: bool,
    /// `name:algorithm:quota`, after the scope for an anonymous limit: what
    /// identifies this limit's state in a backend, the same in every process.
    identity: Box<str>,
    /// A hash of `identity`, for backends that key by number.
    id: u64,
}

impl Limit {
    /// A limit named `name` enforcing `quota` with `algorithm`.
    ///
    /// Names appear in the `RateLimit` headers, so they must be 1 to 64
    /// characters of printable ASCII without `"` or `\`. A burst is only
    /// accepted by the bucket algorithms.
    pub fn new(
        name: impl Into<Arc<str>>,
        algorithm: Algorithm,
        quota: Quota,
    ) -> Result<Self, PolicyError> {
        let name = name.into();
        let printable = |c: char| (c.is_ascii_graphic() && c != '"' && c != '\\') || c == ' ';
        if name.is_empty() || name.len() > 64 || !name.chars().all(printable) {
            return Err(PolicyError::InvalidName(name.to_string()));
        }
        Self::with_name(name, true, algorithm, quota)
    }

    /// A limit of `permits` requests *in flight* at once (the IETF quota
    /// unit `concurrent-requests`): a request holds a permit from its
    /// admission until its response body has been sent or dropped.
    ///
    /// Each permit is a lease ([`DEFAULT_LEASE`](Self::DEFAULT_LEASE), or
    /// [`lease`](Self::lease)), renewed while the request lasts, so a permit
    /// whose holder died (a crashed server, on Redis) comes back by itself
    /// after at most one lease. It can sit in a policy beside rate limits,
    /// all or nothing. A permit is a sliding-log entry that leaves early when
    /// released, so the memory and Redis backends keep it exactly as they
    /// keep a log.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_ratelimit::{Algorithm, Limit, Policy};
    ///
    /// let slow = Policy::builder()
    ///     .with(Limit::concurrent("in-flight", 2)?.lease(Duration::from_secs(15))?)
    ///     .limit("rate", Algorithm::Gcra, "10/s".parse()?)
    ///     .build()?;
    /// assert!(slow.limits()[0].is_concurrent());
    /// assert_eq!(slow.limits()[0].identity(), "in-flight:concurrent:2/15s");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn concurrent(name: impl Into<Arc<str>>, permits: u32) -> Result<Self, PolicyError> {
        let quota = Quota::new(permits, Self::DEFAULT_LEASE)?;
        let limit = Self::new(name, Algorithm::SlidingLog, quota)?;
        Ok(limit.with_kind(true))
    }

    /// How long a permit of a [`concurrent`](Self::concurrent) limit lasts
    /// unless renewed, by default.
    pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

    /// This limit of requests in flight with permits leased for `lease`
    /// (renewed every half lease while the request lasts): how long a permit
    /// whose holder died stays taken. An error for a limit of requests made,
    /// or a lease the quota syntax cannot hold.
    pub fn lease(self, lease: std::time::Duration) -> Result<Self, PolicyError> {
        if !self.concurrent {
            return Err(PolicyError::LeaseNotInFlight(self.name.to_string()));
        }
        let quota = Quota::new(self.quota.limit(), lease)?;
        let limit = Self::with_name(self.name, self.named, Algorithm::SlidingLog, quota)?;
        Ok(limit.with_kind(true))
    }

    /// The same limit, counting requests in flight (or not).
    fn with_kind(self, concurrent: bool) -> Self {
        let identity = identity_of(&self.name, self.kind_name(concurrent), self.quota);
        Self {
            id: hash(&identity),
            identity: identity.into(),
            concurrent,
            ..self
        }
    }

    /// What the identity calls this kind of limit: its algorithm, or
    /// `concurrent`.
    fn kind_name(&self, concurrent: bool) -> String {
        if concurrent {
            "concurrent".to_owned()
        } else {
            self.algorithm.to_string()
        }
    }

    /// Whether the limit counts requests in flight ([`Limit::concurrent`]).
    pub fn is_concurrent(&self) -> bool {
        self.concurrent
    }

    /// A limit named after its quota, whose state is kept apart by the scope
    /// it is used in (see the [`Policy`] docs).
    pub(crate) fn anonymous(algorithm: Algorithm, quota: Quota) -> Result<Self, PolicyError> {
        Self::with_name(quota.to_string().into(), false, algorithm, quota)
    }

    fn with_name(
        name: Arc<str>,
        named: bool,
        algorithm: Algorithm,
        quota: Quota,
    ) -> Result<Self, PolicyError> {
        if quota.burst().is_some() && !algorithm.takes_burst() {
            return Err(PolicyError::BurstNotSupported {
                limit: name.to_string(),
                algorithm,
            });
        }
        let identity = identity_of(&name, algorithm.to_string(), quota);
        Ok(Self {
            rule: Rule::new(algorithm, quota),
            id: hash(&identity),
            identity: identity.into(),
            named,
            concurrent: false,
            name,
            algorithm,
            quota,
        })
    }

    /// This limit with `1 / servers` of its quota (rounded up, at least 1;
    /// the burst too), under the same identity: each server's share while
    /// they cannot share state.
    fn share(&self, servers: u32) -> Self {
        let part = |n: u32| n.div_ceil(servers.max(1)).max(1);
        let quota = self.quota;
        let scaled = Quota::new(part(quota.limit()), quota.window())
            .and_then(|q| match quota.burst() {
                Some(burst) => q.with_burst(part(burst)),
                None => Ok(q),
            })
            // A smaller limit over the same window is always valid; keep
            // the whole quota should that ever change.
            .unwrap_or(quota);
        Self {
            rule: Rule::new(self.algorithm, scaled),
            quota: scaled,
            ..self.clone()
        }
    }

    /// This limit used in `scope`: an anonymous limit's identity becomes
    /// `"scope"name:algorithm:quota` (the scope quoted and escaped; no name
    /// contains `"`, so no named limit's identity can be the same); a named
    /// limit stays as it is.
    fn in_scope(&self, scope: &str) -> Self {
        if self.named {
            return self.clone();
        }
        let mut identity = String::with_capacity(scope.len() + self.identity.len() + 2);
        identity.push('"');
        for c in scope.chars() {
            if matches!(c, '"' | '\\') {
                identity.push('\\');
            }
            identity.push(c);
        }
        identity.push('"');
        identity.push_str(&identity_of(
            &self.name,
            self.kind_name(self.concurrent),
            self.quota,
        ));
        Self {
            id: hash(&identity),
            identity: identity.into(),
            ..self.clone()
        }
    }

    /// The limit's name: the one it was given, or its quota's text.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the limit was given a name (and so shares its state with
    /// every limit of that name, algorithm and quota on the same backend),
    /// rather than named after its quota.
    pub fn is_named(&self) -> bool {
        self.named
    }

    /// The name, shared (for labels that outlive a request).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The algorithm enforcing it.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Its quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The requests (or cost) the limit holds at once: the burst for the
    /// bucket algorithms, otherwise the limit per window.
    pub fn capacity(&self) -> u32 {
        if self.algorithm.takes_burst() {
            self.quota.capacity()
        } else {
            self.quota.limit()
        }
    }

    pub(crate) fn rule(&self) -> &Rule {
        &self.rule
    }

    /// `name:algorithm:quota` (for an anonymous limit in a scope,
    /// `"scope"name:algorithm:quota`), stable across processes and releases:
    /// what keeps limits' state apart in a shared backend (the Redis backend
    /// puts it in its keys; a [`Backend`](crate::backend::Backend) of your own
    /// can too).
    ///
    /// ```
    /// use tower_ratelimit::{Algorithm, Limit, Policy};
    /// let limit = Limit::new("burst", Algorithm::Gcra, "10/s burst 20".parse().unwrap()).unwrap();
    /// assert_eq!(limit.identity(), "burst:gcra:10/s burst 20");
    ///
    /// let scoped = "2/min".parse::<Policy>().unwrap().scoped("GET /a");
    /// assert_eq!(scoped.limits()[0].identity(), "\"GET /a\"2/min:sliding-window:2/min");
    /// ```
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A hash of [`identity`](Self::identity), within this process.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Limit({:?}: {} {})",
            self.name, self.algorithm, self.quota
        )
    }
}

/// Limits a request must all pass. Cheap to clone: one reference count
/// (policies are cloned for every request).
///
/// A [`Policy`] is all-or-nothing: a request is allowed only if every limit
/// allows it, and a denied request consumes from none of them (unless the
/// policy [counts denied requests](PolicyBuilder::count_denied)).
///
/// ```
/// use tower_ratelimit::{Algorithm, Policy, Quota};
///
/// let policy = Policy::builder()
///     .limit("burst", Algorithm::TokenBucket, "10/s burst 20".parse().unwrap())
///     .limit("sustained", Algorithm::SlidingWindow, Quota::per_minute(100).unwrap())
///     .limit("daily", Algorithm::FixedWindow, Quota::per_hour(1000).unwrap())
///     .build()
///     .unwrap();
/// assert_eq!(policy.limits().len(), 3);
///
/// // Three limits from text, with the default algorithm (sliding window);
/// // each is named after its quota unless named with `name = quota`.
/// let policy: Policy = "10/s; sustained = 100/min; 1000/h".parse().unwrap();
/// assert_eq!(policy.limits()[0].name(), "10/s");
/// assert_eq!(policy.limits()[1].name(), "sustained");
/// assert!(!policy.limits()[0].is_named() && policy.limits()[1].is_named());
///
/// // A burst needs a bucket algorithm.
/// let bursty = Policy::parse_with("10/s burst 20; 100/min", Algorithm::Gcra).unwrap();
/// assert_eq!(bursty.limits()[0].capacity(), 20);
/// let err = "10/s burst 20".parse::<Policy>().unwrap_err();
/// assert!(err.to_string().contains("sliding-window has no burst"));
/// ```
///
/// ## Which limits share state
///
/// A backend keeps one state per key and per limit *identity*
/// ([`Limit::identity`]): `name:algorithm:quota`.
///
/// * A **named** limit (`Limit::new`, `PolicyBuilder::limit`, `"search =
///   10/min"`) is one budget wherever that name appears with that algorithm
///   and quota on the same backend: on every route, in every layer, on every
///   server. A name is how you ask for a shared budget.
/// * An **anonymous** limit (`"10/min".parse()`, [`Policy::single`]) is named
///   after its quota for the headers, but its identity also carries the
///   *scope* it is used in ([`Policy::scoped`]). [`RoutePolicies`] scopes each
///   route's policy by its route, so two routes given `"2/min"` each get 2
///   per minute each. A policy given straight to a layer has no scope: layers
///   that share one backend share the state of equal anonymous limits, as
///   they share everything else (scope them apart, or name their limits).
///
/// [`RoutePolicies`]: crate::layer::RoutePolicies
#[derive(Clone)]
pub struct Policy {
    inner: Arc<PolicyInner>,
}

struct PolicyInner {
    limits: Box<[Limit]>,
    settings: Settings,
    /// The penalty box's state identity (`penalty:<box>:` then each limit's
    /// identity): a ban belongs to exactly this set of limits.
    penalty_identity: Option<(Box<str>, u64)>,
    /// What a front end derives from this policy once and keeps with it (the
    /// HTTP layer: its header and body text). Opaque here, so the core knows
    /// nothing of HTTP.
    derived: OnceLock<Box<dyn Any + Send + Sync>>,
}

/// What a policy says besides its limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Settings {
    count_denied: bool,
    shadow: bool,
    penalty: Option<PenaltyBox>,
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        self.limits() == other.limits() && self.inner.settings == other.inner.settings
    }
}

impl Eq for Policy {}

impl Policy {
    /// Start building a policy.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// A policy of one anonymous limit (named after its quota; see the
    /// [`Policy`] docs for what that means for sharing).
    ///
    /// A burst needs a bucket algorithm: elsewhere it is an error.
    pub fn single(algorithm: Algorithm, quota: Quota) -> Result<Self, PolicyError> {
        Limit::anonymous(algorithm, quota)
            .and_then(|limit| Self::build_from(vec![limit], Settings::default()))
    }

    /// Parse `"10/s; 100/min"` with one algorithm for every limit.
    /// Each item may be named: `"burst = 10/s burst 20; sustained = 100/min"`;
    /// unnamed ones are anonymous.
    pub fn parse_with(text: &str, algorithm: Algorithm) -> Result<Self, PolicyError> {
        let mut builder = Self::builder();
        for item in text.split(';') {
            let (name, quota_text) = match item.split_once('=') {
                Some((name, quota)) => (Some(name.trim()), quota),
                None => (None, item),
            };
            let quota = quota_text.parse::<Quota>().map_err(PolicyError::Quota)?;
            builder.limits.push(match name {
                Some(name) => Limit::new(name, algorithm, quota),
                None => Limit::anonymous(algorithm, quota),
            });
        }
        builder.build()
    }

    /// This policy used in `scope`: its anonymous limits keep state apart
    /// from the same limits in any other scope, while named limits stay
    /// shared. [`RoutePolicies`](crate::layer::RoutePolicies) scopes each route's
    /// policy by its route; scope a policy yourself to keep two layers on
    /// one backend apart.
    ///
    /// ```
    /// use tower_ratelimit::Policy;
    /// let policy: Policy = "2/min; daily = 100/day".parse().unwrap();
    /// let (a, b) = (policy.scoped("/a"), policy.scoped("/b"));
    /// assert_ne!(a.limits()[0].identity(), b.limits()[0].identity());
    /// assert_eq!(a.limits()[1].identity(), b.limits()[1].identity());
    /// ```
    pub fn scoped(&self, scope: &str) -> Policy {
        let limits = self.limits().iter().map(|l| l.in_scope(scope)).collect();
        self.with_limits(limits)
    }

    /// The limits, in the order they were added.
    pub fn limits(&self) -> &[Limit] {
        &self.inner.limits
    }

    /// Whether denied requests count against the limits.
    pub fn counts_denied(&self) -> bool {
        self.inner.settings.count_denied
    }

    /// Whether the policy is in shadow mode: decided and reported, never
    /// enforced (see [`PolicyBuilder::shadow`]).
    pub fn is_shadow(&self) -> bool {
        self.inner.settings.shadow
    }

    /// The penalty box, if the policy bans clients denied too often.
    pub fn penalty(&self) -> Option<&PenaltyBox> {
        self.inner.settings.penalty.as_ref()
    }

    /// A builder holding this policy's limits (with their identities: a
    /// scoped limit stays scoped) and settings: change what it says (shadow
    /// mode, the penalty box, another limit) and build. Limits that stay the
    /// same keep their state.
    ///
    /// ```
    /// use tower_ratelimit::Policy;
    ///
    /// let trial: Policy = "30/min".parse::<Policy>()?.to_builder().shadow(true).build()?;
    /// let enforced = trial.to_builder().shadow(false).build()?;
    /// assert_eq!(trial.limits(), enforced.limits()); // the same state
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_builder(&self) -> PolicyBuilder {
        PolicyBuilder {
            limits: self.limits().iter().cloned().map(Ok).collect(),
            settings: self.inner.settings,
        }
    }

    /// `penalty:<box>:<each limit's identity>`, stable across processes:
    /// what keeps a penalty box's state apart in a shared backend.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn penalty_identity(&self) -> Option<&str> {
        self.inner.penalty_identity.as_ref().map(|(s, _)| &**s)
    }

    /// A hash of [`penalty_identity`](Self::penalty_identity), within this
    /// process.
    pub(crate) fn penalty_id(&self) -> Option<u64> {
        self.inner.penalty_identity.as_ref().map(|(_, id)| *id)
    }

    /// Each limit's share among `servers` (see [`Limit::share`]).
    pub(crate) fn share(&self, servers: u32) -> Policy {
        let limits = self.limits().iter().map(|l| l.share(servers)).collect();
        self.with_limits(limits)
    }

    fn with_limits(&self, limits: Vec<Limit>) -> Policy {
        Self::build_from(limits, self.inner.settings).unwrap_or_else(|_| self.clone())
    }

    /// A number that tells this policy apart from every other one alive.
    pub(crate) fn address(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// What `derive` makes of this policy, made once and kept with it;
    /// `None` only if another type was kept first.
    pub(crate) fn derived<T: Any + Send + Sync>(
        &self,
        derive: impl FnOnce(&Policy) -> T,
    ) -> Option<&T> {
        self.inner
            .derived
            .get_or_init(|| Box::new(derive(self)))
            .downcast_ref()
    }

    fn build_from(limits: Vec<Limit>, settings: Settings) -> Result<Policy, PolicyError> {
        if limits.is_empty() {
            return Err(PolicyError::Empty);
        }
        if limits.len() > MAX_LIMITS {
            return Err(PolicyError::TooManyLimits(limits.len()));
        }
        for (i, limit) in limits.iter().enumerate() {
            if limits[..i].iter().any(|other| other.name == limit.name) {
                return Err(PolicyError::DuplicateName(limit.name.to_string()));
            }
            if limit.concurrent && settings.count_denied {
                return Err(PolicyError::CountDeniedInFlight(limit.name.to_string()));
            }
        }
        let penalty_identity = settings.penalty.map(|penalty| {
            let mut identity = format!("penalty:{}", penalty.describe());
            for limit in &limits {
                identity.push(':');
                identity.push_str(limit.identity());
            }
            let id = hash(&identity);
            (identity.into_boxed_str(), id)
        });
        Ok(Policy {
            inner: Arc::new(PolicyInner {
                limits: limits.into(),
                settings,
                penalty_identity,
                derived: OnceLock::new(),
            }),
        })
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("limits", &self.limits())
            .field("count_denied", &self.counts_denied())
            .field("shadow", &self.is_shadow())
            .field("penalty", &self.penalty())
            .finish()
    }
}

impl FromStr for Policy {
    type Err = PolicyError;

    /// Parses a list of quotas enforced with the default algorithm
    /// ([`Algorithm::SlidingWindow`]); see [`Policy::parse_with`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse_with(text, Algorithm::default())
    }
}

/// Builds a [`Policy`]; every problem is reported by [`PolicyBuilder::build`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct PolicyBuilder {
    limits: Vec<Result<Limit, PolicyError>>,
    settings: Settings,
}

impl PolicyBuilder {
    /// Add a limit named `name` enforcing `quota` with `algorithm`.
    pub fn limit(mut self, name: impl Into<Arc<str>>, algorithm: Algorithm, quota: Quota) -> Self {
        self.limits.push(Limit::new(name, algorithm, quota));
        self
    }

    /// Add `limit` as it is (a [`Limit::concurrent`], say).
    pub fn with(mut self, limit: Limit) -> Self {
        self.limits.push(Ok(limit));
        self
    }

    /// Whether denied requests count against every limit (default: no).
    ///
    /// When they do, a client that keeps sending while denied stays denied: a
    /// denied request is counted as if admitted, but never past a limit's
    /// capacity, so a client that stops is free again after at most one
    /// window (or one full refill).
    pub fn count_denied(mut self, count: bool) -> Self {
        self.settings.count_denied = count;
        self
    }

    /// Shadow mode (a dry run): requests are decided, counted and reported
    /// (metrics, logs, optionally headers) as usual, but a request the
    /// policy denies is let through, never delayed. Its limits consume only
    /// what an enforced policy would have admitted, so the reports show what
    /// enforcing would do. Roll a new limit out this way, then turn shadow
    /// off (with [`Policy::to_builder`]) without losing its state.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.settings.shadow = shadow;
        self
    }

    /// Ban clients this policy denies too often (see [`PenaltyBox`](crate::policy::PenaltyBox)).
    pub fn penalty(mut self, penalty: PenaltyBox) -> Self {
        self.settings.penalty = Some(penalty);
        self
    }

    /// The policy, or the first problem: no limits, more than [`MAX_LIMITS`],
    /// a repeated name, or an invalid limit.
    pub fn build(self) -> Result<Policy, PolicyError> {
        let limits = self.limits.into_iter().collect::<Result<Vec<_>, _>>()?;
        Policy::build_from(limits, self.settings)
    }
}

/// Why a policy or limit was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// The policy has no limits.
    Empty,
    /// More than [`MAX_LIMITS`] limits.
    TooManyLimits(usize),
    /// Two limits share a name.
    DuplicateName(String),
    /// A name that cannot appear in a header.
    InvalidName(String),
    /// A burst on an algorithm without one (fixed window, sliding log, sliding window).
    BurstNotSupported {
        /// The limit's name.
        limit: String,
        /// Its algorithm.
        algorithm: Algorithm,
    },
    /// A quota in the text was invalid.
    Quota(QuotaError),
    /// Denied requests cannot count against a limit of requests in flight:
    /// a refused request is never in flight.
    CountDeniedInFlight(String),
    /// A lease was given to a limit of requests made; only a limit of
    /// requests in flight ([`Limit::concurrent`]) holds leases.
    LeaseNotInFlight(String),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("invalid policy: it has no limits"),
            Self::TooManyLimits(n) => write!(
                f,
                "invalid policy: {n} limits, more than the maximum of {MAX_LIMITS}"
            ),
            Self::DuplicateName(name) => {
                write!(f, "invalid policy: two limits are named {name:?}")
            }
            Self::InvalidName(name) => write!(
                f,
                "invalid limit name {name:?}: use 1 to 64 printable ASCII characters without '\"' or '\\'"
            ),
            Self::BurstNotSupported { limit, algorithm } => write!(
                f,
                "invalid limit {limit:?}: {algorithm} has no burst; use token-bucket, leaky-bucket or gcra"
            ),
            Self::Quota(e) => e.fmt(f),
            Self::CountDeniedInFlight(limit) => write!(
                f,
                "invalid policy: it counts denied requests, but {limit:?} counts requests in flight, which a refused request never is"
            ),
            Self::LeaseNotInFlight(limit) => write!(
                f,
                "invalid limit {limit:?}: only a limit of requests in flight (Limit::concurrent) takes a lease"
            ),
        }
    }
}

impl std::error::Error for PolicyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Quota(e) => Some(e),
            _ => None,
        }
    }
}

impl From<QuotaError> for PolicyError {
    fn from(e: QuotaError) -> Self {
        Self::Quota(e)
    }
}

/// A limit's identity outside any scope: `name:algorithm:quota`.
fn identity_of(name: &str, kind: String, quota: Quota) -> String {
    format!("{name}:{kind}:{quota}")
}

/// A hash of a limit's identity, for backends that key by number.
fn hash(identity: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    identity.hash(&mut hasher);
    hasher.finish()
}
