//! Quota headers on every response.
//!
//! * Legacy: `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
//!   `X-RateLimit-Reset` (Unix epoch seconds), for the deciding limit.
//! * IETF draft "RateLimit header fields for HTTP" (-10 syntax): one
//!   structured-field list item per limit,
//!   `RateLimit-Policy: "burst";q=10;w=1, "sustained";q=100;w=60` and
//!   `RateLimit: "burst";r=9;t=1, "sustained";r=99;t=60`.
//! * `Retry-After` in whole seconds, rounded up, on every denial that can
//!   ever succeed.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::HeaderMap;

use super::rendered::{push_u64, Rendered};
use crate::{algorithm::Outcome, clock::Micros, Algorithm, Decision, Limit, Policy};

/// Which quota headers responses carry.
///
/// ```
/// use tower_ratelimit::layer::HeaderStyle;
/// assert_eq!(HeaderStyle::default(), HeaderStyle::Both);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`
    /// (Unix seconds), for the most restrictive limit.
    Legacy,
    /// The IETF draft's `RateLimit` and `RateLimit-Policy`, one item per limit.
    Ietf,
    /// Both (the default).
    #[default]
    Both,
    /// No quota headers (`Retry-After` is still sent on a 429).
    None,
}

const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// Add the quota headers for `decision` under `policy`.
///
/// When an outer layer finds legacy headers from an inner one, the fewer
/// remaining wins; IETF items of both are kept (the fields are lists).
///
/// What never changes comes rendered with the policy (`X-RateLimit-Limit`,
/// `RateLimit-Policy`); what varies is written into one buffer that the
/// values share, so a response costs two allocations however many headers
/// it carries, and the map is reserved once for exactly what is added.
pub(crate) fn write(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    policy: &Policy,
    decision: &Decision,
) {
    write_with(headers, style, policy, decision, None, Theirs::Maybe);
}

/// The quota headers of a refused `decision` and, when it can ever
/// succeed, its `Retry-After` ([`retry_after_secs`]), written into the same
/// buffer. `theirs` says whether the response may already hold legacy
/// headers (a custom refusal's); the limiter's own holds none.
pub(crate) fn write_refusal(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    policy: &Policy,
    decision: &Decision,
    jitter: Micros,
    theirs: Theirs,
) {
    let retry = decision
        .retry_after_micros()
        .map(|retry| retry_after_secs(retry, jitter));
    write_with(headers, style, policy, decision, retry, theirs);
}

/// Whether a response may hold legacy quota headers written before ours
/// (an inner layer's, a custom refusal's), which the fewer remaining of
/// both then decides. Only a response that may is searched for them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Theirs {
    /// It may: the inner service's response, a custom refusal.
    Maybe,
    /// It cannot: the limiter's own refusal, rendered just now.
    None,
}

/// The quota headers, and `Retry-After: retry` when there is one. Inlined
/// into both callers, so that the admissions' copy has no `Retry-After`.
#[inline(always)]
fn write_with(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    policy: &Policy,
    decision: &Decision,
    retry: Option<u64>,
    theirs: Theirs,
) {
    let legacy = matches!(style, HeaderStyle::Legacy | HeaderStyle::Both);
    let ietf = matches!(style, HeaderStyle::Ietf | HeaderStyle::Both);
    // Nothing to write (an admission under `HeaderStyle::None`): known
    // before the policy's rendered text is looked up.
    if !legacy && !ietf && retry.is_none() {
        return;
    }
    let Some(rendered) = Rendered::of(policy) else {
        // Cannot happen (see `Rendered::of`); a refusal still says when.
        if let Some(secs) = retry {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        return;
    };
    let deciding = decision.deciding();
    let legacy = legacy
        && (theirs == Theirs::None
            || headers
                .get(&X_REMAINING)
                .and_then(|v| v.to_str().ok()?.parse::<u32>().ok())
                .is_none_or(|remaining| deciding.remaining() < remaining));
    if !legacy && !ietf && retry.is_none() {
        // An inner layer's legacy headers stand, and nothing else is sent.
        return;
    }
    headers.reserve(3 * usize::from(legacy) + 2 * usize::from(ietf) + usize::from(retry.is_some()));

    let mut text = Vec::with_capacity(40 + 24 * policy.limits().len());
    let mut cuts = [0; 4];
    if legacy {
        push_u64(&mut text, u64::from(deciding.remaining()));
        cuts[0] = text.len();
        // The wall clock, read here only: the one header that needs it.
        let limit = policy.limits().get(decision.decided_by());
        let reset_at = unix_now() + until_more(limit, deciding);
        push_u64(&mut text, reset_at.as_secs_ceil());
        cuts[1] = text.len();
    }
    if ietf {
        for (i, (limit, outcome)) in policy.limits().iter().zip(decision.outcomes()).enumerate() {
            if i > 0 {
                text.extend_from_slice(b", ");
            }
            text.push(b'"');
            text.extend_from_slice(limit.name().as_bytes());
            text.extend_from_slice(b"\";r=");
            push_u64(&mut text, u64::from(outcome.remaining()));
            text.extend_from_slice(b";t=");
            push_u64(&mut text, until_more(Some(limit), outcome).as_secs_ceil());
        }
    }
    cuts[2] = text.len();
    if let Some(secs) = retry {
        push_u64(&mut text, secs);
    }
    cuts[3] = text.len();
    let text = Bytes::from(text);
    let value = |from: usize, to: usize| HeaderValue::from_maybe_shared(text.slice(from..to)).ok();

    if legacy {
        if let Some(limit) = rendered.limit_values.get(decision.decided_by()) {
            headers.insert(X_LIMIT, limit.clone());
        }
        if let (Some(remaining), Some(reset)) = (value(0, cuts[0]), value(cuts[0], cuts[1])) {
            headers.insert(X_REMAINING, remaining);
            headers.insert(X_RESET, reset);
        }
    }
    if ietf {
        if let Some(field) = &rendered.policy_field {
            headers.append(RATELIMIT_POLICY, field.clone());
        }
        if let Some(field) = value(cuts[1], cuts[2]) {
            headers.append(RATELIMIT, field);
        }
    }
    if let Some(seconds) = retry.and_then(|_| value(cuts[2], cuts[3])) {
        headers.insert(RETRY_AFTER, seconds);
    }
}

/// The limit of `policy` that a layer inside this one already counted the
/// request against, as its `RateLimit-Policy` fields say: the same name and
/// window, which on one backend is the same budget.
pub(crate) fn counted_inside<'p>(headers: &HeaderMap, policy: &'p Policy) -> Option<&'p str> {
    for field in headers.get_all(RATELIMIT_POLICY) {
        let Ok(field) = field.to_str() else { continue };
        for item in field.split(',') {
            // `"name";q=10;w=60`: limit names hold no '"' (their syntax).
            let mut params = item.trim().split(';');
            let Some(name) = params
                .next()
                .and_then(|n| n.strip_prefix('"')?.strip_suffix('"'))
            else {
                continue;
            };
            let window = params.find_map(|p| p.strip_prefix("w=")?.parse::<u64>().ok());
            let same = policy.limits().iter().find(|limit| {
                let own =
                    (!limit.is_concurrent()).then(|| limit.quota().window_micros().as_secs_ceil());
                limit.name() == name && window == own
            });
            if let Some(limit) = same {
                return Some(limit.name());
            }
        }
    }
    None
}

/// `Retry-After`'s seconds for a denial that can succeed after
/// `retry_after`: rounded up, never 0, plus up to `jitter` at random so
/// that throttled clients do not return in lockstep.
fn retry_after_secs(retry_after: Micros, jitter: Micros) -> u64 {
    let jitter = if jitter == Micros::ZERO {
        0
    } else {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(retry_after) % (jitter.as_u64() + 1)
    };
    retry_after
        .saturating_add(Micros::new(jitter))
        .as_secs_ceil()
        .max(1)
}

/// When more of `limit`'s quota is available (the IETF `t`, draft -10, and
/// `X-RateLimit-Reset`): for a denied limit its exact retry-after (as
/// `Retry-After`), otherwise when it is replenished, but never later than
/// the longest its next unit can take. A sliding window's state lasts two
/// windows and a bucket with a burst refills for longer than one, but a
/// client that waits one window finds room again under every algorithm
/// except the sliding window counter, whose next unit can take a window and
/// one unit's share.
#[inline]
fn until_more(limit: Option<&Limit>, outcome: Outcome) -> Micros {
    if let Some(retry) = outcome.retry_after_micros() {
        return retry;
    }
    let replenished = outcome.reset_after_micros();
    match limit {
        // Within a window (the common case): nothing to cap.
        Some(limit) if replenished > limit.quota().window_micros() => {
            replenished.min(horizon(limit))
        }
        _ => replenished,
    }
}

/// The longest the next unit of `limit` can take to come back.
fn horizon(limit: &Limit) -> Micros {
    let quota = limit.quota();
    let window = quota.window_micros();
    if limit.algorithm() == Algorithm::SlidingWindow {
        let share = window.as_u64().div_ceil(u64::from(quota.limit().max(1)));
        window.saturating_add(Micros::new(share))
    } else {
        window
    }
}

fn unix_now() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(Micros::ZERO, Micros::from)
}
