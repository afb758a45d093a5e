//! [`BodyKind`]: which body a layer answers with — its own [`ResponseBody`]
//! around any inner body ([`OwnBody`]), or axum's `Body` ([`AxumBody`]).

use super::body::ResponseBody;

/// Which body a layer's responses carry, given the inner service's body `B`.
///
/// Sealed: [`OwnBody`] (the default) or `AxumBody` (feature `axum`).
pub trait BodyKind<B>: sealed::Sealed {
    /// The body of the layer's responses.
    type Body;

    /// The layer's response body in this kind.
    #[doc(hidden)]
    fn body(body: ResponseBody<B>) -> Self::Body;
}

/// Responses carry [`ResponseBody`]: the inner service's body, or the
/// limiter's own, and a permit of requests in flight until it ends. Works
/// with any inner body (hyper, tonic, axum).
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnBody;

impl<B> BodyKind<B> for OwnBody {
    type Body = ResponseBody<B>;

    #[inline(always)]
    fn body(body: ResponseBody<B>) -> ResponseBody<B> {
        body
    }
}

/// Responses carry axum's own `Body` (see
/// [`RateLimitLayer::axum_body`](crate::RateLimitLayer::axum_body)): an
/// inner axum body is passed on as it is, unless a permit of requests in
/// flight must ride with it, so axum does not box it again.
#[cfg(feature = "axum")]
#[derive(Clone, Copy, Debug, Default)]
pub struct AxumBody;

#[cfg(feature = "axum")]
impl<B> BodyKind<B> for AxumBody
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Body = axum::body::Body;

    #[inline(always)]
    fn body(body: ResponseBody<B>) -> axum::body::Body {
        // `Body::new` of an axum body is that body (no allocation); any
        // other is boxed, as axum would box it.
        match body.into_plain() {
            Ok(inner) => axum::body::Body::new(inner),
            Err(body) => axum::body::Body::new(body),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::OwnBody {}
    #[cfg(feature = "axum")]
    impl Sealed for super::AxumBody {}
}
