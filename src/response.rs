//! The response a limited request gets.
//!
//! By default a 429 with a JSON body:
//!
//! ```json
//! {"error":"rate_limit_exceeded","limit":100,"window":"1m","retry_after_seconds":12}
//! ```
//!
//! or, with [`LimitedResponse::ProblemJson`], an RFC 9457
//! `application/problem+json` document with the same members. A request
//! whose cost can never fit says `"error":"cost_exceeds_limit"` with
//! `"retry_after_seconds":null`. [`LimitedResponse::custom`] replaces the
//! body (the quota headers are still added).
//!
//! ```
//! use tower_ratelimit::LimitedResponse;
//! let plain = LimitedResponse::custom(|_decision, _policy| {
//!     http::Response::builder()
//!         .status(429)
//!         .body(bytes::Bytes::from_static(b"slow down"))
//!         .unwrap()
//! });
//! ```

use std::fmt::{self, Write};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use crate::algorithm::Verdict;
use crate::headers::ceil_secs;
use crate::key::KeyError;
use crate::{Decision, Policy};

/// A function that renders the response to a limited request.
pub type LimitedFn = dyn Fn(&Decision, &Policy) -> Response<Bytes> + Send + Sync;

/// How a limited request is answered.
#[derive(Clone, Default)]
pub enum LimitedResponse {
    /// 429, `application/json` (the default).
    #[default]
    Json,
    /// 429, `application/problem+json` (RFC 9457).
    ProblemJson,
    /// Whatever the function returns.
    Custom(Arc<LimitedFn>),
}

impl LimitedResponse {
    /// Answer limited requests with `f`.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&Decision, &Policy) -> Response<Bytes> + Send + Sync + 'static,
    {
        Self::Custom(Arc::new(f))
    }

    pub(crate) fn render(&self, decision: &Decision, policy: &Policy) -> Response<Bytes> {
        let problem = match self {
            Self::Custom(f) => return f(decision, policy),
            Self::Json => false,
            Self::ProblemJson => true,
        };
        let limit = policy.limits().get(decision.decided_by());
        let outcome = decision.deciding();
        let (error, retry) = match decision.verdict() {
            Verdict::Never => ("cost_exceeds_limit", None),
            Verdict::RetryAfter(us) => ("rate_limit_exceeded", Some(ceil_secs(us.get()))),
            Verdict::Allowed => ("rate_limit_exceeded", Some(1)),
        };
        let mut body = String::with_capacity(160);
        body.push('{');
        if problem {
            let name = limit.map_or("", |l| l.name());
            let _ = write!(
                body,
                r#""type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit \"{name}\" exceeded","#
            );
        }
        let _ = write!(body, r#""error":"{error}","limit":{}"#, outcome.limit());
        if let Some(limit) = limit {
            let _ = write!(
                body,
                r#","window":"{}""#,
                Compact(limit.quota().window_us())
            );
        }
        match retry {
            Some(secs) => {
                let _ = write!(body, r#","retry_after_seconds":{secs}}}"#);
            }
            None => body.push_str(r#","retry_after_seconds":null}"#),
        }
        json(StatusCode::TOO_MANY_REQUESTS, problem, body)
    }
}

impl fmt::Debug for LimitedResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json => f.write_str("Json"),
            Self::ProblemJson => f.write_str("ProblemJson"),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// A window as `1s`, `1m`, `5m`, `1h`, `1d`, `1500ms`: the largest unit that divides it.
struct Compact(u64);

impl fmt::Display for Compact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 6] = [
            (86_400_000_000, "d"),
            (3_600_000_000, "h"),
            (60_000_000, "m"),
            (1_000_000, "s"),
            (1_000, "ms"),
            (1, "us"),
        ];
        let (size, unit) = UNITS
            .into_iter()
            .find(|(size, _)| self.0 % size == 0)
            .unwrap_or((1, "us"));
        write!(f, "{}{unit}", self.0 / size)
    }
}

/// The answer when no key could be derived and the layer rejects such requests.
pub(crate) fn key_error(status: StatusCode, error: &KeyError) -> Response<Bytes> {
    // KeyError's text is made of fixed phrases: nothing from the client.
    let body = format!(r#"{{"error":"rate_limit_key_missing","detail":"{error}"}}"#);
    json(status, false, body)
}

/// The answer when the backend failed and the layer fails closed.
pub(crate) fn unavailable() -> Response<Bytes> {
    let body = r#"{"error":"rate_limit_unavailable","retry_after_seconds":1}"#.to_owned();
    json(StatusCode::TOO_MANY_REQUESTS, false, body)
}

fn json(status: StatusCode, problem: bool, body: String) -> Response<Bytes> {
    let content_type = if problem {
        "application/problem+json"
    } else {
        "application/json"
    };
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
