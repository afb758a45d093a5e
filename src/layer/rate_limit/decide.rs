//! What to do with a request: [`Action`], the one thing the response future
//! carries out, whether the service knew it at once (a listed client, no
//! policy, no key) or the backend answered ([`decide`], a plain function of
//! the answer and the layer's settings); why the limiter answers a request
//! itself ([`Refusal`]) and the one place that response is built
//! ([`Refusal::response`]).

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::observe::Fate;
use crate::backend::{BackendError, OnBackendError};
use crate::clock::Micros;
use crate::decision::Origin;
use crate::key::{Key, KeyError, RequestHead};
use crate::layer::answer::grpc;
use crate::layer::answer::headers::HeaderStyle;
use crate::layer::answer::response::{self, LimitedResponse, Refused};
use crate::layer::answer::RefusedByLimit;
use crate::{Decision, Policy};

/// What becomes of a request, with the part of the answer each case needs
/// (moved, not copied: a decision of several limits holds an allocation).
#[derive(Debug)]
pub(super) enum Action<W> {
    /// Call the inner service.
    Admit {
        decision: Decision,
        origin: Origin,
        spent: Spent,
        headers: QuotaHeaders,
    },
    /// Wait, then ask again (shaping): what the waiting takes.
    Wait(W),
    /// Answer with the limiter's own response.
    Refuse(Refusal),
    /// No decision could be had: call the inner service, unlimited and
    /// without quota headers.
    FailOpen(BackendError),
}

/// Whether an admitted request spent its key's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spent {
    /// The decision admitted it: a permit is held, and its response
    /// settles it.
    Counted,
    /// Shadow mode or the failure rule let it through: nothing to hold or
    /// settle.
    Uncounted,
}

/// Whether a response shows its decision in quota headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QuotaHeaders {
    Shown,
    Withheld,
}

impl QuotaHeaders {
    fn shown_if(shown: bool) -> Self {
        match shown {
            true => Self::Shown,
            false => Self::Withheld,
        }
    }
}

/// Why the limiter answers a request itself; the response is built from
/// this in one place (`Refusal::response`).
#[derive(Debug)]
pub(super) enum Refusal {
    /// 429 (or the layer's own response): over the limit.
    Limited(Decision),
    /// 503: no decision could be had, and the layer fails closed.
    Unavailable(BackendError),
    /// 403: a deny-listed client.
    DenyListed,
    /// 500: no policy, and the layer refuses such requests.
    NoPolicy,
    /// No key, and the layer refuses such requests with this status.
    NoKey(StatusCode, KeyError),
}

impl Refusal {
    /// The limiter's own answer, built here for every refusal of the layer
    /// (a gRPC status for a gRPC request: looked at only when refusing).
    /// `asked`: the key and policy the backend was asked about, for a
    /// request it answered.
    pub(super) fn response<ReqB>(
        self,
        (limited, headers, jitter): (&LimitedResponse, HeaderStyle, Micros),
        req: &Request<ReqB>,
        asked: Option<(&Key, &Policy)>,
    ) -> Response<Bytes> {
        let (mut response, origin) = match (self, asked) {
            (Refusal::Limited(decision), Some((key, policy))) => {
                let policy = decision.decided_on(policy);
                let refused = Refused {
                    decision: &decision,
                    policy: &policy,
                    key,
                    request: &RequestHead::from(req),
                };
                let mut response = limited.respond(&refused, headers, jitter);
                response.extensions_mut().insert(RefusedByLimit);
                (response, decision.origin())
            }
            // Only a request the backend was asked about is limited; were
            // one not, it would be refused as if no decision could be had.
            (Refusal::Limited(_), None) => (response::unavailable(), Origin::Primary),
            (Refusal::Unavailable(error), _) => (
                response::unavailable(),
                Origin::FailedClosed {
                    breaker_open: error.is_breaker_open(),
                },
            ),
            (Refusal::DenyListed, _) => (response::forbidden(), Origin::DenyListed),
            (Refusal::NoPolicy, _) => (response::no_policy(), Origin::Primary),
            (Refusal::NoKey(status, error), _) => {
                (response::key_error(status, &error), Origin::Primary)
            }
        };
        mark(response.extensions_mut(), origin);
        match grpc::is_grpc(req.headers()) {
            true => grpc::refusal(response),
            false => response,
        }
    }
}

/// Mark a request or response with how it was decided, unless the store
/// did: no mark means [`Origin::Primary`] (see [`Origin::of`]), which
/// spares the commonest request the extension map's allocations.
#[inline]
pub(super) fn mark(extensions: &mut http::Extensions, origin: Origin) {
    if origin != Origin::Primary {
        extensions.insert(origin);
    }
}

impl<W> Action<W> {
    /// What is reported of a decided request: its decision and fate (none
    /// while it waits, or when no decision could be had).
    #[inline(always)]
    pub(super) fn reported(&self) -> Option<(&Decision, Fate)> {
        match self {
            Action::Admit {
                decision, spent, ..
            } => Some((
                decision,
                match spent {
                    Spent::Counted => Fate::Allowed,
                    Spent::Uncounted => Fate::Shadowed,
                },
            )),
            Action::Refuse(Refusal::Limited(decision)) => Some((decision, Fate::Limited)),
            Action::Wait(_) | Action::Refuse(_) | Action::FailOpen(_) => None,
        }
    }
}

/// The layer's settings that decide what to do.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rules {
    pub(super) on_backend_error: OnBackendError,
    /// Every policy of the layer in shadow mode.
    pub(super) shadow: bool,
    /// Quota headers on requests shadow mode let through.
    pub(super) shadow_headers: bool,
}

/// What to do with a request whose policy (in shadow mode or not) the
/// backend answered about with `answer`; `wait` says how a denied request
/// may wait for room (shaping), if it may.
#[inline(always)]
pub(super) fn decide<W>(
    rules: Rules,
    policy_in_shadow: bool,
    answer: Result<Decision, BackendError>,
    wait: impl FnOnce(&Decision) -> Option<W>,
) -> Action<W> {
    let decision = match answer {
        Ok(decision) => decision,
        Err(error) => {
            return match rules.on_backend_error {
                OnBackendError::Deny => Action::Refuse(Refusal::Unavailable(error)),
                _ => Action::FailOpen(error),
            };
        }
    };
    if decision.is_allowed() {
        return Action::Admit {
            origin: decision.origin(),
            decision,
            spent: Spent::Counted,
            headers: QuotaHeaders::Shown,
        };
    }
    if rules.shadow || policy_in_shadow {
        // A dry run: reported as a denial, never enforced.
        return Action::Admit {
            decision,
            origin: Origin::Shadow,
            spent: Spent::Uncounted,
            headers: QuotaHeaders::shown_if(rules.shadow_headers),
        };
    }
    match wait(&decision) {
        Some(waiting) => Action::Wait(waiting),
        None => Action::Refuse(Refusal::Limited(decision)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Outcome;
    use crate::{clock::Micros, Policy};

    const RULES: Rules = Rules {
        on_backend_error: OnBackendError::Allow,
        shadow: false,
        shadow_headers: false,
    };

    fn answer(allowed: bool) -> Result<Decision, BackendError> {
        let policy: Policy = "10/min".parse().unwrap();
        let outcome = if allowed {
            Outcome::allowed(10, 9, Micros::from_secs(60))
        } else {
            Outcome::denied(10, 0, Micros::from_secs(60), Micros::from_secs(6))
        };
        Ok(Decision::from_outcomes(&policy, [outcome]).unwrap())
    }

    #[test]
    fn an_admission_is_called_with_headers() {
        let allowed = answer(true);
        let action = decide(RULES, false, allowed, |_| Some(()));
        assert!(matches!(
            action,
            Action::Admit {
                origin: Origin::Primary,
                spent: Spent::Counted,
                headers: QuotaHeaders::Shown,
                ..
            }
        ));
    }

    #[test]
    fn a_denial_waits_if_it_may_and_is_refused_otherwise() {
        let denied = answer(false);
        assert!(matches!(
            decide(RULES, false, answer(false), |_| Some(7)),
            Action::Wait(7)
        ));
        assert!(matches!(
            decide(RULES, false, denied, |_| None::<()>),
            Action::Refuse(Refusal::Limited(_))
        ));
    }

    #[test]
    fn shadow_mode_lets_a_denial_through_uncounted_and_never_waits() {
        let denied = answer(false);
        let by_policy = decide(RULES, true, answer(false), |_| Some(()));
        assert!(matches!(
            by_policy,
            Action::Admit {
                origin: Origin::Shadow,
                spent: Spent::Uncounted,
                headers: QuotaHeaders::Withheld,
                ..
            }
        ));
        let rules = Rules {
            shadow: true,
            shadow_headers: true,
            ..RULES
        };
        let by_layer = decide(rules, false, denied, |_| Some(()));
        assert!(matches!(
            by_layer,
            Action::Admit {
                headers: QuotaHeaders::Shown,
                spent: Spent::Uncounted,
                ..
            }
        ));
    }

    #[test]
    fn a_failure_is_answered_by_the_failure_rule() {
        let failed = || Err(BackendError::new("connection refused"));
        assert!(matches!(
            decide(RULES, false, failed(), |_| Some(())),
            Action::FailOpen(_)
        ));
        let closed = Rules {
            on_backend_error: OnBackendError::Deny,
            ..RULES
        };
        assert!(matches!(
            decide(closed, false, failed(), |_| Some(())),
            Action::Refuse(Refusal::Unavailable(_))
        ));
    }
}
