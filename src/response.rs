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

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use crate::algorithm::Verdict;
use crate::headers::ceil_secs;
use crate::key::KeyError;
use crate::render::push_u64;
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
        let rendered = policy.rendered();
        let part = |parts: &[Bytes]| {
            parts
                .get(decision.decided_by())
                .cloned()
                .unwrap_or_default()
        };
        let (error, retry) = match decision.verdict() {
            Verdict::Never => ("cost_exceeds_limit", None),
            Verdict::RetryAfter(us) => ("rate_limit_exceeded", Some(ceil_secs(us.get()))),
            Verdict::Allowed => ("rate_limit_exceeded", Some(1)),
        };
        let members = part(&rendered.body_members);
        let mut body = Vec::with_capacity(160);
        body.push(b'{');
        if problem {
            body.extend_from_slice(&part(&rendered.problem_members));
        }
        body.extend_from_slice(br#""error":""#);
        body.extend_from_slice(error.as_bytes());
        body.extend_from_slice(b"\",");
        body.extend_from_slice(&members);
        match retry {
            Some(secs) => push_u64(&mut body, secs),
            None => body.extend_from_slice(b"null"),
        }
        body.push(b'}');
        json(StatusCode::TOO_MANY_REQUESTS, problem, Bytes::from(body))
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

/// The answer when no key could be derived and the layer rejects such requests.
pub(crate) fn key_error(status: StatusCode, error: &KeyError) -> Response<Bytes> {
    // KeyError's text is made of fixed phrases: nothing from the client.
    let body = format!(r#"{{"error":"rate_limit_key_missing","detail":"{error}"}}"#);
    json(status, false, Bytes::from(body))
}

/// The answer when the backend failed and the layer fails closed.
pub(crate) fn unavailable() -> Response<Bytes> {
    let body = r#"{"error":"rate_limit_unavailable","retry_after_seconds":1}"#;
    json(
        StatusCode::TOO_MANY_REQUESTS,
        false,
        Bytes::from_static(body.as_bytes()),
    )
}

fn json(status: StatusCode, problem: bool, body: Bytes) -> Response<Bytes> {
    let content_type = if problem {
        "application/problem+json"
    } else {
        "application/json"
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    // Content type, five quota headers and Retry-After, in one allocation.
    let headers = response.headers_mut();
    headers.reserve(8);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
