//! Settling a request by its response: count only what went wrong, or
//! charge what a request really cost once it is known.
//!
//! The layer checks (and counts) each request at its cost before the
//! handler runs, so a spent budget refuses requests *before* they run and
//! concurrent requests never overdraw it by more than they reserved. Once
//! the response is known, [`RateLimitLayer::settle`] says what the request
//! really cost, and the backend gives the difference back or charges it
//! ([`Backend::settle`](crate::backend::Backend::settle)); the response's
//! quota headers show the state after that.
//!
//! A request whose response never comes — the client went away, the
//! handler panicked — keeps what it reserved: it is counted at its
//! estimate. For counting failures only, that means it counts as one.
//!
//! A request may cost more than it reserved ([`RateLimitLayer::settle`];
//! not [`count_if`](crate::RateLimitLayer::count_if), which only gives
//! back). Two such requests of one key in flight at once could each
//! overrun, so each layer lets a key (under one policy) have one such
//! request in flight at a time: another is refused with 429 (retry after a
//! second, its quota headers showing the state it would have been decided
//! against) until the first is settled — or waits, if the layer shapes.
//! So a key is served at most the budget plus one request's overrun per
//! window on each server: on a fleet of `n` servers sharing a store, a
//! client that spreads concurrent requests over all of them gets at most
//! `n` overruns a window.
//!
//! [`RateLimitLayer::settle`]: crate::RateLimitLayer::settle

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use http::{Extensions, HeaderMap, Response, StatusCode};

use crate::key::Key;
use crate::{algorithm::Outcome, clock::Micros, Decision, Policy};

/// What a settlement may read of a response.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ResponseHead<'a> {
    /// The status.
    pub status: StatusCode,
    /// The headers (`x-tokens-used`, say).
    pub headers: &'a HeaderMap,
    /// The extensions, where a handler can leave its actual cost.
    pub extensions: &'a Extensions,
}

impl ResponseHead<'_> {
    /// Whether a limit of this crate behind this layer refused the request
    /// ([`RefusedByLimit`](crate::layer::RefusedByLimit) is among the
    /// extensions): `count_if(|res| !res.refused_by_a_limit())` spends
    /// nothing of this layer's budget on them.
    pub fn refused_by_a_limit(&self) -> bool {
        self.extensions
            .get::<crate::layer::RefusedByLimit>()
            .is_some()
    }

    /// Header `name` as a whole number, if it is one: the cost a handler
    /// reports (`x-tokens-used: 512`).
    ///
    /// ```
    /// use tower_ratelimit::layer::ResponseHead;
    /// let res = http::Response::builder().header("x-tokens-used", "512").body(()).unwrap();
    /// assert_eq!(ResponseHead::from(&res).number("x-tokens-used"), Some(512));
    /// assert_eq!(ResponseHead::from(&res).number("x-other"), None);
    /// ```
    pub fn number(&self, name: &str) -> Option<u32> {
        self.headers.get(name)?.to_str().ok()?.trim().parse().ok()
    }
}

impl<'a, B> From<&'a Response<B>> for ResponseHead<'a> {
    fn from(res: &'a Response<B>) -> Self {
        Self {
            status: res.status(),
            headers: res.headers(),
            extensions: res.extensions(),
        }
    }
}

type Rule = dyn Fn(&ResponseHead<'_>) -> Option<u32> + Send + Sync;

/// A layer's settlement: a request's actual cost from its response, or
/// `None` to keep what it reserved.
#[derive(Clone)]
pub(super) struct Settlement {
    rule: Arc<Rule>,
    /// Present when a request may cost more than it reserved: the keys
    /// with such a request in flight.
    unsettled: Option<Arc<Unsettled>>,
}

/// The most keys with a request of unknown cost in flight that a layer
/// tracks; past it, such requests are refused like a key's second one (a
/// bound on memory, far above what a server has in flight).
const MAX_UNSETTLED: usize = 1 << 16;

/// How long a request refused behind another of its key's is told to wait.
const UNSETTLED_RETRY: Micros = Micros::from_secs(1);

/// The (policy, key) pairs with a request of unknown cost in flight.
#[derive(Default)]
struct Unsettled(Mutex<HashSet<(u64, Key)>>);

/// One request's place in [`Unsettled`], given up when dropped: when the
/// request is settled, refused, failed, or dropped. Without one (`None`),
/// the request stands behind another of its key's.
pub(super) struct Hold(Option<(Arc<Unsettled>, (u64, Key))>);

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some((unsettled, entry)) = &self.0 {
            let mut held = unsettled.0.lock().unwrap_or_else(PoisonError::into_inner);
            held.remove(entry);
        }
    }
}

impl Settlement {
    /// A settlement that may charge more than was reserved.
    pub(super) fn new(
        rule: impl Fn(&ResponseHead<'_>) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        Self {
            rule: Arc::new(rule),
            unsettled: Some(Arc::default()),
        }
    }

    /// A settlement that only gives back (`count_if`): its requests never
    /// cost more than they reserved, so any number may be in flight.
    pub(super) fn refund_only(
        rule: impl Fn(&ResponseHead<'_>) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        Self {
            rule: Arc::new(rule),
            unsettled: None,
        }
    }

    /// The actual cost of a request that reserved `reserved`, if different.
    pub(super) fn actual(&self, response: &ResponseHead<'_>, reserved: u32) -> Option<u32> {
        (self.rule)(response).filter(|actual| *actual != reserved)
    }
}

/// Where a request stands among its key's requests of unknown cost: no
/// place needed (its layer does not settle, or only gives back: `None`, a
/// word on the common path), its key's place held, or behind another
/// request of its key's.
pub(super) struct Place(Option<Box<Hold>>);

impl Place {
    /// The place of a request of `key` under `policy`, taken if free.
    #[inline]
    pub(super) fn of(settlement: Option<&Settlement>, key: &Key, policy: &Policy) -> Self {
        match settlement.and_then(|s| s.unsettled.as_ref()) {
            None => Self(None),
            Some(unsettled) => Self::taken(unsettled, key, policy),
        }
    }

    /// The key's place in `unsettled`, or behind whoever holds it.
    fn taken(unsettled: &Arc<Unsettled>, key: &Key, policy: &Policy) -> Self {
        let identity = policy
            .limits()
            .iter()
            .fold(0u64, |h, limit| h.rotate_left(7) ^ limit.id());
        let entry = (identity, key.clone());
        let mut held = unsettled.0.lock().unwrap_or_else(PoisonError::into_inner);
        if held.len() >= MAX_UNSETTLED || !held.insert(entry.clone()) {
            return Self(Some(Box::new(Hold(None))));
        }
        Self(Some(Box::new(Hold(Some((unsettled.clone(), entry))))))
    }

    /// What a request of `cost` is asked about at.
    #[inline]
    pub(super) fn cost(&self, cost: u32) -> u32 {
        if self.is_behind() {
            0
        } else {
            cost
        }
    }

    /// Whether another request of its key holds the place.
    #[inline]
    pub(super) fn is_behind(&self) -> bool {
        matches!(&self.0, Some(hold) if hold.0.is_none())
    }

    /// The place held, to give up when the request is settled.
    pub(super) fn take_hold(&mut self) -> Option<Box<Hold>> {
        self.0.take().filter(|hold| hold.0.is_some())
    }

    /// `decision`, made at cost 0 for a request held back behind another of
    /// its key's: refused, each limit retried after [`UNSETTLED_RETRY`] at
    /// least, its state as the store reported it.
    pub(super) fn refuse_behind(decision: Decision, policy: &Policy) -> Decision {
        if !decision.is_allowed() {
            return decision;
        }
        let outcomes = decision.outcomes().map(|o| {
            let reset = o.reset_after_micros();
            Outcome::denied(o.limit(), u64::from(o.remaining()), reset, UNSETTLED_RETRY)
        });
        let origin = decision.origin();
        Decision::from_outcomes(policy, outcomes.collect::<Vec<_>>())
            .map_or(decision, |refused| refused.with_origin(origin))
    }
}

impl fmt::Debug for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Settlement(..)")
    }
}
