//! The answer for one request under a whole policy.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::algorithm::{Outcome, Verdict};
use crate::policy::MAX_LIMITS;

/// What a [`Policy`](crate::Policy) says about one request: the overall
/// verdict, the limit that decided it, and every limit's own outcome (in the
/// policy's order, for headers that list them all).
///
/// The deciding limit is, for a denial, the one that makes the client wait
/// longest (a request that can never fit wins); for an admission, the most
/// restrictive one — the fewest units remaining, then the longest reset.
///
/// ```
/// use tower_ratelimit::{Algorithm, Key, MemoryBackend, Policy, Quota};
///
/// let policy = Policy::builder()
///     .limit("second", Algorithm::Gcra, Quota::per_second(10).unwrap())
///     .limit("minute", Algorithm::FixedWindow, Quota::per_minute(100).unwrap())
///     .build()
///     .unwrap();
/// let backend = MemoryBackend::new();
/// let decision = backend.check_now(&Key::new("user", "alice"), &policy, 1);
/// assert!(decision.is_allowed());
/// assert_eq!(decision.deciding().remaining(), 9); // the 10/s limit binds first
/// assert_eq!(decision.decided_by(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    outcomes: [Outcome; MAX_LIMITS],
    len: u8,
    decided_by: u8,
    capacity_exhausted: bool,
    /// Overrides the deciding outcome's verdict (a capacity denial).
    verdict: Option<Verdict>,
}

impl Decision {
    /// No outcomes yet: [`push`](Self::push) them, then [`decide`](Self::decide).
    #[inline]
    pub(crate) fn empty() -> Self {
        Self {
            outcomes: [Outcome::allowed(0, 0, 0); MAX_LIMITS],
            len: 0,
            decided_by: 0,
            capacity_exhausted: false,
            verdict: None,
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, outcome: Outcome) {
        if let Some(slot) = self.outcomes.get_mut(usize::from(self.len)) {
            *slot = outcome;
            self.len += 1;
        }
    }

    /// Choose the deciding limit among the pushed outcomes.
    #[inline]
    pub(crate) fn decide(&mut self) {
        let outcomes = &self.outcomes[..usize::from(self.len)];
        if outcomes.len() <= 1 {
            self.decided_by = 0;
            return;
        }
        let denied_rank = |o: &Outcome| match o.verdict() {
            Verdict::Never => u64::MAX,
            Verdict::RetryAfter(us) => us.get(),
            Verdict::Allowed => 0,
        };
        let decided_by = if outcomes.iter().any(|o| !o.is_allowed()) {
            index_of_max(outcomes, |o| (denied_rank(o), 0))
        } else {
            index_of_max(outcomes, |o| (u32::MAX - o.remaining(), o.reset_after_us()))
        };
        self.decided_by = decided_by as u8;
    }

    /// A denial because the backend holds as many keys as it may and this
    /// key is new (see [`AtCapacity::Deny`](crate::AtCapacity::Deny)).
    pub(crate) fn exhaust_capacity(&mut self, limit_index: usize, retry_after_us: u64) {
        self.decided_by = limit_index as u8;
        let retry = NonZeroU64::new(retry_after_us).unwrap_or(NonZeroU64::MIN);
        self.verdict = Some(Verdict::RetryAfter(retry));
        self.capacity_exhausted = true;
    }

    /// Replace limit `index`'s remaining and reset with what `now` reports,
    /// keeping its verdict: how a denied request reports the state it left.
    pub(crate) fn report_state(&mut self, index: usize, now: Outcome) {
        if let Some(outcome) = self.outcomes.get_mut(index) {
            *outcome = now.with_verdict_of(*outcome);
        }
    }

    /// Whether the request may pass.
    pub fn is_allowed(&self) -> bool {
        self.verdict.is_none() && self.deciding().is_allowed()
    }

    /// The overall verdict.
    pub fn verdict(&self) -> Verdict {
        self.verdict.unwrap_or_else(|| self.deciding().verdict())
    }

    /// Index (in the policy) of the limit that decided.
    pub fn decided_by(&self) -> usize {
        usize::from(self.decided_by)
    }

    /// The deciding limit's outcome.
    pub fn deciding(&self) -> Outcome {
        self.outcomes[self.decided_by()]
    }

    /// The outcome of limit `index`.
    pub fn outcome(&self, index: usize) -> Option<Outcome> {
        self.outcomes[..usize::from(self.len)].get(index).copied()
    }

    /// Every limit's outcome, in the policy's order.
    pub fn outcomes(&self) -> impl ExactSizeIterator<Item = Outcome> + '_ {
        self.outcomes[..usize::from(self.len)].iter().copied()
    }

    /// When the same request may pass, if it is denied and ever can.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.verdict() {
            Verdict::RetryAfter(us) => Some(Duration::from_micros(us.get())),
            Verdict::Allowed | Verdict::Never => None,
        }
    }

    /// Whether the request was denied because the backend was full of other
    /// keys, not by a limit.
    pub fn is_capacity_exhausted(&self) -> bool {
        self.capacity_exhausted
    }
}

/// The first index whose `rank` is largest.
fn index_of_max<K: Ord>(outcomes: &[Outcome], rank: impl Fn(&Outcome) -> K) -> usize {
    let mut best = 0;
    for i in 1..outcomes.len() {
        if rank(&outcomes[i]) > rank(&outcomes[best]) {
            best = i;
        }
    }
    best
}
