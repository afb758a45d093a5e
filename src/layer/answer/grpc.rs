//! The limiter's own answers to gRPC requests: gRPC statuses, not HTTP
//! error codes with JSON bodies.
//!
//! A request whose `content-type` is `application/grpc` (or
//! `application/grpc+proto`, ...) gets, instead of a 429, 503, 403 or 400, a
//! *trailers-only* gRPC response: HTTP 200, `grpc-status`, `grpc-message`,
//! and no body. A limited call gets status 8 (`RESOURCE_EXHAUSTED`) and
//! `grpc-retry-pushback-ms`, the retry hint gRPC clients read; the quota
//! headers and `retry-after` stay as metadata. Keys can come from metadata
//! like any header (`Header::new("x-tenant")`).

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

/// Whether the request is a gRPC call.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC status for the limiter's HTTP answer.
fn status_of(status: StatusCode) -> (u16, &'static str) {
    match status {
        StatusCode::TOO_MANY_REQUESTS => (8, "rate limit exceeded"),
        StatusCode::SERVICE_UNAVAILABLE => (14, "the rate limiter cannot decide at the moment"),
        StatusCode::FORBIDDEN => (7, "this client may not use the service"),
        StatusCode::UNAUTHORIZED => (16, "no rate limit key"),
        StatusCode::BAD_REQUEST => (3, "no rate limit key"),
        StatusCode::INTERNAL_SERVER_ERROR => (13, "no rate limit policy for this call"),
        _ => (2, "refused by the rate limiter"),
    }
}

/// `response`, the limiter's own answer, as a trailers-only gRPC response.
pub(crate) fn refusal(response: Response<Bytes>) -> Response<Bytes> {
    let (mut parts, _) = response.into_parts();
    let (code, message) = status_of(parts.status);
    let retry_ms = parts
        .headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map(|secs| secs.saturating_mul(1000));
    parts.status = StatusCode::OK;
    let headers = &mut parts.headers;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.remove(CONTENT_LENGTH);
    headers.insert("grpc-status", HeaderValue::from(code));
    let message = match retry_ms {
        Some(ms) => format!("{message}; retry in {} s", ms / 1000),
        None => message.to_owned(),
    };
    // Plain ASCII without '%': valid as a grpc-message as it is.
    if let Ok(message) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", message);
    }
    if let Some(ms) = retry_ms {
        headers.insert("grpc-retry-pushback-ms", HeaderValue::from(ms));
    }
    Response::from_parts(parts, Bytes::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_becomes_resource_exhausted_with_a_pushback() {
        let mut limited = Response::new(Bytes::from_static(b"{\"error\":\"rate_limit_exceeded\"}"));
        *limited.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        limited
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(12));
        limited
            .headers_mut()
            .insert("x-ratelimit-remaining", HeaderValue::from(0));
        let grpc = refusal(limited);
        assert_eq!(grpc.status(), 200);
        assert_eq!(grpc.headers()["grpc-status"], "8");
        assert_eq!(grpc.headers()["grpc-retry-pushback-ms"], "12000");
        assert_eq!(
            grpc.headers()["grpc-message"],
            "rate limit exceeded; retry in 12 s"
        );
        assert_eq!(grpc.headers()["x-ratelimit-remaining"], "0");
        assert_eq!(grpc.headers()[CONTENT_TYPE], "application/grpc");
        assert!(grpc.body().is_empty());
    }

    #[test]
    fn a_call_without_a_policy_is_internal() {
        let grpc = refusal(super::super::response::no_policy());
        assert_eq!(grpc.headers()["grpc-status"], "13");
        assert_eq!(
            grpc.headers()["grpc-message"],
            "no rate limit policy for this call"
        );
    }
}
