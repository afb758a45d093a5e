//! A policy's HTTP text that never changes, rendered once per policy and
//! kept with it: the `RateLimit-Policy` field and, for each limit, its 429
//! bodies up to the retry-after seconds. Responses then only write what
//! varies.

use bytes::Bytes;
use http::HeaderValue;

use crate::clock::micros::compact;
use crate::{Limit, Policy};

/// What the layer keeps rendered for a [`Policy`].
#[derive(Debug)]
pub(crate) struct Rendered {
    /// `"burst";q=10;w=1, "sustained";q=100;w=60`.
    pub(crate) policy_field: Option<HeaderValue>,
    /// Per limit, its `X-RateLimit-Limit` value.
    pub(crate) limit_values: Box<[HeaderValue]>,
    /// Per limit, the 429 body's members after `"error"`:
    /// `"limit":10,"window":"1s","retry_after_seconds":`.
    pub(crate) body_members: Box<[Bytes]>,
    /// Per limit, the RFC 9457 members that open a problem document:
    /// `"type":"about:blank",…,"detail":"Rate limit \"burst\" exceeded",`.
    pub(crate) problem_members: Box<[Bytes]>,
}

impl Rendered {
    /// `policy`'s text, rendered the first time it is asked for. (`None`
    /// cannot happen: the policy's slot holds only what this puts there.)
    pub(crate) fn of(policy: &Policy) -> Option<&Rendered> {
        policy.derived(|policy| Rendered::new(policy.limits()))
    }

    fn new(limits: &[Limit]) -> Self {
        let mut field = Vec::new();
        for (i, limit) in limits.iter().enumerate() {
            if i > 0 {
                field.extend_from_slice(b", ");
            }
            // Limit names are printable ASCII without '"' or '\\': valid
            // structured-field strings as they are.
            push_str(&mut field, &["\"", limit.name(), "\";q="]);
            push_u64(&mut field, u64::from(limit.capacity()));
            if limit.is_concurrent() {
                // Requests in flight have no window; their unit says so.
                field.extend_from_slice(br#";qu="concurrent-requests""#);
            } else {
                field.extend_from_slice(b";w=");
                push_u64(&mut field, limit.quota().window_micros().as_secs_ceil());
                if limit.counts_bytes() {
                    field.extend_from_slice(br#";qu="content-bytes""#);
                }
            }
        }
        let members = |limit: &Limit| {
            let mut body = br#""limit":"#.to_vec();
            push_u64(&mut body, u64::from(limit.capacity()));
            body.extend_from_slice(br#","window":""#);
            // A calendar's window is its period ("month from 15").
            let window = match limit.quota().calendar() {
                Some(calendar) => calendar.to_string(),
                None => compact(limit.quota().window_micros()),
            };
            body.extend_from_slice(window.as_bytes());
            body.extend_from_slice(br#"","retry_after_seconds":"#);
            Bytes::from(body)
        };
        let problem = |limit: &Limit| {
            let mut body = Vec::new();
            push_str(
                &mut body,
                &[
                    r#""type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit \""#,
                    limit.name(),
                    r#"\" exceeded","#,
                ],
            );
            Bytes::from(body)
        };
        Self {
            policy_field: HeaderValue::from_maybe_shared(Bytes::from(field)).ok(),
            limit_values: limits
                .iter()
                .map(|limit| HeaderValue::from(limit.capacity()))
                .collect(),
            body_members: limits.iter().map(members).collect(),
            problem_members: limits.iter().map(problem).collect(),
        }
    }
}

fn push_str(out: &mut Vec<u8>, parts: &[&str]) {
    for part in parts {
        out.extend_from_slice(part.as_bytes());
    }
}

/// Append `n` in decimal, without the formatting machinery: `itoa` writes
/// two digits a step from a table (already in the tree through `http`).
#[inline]
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 99, 100, 4_294_967_295, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }

    #[test]
    fn a_policy_renders_once_and_keeps_it() {
        let policy: Policy = "burst = 10/s; 100/min".parse().unwrap();
        let first = Rendered::of(&policy).unwrap();
        assert!(std::ptr::eq(first, Rendered::of(&policy.clone()).unwrap()));
        assert_eq!(
            first.policy_field.as_ref().unwrap(),
            r#""burst";q=10;w=1, "100/min";q=100;w=60"#
        );
        assert_eq!(
            &first.body_members[1][..],
            br#""limit":100,"window":"1m","retry_after_seconds":"#
        );
    }
}
