//! [`BodyKind`]: which body a layer answers with — its own [`ResponseBody`]
//! around any inner body ([`OwnBody`]), or axum's `Body` ([`AxumBody`]).

use super::body::ResponseBody;
use super::permit::Held;

/// Which body a layer's responses carry, given the inner service's body `B`.
///
/// Sealed: [`OwnBody`] (the default) or `AxumBody` (feature `axum`).
pub trait BodyKind<B>: sealed::Sealed {
    /// The body of the layer's responses.
    type Body;

    /// The layer's response body in this kind.
    #[doc(hidden)]
    fn body(body: ResponseBody<B>) -> Self::Body;

    /// The inner service's `response`, its body holding `permit` until
    /// it ends.
    #[doc(hidden)]
    #[inline(always)]
    fn served(response: http::Response<B>, permit: Option<Held>) -> http::Response<Self::Body> {
        response.map(|b| Self::body(ResponseBody::holding(b, permit)))
    }
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

    #[inline(always)]
    fn served(
        response: http::Response<B>,
        permit: Option<Held>,
    ) -> http::Response<axum::body::Body> {
        // An axum response with nothing riding on its body (the commonest)
        // is passed on whole, not taken apart and put together again.
        let mut slot = Some(response);
        if permit.is_none() {
            let any: &mut dyn std::any::Any = &mut slot;
            let same = any.downcast_mut::<Option<http::Response<axum::body::Body>>>();
            if let Some(response) = same.and_then(Option::take) {
                return response;
            }
        }
        let response = slot.expect("taken only when passed on whole");
        response.map(|b| Self::body(ResponseBody::holding(b, permit)))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::OwnBody {}
    #[cfg(feature = "axum")]
    impl Sealed for super::AxumBody {}
}
