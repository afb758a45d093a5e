//! A policy's HTTP text that never changes, rendered once when the policy is
//! built: the `RateLimit-Policy` field and, for each limit, its 429 bodies up
//! to the retry-after seconds. Responses then only write what varies.

use bytes::Bytes;
use http::HeaderValue;

use crate::headers::ceil_secs;
use crate::quota::compact_window;
use crate::Limit;

/// What [`Policy`](crate::Policy) keeps pre-rendered.
#[derive(Debug)]
pub(crate) struct Rendered {
    /// `"burst";q=10;w=1, "sustained";q=100;w=60`.
    pub(crate) policy_field: Option<HeaderValue>,
    /// Per limit, the 429 body's members after `"error"`:
    /// `"limit":10,"window":"1s","retry_after_seconds":`.
    pub(crate) body_members: Box<[Bytes]>,
    /// Per limit, the RFC 9457 members that open a problem document:
    /// `"type":"about:blank",…,"detail":"Rate limit \"burst\" exceeded",`.
    pub(crate) problem_members: Box<[Bytes]>,
}

impl Rendered {
    pub(crate) fn new(limits: &[Limit]) -> Self {
        let mut field = Vec::new();
        for (i, limit) in limits.iter().enumerate() {
            if i > 0 {
                field.extend_from_slice(b", ");
            }
            // Limit names are printable ASCII without '"' or '\\': valid
            // structured-field strings as they are.
            push_str(&mut field, &["\"", limit.name(), "\";q="]);
            push_u64(&mut field, u64::from(limit.capacity()));
            field.extend_from_slice(b";w=");
            push_u64(
                &mut field,
                ceil_secs(limit.quota().window().as_micros() as u64),
            );
        }
        let members = |limit: &Limit| {
            let mut body = br#""limit":"#.to_vec();
            push_u64(&mut body, u64::from(limit.capacity()));
            body.extend_from_slice(br#","window":""#);
            body.extend_from_slice(
                compact_window(limit.quota().window().as_micros() as u64).as_bytes(),
            );
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

/// Append `n` in decimal, without the formatting machinery.
pub(crate) fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
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
    fn windows_are_compact() {
        assert_eq!(compact_window(60_000_000), "1m");
        assert_eq!(compact_window(300_000_000), "5m");
        assert_eq!(compact_window(1_500_000), "1500ms");
        assert_eq!(compact_window(86_400_000_000), "1d");
    }
}
