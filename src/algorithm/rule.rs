//! An algorithm bound to its quota: what a limit runs, dispatched by the
//! shape of its state.

use super::{
    Algorithm, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, State, TokenBucket,
};
use crate::{algorithm::Outcome, clock::Micros, Quota};

/// An algorithm bound to its quota, ready to apply: what a [`Limit`](crate::Limit) runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingWindow(SlidingWindow),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    Gcra(Gcra),
}

impl Rule {
    #[inline]
    pub(crate) fn new(algorithm: Algorithm, quota: Quota) -> Self {
        match algorithm {
            Algorithm::FixedWindow => Rule::FixedWindow(FixedWindow::new(quota)),
            Algorithm::SlidingLog => Rule::SlidingLog(SlidingLog::new(quota)),
            Algorithm::SlidingWindow => Rule::SlidingWindow(SlidingWindow::new(quota)),
            Algorithm::TokenBucket => Rule::TokenBucket(TokenBucket::new(quota)),
            Algorithm::LeakyBucket => Rule::LeakyBucket(LeakyBucket::new(quota)),
            Algorithm::Gcra => Rule::Gcra(Gcra::new(quota)),
        }
    }

    /// How its state is kept.
    #[inline]
    pub(crate) fn form(&self) -> Form<'_> {
        match self {
            Rule::FixedWindow(a) => Form::Fixed(FixedRule::FixedWindow(a)),
            Rule::SlidingWindow(a) => Form::Fixed(FixedRule::SlidingWindow(a)),
            Rule::TokenBucket(a) => Form::Bucket(a.as_gcra()),
            Rule::LeakyBucket(a) => Form::Bucket(a.as_gcra()),
            Rule::Gcra(a) => Form::Bucket(a),
            Rule::SlidingLog(a) => Form::Log(a),
        }
    }
}

/// A rule by the shape of its state.
#[derive(Clone, Copy)]
pub(crate) enum Form<'a> {
    /// One [`State`] per key: the windows.
    Fixed(FixedRule<'a>),
    /// One word per key, the theoretical arrival time (a [`State`] whose
    /// `value` is always 0): the three buckets, which share [`Gcra`]'s
    /// arithmetic. Kept apart because one word can change without a lock.
    Bucket(&'a Gcra),
    /// A [`SlidingLogState`] per key.
    Log(&'a SlidingLog),
}

/// The algorithms whose state is one two-word [`State`].
#[derive(Clone, Copy)]
pub(crate) enum FixedRule<'a> {
    FixedWindow(&'a FixedWindow),
    SlidingWindow(&'a SlidingWindow),
}

impl FixedRule<'_> {
    #[inline]
    pub(crate) fn check(self, state: State, now: Micros, cost: u32) -> Outcome {
        match self {
            FixedRule::FixedWindow(a) => a.check(state, now, cost),
            FixedRule::SlidingWindow(a) => a.check(state, now, cost),
        }
    }

    #[inline]
    pub(crate) fn refund(self, state: State, now: Micros, units: u32) -> State {
        match self {
            FixedRule::FixedWindow(a) => a.refund(state, now, units),
            FixedRule::SlidingWindow(a) => a.refund(state, now, units),
        }
    }

    #[inline]
    pub(crate) fn consume(self, state: State, now: Micros, cost: u32) -> State {
        match self {
            FixedRule::FixedWindow(a) => a.consume(state, now, cost),
            FixedRule::SlidingWindow(a) => a.consume(state, now, cost),
        }
    }

    #[inline]
    pub(crate) fn charge(self, state: State, now: Micros, units: u32) -> State {
        match self {
            FixedRule::FixedWindow(a) => a.charge(state, now, units),
            FixedRule::SlidingWindow(a) => a.charge(state, now, units),
        }
    }
}
