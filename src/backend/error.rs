//! When a backend cannot decide, and how that is reported.

use std::fmt;

/// A backend could not decide (unreachable, timed out, answered nonsense).
#[derive(Debug)]
pub struct BackendError {
    source: Box<dyn std::error::Error + Send + Sync>,
    cause: Cause,
    /// For a breaker's refusal: the failure that kept it open last.
    opened_by: Option<Cause>,
}

/// Why a backend could not decide, as far as it can tell: what an operator
/// reads to mend it (a metric label, a log field, the Redis backend's `health()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// Nothing listens where the store should be.
    Refused,
    /// The store's host name does not resolve.
    UnknownHost,
    /// TLS failed: a certificate that does not verify, or a handshake.
    Tls,
    /// The store refused the credentials.
    Authentication,
    /// The store's user may not run a command or touch a key.
    Permission,
    /// The store does not know a command the backend needs.
    UnknownCommand,
    /// No answer within the backend's timeout.
    Timeout,
    /// A [`Breaker`](super::Breaker) in front of the backend is open.
    BreakerOpen,
    /// One key's state, not the store: a key holding another type than its
    /// state's, or values the decision cannot read. The store answered, so
    /// this never opens a breaker nor changes the store's health: that
    /// request alone is answered by the failure rule. The Redis backend
    /// gives this cause only once it has checked the client's keys and
    /// deleted the ones that showed the fault; a failure they do not
    /// explain is the store's.
    KeyState,
    /// The store is full: Redis refuses writes (`OOM`) at its `maxmemory`
    /// under the `noeviction` policy. It answers, but can store no decision
    /// until memory is freed or raised, so a breaker opens as for an
    /// outage (and says why) and a fallback decides meanwhile.
    OutOfMemory,
    /// Anything else.
    Other,
}

impl Cause {
    /// Its name as a metric label or log field: `refused`, `unknown_host`,
    /// `tls`, `authentication`, `permission`, `unknown_command`, `timeout`,
    /// `breaker_open`, `key_state`, `out_of_memory`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Refused => "refused",
            Cause::UnknownHost => "unknown_host",
            Cause::Tls => "tls",
            Cause::Authentication => "authentication",
            Cause::Permission => "permission",
            Cause::UnknownCommand => "unknown_command",
            Cause::Timeout => "timeout",
            Cause::BreakerOpen => "breaker_open",
            Cause::KeyState => "key_state",
            Cause::OutOfMemory => "out_of_memory",
            Cause::Other => "other",
        }
    }
}

impl Cause {
    /// Every cause, in declaration order (`cause as u8` indexes it).
    pub(crate) const ALL: [Cause; 11] = [
        Cause::Refused,
        Cause::UnknownHost,
        Cause::Tls,
        Cause::Authentication,
        Cause::Permission,
        Cause::UnknownCommand,
        Cause::Timeout,
        Cause::BreakerOpen,
        Cause::KeyState,
        Cause::OutOfMemory,
        Cause::Other,
    ];
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl BackendError {
    /// Wrap the underlying error (its cause: [`Cause::Other`]).
    pub fn new(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            source: source.into(),
            cause: Cause::Other,
            opened_by: None,
        }
    }

    /// The same error, said to be for `cause`.
    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = cause;
        self
    }

    /// Why the backend could not decide.
    pub fn cause(&self) -> Cause {
        self.cause
    }

    /// The backend was not asked: a [`Breaker`](super::Breaker) in front of
    /// it is open, kept open last by a failure for `opened_by`.
    pub(crate) fn breaker_open(opened_by: Option<Cause>) -> Self {
        let text = match opened_by {
            Some(cause) => format!("the circuit breaker is open: the backend failed repeatedly ({cause}) and is not asked until a probe succeeds"),
            None => "the circuit breaker is open: the backend failed repeatedly and is not asked until a probe succeeds".to_owned(),
        };
        Self {
            opened_by,
            ..Self::new(text).with_cause(Cause::BreakerOpen)
        }
    }

    /// For a breaker's refusal ([`Cause::BreakerOpen`]): the cause of the
    /// failure that kept it open last — an outage (`Timeout`, `Refused`…)
    /// told apart from a full store (`OutOfMemory`).
    pub fn opened_by(&self) -> Option<Cause> {
        self.opened_by
    }

    /// Whether the backend was not even asked, because a
    /// [`Breaker`](super::Breaker) in front of it is open.
    pub fn is_breaker_open(&self) -> bool {
        self.cause == Cause::BreakerOpen
    }

    /// Whether this is one key's trouble ([`Cause::KeyState`]), not the
    /// store's: the store answered.
    pub fn is_about_one_key(&self) -> bool {
        self.cause == Cause::KeyState
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limit backend failed: {}", self.source)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Warns of backend failures (feature `tracing`) at most once a second, with
/// how many were not logged since: an outage must not flood the logs. Each
/// layer and each [`Fallback`](super::Fallback) keeps its own.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    #[cfg(feature = "tracing")]
    last_second: std::sync::atomic::AtomicU64,
    #[cfg(feature = "tracing")]
    suppressed: std::sync::atomic::AtomicU64,
}

/// A copy starts its own count.
impl Clone for FailureLog {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl FailureLog {
    /// A backend failed, and `action` (`allow`, `deny`, `fallback`) decided
    /// the request instead.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn warn(&self, action: &'static str, error: &BackendError) {
        #[cfg(feature = "tracing")]
        {
            use std::sync::atomic::Ordering;
            let second = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let last = self.last_second.load(Ordering::Relaxed);
            let first_this_second = second > last
                && self
                    .last_second
                    .compare_exchange(last, second, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok();
            if first_this_second {
                let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
                tracing::warn!(%error, action, suppressed, "rate limit backend failed");
            } else {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What to do when the backend cannot decide (unreachable, timed out, its
/// breaker open) and no [`Fallback`](super::Fallback) decided
/// instead.
///
/// To keep limiting while the backend is down, put a fallback in front of
/// the layer's backend: `redis.with_breaker().or_fallback(local)`, with
/// `local` a [`MemoryBackend`](super::MemoryBackend) enforcing each
/// server's [share](super::MemoryBackendBuilder::servers) of every
/// limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnBackendError {
    /// Fail open: let the request through, without quota headers (the
    /// default): the limiter never takes the service down with it.
    #[default]
    Allow,
    /// Fail closed: answer `503 Service Unavailable` with `Retry-After: 1`
    /// and an `application/problem+json` body of type
    /// `…/http-problem-types#temporary-reduced-capacity` — not a 429, which
    /// would tell the client it exceeded its quota.
    Deny,
}
