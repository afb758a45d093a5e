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
//!
//! ```
//! use tower_ratelimit::headers::HeaderStyle;
//! assert_eq!(HeaderStyle::default(), HeaderStyle::Both);
//! ```

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::HeaderMap;

use crate::render::push_u64;
use crate::{Decision, Policy};

/// Which quota headers responses carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `X-RateLimit-*` only.
    Legacy,
    /// `RateLimit` and `RateLimit-Policy` only.
    Ietf,
    /// Both (the default).
    #[default]
    Both,
    /// No quota headers (`Retry-After` is still sent on a 429).
    None,
}

pub(crate) const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub(crate) const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
pub(crate) const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// Microseconds to whole seconds, rounded up.
pub(crate) fn ceil_secs(us: u64) -> u64 {
    us.div_ceil(1_000_000)
}

/// Add the quota headers for `decision` under `policy`. `now_unix_us` is the
/// wall clock, for `X-RateLimit-Reset`.
///
/// When an outer layer finds legacy headers from an inner one, the fewer
/// remaining wins; IETF items of both are kept (the fields are lists).
pub(crate) fn write(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    policy: &Policy,
    decision: &Decision,
    now_unix_us: u64,
) {
    // Room for every header below at once, rather than growing as they come.
    headers.reserve(6);
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        let deciding = decision.deciding();
        let theirs = headers
            .get(&X_REMAINING)
            .and_then(|v| v.to_str().ok()?.parse::<u32>().ok());
        if theirs.is_none_or(|theirs| deciding.remaining() < theirs) {
            let reset_at = ceil_secs(now_unix_us + deciding.reset_after_us());
            headers.insert(X_LIMIT, HeaderValue::from(deciding.limit()));
            headers.insert(X_REMAINING, HeaderValue::from(deciding.remaining()));
            headers.insert(X_RESET, HeaderValue::from(reset_at));
        }
    }
    if matches!(style, HeaderStyle::Ietf | HeaderStyle::Both) {
        let rendered = policy.rendered();
        if let Some(field) = &rendered.policy_field {
            headers.append(RATELIMIT_POLICY, field.clone());
        }
        let mut field = Vec::with_capacity(32 * policy.limits().len());
        for (i, (limit, outcome)) in policy.limits().iter().zip(decision.outcomes()).enumerate() {
            if i > 0 {
                field.extend_from_slice(b", ");
            }
            field.push(b'"');
            field.extend_from_slice(limit.name().as_bytes());
            field.extend_from_slice(b"\";r=");
            push_u64(&mut field, u64::from(outcome.remaining()));
            field.extend_from_slice(b";t=");
            push_u64(&mut field, ceil_secs(outcome.reset_after_us()));
        }
        if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(field)) {
            headers.append(RATELIMIT, value);
        }
    }
}

/// `Retry-After` for a denial: seconds rounded up, plus up to `jitter_us`
/// at random so that throttled clients do not return in lockstep.
pub(crate) fn write_retry_after(headers: &mut HeaderMap, retry_after_us: u64, jitter_us: u64) {
    let jitter = if jitter_us == 0 {
        0
    } else {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(retry_after_us) % (jitter_us + 1)
    };
    let secs = ceil_secs(retry_after_us + jitter).max(1);
    headers.insert(RETRY_AFTER, HeaderValue::from(secs));
}
