//! [`Decision`]: what a policy says about one request, drawn from each of
//! its limits' [`Outcome`]s.

use std::fmt;
use std::time::Duration;

use super::Origin;
use crate::algorithm::{Outcome, Verdict};
use crate::policy::MAX_LIMITS;
use crate::{clock::Micros, Policy};

/// What a [`Policy`] says about one request: the overall verdict, the limit
/// that decided it, and every limit's own outcome (in the policy's order,
/// for headers that list them all).
///
/// All or nothing: the request is allowed only if every limit allows it.
/// The deciding limit is, for a denial, the one that makes the client wait
/// longest (a request that can never fit wins); for an admission, the most
/// restrictive one — the fewest units remaining, then the longest reset.
///
/// ```
/// use tower_ratelimit::backend::MemoryBackend;
/// use tower_ratelimit::key::Key;
/// use tower_ratelimit::{Algorithm, Policy, Quota};
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
///
/// Small: 64 bytes, one cache line, whatever the policy. A policy of one
/// or two limits (the common cases) keeps its outcomes inline; the outcomes
/// of a policy of three or more are kept on the heap, one allocation.
#[derive(Clone, Debug)]
pub struct Decision {
    outcomes: Outcomes,
    /// When `banned` or `capacity_exhausted`: the retry-after in µs that
    /// overrides the deciding outcome's verdict (never 0). Otherwise, for an
    /// admission under a limit of requests in flight, when its permit was
    /// taken, which names the permit ([`NO_PERMIT`]: none). One word for
    /// both: a refused request holds no permit.
    word: u64,
    len: u8,
    decided_by: u8,
    capacity_exhausted: bool,
    banned: bool,
    origin: Origin,
    /// How many servers share the limits this was decided on (a local
    /// fallback's `servers`): 0 or 1, the whole limits.
    servers: u16,
}

/// Outcomes a decision holds without an allocation: a policy of one or two
/// limits (a burst and a sustained rate) decides on the stack.
const INLINE: usize = 2;

/// Where a decision's outcomes live, in the policy's order. `Outcome`'s
/// verdict word is never zero, which tells the two apart without a tag.
#[derive(Clone, Debug)]
enum Outcomes {
    Inline([Outcome; INLINE]),
    Boxed(Box<[Outcome; MAX_LIMITS]>),
}

/// Equal when every outcome and every flag is: the slots past the policy's
/// limits say nothing.
impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.slice() == other.slice()
            && self.decided_by == other.decided_by
            && self.word == other.word
            && self.capacity_exhausted == other.capacity_exhausted
            && self.banned == other.banned
            && self.origin == other.origin
    }
}

impl Eq for Decision {}

/// `Decision::permit` when there is none (a permit is named by a time, which
/// can be 0).
const NO_PERMIT: u64 = u64::MAX;

impl Decision {
    /// The decision of `policy` from each of its limits' outcomes, in the
    /// policy's order: how a [`Backend`](crate::backend::Backend) of your
    /// own answers. The crate applies the all-or-nothing rule and picks the
    /// deciding limit; the outcomes must be one per limit.
    ///
    /// ```
    /// use tower_ratelimit::{Decision, Policy};
    /// use tower_ratelimit::clock::Micros;
    /// use tower_ratelimit::algorithm::Outcome;
    ///
    /// let policy: Policy = "10/s; 100/min".parse()?;
    /// let decision = Decision::from_outcomes(&policy, [
    ///     Outcome::allowed(10, 9, Micros::from_millis(100)),
    ///     Outcome::denied(100, 0, Micros::from_secs(60), Micros::from_secs(20)),
    /// ])?;
    /// assert!(!decision.is_allowed());
    /// assert_eq!(decision.decided_by(), 1);
    /// assert_eq!(decision.retry_after(), Some(std::time::Duration::from_secs(20)));
    ///
    /// assert!(Decision::from_outcomes(&policy, [Outcome::allowed(10, 9, Micros::ZERO)]).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_outcomes(
        policy: &Policy,
        outcomes: impl IntoIterator<Item = Outcome>,
    ) -> Result<Self, OutcomeCountMismatch> {
        let expected = policy.limits().len();
        let mut decision = Self::empty();
        let mut got = 0;
        for outcome in outcomes {
            got += 1;
            if got <= expected {
                decision.push(outcome);
            }
        }
        if got != expected {
            return Err(OutcomeCountMismatch { expected, got });
        }
        decision.decide();
        Ok(decision)
    }

    /// No outcomes yet: [`push`](Self::push) them, then [`decide`](Self::decide).
    #[inline]
    pub(crate) fn empty() -> Self {
        let unset = Outcome::allowed(0, 0, Micros::ZERO);
        Self {
            outcomes: Outcomes::Inline([unset; INLINE]),
            word: NO_PERMIT,
            len: 0,
            decided_by: 0,
            capacity_exhausted: false,
            banned: false,
            origin: Origin::Primary,
            servers: 0,
        }
    }

    /// The decision of a policy of one limit.
    #[inline]
    pub(crate) fn one(outcome: Outcome) -> Self {
        Self {
            outcomes: Outcomes::Inline([outcome; INLINE]),
            len: 1,
            ..Self::empty()
        }
    }

    /// A request refused because its key is banned by the policy's
    /// [penalty box](crate::policy::PenaltyBox) for `remaining` more: each limit
    /// reports nothing left until then. How a
    /// [`Backend`](crate::backend::Backend) of your own answers during a ban.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_ratelimit::{Decision, Policy};
    /// use tower_ratelimit::clock::Micros;
    ///
    /// let policy: Policy = "10/min".parse().unwrap();
    /// let banned = Decision::banned(&policy, Micros::from_secs(300));
    /// assert!(banned.is_banned() && !banned.is_allowed());
    /// assert_eq!(banned.retry_after(), Some(Duration::from_secs(300)));
    /// assert_eq!(banned.deciding().remaining(), 0);
    /// ```
    pub fn banned(policy: &Policy, remaining: Micros) -> Self {
        let mut decision = Self::empty();
        for limit in policy.limits() {
            decision.push(Outcome::denied(limit.capacity(), 0, remaining, remaining));
        }
        decision.ban(remaining);
        decision
    }

    /// This denial also started (or met) a ban of `remaining` more.
    pub(crate) fn ban(&mut self, remaining: Micros) {
        self.word = remaining.as_u64().max(1);
        self.banned = true;
    }

    /// Whether `word` holds a retry-after that overrides the verdict.
    #[inline]
    fn overridden(&self) -> bool {
        self.banned || self.capacity_exhausted
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, outcome: Outcome) {
        let len = usize::from(self.len);
        match &mut self.outcomes {
            Outcomes::Inline(few) if len < INLINE => few[len] = outcome,
            Outcomes::Inline(few) => self.outcomes = Outcomes::Boxed(spill(few, outcome)),
            Outcomes::Boxed(all) if len < MAX_LIMITS => all[len] = outcome,
            Outcomes::Boxed(_) => return,
        }
        self.len += 1;
    }

    /// The outcomes pushed so far, in order.
    #[inline]
    fn slice(&self) -> &[Outcome] {
        let len = usize::from(self.len);
        match &self.outcomes {
            Outcomes::Inline(few) => &few[..len.min(INLINE)],
            Outcomes::Boxed(all) => &all[..len.min(MAX_LIMITS)],
        }
    }

    /// The outcomes pushed so far, to change.
    fn slice_mut(&mut self) -> &mut [Outcome] {
        let len = usize::from(self.len);
        match &mut self.outcomes {
            Outcomes::Inline(few) => &mut few[..len.min(INLINE)],
            Outcomes::Boxed(all) => &mut all[..len.min(MAX_LIMITS)],
        }
    }

    /// Choose the deciding limit among the pushed outcomes.
    #[inline]
    pub(crate) fn decide(&mut self) {
        let outcomes = self.slice();
        if outcomes.len() < 2 {
            self.decided_by = 0;
            return;
        }
        let denied_rank = |o: &Outcome| match o.verdict() {
            Verdict::Never => u64::MAX,
            Verdict::RetryAfter(after) => after.as_u64(),
            Verdict::Allowed => 0,
        };
        let decided_by = if outcomes.iter().any(|o| !o.is_allowed()) {
            index_of_max(outcomes, |o| (denied_rank(o), Micros::ZERO))
        } else {
            index_of_max(outcomes, |o| (u32::MAX - o.remaining(), o.reset_after))
        };
        self.decided_by = decided_by as u8;
    }

    /// A denial because the backend holds as many keys as it may and this
    /// key is new (see [`AtCapacity::Deny`](crate::backend::AtCapacity::Deny)).
    pub(crate) fn exhaust_capacity(&mut self, limit_index: usize, retry_after: Micros) {
        self.decided_by = limit_index as u8;
        self.word = retry_after.as_u64().max(1);
        self.capacity_exhausted = true;
    }

    /// Replace limit `index`'s remaining and reset with what `now` reports,
    /// keeping its verdict: how a denied request reports the state it left.
    pub(crate) fn report_state(&mut self, index: usize, now: Outcome) {
        if let Some(outcome) = self.slice_mut().get_mut(index) {
            *outcome = now.with_verdict_of(*outcome);
        }
    }

    /// The same decision `elapsed` later, had nothing been counted since:
    /// every wait shorter by `elapsed` (a denial's never below 1 µs). What
    /// remains is as it was, which for the buckets is a little less than
    /// has refilled.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn aged(mut self, elapsed: Micros) -> Self {
        if self.overridden() {
            self.word = self.word.saturating_sub(elapsed.as_u64()).max(1);
        }
        for outcome in self.slice_mut() {
            *outcome = outcome.aged(elapsed);
        }
        self
    }

    /// The same decision, saying where it came from.
    pub fn with_origin(self, origin: Origin) -> Self {
        Self { origin, ..self }
    }

    /// The same decision, made on each limit's share among `servers`
    /// servers (a local fallback's): its quota headers and body report
    /// the share.
    pub(crate) fn shared_by(self, servers: u32) -> Self {
        let servers = u16::try_from(servers).unwrap_or(u16::MAX);
        Self { servers, ..self }
    }

    /// `policy` as this was decided on it: whole, or each limit's share
    /// among the servers (made anew: only a local fallback's decisions
    /// are shared, while the store is down).
    pub(crate) fn decided_on<'a>(&self, policy: &'a Policy) -> std::borrow::Cow<'a, Policy> {
        match self.servers {
            0 | 1 => std::borrow::Cow::Borrowed(policy),
            servers => std::borrow::Cow::Owned(policy.share(u32::from(servers))),
        }
    }

    /// Whether the request may pass.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        !self.overridden() && self.deciding().is_allowed()
    }

    /// The overall verdict.
    pub fn verdict(&self) -> Verdict {
        if self.overridden() {
            Verdict::RetryAfter(Micros::new(self.word))
        } else {
            self.deciding().verdict()
        }
    }

    /// Index (in the policy) of the limit that decided.
    pub fn decided_by(&self) -> usize {
        usize::from(self.decided_by)
    }

    /// The deciding limit's outcome.
    #[inline]
    pub fn deciding(&self) -> Outcome {
        // `decided_by` is below the outcomes' number (or 0, before any).
        let i = usize::from(self.decided_by);
        match &self.outcomes {
            Outcomes::Inline(few) => few[i % INLINE],
            Outcomes::Boxed(all) => all[i % MAX_LIMITS],
        }
    }

    /// The outcome of limit `index`.
    pub fn outcome(&self, index: usize) -> Option<Outcome> {
        self.slice().get(index).copied()
    }

    /// Every limit's outcome, in the policy's order.
    pub fn outcomes(&self) -> impl ExactSizeIterator<Item = Outcome> + '_ {
        self.slice().iter().copied()
    }

    /// When the same request may pass, if it is denied and ever can.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_micros().map(Duration::from)
    }

    /// [`retry_after`](Self::retry_after) in the core's time.
    pub fn retry_after_micros(&self) -> Option<Micros> {
        self.verdict().retry_after()
    }

    /// Whether the request was denied because the backend was full of other
    /// keys, not by a limit.
    pub fn is_capacity_exhausted(&self) -> bool {
        self.capacity_exhausted
    }

    /// The permit an admission holds under the policy's limits of requests
    /// in flight ([`Limit::concurrent`](crate::Limit::concurrent)), named by
    /// when it was taken: give it back with
    /// [`Backend::release`](crate::backend::Backend::release).
    pub fn permit(&self) -> Option<Micros> {
        let held = !self.overridden() && self.word != NO_PERMIT;
        held.then_some(Micros::new(self.word))
    }

    /// The same decision, holding the permit taken at `at`; a decision
    /// refused by a ban or a full backend holds none.
    pub fn with_permit(self, at: Micros) -> Self {
        if self.overridden() {
            return self;
        }
        Self {
            word: at.as_u64().min(NO_PERMIT - 1),
            ..self
        }
    }

    /// Whether the key is banned by the policy's [penalty box](crate::policy::PenaltyBox):
    /// the retry-after is the ban's remaining time.
    pub fn is_banned(&self) -> bool {
        self.banned
    }

    /// Which backend decided: the primary, or a fallback because the
    /// primary failed.
    pub fn origin(&self) -> Origin {
        self.origin
    }
}

/// The two inline outcomes and a third, on the heap: a policy of three or
/// more limits (out of line, to keep the common pushes small).
#[cold]
#[inline(never)]
fn spill(few: &[Outcome; INLINE], third: Outcome) -> Box<[Outcome; MAX_LIMITS]> {
    let mut all = Box::new([third; MAX_LIMITS]);
    all[..INLINE].copy_from_slice(few);
    all
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

/// [`Decision::from_outcomes`] was given a number of outcomes other than
/// the policy's number of limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeCountMismatch {
    /// The policy's number of limits.
    pub expected: usize,
    /// The number of outcomes given.
    pub got: usize,
}

impl fmt::Display for OutcomeCountMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} outcomes for a policy of {} limits: give one per limit, in order",
            self.got, self.expected
        )
    }
}

impl std::error::Error for OutcomeCountMismatch {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small enough to pass in registers or one cache line, whatever the
    /// policy: what the request path copies.
    #[test]
    fn a_decision_fits_in_a_cache_line() {
        assert!(std::mem::size_of::<Decision>() <= 64);
    }

    #[test]
    fn a_decision_of_several_limits_keeps_each_outcome_in_order() {
        let policy: Policy = "10/s; 100/min; 1000/h".parse().unwrap();
        let outcomes = [
            Outcome::allowed(10, 9, Micros::from_millis(100)),
            Outcome::denied(100, 0, Micros::from_secs(60), Micros::from_secs(20)),
            Outcome::allowed(1000, 998, Micros::from_secs(3)),
        ];
        let decision = Decision::from_outcomes(&policy, outcomes).unwrap();
        assert!(decision.outcomes().eq(outcomes));
        assert_eq!(decision.decided_by(), 1);
        assert_eq!(decision.deciding(), outcomes[1]);
        let aged = decision.clone().aged(Micros::from_secs(5));
        assert_eq!(aged.retry_after(), Some(Duration::from_secs(15)));
        assert_eq!(aged.outcome(2).unwrap().reset_after, Micros::ZERO);
        assert_eq!(aged.deciding(), aged.outcome(1).unwrap());
    }
}
