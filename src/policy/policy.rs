//! [`Policy`]: one or more named limits that a request must all pass.

use std::any::Any;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use super::builder::PolicyBuilder;
use super::error::PolicyError;
use super::limit::{hash, Limit};
use super::{MAX_LIMITS, MAX_LOG_ENTRIES};
use crate::algorithm::Algorithm;
use crate::policy::penalty::PenaltyBox;
use crate::quota::quota::Quota;

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
/// ([`Limit::identity`]): `name:algorithm:window`.
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
    /// Whether a limit counts requests in flight: asked on every request,
    /// so kept rather than found.
    in_flight: bool,
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
pub(super) struct Settings {
    pub(super) count_denied: bool,
    pub(super) shadow: bool,
    pub(super) penalty: Option<PenaltyBox>,
    /// The longest a sliding log may be, if not the default.
    pub(super) max_log_entries: Option<u32>,
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

    /// Parse `"10/s; 100/min"` with one algorithm for every limit (but a
    /// calendar quota's, `"50000/month"`, which is a fixed window).
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
            // A calendar's periods are fixed windows, whatever the rest use.
            let algorithm = match quota.calendar() {
                Some(_) => Algorithm::FixedWindow,
                None => algorithm,
            };
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

    /// Whether a limit counts requests in flight (a permit held until the
    /// response ends).
    pub(crate) fn has_in_flight(&self) -> bool {
        self.inner.in_flight
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

    /// This policy with every limit's number (and burst) multiplied by
    /// `factor` in `(0, 1]` (rounded down, at least 1), under the same
    /// identities: its clients keep their state, read under the scaled
    /// numbers, on every backend — what an adaptive limit enforces while
    /// the service it guards struggles.
    ///
    /// ```
    /// use tower_ratelimit::Policy;
    /// let policy: Policy = "report = 60/min".parse().unwrap();
    /// let halved = policy.scaled(0.5);
    /// assert_eq!(halved.limits()[0].quota().limit(), 30);
    /// assert_eq!(halved.limits()[0].identity(), policy.limits()[0].identity());
    /// ```
    pub fn scaled(&self, factor: f64) -> Policy {
        let factor = if factor.is_finite() {
            factor.clamp(0.0, 1.0)
        } else {
            1.0
        };
        if factor >= 1.0 {
            return self.clone();
        }
        let part = |n: u32| ((f64::from(n) * factor) as u32).max(1);
        let limits = self.limits().iter().map(|l| l.with_numbers(part)).collect();
        self.with_limits(limits)
    }

    #[cfg(feature = "content-bytes")]
    /// This policy with every limit counting bytes of content.
    pub(crate) fn in_bytes(&self) -> Policy {
        let limits = self.limits().iter().map(Limit::in_bytes).collect();
        self.with_limits(limits)
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

    pub(super) fn build_from(
        limits: Vec<Limit>,
        settings: Settings,
    ) -> Result<Policy, PolicyError> {
        if limits.is_empty() {
            return Err(PolicyError::Empty);
        }
        if limits.len() > MAX_LIMITS {
            return Err(PolicyError::TooManyLimits(limits.len()));
        }
        let max_log = settings.max_log_entries.unwrap_or(MAX_LOG_ENTRIES);
        for (i, limit) in limits.iter().enumerate() {
            if limit.algorithm() == Algorithm::SlidingLog && limit.quota().limit() > max_log {
                return Err(PolicyError::LogTooLong {
                    limit: limit.name().to_string(),
                    entries: limit.quota().limit(),
                    max: max_log,
                });
            }
            if limits[..i].iter().any(|other| other.name() == limit.name()) {
                return Err(PolicyError::DuplicateName(limit.name().to_string()));
            }
            if limit.is_concurrent() && settings.count_denied {
                return Err(PolicyError::CountDeniedInFlight(limit.name().to_string()));
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
                in_flight: limits.iter().any(Limit::is_concurrent),
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
