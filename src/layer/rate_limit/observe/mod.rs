//! What the layer tells the metrics (feature `metrics`) and the logs
//! (feature `tracing`).
//!
//! Metrics, through the `metrics` facade (any exporter):
//! * `ratelimit_requests_total{outcome, route, limit}`, a counter. Outcomes:
//!   `allowed`, `limited`; `delayed` (admitted, and delayed first by
//!   [`SoftShed`](crate::layer::SoftShed)); `fallback_allowed`, `fallback_limited` (decided by
//!   a [`Fallback`](crate::backend::Fallback)'s second backend);
//!   `shadow_limited` (would have been refused; let through by shadow mode);
//!   `banned` (refused by a [penalty box](crate::policy::PenaltyBox); `limit` is
//!   `penalty-box`); `allow_listed`, `deny_listed`
//!   ([`AccessLists`](crate::layer::AccessLists)); `key_rejected`, `key_skipped`;
//!   `no_policy_refused`, `no_policy_unlimited`
//!   ([`NoPolicy`](crate::layer::NoPolicy));
//!   `backend_error_allowed`, `backend_error_denied`. `limit` is the deciding
//!   limit's name, on decided requests only;
//! * `ratelimit_near_limit_total{route, limit}`: admitted requests that left
//!   a limit less than 20% of its capacity, per such limit;
//! * `ratelimit_decision_seconds{backend}`, a histogram: how long the
//!   backend took to decide (`memory`, `redis`, or a backend's own
//!   [name](crate::backend::Backend::name)).
//!
//! `route` is axum's route template (`/users/{id}`, feature `axum`), or
//! empty. Label values come from configuration, never from clients: their
//! number is bounded whatever the traffic.
//!
//! Logs:
//! * every decision: one event, `trace` when admitted and `debug`
//!   otherwise, with the route, the policy's limits, the deciding limit, the
//!   outcome, the backend, the latency, and the key redacted
//!   ([`Key::redacted`]);
//! * a backend failure: `warn`, with the action taken (`allow`, `deny`, or
//!   `fallback` from a `Fallback`) — at most once a second per layer, with
//!   how many were not logged since;
//! * a server set up so that no request can have a key (no peer address):
//!   `error`, once per layer, saying how to fix it;
//! * a request with no key: `debug`, with what was missing.
//! * the first request of a layer that had no policy: `warn`, once, saying
//!   how to choose what such requests get;
//! * the first request a layer inside this one had already counted against
//!   one of its limits (the same name and window, as the inner layer's
//!   `RateLimit-Policy` says): `warn`, once, and counted in
//!   `ratelimit_counted_twice_total{limit}`.
//!
//! Without the features these are no-ops. [`Origin`] is always there: in
//! the extensions of each request the inner service gets, and of each
//! response the limiter makes.

#[cfg(feature = "metrics")]
pub(super) mod meters;
pub(super) mod offenders;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

use self::offenders::TopOffenders;
use crate::backend::{BackendError, FailureLog};
use crate::key::{Key, KeyError};
use crate::{decision::Origin, key::RequestHead, Decision, Policy};

/// Where a layer's requests report: metric handles, route labels, the top
/// offenders, and the log's throttles. The layer holds one and calls into
/// it; it knows nothing of the layer's settings.
#[derive(Clone, Debug, Default)]
pub(super) struct Reporting {
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    route_labels: RouteLabels,
    #[cfg(feature = "metrics")]
    meters: meters::Meters,
    pub(super) offenders: Option<TopOffenders>,
    failures: FailureLog,
    /// The first request without a policy is logged, once per layer.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    no_policy_logged: OnceFlag,
    /// A misconfiguration (no peer address) is logged once per layer.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    misconfiguration_logged: OnceFlag,
    /// A request counted twice against one limit is logged once per layer.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    counted_twice_logged: OnceFlag,
}

/// Set once; a copy starts unset.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
struct OnceFlag(std::sync::atomic::AtomicBool);

impl Clone for OnceFlag {
    fn clone(&self) -> Self {
        Self::default()
    }
}

#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
impl OnceFlag {
    /// True the first time only.
    fn first(&self) -> bool {
        !self.0.swap(true, std::sync::atomic::Ordering::Relaxed)
    }
}

/// What one request reports besides its outcome: where it went, and when
/// its decision began. Empty without the features: nothing reads it, and
/// a request carries it from its key to its decision.
pub(super) struct Report {
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    route: Option<Arc<str>>,
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    started: quanta::Instant,
}

impl Report {
    /// Start reporting on `req` (nothing is read without the features).
    #[cfg_attr(
        not(any(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(super) fn start(observer: &Reporting, req: &RequestHead<'_>) -> Self {
        Self {
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            route: observer.route_labels.of(req),
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            started: quanta::Instant::now(),
        }
    }

    #[cfg(feature = "tracing")]
    fn route(&self) -> &str {
        self.route.as_deref().unwrap_or("")
    }
}

/// Route label values, interned: a request costs a lock-free lookup, no
/// allocation. At most [`MAX_ROUTES`](Self::MAX_ROUTES); later ones are
/// `other`.
#[derive(Debug, Default)]
#[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
pub(super) struct RouteLabels(ArcSwap<HashMap<Box<str>, Arc<str>>>);

impl Clone for RouteLabels {
    fn clone(&self) -> Self {
        Self::default()
    }
}

#[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
impl RouteLabels {
    const MAX_ROUTES: usize = 1_000;

    fn of(&self, req: &RequestHead<'_>) -> Option<Arc<str>> {
        let route = route_template(req)?;
        if let Some(label) = self.0.load().get(route) {
            return Some(label.clone());
        }
        if self.0.load().len() >= Self::MAX_ROUTES {
            return Some(Arc::from("other"));
        }
        let label: Arc<str> = Arc::from(route);
        self.0.rcu(|labels| {
            let mut labels = HashMap::clone(labels);
            labels.insert(route.into(), label.clone());
            labels
        });
        Some(label)
    }
}

/// axum's route template for the request, if it matched one.
fn route_template<'a>(req: &RequestHead<'a>) -> Option<&'a str> {
    #[cfg(feature = "axum")]
    return Some(req.extensions.get::<axum::extract::MatchedPath>()?.as_str());
    #[cfg(not(feature = "axum"))]
    {
        let _ = req;
        None
    }
}

/// The limits of a policy, for a log line: `a; b`.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
struct Limits<'a>(&'a Policy);

impl fmt::Display for Limits<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limit) in self.0.limits().iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{} = {}", limit.name(), limit.quota())?;
        }
        Ok(())
    }
}

/// The `limit` label of a request.
#[derive(Clone, Copy)]
pub(super) enum LimitLabel<'a> {
    /// Not decided by a limit (a list, a key error, a failure).
    None,
    Name(&'a Arc<str>),
    /// Refused by a penalty box's ban.
    PenaltyBox,
}

/// The deciding limit's label: its name, or the penalty box for a ban.
fn limit_label<'a>(policy: &'a Policy, decision: &Decision) -> LimitLabel<'a> {
    if decision.is_banned() {
        return LimitLabel::PenaltyBox;
    }
    policy
        .limits()
        .get(decision.decided_by())
        .map_or(LimitLabel::None, |l| LimitLabel::Name(l.shared_name()))
}

#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
fn limit_text<'a>(label: LimitLabel<'a>) -> &'a str {
    match label {
        LimitLabel::None => "",
        LimitLabel::Name(name) => name,
        LimitLabel::PenaltyBox => "penalty-box",
    }
}

/// Count one request's outcome (feature `metrics`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn count(observer: &Reporting, outcome: &'static str, report: &Report, limit: LimitLabel<'_>) {
    #[cfg(feature = "metrics")]
    observer
        .meters
        .request(outcome, report.route.as_ref(), limit);
}

/// What became of a decided request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    Allowed,
    /// Admitted, and delayed first (soft shedding).
    Delayed,
    Limited,
    /// Denied, and let through by shadow mode.
    Shadowed,
}

/// A decided request: its outcome, near-limit counts, the decision's
/// latency on `backend`, one log event, and a denied key offered to the top
/// offenders.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(super) fn decided(
    observer: &Reporting,
    (key, policy, report): (&Key, &Policy, &Report),
    backend: &'static str,
    decision: &Decision,
    fate: Fate,
) {
    let admitted = matches!(fate, Fate::Allowed | Fate::Delayed);
    if !admitted {
        if let Some(top) = &observer.offenders {
            top.record(key);
        }
    }
    let fallback = matches!(decision.origin(), Origin::Fallback | Origin::BreakerOpen);
    let outcome = match fate {
        Fate::Allowed if fallback => "fallback_allowed",
        Fate::Allowed => "allowed",
        Fate::Delayed => "delayed",
        Fate::Shadowed => "shadow_limited",
        Fate::Limited if decision.is_banned() => "banned",
        Fate::Limited if fallback => "fallback_limited",
        Fate::Limited => "limited",
    };
    let limit = limit_label(policy, decision);
    count(observer, outcome, report, limit);
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    let latency = report.started.elapsed();
    #[cfg(feature = "metrics")]
    {
        if decision.origin() != Origin::Cached {
            observer.meters.latency(backend, latency.as_secs_f64());
        }
        if admitted {
            let near = policy.limits().iter().zip(decision.outcomes());
            let near = near.filter(|(_, o)| u64::from(o.remaining()) * 5 < u64::from(o.limit()));
            for (limit, _) in near {
                observer
                    .meters
                    .near_limit(report.route.as_ref(), limit.shared_name());
            }
        }
    }
    #[cfg(feature = "tracing")]
    {
        macro_rules! event {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    route = report.route(),
                    policy = %Limits(policy),
                    limit = limit_text(limit),
                    outcome,
                    backend,
                    origin = ?decision.origin(),
                    latency_us = latency.as_micros() as u64,
                    retry_after_ms = decision.retry_after().map(|d| d.as_millis() as u64),
                    key = %key.redacted(),
                    "rate limit decision"
                )
            };
        }
        if admitted {
            event!(tracing::Level::TRACE);
        } else {
            event!(tracing::Level::DEBUG);
        }
    }
}

/// A request on an access list: `allow_listed` or `deny_listed`.
pub(super) fn listed(observer: &Reporting, report: &Report, denied: bool) {
    let outcome = if denied {
        "deny_listed"
    } else {
        "allow_listed"
    };
    count(observer, outcome, report, LimitLabel::None);
    #[cfg(feature = "tracing")]
    tracing::debug!(route = report.route(), outcome, "access list");
}

/// The backend failed and the layer did `action` (`allow` or `deny`).
pub(super) fn backend_failed(
    observer: &Reporting,
    report: &Report,
    action: &'static str,
    error: &BackendError,
) {
    let outcome = if action == "deny" {
        "backend_error_denied"
    } else {
        "backend_error_allowed"
    };
    count(observer, outcome, report, LimitLabel::None);
    observer.failures.warn(action, error);
}

/// A request had no key.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(super) fn key_missing(observer: &Reporting, report: &Report, error: &KeyError, rejected: bool) {
    let outcome = if rejected {
        "key_rejected"
    } else {
        "key_skipped"
    };
    count(observer, outcome, report, LimitLabel::None);
    #[cfg(feature = "tracing")]
    if error.is_misconfiguration() && observer.misconfiguration_logged.first() {
        tracing::error!(%error, rejected, "no request can have a rate limit key");
    } else {
        tracing::debug!(%error, rejected, route = report.route(), "no rate limit key");
    }
}

/// A request had no policy; `refused` says whether it was refused. The
/// first one of a layer is logged as a warning: it is most often a mistake.
pub(super) fn no_policy(observer: &Reporting, report: &Report, refused: bool) {
    let outcome = if refused {
        "no_policy_refused"
    } else {
        "no_policy_unlimited"
    };
    count(observer, outcome, report, LimitLabel::None);
    #[cfg(feature = "tracing")]
    if observer.no_policy_logged.first() {
        tracing::warn!(
            route = report.route(),
            refused,
            "a request had no rate limit policy; set RateLimitLayer::on_no_policy to choose what such requests get (logged once)"
        );
    }
}

/// A layer inside this one counted the request against the same `limit`:
/// two layers on one route with one named limit spend two of its budget
/// per request. Counted (`ratelimit_counted_twice_total{limit}`), and
/// logged once per layer.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(super) fn counted_twice(observer: &Reporting, limit: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("ratelimit_counted_twice_total", "limit" => limit.to_owned()).increment(1);
    #[cfg(feature = "tracing")]
    if observer.counted_twice_logged.first() {
        tracing::warn!(
            limit,
            "a request was counted twice against the limit {limit:?}: a layer inside this one checked it too; give each route one layer per limit (logged once)"
        );
    }
}

/// Settling a request failed: its reservation stands (logged like any
/// backend failure, throttled).
pub(super) fn settle_failed(observer: &Reporting, error: &BackendError) {
    observer.failures.warn("keep", error);
}
