//! [`Limit`]: one named algorithm enforcing a quota, and the identity that
//! keeps its state apart in every backend.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::error::PolicyError;
use crate::algorithm::{Algorithm, Rule};
use crate::quota::quota::Quota;

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
    /// Counts bytes of content ([`counts_bytes`](Self::counts_bytes)), not
    /// requests.
    bytes: bool,
    /// `name:algorithm:window`, after the scope for an anonymous limit: what
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
    /// assert_eq!(slow.limits()[0].identity(), "in-flight:concurrent:15s");
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

    /// What the identity calls this kind of limit: its algorithm (and
    /// `-bytes` for bytes), or `concurrent`.
    fn kind_name(&self, concurrent: bool) -> String {
        if concurrent {
            "concurrent".to_owned()
        } else if self.bytes {
            format!("{}-bytes", self.algorithm)
        } else {
            self.algorithm.to_string()
        }
    }

    #[cfg(feature = "content-bytes")]
    /// The same limit counting bytes of content (the IETF quota unit
    /// `content-bytes`): its own state, apart from a limit of requests of
    /// the same name. A limit of requests in flight stays one.
    pub(crate) fn in_bytes(&self) -> Self {
        if self.concurrent || self.bytes {
            return self.clone();
        }
        let bytes = Self {
            bytes: true,
            ..self.clone()
        };
        match self.named {
            true => bytes.with_kind(false),
            // An anonymous limit's identity may carry a scope: keep it, with
            // the kind changed.
            false => {
                let kind = self.algorithm.to_string();
                let identity =
                    self.identity
                        .replacen(&format!(":{kind}:"), &format!(":{kind}-bytes:"), 1);
                Self {
                    id: hash(&identity),
                    identity: identity.into(),
                    ..bytes
                }
            }
        }
    }

    /// Whether the limit counts bytes of content (a
    /// `ContentBytesLayer`'s, feature `content-bytes`), not
    /// requests.
    pub fn counts_bytes(&self) -> bool {
        self.bytes
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
        if quota.calendar().is_some() && algorithm != Algorithm::FixedWindow {
            return Err(PolicyError::CalendarNeedsFixedWindow {
                limit: name.to_string(),
                algorithm,
            });
        }
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
            bytes: false,
            name,
            algorithm,
            quota,
        })
    }

    /// This limit with `1 / servers` of its quota (rounded up, at least 1;
    /// the burst too), under the same identity: each server's share while
    /// they cannot share state.
    pub(super) fn share(&self, servers: u32) -> Self {
        self.with_numbers(|n| n.div_ceil(servers.max(1)).max(1))
    }

    /// This limit with its number (and burst) made `part` of what they are,
    /// under the same identity: its clients keep their state.
    pub(super) fn with_numbers(&self, part: impl Fn(u32) -> u32) -> Self {
        let quota = self.quota;
        let scaled = quota
            .with_limit(part(quota.limit()), quota.burst().map(&part))
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
    /// `"scope"name:algorithm:window` (the scope quoted and escaped; no name
    /// contains `"`, so no named limit's identity can be the same); a named
    /// limit stays as it is.
    pub(super) fn in_scope(&self, scope: &str) -> Self {
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

    /// `name:algorithm:window` (for an anonymous limit in a scope,
    /// `"scope"name:algorithm:window`), stable across processes and
    /// releases: what keeps limits' state apart in a shared backend (the
    /// Redis backend puts it in its keys; a store of your own can too). The
    /// number a window allows and the burst are not part of it, so changing
    /// them keeps every client's count (see [`Live`](crate::Live)); an
    /// anonymous limit is named after its quota, so its identity changes
    /// with it.
    ///
    /// ```
    /// use tower_ratelimit::{Algorithm, Limit, Policy};
    /// let limit = Limit::new("burst", Algorithm::Gcra, "10/s burst 20".parse().unwrap()).unwrap();
    /// assert_eq!(limit.identity(), "burst:gcra:1s");
    /// let tighter = Limit::new("burst", Algorithm::Gcra, "5/s".parse().unwrap()).unwrap();
    /// assert_eq!(limit.identity(), tighter.identity()); // one state, read anew
    ///
    /// let scoped = "2/min".parse::<Policy>().unwrap().scoped("GET /a");
    /// assert_eq!(scoped.limits()[0].identity(), "\"GET /a\"2/min:sliding-window:1m");
    /// ```
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A hash of [`identity`](Self::identity), within this process.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The identity and the numbers it leaves out (the limit, the
    /// capacity): what a decision remembered locally was made under, so
    /// that a live change of the quota is never answered from before it.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn terms(&self) -> u64 {
        let numbers = (u64::from(self.quota.limit()) << 32) | u64::from(self.capacity());
        self.id ^ numbers.wrapping_mul(0x9e37_79b9_7f4a_7c15)
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

/// A limit's identity outside any scope: `name:algorithm:window`. Not the
/// number a window allows, nor a burst: changing those keeps every
/// client's state (see [`Live`](crate::Live)).
fn identity_of(name: &str, kind: String, quota: Quota) -> String {
    match quota.calendar() {
        // `month-from-15-utc+02:00`: never the same as a window's `31d`.
        Some(calendar) => format!("{name}:{kind}:{}", calendar.to_string().replace(' ', "-")),
        None => {
            let window = crate::clock::micros::compact(quota.window_micros());
            format!("{name}:{kind}:{window}")
        }
    }
}

/// A hash of a limit's identity, for backends that key by number.
pub(super) fn hash(identity: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    identity.hash(&mut hasher);
    hasher.finish()
}
