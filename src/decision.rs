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
    verdict: Verdict,
    capacity_exhausted: bool,
}

impl Decision {
    /// The decision for a policy whose limits gave `outcomes` (at least one,
    /// at most [`MAX_LIMITS`]).
    pub(crate) fn from_outcomes(outcomes: &[Outcome]) -> Self {
        debug_assert!(!outcomes.is_empty() && outcomes.len() <= MAX_LIMITS);
        let denied_rank = |o: &Outcome| match o.verdict() {
            Verdict::Never => u64::MAX,
            Verdict::RetryAfter(us) => us.get(),
            Verdict::Allowed => 0,
        };
        let any_denied = outcomes.iter().any(|o| !o.is_allowed());
        let decided_by = if any_denied {
            index_of_max(outcomes, |o| (denied_rank(o), 0))
        } else {
            index_of_max(outcomes, |o| {
                (u64::from(u32::MAX - o.remaining()), o.reset_after_us())
            })
        };
        let mut stored = [Outcome::allowed(0, 0, 0); MAX_LIMITS];
        stored[..outcomes.len()].copy_from_slice(outcomes);
        Self {
            outcomes: stored,
            len: outcomes.len() as u8,
            decided_by: decided_by as u8,
            verdict: outcomes[decided_by].verdict(),
            capacity_exhausted: false,
        }
    }

    /// A denial because the backend holds as many keys as it may and this
    /// key is new (see [`AtCapacity::Deny`](crate::AtCapacity::Deny)).
    pub(crate) fn capacity_exhausted(mut self, limit_index: usize, retry_after_us: u64) -> Self {
        self.decided_by = limit_index as u8;
        self.verdict =
            Verdict::RetryAfter(NonZeroU64::new(retry_after_us).unwrap_or(NonZeroU64::MIN));
        self.capacity_exhausted = true;
        self
    }

    /// Replace limit `index`'s remaining and reset with what `now` reports,
    /// keeping its verdict: how a denied request reports the state it left.
    pub(crate) fn report_state(&mut self, index: usize, now: Outcome) {
        let outcome = &mut self.outcomes[index];
        *outcome = now.with_verdict(outcome.verdict());
    }

    /// Whether the request may pass.
    pub fn is_allowed(&self) -> bool {
        self.verdict == Verdict::Allowed
    }

    /// The overall verdict.
    pub fn verdict(&self) -> Verdict {
        self.verdict
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
        match self.verdict {
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
