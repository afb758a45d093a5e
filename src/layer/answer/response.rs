//! The limiter's own answers: the 429 to a limited request, the 400 to a
//! request without a key, the answer when the backend fails.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use super::headers::{self, HeaderStyle, Theirs};
use super::rendered::Rendered;
use crate::key::{Key, KeyError, RequestHead};
use crate::{algorithm::Verdict, clock::Micros, Decision, Policy};

/// A function that renders the response to a limited request.
pub type LimitedFn = dyn Fn(&Refused<'_>) -> Response<Bytes> + Send + Sync;

/// What a custom refusal ([`LimitedResponse::custom`]) is told: the
/// decision, the policy, the key the request was counted against, and the
/// request's head.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Refused<'a> {
    /// What the policy said.
    pub decision: &'a Decision,
    /// The policy that refused the request.
    pub policy: &'a Policy,
    /// Who the request was counted against (redact it before logging:
    /// [`Key::redacted`]).
    pub key: &'a Key,
    /// The refused request's method, target, headers and extensions.
    pub request: &'a RequestHead<'a>,
}

impl Refused<'_> {
    /// The name of the limit that refused the request (`penalty-box` for a
    /// ban).
    pub fn limit_name(&self) -> &str {
        if self.decision.is_banned() {
            return "penalty-box";
        }
        self.policy
            .limits()
            .get(self.decision.decided_by())
            .map_or("", |limit| limit.name())
    }
}

/// How a limited request is answered.
///
/// By default a 429 with a JSON body:
///
/// ```json
/// {"error":"rate_limit_exceeded","limit":100,"window":"1m","retry_after_seconds":12}
/// ```
///
/// or, with [`LimitedResponse::ProblemJson`], an RFC 9457
/// `application/problem+json` document with the same members. A request
/// whose cost can never fit says `"error":"cost_exceeds_limit"` with
/// `"retry_after_seconds":null`. [`LimitedResponse::custom`] replaces the
/// body (the quota headers and `Retry-After` are still added; legacy
/// `X-RateLimit-*` headers it sets itself stand unless ours show fewer
/// remaining, the rule for nested layers).
///
/// ```
/// use tower_ratelimit::layer::LimitedResponse;
///
/// // Plain text, naming the limit and the path.
/// let plain = LimitedResponse::custom(|refused| {
///     let text = format!("{} is limited by {}", refused.request.uri.path(), refused.limit_name());
///     http::Response::builder()
///         .status(429)
///         .body(bytes::Bytes::from(text))
///         .unwrap()
/// });
/// ```
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
    /// Answer limited requests with `f`, which sees what refused them
    /// ([`Refused`]).
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&Refused<'_>) -> Response<Bytes> + Send + Sync + 'static,
    {
        Self::Custom(Arc::new(f))
    }

    fn render(&self, refused: &Refused<'_>) -> Response<Bytes> {
        let (decision, policy) = (refused.decision, refused.policy);
        let problem = match self {
            Self::Custom(f) => return f(refused),
            Self::Json => false,
            Self::ProblemJson => true,
        };
        let rendered = Rendered::of(policy);
        let part = |parts: fn(&Rendered) -> &[Bytes]| {
            rendered
                .and_then(|r| parts(r).get(decision.decided_by()))
                .map_or(&[][..], |part| &part[..])
        };
        let (error, retry) = match decision.verdict() {
            Verdict::Never => ("cost_exceeds_limit", None),
            Verdict::RetryAfter(after) => ("rate_limit_exceeded", Some(after.as_secs_ceil())),
            Verdict::Allowed => ("rate_limit_exceeded", Some(1)),
        };
        let mut digits = itoa::Buffer::new();
        let retry = retry.map_or(&b"null"[..], |secs| digits.format(secs).as_bytes());
        let opening = if problem {
            part(|r| &r.problem_members)
        } else {
            &[]
        };
        let pieces: [&[u8]; 6] = [
            opening,
            br#""error":""#,
            error.as_bytes(),
            b"\",",
            part(|r| &r.body_members),
            retry,
        ];
        // Exactly as long as the body: a buffer with no spare room becomes
        // `Bytes` without a second allocation for its reference count.
        let mut body = Vec::with_capacity(2 + pieces.iter().map(|p| p.len()).sum::<usize>());
        body.push(b'{');
        for piece in pieces {
            body.extend_from_slice(piece);
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

impl LimitedResponse {
    /// The answer to a denied request: the 429 (or custom answer), its quota
    /// headers in `style`, and `Retry-After` with up to `jitter` added.
    pub(crate) fn respond(
        &self,
        refused: &Refused<'_>,
        style: HeaderStyle,
        jitter: Micros,
    ) -> Response<Bytes> {
        let (decision, policy) = (refused.decision, refused.policy);
        let mut response = self.render(refused);
        let theirs = match self {
            Self::Custom(_) => Theirs::Maybe,
            Self::Json | Self::ProblemJson => Theirs::None,
        };
        headers::write_refusal(
            response.headers_mut(),
            style,
            policy,
            decision,
            jitter,
            theirs,
        );
        response
    }
}

#[cfg(feature = "content-bytes")]
/// The answer to a request body larger than `policy`'s limits in bytes can
/// ever hold.
pub(crate) fn payload_too_large(policy: &Policy) -> Response<Bytes> {
    let capacity = policy
        .limits()
        .iter()
        .map(crate::Limit::capacity)
        .min()
        .unwrap_or(0);
    // Limit names are printable ASCII without '"' or '\\'.
    let name = policy.limits().first().map_or("", |l| l.name());
    let body = format!(
        r#"{{"error":"payload_too_large","detail":"the body is larger than the {capacity} bytes the limit \"{name}\" holds"}}"#
    );
    json(StatusCode::PAYLOAD_TOO_LARGE, false, Bytes::from(body))
}

/// The answer when no key could be derived and the layer rejects such requests.
pub(crate) fn key_error(status: StatusCode, error: &KeyError) -> Response<Bytes> {
    // KeyError's text is fixed phrases and configured header names, free
    // of '"' and '\\': nothing from the client.
    let body = format!(r#"{{"error":"rate_limit_key_missing","detail":"{error}"}}"#);
    json(status, false, Bytes::from(body))
}

/// The answer to a request no policy was found for, when the layer refuses
/// such requests ([`NoPolicy::Refuse`](super::NoPolicy::Refuse)).
pub(crate) fn no_policy() -> Response<Bytes> {
    let body = concat!(
        r#"{"title":"Internal Server Error","status":500,"#,
        r#""detail":"The rate limiter found no policy for this request; the server's configuration must give it one or let it through unlimited.","#,
        r#""error":"rate_limit_no_policy"}"#
    );
    json(
        StatusCode::INTERNAL_SERVER_ERROR,
        true,
        Bytes::from_static(body.as_bytes()),
    )
}

/// The answer when the backend failed and the layer fails closed: a 503,
/// not a 429 — the client exceeded nothing; the service is short of a part.
/// The problem type is the one the IETF RateLimit draft defines for it.
pub(crate) fn unavailable() -> Response<Bytes> {
    let body = concat!(
        r#"{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","#,
        r#""title":"Service Unavailable","status":503,"#,
        r#""detail":"The rate limiter cannot decide at the moment.","#,
        r#""error":"rate_limit_unavailable","retry_after_seconds":1}"#
    );
    let mut response = json(
        StatusCode::SERVICE_UNAVAILABLE,
        true,
        Bytes::from_static(body.as_bytes()),
    );
    // The body's constant second, as its header.
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The answer to a client on a deny list ([`AccessLists`](crate::layer::AccessLists)).
pub(crate) fn forbidden() -> Response<Bytes> {
    let body = concat!(
        r#"{"title":"Forbidden","status":403,"#,
        r#""detail":"This client may not use the service.","error":"client_denied"}"#
    );
    json(
        StatusCode::FORBIDDEN,
        true,
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
