//! Policies: one or more named limits that a request must all pass.
//!
//! A [`Policy`] is all-or-nothing: a request is allowed only if every limit
//! allows it, and a denied request consumes from none of them (unless the
//! policy [counts denied requests](PolicyBuilder::count_denied)).
//!
//! ```
//! use tower_ratelimit::{Algorithm, Policy, Quota};
//!
//! let policy = Policy::builder()
//!     .limit("burst", Algorithm::TokenBucket, "10/s burst 20".parse().unwrap())
//!     .limit("sustained", Algorithm::SlidingWindow, Quota::per_minute(100).unwrap())
//!     .limit("daily", Algorithm::FixedWindow, Quota::per_hour(1000).unwrap())
//!     .build()
//!     .unwrap();
//! assert_eq!(policy.limits().len(), 3);
//!
//! // Three limits from text, with the default algorithm (sliding window);
//! // each is named after its quota unless named with `name = quota`.
//! let policy: Policy = "10/s; sustained = 100/min; 1000/h".parse().unwrap();
//! assert_eq!(policy.limits()[0].name(), "10/s");
//! assert_eq!(policy.limits()[1].name(), "sustained");
//!
//! // A burst needs a bucket algorithm.
//! let bursty = Policy::parse_with("10/s burst 20; 100/min", Algorithm::Gcra).unwrap();
//! assert_eq!(bursty.limits()[0].capacity(), 20);
//! let err = "10/s burst 20".parse::<Policy>().unwrap_err();
//! assert!(err.to_string().contains("sliding-window has no burst"));
//! ```

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use crate::algorithm::{Algorithm, Rule};
use crate::quota::{Quota, QuotaError};
use crate::render::Rendered;

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
    /// `name:algorithm:quota`: what identifies this limit's state in a
    /// backend, the same in every process.
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
        if quota.burst().is_some() && !algorithm.takes_burst() {
            return Err(PolicyError::BurstNotSupported {
                limit: name.to_string(),
                algorithm,
            });
        }
        let identity: Box<str> = format!("{name}:{algorithm}:{quota}").into();
        let mut hasher = DefaultHasher::new();
        identity.hash(&mut hasher);
        Ok(Self {
            rule: Rule::new(algorithm, quota),
            id: hasher.finish(),
            identity,
            name,
            algorithm,
            quota,
        })
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
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

    /// `name:algorithm:quota`, stable across processes and releases: what
    /// keeps limits' state apart in a shared backend (the Redis backend puts
    /// it in its keys; a [`Backend`](crate::Backend) of your own can too).
    ///
    /// ```
    /// use tower_ratelimit::{Algorithm, Limit};
    /// let limit = Limit::new("burst", Algorithm::Gcra, "10/s burst 20".parse().unwrap()).unwrap();
    /// assert_eq!(limit.identity(), "burst:gcra:10/s burst 20");
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
#[derive(Clone)]
pub struct Policy {
    inner: Arc<PolicyInner>,
}

struct PolicyInner {
    limits: Box<[Limit]>,
    count_denied: bool,
    /// Header and body text that never changes, rendered once.
    rendered: Rendered,
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        self.limits() == other.limits() && self.counts_denied() == other.counts_denied()
    }
}

impl Eq for Policy {}

impl Policy {
    /// Start building a policy.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// A policy of one limit, named after its quota.
    pub fn single(algorithm: Algorithm, quota: Quota) -> Self {
        Self::builder()
            .limit(quota.to_string(), algorithm, quota)
            .build()
            .expect("a quota's own text is a valid limit name and one limit fits")
    }

    /// Parse `"10/s; 100/min"` with one algorithm for every limit.
    /// Each item may be named: `"burst = 10/s burst 20; sustained = 100/min"`.
    pub fn parse_with(text: &str, algorithm: Algorithm) -> Result<Self, PolicyError> {
        let mut builder = Self::builder();
        for item in text.split(';') {
            let (name, quota_text) = match item.split_once('=') {
                Some((name, quota)) => (name.trim().to_owned(), quota),
                None => (String::new(), item),
            };
            let quota = quota_text.parse::<Quota>().map_err(PolicyError::Quota)?;
            let name = if name.is_empty() {
                quota.to_string()
            } else {
                name
            };
            builder = builder.limit(name, algorithm, quota);
        }
        builder.build()
    }

    /// The limits, in the order they were added.
    pub fn limits(&self) -> &[Limit] {
        &self.inner.limits
    }

    /// Whether denied requests count against the limits.
    pub fn counts_denied(&self) -> bool {
        self.inner.count_denied
    }

    pub(crate) fn rendered(&self) -> &Rendered {
        &self.inner.rendered
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("limits", &self.limits())
            .field("count_denied", &self.counts_denied())
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
    count_denied: bool,
}

impl PolicyBuilder {
    /// Add a limit named `name` enforcing `quota` with `algorithm`.
    pub fn limit(mut self, name: impl Into<Arc<str>>, algorithm: Algorithm, quota: Quota) -> Self {
        self.limits.push(Limit::new(name, algorithm, quota));
        self
    }

    /// Whether denied requests count against every limit (default: no).
    ///
    /// When they do, a client that keeps sending while denied stays denied: a
    /// denied request is counted as if admitted, but never past a limit's
    /// capacity, so a client that stops is free again after at most one
    /// window (or one full refill).
    pub fn count_denied(mut self, count: bool) -> Self {
        self.count_denied = count;
        self
    }

    /// The policy, or the first problem: no limits, more than [`MAX_LIMITS`],
    /// a repeated name, or an invalid limit.
    pub fn build(self) -> Result<Policy, PolicyError> {
        let limits = self.limits.into_iter().collect::<Result<Vec<_>, _>>()?;
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
        }
        Ok(Policy {
            inner: Arc::new(PolicyInner {
                rendered: Rendered::new(&limits),
                limits: limits.into(),
                count_denied: self.count_denied,
            }),
        })
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
